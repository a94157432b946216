// Which kernel implementation runs: the AVX2/FMA/F16C path when this CPU has it (chosen once at
// run time), or the scalar reference. Tests switch to `scalar` to compare both on one input.
#pragma once

namespace hill {

enum class kernel_mode { scalar, avx2 };

bool cpu_has_avx2();                 // AVX2 + FMA + F16C, detected at run time
bool cpu_has_avx_vnni();             // cpu_has_avx2() and AVX-VNNI (256-bit vpdpbusd), at run time
bool cpu_has_avx512_vnni();          // cpu_has_avx2() and AVX-512 F, BW, VL and VNNI, at run time
kernel_mode kernel_mode_get();       // default: avx2 if cpu_has_avx2(), else scalar
void kernel_mode_set(kernel_mode m); // asserts avx2 is only chosen when supported

// How the weight products (matmul.h: gemv, gemv_batch, gemm up to gemm_batch_max_tok rows) multiply
// quantized weights, in either kernel_mode:
//   int8:  the types int8_dot_supported lists (compute/q8_dot.h: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
//          IQ4_NL, Q4_K, Q5_K, Q6_K) by integer dot products with each activation row quantized to
//          8 bits per block (llama.cpp's scheme; on the test VM 2.5× less CPU per weight than
//          `exact` for Q4_K, ~3× for Q6_K, 1.5× for Q4_0: docs/benchmarks.md); every other type as
//          `exact`. The default.
//   exact: f32 activations times the weights decoded to f32: the reference (`--exact-matmul`).
// Large prefill products (matmul.h, gemm above gemm_batch_max_tok rows) of the int8 types are int8
// too (the prefill kernel or gemv_batch's tiles); `exact` keeps them on gemm_blas (f32).
enum class matmul_mode { int8, exact };
matmul_mode matmul_mode_get();
void matmul_mode_set(matmul_mode m);

}  // namespace hill
