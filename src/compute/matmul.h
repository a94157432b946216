// Matrix-vector and matrix-matrix products against weight matrices of any supported type.
#pragma once

#include "core/ggml_type.h"
#include "core/thread_pool.h"

#include <cstdint>

namespace hill {

// A weight matrix W [n_rows, n_cols] of `type`, rows contiguous, each row
// ggml_row_bytes(type, n_cols) bytes (n_cols a multiple of the block size for Q8_0/Q4_0).
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

// y f32 [n_rows] = W · x f32 [n_cols]; rows split across the pool in grains of 16 rows. Accumulates in
// f32 (quantized rows: per block Σ q·x, times the block's d). The weights are read once, straight
// from `data` (dequantized in registers); the result does not depend on the thread count. The
// AVX2 kernels multiply the same f32 values as the scalar reference and differ from it only in
// the order of the f32 sums. gemv_batch with n_tok = 1.
void gemv(const weight_view & w, const float * x, float * y, thread_pool & pool);

// y f32 [n_tok, n_rows] = x f32 [n_tok, n_cols] · Wᵀ: the batched decode product, batch-invariant
// (above); n_tok >= 0, any size. One pass over the weights per 64 activation rows: per group of
// four weight rows, each weight vector is widened (F16/BF16) or dequantized (Q8_0/Q4_0) once and
// multiplied into every activation row, from L1. Rows split across the pool as in gemv. A decode
// step's batch goes through here (through gemm), so that a matrix costs one read of its weights
// per step instead of one per sequence. With the AVX2 kernels, n_tok > 1 rows of x that are not
// 32-byte aligned rows of a multiple of 8 floats are first copied so (same values, same results;
// unaligned loads cost ~25%), into a buffer of the calling thread kept between calls: no
// allocation once a thread has seen its largest batch.
void gemv_batch(const weight_view & w, const float * x, int64_t n_tok, float * y, thread_pool & pool);

// y f32 [n_tok, n_rows] = x f32 [n_tok, n_cols] · Wᵀ, the product of prefill and decode alike.
//   n_tok <= gemm_batch_max_tok: gemv_batch — batch-invariant, as gemv per row.
//   n_tok >  gemm_batch_max_tok: gemm_blas — faster for so many rows, but in another summation
//            order (not bit-identical to gemv). Only prefill chunks are that large, and they are
//            single-sequence: a prompt's logits need not match token-by-token decoding bit for bit.
//            Decode batches (at most 64 sequences; the engine's batches are 1-25) must be invariant.
// n_tok, n_rows and n_cols must fit in int (BLAS).
void gemm(const weight_view & w, const float * x, int64_t n_tok, float * y, thread_pool & pool);

// gemm's threshold: up to this many activation rows it goes through gemv_batch. The largest decode
// batch the engine plans for (1-25 sequences), with room: decode batches must be invariant. For
// prefill chunks OpenBLAS is about as fast from ~32 rows and up to 1.4× faster at 64
// (docs/benchmarks.md), so only chunks of 33-64 tokens pay for the invariance they do not need.
constexpr int64_t gemm_batch_max_tok = 64;

// y f32 [n_tok, n_rows] = x f32 [n_tok, n_cols] · Wᵀ through OpenBLAS sgemm on row tiles of W that
// each thread dequantizes into its own buffer (never the whole matrix); OpenBLAS itself runs
// single-threaded. Tiles: 64..256 rows, about 4 MiB of f32; F32 weights go to sgemm without a copy.
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

// dst[n] = row of n elements of `type` as f32 (n a multiple of the block size). Exact: every
// encoded value is representable in f32.
void dequantize_row(ggml_type type, const void * src, float * dst, int64_t n);

// dst = `type` encoding of src[n] (F32 copy, F16/BF16 round to nearest even, Q8_0/Q4_0 with
// scale d = absmax/127 resp. d = max/-8 as ggml quantizes).
//   Q8_0: q = round(x · (1/d)), half away from zero: within d/2 of x (before d is rounded to f16).
//   Q4_0: max = the element of largest |x| (the first on ties, with its sign), d = max / -8,
//         nibble = min(15, trunc(x · (1/d) + 8.5)): within |d|/2 of x, except for x / d in
//         (7.5, 8] (opposite sign to max), which clamp to nibble 15, up to |d| off.
void quantize_row(ggml_type type, const float * src, void * dst, int64_t n);

// Sets OpenBLAS to one thread (call once at start; the thread pool provides parallelism). gemm
// also calls it, once, before its first sgemm.
void blas_init_single_threaded();

}  // namespace hill
