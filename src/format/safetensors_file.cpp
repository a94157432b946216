#include "format/safetensors_file.h"

#include "core/error.h"
#include "format/json_file.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

namespace hill {

static_assert(std::endian::native == std::endian::little, "the safetensors reader assumes a little-endian host");

namespace {

// Every dtype the safetensors format defines (README "Format", Dtype enum of the reference
// implementation), so that an unsupported one is reported as such rather than as garbage.
constexpr std::string_view known_dtypes[] = {
    "BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64",
    "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64",
};
constexpr std::string_view supported_dtypes = "F32, F16, BF16";


std::string shape_string(const std::vector<int64_t> & shape) {
    return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace

int64_t safetensors_tensor::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;  // validated not to overflow when parsed
    return n;
}

std::string_view safetensors_file::dtype_name(ggml_type t) {
    switch (t) {
        case ggml_type::f32: return "F32";
        case ggml_type::f16: return "F16";
        case ggml_type::bf16: return "BF16";
        default: break;
    }
    HILL_ASSERT(false && "safetensors_file::dtype_name: not a safetensors dtype");
    return "";
}

std::optional<ggml_type> safetensors_file::type_from_dtype(std::string_view dtype) {
    if (dtype == "F32") return ggml_type::f32;
    if (dtype == "F16") return ggml_type::f16;
    if (dtype == "BF16") return ggml_type::bf16;
    return std::nullopt;
}

std::unique_ptr<safetensors_file> safetensors_file::open(const std::string & path) {
    std::unique_ptr<safetensors_file> f(new safetensors_file());
    f->path_ = path;
    f->map_.emplace(path);
    f->parse_all(f->map_->data(), f->map_->size());
    return f;
}

std::unique_ptr<safetensors_file> safetensors_file::parse(const uint8_t * data, size_t size, const std::string & name) {
    std::unique_ptr<safetensors_file> f(new safetensors_file());
    f->path_ = name;
    f->parse_all(data, size);
    return f;
}

const safetensors_tensor * safetensors_file::find(std::string_view name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

void safetensors_file::parse_all(const uint8_t * data, size_t size) {
    const std::string & file = path_;
    if (size < 8) {
        fail_input("{}: not a safetensors file: {} bytes, expected at least 8 (the header length)", file, size);
    }
    uint64_t n_header = 0;
    std::memcpy(&n_header, data, 8);
    if (n_header < 2) {
        fail_input("{}: header length {} is too small: expected at least 2 (the JSON object \"{{}}\")", file, n_header);
    }
    if (n_header > max_header_bytes) {
        fail_input("{}: header length {} exceeds the limit of {} bytes (corrupt length, or not a safetensors file)",
                   file, n_header, max_header_bytes);
    }
    if (n_header > size - 8) {
        fail_input("{}: header length {} runs past the end of the file: only {} bytes follow the 8-byte length "
                   "(file size {}; truncated file?)",
                   file, n_header, size - 8, size);
    }
    header_bytes_ = n_header;
    data_bytes_ = uint64_t(size) - 8 - n_header;
    const char * header = reinterpret_cast<const char *>(data + 8);
    if (header[0] != '{') {
        fail_input("{}: the header must start with '{{' (a JSON object), found byte 0x{:02x}", file,
                   uint8_t(header[0]));
    }

    const json_file doc =
        json_file::parse(std::string_view(header, n_header), file, fmt::format("the {}-byte header", n_header));
    const nlohmann::json & root = doc.root().json();
    if (!root.is_object()) fail_input("{}: the header is a JSON {}, expected an object", file, root.type_name());

    const uint8_t * data_start = data + 8 + n_header;
    tensors_.reserve(root.size());
    for (const auto & item : root.items()) {
        // Named references, not a structured binding: lambdas below capture them (C++20 clang
        // rejects capturing structured bindings).
        const std::string & name = item.key();
        const nlohmann::json & entry = item.value();
        if (name == "__metadata__") {
            if (!entry.is_object()) {
                fail_input("{}: \"__metadata__\" is {}, expected an object of strings", file, json_describe(entry));
            }
            for (const auto & [k, v] : entry.items()) {
                if (!v.is_string()) {
                    fail_input("{}: \"__metadata__\" key \"{}\" is {}, expected a string", file, k, json_describe(v));
                }
                metadata_.emplace(k, v.get<std::string>());
            }
            continue;
        }
        if (!entry.is_object()) {
            fail_input("{}: tensor '{}': entry is {}, expected an object with dtype, shape, data_offsets", file, name,
                       json_describe(entry));
        }
        const auto field = [&](const char * key) -> const nlohmann::json & {
            const auto it = entry.find(key);
            if (it == entry.end()) fail_input("{}: tensor '{}': missing \"{}\"", file, name, key);
            return *it;
        };
        safetensors_tensor t;
        t.name = name;

        const nlohmann::json & dtype = field("dtype");
        if (!dtype.is_string()) {
            fail_input("{}: tensor '{}': dtype is {}, expected a string", file, name, json_describe(dtype));
        }
        const std::string dtype_str = dtype.get<std::string>();
        const std::optional<ggml_type> type = type_from_dtype(dtype_str);
        if (!type) {
            const bool known = std::find(std::begin(known_dtypes), std::end(known_dtypes), dtype_str) !=
                               std::end(known_dtypes);
            fail_input("{}: tensor '{}': {} dtype \"{}\"; supported: {}", file, name,
                       known ? "unsupported" : "unknown", dtype_str, supported_dtypes);
        }
        t.type = *type;

        const nlohmann::json & shape = field("shape");
        if (!shape.is_array()) {
            fail_input("{}: tensor '{}': shape is {}, expected an array", file, name, json_describe(shape));
        }
        if (shape.size() > max_dims) {
            fail_input("{}: tensor '{}': shape has {} dimensions, expected at most {}", file, name, shape.size(),
                       max_dims);
        }
        uint64_t n_el = 1;
        for (size_t d = 0; d < shape.size(); ++d) {
            const nlohmann::json & v = shape[d];
            if (!v.is_number_unsigned() || v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
                fail_input("{}: tensor '{}': shape[{}] is {}, expected a non-negative integer", file, name, d,
                           json_describe(v));
            }
            t.shape.push_back(v.get<int64_t>());
            if (__builtin_mul_overflow(n_el, v.get<uint64_t>(), &n_el) || n_el > uint64_t(std::numeric_limits<int64_t>::max())) {
                fail_input("{}: tensor '{}': shape {} overflows: its element count does not fit in 63 bits", file,
                           name, shape.dump());
            }
        }
        const uint64_t elt = ggml_block_bytes(t.type);  // block size 1 for float types
        uint64_t bytes = 0;
        if (__builtin_mul_overflow(n_el, elt, &bytes)) {
            fail_input("{}: tensor '{}': shape {} of dtype {} overflows: its byte size does not fit in 64 bits", file,
                       name, shape_string(t.shape), dtype_str);
        }

        const nlohmann::json & off = field("data_offsets");
        if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
            fail_input("{}: tensor '{}': data_offsets is {}, expected [begin, end] (two non-negative integers)", file,
                       name, json_describe(off));
        }
        const uint64_t begin = off[0].get<uint64_t>();
        const uint64_t end = off[1].get<uint64_t>();
        if (end < begin) {
            fail_input("{}: tensor '{}': data_offsets [{}, {}]: end is before begin", file, name, begin, end);
        }
        if (end - begin != bytes) {
            fail_input("{}: tensor '{}': shape {} of dtype {} is {} bytes, but data_offsets [{}, {}] span {} bytes",
                       file, name, shape_string(t.shape), dtype_str, bytes, begin, end, end - begin);
        }
        if (end > data_bytes_) {
            fail_input("{}: tensor '{}': data_offsets [{}, {}] run past the end of the data section ({} bytes: file "
                       "size {} minus 8 minus the {}-byte header; truncated file?)",
                       file, name, begin, end, data_bytes_, size, n_header);
        }
        t.offset = begin;
        t.size_bytes = bytes;
        t.data = data_start + begin;
        tensors_.push_back(std::move(t));
    }

    // Coverage: in order of (begin, end), each tensor starts where the previous one ended, and the
    // last one ends at the end of the file. Zero-size tensors fit at the cursor only (as in the
    // reference reader).
    std::sort(tensors_.begin(), tensors_.end(), [](const safetensors_tensor & a, const safetensors_tensor & b) {
        return a.offset != b.offset ? a.offset < b.offset : a.size_bytes < b.size_bytes;
    });
    uint64_t cursor = 0;
    const safetensors_tensor * prev = nullptr;
    for (const safetensors_tensor & t : tensors_) {
        if (t.offset < cursor) {
            fail_input("{}: tensors '{}' (data [{}, {})) and '{}' (data [{}, {})) overlap", file, prev->name,
                       prev->offset, cursor, t.name, t.offset, t.offset + t.size_bytes);
        }
        if (t.offset > cursor) {
            if (prev == nullptr) {
                fail_input("{}: tensor '{}': data starts at offset {}, expected 0: the {} bytes before it belong to "
                           "no tensor (the format forbids holes)",
                           file, t.name, t.offset, t.offset);
            }
            fail_input("{}: a gap of {} bytes between tensors '{}' (ends at {}) and '{}' (starts at {}): the format "
                       "forbids holes in the data section",
                       file, t.offset - cursor, prev->name, cursor, t.name, t.offset);
        }
        cursor = t.offset + t.size_bytes;
        prev = &t;
    }
    if (cursor != data_bytes_) {
        fail_input("{}: {} bytes after the last tensor{}: the data section is {} bytes but the tensors cover {} "
                   "(the format forbids holes)",
                   file, data_bytes_ - cursor, prev ? fmt::format(" '{}'", prev->name) : std::string(), data_bytes_,
                   cursor);
    }
    for (size_t k = 0; k < tensors_.size(); ++k) index_.emplace(tensors_[k].name, k);
}

std::vector<uint8_t> safetensors_serialize(const std::vector<safetensors_entry> & tensors,
                                           const std::map<std::string, std::string> & metadata) {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        nlohmann::ordered_json m = nlohmann::ordered_json::object();
        for (const auto & [k, v] : metadata) m[k] = v;
        header["__metadata__"] = std::move(m);
    }
    uint64_t offset = 0;
    for (const safetensors_entry & t : tensors) {
        uint64_t n = 1;
        for (int64_t d : t.shape) {
            HILL_ASSERT(d >= 0);
            n *= uint64_t(d);
        }
        HILL_ASSERT(n * ggml_block_bytes(t.type) == t.size_bytes);
        HILL_ASSERT(!header.contains(t.name));
        header[t.name] = {{"dtype", std::string(safetensors_file::dtype_name(t.type))},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + t.size_bytes}}};
        offset += t.size_bytes;
    }
    std::string h = header.dump();
    // Pad so that the data start (8 + N) is a multiple of 8, as the reference writer does.
    h.append((8 - h.size() % 8) % 8, ' ');
    std::vector<uint8_t> out(8 + h.size() + offset);
    const uint64_t n_header = h.size();
    std::memcpy(out.data(), &n_header, 8);
    std::memcpy(out.data() + 8, h.data(), h.size());
    uint8_t * p = out.data() + 8 + h.size();
    for (const safetensors_entry & t : tensors) {
        if (t.size_bytes > 0) std::memcpy(p, t.data, t.size_bytes);
        p += t.size_bytes;
    }
    return out;
}

}  // namespace hill
