#include "core/ggml_type.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace hill {

std::optional<ggml_type> ggml_type_from_u32(uint32_t v) {
    switch (v) {
        case 0: return ggml_type::f32;
        case 1: return ggml_type::f16;
        case 2: return ggml_type::q4_0;
        case 8: return ggml_type::q8_0;
        case 30: return ggml_type::bf16;
        default: return std::nullopt;
    }
}

std::string_view ggml_type_name(ggml_type t) {
    switch (t) {
        case ggml_type::f32: return "F32";
        case ggml_type::f16: return "F16";
        case ggml_type::q4_0: return "Q4_0";
        case ggml_type::q8_0: return "Q8_0";
        case ggml_type::bf16: return "BF16";
    }
    return "?";
}

std::optional<ggml_type> ggml_type_from_name(std::string_view name) {
    std::string up(name);
    std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return char(std::toupper(c)); });
    for (ggml_type t : {ggml_type::f32, ggml_type::f16, ggml_type::q4_0, ggml_type::q8_0, ggml_type::bf16}) {
        if (ggml_type_name(t) == up) return t;
    }
    return std::nullopt;
}

int64_t ggml_block_size(ggml_type t) {
    switch (t) {
        case ggml_type::q4_0: return qk4_0;
        case ggml_type::q8_0: return qk8_0;
        default: return 1;
    }
}

size_t ggml_block_bytes(ggml_type t) {
    switch (t) {
        case ggml_type::f32: return 4;
        case ggml_type::f16: return 2;
        case ggml_type::bf16: return 2;
        case ggml_type::q4_0: return sizeof(block_q4_0);
        case ggml_type::q8_0: return sizeof(block_q8_0);
    }
    return 0;
}

std::optional<size_t> ggml_row_bytes(ggml_type t, int64_t n) {
    const int64_t bs = ggml_block_size(t);
    if (n < 0 || n % bs != 0) return std::nullopt;
    size_t bytes = 0;
    if (__builtin_mul_overflow(size_t(n / bs), ggml_block_bytes(t), &bytes)) return std::nullopt;
    return bytes;
}

}  // namespace hill
