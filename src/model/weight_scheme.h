// How a writer encodes a model's matrices (`hillinfer convert --type`, `make-model random --type`):
// one type for every matrix, or llama.cpp's Q4_K_M mix. Vectors (norms, biases) stay F32.
//
// q4_k_m (llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M, its rule in llama_tensor_get_type, as a fact):
// Q6_K for output.weight (token_embd.weight when the model has no output.weight), and for
// blk.N.attn_v.weight and blk.N.ffn_down.weight in the layers N that "use more bits" — the first
// and the last eighth of the n_layer layers and every third layer in between: N < n_layer / 8,
// N >= 7 · n_layer / 8, or (N - n_layer / 8) % 3 == 2; Q4_K for every other matrix. (llama.cpp's
// further cases — 70B and 8-expert models, Falcon, fused attn_qkv — do not arise for the
// architectures written here.)
//
// A matrix whose rows (ne0) are not a multiple of its type's block size falls back as llama.cpp
// does: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; and, when even that does not divide ne0 (or for
// the other quantized types), F16.
#pragma once

#include "core/ggml_type.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hill {

struct weight_scheme {
    ggml_type type = ggml_type::f16;  // of every matrix; q4_k_m: Q4_K, the mix's base
    bool q4_k_m = false;

    weight_scheme() = default;
    weight_scheme(ggml_type t, bool mix = false) : type(t), q4_k_m(mix) {}  // implicit: one type for all
    friend bool operator==(const weight_scheme &, const weight_scheme &) = default;
};

// "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "q4_k_m"
// (case-insensitive); nullopt for anything else (including the types HillInfer reads but does not
// write: Q2_K, Q3_K, IQ4_NL, IQ4_XS).
std::optional<weight_scheme> weight_scheme_from_name(std::string_view name);
std::string weight_scheme_name(const weight_scheme & s);  // "Q4_K_M", or the type's name
std::string_view weight_scheme_names();                    // the accepted names, for messages

// llama.cpp's general.file_type (llama_ftype) of the scheme: 0 all F32, 1 mostly F16, 2 Q4_0,
// 3 Q4_1, 7 Q8_0, 8 Q5_0, 9 Q5_1, 14 Q4_K (llama.cpp's Q4_K_S), 15 Q4_K_M, 16 Q5_K (Q5_K_S),
// 18 Q6_K, 32 BF16.
uint32_t weight_scheme_file_type(const weight_scheme & s);

struct weight_choice {
    ggml_type type;
    bool fallback = false;  // the scheme's type did not divide the row length (see above)
};

// The type of the matrix `name` (GGUF tensor name) with rows of ne0 elements in a model of
// n_layer layers; has_output: the model has an output.weight.
weight_choice weight_scheme_type(const weight_scheme & s, std::string_view name, int64_t ne0, int32_t n_layer,
                                 bool has_output);

}  // namespace hill
