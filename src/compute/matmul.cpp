#include "compute/matmul.h"

#include "compute/kernel_mode.h"
#include "compute/kernels_avx2.h"
#include "core/error.h"
#include "core/fp16.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <vector>

namespace hill {

namespace {

uint16_t load_u16(const uint8_t * p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

// Scalar reference of gemv_batch_rows on rows [0, n_rows) of W (rb bytes apart from `base`):
// y[t · ldy + r] = row r · x_t (x_t at x + t · ldx) for t < n_tok. Each (t, r) accumulates in f32 in
// the order of one row alone: column after column; quantized rows per block s = Σ q·x (Q4_0: low
// nibble j, then high nibble j + 16, for j < 16), then acc += d · s. A chunk of a weight row is
// decoded (exactly, to f32; quantized weights unscaled) once per 64 activation rows.
void batch_rows_scalar(ggml_type type, const uint8_t * base, size_t rb, int64_t n, const float * x, int64_t ldx,
                       int64_t n_tok, float * y, int64_t ldy, int64_t n_rows) {
    constexpr int64_t tok_block = 64;
    constexpr int64_t chunk = 256;  // columns decoded at a time: a multiple of the block size
    float wq[chunk];                // the chunk's weights (quantized: q as f32, unscaled)
    float d[chunk / 32];            // quantized: the scale of each block of the chunk
    float acc[tok_block];
    const bool quant = type == ggml_type::q8_0 || type == ggml_type::q4_0;
    for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t * row = base + size_t(r) * rb;
        for (int64_t t0 = 0; t0 < n_tok; t0 += tok_block) {
            const int64_t nt = std::min(tok_block, n_tok - t0);
            std::fill(acc, acc + nt, 0.0f);
            for (int64_t j0 = 0; j0 < n; j0 += chunk) {
                const int64_t nj = std::min(chunk, n - j0);
                switch (type) {
                    case ggml_type::f32:
                        std::memcpy(wq, row + 4 * j0, size_t(nj) * 4);
                        break;
                    case ggml_type::f16:
                        for (int64_t j = 0; j < nj; ++j) wq[j] = fp16_to_fp32(load_u16(row + 2 * (j0 + j)));
                        break;
                    case ggml_type::bf16:
                        for (int64_t j = 0; j < nj; ++j) wq[j] = bf16_to_fp32(load_u16(row + 2 * (j0 + j)));
                        break;
                    case ggml_type::q8_0:
                        for (int64_t ib = 0; ib < nj / qk8_0; ++ib) {
                            const uint8_t * b = row + (j0 / qk8_0 + ib) * sizeof(block_q8_0);
                            const int8_t * q = reinterpret_cast<const int8_t *>(b + offsetof(block_q8_0, qs));
                            d[ib] = fp16_to_fp32(load_u16(b));
                            for (int j = 0; j < qk8_0; ++j) wq[ib * qk8_0 + j] = float(q[j]);
                        }
                        break;
                    case ggml_type::q4_0:
                        for (int64_t ib = 0; ib < nj / qk4_0; ++ib) {
                            const uint8_t * b = row + (j0 / qk4_0 + ib) * sizeof(block_q4_0);
                            const uint8_t * qs = b + offsetof(block_q4_0, qs);
                            d[ib] = fp16_to_fp32(load_u16(b));
                            for (int j = 0; j < qk4_0 / 2; ++j) {
                                wq[ib * qk4_0 + j] = float(int(qs[j] & 0x0f) - 8);
                                wq[ib * qk4_0 + j + qk4_0 / 2] = float(int(qs[j] >> 4) - 8);
                            }
                        }
                        break;
                }
                for (int64_t t = 0; t < nt; ++t) {
                    const float * xc = x + (t0 + t) * ldx + j0;
                    float a = acc[t];
                    if (!quant) {
                        for (int64_t j = 0; j < nj; ++j) a += wq[j] * xc[j];
                    } else if (type == ggml_type::q8_0) {
                        for (int64_t ib = 0; ib < nj / 32; ++ib) {
                            float s = 0.0f;
                            for (int j = 0; j < 32; ++j) s += wq[ib * 32 + j] * xc[ib * 32 + j];
                            a += d[ib] * s;
                        }
                    } else {
                        for (int64_t ib = 0; ib < nj / 32; ++ib) {
                            float s = 0.0f;
                            for (int j = 0; j < 16; ++j) {
                                s += wq[ib * 32 + j] * xc[ib * 32 + j];
                                s += wq[ib * 32 + j + 16] * xc[ib * 32 + j + 16];
                            }
                            a += d[ib] * s;
                        }
                    }
                    acc[t] = a;
                }
            }
            for (int64_t t = 0; t < nt; ++t) y[(t0 + t) * ldy + r] = acc[t];
        }
    }
}

void check_weight(const weight_view & w) {
    HILL_ASSERT(w.n_rows >= 0 && w.n_cols >= 0);
    HILL_ASSERT(w.n_cols % ggml_block_size(w.type) == 0);
    HILL_ASSERT(w.data != nullptr || w.n_rows == 0 || w.n_cols == 0);
}

// Rows of W that one thread dequantizes before one sgemm call: about 4 MiB of f32 (the packing
// of X that sgemm repeats per call is amortized over at least 64 rows, and the tile stays within
// a few times the L2), in whole 16s, between 64 and 256 rows.
int64_t gemm_tile_rows(int64_t n_cols) {
    const int64_t target_bytes = int64_t(4) << 20;
    const int64_t rows = target_bytes / (4 * std::max<int64_t>(n_cols, 1)) / 16 * 16;
    return std::clamp<int64_t>(rows, 64, 256);
}

std::once_flag blas_once;

}  // namespace

size_t weight_view::row_bytes() const {
    const auto rb = ggml_row_bytes(type, n_cols);
    HILL_ASSERT(rb.has_value());
    return *rb;
}

namespace {

// gemv_batch_rows with x rows ldx floats apart.
void batch_rows(const weight_view & w, const float * x, int64_t ldx, int64_t n_tok, float * y, int64_t r0, int64_t r1) {
    HILL_ASSERT(0 <= r0 && r0 <= r1 && r1 <= w.n_rows && n_tok >= 0);
    if (r0 == r1 || n_tok == 0) return;
    const size_t rb = w.row_bytes();
    const uint8_t * base = static_cast<const uint8_t *>(w.data) + size_t(r0) * rb;
    if (kernel_mode_get() == kernel_mode::avx2) {
        avx2::gemv_batch_rows(w.type, base, rb, w.n_cols, x, ldx, n_tok, y + r0, w.n_rows, r1 - r0);
        return;
    }
    batch_rows_scalar(w.type, base, rb, w.n_cols, x, ldx, n_tok, y + r0, w.n_rows, r1 - r0);
}

}  // namespace

void gemv_batch_rows(const weight_view & w, const float * x, int64_t n_tok, float * y, int64_t r0, int64_t r1) {
    batch_rows(w, x, w.n_cols, n_tok, y, r0, r1);
}

void gemv_rows(const weight_view & w, const float * x, float * y, int64_t r0, int64_t r1) {
    gemv_batch_rows(w, x, 1, y, r0, r1);
}

void gemv_batch(const weight_view & w, const float * x, int64_t n_tok, float * y, thread_pool & pool) {
    check_weight(w);
    HILL_ASSERT(n_tok >= 0);
    if (n_tok == 0) return;
    // The AVX2 tiles read every x vector once per weight row and tile (as a memory operand of an
    // FMA); loads that straddle two cache lines — x 16-byte aligned, as a large std::vector's data
    // is — made n = 8 ~25% slower (bench_gemm). So several x rows are first copied to 32-byte
    // aligned rows of a multiple of 8 floats (f32 [n_tok, ldx]), unless they are laid out so
    // already: same values, same results. The caller's thread keeps the buffer between calls.
    int64_t ldx = w.n_cols;
    const bool aligned = reinterpret_cast<uintptr_t>(x) % 32 == 0 && w.n_cols % 8 == 0;
    if (n_tok > 1 && w.n_cols > 0 && !aligned && kernel_mode_get() == kernel_mode::avx2) {
        thread_local std::vector<float> packed;
        ldx = (w.n_cols + 7) / 8 * 8;
        const size_t need = size_t(n_tok * ldx) + 8;
        if (packed.size() < need) packed.resize(need);
        float * p = packed.data() + (8 - reinterpret_cast<uintptr_t>(packed.data()) / 4 % 8) % 8;
        for (int64_t t = 0; t < n_tok; ++t) std::memcpy(p + t * ldx, x + t * w.n_cols, size_t(w.n_cols) * 4);
        x = p;
    }
    // 16 rows per grain: a whole number of the AVX2 kernel's 4-row groups (so that every thread's
    // range starts a group where a one-thread call does, and the result does not depend on the
    // thread count), and small enough that the last thread's share is not much larger than the
    // others'.
    pool.parallel_for(
        w.n_rows, [&](int64_t r0, int64_t r1) { batch_rows(w, x, ldx, n_tok, y, r0, r1); }, 16);
}

void gemv(const weight_view & w, const float * x, float * y, thread_pool & pool) {
    gemv_batch(w, x, 1, y, pool);
}

void gemm(const weight_view & w, const float * x, int64_t n_tok, float * y, thread_pool & pool) {
    check_weight(w);
    HILL_ASSERT(n_tok >= 0);
    if (n_tok <= gemm_batch_max_tok) {
        gemv_batch(w, x, n_tok, y, pool);
        return;
    }
    gemm_blas(w, x, n_tok, y, pool);
}

void gemm_blas(const weight_view & w, const float * x, int64_t n_tok, float * y, thread_pool & pool) {
    check_weight(w);
    HILL_ASSERT(n_tok >= 0);
    if (w.n_rows == 0 || n_tok == 0) return;
    std::call_once(blas_once, blas_init_single_threaded);
    const int n_tok_i = int(n_tok), n_cols_i = int(w.n_cols), n_rows_i = int(w.n_rows);
    HILL_ASSERT(int64_t(n_tok_i) == n_tok && int64_t(n_cols_i) == w.n_cols && int64_t(n_rows_i) == w.n_rows);
    if (w.n_cols == 0) {
        std::fill(y, y + n_tok * w.n_rows, 0.0f);
        return;
    }

    // Y[:, r0:r1] = X · W[r0:r1, :]ᵀ (row-major, ldc = n_rows).
    auto sgemm_rows = [&](const float * w_rows, int64_t r0, int64_t r1) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n_tok_i, int(r1 - r0), n_cols_i, 1.0f, x, n_cols_i, w_rows,
                    n_cols_i, 0.0f, y + r0, n_rows_i);
    };

    if (w.type == ggml_type::f32) {
        pool.parallel_for(
            w.n_rows,
            [&](int64_t r0, int64_t r1) { sgemm_rows(static_cast<const float *>(w.data) + r0 * w.n_cols, r0, r1); },
            16);
        return;
    }

    const int64_t tile = gemm_tile_rows(w.n_cols);
    pool.parallel_for(
        w.n_rows,
        [&](int64_t r0, int64_t r1) {
            // Per-thread staging buffer f32 [tile, n_cols], kept between calls so that prefill
            // does not allocate per layer.
            thread_local std::vector<float> buf;
            const size_t need = size_t(std::min(tile, r1 - r0)) * size_t(w.n_cols);
            if (buf.size() < need) buf.resize(need);
            for (int64_t a = r0; a < r1; a += tile) {
                const int64_t b = std::min(a + tile, r1);
                for (int64_t r = a; r < b; ++r)
                    dequantize_row(w.type, w.row(r), buf.data() + (r - a) * w.n_cols, w.n_cols);
                sgemm_rows(buf.data(), a, b);
            }
        },
        tile);
}

void dequantize_row(ggml_type type, const void * src, float * dst, int64_t n) {
    HILL_ASSERT(n >= 0 && n % ggml_block_size(type) == 0);
    const auto * p = static_cast<const uint8_t *>(src);
    switch (type) {
        case ggml_type::f32:
            std::memcpy(dst, p, size_t(n) * 4);
            return;
        case ggml_type::f16:
            if (kernel_mode_get() == kernel_mode::avx2) {
                avx2::fp16_to_fp32_row(static_cast<const uint16_t *>(src), dst, n);
            } else {
                for (int64_t j = 0; j < n; ++j) dst[j] = fp16_to_fp32(load_u16(p + 2 * j));
            }
            return;
        case ggml_type::bf16:
            for (int64_t j = 0; j < n; ++j) dst[j] = bf16_to_fp32(load_u16(p + 2 * j));
            return;
        case ggml_type::q8_0:
            for (int64_t ib = 0; ib < n / qk8_0; ++ib) {
                const uint8_t * b = p + ib * sizeof(block_q8_0);
                const int8_t * q = reinterpret_cast<const int8_t *>(b + offsetof(block_q8_0, qs));
                const float d = fp16_to_fp32(load_u16(b));
                for (int j = 0; j < qk8_0; ++j) dst[ib * qk8_0 + j] = d * float(q[j]);
            }
            return;
        case ggml_type::q4_0:
            for (int64_t ib = 0; ib < n / qk4_0; ++ib) {
                const uint8_t * b = p + ib * sizeof(block_q4_0);
                const uint8_t * qs = b + offsetof(block_q4_0, qs);
                const float d = fp16_to_fp32(load_u16(b));
                float * o = dst + ib * qk4_0;
                for (int j = 0; j < qk4_0 / 2; ++j) {
                    o[j] = d * float(int(qs[j] & 0x0f) - 8);
                    o[j + qk4_0 / 2] = d * float(int(qs[j] >> 4) - 8);
                }
            }
            return;
    }
    HILL_ASSERT(false && "unsupported ggml_type");
}

void quantize_row(ggml_type type, const float * src, void * dst, int64_t n) {
    HILL_ASSERT(n >= 0 && n % ggml_block_size(type) == 0);
    auto * p = static_cast<uint8_t *>(dst);
    switch (type) {
        case ggml_type::f32:
            std::memcpy(p, src, size_t(n) * 4);
            return;
        case ggml_type::f16:
            for (int64_t j = 0; j < n; ++j) {
                const uint16_t h = fp32_to_fp16(src[j]);
                std::memcpy(p + 2 * j, &h, 2);
            }
            return;
        case ggml_type::bf16:
            for (int64_t j = 0; j < n; ++j) {
                const uint16_t h = fp32_to_bf16(src[j]);
                std::memcpy(p + 2 * j, &h, 2);
            }
            return;
        case ggml_type::q8_0:
            // ggml's quantize_row_q8_0_ref: d = absmax / 127, q = round(x / d).
            for (int64_t ib = 0; ib < n / qk8_0; ++ib) {
                const float * x = src + ib * qk8_0;
                float amax = 0.0f;
                for (int j = 0; j < qk8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
                const float d = amax / 127.0f;
                const float id = d != 0.0f ? 1.0f / d : 0.0f;
                block_q8_0 blk;
                blk.d = fp32_to_fp16(d);
                for (int j = 0; j < qk8_0; ++j) blk.qs[j] = int8_t(std::round(x[j] * id));
                std::memcpy(p + ib * sizeof(block_q8_0), &blk, sizeof(blk));
            }
            return;
        case ggml_type::q4_0:
            // ggml's quantize_row_q4_0_ref: d = max / -8 where max is the signed value of largest
            // magnitude, so that it maps to nibble 0; q = min(15, trunc(x / d + 8.5)).
            for (int64_t ib = 0; ib < n / qk4_0; ++ib) {
                const float * x = src + ib * qk4_0;
                float amax = 0.0f, max = 0.0f;
                for (int j = 0; j < qk4_0; ++j) {
                    if (amax < std::fabs(x[j])) {
                        amax = std::fabs(x[j]);
                        max = x[j];
                    }
                }
                const float d = max / -8.0f;
                const float id = d != 0.0f ? 1.0f / d : 0.0f;
                block_q4_0 blk;
                blk.d = fp32_to_fp16(d);
                for (int j = 0; j < qk4_0 / 2; ++j) {
                    const int q0 = std::min(15, int(int8_t(x[j] * id + 8.5f)));
                    const int q1 = std::min(15, int(int8_t(x[j + qk4_0 / 2] * id + 8.5f)));
                    blk.qs[j] = uint8_t(q0 | (q1 << 4));
                }
                std::memcpy(p + ib * sizeof(block_q4_0), &blk, sizeof(blk));
            }
            return;
    }
    HILL_ASSERT(false && "unsupported ggml_type");
}

void blas_init_single_threaded() {
    openblas_set_num_threads(1);
}

}  // namespace hill
