// Matrix-vector and matrix-matrix products against weight matrices of any supported type.
#pragma once

#include "core/ggml_type.h"
#include "core/thread_pool.h"

#include <cstdint>

namespace hill {

// A weight matrix W [n_rows, n_cols] of `type`, rows contiguous, each row
// ggml_row_bytes(type, n_cols) bytes (n_cols a multiple of the type's block size: 32, or 256 for the
// k-quants and IQ4_XS).
// In GGUF terms: ne[0] = n_cols, ne[1] = n_rows.
struct weight_view {
    ggml_type type = ggml_type::f32;
    int64_t n_rows = 0;
    int64_t n_cols = 0;
    const void * data = nullptr;

    size_t row_bytes() const;
    const uint8_t * row(int64_t r) const { return static_cast<const uint8_t *>(data) + size_t(r) * row_bytes(); }
};

// Batch invariance. gemv, gemv_batch (any n_tok) and gemm (n_tok <= gemm_batch_max_tok) compute
// every output element y[t][r] = Σ_j W[r][j] · x[t][j] with the same f32 operations in the same
// order whatever n_tok is, whatever the other activation rows hold and whatever the pool's thread
// count: y[t] is bit for bit what gemv(w, x[t], ...) gives for that row alone, in each kernel mode.
// So greedy decoding of a sequence gives the same tokens in a decode batch (through gemm: of up to
// gemm_batch_max_tok sequences) as alone.
// (The order does depend on the kernel mode — AVX2 and the scalar reference differ in the order of
// the f32 sums — and on where a gemv_rows / gemv_batch_rows range starts: the AVX2 kernels group
// rows in fours from the range's start; gemv and gemv_batch split rows in grains of 16.)
//
// Two ways to multiply quantized weights (compute/kernel_mode.h, matmul_mode):
//   int8 (default): for the types int8_dot_supported lists (compute/q8_dot.h), each activation row
//          is quantized to 8 bits per block once per call (on the calling thread) and multiplied
//          by integer dot products, as llama.cpp does; the scalar reference and the AVX2 kernels
//          give the same bits, and the batch invariance above holds (each row is quantized alone,
//          and its sums do not depend on the row ranges either). What the descriptions below say
//          of the f32 accumulation applies to the other types.
//   exact: every type as described below: f32 activations, the reference.

// y f32 [n_rows] = W · x f32 [n_cols]; rows split across the pool in grains of 16 rows. Accumulates in
// f32 (Q8_0/Q4_0 rows: per block Σ q·x, times the block's d; the other quantized types: Σ w·x over
// their weights decoded to f32 as dequantize_row gives them). The weights are read once, straight
// from `data` (dequantized in registers); the result does not depend on the thread count. The
// AVX2 kernels multiply the same f32 values as the scalar reference and differ from it only in
// the order of the f32 sums. gemv_batch with n_tok = 1.
void gemv(const weight_view & w, const float * x, float * y, thread_pool & pool);

// y f32 [n_tok, n_rows] = x f32 [n_tok, n_cols] · Wᵀ: the batched decode product, batch-invariant
// (above); n_tok >= 0, any size. One pass over the weights per 64 activation rows: per group of
// four weight rows, each weight vector is widened (F16/BF16) or dequantized (quantized types) once and
// multiplied into every activation row, from L1. Rows split across the pool as in gemv. A decode
// step's batch goes through here (through gemm), so that a matrix costs one read of its weights
// per step instead of one per sequence. With the AVX2 kernels, n_tok > 1 rows of x that are not
// 32-byte aligned rows of a multiple of 8 floats are first copied so (same values, same results;
// unaligned loads cost ~25%), into a buffer of the calling thread kept between calls: no
// allocation once a thread has seen its largest batch.
void gemv_batch(const weight_view & w, const float * x, int64_t n_tok, float * y, thread_pool & pool);

// y f32 [n_tok, n_rows] = x f32 [n_tok, n_cols] · Wᵀ, the product of prefill and decode alike.
//   n_tok <= gemm_batch_max_tok: gemv_batch — batch-invariant, as gemv per row.
//   n_tok >  gemm_batch_max_tok: faster for so many rows, but in another summation order (not
//            bit-identical to gemv). Only prefill chunks are that large, and they are
//            single-sequence: a prompt's logits need not match token-by-token decoding bit for bit.
//            Decode batches (at most 64 sequences; the engine's batches are 1-25) must be invariant.
//            In the int8 matmul_mode, with the AVX2 kernels and a CPU with AVX-VNNI, the types
//            int8_gemm_supported lists (Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_K, Q5_K, Q6_K) go through the
//            int8 prefill kernel (q8_dot.h, int8_gemm_rows_scalar's bits: 8 weight rows per vector,
//            2-3× less CPU than gemv_batch's tiles at 128 rows); the other int8 types through
//            gemv_batch (int8 tiles, invariant); every other case through gemm_blas. Measured
//            against each other with bench_gemm (docs/benchmarks.md).
// n_tok, n_rows and n_cols must fit in int (BLAS).
void gemm(const weight_view & w, const float * x, int64_t n_tok, float * y, thread_pool & pool);

// gemm's threshold: up to this many activation rows it goes through gemv_batch. The largest decode
// batch the engine plans for (1-25 sequences), with room: decode batches must be invariant. For
// prefill chunks OpenBLAS is about as fast from ~32 rows and up to 1.4× faster at 64
// (docs/benchmarks.md), so only chunks of 33-64 tokens pay for the invariance they do not need.
constexpr int64_t gemm_batch_max_tok = 64;

// y f32 [n_tok, n_rows] = x f32 [n_tok, n_cols] · Wᵀ through OpenBLAS sgemm on row tiles of W that
// each thread dequantizes into its own buffer (never the whole matrix); OpenBLAS itself runs
// single-threaded. Tiles: 64..256 rows, about 4 MiB of f32, one sgemm each; F32 weights go to sgemm
// without a copy. The tiles fall where they would with one thread, so the result does not depend on
// the thread count (OpenBLAS's sums for a row depend on the rows of its call).
// Each pool thread keeps its f32 [tile, n_cols] staging buffer between calls (thread_local), so that
// prefill does not allocate per layer. Any n_tok; gemm's path above gemm_batch_max_tok, public for
// the benchmark that compares both paths.
void gemm_blas(const weight_view & w, const float * x, int64_t n_tok, float * y, thread_pool & pool);

// Rows [r0, r1) of y f32 [n_tok, n_rows] = x f32 [n_tok, n_cols] · Wᵀ on the current thread, with the
// active kernel_mode (y's other columns untouched; x read as it lies, no copy). Bit for bit what
// gemv_batch gives for these rows when r0 is a multiple of 4 and r1 is too or is n_rows (the AVX2
// kernels' groups of four then fall where gemv_batch's do). gemv_rows: n_tok = 1.
void gemv_batch_rows(const weight_view & w, const float * x, int64_t n_tok, float * y, int64_t r0, int64_t r1);
void gemv_rows(const weight_view & w, const float * x, float * y, int64_t r0, int64_t r1);

// dst[n] = row of n elements of `type` as f32 (n a multiple of the block size). Exact for every type
// without an offset: every encoded value is representable in f32 (d · sc · q has at most 24
// significant bits). Q4_1, Q5_1, Q2_K, Q4_K and Q5_K (w = a · q + m, resp. a · q - dmin · mn):
// the f32 nearest to the encoded value (a · q and dmin · mn are exact, one rounding of their sum).
// The AVX2 decoders of those types give the same bits.
void dequantize_row(ggml_type type, const void * src, float * dst, int64_t n);

// dst = `type` encoding of src[n] (F32 copy, F16/BF16 round to nearest even, Q8_0/Q4_0 with
// scale d = absmax/127 resp. d = max/-8 as ggml quantizes).
//   Q8_0: q = round(x · (1/d)), half away from zero: within d/2 of x (before d is rounded to f16).
//   Q4_0: max = the element of largest |x| (the first on ties, with its sign), d = max / -8,
//         nibble = min(15, trunc(x · (1/d) + 8.5)): within |d|/2 of x, except for x / d in
//         (7.5, 8] (opposite sign to max), which clamp to nibble 15, up to |d| off.
//   Q5_0: as Q4_0 with 16 for 8 and 31 for 15 (ggml's reference): within |d|/2, except x / d in
//         (15.5, 16], up to |d| off.
// The others round to nearest with scales rounded up, so that nothing clamps (not ggml's search
// for the best scales: a simpler encoder of the same format, no better or worse to read):
//   Q4_1/Q5_1: m = min x rounded down to f16, d = (max x - m) / qmax (15 / 31) rounded up to f16,
//         q = round((x - m) / d): within d/2 of x.
//   Q4_K/Q5_K: per 32-weight sub-block u, mn_u = ceil(-min(0, min x) / dmin) and
//         sc_u = ceil(((max x) + dmin · mn_u) / qmax / d) (6 bits each; dmin, d the super-block's f16
//         scales, max / 63 rounded up), q = round((x + dmin · mn_u) / (d · sc_u)): within half the
//         sub-block's step d · sc_u of x, a step of at most (max x - min(0, min x) + dmin) / qmax + d.
//   Q6_K: per 16 weights sc_g = ceil(max|x| / 31 / d) (8 bits; d = the largest max|x| / 31 / 127
//         rounded up to f16), q = round(x / (d · sc_g)) in [-31, 31]: within half the step
//         d · sc_g <= max|x| / 31 + d of x.
//   (Up to f32 rounding of the quotients: the tests allow 1e-5 of the step and of |x|.)
// Q2_K, Q3_K, IQ4_NL and IQ4_XS are read, not written: quantize_supported(type) is false.
void quantize_row(ggml_type type, const float * src, void * dst, int64_t n);
bool quantize_supported(ggml_type type);

// Sets OpenBLAS to one thread (call once at start; the thread pool provides parallelism). gemm
// also calls it, once, before its first sgemm.
void blas_init_single_threaded();

}  // namespace hill
