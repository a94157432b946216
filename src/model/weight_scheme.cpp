#include "model/weight_scheme.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace hill {

namespace {

constexpr ggml_type writable[] = {ggml_type::f32,  ggml_type::f16,  ggml_type::bf16, ggml_type::q8_0,
                                  ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1,
                                  ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k};

// llama.cpp's use_more_bits(i_layer, n_layer).
bool use_more_bits(int64_t il, int64_t n_layer) {
    return il < n_layer / 8 || il >= 7 * n_layer / 8 || (il - n_layer / 8) % 3 == 2;
}

// The layer of "blk.N.<rest>" when <rest> is `rest`; -1 otherwise.
int64_t layer_of(std::string_view name, std::string_view rest) {
    if (name.substr(0, 4) != "blk.") return -1;
    const size_t dot = name.find('.', 4);
    if (dot == std::string_view::npos || name.substr(dot + 1) != rest) return -1;
    int64_t il = -1;
    const auto [p, ec] = std::from_chars(name.data() + 4, name.data() + dot, il);
    return ec == std::errc() && p == name.data() + dot ? il : -1;
}

}  // namespace

std::optional<weight_scheme> weight_scheme_from_name(std::string_view name) {
    std::string low(name);
    std::transform(low.begin(), low.end(), low.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (low == "q4_k_m") return weight_scheme(ggml_type::q4_k, true);
    const auto t = ggml_type_from_name(low);
    if (!t || std::find(std::begin(writable), std::end(writable), *t) == std::end(writable)) return std::nullopt;
    return weight_scheme(*t);
}

std::string weight_scheme_name(const weight_scheme & s) {
    return s.q4_k_m ? "Q4_K_M" : std::string(ggml_type_name(s.type));
}

std::string_view weight_scheme_names() {
    return "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, q4_k_m";
}

uint32_t weight_scheme_file_type(const weight_scheme & s) {
    if (s.q4_k_m) return 15;
    switch (s.type) {
        case ggml_type::f32: return 0;
        case ggml_type::f16: return 1;
        case ggml_type::q4_0: return 2;
        case ggml_type::q4_1: return 3;
        case ggml_type::q8_0: return 7;
        case ggml_type::q5_0: return 8;
        case ggml_type::q5_1: return 9;
        case ggml_type::q4_k: return 14;
        case ggml_type::q5_k: return 16;
        case ggml_type::q6_k: return 18;
        case ggml_type::bf16: return 32;
        default: return 0;
    }
}

weight_choice weight_scheme_type(const weight_scheme & s, std::string_view name, int64_t ne0, int32_t n_layer,
                                 bool has_output) {
    ggml_type t = s.type;
    if (s.q4_k_m) {
        const bool output = name == "output.weight" || (!has_output && name == "token_embd.weight");
        int64_t il = layer_of(name, "attn_v.weight");
        if (il < 0) il = layer_of(name, "ffn_down.weight");
        if (output || (il >= 0 && use_more_bits(il, n_layer))) t = ggml_type::q6_k;
    }
    if (ne0 % ggml_block_size(t) == 0) return {t, false};
    switch (t) {
        case ggml_type::q4_k: t = ggml_type::q5_0; break;
        case ggml_type::q5_k: t = ggml_type::q5_1; break;
        case ggml_type::q6_k: t = ggml_type::q8_0; break;
        default: t = ggml_type::f16; break;
    }
    if (ne0 % ggml_block_size(t) != 0) t = ggml_type::f16;
    return {t, true};
}

}  // namespace hill
