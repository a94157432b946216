// AVX2/FMA/F16C kernels; see kernels_avx2.h for the rules of this file. Scalar references:
// gemv_rows -> matmul.cpp, dot/axpy -> attention.cpp, fp16 rows and sum_squares -> ops.cpp.
#include "compute/kernels_avx2.h"

#include <immintrin.h>

#include <cstring>

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

inline uint16_t load_u16(const uint8_t * p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
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
    for (; j < n; ++j) s += L::load1(w, j) * x[j];
    return s;
}

// Four rows at once (two accumulators each): every x vector loaded serves four rows, and four
// weight streams keep enough loads in flight. 32 columns per step: one 64-byte line of each f16
// row (two of each f32 row).
//
// Prefetch: as gemv_quant, each step prefetches the next group of four rows (one contiguous range
// of 4 · rb bytes) in address order, 4 · 32 columns' bytes per step, so the DRAM sees one
// sequential stream ahead of the four row streams. With the hardware prefetchers alone, one core of
// the AMD EPYC development machine (40 GB/s read loop) streamed F16 at ~22 GB/s through this
// kernel, and ~29 GB/s prefetching each row stream 2 KiB ahead (the former scheme). On the 2-core
// test VM this scheme took one core from 25 to 33 GB/s for F16 and from 24 to 32 GB/s for BF16
// over that former scheme. The last group prefetches itself rather than rows past the range. F32
// rows keep the per-row scheme (prefetch_f32_bytes ahead of each stream): the group scheme measured
// ~6% slower for them on one core there (32 vs 34 GB/s) and no better on two.
template <class L>
void gemv_float(const uint8_t * w, size_t rb, int64_t n, const float * x, float * y, int64_t n_rows) {
    int64_t r = 0;
    for (; r + 4 <= n_rows; r += 4) {
        const uint8_t * w0 = w + size_t(r) * rb;
        const uint8_t * w1 = w0 + rb;
        const uint8_t * w2 = w1 + rb;
        const uint8_t * w3 = w2 + rb;
        const uint8_t * pf = r + 8 <= n_rows ? w0 + 4 * rb : w0;
        __m256 a00 = _mm256_setzero_ps(), a01 = _mm256_setzero_ps();
        __m256 a10 = _mm256_setzero_ps(), a11 = _mm256_setzero_ps();
        __m256 a20 = _mm256_setzero_ps(), a21 = _mm256_setzero_ps();
        __m256 a30 = _mm256_setzero_ps(), a31 = _mm256_setzero_ps();
        int64_t j = 0;
        for (; j + 32 <= n; j += 32) {
            if constexpr (L::size == 4) {
                const size_t d = size_t(j) * L::size + prefetch_f32_bytes;
                prefetch(w0 + d);
                prefetch(w1 + d);
                prefetch(w2 + d);
                prefetch(w3 + d);
            } else {
                for (size_t o = 0; o < 4 * 32 * L::size; o += 64) prefetch(pf + o);  // 256 B
                pf += 4 * 32 * L::size;
            }
            const __m256 x0 = _mm256_loadu_ps(x + j);
            const __m256 x1 = _mm256_loadu_ps(x + j + 8);
            const __m256 x2 = _mm256_loadu_ps(x + j + 16);
            const __m256 x3 = _mm256_loadu_ps(x + j + 24);
            a00 = _mm256_fmadd_ps(L::load8(w0, j), x0, a00);
            a01 = _mm256_fmadd_ps(L::load8(w0, j + 8), x1, a01);
            a10 = _mm256_fmadd_ps(L::load8(w1, j), x0, a10);
            a11 = _mm256_fmadd_ps(L::load8(w1, j + 8), x1, a11);
            a20 = _mm256_fmadd_ps(L::load8(w2, j), x0, a20);
            a21 = _mm256_fmadd_ps(L::load8(w2, j + 8), x1, a21);
            a30 = _mm256_fmadd_ps(L::load8(w3, j), x0, a30);
            a31 = _mm256_fmadd_ps(L::load8(w3, j + 8), x1, a31);
            a00 = _mm256_fmadd_ps(L::load8(w0, j + 16), x2, a00);
            a01 = _mm256_fmadd_ps(L::load8(w0, j + 24), x3, a01);
            a10 = _mm256_fmadd_ps(L::load8(w1, j + 16), x2, a10);
            a11 = _mm256_fmadd_ps(L::load8(w1, j + 24), x3, a11);
            a20 = _mm256_fmadd_ps(L::load8(w2, j + 16), x2, a20);
            a21 = _mm256_fmadd_ps(L::load8(w2, j + 24), x3, a21);
            a30 = _mm256_fmadd_ps(L::load8(w3, j + 16), x2, a30);
            a31 = _mm256_fmadd_ps(L::load8(w3, j + 24), x3, a31);
        }
        for (; j + 8 <= n; j += 8) {
            const __m256 x0 = _mm256_loadu_ps(x + j);
            a00 = _mm256_fmadd_ps(L::load8(w0, j), x0, a00);
            a10 = _mm256_fmadd_ps(L::load8(w1, j), x0, a10);
            a20 = _mm256_fmadd_ps(L::load8(w2, j), x0, a20);
            a30 = _mm256_fmadd_ps(L::load8(w3, j), x0, a30);
        }
        float s0 = hsum(_mm256_add_ps(a00, a01));
        float s1 = hsum(_mm256_add_ps(a10, a11));
        float s2 = hsum(_mm256_add_ps(a20, a21));
        float s3 = hsum(_mm256_add_ps(a30, a31));
        for (; j < n; ++j) {
            s0 += L::load1(w0, j) * x[j];
            s1 += L::load1(w1, j) * x[j];
            s2 += L::load1(w2, j) * x[j];
            s3 += L::load1(w3, j) * x[j];
        }
        y[r] = s0;
        y[r + 1] = s1;
        y[r + 2] = s2;
        y[r + 3] = s3;
    }
    for (; r < n_rows; ++r) y[r] = dot_row<L>(w + size_t(r) * rb, x, n);
}

// ---- quantized rows: per block, Σ q·x over its 32 weights (unscaled) and the block scale ----

// Sign-extends 8 int8 to 8 floats (a sign-extending load: measured faster on the AMD EPYC
// development machine than one 16-byte load and register extensions).
inline __m128i load_8_bytes(const void * p) { return _mm_loadl_epi64(static_cast<const __m128i *>(p)); }

inline __m256 i8x8_to_f32(const int8_t * q) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load_8_bytes(q))); }

struct block_q8 {
    static constexpr size_t bytes = sizeof(block_q8_0);
    // Block layout: f16 d at byte 0, int8 qs[32] at byte 2.
    static __m256 dot(const uint8_t * b, __m256 x0, __m256 x1, __m256 x2, __m256 x3) {
        const int8_t * q = reinterpret_cast<const int8_t *>(b + 2);
        __m256 s0 = _mm256_mul_ps(i8x8_to_f32(q), x0);
        __m256 s1 = _mm256_mul_ps(i8x8_to_f32(q + 8), x1);
        s0 = _mm256_fmadd_ps(i8x8_to_f32(q + 16), x2, s0);
        s1 = _mm256_fmadd_ps(i8x8_to_f32(q + 24), x3, s1);
        return _mm256_add_ps(s0, s1);
    }
};

struct block_q4 {
    static constexpr size_t bytes = sizeof(block_q4_0);
    // Block layout: f16 d at byte 0, u8 qs[16] at byte 2; weight j < 16 is the low nibble of
    // qs[j], weight j + 16 its high nibble, both offset by 8. Zero-extending 8 bytes to 8 lanes
    // gives both nibble groups with one AND and one shift, without byte shuffles; zero-extending
    // loads measured faster than one 16-byte load and register extensions.
    static __m256 dot(const uint8_t * b, __m256 x0, __m256 x1, __m256 x2, __m256 x3) {
        const __m256i m4 = _mm256_set1_epi32(0x0f);
        const __m256i off = _mm256_set1_epi32(8);
        const __m256i u0 = _mm256_cvtepu8_epi32(load_8_bytes(b + 2));   // qs[0..8)
        const __m256i u1 = _mm256_cvtepu8_epi32(load_8_bytes(b + 10));  // qs[8..16)
        const __m256 w0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(u0, m4), off));  // weights 0..7
        const __m256 w1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(u1, m4), off));  // 8..15
        const __m256 w2 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(u0, 4), off));  // 16..23
        const __m256 w3 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(u1, 4), off));  // 24..31
        __m256 s0 = _mm256_mul_ps(w0, x0);
        __m256 s1 = _mm256_mul_ps(w1, x1);
        s0 = _mm256_fmadd_ps(w2, x2, s0);
        s1 = _mm256_fmadd_ps(w3, x3, s1);
        return _mm256_add_ps(s0, s1);
    }
};

// The block's f16 scale d in all 8 lanes.
inline __m256 block_scale(const uint8_t * b) {
    return _mm256_cvtph_ps(_mm_set1_epi16(short(load_u16(b))));
}

// Four rows at once: the four x vectors of a block serve four rows; one accumulator per row
// (four independent FMA chains), the block sum scaled by d into it.
//
// Prefetch: the four rows are one contiguous range of 4 · rb bytes, read as four streams rb
// apart. Each step prefetches the next group's range in address order, four blocks' bytes per
// step, so that the next group is in cache when it starts: one sequential stream, ahead of all
// four. Prefetching each stream 1 KiB ahead (this kernel's former scheme; 256 B .. 4 KiB alike),
// or one stream 2 .. 16 KiB past the first row, left the DRAM stream at 10-15 GB/s per core
// against a 40 GB/s read loop, although the kernel does ~29 GB/s (Q8_0) from L2; this scheme
// streams Q8_0 at ~27 GB/s on one core and ~40 GB/s (85% of the read loop) on two. The last
// group prefetches itself rather than rows past the range.
template <class Q>
void gemv_quant(const uint8_t * w, size_t rb, int64_t n, const float * x, float * y, int64_t n_rows) {
    const int64_t nb = n / 32;
    int64_t r = 0;
    for (; r + 4 <= n_rows; r += 4) {
        const uint8_t * b0 = w + size_t(r) * rb;
        const uint8_t * b1 = b0 + rb;
        const uint8_t * b2 = b1 + rb;
        const uint8_t * b3 = b2 + rb;
        const uint8_t * pf = r + 8 <= n_rows ? b0 + 4 * rb : b0;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        for (int64_t ib = 0; ib < nb; ++ib) {
            const float * xb = x + ib * 32;
            const __m256 x0 = _mm256_loadu_ps(xb);
            const __m256 x1 = _mm256_loadu_ps(xb + 8);
            const __m256 x2 = _mm256_loadu_ps(xb + 16);
            const __m256 x3 = _mm256_loadu_ps(xb + 24);
            for (size_t o = 0; o < 4 * Q::bytes; o += 64) prefetch(pf + o);  // Q8_0: 136 B, Q4_0: 72 B
            pf += 4 * Q::bytes;
            a0 = _mm256_fmadd_ps(Q::dot(b0, x0, x1, x2, x3), block_scale(b0), a0);
            a1 = _mm256_fmadd_ps(Q::dot(b1, x0, x1, x2, x3), block_scale(b1), a1);
            a2 = _mm256_fmadd_ps(Q::dot(b2, x0, x1, x2, x3), block_scale(b2), a2);
            a3 = _mm256_fmadd_ps(Q::dot(b3, x0, x1, x2, x3), block_scale(b3), a3);
            b0 += Q::bytes;
            b1 += Q::bytes;
            b2 += Q::bytes;
            b3 += Q::bytes;
        }
        y[r] = hsum(a0);
        y[r + 1] = hsum(a1);
        y[r + 2] = hsum(a2);
        y[r + 3] = hsum(a3);
    }
    for (; r < n_rows; ++r) {
        const uint8_t * b = w + size_t(r) * rb;
        // Two accumulators (even / odd blocks) for a single row.
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int64_t ib = 0;
        for (; ib + 2 <= nb; ib += 2, b += 2 * Q::bytes) {
            const float * xb = x + ib * 32;
            a0 = _mm256_fmadd_ps(Q::dot(b, _mm256_loadu_ps(xb), _mm256_loadu_ps(xb + 8), _mm256_loadu_ps(xb + 16),
                                        _mm256_loadu_ps(xb + 24)),
                                 block_scale(b), a0);
            const uint8_t * c = b + Q::bytes;
            a1 = _mm256_fmadd_ps(Q::dot(c, _mm256_loadu_ps(xb + 32), _mm256_loadu_ps(xb + 40), _mm256_loadu_ps(xb + 48),
                                        _mm256_loadu_ps(xb + 56)),
                                 block_scale(c), a1);
        }
        if (ib < nb) {
            const float * xb = x + ib * 32;
            a0 = _mm256_fmadd_ps(Q::dot(b, _mm256_loadu_ps(xb), _mm256_loadu_ps(xb + 8), _mm256_loadu_ps(xb + 16),
                                        _mm256_loadu_ps(xb + 24)),
                                 block_scale(b), a0);
        }
        y[r] = hsum(_mm256_add_ps(a0, a1));
    }
}

}  // namespace

void gemv_rows(ggml_type type, const uint8_t * w, size_t row_bytes, int64_t n_cols, const float * x, float * y,
               int64_t n_rows) {
    switch (type) {
        case ggml_type::f32:
            gemv_float<load_f32>(w, row_bytes, n_cols, x, y, n_rows);
            return;
        case ggml_type::f16:
            gemv_float<load_f16>(w, row_bytes, n_cols, x, y, n_rows);
            return;
        case ggml_type::bf16:
            gemv_float<load_bf16>(w, row_bytes, n_cols, x, y, n_rows);
            return;
        case ggml_type::q8_0:
            gemv_quant<block_q8>(w, row_bytes, n_cols, x, y, n_rows);
            return;
        case ggml_type::q4_0:
            gemv_quant<block_q4>(w, row_bytes, n_cols, x, y, n_rows);
            return;
    }
    __builtin_trap();  // unreachable: the caller validated the type
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

}  // namespace hill::avx2
