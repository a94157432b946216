// Element-wise and row kernels of the transformer blocks (Llama, Qwen, OPT). Plain pointers, f32
// unless stated.
#pragma once

#include <cstdint>

namespace hill {

// y[n] = x[n] / sqrt(mean(x²) + eps) * w[n]   (RMSNorm, Zhang & Sennrich 2019). y may alias x.
// Σx² in f64 (scalar) or f32 with 32 lanes (AVX2).
void rmsnorm(const float * x, const float * w, float * y, int64_t n, float eps);

// y[n] = (x[n] - mean(x)) / sqrt(var(x) + eps) * w[n] + b[n]   (LayerNorm, Ba et al. 2016; the
// biased variance, as torch.nn.LayerNorm). Mean and variance in f64. y may alias x.
void layernorm(const float * x, const float * w, const float * b, float * y, int64_t n, float eps);

// Which pairs of a head's dimensions RoPE rotates together.
//   adjacent_pairs: (x[2i], x[2i+1]): GGUF `llama`, llama2.c (Meta's original layout);
//   rotate_half:    (x[i], x[i + head_dim/2]): Hugging Face checkpoints, GGUF `qwen`/`qwen2`
//                   (llama.cpp's NEOX type). The same model in the other layout has its Q and K
//                   rows permuted within each head; the attention scores are identical.
enum class rope_layout { adjacent_pairs, rotate_half };

// Rotary position embedding (Su et al. 2021): for each head h and pair i in [0, head_dim/2), the
// pair rotates by angle pos * inv_freq[i]. x: f32 [n_head, head_dim], in place; inv_freq: f64
// [head_dim/2] (see rope_inv_freq). Angles, cos/sin and the rotation are computed in f64 (exact to
// f32 rounding at any position).
void rope(float * x, int n_head, int head_dim, int64_t pos, const double * inv_freq, rope_layout layout);

// out[head_dim/2]: inv_freq[i] = freq_scale * freq_base^(-2i/head_dim) / freq_factors[i]
// (freq_factors: nullptr for all 1; Llama 3.1 `rope_scaling` and GGUF `rope_freqs.weight`).
void rope_inv_freq(int head_dim, float freq_base, float freq_scale, const float * freq_factors, double * out);

// rope() in the adjacent-pair layout with angle pos * freq_scale * freq_base^(-2i/head_dim).
void rope(float * x, int n_head, int head_dim, int64_t pos, float freq_base, float freq_scale);

// SwiGLU (Shazeer 2020): gate[n] = silu(gate) * up, silu(x) = x / (1 + e^-x). In place on gate.
void swiglu(float * gate, const float * up, int64_t n);

// GeGLU (Shazeer 2020) with the tanh approximation of GELU (Hendrycks & Gimpel 2016), as Gemma
// uses it (`gelu_pytorch_tanh`): gate[n] = gelu(gate) * up, gelu(x) = x/2 · (1 + tanh(√(2/π) (x +
// 0.044715 x³))). In place on gate.
void geglu(float * gate, const float * up, int64_t n);

// Soft-capping (Gemma 2): x[n] = cap · tanh(x / cap), in place; cap > 0.
void softcap(float * x, int64_t n, float cap);

// relu: x[n] = max(x, 0), in place.
void relu(float * x, int64_t n);

// In-place softmax of x[n] (max-subtracted).
void softmax(float * x, int64_t n);

// y[n] += x[n]
void add_inplace(float * y, const float * x, int64_t n);

// y[n_rows, n_cols] += b[n_cols] on every row (a linear layer's bias).
void add_bias_rows(float * y, const float * b, int64_t n_rows, int64_t n_cols);

// f16 <-> f32 rows (F16C when available).
void fp16_to_fp32_row(const uint16_t * src, float * dst, int64_t n);
void fp32_to_fp16_row(const float * src, uint16_t * dst, int64_t n);

}  // namespace hill
