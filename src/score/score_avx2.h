// AVX2/FMA/F16C kernels of the host scorer and the scoring copy (private to src/score). Defined in
// score_avx2.cpp and score_packed.cpp (and softmax_avx2.cpp, copy_fields_avx2.cpp), compiled for AVX2
// (score/sources.cmake); call them only when kernel_mode_get() == kernel_mode::avx2. Each has a scalar reference in
// host_scorer.cpp (dots_u4_i8, dots_u3_i8, dots_u2_i8: in quant_copy.cpp) that tests compare it with.
//
// Same rule as compute/kernels_avx2.h: score_avx2.cpp calls no inline or template function that other
// files also use (fp16.h, std:: algorithms), since the linker keeps one copy of such a function and it
// could be the AVX2-compiled one. Hence plain pointers here, and the file's own helpers.
//
// Shapes: q holds n_q query heads of n elements each, outermost first. A key head vector (one token,
// one KV head) is n elements at a byte pointer: f32, f16 bits, int8 or packed int4, as the kernel's
// name says.
#pragma once

#include <cstdint>

namespace hill::score_avx2 {

// A block of n_k keys k[0..n_k) against n_q query heads:
//   out[t · n_q + h] = Σ_i q[h · n + i] · k[t][i]      (out: [n_k, n_q])
// q f32 [n_q, n]; keys f32, f16 or int8 values; f32 accumulation. The result of one (t, h) does not
// depend on n_k or on t's place in the block.
void dots_f32(const float * q, int n_q, const uint8_t * const * k, int n_k, int n, float * out);
void dots_f16(const float * q, int n_q, const uint8_t * const * k, int n_k, int n, float * out);
void dots_i8(const float * q, int n_q, const uint8_t * const * k, int n_k, int n, float * out);

// The same with q int8 [n_q, n] and int8 keys, all values in [-127, 127] (the kernel relies on it:
// |k|·q pairs fit int16). Exact int32 accumulation.
void dots_i8_i8(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out);

// int4 keys of the scoring copy against int8 query heads: k[t] points at one packed head vector of n
// elements (n even), packed as quant_copy.h describes (blocks of 32, the last one n mod 32; nibbles
// k̂ + 8 in [1, 15]); q int8 [n_q, n] in [-127, 127]:
//   out[t · n_q + h] = Σ_i q[h · n + i] · nibble_i(k[t])      (out: [n_k, n_q])
// exact in int32: the dot with k̂ + 8, from which the caller subtracts 8 · Σ_i q[h · n + i]. Asserted
// nowhere: n <= score_max_head_dim keeps the sums far inside int32.
// Defined in score_packed.cpp, here (AVX2) and in score_vnni / score_avx512 below.
void dots_u4_i8(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out);
// The same with int2 keys (n a multiple of 4), packed as quant_copy.h describes (blocks of 32, the last
// one n mod 32; 2-bit fields u in [0, 3] for the levels 2u − 3): the dot with u, from which the caller
// gets the one with 2u − 3 as 2 · dot − 3 · Σ_i q[h · n + i].
void dots_u2_i8(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out);
// The same with int3 keys (n a multiple of 8), packed as quant_copy.h describes (blocks of 32, the last
// one n mod 32; 3-bit fields u in [0, 7] for the levels 2u − 7): the dot with u, from which the caller
// gets the one with 2u − 7 as 2 · dot − 7 · Σ_i q[h · n + i].
void dots_u3_i8(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out);

// The softmax aggregate's weights of one KV head's `group` query heads, summed in head order, for n
// tokens (score/head_softmax.h): acc[t] = Σ_h w(t, h) with
//   w(t, h) = softmax_weight(float(mul · dots[t · group + h] − offset[h]) · q_scale[h] · s_k[t],
//                            c, b ? b[h] : 0),
// the sum w(t, 0) + w(t, 1) + … left to right: the same bits as those scalar expressions (defined in
// softmax_avx2.cpp, built without FMA contraction; the scalar reference is quant_copy.cpp's).
// dots int32 [n, group]; offset, q_scale (and b) [group]; s_k, acc [n].
void softmax_group(const int32_t * dots, int group, int32_t mul, const int32_t * offset, const float * q_scale,
                   const float * s_k, float c, const float * b, int n, float * acc);

// The scoring copy's quantization of m <= 8 head vectors of one key row (quant_copy.h, "Method"), before
// packing: k f16 bits (f16) or f32 [m, n] (outermost first), rc f32 [m, n] the reciprocals of their channel
// scales; per head h, amax[h] = max_i |k̃_i| (k̃ = k · rc; NaN if some k̃_i is NaN), and where that is finite
// and at least quantize_min_amax: at 4 bits u [m, n] = round(k̃ · (7 / amax)) + 8; at 2 and 3 bits sigma[h],
// the scale in units of amax[h] (c0 · rms(k̃ / amax) refined by `rounds` rounds of Lloyd's iteration) and
// u the fields in [0, 2^bits − 1]; elsewhere unspecified. work: f32 scratch of 8 · n rounded up to 8. The
// same bits as its scalar reference, copy_fields_scalar in quant_copy.cpp (defined in
// copy_fields_avx2.cpp, built with F16C and without FMA contraction).
void copy_fields(const uint8_t * k, bool f16, const float * rc, int m, int n, int bits, float c0, int rounds,
                 float * amax, float * sigma, uint8_t * u, float * work);

// max_i |x[i]| over x[n] (f32 or f16 bits): +inf if some element is infinite and none NaN, NaN if
// some element is NaN, else the exact maximum.
float amax_f32(const uint8_t * x, int n);
float amax_f16(const uint8_t * x, int n);

// out[i] = x[i] · inv rounded to the nearest integer, ties to even (the current rounding mode, as
// std::lrint); the caller guarantees the results fit int8.
void quantize_f32(const uint8_t * x, int n, float inv, int8_t * out);
void quantize_f16(const uint8_t * x, int n, float inv, int8_t * out);

}  // namespace hill::score_avx2

// The same three kernels built with VNNI (score_packed.cpp; the same bits): AVX-VNNI — call only when
// int8_isa_supported(int8_isa::avx_vnni) (compute/q8_dot.h) —, and AVX-512 F/BW/VL/VNNI — only when
// int8_isa_supported(int8_isa::avx512_vnni).
namespace hill::score_vnni {
void dots_u4_i8(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out);
void dots_u2_i8(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out);
void dots_u3_i8(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out);
}  // namespace hill::score_vnni

namespace hill::score_avx512 {
void dots_u4_i8(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out);
void dots_u2_i8(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out);
void dots_u3_i8(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out);
}  // namespace hill::score_avx512
