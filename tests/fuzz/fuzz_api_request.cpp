// libFuzzer target: the request path of `hillinfer serve` (server/api_request.h). Any body turns into a
// valid request or a 4xx error whose JSON body parses back; a crash, sanitizer report or escaping
// exception is a bug. Build with the `fuzz` preset (clang); see tests/engine.cmake.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "server/api_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    using namespace hill::server;
    const std::string_view body(reinterpret_cast<const char *>(data), size);
    for (const api_kind kind : {api_kind::completion, api_kind::chat}) {
        const auto r = parse_api_request(body, kind);
        if (const auto * e = std::get_if<api_error>(&r)) {
            if (e->status < 400 || e->status >= 500 || e->message.empty()) std::abort();
            const auto j = nlohmann::json::parse(error_body(*e));  // throws (a finding) when not valid JSON
            if (!j.at("error").at("message").is_string()) std::abort();
        } else {
            const api_request & a = std::get<api_request>(r);
            if (kind == api_kind::chat && (a.messages.empty() || a.messages.back().role == "assistant")) std::abort();
            if (a.max_tokens && *a.max_tokens < 0) std::abort();
            if (!(a.temperature >= 0 && a.temperature <= 2 && a.top_p > 0 && a.top_p <= 1)) std::abort();
            if (a.stop.size() > 4) std::abort();
            for (const auto & s : a.stop) {
                if (s.empty()) std::abort();
            }
        }
    }
    const size_t n = utf8_complete_prefix(body);
    if (n > size || size - n > 3) std::abort();
    return 0;
}
