// Element-wise and row kernels of the Llama block. Plain pointers, f32 unless stated.
#pragma once

#include <cstdint>

namespace hill {

// y[n] = x[n] / sqrt(mean(x²) + eps) * w[n]   (RMSNorm, Zhang & Sennrich 2019). y may alias x.
// Σx² in f64 (scalar) or f32 with 32 lanes (AVX2).
void rmsnorm(const float * x, const float * w, float * y, int64_t n, float eps);

// Rotary position embedding (Su et al. 2021) in the adjacent-pair layout GGUF and llama2.c store:
// for each head h and i in [0, head_dim/2), pair (x[2i], x[2i+1]) rotates by angle
// pos * freq_scale * freq_base^(-2i/head_dim). x: f32 [n_head, head_dim], in place.
// Angles, cos/sin and the rotation are computed in f64 (exact to f32 rounding at any position).
void rope(float * x, int n_head, int head_dim, int64_t pos, float freq_base, float freq_scale);

// SwiGLU (Shazeer 2020): gate[n] = silu(gate) * up, silu(x) = x / (1 + e^-x). In place on gate.
void swiglu(float * gate, const float * up, int64_t n);

// In-place softmax of x[n] (max-subtracted).
void softmax(float * x, int64_t n);

// y[n] += x[n]
void add_inplace(float * y, const float * x, int64_t n);

// f16 <-> f32 rows (F16C when available).
void fp16_to_fp32_row(const uint16_t * src, float * dst, int64_t n);
void fp32_to_fp16_row(const float * src, uint16_t * dst, int64_t n);

}  // namespace hill
