// Integer dot products of quantized weights with 8-bit quantized activations: the fast path of
// the weight products (matmul.h, matmul_mode::int8), as llama.cpp computes them on the CPU (its
// vec_dot kernels against Q8_0/Q8_1/Q8_K activations; the block layouts are the GGUF spec's,
// core/ggml_type.h). Each activation row is quantized once per product, per block of 32 (for the
// 32-weight types) or 256 (for the k-quants) with its own f32 scale, independently of the other
// rows: the product of a row still does not depend on the batch (matmul.h, "Batch invariance").
//
// The weight types with an integer dot product (int8_dot_supported):
//   Q8_0, Q4_0, Q5_0, IQ4_NL (w = d · q, q signed)      against act_q8 blocks of 32
//   Q4_1, Q5_1              (w = d · q + m, q unsigned) against act_q8 blocks (their sum Σ q8)
//   Q4_K, Q5_K, Q6_K        (per super-block of 256)    against act_q8k blocks of 256
// Q2_K, Q3_K and IQ4_XS (and the float types) keep the f32 path.
//
// Arithmetic. With activations x ≈ dx · q8 (act block scale dx), one block's contribution is
//   32-weight blocks: d · dx · Σ q·q8 (+ m · dx · Σ q8 for Q4_1/Q5_1);
//   k-quants:         d · dx · Σ_g sc_g Σ_{i in g} q·q8 − dm · dx · Σ_g mc_g · Σ_{i in g} q8
//                     (g: the 16-weight groups; Q4_K/Q5_K: sc, mc = the sub-block's scale and min,
//                     dm = dmin; Q6_K: q = the unsigned 6-bit value, mc_g = 32 · sc_g, dm = d),
// with the integer sums exact in int32 (they cannot overflow: |Σ| < 2^28 per block). The f32 part,
// in the order both implementations use (fma: one rounding):
//   32-weight blocks: 8 lane accumulators; per block a_i = fma(d · dx, float(s_i), a_i), s_i the
//                     integer sum over the block's weights 4i .. 4i + 3 (the lanes of AVX2's
//                     madd); the offset types also o = fma(m · dx, float(Σ q8), o) per block;
//                     y = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) + o.
//   k-quants:         8 lane accumulators; per block, lane i's integer sums: s_i = Σ_u sc_{2u + i/4}
//                     · Σ of the products of weights 32u + 4i .. 32u + 4i + 3 (u: the 32-weight
//                     sub-blocks; the lanes of AVX2's madd summed over the sub-blocks) and
//                     m_i = mc_{2i} · Σ_{g=2i} q8 + mc_{2i+1} · Σ_{g=2i+1} q8; Q6_K
//                     a_i = fma(d · dx, float(s_i − m_i), a_i) (subtracted exactly first), Q4_K/Q5_K
//                     a_i = fma(d · dx, float(s_i), a_i), then a_i = fma(−(dmin · dx), float(m_i), a_i);
//                     y = the same sum of the 8 lanes as the 32-weight blocks (no o).
// So the AVX2 kernels (kernels_avx2.h, int8_dot_rows) give the scalar reference's bits exactly.
//
// Error against the exact f32 path: only the activation's rounding to 8 bits, |x − dx · q8| <= dx / 2
// with dx = max|x| / 127 of its block (32 or 256 values), plus f32 rounding; see the tests
// (test_q8_dot) for the bound they check and docs/benchmarks.md for the logit error.
#pragma once

#include "core/ggml_type.h"

#include <cstddef>
#include <cstdint>

namespace hill {

// One activation block of 32 values: x[j] ≈ d · q[j].
struct act_q8 {
    float d;      // max|x| / 127 (0 for a block of zeros)
    int32_t sum;  // Σ q[j]
    int8_t q[32];
};
static_assert(sizeof(act_q8) == 40);

// One activation block of 256 values (the k-quants' super-block): x[j] ≈ d · q[j].
struct act_q8k {
    float d;             // max|x| / 127 over the 256 values
    int16_t bsum[16];    // Σ q over each 16 values
    int8_t q[256];
};
static_assert(sizeof(act_q8k) == 292);

// Whether weights of `type` multiply through int8_dot_rows.
bool int8_dot_supported(ggml_type type);

// Values per activation block for weights of `type` (int8_dot_supported): 32 or 256.
int64_t int8_act_block_size(ggml_type type);

// Bytes of one quantized activation row of n values (n a multiple of int8_act_block_size(type)).
size_t int8_act_row_bytes(ggml_type type, int64_t n);

// dst = x[n] quantized for weights of `type`: per block d = max|x| / 127, q = x · (1 / d)
// rounded to nearest (ties to even), sums as above. dst: int8_act_row_bytes(type, n) bytes,
// act_q8 or act_q8k blocks (any alignment of 4). The AVX2 kernel mode gives the same bytes.
void quantize_activation_row(ggml_type type, const float * x, int64_t n, void * dst);

// Scalar reference of the int8 product: y[t · ldy + r] = row r of W · activation row t for r in
// [0, n_rows), t in [0, n_tok). Row r starts at w + r · row_bytes (n_cols weights of `type`,
// int8_dot_supported); activation row t at xq + t · ldq bytes (quantize_activation_row of n_cols
// values). The arithmetic described above, per (t, r) independent of n_tok and of the other rows.
void int8_dot_rows_scalar(ggml_type type, const uint8_t * w, size_t row_bytes, int64_t n_cols, const uint8_t * xq,
                          size_t ldq, int64_t n_tok, float * y, int64_t ldy, int64_t n_rows);

// The prefill product (matmul.h, gemm above gemm_batch_max_tok rows) of the signed 32-weight types
// and the k-quants (int8_gemm_supported: Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_K, Q5_K, Q6_K), in another order
// than int8_dot_rows: one f32 accumulator per (t, r); per block, 32-weight types
// a = fma(d · dx, float(s), a) with s = Σ_j q_j · q8_j over the block's 32 weights; k-quants the
// integer sums Σ, Σm above over the whole super-block, then Q6_K a = fma(d · dx, float(Σ − Σm), a),
// Q4_K/Q5_K a = fma(d · dx, float(Σ), a), a = fma(−(dmin · dx), float(Σm), a); y = a. Same arguments
// as int8_dot_rows_scalar. Its VNNI kernels (kernels_avx2.h, int8_gemm_rows) take 8 weight rows
// (AVX-VNNI) or 16 (AVX-512) as the lanes of a vector, so that one broadcast of
// 4 activation bytes serves them all, and give these bits.
bool int8_gemm_supported(ggml_type type);
void int8_gemm_rows_scalar(ggml_type type, const uint8_t * w, size_t row_bytes, int64_t n_cols, const uint8_t * xq,
                           size_t ldq, int64_t n_tok, float * y, int64_t ldy, int64_t n_rows);

// Which build of the kernels the AVX2 kernel mode's int8 products run (kernels_avx2.h; all give
// the same bits): plain AVX2 (maddubs + madd), AVX-VNNI (256-bit vpdpbusd / vpdpwssd, and the
// prefill kernel), or AVX-512 (the same 256-bit instructions in their EVEX form, and the prefill
// kernel at 16 rows per vector). Default: the last this CPU has
// (int8_isa_supported: cpu_has_avx_vnni, cpu_has_avx512_vnni); set() asserts that the CPU has it.
// Tests switch between them to check each.
enum class int8_isa { avx2, avx_vnni, avx512_vnni };
bool int8_isa_supported(int8_isa isa);
int8_isa int8_isa_get();
void int8_isa_set(int8_isa isa);

}  // namespace hill
