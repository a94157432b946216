#include "format/gguf_writer.h"

#include "core/atomic_file.h"
#include "core/error.h"

#include <bit>
#include <cstring>
#include <iterator>

namespace hill {

static_assert(std::endian::native == std::endian::little, "the GGUF writer assumes a little-endian host");

namespace {

constexpr uint32_t gguf_version = 3;
constexpr uint32_t default_alignment = 32;  // GGUF spec default when general.alignment is absent

template <class T>
void put(std::vector<uint8_t> & out, T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.insert(out.end(), b, b + sizeof(T));
}

void put_string(std::vector<uint8_t> & out, const std::string & s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
}

// Checks that an array's elements all carry its element type, recursively (programmer error).
void check_value(const gguf_value & v) {
    HILL_ASSERT(uint32_t(v.type) <= uint32_t(gguf_value_type::f64));
    if (v.type != gguf_value_type::array) return;
    HILL_ASSERT(uint32_t(v.array_type) <= uint32_t(gguf_value_type::f64));
    for (const gguf_value & e : v.array) {
        HILL_ASSERT(e.type == v.array_type);
        check_value(e);
    }
}

// Value payload without its type tag (arrays carry their element type and length).
void put_value(std::vector<uint8_t> & out, const gguf_value & v) {
    switch (v.type) {
        case gguf_value_type::u8: put<uint8_t>(out, uint8_t(v.u)); break;
        case gguf_value_type::i8: put<int8_t>(out, int8_t(v.i)); break;
        case gguf_value_type::u16: put<uint16_t>(out, uint16_t(v.u)); break;
        case gguf_value_type::i16: put<int16_t>(out, int16_t(v.i)); break;
        case gguf_value_type::u32: put<uint32_t>(out, uint32_t(v.u)); break;
        case gguf_value_type::i32: put<int32_t>(out, int32_t(v.i)); break;
        case gguf_value_type::u64: put<uint64_t>(out, v.u); break;
        case gguf_value_type::i64: put<int64_t>(out, v.i); break;
        case gguf_value_type::f32: put<float>(out, float(v.f)); break;
        case gguf_value_type::f64: put<double>(out, v.f); break;
        case gguf_value_type::boolean: put<uint8_t>(out, v.b ? 1 : 0); break;
        case gguf_value_type::string: put_string(out, v.str); break;
        case gguf_value_type::array:
            put<uint32_t>(out, uint32_t(v.array_type));
            put<uint64_t>(out, v.array.size());
            for (const gguf_value & e : v.array) put_value(out, e);
            break;
    }
}

gguf_value scalar(gguf_value_type t) {
    gguf_value v;
    v.type = t;
    return v;
}

gguf_value array_of(gguf_value_type t, size_t n) {
    gguf_value v;
    v.type = gguf_value_type::array;
    v.array_type = t;
    v.array.resize(n, scalar(t));
    return v;
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

void gguf_writer::set_value(const std::string & key, const gguf_value & v) {
    check_value(v);
    if (key == "general.alignment") {
        // The key and the layout must agree: setting the key sets the alignment.
        HILL_ASSERT(v.type == gguf_value_type::u32 && v.u != 0 && std::has_single_bit(v.u));
        alignment_ = uint32_t(v.u);
    }
    for (auto & [k, old] : kv_) {
        if (k == key) {
            old = v;
            return;
        }
    }
    kv_.emplace_back(key, v);
}

void gguf_writer::set_u32(const std::string & key, uint32_t x) {
    gguf_value v = scalar(gguf_value_type::u32);
    v.u = x;
    set_value(key, v);
}

void gguf_writer::set_i32(const std::string & key, int32_t x) {
    gguf_value v = scalar(gguf_value_type::i32);
    v.i = x;
    set_value(key, v);
}

void gguf_writer::set_u64(const std::string & key, uint64_t x) {
    gguf_value v = scalar(gguf_value_type::u64);
    v.u = x;
    set_value(key, v);
}

void gguf_writer::set_f32(const std::string & key, float x) {
    gguf_value v = scalar(gguf_value_type::f32);
    v.f = x;
    set_value(key, v);
}

void gguf_writer::set_bool(const std::string & key, bool x) {
    gguf_value v = scalar(gguf_value_type::boolean);
    v.b = x;
    set_value(key, v);
}

void gguf_writer::set_string(const std::string & key, const std::string & x) {
    gguf_value v = scalar(gguf_value_type::string);
    v.str = x;
    set_value(key, v);
}

void gguf_writer::set_string_array(const std::string & key, const std::vector<std::string> & x) {
    gguf_value v = array_of(gguf_value_type::string, x.size());
    for (size_t k = 0; k < x.size(); ++k) v.array[k].str = x[k];
    set_value(key, v);
}

void gguf_writer::set_f32_array(const std::string & key, const std::vector<float> & x) {
    gguf_value v = array_of(gguf_value_type::f32, x.size());
    for (size_t k = 0; k < x.size(); ++k) v.array[k].f = x[k];
    set_value(key, v);
}

void gguf_writer::set_i32_array(const std::string & key, const std::vector<int32_t> & x) {
    gguf_value v = array_of(gguf_value_type::i32, x.size());
    for (size_t k = 0; k < x.size(); ++k) v.array[k].i = x[k];
    set_value(key, v);
}

void gguf_writer::set_alignment(uint32_t alignment) {
    HILL_ASSERT(alignment != 0 && std::has_single_bit(alignment));
    alignment_ = alignment;
    bool present = false;
    for (const auto & kv : kv_) present = present || kv.first == "general.alignment";
    if (alignment != default_alignment || present) set_u32("general.alignment", alignment);
}

void gguf_writer::add_tensor(const std::string & name, ggml_type type, const std::vector<int64_t> & ne,
                             const void * data) {
    HILL_ASSERT(!ne.empty() && ne.size() <= 4);
    for (const tensor & t : tensors_) HILL_ASSERT(t.name != name);
    for (int64_t n : ne) HILL_ASSERT(n > 0);
    HILL_ASSERT(ne[0] % ggml_block_size(type) == 0);
    uint64_t bytes = 0;
    HILL_ASSERT(!__builtin_mul_overflow(uint64_t(ne[0] / ggml_block_size(type)), ggml_block_bytes(type), &bytes));
    for (size_t d = 1; d < ne.size(); ++d) HILL_ASSERT(!__builtin_mul_overflow(bytes, uint64_t(ne[d]), &bytes));
    HILL_ASSERT(data != nullptr);
    const auto * p = static_cast<const uint8_t *>(data);
    tensors_.push_back(tensor{name, type, ne, std::vector<uint8_t>(p, p + bytes)});
}

void gguf_writer::write(const std::string & path) const {
    // Header, metadata and tensor infos are built in memory (small); tensor data is streamed.
    static constexpr uint8_t magic[4] = {'G', 'G', 'U', 'F'};
    std::vector<uint8_t> head(std::begin(magic), std::end(magic));
    put<uint32_t>(head, gguf_version);
    put<uint64_t>(head, tensors_.size());
    put<uint64_t>(head, kv_.size());
    for (const auto & [key, v] : kv_) {
        put_string(head, key);
        put<uint32_t>(head, uint32_t(v.type));
        put_value(head, v);
    }
    uint64_t offset = 0;  // from the start of the data section; each tensor starts aligned
    for (const tensor & t : tensors_) {
        put_string(head, t.name);
        put<uint32_t>(head, uint32_t(t.ne.size()));
        for (int64_t n : t.ne) put<uint64_t>(head, uint64_t(n));
        put<uint32_t>(head, uint32_t(t.type));
        put<uint64_t>(head, offset);
        offset = align_up(offset + t.data.size(), alignment_);
    }

    atomic_file out(path);
    out.write(head.data(), head.size());
    out.write_zeros(size_t(align_up(out.offset(), alignment_) - out.offset()));
    for (size_t k = 0; k < tensors_.size(); ++k) {
        const tensor & t = tensors_[k];
        out.write(t.data.data(), t.data.size());
        // Pad between tensors only: the last tensor ends the file.
        if (k + 1 < tensors_.size()) out.write_zeros(size_t(align_up(out.offset(), alignment_) - out.offset()));
    }
    out.commit();
}

}  // namespace hill
