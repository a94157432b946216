#include "core/ggml_type.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace hill {

std::optional<ggml_type> ggml_type_from_u32(uint32_t v) {
    for (ggml_type t : ggml_types_supported) {
        if (uint32_t(t) == v) return t;
    }
    return std::nullopt;
}

std::string_view ggml_type_name(ggml_type t) {
    switch (t) {
        case ggml_type::f32: return "F32";
        case ggml_type::f16: return "F16";
        case ggml_type::q4_0: return "Q4_0";
        case ggml_type::q4_1: return "Q4_1";
        case ggml_type::q5_0: return "Q5_0";
        case ggml_type::q5_1: return "Q5_1";
        case ggml_type::q8_0: return "Q8_0";
        case ggml_type::q2_k: return "Q2_K";
        case ggml_type::q3_k: return "Q3_K";
        case ggml_type::q4_k: return "Q4_K";
        case ggml_type::q5_k: return "Q5_K";
        case ggml_type::q6_k: return "Q6_K";
        case ggml_type::iq4_nl: return "IQ4_NL";
        case ggml_type::iq4_xs: return "IQ4_XS";
        case ggml_type::bf16: return "BF16";
    }
    return "?";
}

std::optional<ggml_type> ggml_type_from_name(std::string_view name) {
    std::string up(name);
    std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return char(std::toupper(c)); });
    for (ggml_type t : ggml_types_supported) {
        if (ggml_type_name(t) == up) return t;
    }
    return std::nullopt;
}

std::string_view ggml_type_names_supported() {
    static const std::string names = [] {
        std::string s;
        for (ggml_type t : ggml_types_supported) {
            if (!s.empty()) s += ", ";
            s += ggml_type_name(t);
        }
        return s;
    }();
    return names;
}

int64_t ggml_block_size(ggml_type t) {
    switch (t) {
        case ggml_type::f32:
        case ggml_type::f16:
        case ggml_type::bf16: return 1;
        case ggml_type::q4_0:
        case ggml_type::q4_1:
        case ggml_type::q5_0:
        case ggml_type::q5_1:
        case ggml_type::q8_0:
        case ggml_type::iq4_nl: return 32;
        case ggml_type::q2_k:
        case ggml_type::q3_k:
        case ggml_type::q4_k:
        case ggml_type::q5_k:
        case ggml_type::q6_k:
        case ggml_type::iq4_xs: return qk_k;
    }
    return 1;
}

size_t ggml_block_bytes(ggml_type t) {
    switch (t) {
        case ggml_type::f32: return 4;
        case ggml_type::f16: return 2;
        case ggml_type::bf16: return 2;
        case ggml_type::q4_0: return sizeof(block_q4_0);
        case ggml_type::q4_1: return sizeof(block_q4_1);
        case ggml_type::q5_0: return sizeof(block_q5_0);
        case ggml_type::q5_1: return sizeof(block_q5_1);
        case ggml_type::q8_0: return sizeof(block_q8_0);
        case ggml_type::q2_k: return sizeof(block_q2_k);
        case ggml_type::q3_k: return sizeof(block_q3_k);
        case ggml_type::q4_k: return sizeof(block_q4_k);
        case ggml_type::q5_k: return sizeof(block_q5_k);
        case ggml_type::q6_k: return sizeof(block_q6_k);
        case ggml_type::iq4_nl: return sizeof(block_iq4_nl);
        case ggml_type::iq4_xs: return sizeof(block_iq4_xs);
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
