// Tensor element types as GGUF numbers them (ggml_type), with their block layouts.
//
// Block layouts (GGUF spec, "Quantization types"; ggml's ggml-common.h block structs). Multi-byte
// fields are little-endian; "d", "m", "dmin" are f16. q is the integer a weight's bits encode.
// Blocks of 32 weights (weight j < 16 is the low nibble of qs[j], weight j + 16 its high nibble):
//   Q8_0    (8)  34 B: d, int8 qs[32];                                   w = d · q
//   Q4_0    (2)  18 B: d, u8 qs[16];                                     w = d · (nib - 8)
//   Q4_1    (3)  20 B: d, m, u8 qs[16];                                  w = d · nib + m
//   Q5_0    (6)  22 B: d, u8 qh[4], u8 qs[16]; bit j of qh (a u32) is the fifth bit of weight j:
//                      q = nib | bit << 4;                               w = d · (q - 16)
//   Q5_1    (7)  24 B: d, m, u8 qh[4], u8 qs[16]; q as Q5_0;             w = d · q + m
//   IQ4_NL  (20) 18 B: d, u8 qs[16];          w = d · kvalues_iq4nl[nib] (the 16-entry non-linear table)
// Super-blocks of 256 weights (QK_K), p = 32·u + l the weight's place (u = 0..7 its 32-weight
// sub-block, l = 0..31); 16-weight sub-blocks are s16 = 2·u + l/16:
//   Q2_K   (10)  84 B: u8 scales[16], u8 qs[64], d, dmin. With u = 4·n + k (n = 0..1, k = 0..3):
//                      q = (qs[32·n + l] >> 2k) & 3; sc = scales[s16];   w = d · (sc & 15) · q - dmin · (sc >> 4)
//   Q3_K   (11) 110 B: u8 hmask[32], u8 qs[64], u8 scales[12], d. With u = 4·n + k:
//                      q = ((qs[32·n + l] >> 2k) & 3) - 4 + 4 · (bit u of hmask[l]);
//                      sc = the 6-bit scale s16 (below) - 32;             w = d · sc · q
//   Q4_K   (12) 144 B: d, dmin, u8 scales[12], u8 qs[128];
//                      q = nibble (low for even u, high for odd u) of qs[32·(u/2) + l];
//                      (sc, mn) = the 6-bit scale and min u (below);    w = d · sc · q - dmin · mn
//   Q5_K   (13) 176 B: d, dmin, u8 scales[12], u8 qh[32], u8 qs[128];
//                      q = Q4_K's nibble | (bit u of qh[l]) << 4;       w = d · sc · q - dmin · mn
//   Q6_K   (14) 210 B: u8 ql[128], u8 qh[64], int8 scales[16], d. With u = 4·n + k:
//                      q = (nibble (low for k < 2, high for k >= 2) of ql[64·n + 32·(k % 2) + l]
//                           | ((qh[32·n + l] >> 2k) & 3) << 4) - 32;    w = d · scales[s16] · q
//   IQ4_XS (23) 136 B: d, u16 scales_h, u8 scales_l[4], u8 qs[128];
//                      ls = ((scales_l[u/2] >> 4·(u % 2)) & 15) | ((scales_h >> 2u) & 3) << 4;
//                      q = kvalues_iq4nl[nibble of qs[16·u + l % 16]] (low for l < 16);  w = d · (ls - 32) · q
// The 6-bit scales packed in 12 bytes:
//   Q4_K/Q5_K, sub-block u: u < 4:  sc = scales[u] & 63,  mn = scales[u + 4] & 63;
//                           u >= 4: sc = (scales[u + 4] & 15) | (scales[u - 4] >> 6) << 4,
//                                   mn = (scales[u + 4] >> 4) | (scales[u] >> 6) << 4.
//   Q3_K, 16-weight sub-block i: (i < 8 ? scales[i] & 15 : scales[i - 8] >> 4)
//                                | ((scales[8 + i % 4] >> 2·(i / 4)) & 3) << 4.
#pragma once

#include "core/fp16.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace hill {

enum class ggml_type : uint32_t {
    f32 = 0,
    f16 = 1,
    q4_0 = 2,
    q4_1 = 3,
    q5_0 = 6,
    q5_1 = 7,
    q8_0 = 8,
    q2_k = 10,
    q3_k = 11,
    q4_k = 12,
    q5_k = 13,
    q6_k = 14,
    iq4_nl = 20,
    iq4_xs = 23,
    bf16 = 30,
};

// Every type HillInfer reads and writes, in GGUF number order.
inline constexpr ggml_type ggml_types_supported[] = {
    ggml_type::f32,  ggml_type::f16,  ggml_type::q4_0, ggml_type::q4_1,   ggml_type::q5_0,
    ggml_type::q5_1, ggml_type::q8_0, ggml_type::q2_k, ggml_type::q3_k,   ggml_type::q4_k,
    ggml_type::q5_k, ggml_type::q6_k, ggml_type::iq4_nl, ggml_type::iq4_xs, ggml_type::bf16,
};

constexpr int64_t qk8_0 = 32;
constexpr int64_t qk4_0 = 32;
constexpr int64_t qk4_1 = 32;
constexpr int64_t qk5_0 = 32;
constexpr int64_t qk5_1 = 32;
constexpr int64_t qk4_nl = 32;
constexpr int64_t qk_k = 256;  // weights per k-quant / IQ4_XS super-block

// IQ4_NL and IQ4_XS: the value of each 4-bit index (ggml's kvalues_iq4nl).
inline constexpr int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                             1,    13,   25,  38,  53,  69,  89,  113};

struct block_q8_0 {
    f16_bits d;  // scale
    int8_t qs[qk8_0];
};
static_assert(sizeof(block_q8_0) == 34);

struct block_q4_0 {
    f16_bits d;  // scale
    uint8_t qs[qk4_0 / 2];
};
static_assert(sizeof(block_q4_0) == 18);

struct block_q4_1 {
    f16_bits d;  // scale
    f16_bits m;  // offset
    uint8_t qs[qk4_1 / 2];
};
static_assert(sizeof(block_q4_1) == 20);

struct block_q5_0 {
    f16_bits d;     // scale
    uint8_t qh[4];  // fifth bits, a little-endian u32
    uint8_t qs[qk5_0 / 2];
};
static_assert(sizeof(block_q5_0) == 22);

struct block_q5_1 {
    f16_bits d;  // scale
    f16_bits m;  // offset
    uint8_t qh[4];
    uint8_t qs[qk5_1 / 2];
};
static_assert(sizeof(block_q5_1) == 24);

struct block_iq4_nl {
    f16_bits d;
    uint8_t qs[qk4_nl / 2];
};
static_assert(sizeof(block_iq4_nl) == 18);

struct block_q2_k {
    uint8_t scales[qk_k / 16];  // per 16 weights: scale (low nibble) and min (high nibble)
    uint8_t qs[qk_k / 4];
    f16_bits d;
    f16_bits dmin;
};
static_assert(sizeof(block_q2_k) == 84);

struct block_q3_k {
    uint8_t hmask[qk_k / 8];
    uint8_t qs[qk_k / 4];
    uint8_t scales[12];  // 16 6-bit scales
    f16_bits d;
};
static_assert(sizeof(block_q3_k) == 110);

struct block_q4_k {
    f16_bits d;
    f16_bits dmin;
    uint8_t scales[12];  // 8 6-bit scales and 8 6-bit mins
    uint8_t qs[qk_k / 2];
};
static_assert(sizeof(block_q4_k) == 144);

struct block_q5_k {
    f16_bits d;
    f16_bits dmin;
    uint8_t scales[12];
    uint8_t qh[qk_k / 8];
    uint8_t qs[qk_k / 2];
};
static_assert(sizeof(block_q5_k) == 176);

struct block_q6_k {
    uint8_t ql[qk_k / 2];
    uint8_t qh[qk_k / 4];
    int8_t scales[qk_k / 16];
    f16_bits d;
};
static_assert(sizeof(block_q6_k) == 210);

struct block_iq4_xs {
    f16_bits d;
    uint16_t scales_h;
    uint8_t scales_l[qk_k / 64];
    uint8_t qs[qk_k / 2];
};
static_assert(sizeof(block_iq4_xs) == 136);

// The types HillInfer reads and writes; anything else is "unsupported" (not "unknown").
std::optional<ggml_type> ggml_type_from_u32(uint32_t v);
std::string_view ggml_type_name(ggml_type t);
std::optional<ggml_type> ggml_type_from_name(std::string_view name);  // "f32", "q8_0", "q4_k", ... (case-insensitive)

// The names of all supported types, comma-separated ("F32, F16, Q4_0, ..."), for error messages.
std::string_view ggml_type_names_supported();

// Weights per block (1 for float types) and bytes per block.
int64_t ggml_block_size(ggml_type t);
size_t ggml_block_bytes(ggml_type t);

// Bytes of a row of n elements; nullopt when n is negative, not a multiple of the block size, or
// the byte count overflows size_t.
std::optional<size_t> ggml_row_bytes(ggml_type t, int64_t n);

}  // namespace hill
