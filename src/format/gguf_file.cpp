#include "format/gguf_file.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace hill {

// All multi-byte fields are read with memcpy into host integers: the format is little-endian.
static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace {

constexpr char gguf_magic[4] = {'G', 'G', 'U', 'F'};
constexpr size_t header_bytes = 4 + 4 + 8 + 8;  // magic, version, n_tensors, n_kv
constexpr uint32_t max_value_type = uint32_t(gguf_value_type::f64);
constexpr int max_dims = 4;
// Nested arrays are legal, but no known writer nests more than one level; the cap bounds the
// recursion (and so the stack) that a crafted file can cause.
constexpr int max_array_depth = 8;
// Smallest possible encodings, used to reject counts that cannot fit in the bytes left before
// anything is allocated: a metadata pair is an empty key (8), a type (4) and a 1-byte value; a
// tensor info is an empty name (8), n_dims (4), one dimension (8), a type (4) and an offset (8).
constexpr size_t min_kv_bytes = 8 + 4 + 1;
constexpr size_t min_tensor_info_bytes = 8 + 4 + 8 + 4 + 8;

// Bytes of the smallest encoding of one value of type `t` inside an array.
size_t min_value_bytes(gguf_value_type t) {
    switch (t) {
        case gguf_value_type::u8:
        case gguf_value_type::i8:
        case gguf_value_type::boolean: return 1;
        case gguf_value_type::u16:
        case gguf_value_type::i16: return 2;
        case gguf_value_type::u32:
        case gguf_value_type::i32:
        case gguf_value_type::f32: return 4;
        case gguf_value_type::u64:
        case gguf_value_type::i64:
        case gguf_value_type::f64:
        case gguf_value_type::string: return 8;  // the length of an empty string
        case gguf_value_type::array: return 12;  // element type + length of an empty array
    }
    return 1;
}

bool is_unsigned(gguf_value_type t) {
    return t == gguf_value_type::u8 || t == gguf_value_type::u16 || t == gguf_value_type::u32 ||
           t == gguf_value_type::u64;
}

bool is_signed(gguf_value_type t) {
    return t == gguf_value_type::i8 || t == gguf_value_type::i16 || t == gguf_value_type::i32 ||
           t == gguf_value_type::i64;
}

bool is_float(gguf_value_type t) { return t == gguf_value_type::f32 || t == gguf_value_type::f64; }

// "u32", or "array of string" for an array value.
std::string describe(const gguf_value & v) {
    if (v.type != gguf_value_type::array) return std::string(gguf_value_type_name(v.type));
    return fmt::format("array of {}", gguf_value_type_name(v.array_type));
}

// Name of a ggml type number for messages, including the ones HillInfer does not support.
std::string_view ggml_type_number_name(uint32_t v) {
    static constexpr std::string_view names[] = {
        "F32",    "F16",   "Q4_0",  "Q4_1",    "Q4_2",   "Q4_3",    "Q5_0",  "Q5_1",  "Q8_0",  "Q8_1",
        "Q2_K",   "Q3_K",  "Q4_K",  "Q5_K",    "Q6_K",   "Q8_K",    "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
        "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",  "I8",     "I16",     "I32",   "I64",   "F64",   "IQ1_M",
        "BF16",   "",      "",      "",        "TQ1_0",  "TQ2_0",   "",      "",      "",      "MXFP4",
    };
    if (v < std::size(names) && !names[v].empty()) return names[v];
    return "unknown to ggml";
}

// Bounds-checked little-endian reader over the file bytes. Every read states what it reads
// (`ctx` names the key or tensor, `field` the part of it) so that a short file gives a message
// naming the field, the bytes needed and the bytes left.
class cursor {
public:
    cursor(const uint8_t * data, size_t size, const std::string & file) : data_(data), size_(size), file_(file) {}

    size_t pos() const { return pos_; }
    size_t left() const { return size_ - pos_; }

    void need(size_t n, std::string_view ctx, std::string_view field) const {
        if (n > left()) {
            fail_input("{}: truncated file: {}{}{} needs {} bytes at offset {}, but only {} remain (file size {})",
                       file_, ctx, ctx.empty() ? "" : ": ", field, n, pos_, left(), size_);
        }
    }

    template <class T>
    T get(std::string_view ctx, std::string_view field) {
        need(sizeof(T), ctx, field);
        T v;
        std::memcpy(&v, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string get_string(std::string_view ctx, std::string_view field) {
        const size_t at = pos_;
        const uint64_t len = get<uint64_t>(ctx, field);
        if (len > left()) {
            fail_input("{}: {}{}{}: string length {} at offset {} runs past the end of the file ({} bytes left)",
                       file_, ctx, ctx.empty() ? "" : ": ", field, len, at, left());
        }
        std::string s(reinterpret_cast<const char *>(data_ + pos_), size_t(len));
        pos_ += size_t(len);
        return s;
    }

    gguf_value_type get_value_type(std::string_view ctx, std::string_view field) {
        const size_t at = pos_;
        const uint32_t t = get<uint32_t>(ctx, field);
        if (t > max_value_type) {
            fail_input("{}: {}: unknown value type {} at offset {} (expected 0..{})", file_, ctx, t, at,
                       max_value_type);
        }
        return gguf_value_type(t);
    }

private:
    const uint8_t * data_;
    size_t size_;
    size_t pos_ = 0;
    const std::string & file_;
};

// Reads one value of type `t` (the type tag itself already read). `depth` counts enclosing arrays.
gguf_value read_value(cursor & c, gguf_value_type t, const std::string & file, const std::string & ctx, int depth) {
    gguf_value v;
    v.type = t;
    switch (t) {
        case gguf_value_type::u8: v.u = c.get<uint8_t>(ctx, "u8 value"); break;
        case gguf_value_type::i8: v.i = c.get<int8_t>(ctx, "i8 value"); break;
        case gguf_value_type::u16: v.u = c.get<uint16_t>(ctx, "u16 value"); break;
        case gguf_value_type::i16: v.i = c.get<int16_t>(ctx, "i16 value"); break;
        case gguf_value_type::u32: v.u = c.get<uint32_t>(ctx, "u32 value"); break;
        case gguf_value_type::i32: v.i = c.get<int32_t>(ctx, "i32 value"); break;
        case gguf_value_type::u64: v.u = c.get<uint64_t>(ctx, "u64 value"); break;
        case gguf_value_type::i64: v.i = c.get<int64_t>(ctx, "i64 value"); break;
        case gguf_value_type::f32: v.f = c.get<float>(ctx, "f32 value"); break;
        case gguf_value_type::f64: v.f = c.get<double>(ctx, "f64 value"); break;
        case gguf_value_type::boolean: {
            const size_t at = c.pos();
            const uint8_t b = c.get<uint8_t>(ctx, "bool value");
            if (b > 1) fail_input("{}: {}: bool value at offset {} is {}, expected 0 or 1", file, ctx, at, b);
            v.b = b != 0;
            break;
        }
        case gguf_value_type::string: v.str = c.get_string(ctx, "string value"); break;
        case gguf_value_type::array: {
            v.array_type = c.get_value_type(ctx, "array element type");
            if (v.array_type == gguf_value_type::array && depth + 1 >= max_array_depth) {
                fail_input("{}: {}: arrays nested deeper than {} levels at offset {}", file, ctx, max_array_depth,
                           c.pos());
            }
            const size_t at = c.pos();
            const uint64_t n = c.get<uint64_t>(ctx, "array length");
            // Checked before reserving: a corrupt count must not allocate memory the file cannot back.
            const size_t min_bytes = min_value_bytes(v.array_type);
            if (n > c.left() / min_bytes) {
                fail_input(
                    "{}: {}: array length {} at offset {} runs past the end of the file: {} elements of {} need at "
                    "least {} bytes each, {} bytes left",
                    file, ctx, n, at, n, gguf_value_type_name(v.array_type), min_bytes, c.left());
            }
            v.array.reserve(size_t(n));
            for (uint64_t k = 0; k < n; ++k) v.array.push_back(read_value(c, v.array_type, file, ctx, depth + 1));
            break;
        }
    }
    return v;
}


std::string shape_string(const gguf_tensor_info & t) {
    std::string s = "[";
    for (int d = 0; d < t.n_dims; ++d) s += fmt::format("{}{}", d ? ", " : "", t.ne[d]);
    return s + "]";
}

}  // namespace

std::string_view gguf_value_type_name(gguf_value_type t) {
    switch (t) {
        case gguf_value_type::u8: return "u8";
        case gguf_value_type::i8: return "i8";
        case gguf_value_type::u16: return "u16";
        case gguf_value_type::i16: return "i16";
        case gguf_value_type::u32: return "u32";
        case gguf_value_type::i32: return "i32";
        case gguf_value_type::f32: return "f32";
        case gguf_value_type::boolean: return "bool";
        case gguf_value_type::string: return "string";
        case gguf_value_type::array: return "array";
        case gguf_value_type::u64: return "u64";
        case gguf_value_type::i64: return "i64";
        case gguf_value_type::f64: return "f64";
    }
    return "unknown";
}

std::unique_ptr<gguf_file> gguf_file::open(const std::string & path, file_access access) {
    std::unique_ptr<gguf_file> f(new gguf_file());
    f->name_ = path;
    f->map_.emplace(path, access);
    f->parse_all(f->map_->data(), f->map_->size());
    return f;
}

std::unique_ptr<gguf_file> gguf_file::parse(const uint8_t * data, size_t size, const std::string & name) {
    HILL_ASSERT(data != nullptr || size == 0);
    std::unique_ptr<gguf_file> f(new gguf_file());
    f->name_ = name;
    f->parse_all(data, size);
    return f;
}

void gguf_file::parse_all(const uint8_t * data, size_t size) {
    const std::string & file = name_;

    // Header. The magic and version are checked before the length so that a short file of another
    // format or version is reported as such, not as truncated.
    if (size < 4) {
        fail_input("{}: truncated header: the file has {} bytes, a GGUF header needs {}", file, size, header_bytes);
    }
    if (std::memcmp(data, gguf_magic, 4) != 0) {
        fail_input("{}: bad magic: expected \"GGUF\" (47 47 55 46), got {:02x} {:02x} {:02x} {:02x}: not a GGUF file",
                   file, data[0], data[1], data[2], data[3]);
    }
    if (size >= 8) {
        std::memcpy(&version_, data + 4, sizeof(version_));
        if (version_ == 1) {
            fail_input("{}: unsupported GGUF version 1 (only versions 2 and 3 are read): re-convert the model", file);
        }
        if (version_ != 2 && version_ != 3) {
            const uint32_t swapped = __builtin_bswap32(version_);
            if (swapped == 2 || swapped == 3) {
                fail_input(
                    "{}: unsupported GGUF version {} (byte-swapped {}): big-endian GGUF files are not supported", file,
                    version_, swapped);
            }
            fail_input("{}: unknown GGUF version {}: expected 2 or 3", file, version_);
        }
    }
    if (size < header_bytes) {
        fail_input("{}: truncated header: the file has {} bytes, a GGUF header needs {}", file, size, header_bytes);
    }
    cursor c(data, size, file);
    c.get<uint32_t>("", "magic");
    c.get<uint32_t>("", "version");
    const uint64_t n_tensors = c.get<uint64_t>("", "n_tensors");
    const uint64_t n_kv = c.get<uint64_t>("", "n_kv");
    if (n_kv > c.left() / min_kv_bytes) {
        fail_input("{}: metadata count n_kv = {} runs past the end of the file: {} bytes left, each pair needs at least {}",
                   file, n_kv, c.left(), min_kv_bytes);
    }
    if (n_tensors > c.left() / min_tensor_info_bytes) {
        fail_input(
            "{}: tensor count n_tensors = {} runs past the end of the file: {} bytes left, each tensor info needs at "
            "least {}",
            file, n_tensors, c.left(), min_tensor_info_bytes);
    }

    // Metadata.
    kv_.reserve(size_t(n_kv));
    for (uint64_t k = 0; k < n_kv; ++k) {
        std::string key = c.get_string(fmt::format("metadata pair #{}", k), "key");
        const std::string ctx = fmt::format("metadata key '{}'", key);
        const gguf_value_type t = c.get_value_type(ctx, "value type");
        gguf_value v = read_value(c, t, file, ctx, 0);
        const auto [it, inserted] = kv_index_.emplace(key, kv_.size());
        if (!inserted) {
            fail_input("{}: duplicate metadata key '{}' (pairs #{} and #{})", file, key, it->second, k);
        }
        kv_.emplace_back(std::move(key), std::move(v));
    }

    if (const gguf_value * a = find("general.alignment")) {
        if (a->type != gguf_value_type::u32) {
            fail_input("{}: metadata key 'general.alignment': expected type u32, got {}", file, describe(*a));
        }
        if (a->u == 0 || !std::has_single_bit(a->u)) {
            fail_input("{}: metadata key 'general.alignment': expected a nonzero power of two, got {}", file, a->u);
        }
        alignment_ = uint32_t(a->u);
    }

    // Tensor infos.
    if (n_tensors > c.left() / min_tensor_info_bytes) {
        fail_input(
            "{}: tensor count n_tensors = {} runs past the end of the file: {} bytes left after the metadata, each "
            "tensor info needs at least {}",
            file, n_tensors, c.left(), min_tensor_info_bytes);
    }
    tensors_.reserve(size_t(n_tensors));
    for (uint64_t k = 0; k < n_tensors; ++k) {
        gguf_tensor_info t;
        t.name = c.get_string(fmt::format("tensor info #{}", k), "name");
        const std::string ctx = fmt::format("tensor '{}'", t.name);
        const auto [it, inserted] = tensor_index_.emplace(t.name, tensors_.size());
        if (!inserted) fail_input("{}: duplicate tensor name '{}' (tensors #{} and #{})", file, t.name, it->second, k);

        const uint32_t n_dims = c.get<uint32_t>(ctx, "n_dims");
        if (n_dims < 1 || n_dims > uint32_t(max_dims)) {
            fail_input("{}: {}: n_dims = {}, expected 1..{}", file, ctx, n_dims, max_dims);
        }
        t.n_dims = int(n_dims);
        for (int d = 0; d < t.n_dims; ++d) {
            const int64_t ne = int64_t(c.get<uint64_t>(ctx, "ne"));
            if (ne <= 0) fail_input("{}: {}: ne[{}] = {}, expected a positive dimension", file, ctx, d, ne);
            t.ne[d] = ne;
        }
        const uint32_t type_raw = c.get<uint32_t>(ctx, "type");
        const std::optional<ggml_type> type = ggml_type_from_u32(type_raw);
        if (!type) {
            fail_input("{}: {}: unsupported tensor type {} ({}); supported: {}", file, ctx, type_raw,
                       ggml_type_number_name(type_raw), ggml_type_names_supported());
        }
        t.type = *type;
        t.offset = c.get<uint64_t>(ctx, "offset");

        // Element count and byte size, both checked for 64-bit overflow.
        uint64_t n_el = 1;
        for (int d = 0; d < t.n_dims; ++d) {
            if (__builtin_mul_overflow(n_el, uint64_t(t.ne[d]), &n_el) || n_el > uint64_t(std::numeric_limits<int64_t>::max())) {
                fail_input("{}: {}: shape {} overflows: its element count does not fit in 63 bits", file, ctx,
                           shape_string(t));
            }
        }
        const int64_t block = ggml_block_size(t.type);
        if (t.ne[0] % block != 0) {
            fail_input("{}: {}: row length ne[0] = {} is not a multiple of the block size {} of type {}", file, ctx,
                       t.ne[0], block, ggml_type_name(t.type));
        }
        // Not ggml_row_bytes(): its size_t product would wrap silently for a crafted ne[0].
        uint64_t bytes = 0;
        bool overflow = __builtin_mul_overflow(uint64_t(t.ne[0] / block), ggml_block_bytes(t.type), &bytes);
        for (int d = 1; d < t.n_dims && !overflow; ++d) overflow = __builtin_mul_overflow(bytes, uint64_t(t.ne[d]), &bytes);
        if (overflow) {
            fail_input("{}: {}: shape {} of type {} overflows: its byte size does not fit in 64 bits", file, ctx,
                       shape_string(t), ggml_type_name(t.type));
        }
        t.size_bytes = size_t(bytes);
        tensors_.push_back(std::move(t));
    }

    // Tensor data: the section starts at the end of the tensor infos rounded up to the alignment.
    // A file without tensors (vocab-only GGUF) may end without that padding.
    const uint64_t header_end = c.pos();
    const uint64_t data_start = (header_end + alignment_ - 1) / alignment_ * alignment_;
    // The tensors' data follow each other in the order of their infos, the first at offset 0, each
    // at the end of the one before rounded up to the alignment: the only gaps are alignment padding.
    // Every writer lays them out so (ggml's gguf_write, gguf-py's GGUFWriter, gguf_writer.h), and
    // llama.cpp's reader refuses any other offset ("tensor '...' has offset X, expected Y"). The
    // check is what ties each tensor's offset to the sizes of those before it: a type or shape
    // changed in a tensor info (F32 read as F16) moves where the next tensor must start.
    uint64_t expected = 0;
    const gguf_tensor_info * prev = nullptr;
    for (gguf_tensor_info & t : tensors_) {
        if (t.offset % alignment_ != 0) {
            fail_input("{}: tensor '{}': misaligned data offset {}: expected a multiple of the alignment {}", file,
                       t.name, t.offset, alignment_);
        }
        if (data_start > size || t.offset > size - data_start || t.size_bytes > size - data_start - t.offset) {
            fail_input(
                "{}: tensor '{}': data at file offset {} + {} with {} bytes runs past the end of the file (size {})",
                file, t.name, data_start, t.offset, t.size_bytes, size);
        }
        if (t.offset != expected) {
            const std::string what =
                fmt::format("{} {}, {} bytes", ggml_type_name(t.type), shape_string(t), t.size_bytes);
            if (prev == nullptr) {
                fail_input(
                    "{}: tensor '{}' ({}): data offset {}, expected 0: the first tensor's data starts the data section",
                    file, t.name, what, t.offset);
            }
            fail_input(
                "{}: tensor '{}' ({}): data offset {}, expected {}: {} the previous tensor '{}' ({} {}, {} bytes at "
                "offset {}); each tensor's data must start where the previous tensor's ends, in the order of the "
                "tensor infos, rounded up to the alignment {}",
                file, t.name, what, t.offset, expected,
                t.offset < expected ? "overlapping" : fmt::format("a gap of {} bytes after", t.offset - expected),
                prev->name, ggml_type_name(prev->type), shape_string(*prev), prev->size_bytes, prev->offset,
                alignment_);
        }
        t.data = data + data_start + t.offset;
        // No overflow: offset + size_bytes <= size - data_start (checked above), and size is a size_t.
        expected = (t.offset + t.size_bytes + alignment_ - 1) / alignment_ * alignment_;
        prev = &t;
    }
    // The file ends with the last tensor's data and at most its alignment padding (both writers pad
    // after every tensor). More is data no tensor info accounts for: the last tensor's type or shape
    // changed to a smaller one, which the running offset above cannot see.
    if (prev != nullptr) {
        const uint64_t end = data_start + prev->offset + prev->size_bytes;
        if (size - end >= alignment_) {
            fail_input(
                "{}: {} bytes after the last tensor '{}' ({} {}, {} bytes at offset {}): the data section must end "
                "where the last tensor's data ends, padded to at most the alignment {}; the tensor infos do not "
                "describe this file's data (a tensor's type or shape changed?)",
                file, size - end, prev->name, ggml_type_name(prev->type), shape_string(*prev), prev->size_bytes,
                prev->offset, alignment_);
        }
    }
}

const gguf_value * gguf_file::find(const std::string & key) const {
    const auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const gguf_tensor_info * gguf_file::find_tensor(const std::string & name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

// Integer value of `v` (any integer type) as u64; `what` names it in messages.
uint64_t to_uint(const gguf_value & v, const std::string & file, const std::string & what) {
    if (is_unsigned(v.type)) return v.u;
    if (is_signed(v.type)) {
        if (v.i < 0) fail_input("{}: {}: expected a non-negative integer, got {}", file, what, v.i);
        return uint64_t(v.i);
    }
    fail_input("{}: {}: expected an integer, got {}", file, what, describe(v));
}

int64_t to_int(const gguf_value & v, const std::string & file, const std::string & what) {
    if (is_signed(v.type)) return v.i;
    if (is_unsigned(v.type)) {
        if (v.u > uint64_t(std::numeric_limits<int64_t>::max())) {
            fail_input("{}: {}: expected an integer below 2^63, got {}", file, what, v.u);
        }
        return int64_t(v.u);
    }
    fail_input("{}: {}: expected an integer, got {}", file, what, describe(v));
}

}  // namespace

std::optional<uint64_t> gguf_file::get_uint(const std::string & key) const {
    const gguf_value * v = find(key);
    if (v == nullptr) return std::nullopt;
    return to_uint(*v, name_, fmt::format("metadata key '{}'", key));
}

std::optional<int64_t> gguf_file::get_int(const std::string & key) const {
    const gguf_value * v = find(key);
    if (v == nullptr) return std::nullopt;
    return to_int(*v, name_, fmt::format("metadata key '{}'", key));
}

std::optional<double> gguf_file::get_float(const std::string & key) const {
    const gguf_value * v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!is_float(v->type)) fail_input("{}: metadata key '{}': expected f32 or f64, got {}", name_, key, describe(*v));
    return v->f;
}

std::optional<bool> gguf_file::get_bool(const std::string & key) const {
    const gguf_value * v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type != gguf_value_type::boolean) {
        fail_input("{}: metadata key '{}': expected bool, got {}", name_, key, describe(*v));
    }
    return v->b;
}

std::optional<std::string> gguf_file::get_string(const std::string & key) const {
    const gguf_value * v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type != gguf_value_type::string) {
        fail_input("{}: metadata key '{}': expected string, got {}", name_, key, describe(*v));
    }
    return v->str;
}

std::optional<std::vector<std::string>> gguf_file::get_string_array(const std::string & key) const {
    const gguf_value * v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type != gguf_value_type::array || v->array_type != gguf_value_type::string) {
        fail_input("{}: metadata key '{}': expected array of string, got {}", name_, key, describe(*v));
    }
    std::vector<std::string> out;
    out.reserve(v->array.size());
    for (const gguf_value & e : v->array) out.push_back(e.str);
    return out;
}

std::optional<std::vector<float>> gguf_file::get_float_array(const std::string & key) const {
    const gguf_value * v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type != gguf_value_type::array || !is_float(v->array_type)) {
        fail_input("{}: metadata key '{}': expected array of f32 or f64, got {}", name_, key, describe(*v));
    }
    std::vector<float> out;
    out.reserve(v->array.size());
    for (const gguf_value & e : v->array) out.push_back(float(e.f));
    return out;
}

std::optional<std::vector<int64_t>> gguf_file::get_int_array(const std::string & key) const {
    const gguf_value * v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->type != gguf_value_type::array || !(is_signed(v->array_type) || is_unsigned(v->array_type))) {
        fail_input("{}: metadata key '{}': expected array of integers, got {}", name_, key, describe(*v));
    }
    std::vector<int64_t> out;
    out.reserve(v->array.size());
    for (size_t k = 0; k < v->array.size(); ++k) {
        const gguf_value & e = v->array[k];
        if (is_unsigned(e.type) && e.u > uint64_t(std::numeric_limits<int64_t>::max())) {
            to_int(e, name_, fmt::format("metadata key '{}' element {}", key, k));  // throws
        }
        out.push_back(is_signed(e.type) ? e.i : int64_t(e.u));
    }
    return out;
}

}  // namespace hill
