#include "server/api_request.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "format/json_file.h"

namespace hill::server {

using json = nlohmann::json;

std::string error_body(const api_error & e) {
    const json j = {{"error",
                     {{"message", e.message},
                      {"type", e.type},
                      {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                      {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

struct bad_field {
    api_error e;
};

[[noreturn]] void fail(const std::string & param, const std::string & message) {
    throw bad_field{api_error{400, message, "invalid_request_error", param, "invalid_value"}};
}

const char * type_name(const json & v) {
    return v.type_name();
}

std::string get_string(const json & v, const std::string & param) {
    if (!v.is_string()) fail(param, fmt::format("'{}' must be a string, got {}", param, type_name(v)));
    return v.get<std::string>();
}

float get_number(const json & v, const std::string & param, double lo, double hi, bool lo_open) {
    if (!v.is_number()) fail(param, fmt::format("'{}' must be a number, got {}", param, type_name(v)));
    const double x = v.get<double>();
    if (!std::isfinite(x) || (lo_open ? x <= lo : x < lo) || x > hi) {
        fail(param, fmt::format("'{}' must be in {}{}, {}], got {}", param, lo_open ? "(" : "[", lo, hi, v.dump()));
    }
    return float(x);
}

// The text of a message's content: a string, or an array of {type: "text", text} parts, concatenated.
std::string content_text(const json & c, const std::string & param) {
    if (c.is_string()) return c.get<std::string>();
    if (!c.is_array())
        fail(param, fmt::format("'{}' must be a string or an array of text parts, got {}", param, type_name(c)));
    std::string text;
    for (size_t i = 0; i < c.size(); ++i) {
        const std::string p = fmt::format("{}[{}]", param, i);
        const json & part = c[i];
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text")) {
            fail(p, fmt::format(
                        "'{}' must be a text part {{\"type\": \"text\", \"text\": ...}} (only text is supported)", p));
        }
        text += get_string(part["text"], p + ".text");
    }
    return text;
}

api_request parse(std::string_view body, api_kind kind) {
    if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
        fail("", "the request body is empty; expected a JSON object");
    }
    json j;
    try {
        j = json_parse(body);
    } catch (const json::exception & e) {
        throw bad_field{api_error{400, fmt::format("the request body is not valid JSON: {}", json_plain_message(e)),
                                  "invalid_request_error", "", "invalid_json"}};
    }
    if (!j.is_object()) fail("", fmt::format("the request body must be a JSON object, got {}", type_name(j)));
    api_request r;
    r.kind = kind;
    if (const auto it = j.find("model"); it != j.end() && !it->is_null()) r.model = get_string(*it, "model");
    if (kind == api_kind::completion) {
        const auto it = j.find("prompt");
        if (it == j.end()) fail("prompt", "'prompt' is required (a string)");
        if (it->is_array()) {
            if (it->size() != 1)
                fail("prompt", fmt::format("'prompt' must be a string or an array of one string, got an array of {}",
                                           it->size()));
            r.prompt = get_string((*it)[0], "prompt[0]");
        } else {
            r.prompt = get_string(*it, "prompt");
        }
    } else {
        const auto it = j.find("messages");
        if (it == j.end()) fail("messages", "'messages' is required (an array of {role, content})");
        if (!it->is_array() || it->empty()) fail("messages", "'messages' must be a non-empty array of {role, content}");
        for (size_t i = 0; i < it->size(); ++i) {
            const std::string p = fmt::format("messages[{}]", i);
            const json & m = (*it)[i];
            if (!m.is_object())
                fail(p, fmt::format("'{}' must be an object {{role, content}}, got {}", p, type_name(m)));
            if (!m.contains("role")) fail(p + ".role", fmt::format("'{}.role' is required", p));
            std::string role = get_string(m["role"], p + ".role");
            if (role == "developer") role = "system";
            if (role != "system" && role != "user" && role != "assistant") {
                fail(p + ".role",
                     fmt::format("'{}.role' must be system, developer, user or assistant, got '{}'", p, role));
            }
            if (role == "system" && i != 0) fail(p + ".role", fmt::format("'{}': a system message must come first", p));
            if (!m.contains("content")) fail(p + ".content", fmt::format("'{}.content' is required", p));
            r.messages.push_back({role, content_text(m["content"], p + ".content")});
        }
        if (r.messages.back().role == "assistant") {
            fail("messages", "the last message must be from the user (or the system), not the assistant");
        }
    }
    for (const char * name : {"max_tokens", "max_completion_tokens"}) {
        if (kind == api_kind::completion && std::string_view(name) == "max_completion_tokens") continue;
        const auto it = j.find(name);
        if (it == j.end() || it->is_null()) continue;
        if (!it->is_number_integer()) fail(name, fmt::format("'{}' must be an integer, got {}", name, it->dump()));
        if (it->is_number_unsigned() ? it->get<uint64_t>() > uint64_t(INT64_MAX) : it->get<int64_t>() < 0) {
            fail(name, fmt::format("'{}' must be an integer >= 0 and at most the context, got {}", name, it->dump()));
        }
        r.max_tokens = it->get<int64_t>();
    }
    if (const auto it = j.find("temperature"); it != j.end() && !it->is_null())
        r.temperature = get_number(*it, "temperature", 0, 2, false);
    if (const auto it = j.find("top_p"); it != j.end() && !it->is_null())
        r.top_p = get_number(*it, "top_p", 0, 1, true);
    if (const auto it = j.find("seed"); it != j.end() && !it->is_null()) {
        if (!it->is_number_integer() || (!it->is_number_unsigned() && it->get<int64_t>() < 0)) {
            fail("seed", fmt::format("'seed' must be an integer >= 0, got {}", it->dump()));
        }
        r.seed = it->get<uint64_t>();
    }
    if (const auto it = j.find("n"); it != j.end() && !it->is_null()) {
        if (!it->is_number_integer() || it->get<int64_t>() != 1) {
            fail("n", fmt::format("'n' must be 1 (one choice per request), got {}", it->dump()));
        }
    }
    if (const auto it = j.find("stop"); it != j.end() && !it->is_null()) {
        if (it->is_string()) {
            r.stop.push_back(it->get<std::string>());
        } else if (it->is_array() && it->size() <= 4) {
            for (size_t i = 0; i < it->size(); ++i) r.stop.push_back(get_string((*it)[i], fmt::format("stop[{}]", i)));
        } else {
            fail("stop",
                 fmt::format("'stop' must be a string or an array of at most 4 strings, got {}", type_name(*it)));
        }
        for (const std::string & s : r.stop) {
            if (s.empty()) fail("stop", "'stop' strings must not be empty");
        }
    }
    if (const auto it = j.find("stream"); it != j.end() && !it->is_null()) {
        if (!it->is_boolean()) fail("stream", fmt::format("'stream' must be a boolean, got {}", type_name(*it)));
        r.stream = it->get<bool>();
    }
    if (const auto it = j.find("stream_options"); it != j.end() && !it->is_null()) {
        if (!it->is_object())
            fail("stream_options", fmt::format("'stream_options' must be an object, got {}", type_name(*it)));
        if (const auto u = it->find("include_usage"); u != it->end() && !u->is_null()) {
            if (!u->is_boolean())
                fail("stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
            r.include_usage = u->get<bool>();
        }
    }
    return r;
}

}  // namespace

std::variant<api_request, api_error> parse_api_request(std::string_view body, api_kind kind) {
    try {
        return parse(body, kind);
    } catch (const bad_field & b) {
        return b.e;
    }
}

size_t utf8_complete_prefix(std::string_view text) {
    // Look back at most 3 bytes for the lead byte of a sequence that is not complete.
    const size_t n = text.size();
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        const auto c = static_cast<unsigned char>(text[n - back]);
        if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
        const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return len > back ? n - back : n;
    }
    return n;
}

}  // namespace hill::server
