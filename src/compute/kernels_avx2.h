// AVX2/FMA/F16C kernels (private to src/compute). Defined in kernels_avx2.cpp, the only file
// compiled with -mavx2 -mfma -mf16c; call them only when kernel_mode_get() == kernel_mode::avx2.
// Each has a scalar reference in matmul.cpp, ops.cpp or attention.cpp that tests compare it with.
//
// kernels_avx2.cpp must not call inline or template functions that other files also use (fp16.h
// conversions, weight_view::row, std:: algorithms): the linker keeps one copy of such a function,
// and it could be the AVX2-compiled one, which would then run on CPUs without AVX2. Hence plain
// pointers here, and the file's own helpers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/ggml_type.h"

namespace hill::avx2 {

// y[t · ldy + r] = row r of W · x_t for r in [0, n_rows), t in [0, n_tok); row r starts at
// w + r · row_bytes, x_t (n_cols floats) at x + t · ldx. type: any ggml_type; n_cols a multiple of
// the block size. Accumulates in f32, each (t, r) in an order that depends only on n_cols and on
// r (its place in the range: groups of four from the start, then up to three single rows), so that
// y_t does not depend on n_tok or on the other x rows (the batch invariance of matmul.h). Reads
// each weight once per 64 activation rows.
void gemv_batch_rows(ggml_type type, const uint8_t * w, size_t row_bytes, int64_t n_cols, const float * x, int64_t ldx,
                     int64_t n_tok, float * y, int64_t ldy, int64_t n_rows);

// dst[n] = the row of n weights of `type` as f32, bit for bit what matmul.cpp's scalar
// dequantize_row gives, for the types the products decode to f32 weights (all quantized types but
// Q8_0 and Q4_0; n a multiple of the block size): returns true. Any other type: false, nothing written.
bool dequantize_row(ggml_type type, const uint8_t * src, float * dst, int64_t n);

// The int8 product of q8_dot.h (defined in q8_dot_avx2.cpp, under this header's rules): what
// int8_dot_rows_scalar gives, bit for bit, with the same arguments (type: int8_dot_supported).
// One activation row: weight rows in groups of four (the rest one by one for the 32-weight types;
// the k-quants always one by one); several: each weight block unpacked once per 4 activation rows.
// q8_dot.h's quantize_activation_row, bit for bit, for blocks of 256 (k_blocks: act_q8k) or 32
// (act_q8).
void quantize_activation_row(bool k_blocks, const float * x, int64_t n, void * dst);

void int8_dot_rows(ggml_type type, const uint8_t * w, size_t row_bytes, int64_t n_cols, const uint8_t * xq, size_t ldq,
                   int64_t n_tok, float * y, int64_t ldy, int64_t n_rows);

// Σ a[i]·b[i], f32 accumulation.
float dot_f32(const float * a, const float * b, int64_t n);
float dot_f16(const float * a, const uint16_t * b, int64_t n);

// y[n] += a · x[n]
void axpy_f32(float a, const float * x, float * y, int64_t n);
void axpy_f16(float a, const uint16_t * x, float * y, int64_t n);

// Σ x[i]², f32 accumulation.
float sum_squares(const float * x, int64_t n);

// f16 <-> f32 rows, round to nearest even.
void fp16_to_fp32_row(const uint16_t * src, float * dst, int64_t n);
void fp32_to_fp16_row(const float * src, uint16_t * dst, int64_t n);

// Keys per chunk of attention_group_accumulate: one max, one rescale of the accumulator and one
// pass over the V rows per chunk. On the AMD EPYC test VM (K/V in cache), 32 and 128 keys measured
// within 5% of 64 for head_dim 8 to 128 (one query head). Callers that feed the keys in blocks keep
// them multiples of it, so that the chunks (and the result) are those of one pass.
inline constexpr int attn_chunk = 64;

// Most query heads per attention_group_accumulate call (its scores and exps, f32 [8, 64], live on the
// stack): callers split a larger group of query heads into calls of up to this many.
inline constexpr int attn_group_max = 8;

// The online softmax of n_q (1 .. attn_group_max) query heads that share one KV head, over n more
// keys, fused: attention_head_accumulate of attention.h for each head, for head_dim % 8 == 0 and
// kv_type f32 or f16 (n_q = 1 is that function's AVX2 path). q, acc: f32 [n_q, head_dim]; m, l:
// [n_q], each head's running softmax_state (m, l). k, v: the KV head's first element; key j is row
// rows[j] (rows == nullptr: row j), rows row_bytes apart. n_ahead >= 0: the caller's next keys,
// j in [n, n + n_ahead) (the same rows[j], or row j), exist and may be prefetched.
//
// Keys go in chunks of attn_chunk. Per chunk: the scores of all n_q heads, each K row loaded (f16:
// widened) once for all of them, in register tiles of 2 keys × 4 heads (4 × 2 and 8 × 1 for the
// remaining heads); per head the chunk max, one rescale of its acc if its running max grew,
// p = e^(s - m) by exp_nonpositive_row's polynomial, and the chunk's Σp summed in f32 and added to l
// in double; then acc += Σ p·V per slice of up to 64 columns: each V row loaded once per register
// tile of 4 heads × 16 columns or 2 heads × 32 (slices of 5 to 8 blocks of 8 columns), or per head
// (slices of up to 4 blocks, which sum in 2 or 4 interleaved accumulator sets; and n_q = 1). The
// arithmetic of each (head, key) does not depend on n_q, on the tiles or on the other heads — a
// score is the 8-lane f32 FMA chain over the columns, reduced as ((d0 + d1) + (d2 + d3)) + ((d4 + d5)
// + (d6 + d7)), times scale; each column's p·V sum runs over the keys in order — so each head's acc,
// m and l are those of the call for that head alone, bit for bit. With K/V in cache (head_dim 128,
// f16, 4 query heads per KV head) the kernel took 9-12 ns per key per query head on the AMD EPYC
// test VM, against 14-18 ns one head at a time; from DRAM it is bound by memory reads. K/V rows of a
// cache line or more are prefetched 64 keys ahead (among the n + n_ahead keys).
void attention_group_accumulate(const float * q, int n_q, ggml_type kv_type, const uint8_t * k, const uint8_t * v,
                                const int32_t * rows, int64_t n, int64_t n_ahead, size_t row_bytes, int head_dim,
                                float scale, float * acc, float * m, double * l);

// y[i] = e^x[i] for x[i] <= 0 (0 below -87.3365, where e^x is under FLT_MIN), relative error at
// most 8.4e-8: the exponential of the attention kernel, row by row for its test.
void exp_nonpositive_row(const float * x, float * y, int64_t n);

}  // namespace hill::avx2

namespace hill::avx_vnni {

// avx2::int8_dot_rows built with AVX-VNNI (q8_dot_vnni.cpp): the same bits; call it only when
// cpu_has_avx_vnni() (kernel_mode.h).
void int8_dot_rows(ggml_type type, const uint8_t * w, size_t row_bytes, int64_t n_cols, const uint8_t * xq, size_t ldq,
                   int64_t n_tok, float * y, int64_t ldy, int64_t n_rows);

// The prefill product of q8_dot.h's int8_gemm_rows_scalar, bit for bit (type: int8_gemm_supported),
// with xu: the activation rows, ldq bytes apart: for the 32-weight types act_q8 rows whose q bytes
// are shifted to unsigned (q8 + 128, i.e. q8 ^ 0x80), for the k-quants act_q8k rows as they are;
// y[t · ldy + r] for r in [0, n_rows), t in [0, n_tok). Weight rows in groups of 8 (the lanes of a
// vector). Its scratch is the calling thread's, kept between calls: ~128 KiB of prepared weight
// blocks (32-weight types), or 2 · 8 words per activation row of a ~128 KiB chunk (k-quants).
void int8_gemm_rows(ggml_type type, const uint8_t * w, size_t row_bytes, int64_t n_cols, const uint8_t * xu, size_t ldq,
                    int64_t n_tok, float * y, int64_t ldy, int64_t n_rows);

}  // namespace hill::avx_vnni

namespace hill::avx512_vnni {

// The avx_vnni kernels built with AVX-512 (q8_dot_avx512.cpp): the same bits; int8_gemm_rows takes
// 16 weight rows per 512-bit vector. Call them only when cpu_has_avx512_vnni() (kernel_mode.h).
void int8_dot_rows(ggml_type type, const uint8_t * w, size_t row_bytes, int64_t n_cols, const uint8_t * xq, size_t ldq,
                   int64_t n_tok, float * y, int64_t ldy, int64_t n_rows);
void int8_gemm_rows(ggml_type type, const uint8_t * w, size_t row_bytes, int64_t n_cols, const uint8_t * xu, size_t ldq,
                    int64_t n_tok, float * y, int64_t ldy, int64_t n_rows);

}  // namespace hill::avx512_vnni
