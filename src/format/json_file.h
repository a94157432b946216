// JSON files with error paths: the one way HillInfer reads a JSON file (config.json, the shard
// index, tokenizer.json and its companions, device profiles) or a JSON text inside another file
// (the safetensors header), and takes typed values out of it.
//
// Every message names the document (its file path), the value's place in it as a JSON Pointer
// (RFC 6901: "/rope_scaling/factor", "/model/merges/3"; in a key "~1" stands for '/' and "~0" for
// '~'), what was expected and what was found:
//   /m/config.json: /rope_scaling/factor: expected a number, got a string "4"
//   /m/config.json: /num_hidden_layers: missing key, expected an integer
//   /m/config.json: the model config is not valid JSON (byte 17): parse error at line 2, column 3: ...
// Errors are hill::error(exit_code::bad_input), except a file that is missing, a folder or cannot
// be opened: exit_code::usage, with the system's reason (as mapped_file).
//
// A JSON null counts as absent wherever a value is looked up (Hugging Face configs write
// "bos_token_id": null for "none").
//
// nlohmann/json: only <nlohmann/json_fwd.hpp> is included here (the full header is heavy to
// compile); include <nlohmann/json.hpp> where you use json_value::json() directly.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hill {

// A measurement as a JSON number, or null where x is not finite (JSON has no inf or NaN): how every
// report (run JSON, bench experiments) writes a number that may be undefined.
nlohmann::json number_or_null(double x);

// A value inside a json_file, with its document's name and its JSON Pointer for messages. It points
// into its json_file, which must outlive it; copies are cheap (two pointers and the pointer text).
class json_value {
public:
    // The document's name (a file path) and this value's JSON Pointer ("" for the root).
    const std::string & name() const { return *name_; }
    const std::string & pointer() const { return pointer_; }
    // "name: pointer", or "name" at the root: how every message about this value starts.
    std::string where() const;
    const nlohmann::json & json() const { return *value_; }

    // --- members of objects -------------------------------------------------------------------
    // `pointer` is relative to this value and starts with '/': "/a/b" is member "a", then its member
    // "b". Every value on the way must be an object, else an error naming it.
    // find: the member, or nullopt when it is absent or null.
    std::optional<json_value> find(std::string_view pointer) const;
    // at: the member; absent or null is an error "missing key, expected <expected>".
    json_value at(std::string_view pointer, std::string_view expected = "a value") const;
    // get<T>() of the member at `pointer`: required throws when it is absent, optional returns nullopt.
    template <class T>
    T required(std::string_view pointer) const;
    template <class T>
    std::optional<T> optional(std::string_view pointer) const;
    // get_int(lo, hi) of the member at `pointer`.
    int64_t required_int(std::string_view pointer, int64_t lo, int64_t hi) const;
    std::optional<int64_t> optional_int(std::string_view pointer, int64_t lo, int64_t hi) const;
    // Throws unless this value is an object.
    void require_object() const;
    // Calls f(key, member) for every member of this object (an error unless it is one), in key order.
    void for_each_member(const std::function<void(const std::string & key, const json_value & member)> & f) const;

    // --- elements of arrays -------------------------------------------------------------------
    // The length of this array (an error unless it is one), and its element i < size().
    size_t size() const;
    json_value item(size_t i) const;

    // --- this value, typed --------------------------------------------------------------------
    // T is one of
    //   bool                      true or false
    //   int64_t                   a JSON integer, or a float with an integral value (1e4, as some
    //                             exporters write integers)
    //   double                    any JSON number
    //   std::string               a string
    //   std::vector<std::string>  an array of strings (a bad element is named: "/architectures/1")
    // A value of another type is an error "expected <what T is>, got <the value>".
    template <class T>
    T get() const;
    // An integer (as get<int64_t>) in [lo, hi]; outside: "expected an integer in [lo, hi], got ...".
    int64_t get_int(int64_t lo, int64_t hi) const;

    // Throws hill::error(bad_input) "<where>: expected <expected>, got <the value>".
    [[noreturn]] void fail_expected(std::string_view expected) const;

private:
    friend class json_file;
    json_value(const std::string * name, const nlohmann::json * value, std::string pointer)
        : name_(name), value_(value), pointer_(std::move(pointer)) {}

    const std::string * name_;
    const nlohmann::json * value_;
    std::string pointer_;
};

extern template bool json_value::get<bool>() const;
extern template int64_t json_value::get<int64_t>() const;
extern template double json_value::get<double>() const;
extern template std::string json_value::get<std::string>() const;
extern template std::vector<std::string> json_value::get<std::vector<std::string>>() const;
extern template bool json_value::required<bool>(std::string_view) const;
extern template int64_t json_value::required<int64_t>(std::string_view) const;
extern template double json_value::required<double>(std::string_view) const;
extern template std::string json_value::required<std::string>(std::string_view) const;
extern template std::vector<std::string> json_value::required<std::vector<std::string>>(std::string_view) const;
extern template std::optional<bool> json_value::optional<bool>(std::string_view) const;
extern template std::optional<int64_t> json_value::optional<int64_t>(std::string_view) const;
extern template std::optional<double> json_value::optional<double>(std::string_view) const;
extern template std::optional<std::string> json_value::optional<std::string>(std::string_view) const;
extern template std::optional<std::vector<std::string>> json_value::optional<std::vector<std::string>>(
    std::string_view) const;

// A parsed JSON document and its name.
class json_file {
public:
    // Reads and parses the file at `path`. `what` says what the file is for messages ("the model
    // config": "cannot open the model config '<path>': <reason>", "<path>: the model config is not
    // valid JSON (byte N): parse error at line L, column C: ..."). Errors: see the file comment.
    static json_file load(const std::string & path, std::string_view what);
    // Parses `text`, which messages call `name` (e.g. the file it came from) and `what`.
    static json_file parse(std::string_view text, const std::string & name, std::string_view what);

    json_file(json_file && o) noexcept;
    json_file & operator=(json_file && o) noexcept;
    ~json_file();

    const std::string & name() const;
    // The whole document (any JSON type; require_object() when it must be an object).
    json_value root() const;

private:
    struct document;
    explicit json_file(std::unique_ptr<document> doc);
    std::unique_ptr<document> doc_;  // on the heap, so that json_values stay valid when this moves
};

// The actual value in messages: "a string \"4\"", "a number 1.5", "an object {...}", "null"; at most
// 80 characters of JSON.
std::string json_describe(const nlohmann::json & v);

// The deepest nesting a JSON text may have (arrays and objects inside each other). Code that prints or
// walks a document (nlohmann's dump, json_describe) recurses once per level, and some 100,000 levels
// overflow a thread's stack: a 200 KB request body or a config.json could end the process.
inline constexpr int json_max_depth = 512;

// The one way HillInfer parses JSON text (json_file, request bodies, JSON lines): nlohmann::json::parse
// with the nesting bounded by json_max_depth. Errors: nlohmann::json::parse_error for malformed text,
// nlohmann::json::other_error "nested deeper than 512 levels (arrays and objects)" for a deeper one
// and "a NUL byte at byte N" for text holding one (nlohmann alone stops at it and ignores the rest);
// json_plain_message(e) is the message without nlohmann's "[json.exception.*] " prefix.
nlohmann::json json_parse(std::string_view text);
std::string_view json_plain_message(const std::exception & e);

}  // namespace hill
