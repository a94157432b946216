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

// One query head's online softmax over n more keys, fused: attention_head_accumulate of
// attention.h for head_dim % 8 == 0 and kv_type f32 or f16, with the running state (m, l) of its
// softmax_state. k, v: the KV head's first element; key j is row rows[j] (rows == nullptr: row j),
// rows row_bytes apart. Keys go in chunks of 64: scores, the chunk max, one rescale of acc if the
// running max grew, p = e^(s - m) by exp_nonpositive_row's polynomial, the chunk's Σp summed in
// f32 and added to l in double, then acc += Σ p·V. Scores, exps and acc in f32; f16 K/V widened
// on the fly. K/V rows of a cache line or more are prefetched 64 keys ahead.
void attention_head_accumulate(const float * q, ggml_type kv_type, const uint8_t * k, const uint8_t * v,
                               const int32_t * rows, int64_t n, size_t row_bytes, int head_dim, float scale,
                               float * acc, float & m, double & l);

// y[i] = e^x[i] for x[i] <= 0 (0 below -87.3365, where e^x is under FLT_MIN), relative error at
// most 8.4e-8: the exponential of the attention kernel, row by row for its test.
void exp_nonpositive_row(const float * x, float * y, int64_t n);

}  // namespace hill::avx2
