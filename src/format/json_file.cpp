#include "format/json_file.h"

#include "core/error.h"
#include "core/mapped_file.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace hill {

nlohmann::json number_or_null(double x) {
    return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

namespace {

// What get<T>() expects, for messages.
template <class T>
constexpr const char * expected_of() {
    if constexpr (std::is_same_v<T, bool>) {
        return "true or false";
    } else if constexpr (std::is_same_v<T, int64_t>) {
        return "an integer";
    } else if constexpr (std::is_same_v<T, double>) {
        return "a number";
    } else if constexpr (std::is_same_v<T, std::string>) {
        return "a string";
    } else {
        static_assert(std::is_same_v<T, std::vector<std::string>>, "json_value: unsupported type");
        return "an array of strings";
    }
}

// A JSON integer, or a float with an integral value; nullopt for anything else or out of int64 range.
std::optional<int64_t> as_integer(const nlohmann::json & v) {
    if (v.is_number_unsigned()) {
        if (v.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max())) return v.get<int64_t>();
    } else if (v.is_number_integer()) {
        return v.get<int64_t>();
    } else if (v.is_number_float()) {
        // |f| < 9e18 < 2^63: the integral float converts without overflow.
        const double f = v.get<double>();
        if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 9.0e18) return int64_t(f);
    }
    return std::nullopt;
}

// A JSON Pointer reference token with "~1" -> '/' and "~0" -> '~' (RFC 6901 §4).
std::string unescape(std::string_view token) {
    std::string out;
    out.reserve(token.size());
    for (size_t i = 0; i < token.size(); ++i) {
        if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
            out.push_back(token[i + 1] == '1' ? '/' : '~');
            ++i;
        } else {
            out.push_back(token[i]);
        }
    }
    return out;
}

// "/" + key with '~' -> "~0" and '/' -> "~1".
std::string escape_token(std::string_view key) {
    std::string out = "/";
    out.reserve(key.size() + 1);
    for (const char ch : key) {
        if (ch == '~') {
            out += "~0";
        } else if (ch == '/') {
            out += "~1";
        } else {
            out.push_back(ch);
        }
    }
    return out;
}

}  // namespace

// --- json_value ---------------------------------------------------------------------------------

std::string json_value::where() const {
    return pointer_.empty() ? *name_ : *name_ + ": " + pointer_;
}

void json_value::fail_expected(std::string_view expected) const {
    fail_input("{}: expected {}, got {}", where(), expected, json_describe(*value_));
}

std::optional<json_value> json_value::find(std::string_view pointer) const {
    HILL_ASSERT(pointer.starts_with('/') && "a JSON Pointer relative to this value starts with '/'");
    const nlohmann::json * cur = value_;
    size_t pos = 0;  // pointer[pos] is the '/' before the next reference token
    while (pos < pointer.size()) {
        const size_t end = std::min(pointer.find('/', pos + 1), pointer.size());
        if (!cur->is_object()) {
            const json_value on_the_way(name_, cur, pointer_ + std::string(pointer.substr(0, pos)));
            fail_input("{}: expected an object (to look up {}{}), got {}", on_the_way.where(), pointer_, pointer,
                       json_describe(*cur));
        }
        const auto it = cur->find(unescape(pointer.substr(pos + 1, end - pos - 1)));
        if (it == cur->end() || it->is_null()) return std::nullopt;
        cur = &*it;
        pos = end;
    }
    return json_value(name_, cur, pointer_ + std::string(pointer));
}

json_value json_value::at(std::string_view pointer, std::string_view expected) const {
    std::optional<json_value> v = find(pointer);
    if (!v) fail_input("{}: {}{}: missing key, expected {}", *name_, pointer_, pointer, expected);
    return std::move(*v);
}

template <class T>
T json_value::required(std::string_view pointer) const {
    return at(pointer, expected_of<T>()).template get<T>();
}

template <class T>
std::optional<T> json_value::optional(std::string_view pointer) const {
    const std::optional<json_value> v = find(pointer);
    if (!v) return std::nullopt;
    return v->template get<T>();
}

int64_t json_value::required_int(std::string_view pointer, int64_t lo, int64_t hi) const {
    return at(pointer, fmt::format("an integer in [{}, {}]", lo, hi)).get_int(lo, hi);
}

std::optional<int64_t> json_value::optional_int(std::string_view pointer, int64_t lo, int64_t hi) const {
    const std::optional<json_value> v = find(pointer);
    if (!v) return std::nullopt;
    return v->get_int(lo, hi);
}

void json_value::require_object() const {
    if (!value_->is_object()) fail_expected("an object");
}

void json_value::for_each_member(
    const std::function<void(const std::string & key, const json_value & member)> & f) const {
    require_object();
    for (auto it = value_->begin(); it != value_->end(); ++it) {
        f(it.key(), json_value(name_, &it.value(), pointer_ + escape_token(it.key())));
    }
}

size_t json_value::size() const {
    if (!value_->is_array()) fail_expected("an array");
    return value_->size();
}

json_value json_value::item(size_t i) const {
    HILL_ASSERT(i < size());
    return json_value(name_, &(*value_)[i], pointer_ + "/" + std::to_string(i));
}

template <class T>
T json_value::get() const {
    const nlohmann::json & v = *value_;
    if constexpr (std::is_same_v<T, bool>) {
        if (!v.is_boolean()) fail_expected(expected_of<T>());
        return v.get<bool>();
    } else if constexpr (std::is_same_v<T, int64_t>) {
        const std::optional<int64_t> n = as_integer(v);
        if (!n) fail_expected(expected_of<T>());
        return *n;
    } else if constexpr (std::is_same_v<T, double>) {
        if (!v.is_number()) fail_expected(expected_of<T>());
        return v.get<double>();
    } else if constexpr (std::is_same_v<T, std::string>) {
        if (!v.is_string()) fail_expected(expected_of<T>());
        return v.get<std::string>();
    } else {
        if (!v.is_array()) fail_expected(expected_of<T>());
        std::vector<std::string> out;
        out.reserve(v.size());
        for (size_t i = 0; i < v.size(); ++i) out.push_back(item(i).template get<std::string>());
        return out;
    }
}

int64_t json_value::get_int(int64_t lo, int64_t hi) const {
    HILL_ASSERT(lo <= hi);
    const std::optional<int64_t> n = as_integer(*value_);
    if (!n || *n < lo || *n > hi) fail_expected(fmt::format("an integer in [{}, {}]", lo, hi));
    return *n;
}

template bool json_value::get<bool>() const;
template int64_t json_value::get<int64_t>() const;
template double json_value::get<double>() const;
template std::string json_value::get<std::string>() const;
template std::vector<std::string> json_value::get<std::vector<std::string>>() const;
template bool json_value::required<bool>(std::string_view) const;
template int64_t json_value::required<int64_t>(std::string_view) const;
template double json_value::required<double>(std::string_view) const;
template std::string json_value::required<std::string>(std::string_view) const;
template std::vector<std::string> json_value::required<std::vector<std::string>>(std::string_view) const;
template std::optional<bool> json_value::optional<bool>(std::string_view) const;
template std::optional<int64_t> json_value::optional<int64_t>(std::string_view) const;
template std::optional<double> json_value::optional<double>(std::string_view) const;
template std::optional<std::string> json_value::optional<std::string>(std::string_view) const;
template std::optional<std::vector<std::string>> json_value::optional<std::vector<std::string>>(std::string_view) const;

// --- json_file ----------------------------------------------------------------------------------

struct json_file::document {
    std::string name;
    nlohmann::json root;
};

json_file::json_file(std::unique_ptr<document> doc) : doc_(std::move(doc)) {}
json_file::json_file(json_file && o) noexcept = default;
json_file & json_file::operator=(json_file && o) noexcept = default;
json_file::~json_file() = default;

const std::string & json_file::name() const {
    return doc_->name;
}

json_value json_file::root() const {
    return json_value(&doc_->name, &doc_->root, std::string());
}

json_file json_file::load(const std::string & path, std::string_view what) {
    require_regular_file(path, std::string(what).c_str());
    const mapped_file map(path);
    return parse(std::string_view(reinterpret_cast<const char *>(map.data()), map.size()), path, what);
}

json_file json_file::parse(std::string_view text, const std::string & name, std::string_view what) {
    auto doc = std::make_unique<document>();
    doc->name = name;
    try {
        doc->root = json_parse(text);
    } catch (const nlohmann::json::parse_error & e) {
        fail_input("{}: {} is not valid JSON (byte {}): {}", name, what, e.byte, json_plain_message(e));
    } catch (const nlohmann::json::exception & e) {
        fail_input("{}: {} is not valid JSON: {}", name, what, json_plain_message(e));
    }
    return json_file(std::move(doc));
}

std::string json_describe(const nlohmann::json & v) {
    if (v.is_null()) return "null";
    std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    return fmt::format("{} {} {}", v.is_object() || v.is_array() ? "an" : "a", v.type_name(), s);
}

nlohmann::json json_parse(std::string_view text) {
    using event = nlohmann::json::parse_event_t;
    // nlohmann's lexer takes a NUL byte for the end of the input and ignores what follows it; JSON
    // text has none (a string writes it \u0000).
    if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
        throw nlohmann::json::other_error::create(
            501, fmt::format("a NUL byte at byte {} (JSON writes it \\u0000 inside a string)", nul + 1), nullptr);
    }
    // The callback sees a container's start with the number of containers around it (0 for the root).
    return nlohmann::json::parse(text.begin(), text.end(), [](int depth, event e, nlohmann::json &) {
        if ((e == event::object_start || e == event::array_start) && depth >= json_max_depth) {
            throw nlohmann::json::other_error::create(
                501, fmt::format("nested deeper than {} levels (arrays and objects)", json_max_depth), nullptr);
        }
        return true;
    });
}

// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string_view json_plain_message(const std::exception & e) {
    std::string_view m = e.what();
    if (m.starts_with("[json.exception.")) {
        const size_t end = m.find("] ");
        if (end != std::string_view::npos) m.remove_prefix(end + 2);
    }
    return m;
}

}  // namespace hill
