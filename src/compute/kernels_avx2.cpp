// AVX2/FMA/F16C kernels; see kernels_avx2.h for the rules of this file. Scalar references:
// gemv_batch_rows -> matmul.cpp, dot/axpy and attention_group_accumulate -> attention.cpp (its
// attention_head_accumulate), fp16 rows and sum_squares -> ops.cpp; exp_nonpositive_row is checked
// against std::exp.
#include "compute/kernels_avx2.h"
#include "compute/block_fields.h"

#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>

namespace hill::avx2 {

namespace {

// F32 rows: software prefetch distance, in bytes ahead of each of the four row streams (see gemv_float).
constexpr size_t prefetch_f32_bytes = 2048;

inline void prefetch(const uint8_t * p) {
    _mm_prefetch(reinterpret_cast<const char *>(p), _MM_HINT_T0);
}

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline float f16_scalar(uint16_t h) {
    return _cvtsh_ss(h);
}

// ---- float weight rows: 8 elements at a time as f32, and one element for the tail ----

struct load_f32 {
    static constexpr int size = 4;
    static __m256 load8(const uint8_t * row, int64_t j) {
        return _mm256_loadu_ps(reinterpret_cast<const float *>(row) + j);
    }
    static float load1(const uint8_t * row, int64_t j) {
        float v;
        std::memcpy(&v, row + 4 * j, 4);
        return v;
    }
};

struct load_f16 {
    static constexpr int size = 2;
    static __m256 load8(const uint8_t * row, int64_t j) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + 2 * j)));
    }
    static float load1(const uint8_t * row, int64_t j) { return f16_scalar(load_u16(row + 2 * j)); }
};

struct load_bf16 {
    static constexpr int size = 2;
    static __m256 load8(const uint8_t * row, int64_t j) {
        const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + 2 * j)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
    }
    static float load1(const uint8_t * row, int64_t j) {
        const uint32_t u = uint32_t(load_u16(row + 2 * j)) << 16;
        float v;
        std::memcpy(&v, &u, 4);
        return v;
    }
};

// ---- weight rows times activation rows (gemv_batch_rows) ----
//
// Summation order. Each (activation row t, weight row r) dot product is accumulated in an order
// that depends only on n_cols and on r's place in the call's row range, never on n_tok, on t or on
// the other activation rows, so that a row of a batch gets the bits it gets alone (the batch
// invariance of matmul.h). The rows of the range come in groups of four from its start ("group
// rows"); its last n_rows % 4 rows are "single rows". Per (t, r), f32 accumulation throughout:
//   float group row  two accumulators a0, a1: per 32 columns a0 += w[j, j+8)·x, a1 += w[j+8, j+16)·x,
//                    a0 += w[j+16, j+24)·x, a1 += w[j+24, j+32)·x (FMA, 8 lanes); the remaining
//                    whole 8s into a0; s = hsum(a0 + a1); the remaining columns s = fma(w, x, s).
//   float single row dot_row: four accumulators.
//   quant group row  one accumulator a: per block a = fma(Σ_block q·x, d, a), Σ_block = block_dot;
//                    hsum(a).
//   quant single row quant_dot_row: two accumulators (even and odd blocks).
//   decoded types    (Q4_1 .. IQ4_XS: weights decoded to f32 per 32 columns) group and single rows
//                    alike: a0, a1 as the float group rows over all columns; hsum(a0 + a1).
// These are the orders of gemv before the batched kernel existed, and its n_tok = 1 results kept
// every bit but one case: the scalar tails are now written as fma(). GCC had contracted `s += w * x`
// into an FMA in the release build, except in the F16 group rows (whose last n_cols % 8 columns it
// vectorized as mul, then add), and nowhere at -O1 (the sanitizer builds); fma() fixes one order
// for every build.

// One row, four accumulators (32 elements per step) to cover the FMA latency.
template <class L>
float dot_row(const uint8_t * w, const float * x, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        a0 = _mm256_fmadd_ps(L::load8(w, j), _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(L::load8(w, j + 8), _mm256_loadu_ps(x + j + 8), a1);
        a2 = _mm256_fmadd_ps(L::load8(w, j + 16), _mm256_loadu_ps(x + j + 16), a2);
        a3 = _mm256_fmadd_ps(L::load8(w, j + 24), _mm256_loadu_ps(x + j + 24), a3);
    }
    for (; j + 8 <= n; j += 8) a0 = _mm256_fmadd_ps(L::load8(w, j), _mm256_loadu_ps(x + j), a0);
    float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; j < n; ++j) s = __builtin_fmaf(L::load1(w, j), x[j], s);
    return s;
}

// Float group rows: R weight rows (rb bytes apart from w) times T activation rows (ldx floats apart
// from x), columns [32 · u0, 32 · u1), the accumulators a0, a1 of (r, t) at acc[r · acc_ld + 2t]
// (loaded, advanced, stored back: a call covers one chunk of columns). Each weight vector is loaded
// (and widened) once for all T activation rows, each x vector once for all R weight rows.
//
// Prefetch (pf != nullptr; the caller passes it to one call per chunk and group): F16/BF16: the
// next group of four rows (one contiguous range of 4 · rb bytes) in address order, 4 · 32 columns'
// bytes per 32 columns, so that the DRAM sees one sequential stream ahead of the four row streams;
// pf points at the part of the next group that matches this chunk. With the hardware prefetchers
// alone, one core of the AMD EPYC development machine (40 GB/s read loop) streamed F16 at ~22 GB/s
// through the gemv kernel, and ~29 GB/s prefetching each row stream 2 KiB ahead (the former
// scheme). On the 2-core test VM this scheme took one core from 25 to 33 GB/s for F16 and from 24
// to 32 GB/s for BF16 over that former scheme. The last group prefetches itself rather than rows
// past the range. F32: pf is this group's first row, and each of its four row streams is prefetched
// prefetch_f32_bytes ahead: the group scheme measured ~6% slower for F32 on one core there (32 vs
// 34 GB/s) and no better on two.
template <class L, int R, int T>
void float_tile(const uint8_t * w, size_t rb, const float * x, int64_t ldx, int64_t u0, int64_t u1, __m256 * acc,
                int64_t acc_ld, const uint8_t * pf) {
    __m256 a[R][T][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
            a[r][t][0] = acc[r * acc_ld + 2 * t];
            a[r][t][1] = acc[r * acc_ld + 2 * t + 1];
        }
    }
    for (int64_t j = 32 * u0; j < 32 * u1; j += 32) {
        if (pf != nullptr) {
            if constexpr (L::size == 4) {
                const size_t d = size_t(j) * L::size + prefetch_f32_bytes;
                for (int k = 0; k < 4; ++k) prefetch(pf + size_t(k) * rb + d);
            } else {
                for (size_t o = 0; o < 4 * 32 * L::size; o += 64) prefetch(pf + o);  // 256 B
                pf += 4 * 32 * L::size;
            }
        }
        // Columns j + 8q, q = 0..3, into accumulator q % 2: each weight vector loaded once for the T
        // activation rows, each x vector once for the R weight rows.
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q) {
            __m256 wv[R];
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) wv[r] = L::load8(w + size_t(r) * rb, j + 8 * q);
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) {
                const __m256 xv = _mm256_loadu_ps(x + t * ldx + j + 8 * q);
#pragma GCC unroll 8
                for (int r = 0; r < R; ++r) a[r][t][q % 2] = _mm256_fmadd_ps(wv[r], xv, a[r][t][q % 2]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
            acc[r * acc_ld + 2 * t] = a[r][t][0];
            acc[r * acc_ld + 2 * t + 1] = a[r][t][1];
        }
    }
}

template <class L>
struct float_kernel {
    static constexpr int n_acc = 2;                     // accumulators per (activation row, weight row)
    static constexpr size_t unit_bytes = 32 * L::size;  // bytes of one row per 32 columns
    // Register tiles of R weight rows × T activation rows (2RT accumulators): 4 to t_tile = 6
    // activation rows against one weight row (12 accumulators, a weight vector, an x vector); 2 or 3
    // against two weight rows, so that at least 8 independent FMA chains cover the FMA latency; one
    // against the group's four rows (the gemv kernel). Measured on the 2-core VM (F16, L2-resident
    // weights, one thread): two rows × 3 and one row × 8 (16 accumulators: spills) were 10-25%
    // slower than one row × 4..6.
    static constexpr int t_tile = 6;
    static constexpr int rows_per_tile(int T) { return T == 1 ? 4 : T <= 3 ? 2 : 1; }
    // The group's four rows against T activation rows, R rows at a time (pf: see float_tile).
    template <int T>
    static void tile(const uint8_t * w, size_t rb, const float * x, int64_t ldx, int64_t u0, int64_t u1, __m256 * acc,
                     int64_t acc_ld, const uint8_t * pf) {
        constexpr int R = rows_per_tile(T);
        for (int r = 0; r < 4; r += R) {
            float_tile<L, R, T>(w + size_t(r) * rb, rb, x, ldx, u0, u1, acc + r * acc_ld, acc_ld,
                                r == 0 ? pf : nullptr);
        }
    }
    // Where this chunk's prefetch starts: see float_tile.
    static const uint8_t * prefetch_base(const uint8_t * group, const uint8_t * next_group, int64_t u0) {
        if constexpr (L::size == 4) return group;
        return next_group + size_t(4 * u0) * unit_bytes;
    }
    // The group row's result from its accumulators (a0, a1 at acc[0], acc[1]) and the columns past
    // the last whole 32.
    static float finish(const uint8_t * row, const float * x, int64_t n, const __m256 * acc) {
        __m256 a0 = acc[0];
        int64_t j = n / 32 * 32;
        for (; j + 8 <= n; j += 8) a0 = _mm256_fmadd_ps(L::load8(row, j), _mm256_loadu_ps(x + j), a0);
        float s = hsum(_mm256_add_ps(a0, acc[1]));
        for (; j < n; ++j) s = __builtin_fmaf(L::load1(row, j), x[j], s);
        return s;
    }
    static float single(const uint8_t * row, const float * x, int64_t n) { return dot_row<L>(row, x, n); }
};

// ---- quantized rows: per block, Σ q·x over its 32 weights (unscaled) and the block scale ----

// Sign-extends 8 int8 to 8 floats (a sign-extending load: measured faster on the AMD EPYC
// development machine than one 16-byte load and register extensions).
inline __m128i load_8_bytes(const void * p) { return _mm_loadl_epi64(static_cast<const __m128i *>(p)); }

inline __m256 i8x8_to_f32(const int8_t * q) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load_8_bytes(q))); }

// Σ q·x of one block from its 32 weights as f32 (q[0..3]: weights 0..7, 8..15, 16..23, 24..31) and
// the matching x vectors, in the one order every kernel uses.
inline __m256 block_dot(const __m256 * q, __m256 x0, __m256 x1, __m256 x2, __m256 x3) {
    __m256 s0 = _mm256_mul_ps(q[0], x0);
    __m256 s1 = _mm256_mul_ps(q[1], x1);
    s0 = _mm256_fmadd_ps(q[2], x2, s0);
    s1 = _mm256_fmadd_ps(q[3], x3, s1);
    return _mm256_add_ps(s0, s1);
}

struct block_q8 {
    static constexpr size_t bytes = sizeof(block_q8_0);
    // Block layout: f16 d at byte 0, int8 qs[32] at byte 2.
    static void weights(const uint8_t * b, __m256 * q) {
        const int8_t * qs = reinterpret_cast<const int8_t *>(b + 2);
        q[0] = i8x8_to_f32(qs);
        q[1] = i8x8_to_f32(qs + 8);
        q[2] = i8x8_to_f32(qs + 16);
        q[3] = i8x8_to_f32(qs + 24);
    }
};

struct block_q4 {
    static constexpr size_t bytes = sizeof(block_q4_0);
    // Block layout: f16 d at byte 0, u8 qs[16] at byte 2; weight j < 16 is the low nibble of
    // qs[j], weight j + 16 its high nibble, both offset by 8. Zero-extending 8 bytes to 8 lanes
    // gives both nibble groups with one AND and one shift, without byte shuffles; zero-extending
    // loads measured faster than one 16-byte load and register extensions.
    static void weights(const uint8_t * b, __m256 * q) {
        const __m256i m4 = _mm256_set1_epi32(0x0f);
        const __m256i off = _mm256_set1_epi32(8);
        const __m256i u0 = _mm256_cvtepu8_epi32(load_8_bytes(b + 2));   // qs[0..8)
        const __m256i u1 = _mm256_cvtepu8_epi32(load_8_bytes(b + 10));  // qs[8..16)
        q[0] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(u0, m4), off));  // weights 0..7
        q[1] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(u1, m4), off));  // 8..15
        q[2] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(u0, 4), off));  // 16..23
        q[3] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(u1, 4), off));  // 24..31
    }
};

// The block's f16 scale d in all 8 lanes.
inline __m256 block_scale(const uint8_t * b) {
    return _mm256_cvtph_ps(_mm_set1_epi16(short(load_u16(b))));
}

template <class Q>
inline __m256 block_dot_at(const uint8_t * b, const float * xb) {
    __m256 q[4];
    Q::weights(b, q);
    return block_dot(q, _mm256_loadu_ps(xb), _mm256_loadu_ps(xb + 8), _mm256_loadu_ps(xb + 16),
                     _mm256_loadu_ps(xb + 24));
}

// A single row: two accumulators (even / odd blocks).
template <class Q>
float quant_dot_row(const uint8_t * b, const float * x, int64_t nb) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2, b += 2 * Q::bytes) {
        a0 = _mm256_fmadd_ps(block_dot_at<Q>(b, x + ib * 32), block_scale(b), a0);
        a1 = _mm256_fmadd_ps(block_dot_at<Q>(b + Q::bytes, x + ib * 32 + 32), block_scale(b + Q::bytes), a1);
    }
    if (ib < nb) a0 = _mm256_fmadd_ps(block_dot_at<Q>(b, x + ib * 32), block_scale(b), a0);
    return hsum(_mm256_add_ps(a0, a1));
}

// Quantized group rows: R weight rows times T activation rows, blocks [u0, u1), the accumulator of
// (r, t) at acc[r · acc_ld + t]. Each block is dequantized (to unscaled f32 weights, in registers)
// once for all T activation rows.
//
// Prefetch (pf != nullptr, one call per chunk and group): the next group's range in address order,
// four blocks' bytes per block, so that the next group is in cache when it starts: one sequential
// stream, ahead of all four. Prefetching each stream 1 KiB ahead (the gemv kernel's former scheme;
// 256 B .. 4 KiB alike), or one stream 2 .. 16 KiB past the first row, left the DRAM stream at
// 10-15 GB/s per core against a 40 GB/s read loop, although the kernel does ~29 GB/s (Q8_0) from
// L2; this scheme streams Q8_0 at ~27 GB/s on one core and ~40 GB/s (85% of the read loop) on two.
// The last group prefetches itself rather than rows past the range.
template <class Q, int R, int T>
void quant_tile(const uint8_t * w, size_t rb, const float * x, int64_t ldx, int64_t u0, int64_t u1, __m256 * acc,
                int64_t acc_ld, const uint8_t * pf) {
    __m256 a[R][T];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) a[r][t] = acc[r * acc_ld + t];
    }
    for (int64_t ib = u0; ib < u1; ++ib) {
        if (pf != nullptr) {
            for (size_t o = 0; o < 4 * Q::bytes; o += 64) prefetch(pf + o);  // Q8_0: 136 B, Q4_0: 72 B
            pf += 4 * Q::bytes;
        }
        const float * xb = x + ib * 32;
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const uint8_t * b = w + size_t(r) * rb + size_t(ib) * Q::bytes;
            __m256 q[4];
            Q::weights(b, q);
            const __m256 d = block_scale(b);
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) {
                const float * xt = xb + t * ldx;
                const __m256 s = block_dot(q, _mm256_loadu_ps(xt), _mm256_loadu_ps(xt + 8), _mm256_loadu_ps(xt + 16),
                                           _mm256_loadu_ps(xt + 24));
                a[r][t] = _mm256_fmadd_ps(s, d, a[r][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) acc[r * acc_ld + t] = a[r][t];
    }
}

template <class Q>
struct quant_kernel {
    static constexpr int n_acc = 1;
    static constexpr size_t unit_bytes = Q::bytes;  // one block: 32 columns
    // Register tiles: up to t_tile = 8 activation rows against one weight row (8 accumulators, the
    // block's four weight vectors and its scale, two partial sums; the per-block work of each row
    // is long enough to hide the latency of its one accumulator chain); one against the group's
    // four rows (the gemv kernel).
    static constexpr int t_tile = 8;
    static constexpr int rows_per_tile(int T) { return T == 1 ? 4 : 1; }
    // The group's four rows against T activation rows, R rows at a time (pf: see quant_tile).
    template <int T>
    static void tile(const uint8_t * w, size_t rb, const float * x, int64_t ldx, int64_t u0, int64_t u1, __m256 * acc,
                     int64_t acc_ld, const uint8_t * pf) {
        constexpr int R = rows_per_tile(T);
        for (int r = 0; r < 4; r += R) {
            quant_tile<Q, R, T>(w + size_t(r) * rb, rb, x, ldx, u0, u1, acc + r * acc_ld, acc_ld,
                                r == 0 ? pf : nullptr);
        }
    }
    static const uint8_t * prefetch_base(const uint8_t *, const uint8_t * next_group, int64_t u0) {
        return next_group + size_t(4 * u0) * unit_bytes;
    }
    static float finish(const uint8_t *, const float *, int64_t, const __m256 * acc) { return hsum(acc[0]); }
    static float single(const uint8_t * row, const float * x, int64_t n) { return quant_dot_row<Q>(row, x, n / 32); }
};

// Activation rows whose accumulators one pass over a group of four weight rows keeps (in memory,
// between chunks of columns): 4 · 64 · 2 accumulators of 32 bytes = 16 KiB for the float types. A
// call with more activation rows reads the weights once per 64 of them.
constexpr int64_t batch_max_tok = 64;

// Columns (in 32s) per chunk of a group: with one activation row, up to 4096 (the accumulators stay
// in registers across the row; x, read once per group, comes from L1 or L2 alike); with several,
// 512, so that a tile's x slices (at most 8 rows · 2 KiB) and the group's four weight slices stay
// in L1 while the four rows run over them. The x slices of the other tiles of the chunk come from
// L2 once per group, then from L1.
int64_t chunk_units(int64_t nt) {
    return nt == 1 ? 128 : 16;
}

template <class K, int... T>
struct tile_table {
    using fn = void (*)(const uint8_t *, size_t, const float *, int64_t, int64_t, int64_t, __m256 *, int64_t,
                        const uint8_t *);
    static constexpr fn tiles[] = {nullptr, &K::template tile<T>...};  // by T
};

// y[t · ldy + r] = row r of W · (x + t · ldx) for t < n_tok, r < n_rows. Per group of four weight
// rows and per chunk of columns: with one activation row, the four rows in registers together
// (as the gemv kernel always did); with several, each weight row against tiles of up to t_tile
// activation rows, so that each weight vector is widened or dequantized once per tile and read
// from L1 by the others. The single rows at the end go through K::single per activation row: at
// most three rows, whose bytes stay in L1.
template <class K, class Table>
void batch_rows(const uint8_t * w, size_t rb, int64_t n, const float * x, int64_t ldx, int64_t n_tok, float * y,
                int64_t ldy, int64_t n_rows) {
    alignas(32) __m256 acc[4 * batch_max_tok * K::n_acc];
    const int64_t n_units = n / 32, n_groups = n_rows / 4;
    for (int64_t t0 = 0; t0 < n_tok; t0 += batch_max_tok) {
        const int64_t nt = n_tok - t0 < batch_max_tok ? n_tok - t0 : batch_max_tok;
        const float * xs = x + t0 * ldx;
        float * ys = y + t0 * ldy;
        const int64_t chunk = chunk_units(nt), acc_ld = nt * K::n_acc;
        for (int64_t g = 0; g < n_groups; ++g) {
            const uint8_t * wg = w + size_t(4 * g) * rb;
            const uint8_t * next = g + 1 < n_groups ? wg + 4 * rb : wg;
            for (int64_t i = 0; i < 4 * acc_ld; ++i) acc[i] = _mm256_setzero_ps();
            for (int64_t u0 = 0; u0 < n_units; u0 += chunk) {
                const int64_t u1 = u0 + chunk < n_units ? u0 + chunk : n_units;
                const uint8_t * pf = K::prefetch_base(wg, next, u0);
                // ceil(nt / t_tile) tiles of nearly equal size (25 = 7 + 6 + 6 + 6, not 8 + 8 + 8 + 1):
                // each tile widens or dequantizes the weights once.
                const int64_t n_tiles = (nt + K::t_tile - 1) / K::t_tile;
                for (int64_t i = 0, tb = 0; i < n_tiles; ++i) {
                    const int64_t T = nt / n_tiles + (i < nt % n_tiles ? 1 : 0);
                    Table::tiles[T](wg, rb, xs + tb * ldx, ldx, u0, u1, acc + tb * K::n_acc, acc_ld,
                                    i == 0 ? pf : nullptr);
                    tb += T;
                }
            }
            for (int r = 0; r < 4; ++r) {
                for (int64_t t = 0; t < nt; ++t) {
                    ys[t * ldy + 4 * g + r] =
                        K::finish(wg + size_t(r) * rb, xs + t * ldx, n, acc + r * acc_ld + t * K::n_acc);
                }
            }
        }
        for (int64_t r = 4 * n_groups; r < n_rows; ++r) {
            for (int64_t t = 0; t < nt; ++t) ys[t * ldy + r] = K::single(w + size_t(r) * rb, xs + t * ldx, n);
        }
    }
}

template <class L>
using float_tiles = tile_table<float_kernel<L>, 1, 2, 3, 4, 5, 6>;
template <class Q>
using quant_tiles = tile_table<quant_kernel<Q>, 1, 2, 3, 4, 5, 6, 7, 8>;

// ---- types decoded to f32 weights (all quantized types but Q8_0 and Q4_0) ----
//
// Each type gives the 32 weights of column unit u (columns [32u, 32u + 32)) of a row as four f32
// vectors (weights 0..7, 8..15, 16..23, 24..31 of the unit), with the values of matmul.cpp's
// decode_block bit for bit: a = d · sc in f32 (exact), w = a · q (exact) or fma(a, q, ±m), which
// rounds a · q ± m once as the scalar a · q ± m does (a · q is exact). The scale unpacking repeats
// matmul.cpp's (this file may not share inline functions with others: kernels_avx2.h); the tests
// compare the two on random blocks.

inline __m256i u8x8(const uint8_t * p) { return _mm256_cvtepu8_epi32(load_8_bytes(p)); }

inline __m256 i32_to_f32(__m256i v) { return _mm256_cvtepi32_ps(v); }

// (v >> s) & mask per lane.
inline __m256i bits(__m256i v, int s, int mask) {
    return _mm256_and_si256(_mm256_srli_epi32(v, s), _mm256_set1_epi32(mask));
}

// 32 weights of 16 bytes, weight j < 16 the low nibble of qs[j] and j + 16 its high nibble: the
// nibbles as int32 lanes.
inline void nibbles_32(const uint8_t * qs, __m256i * q) {
    const __m256i u0 = u8x8(qs), u1 = u8x8(qs + 8);
    q[0] = bits(u0, 0, 15);
    q[1] = bits(u1, 0, 15);
    q[2] = bits(u0, 4, 15);
    q[3] = bits(u1, 4, 15);
}

// The same 32 nibbles looked up in kvalues_iq4nl (one byte shuffle per 16), times a.
inline void iq4_32(const uint8_t * qs, float a, __m256 * w) {
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i *>(kvalues_iq4nl));
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(qs));
    const __m128i m4 = _mm_set1_epi8(15);
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(v, m4));                     // weights 0..15
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(v, 4), m4));  // 16..31
    const __m256 va = _mm256_set1_ps(a);
    w[0] = _mm256_mul_ps(va, i32_to_f32(_mm256_cvtepi8_epi32(lo)));
    w[1] = _mm256_mul_ps(va, i32_to_f32(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))));
    w[2] = _mm256_mul_ps(va, i32_to_f32(_mm256_cvtepi8_epi32(hi)));
    w[3] = _mm256_mul_ps(va, i32_to_f32(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))));
}

inline float f16_at(const uint8_t * p) { return f16_scalar(load_u16(p)); }

struct deq_q4_1 {
    static constexpr size_t block_bytes = sizeof(block_q4_1);
    static constexpr int64_t block_units = 1;
    static void weights(const uint8_t * row, int64_t u, __m256 * w) {
        const uint8_t * b = row + size_t(u) * block_bytes;
        const __m256 d = _mm256_set1_ps(f16_at(b)), m = _mm256_set1_ps(f16_at(b + 2));
        __m256i q[4];
        nibbles_32(b + offsetof(block_q4_1, qs), q);
        for (int k = 0; k < 4; ++k) w[k] = _mm256_fmadd_ps(d, i32_to_f32(q[k]), m);
    }
};

// Q5_0 (offset false: w = d · (q - 16)) and Q5_1 (w = d · q + m).
template <bool offset>
struct deq_q5 {
    using block = std::conditional_t<offset, block_q5_1, block_q5_0>;
    static constexpr size_t block_bytes = sizeof(block);
    static constexpr int64_t block_units = 1;
    static void weights(const uint8_t * row, int64_t u, __m256 * w) {
        const uint8_t * b = row + size_t(u) * block_bytes;
        const __m256 d = _mm256_set1_ps(f16_at(b));
        uint32_t qh32;
        std::memcpy(&qh32, b + offsetof(block, qh), 4);
        const __m256i qh = _mm256_set1_epi32(int(qh32));
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        __m256i q[4];
        nibbles_32(b + offsetof(block, qs), q);
        for (int k = 0; k < 4; ++k) {
            // The fifth bit of weight 8k + lane is bit 8k + lane of qh.
            const __m256i hb = _mm256_and_si256(_mm256_srlv_epi32(qh, _mm256_add_epi32(lane, _mm256_set1_epi32(8 * k))),
                                                _mm256_set1_epi32(1));
            q[k] = _mm256_or_si256(q[k], _mm256_slli_epi32(hb, 4));
        }
        if constexpr (offset) {
            const __m256 m = _mm256_set1_ps(f16_at(b + 2));
            for (int k = 0; k < 4; ++k) w[k] = _mm256_fmadd_ps(d, i32_to_f32(q[k]), m);
        } else {
            for (int k = 0; k < 4; ++k) w[k] = _mm256_mul_ps(d, i32_to_f32(_mm256_sub_epi32(q[k], _mm256_set1_epi32(16))));
        }
    }
};

struct deq_iq4_nl {
    static constexpr size_t block_bytes = sizeof(block_iq4_nl);
    static constexpr int64_t block_units = 1;
    static void weights(const uint8_t * row, int64_t u, __m256 * w) {
        const uint8_t * b = row + size_t(u) * block_bytes;
        iq4_32(b + offsetof(block_iq4_nl, qs), f16_at(b), w);
    }
};

// Super-block types: unit u of a row is sub-block u % 8 of super-block u / 8.
template <class B>
struct super_block {
    static constexpr size_t block_bytes = sizeof(B);
    static constexpr int64_t block_units = 8;
    static const uint8_t * at(const uint8_t * row, int64_t u) { return row + size_t(u / 8) * block_bytes; }
};

struct deq_q2_k : super_block<block_q2_k> {
    static void weights(const uint8_t * row, int64_t unit, __m256 * w) {
        const uint8_t * b = at(row, unit);
        const int u = int(unit % 8);
        const float d = f16_at(b + offsetof(block_q2_k, d)), dmin = f16_at(b + offsetof(block_q2_k, dmin));
        const uint8_t * qs = b + offsetof(block_q2_k, qs) + 32 * (u / 4);
        for (int h = 0; h < 2; ++h) {  // the two 16-weight sub-blocks
            const int sc = b[offsetof(block_q2_k, scales) + 2 * u + h];
            const __m256 a = _mm256_set1_ps(d * float(sc & 15)), m = _mm256_set1_ps(dmin * float(sc >> 4));
            for (int k = 2 * h; k < 2 * h + 2; ++k)
                w[k] = _mm256_fmsub_ps(a, i32_to_f32(bits(u8x8(qs + 8 * k), 2 * (u % 4), 3)), m);
        }
    }
};

struct deq_q3_k : super_block<block_q3_k> {
    static int scale(const uint8_t * s, int i) {
        const int lo = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
        const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        return (lo | hi << 4) - 32;
    }
    static void weights(const uint8_t * row, int64_t unit, __m256 * w) {
        const uint8_t * b = at(row, unit);
        const int u = int(unit % 8);
        const float d = f16_at(b + offsetof(block_q3_k, d));
        const uint8_t * qs = b + offsetof(block_q3_k, qs) + 32 * (u / 4);
        const uint8_t * hmask = b + offsetof(block_q3_k, hmask);
        const __m256i four = _mm256_set1_epi32(4);
        for (int h = 0; h < 2; ++h) {
            const __m256 a = _mm256_set1_ps(d * float(scale(b + offsetof(block_q3_k, scales), 2 * u + h)));
            for (int k = 2 * h; k < 2 * h + 2; ++k) {
                const __m256i lo = bits(u8x8(qs + 8 * k), 2 * (u % 4), 3);
                const __m256i hb = _mm256_slli_epi32(bits(u8x8(hmask + 8 * k), u, 1), 2);
                w[k] = _mm256_mul_ps(a, i32_to_f32(_mm256_sub_epi32(_mm256_add_epi32(lo, hb), four)));
            }
        }
    }
};

// Q4_K (q5 false) and Q5_K.
template <bool q5>
struct deq_q45_k : super_block<std::conditional_t<q5, block_q5_k, block_q4_k>> {
    using block = std::conditional_t<q5, block_q5_k, block_q4_k>;
    static void weights(const uint8_t * row, int64_t unit, __m256 * w) {
        const uint8_t * b = super_block<block>::at(row, unit);
        const int u = int(unit % 8);
        const uint8_t * s = b + offsetof(block, scales);
        int sc, mn;
        scale_min_k4(s, u, sc, mn);
        const __m256 a = _mm256_set1_ps(f16_at(b) * float(sc)), m = _mm256_set1_ps(f16_at(b + 2) * float(mn));
        const uint8_t * qs = b + offsetof(block, qs) + 32 * (u / 2);
        for (int k = 0; k < 4; ++k) {
            __m256i q = bits(u8x8(qs + 8 * k), 4 * (u % 2), 15);
            if constexpr (q5) {
                q = _mm256_or_si256(q, _mm256_slli_epi32(bits(u8x8(b + offsetof(block_q5_k, qh) + 8 * k), u, 1), 4));
            }
            w[k] = _mm256_fmsub_ps(a, i32_to_f32(q), m);
        }
    }
};

struct deq_q6_k : super_block<block_q6_k> {
    static void weights(const uint8_t * row, int64_t unit, __m256 * w) {
        const uint8_t * b = at(row, unit);
        const int u = int(unit % 8), n = u / 4, k4 = u % 4;
        const float d = f16_at(b + offsetof(block_q6_k, d));
        const auto * scales = reinterpret_cast<const int8_t *>(b + offsetof(block_q6_k, scales));
        const uint8_t * ql = b + offsetof(block_q6_k, ql) + 64 * n + 32 * (k4 % 2);
        const uint8_t * qh = b + offsetof(block_q6_k, qh) + 32 * n;
        const __m256i off = _mm256_set1_epi32(32);
        for (int h = 0; h < 2; ++h) {
            const __m256 a = _mm256_set1_ps(d * float(scales[2 * u + h]));
            for (int k = 2 * h; k < 2 * h + 2; ++k) {
                const __m256i lo = bits(u8x8(ql + 8 * k), k4 < 2 ? 0 : 4, 15);
                const __m256i hi = _mm256_slli_epi32(bits(u8x8(qh + 8 * k), 2 * k4, 3), 4);
                w[k] = _mm256_mul_ps(a, i32_to_f32(_mm256_sub_epi32(_mm256_or_si256(lo, hi), off)));
            }
        }
    }
};

struct deq_iq4_xs : super_block<block_iq4_xs> {
    static void weights(const uint8_t * row, int64_t unit, __m256 * w) {
        const uint8_t * b = at(row, unit);
        const int u = int(unit % 8);
        const unsigned scales_h = load_u16(b + offsetof(block_iq4_xs, scales_h));
        const int ls = ((b[offsetof(block_iq4_xs, scales_l) + u / 2] >> (4 * (u % 2))) & 15) |
                       ((scales_h >> (2 * u)) & 3) << 4;
        iq4_32(b + offsetof(block_iq4_xs, qs) + 16 * u, f16_at(b) * float(ls - 32), w);
    }
};

// Decoded rows: R weight rows times T activation rows, units [u0, u1), the accumulators a0, a1 of
// (r, t) at acc[r · acc_ld + 2t] (as float_tile). Per unit and (r, t): a0 += w0·x0, a1 += w1·x1,
// a0 += w2·x2, a1 += w3·x3 (FMA) — the order of every row, whatever R and T; each unit of a weight
// row is decoded once for the T activation rows. Prefetch as quant_tile, unit_bytes per unit.
template <class D, int R, int T>
void deq_tile(const uint8_t * w, size_t rb, const float * x, int64_t ldx, int64_t u0, int64_t u1, __m256 * acc,
              int64_t acc_ld, const uint8_t * pf) {
    constexpr size_t unit_bytes = (D::block_bytes + D::block_units - 1) / D::block_units;
    __m256 a[R][T][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
            a[r][t][0] = acc[r * acc_ld + 2 * t];
            a[r][t][1] = acc[r * acc_ld + 2 * t + 1];
        }
    }
    for (int64_t u = u0; u < u1; ++u) {
        if (pf != nullptr) {
            for (size_t o = 0; o < 4 * unit_bytes; o += 64) prefetch(pf + o);
            pf += 4 * unit_bytes;
        }
        const float * xu = x + u * 32;
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            __m256 wv[4];
            D::weights(w + size_t(r) * rb, u, wv);
#pragma GCC unroll 8
            for (int t = 0; t < T; ++t) {
                const float * xt = xu + t * ldx;
                a[r][t][0] = _mm256_fmadd_ps(wv[0], _mm256_loadu_ps(xt), a[r][t][0]);
                a[r][t][1] = _mm256_fmadd_ps(wv[1], _mm256_loadu_ps(xt + 8), a[r][t][1]);
                a[r][t][0] = _mm256_fmadd_ps(wv[2], _mm256_loadu_ps(xt + 16), a[r][t][0]);
                a[r][t][1] = _mm256_fmadd_ps(wv[3], _mm256_loadu_ps(xt + 24), a[r][t][1]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
            acc[r * acc_ld + 2 * t] = a[r][t][0];
            acc[r * acc_ld + 2 * t + 1] = a[r][t][1];
        }
    }
}

template <class D>
struct deq_kernel {
    static constexpr int n_acc = 2;
    static constexpr size_t unit_bytes = (D::block_bytes + D::block_units - 1) / D::block_units;
    // Register tiles: one weight row against up to t_tile = 4 activation rows (8 accumulators, the
    // unit's four weight vectors, an x vector), two rows against two, the group's four rows
    // against one (the gemv kernel).
    static constexpr int t_tile = 4;
    static constexpr int rows_per_tile(int T) { return T == 1 ? 4 : T == 2 ? 2 : 1; }
    template <int T>
    static void tile(const uint8_t * w, size_t rb, const float * x, int64_t ldx, int64_t u0, int64_t u1, __m256 * acc,
                     int64_t acc_ld, const uint8_t * pf) {
        constexpr int R = rows_per_tile(T);
        for (int r = 0; r < 4; r += R) {
            deq_tile<D, R, T>(w + size_t(r) * rb, rb, x, ldx, u0, u1, acc + r * acc_ld, acc_ld, r == 0 ? pf : nullptr);
        }
    }
    static const uint8_t * prefetch_base(const uint8_t *, const uint8_t * next_group, int64_t u0) {
        return next_group + size_t(4 * u0) * unit_bytes;
    }
    static float finish(const uint8_t *, const float *, int64_t, const __m256 * acc) {
        return hsum(_mm256_add_ps(acc[0], acc[1]));
    }
    // A single row: the group rows' order (deq_tile with R = T = 1 over all units).
    static float single(const uint8_t * row, const float * x, int64_t n) {
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        deq_tile<D, 1, 1>(row, 0, x, 0, 0, n / 32, acc, 2, nullptr);
        return hsum(_mm256_add_ps(acc[0], acc[1]));
    }
};

template <class D>
using deq_tiles = tile_table<deq_kernel<D>, 1, 2, 3, 4>;

template <class D>
void deq_rows(const uint8_t * w, size_t rb, int64_t n, const float * x, int64_t ldx, int64_t n_tok, float * y,
              int64_t ldy, int64_t n_rows) {
    batch_rows<deq_kernel<D>, deq_tiles<D>>(w, rb, n, x, ldx, n_tok, y, ldy, n_rows);
}

// ---- attention: the online softmax of a KV head's query heads over chunks of keys ----

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

// Below this, e^x is under FLT_MIN (ln 2^-126 = -87.3365): exp_nonpositive returns 0 there.
constexpr float exp_min_arg = -87.33654f;

// e^x for x <= 0 (x < exp_min_arg, -inf and NaN give 0), f32. Range reduction (Cody & Waite):
// x = n·ln2 + r with n = round(x / ln2), |r| <= ln2 / 2, ln2 split as ln2_hi + ln2_lo where ln2_hi
// has 9 significant bits, so n·ln2_hi is exact and r is x - n·ln2 to f32 precision (FMA); then
// e^r = 1 + r + r²·P(r), P of degree 5 with the coefficients of Cephes' expf (S. Moshier), and
// e^x = e^r · 2^n built in the exponent bits. Relative error against e^x in double, measured over
// every f32 in [exp_min_arg, 0]: at most 8.4e-8 (0.7 ulp).
inline __m256 exp_nonpositive(__m256 x) {
    const __m256 valid = _mm256_cmp_ps(x, _mm256_set1_ps(exp_min_arg), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(exp_min_arg));  // keeps 2^n a normal number
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln2_hi
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);      // ln2_lo
    __m256 u = _mm256_set1_ps(1.9875691500e-4f);
    u = _mm256_fmadd_ps(u, r, _mm256_set1_ps(1.3981999507e-3f));
    u = _mm256_fmadd_ps(u, r, _mm256_set1_ps(8.3334519073e-3f));
    u = _mm256_fmadd_ps(u, r, _mm256_set1_ps(4.1665795894e-2f));
    u = _mm256_fmadd_ps(u, r, _mm256_set1_ps(1.6666665459e-1f));
    u = _mm256_fmadd_ps(u, r, _mm256_set1_ps(5.0000001201e-1f));
    const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(u, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    const __m256i pow2n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(e, _mm256_castsi256_ps(pow2n)), valid);
}

inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Software prefetch: while scoring keys [j, j + 8) (for all the call's query heads) the kernel
// prefetches the K and V rows of keys [j + 64, j + 72) among its n + n_ahead keys, when a head's
// row is at least a cache line. The hardware prefetchers cannot follow a row index list, and follow
// a head's strided rows (one head_dim slice of each n_head_kv · head_dim row) only partly. (Decode
// feeds the kernel one chunk at a time, with the next chunk as n_ahead.) Measured with one query
// head per call on the AMD EPYC test VM (bench_attention, 8 heads, f16, n_kv 32768, K/V in DRAM;
// this VM's bandwidth varies from run to run): through a shuffled row list, head_dim 64 went
// from ~43 to ~26 ns per key and 128 from ~70-100 to ~50-75; in order, head_dim 64 from ~41 to
// ~23-37 and 128 from ~58-78 to ~56-59; with the K/V in L3 (n_kv 2048) it cost 0-20%. 32 or 128
// keys ahead did no better. For head_dim 8 (16-byte rows) the prefetch instructions cost more than
// they saved (2.0 vs 2.7 ns per key).
constexpr int attn_prefetch_keys = 64;
constexpr size_t attn_prefetch_min_bytes = 64;

// Columns [8b, 8b + 8) of scores_tile's dot products: d[r][h] = K_r · q_h (first) or d[r][h] +=
// K_r · q_h (FMA). The H q vectors stay in registers (R · H accumulators + H + 1 registers, 13 at
// most); each K vector is used as soon as it is loaded.
template <class L, int R, int H, bool first>
inline void scores_step(const float * q, int head_dim, const uint8_t * k, const size_t * off, int j, int b,
                        __m256 (&d)[R][H]) {
    __m256 qh[H];
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
        qh[h] = _mm256_loadu_ps(q + h * head_dim + 8 * b);
        // Keeps qh[h] in a register: GCC would otherwise fold the load into each of the R FMAs (R
        // loads of q instead of one), which made the 2 × 4 tile load-bound (0.21 against 0.16 ns per
        // FMA with K in L1 on the AMD EPYC test VM).
        __asm__("" : "+x"(qh[h]));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        const __m256 kr = L::load8(k + off[j + r], 8 * b);
#pragma GCC unroll 4
        for (int h = 0; h < H; ++h) d[r][h] = first ? _mm256_mul_ps(kr, qh[h]) : _mm256_fmadd_ps(kr, qh[h], d[r][h]);
    }
}

// Scores of R keys × H query heads: keys j .. j + R - 1 of the chunk (K rows at k + off[j + r]),
// query head i's row at q + i · head_dim (head_dim = 8 · nb), times scale, to p[i · attn_chunk + j + r].
// Per (key, head), one 8-lane chain d = K[0, 8)·q[0, 8), then d += K[8b, 8b + 8)·q[8b, 8b + 8) (FMA)
// for b = 1 .. nb - 1, reduced as ((d0 + d1) + (d2 + d3)) + ((d4 + d5) + (d6 + d7)): the same
// arithmetic for every (R, H), so that a head's scores depend neither on the tile nor on the other
// heads of the group. Each K vector is loaded and widened once for the H heads, each q vector loaded
// once for the R keys; the R · H = 8 independent chains cover the FMA latency (4 cycles, 2 per cycle).
template <class L, int R, int H>
inline void scores_tile(const float * q, int head_dim, const uint8_t * k, const size_t * off, int j, __m256 vscale,
                        float * p) {
    static_assert(R * H == 8);
    __m256 d[R][H];
    scores_step<L, R, H, true>(q, head_dim, k, off, j, 0, d);
    for (int b = 1; b < head_dim / 8; ++b) scores_step<L, R, H, false>(q, head_dim, k, off, j, b, d);
    // hadd(a, b) = [a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, a6+a7, b4+b5, b6+b7]; Σ_lo x = (x0 + x1) +
    // (x2 + x3) and Σ_hi x = (x4 + x5) + (x6 + x7) of a chain x; the score is Σ_lo + Σ_hi.
    if constexpr (H == 1) {
        // u0 = [Σ_lo d0 .. Σ_lo d3 | Σ_hi d0 .. Σ_hi d3], u1 the same of d4 .. d7.
        const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(d[0][0], d[1][0]), _mm256_hadd_ps(d[2][0], d[3][0]));
        const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(d[4][0], d[5][0]), _mm256_hadd_ps(d[6][0], d[7][0]));
        const __m256 s = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
        _mm256_storeu_ps(p + j, _mm256_mul_ps(s, vscale));
    } else if constexpr (H == 2) {
        // u_i = [Σ_lo of keys 0 .. 3 | Σ_hi of keys 0 .. 3] of head i; s = [head 0 | head 1].
        __m256 u[2];
        for (int h = 0; h < 2; ++h) {
            u[h] = _mm256_hadd_ps(_mm256_hadd_ps(d[0][h], d[1][h]), _mm256_hadd_ps(d[2][h], d[3][h]));
        }
        const __m256 s = _mm256_mul_ps(
            _mm256_add_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20), _mm256_permute2f128_ps(u[0], u[1], 0x31)), vscale);
        _mm_storeu_ps(p + j, _mm256_castps256_ps128(s));
        _mm_storeu_ps(p + attn_chunk + j, _mm256_extractf128_ps(s, 1));
    } else {
        static_assert(H == 4);
        // t_i = [key 0: x0+x1, x2+x3; key 1: the same | key 0: x4+x5, x6+x7; key 1] of head i;
        // w01 = [Σ_lo of (head 0, key 0), (0, 1), (1, 0), (1, 1) | their Σ_hi], w23 of heads 2, 3;
        // s = [(0, 0), (0, 1), (1, 0), (1, 1) | (2, 0), (2, 1), (3, 0), (3, 1)].
        __m256 t[4];
#pragma GCC unroll 4
        for (int h = 0; h < 4; ++h) t[h] = _mm256_hadd_ps(d[0][h], d[1][h]);
        const __m256 w01 = _mm256_hadd_ps(t[0], t[1]), w23 = _mm256_hadd_ps(t[2], t[3]);
        const __m256 s = _mm256_mul_ps(
            _mm256_add_ps(_mm256_permute2f128_ps(w01, w23, 0x20), _mm256_permute2f128_ps(w01, w23, 0x31)), vscale);
        const __m128 s01 = _mm256_castps256_ps128(s), s23 = _mm256_extractf128_ps(s, 1);
        _mm_storel_pi(reinterpret_cast<__m64 *>(p + j), s01);
        _mm_storeh_pi(reinterpret_cast<__m64 *>(p + attn_chunk + j), s01);
        _mm_storel_pi(reinterpret_cast<__m64 *>(p + 2 * attn_chunk + j), s23);
        _mm_storeh_pi(reinterpret_cast<__m64 *>(p + 3 * attn_chunk + j), s23);
    }
}

// acc[8 · NB] = acc · c + Σ_j p[j] · (V row at v + off[j], columns [col, col + 8 · NB)), j < nj,
// with the accumulator in registers: one query head, one slice of columns (the single-head kernel's
// p·V, and the group kernel's for slices of up to 4 column blocks). Small slices keep n_set
// accumulator sets (key j goes to set j % n_set, the keys past the last whole n_set to set 0, the
// sets are added in order at the end) so that at least 4 independent FMA chains hide the FMA
// latency: head_dim 8 went from 1.72 to 1.57 ns per key with 4 sets instead of 2.
template <class L, int NB>
void pv_slice(const uint8_t * v, const size_t * off, const float * p, int nj, int col, float c, float * acc) {
    constexpr int n_set = NB <= 2 ? 4 : NB <= 4 ? 2 : 1;
    __m256 a[n_set][NB];
    const __m256 vc = _mm256_set1_ps(c);
#pragma GCC unroll 8
    for (int i = 0; i < NB; ++i) {
        a[0][i] = _mm256_mul_ps(_mm256_loadu_ps(acc + 8 * i), vc);
        for (int s = 1; s < n_set; ++s) a[s][i] = _mm256_setzero_ps();
    }
    int j = 0;
    for (; j + n_set <= nj; j += n_set) {
#pragma GCC unroll 4
        for (int s = 0; s < n_set; ++s) {
            const __m256 ps = _mm256_broadcast_ss(p + j + s);
            const uint8_t * row = v + off[j + s];
#pragma GCC unroll 8
            for (int i = 0; i < NB; ++i) a[s][i] = _mm256_fmadd_ps(ps, L::load8(row, col + 8 * i), a[s][i]);
        }
    }
    for (; j < nj; ++j) {
        const __m256 ps = _mm256_broadcast_ss(p + j);
#pragma GCC unroll 8
        for (int i = 0; i < NB; ++i) a[0][i] = _mm256_fmadd_ps(ps, L::load8(v + off[j], col + 8 * i), a[0][i]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < NB; ++i) {
        for (int s = 1; s < n_set; ++s) a[0][i] = _mm256_add_ps(a[0][i], a[s][i]);
        _mm256_storeu_ps(acc + 8 * i, a[0][i]);
    }
}

template <class L>
using pv_slice_fn = void (*)(const uint8_t *, const size_t *, const float *, int, int, float, float *);

// p·V of H query heads over C column blocks: for head i (p_i at p + i · attn_chunk, c_i = c[i], its
// accumulator at acc + i · head_dim), acc_i[col, col + 8C) = acc_i · c_i + Σ_j p_i[j] · V_j[col, col
// + 8C), keys j < nj in order: per (head, 8 columns) one FMA chain, the arithmetic of pv_slice with
// one accumulator set (its slices of 5 to 8 blocks). Each V vector is loaded and widened once for
// the H heads; the H · C accumulators stay in registers over the chunk's keys.
template <class L, int C, int H>
void pv_tile(const uint8_t * v, const size_t * off, const float * p, int nj, int col, const float * c, float * acc,
             int head_dim) {
    __m256 a[H][C];
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
        const __m256 vc = _mm256_set1_ps(c[h]);
#pragma GCC unroll 4
        for (int i = 0; i < C; ++i) a[h][i] = _mm256_mul_ps(_mm256_loadu_ps(acc + h * head_dim + col + 8 * i), vc);
    }
    for (int j = 0; j < nj; ++j) {
        const uint8_t * row = v + off[j];
        __m256 ph[H];
#pragma GCC unroll 4
        for (int h = 0; h < H; ++h) ph[h] = _mm256_broadcast_ss(p + h * attn_chunk + j);
#pragma GCC unroll 4
        for (int i = 0; i < C; ++i) {
            const __m256 vv = L::load8(row, col + 8 * i);
#pragma GCC unroll 4
            for (int h = 0; h < H; ++h) a[h][i] = _mm256_fmadd_ps(ph[h], vv, a[h][i]);
        }
    }
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
        for (int i = 0; i < C; ++i) _mm256_storeu_ps(acc + h * head_dim + col + 8 * i, a[h][i]);
    }
}

// Column blocks [b0, b1) of H heads' p·V in tiles of up to C blocks (pv_tile).
template <class L, int C, int H>
void pv_tiles(const uint8_t * v, const size_t * off, const float * p, int nj, int b0, int b1, const float * c,
              float * acc, int head_dim) {
    int b = b0;
    for (; b + C <= b1; b += C) pv_tile<L, C, H>(v, off, p, nj, 8 * b, c, acc, head_dim);
    if constexpr (C > 1) {
        if (b < b1) pv_tiles<L, C / 2, H>(v, off, p, nj, b, b1, c, acc, head_dim);
    }
}

// Prefetches the lines of `bytes` (> 0) bytes at p: one every 64 bytes and the last byte's.
inline void prefetch_range(const uint8_t * p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) prefetch(p + o);
    prefetch(p + bytes - 1);
}

// See attention_group_accumulate in kernels_avx2.h. Per chunk of keys: the scores of all n_q heads
// (8 keys at a time: scores_tile of 2 keys × 4 heads, 4 keys × 2 heads or 8 keys × 1 head), then per
// head the chunk max, one rescale of its accumulator if its running max grew, p = e^(s - m) and the
// chunk's Σp (f32, then added to the double l), then acc += Σ p·V per slice of up to 8 column blocks
// (64 columns): slices of 5 to 8 blocks in pv_tile's tiles of up to 4 heads, smaller slices (and one
// head) in pv_slice per head.
template <class L>
void attention_group_chunked(const float * q, int n_q, const uint8_t * k, const uint8_t * v, const int32_t * rows,
                             int64_t n, int64_t n_ahead, size_t row_bytes, int head_dim, float scale, float * acc,
                             float * m_io, double * l_io) {
    static constexpr pv_slice_fn<L> pv[9] = {nullptr,        pv_slice<L, 1>, pv_slice<L, 2>,
                                             pv_slice<L, 3>, pv_slice<L, 4>, pv_slice<L, 5>,
                                             pv_slice<L, 6>, pv_slice<L, 7>, pv_slice<L, 8>};
    const int nb = head_dim / 8;
    const size_t head_bytes = size_t(head_dim) * L::size;
    const bool prefetch = head_bytes >= attn_prefetch_min_bytes;
    const __m256 vscale = _mm256_set1_ps(scale);
    alignas(32) float p[attn_group_max * attn_chunk];  // p[i · attn_chunk + j]: head i, key j of the chunk
    size_t off[attn_chunk];                            // byte offset of each key's row
    float m[attn_group_max], c[attn_group_max];        // c: rescale of the accumulator, e^(m_old - m_new)
    double l[attn_group_max];
    for (int i = 0; i < n_q; ++i) {
        m[i] = m_io[i];
        l[i] = l_io[i];
    }
    for (int64_t j0 = 0; j0 < n; j0 += attn_chunk) {
        const int nj = n - j0 < attn_chunk ? int(n - j0) : attn_chunk;
        const int nj8 = (nj + 7) & ~7;
        if (rows != nullptr) {
            for (int j = 0; j < nj; ++j) off[j] = size_t(rows[j0 + j]) * row_bytes;
        } else {
            for (int j = 0; j < nj; ++j) off[j] = size_t(j0 + j) * row_bytes;
        }
        for (int j = nj; j < nj8; ++j) off[j] = off[nj - 1];  // padding keys: scored, then set to -inf

        for (int g = 0; g < nj8; g += 8) {
            if (prefetch) {
                const int64_t ja = j0 + g + attn_prefetch_keys, jb = ja + 8 < n + n_ahead ? ja + 8 : n + n_ahead;
                for (int64_t j = ja; j < jb; ++j) {
                    const size_t o = size_t(rows != nullptr ? int64_t(rows[j]) : j) * row_bytes;
                    prefetch_range(k + o, head_bytes);
                    prefetch_range(v + o, head_bytes);
                }
            }
            int i = 0;
            for (; i + 4 <= n_q; i += 4) {
                for (int r = 0; r < 8; r += 2) {
                    scores_tile<L, 2, 4>(q + i * head_dim, head_dim, k, off, g + r, vscale, p + i * attn_chunk);
                }
            }
            if (i + 2 <= n_q) {
                scores_tile<L, 4, 2>(q + i * head_dim, head_dim, k, off, g, vscale, p + i * attn_chunk);
                scores_tile<L, 4, 2>(q + i * head_dim, head_dim, k, off, g + 4, vscale, p + i * attn_chunk);
                i += 2;
            }
            if (i < n_q) scores_tile<L, 8, 1>(q + i * head_dim, head_dim, k, off, g, vscale, p + i * attn_chunk);
        }

        for (int i = 0; i < n_q; ++i) {
            float * pi = p + i * attn_chunk;
            for (int j = nj; j < nj8; ++j) pi[j] = neg_inf;
            __m256 vmax = _mm256_set1_ps(neg_inf);
            for (int g = 0; g < nj8; g += 8) vmax = _mm256_max_ps(vmax, _mm256_load_ps(pi + g));
            const float cm = hmax(vmax);
            c[i] = 1.0f;
            if (cm > m[i]) {
                if (l[i] > 0.0) {
                    c[i] = _mm256_cvtss_f32(exp_nonpositive(_mm256_set1_ps(m[i] - cm)));
                    l[i] *= c[i];
                }
                m[i] = cm;
            }
            const __m256 vm = _mm256_set1_ps(m[i]);
            // Σp of the chunk in f32 (8 lanes of at most 8 terms each, all <= 1: relative error below
            // 1e-6), added to l in double: 7% faster for head_dim 8 than widening every p to double.
            __m256 lsum = _mm256_setzero_ps();
            for (int g = 0; g < nj8; g += 8) {
                const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_load_ps(pi + g), vm));  // padding: 0
                _mm256_store_ps(pi + g, e);
                lsum = _mm256_add_ps(lsum, e);
            }
            l[i] += double(hsum(lsum));
        }

        for (int b0 = 0; b0 < nb; b0 += 8) {
            const int b1 = nb - b0 < 8 ? nb : b0 + 8;
            int i = 0;
            if (b1 - b0 >= 5) {
                for (; i + 4 <= n_q; i += 4) {
                    pv_tiles<L, 2, 4>(v, off, p + i * attn_chunk, nj, b0, b1, c + i, acc + i * head_dim, head_dim);
                }
                if (i + 2 <= n_q) {
                    pv_tiles<L, 4, 2>(v, off, p + i * attn_chunk, nj, b0, b1, c + i, acc + i * head_dim, head_dim);
                    i += 2;
                }
            }
            for (; i < n_q; ++i) {
                pv[b1 - b0](v, off, p + i * attn_chunk, nj, 8 * b0, c[i], acc + i * head_dim + 8 * b0);
            }
        }
    }
    for (int i = 0; i < n_q; ++i) {
        m_io[i] = m[i];
        l_io[i] = l[i];
    }
}

}  // namespace

void gemv_batch_rows(ggml_type type, const uint8_t * w, size_t row_bytes, int64_t n_cols, const float * x, int64_t ldx,
                     int64_t n_tok, float * y, int64_t ldy, int64_t n_rows) {
    switch (type) {
        case ggml_type::f32:
            batch_rows<float_kernel<load_f32>, float_tiles<load_f32>>(w, row_bytes, n_cols, x, ldx, n_tok, y, ldy,
                                                                      n_rows);
            return;
        case ggml_type::f16:
            batch_rows<float_kernel<load_f16>, float_tiles<load_f16>>(w, row_bytes, n_cols, x, ldx, n_tok, y, ldy,
                                                                      n_rows);
            return;
        case ggml_type::bf16:
            batch_rows<float_kernel<load_bf16>, float_tiles<load_bf16>>(w, row_bytes, n_cols, x, ldx, n_tok, y, ldy,
                                                                        n_rows);
            return;
        case ggml_type::q8_0:
            batch_rows<quant_kernel<block_q8>, quant_tiles<block_q8>>(w, row_bytes, n_cols, x, ldx, n_tok, y, ldy,
                                                                      n_rows);
            return;
        case ggml_type::q4_0:
            batch_rows<quant_kernel<block_q4>, quant_tiles<block_q4>>(w, row_bytes, n_cols, x, ldx, n_tok, y, ldy,
                                                                      n_rows);
            return;
        case ggml_type::q4_1: deq_rows<deq_q4_1>(w, row_bytes, n_cols, x, ldx, n_tok, y, ldy, n_rows); return;
        case ggml_type::q5_0: deq_rows<deq_q5<false>>(w, row_bytes, n_cols, x, ldx, n_tok, y, ldy, n_rows); return;
        case ggml_type::q5_1: deq_rows<deq_q5<true>>(w, row_bytes, n_cols, x, ldx, n_tok, y, ldy, n_rows); return;
        case ggml_type::iq4_nl: deq_rows<deq_iq4_nl>(w, row_bytes, n_cols, x, ldx, n_tok, y, ldy, n_rows); return;
        case ggml_type::q2_k: deq_rows<deq_q2_k>(w, row_bytes, n_cols, x, ldx, n_tok, y, ldy, n_rows); return;
        case ggml_type::q3_k: deq_rows<deq_q3_k>(w, row_bytes, n_cols, x, ldx, n_tok, y, ldy, n_rows); return;
        case ggml_type::q4_k: deq_rows<deq_q45_k<false>>(w, row_bytes, n_cols, x, ldx, n_tok, y, ldy, n_rows); return;
        case ggml_type::q5_k: deq_rows<deq_q45_k<true>>(w, row_bytes, n_cols, x, ldx, n_tok, y, ldy, n_rows); return;
        case ggml_type::q6_k: deq_rows<deq_q6_k>(w, row_bytes, n_cols, x, ldx, n_tok, y, ldy, n_rows); return;
        case ggml_type::iq4_xs: deq_rows<deq_iq4_xs>(w, row_bytes, n_cols, x, ldx, n_tok, y, ldy, n_rows); return;
    }
    __builtin_trap();  // unreachable: the caller validated the type
}

namespace {

template <class D>
void deq_row(const uint8_t * src, float * dst, int64_t n) {
    for (int64_t u = 0; u < n / 32; ++u) {
        __m256 w[4];
        D::weights(src, u, w);
        for (int k = 0; k < 4; ++k) _mm256_storeu_ps(dst + 32 * u + 8 * k, w[k]);
    }
}

}  // namespace

bool dequantize_row(ggml_type type, const uint8_t * src, float * dst, int64_t n) {
    switch (type) {
        case ggml_type::q4_1: deq_row<deq_q4_1>(src, dst, n); return true;
        case ggml_type::q5_0: deq_row<deq_q5<false>>(src, dst, n); return true;
        case ggml_type::q5_1: deq_row<deq_q5<true>>(src, dst, n); return true;
        case ggml_type::iq4_nl: deq_row<deq_iq4_nl>(src, dst, n); return true;
        case ggml_type::q2_k: deq_row<deq_q2_k>(src, dst, n); return true;
        case ggml_type::q3_k: deq_row<deq_q3_k>(src, dst, n); return true;
        case ggml_type::q4_k: deq_row<deq_q45_k<false>>(src, dst, n); return true;
        case ggml_type::q5_k: deq_row<deq_q45_k<true>>(src, dst, n); return true;
        case ggml_type::q6_k: deq_row<deq_q6_k>(src, dst, n); return true;
        case ggml_type::iq4_xs: deq_row<deq_iq4_xs>(src, dst, n); return true;
        default: return false;
    }
}

float dot_f32(const float * a, const float * b, int64_t n) {
    return dot_row<load_f32>(reinterpret_cast<const uint8_t *>(b), a, n);
}

float dot_f16(const float * a, const uint16_t * b, int64_t n) {
    return dot_row<load_f16>(reinterpret_cast<const uint8_t *>(b), a, n);
}

void axpy_f32(float a, const float * x, float * y, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
        _mm256_storeu_ps(y + i + 8, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8)));
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += a * x[i];
}

void axpy_f16(float a, const uint16_t * x, float * y, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i)));
        const __m256 x1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i + 8)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, x0, _mm256_loadu_ps(y + i)));
        _mm256_storeu_ps(y + i + 8, _mm256_fmadd_ps(va, x1, _mm256_loadu_ps(y + i + 8)));
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, x0, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; ++i) y[i] += a * f16_scalar(x[i]);
}

float sum_squares(const float * x, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        const __m256 v2 = _mm256_loadu_ps(x + i + 16), v3 = _mm256_loadu_ps(x + i + 24);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
        a1 = _mm256_fmadd_ps(v1, v1, a1);
        a2 = _mm256_fmadd_ps(v2, v2, a2);
        a3 = _mm256_fmadd_ps(v3, v3, a3);
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        a0 = _mm256_fmadd_ps(v, v, a0);
    }
    float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; ++i) s += x[i] * x[i];
    return s;
}

void fp16_to_fp32_row(const uint16_t * src, float * dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i))));
    }
    for (; i < n; ++i) dst[i] = f16_scalar(src[i]);
}

void fp32_to_fp16_row(const float * src, uint16_t * dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i), h);
    }
    for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

void attention_group_accumulate(const float * q, int n_q, ggml_type kv_type, const uint8_t * k, const uint8_t * v,
                                const int32_t * rows, int64_t n, int64_t n_ahead, size_t row_bytes, int head_dim,
                                float scale, float * acc, float * m, double * l) {
    if (n_q < 1 || n_q > attn_group_max) __builtin_trap();  // the caller splits larger groups
    if (kv_type == ggml_type::f16) {
        attention_group_chunked<load_f16>(q, n_q, k, v, rows, n, n_ahead, row_bytes, head_dim, scale, acc, m, l);
    } else {
        attention_group_chunked<load_f32>(q, n_q, k, v, rows, n, n_ahead, row_bytes, head_dim, scale, acc, m, l);
    }
}

void exp_nonpositive_row(const float * x, float * y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp_nonpositive(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float t[8] = {};
        std::memcpy(t, x + i, size_t(n - i) * 4);
        _mm256_storeu_ps(t, exp_nonpositive(_mm256_loadu_ps(t)));
        std::memcpy(y + i, t, size_t(n - i) * 4);
    }
}

}  // namespace hill::avx2
