// GGUF reader (versions 2 and 3) over a read-only memory map.
//
// Format: GGUF spec (ggml docs/gguf.md): little-endian header {magic "GGUF", u32 version,
// u64 n_tensors, u64 n_kv}, then n_kv metadata pairs {string key, u32 value type, value}, then
// n_tensors tensor infos {string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset},
// then padding to `general.alignment` (default 32), then the tensor data; each tensor's offset is
// relative to that data start: the tensors' data follow each other in the order of their infos, the
// first at 0, each at the end of the one before rounded up to the alignment (as every writer lays
// them out and llama.cpp's reader requires). Strings are {u64 len, bytes}.
//
// Every length, count and offset is validated against the file size before it is used: a
// corrupt file gives hill::error(exit_code::bad_input) with a specific message (which field,
// expected, actual), never an out-of-bounds read. Counts are checked against the bytes left
// before anything is allocated. What is rejected (all exit_code::bad_input):
//   - bad magic; version 1 ("unsupported"), big-endian files, any version other than 2 or 3;
//   - a header, key, value, string or array that runs past the end of the file;
//   - an unknown value type (> 12); a bool byte other than 0 or 1; arrays nested deeper than 8;
//   - a duplicate metadata key or tensor name;
//   - `general.alignment` that is not a u32 or not a nonzero power of two;
//   - n_dims outside 1..4 (0 is rejected: ggml writes a scalar as n_dims = 1, ne = {1});
//   - ne[i] <= 0 (read as signed), a shape whose element count overflows 63 bits or whose byte
//     size overflows 64 bits, a row length ne[0] that is not a multiple of the type's block size;
//   - a tensor type HillInfer does not support (the message gives its number and ggml name);
//   - a tensor offset that is not a multiple of the alignment, tensor data past the end of the
//     file, a tensor offset other than the running offset above (tensors out of order, overlapping,
//     or with a gap beyond the alignment padding; so also a type or shape changed in a tensor info,
//     which changes its size): the message names the tensor, its type, shape, size and offset, the
//     expected offset and the tensor before it; more bytes after the last tensor's data than its
//     alignment padding (the last tensor's type or shape changed), naming that tensor.
// A file with no tensors (a vocab-only GGUF) is valid and may end without the padding.
#pragma once

#include "core/ggml_type.h"
#include "core/mapped_file.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hill {

enum class gguf_value_type : uint32_t {
    u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
    string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};

std::string_view gguf_value_type_name(gguf_value_type t);

// One metadata value. Scalars: integers in `i` (signed) or `u` (unsigned) by type, floats in `f`,
// booleans in `b`; strings in `str`; arrays: element type in `array_type`, elements in `array`
// (nested arrays are allowed by the spec and supported).
struct gguf_value {
    gguf_value_type type = gguf_value_type::u8;
    int64_t i = 0;
    uint64_t u = 0;
    double f = 0.0;
    bool b = false;
    std::string str;
    gguf_value_type array_type = gguf_value_type::u8;
    std::vector<gguf_value> array;
};

struct gguf_tensor_info {
    std::string name;
    ggml_type type = ggml_type::f32;
    int n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the innermost (contiguous) dimension
    uint64_t offset = 0;           // bytes from the start of the data section
    size_t size_bytes = 0;
    const uint8_t * data = nullptr;  // into the file's bytes (mapped_file)

    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

class gguf_file {
public:
    // Opens and validates `path`, its bytes held as `access` says (core/mapped_file.h: mapped, or
    // read into huge pages, as the model loader does for the weights). Errors: see the file
    // comment; a missing file or a directory is exit_code::usage (from mapped_file).
    static std::unique_ptr<gguf_file> open(const std::string & path, file_access access = file_access::map);

    // Parses a buffer the caller keeps alive (fuzzing, tests). `name` is used in messages.
    static std::unique_ptr<gguf_file> parse(const uint8_t * data, size_t size, const std::string & name);

    uint32_t version() const { return version_; }
    uint32_t alignment() const { return alignment_; }
    const std::string & name() const { return name_; }

    // Metadata in file order.
    const std::vector<std::pair<std::string, gguf_value>> & metadata() const { return kv_; }
    const gguf_value * find(const std::string & key) const;

    // Typed getters. Integer getters accept any integer type whose value fits; f32 accepts f32/f64.
    // A present key of the wrong type or out of range: hill::error naming key, expected, actual.
    std::optional<uint64_t> get_uint(const std::string & key) const;
    std::optional<int64_t> get_int(const std::string & key) const;
    std::optional<double> get_float(const std::string & key) const;
    std::optional<bool> get_bool(const std::string & key) const;
    std::optional<std::string> get_string(const std::string & key) const;
    // Array getters: element type must match (strings / any float / any integer).
    std::optional<std::vector<std::string>> get_string_array(const std::string & key) const;
    std::optional<std::vector<float>> get_float_array(const std::string & key) const;
    std::optional<std::vector<int64_t>> get_int_array(const std::string & key) const;

    const std::vector<gguf_tensor_info> & tensors() const { return tensors_; }
    const gguf_tensor_info * find_tensor(const std::string & name) const;

private:
    gguf_file() = default;
    void parse_all(const uint8_t * data, size_t size);

    std::string name_;
    std::optional<mapped_file> map_;
    uint32_t version_ = 0;
    uint32_t alignment_ = 32;
    std::vector<std::pair<std::string, gguf_value>> kv_;
    std::map<std::string, size_t> kv_index_;
    std::vector<gguf_tensor_info> tensors_;
    std::map<std::string, size_t> tensor_index_;
};

}  // namespace hill
