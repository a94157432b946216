#include "compute/matmul.h"
#include "compute/block_fields.h"

#include "compute/kernel_mode.h"
#include "compute/kernels_avx2.h"
#include "compute/q8_dot.h"
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

uint32_t load_u32(const uint8_t * p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Q3_K: the 6-bit scale of 16-weight sub-block i (0..15) from the 12 packed bytes s, minus 32.
int scale_q3_k(const uint8_t * s, int i) {
    const int lo = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
    const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    return (lo | hi << 4) - 32;
}

// The weights of one block of the types added with the k-quants (Q4_1, Q5_0, Q5_1, IQ4_NL: 32
// weights; Q2_K .. Q6_K, IQ4_XS: 256), as the f32 nearest to each encoded value (ggml_type.h):
// per group of 16 or 32 weights a = d · sc (exact in f32: at most 11 + 8 significant bits) and
// w = a · q (exact: at most 24 bits) or, for the types with an offset, a · q + m resp.
// a · q - dmin · mn with one rounding (a · q and dmin · mn are exact).
void decode_block(ggml_type type, const uint8_t * b, float * y) {
    switch (type) {
        case ggml_type::q4_1: {
            const float d = fp16_to_fp32(load_u16(b)), m = fp16_to_fp32(load_u16(b + 2));
            const uint8_t * qs = b + offsetof(block_q4_1, qs);
            for (int j = 0; j < 16; ++j) {
                y[j] = d * float(qs[j] & 15) + m;
                y[j + 16] = d * float(qs[j] >> 4) + m;
            }
            return;
        }
        case ggml_type::q5_0:
        case ggml_type::q5_1: {
            const bool q5_1 = type == ggml_type::q5_1;
            const float d = fp16_to_fp32(load_u16(b)), m = q5_1 ? fp16_to_fp32(load_u16(b + 2)) : 0.0f;
            const uint32_t qh = load_u32(b + (q5_1 ? offsetof(block_q5_1, qh) : offsetof(block_q5_0, qh)));
            const uint8_t * qs = b + (q5_1 ? offsetof(block_q5_1, qs) : offsetof(block_q5_0, qs));
            for (int j = 0; j < 16; ++j) {
                const int q0 = (qs[j] & 15) | int((qh >> j) & 1) << 4;
                const int q1 = (qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
                if (q5_1) {
                    y[j] = d * float(q0) + m;
                    y[j + 16] = d * float(q1) + m;
                } else {
                    y[j] = d * float(q0 - 16);
                    y[j + 16] = d * float(q1 - 16);
                }
            }
            return;
        }
        case ggml_type::iq4_nl: {
            const float d = fp16_to_fp32(load_u16(b));
            const uint8_t * qs = b + offsetof(block_iq4_nl, qs);
            for (int j = 0; j < 16; ++j) {
                y[j] = d * float(kvalues_iq4nl[qs[j] & 15]);
                y[j + 16] = d * float(kvalues_iq4nl[qs[j] >> 4]);
            }
            return;
        }
        case ggml_type::q2_k: {
            const uint8_t * scales = b + offsetof(block_q2_k, scales);
            const uint8_t * qs = b + offsetof(block_q2_k, qs);
            const float d = fp16_to_fp32(load_u16(b + offsetof(block_q2_k, d)));
            const float dmin = fp16_to_fp32(load_u16(b + offsetof(block_q2_k, dmin)));
            for (int u = 0; u < 8; ++u) {
                for (int l = 0; l < 32; ++l) {
                    const int sc = scales[2 * u + l / 16];
                    const int q = (qs[32 * (u / 4) + l] >> (2 * (u % 4))) & 3;
                    y[32 * u + l] = (d * float(sc & 15)) * float(q) - dmin * float(sc >> 4);
                }
            }
            return;
        }
        case ggml_type::q3_k: {
            const uint8_t * hmask = b + offsetof(block_q3_k, hmask);
            const uint8_t * qs = b + offsetof(block_q3_k, qs);
            const uint8_t * scales = b + offsetof(block_q3_k, scales);
            const float d = fp16_to_fp32(load_u16(b + offsetof(block_q3_k, d)));
            for (int u = 0; u < 8; ++u) {
                for (int l = 0; l < 32; ++l) {
                    const int lo = (qs[32 * (u / 4) + l] >> (2 * (u % 4))) & 3;
                    const int q = lo - 4 + 4 * ((hmask[l] >> u) & 1);
                    y[32 * u + l] = (d * float(scale_q3_k(scales, 2 * u + l / 16))) * float(q);
                }
            }
            return;
        }
        case ggml_type::q4_k:
        case ggml_type::q5_k: {
            const bool q5 = type == ggml_type::q5_k;
            const float d = fp16_to_fp32(load_u16(b)), dmin = fp16_to_fp32(load_u16(b + 2));
            const uint8_t * scales = b + 4;  // same offset in both blocks
            const uint8_t * qh = b + offsetof(block_q5_k, qh);
            const uint8_t * qs = b + (q5 ? offsetof(block_q5_k, qs) : offsetof(block_q4_k, qs));
            for (int u = 0; u < 8; ++u) {
                int sc = 0, mn = 0;
                scale_min_k4(scales, u, sc, mn);
                const float a = d * float(sc), m = dmin * float(mn);
                for (int l = 0; l < 32; ++l) {
                    int q = (qs[32 * (u / 2) + l] >> (4 * (u % 2))) & 15;
                    if (q5) q |= ((qh[l] >> u) & 1) << 4;
                    y[32 * u + l] = a * float(q) - m;
                }
            }
            return;
        }
        case ggml_type::q6_k: {
            const uint8_t * ql = b + offsetof(block_q6_k, ql);
            const uint8_t * qh = b + offsetof(block_q6_k, qh);
            const auto * scales = reinterpret_cast<const int8_t *>(b + offsetof(block_q6_k, scales));
            const float d = fp16_to_fp32(load_u16(b + offsetof(block_q6_k, d)));
            for (int u = 0; u < 8; ++u) {
                const int n = u / 4, k = u % 4;
                for (int l = 0; l < 32; ++l) {
                    const int lo = (ql[64 * n + 32 * (k % 2) + l] >> (k < 2 ? 0 : 4)) & 15;
                    const int hi = (qh[32 * n + l] >> (2 * k)) & 3;
                    y[32 * u + l] = (d * float(scales[2 * u + l / 16])) * float((lo | hi << 4) - 32);
                }
            }
            return;
        }
        case ggml_type::iq4_xs: {
            const uint8_t * scales_l = b + offsetof(block_iq4_xs, scales_l);
            const uint8_t * qs = b + offsetof(block_iq4_xs, qs);
            const float d = fp16_to_fp32(load_u16(b));
            const unsigned scales_h = load_u16(b + offsetof(block_iq4_xs, scales_h));
            for (int u = 0; u < 8; ++u) {
                const int ls = ((scales_l[u / 2] >> (4 * (u % 2))) & 15) | ((scales_h >> (2 * u)) & 3) << 4;
                const float a = d * float(ls - 32);
                for (int l = 0; l < 32; ++l) {
                    const int nib = (qs[16 * u + l % 16] >> (l < 16 ? 0 : 4)) & 15;
                    y[32 * u + l] = a * float(kvalues_iq4nl[nib]);
                }
            }
            return;
        }
        default: break;
    }
    HILL_ASSERT(false && "decode_block: not a block type of its own");
}

// Q8_0 and Q4_0 keep their scale out of the weights (the products multiply Σ q·x by d per block);
// the other quantized types are decoded to their f32 weights (decode_block).
bool scale_factored(ggml_type type) {
    return type == ggml_type::q8_0 || type == ggml_type::q4_0;
}

// The least f16 >= v (v >= 0, at most 65504): a scale rounded so that it still covers its range.
f16_bits f16_at_least(float v) {
    f16_bits h = fp32_to_fp16(v);
    if (fp16_to_fp32(h) < v) ++h;
    return h;
}

// The greatest f16 <= v (|v| at most 65504): an offset rounded so that it still covers its range.
f16_bits f16_at_most(float v) {
    f16_bits h = fp32_to_fp16(v);
    if (fp16_to_fp32(h) > v) {
        if (h == 0) h = 0x8001;  // the negative f16 nearest zero
        else if (h & 0x8000) ++h;
        else --h;
    }
    return h;
}

// q = round(v / a) clamped to [lo, hi]; 0 when a = 0.
int round_div_clamped(float v, float a, int lo, int hi) {
    if (a == 0.0f) return std::clamp(0, lo, hi);
    return std::clamp(int(std::lround(v / a)), lo, hi);
}

// The smallest integer in [0, hi] with n · unit >= v (hi when none; 0 when unit = 0): a 6- or 8-bit
// sub-block scale rounded up, so that the sub-block's range is covered.
int ceil_div_clamped(float v, float unit, int hi) {
    if (unit == 0.0f) return 0;
    return std::clamp(int(std::ceil(v / unit)), 0, hi);
}

// Q4_1 / Q5_1 of one block of 32 (qmax 15 / 31): m = min x rounded down to f16, d = (max x - m) /
// qmax rounded up to f16, q = round((x - m) / d) in [0, qmax].
void quantize_block_offset(const float * x, int qmax, float & d, float & m, f16_bits & d16, f16_bits & m16, int * q) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < 32; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
    m16 = f16_at_most(lo);
    m = fp16_to_fp32(m16);
    d16 = f16_at_least((hi - m) / float(qmax));
    d = fp16_to_fp32(d16);
    for (int j = 0; j < 32; ++j) q[j] = round_div_clamped(x[j] - m, d, 0, qmax);
}

// Q4_K / Q5_K of one super-block (qmax 15 / 31), writing d, dmin, scales[12] and q[256] (0..qmax):
// per sub-block u of 32, lo_u = min(0, min x), hi_u = max x; dmin = max_u(-lo_u) / 63 and the
// 6-bit min mn_u = ceil(-lo_u / dmin), so that b_u = dmin · mn_u >= -lo_u; then the sub-block's
// step must reach hi_u from -b_u: s_u = (hi_u + b_u) / qmax, d = max_u s_u / 63 and the 6-bit scale
// sc_u = ceil(s_u / d); both super-block scales rounded up to f16. Every x is then within the
// sub-block's range [-b_u, -b_u + qmax · a_u] (a_u = d · sc_u, up to f32 rounding), and
// q = round((x + b_u) / a_u).
void quantize_block_k(const float * x, int qmax, uint8_t * scales, f16_bits & d16, f16_bits & dmin16, int * q) {
    float lo[8], hi[8], s[8];
    float max_min = 0.0f;
    for (int u = 0; u < 8; ++u) {
        lo[u] = 0.0f;
        hi[u] = x[32 * u];
        for (int l = 0; l < 32; ++l) lo[u] = std::min(lo[u], x[32 * u + l]), hi[u] = std::max(hi[u], x[32 * u + l]);
        max_min = std::max(max_min, -lo[u]);
    }
    dmin16 = f16_at_least(max_min / 63.0f);
    const float dmin = fp16_to_fp32(dmin16);
    int mn[8], sc[8];
    float b[8], max_s = 0.0f;
    for (int u = 0; u < 8; ++u) {
        mn[u] = ceil_div_clamped(-lo[u], dmin, 63);
        b[u] = dmin * float(mn[u]);
        s[u] = std::max(0.0f, (hi[u] + b[u]) / float(qmax));
        max_s = std::max(max_s, s[u]);
    }
    d16 = f16_at_least(max_s / 63.0f);
    const float d = fp16_to_fp32(d16);
    std::memset(scales, 0, 12);
    for (int u = 0; u < 8; ++u) {
        sc[u] = ceil_div_clamped(s[u], d, 63);
        const float a = d * float(sc[u]);
        for (int l = 0; l < 32; ++l) q[32 * u + l] = round_div_clamped(x[32 * u + l] + b[u], a, 0, qmax);
        // The packing that scale_min_k4 reads.
        if (u < 4) {
            scales[u] |= uint8_t(sc[u]);
            scales[u + 4] |= uint8_t(mn[u]);
        } else {
            scales[u + 4] = uint8_t((sc[u] & 15) | (mn[u] & 15) << 4);
            scales[u - 4] |= uint8_t((sc[u] >> 4) << 6);
            scales[u] |= uint8_t((mn[u] >> 4) << 6);
        }
    }
}

// Scalar reference of gemv_batch_rows on rows [0, n_rows) of W (rb bytes apart from `base`):
// y[t · ldy + r] = row r · x_t (x_t at x + t · ldx) for t < n_tok. Each (t, r) accumulates in f32 in
// the order of one row alone: column after column; quantized rows per block s = Σ q·x (Q4_0: low
// nibble j, then high nibble j + 16, for j < 16), then acc += d · s; the other quantized types
// column after column over their decoded f32 weights (decode_block), as the float types. A chunk
// of a weight row is decoded (to f32; Q8_0/Q4_0 weights unscaled) once per 64 activation rows.
void batch_rows_scalar(ggml_type type, const uint8_t * base, size_t rb, int64_t n, const float * x, int64_t ldx,
                       int64_t n_tok, float * y, int64_t ldy, int64_t n_rows) {
    constexpr int64_t tok_block = 64;
    constexpr int64_t chunk = 256;  // columns decoded at a time: a multiple of the block size
    float wq[chunk];                // the chunk's weights (quantized: q as f32, unscaled)
    float d[chunk / 32];            // quantized: the scale of each block of the chunk
    float acc[tok_block];
    const bool quant = scale_factored(type);
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
                    default:
                        for (int64_t jb = 0; jb < nj; jb += ggml_block_size(type))
                            decode_block(type, row + size_t((j0 + jb) / ggml_block_size(type)) * ggml_block_bytes(type),
                                         wq + jb);
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

// Whether this product of w goes through the int8 dot products (kernel_mode.h, matmul_mode).
bool uses_int8(const weight_view & w) {
    return matmul_mode_get() == matmul_mode::int8 && int8_dot_supported(w.type);
}

// x f32 [n_tok, n_cols] quantized for w's int8 product: [n_tok] rows of int8_act_row_bytes, in a
// buffer of the calling thread kept between calls (valid until its next call).
uint8_t * quantize_activations(const weight_view & w, const float * x, int64_t n_tok) {
    thread_local std::vector<uint8_t> buf;
    const size_t ldq = int8_act_row_bytes(w.type, w.n_cols);
    if (buf.size() < ldq * size_t(n_tok)) buf.resize(ldq * size_t(n_tok));
    for (int64_t t = 0; t < n_tok; ++t) quantize_activation_row(w.type, x + t * w.n_cols, w.n_cols, buf.data() + t * ldq);
    return buf.data();
}

// Rows [r0, r1) of the int8 product, activations xq from quantize_activations.
void int8_rows(const weight_view & w, const uint8_t * xq, int64_t n_tok, float * y, int64_t r0, int64_t r1) {
    HILL_ASSERT(0 <= r0 && r0 <= r1 && r1 <= w.n_rows && n_tok >= 0);
    if (r0 == r1 || n_tok == 0) return;
    const size_t rb = w.row_bytes(), ldq = int8_act_row_bytes(w.type, w.n_cols);
    const uint8_t * base = static_cast<const uint8_t *>(w.data) + size_t(r0) * rb;
    if (kernel_mode_get() != kernel_mode::avx2) {
        int8_dot_rows_scalar(w.type, base, rb, w.n_cols, xq, ldq, n_tok, y + r0, w.n_rows, r1 - r0);
        return;
    }
    // Many activation rows (prefill): in chunks of about 128 KiB of them, so that a chunk stays in
    // L2 while every weight row of the range passes over it (each (t, r) is computed alone: the
    // chunks change no bit).
    const int64_t chunk = std::max<int64_t>(4, int64_t(128 << 10) / int64_t(ldq) / 4 * 4);
    const auto rows = int8_isa_get() == int8_isa::avx512_vnni ? avx512_vnni::int8_dot_rows
                      : int8_isa_get() == int8_isa::avx_vnni  ? avx_vnni::int8_dot_rows
                                                              : avx2::int8_dot_rows;
    for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
        rows(w.type, base, rb, w.n_cols, xq + size_t(t0) * ldq, ldq, std::min(chunk, n_tok - t0), y + t0 * w.n_rows + r0,
             w.n_rows, r1 - r0);
    }
}

// The prefill product (q8_dot.h, int8_gemm_rows_scalar's bits) through a VNNI build's kernel: each
// activation row quantized once, on this thread; weight rows in groups of 8 across the pool.
void int8_gemm(const weight_view & w, const float * x, int64_t n_tok, float * y, thread_pool & pool) {
    uint8_t * xu = quantize_activations(w, x, n_tok);
    const size_t ldq = int8_act_row_bytes(w.type, w.n_cols), rb = w.row_bytes();
    if (int8_act_block_size(w.type) == 32) {
        // The signed weights: q8 + 128 as unsigned bytes (the kernel's vpdpbusd operand).
        for (int64_t t = 0; t < n_tok; ++t) {
            auto * blocks = reinterpret_cast<act_q8 *>(xu + size_t(t) * ldq);
            for (int64_t ib = 0; ib < w.n_cols / 32; ++ib) {
                for (int8_t & q : blocks[ib].q) q = int8_t(uint8_t(q) ^ 0x80u);
            }
        }
    }
    const auto gemm_rows =
        int8_isa_get() == int8_isa::avx512_vnni ? avx512_vnni::int8_gemm_rows : avx_vnni::int8_gemm_rows;
    const auto groups = [&](int64_t g0, int64_t g1) {
        const int64_t r0 = 8 * g0, r1 = std::min(8 * g1, w.n_rows);
        gemm_rows(w.type, w.row(r0), rb, w.n_cols, xu, ldq, n_tok, y + r0, w.n_rows, r1 - r0);
    };
    pool.parallel_for((w.n_rows + 7) / 8, groups, 1, 8 * w.n_cols * n_tok);
}

}  // namespace

void gemv_batch_rows(const weight_view & w, const float * x, int64_t n_tok, float * y, int64_t r0, int64_t r1) {
    if (uses_int8(w)) {
        if (r0 < r1 && n_tok > 0) int8_rows(w, quantize_activations(w, x, n_tok), n_tok, y, r0, r1);
        return;
    }
    batch_rows(w, x, w.n_cols, n_tok, y, r0, r1);
}

void gemv_rows(const weight_view & w, const float * x, float * y, int64_t r0, int64_t r1) {
    gemv_batch_rows(w, x, 1, y, r0, r1);
}

void gemv_batch(const weight_view & w, const float * x, int64_t n_tok, float * y, thread_pool & pool) {
    check_weight(w);
    HILL_ASSERT(n_tok >= 0);
    if (n_tok == 0) return;
    if (uses_int8(w)) {
        // Each activation row quantized once, on this thread; the weight rows split as below.
        const uint8_t * xq = quantize_activations(w, x, n_tok);
        pool.parallel_for(
            w.n_rows, [&](int64_t r0, int64_t r1) { int8_rows(w, xq, n_tok, y, r0, r1); }, 16, w.n_cols * n_tok);
        return;
    }
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
        w.n_rows, [&](int64_t r0, int64_t r1) { batch_rows(w, x, ldx, n_tok, y, r0, r1); }, 16, w.n_cols * n_tok);
}

void gemv(const weight_view & w, const float * x, float * y, thread_pool & pool) {
    gemv_batch(w, x, 1, y, pool);
}

void gemm(const weight_view & w, const float * x, int64_t n_tok, float * y, thread_pool & pool) {
    check_weight(w);
    HILL_ASSERT(n_tok >= 0);
    if (n_tok > gemm_batch_max_tok && uses_int8(w) && int8_gemm_supported(w.type) &&
        kernel_mode_get() == kernel_mode::avx2 && int8_isa_get() != int8_isa::avx2) {
        int8_gemm(w, x, n_tok, y, pool);
        return;
    }
    if (n_tok <= gemm_batch_max_tok || uses_int8(w)) {
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

    // One sgemm per tile of rows, each tile where a one-thread call puts it (grains of whole tiles): OpenBLAS's
    // sums for a row depend on the rows of its call (its edge kernels), so one call per thread's range made
    // y depend on the thread count (a prompt's KV differed between -t 1 and -t 2).
    const int64_t tile = gemm_tile_rows(w.n_cols);
    if (w.type == ggml_type::f32) {
        pool.parallel_for(
            w.n_rows,
            [&](int64_t r0, int64_t r1) {
                for (int64_t a = r0; a < r1; a += tile) {
                    sgemm_rows(static_cast<const float *>(w.data) + a * w.n_cols, a, std::min(a + tile, r1));
                }
            },
            tile);
        return;
    }

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
        default:
            if (kernel_mode_get() == kernel_mode::avx2 && avx2::dequantize_row(type, p, dst, n)) return;
            for (int64_t ib = 0; ib < n / ggml_block_size(type); ++ib)
                decode_block(type, p + size_t(ib) * ggml_block_bytes(type), dst + ib * ggml_block_size(type));
            return;
    }
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
        case ggml_type::q4_1:
            for (int64_t ib = 0; ib < n / qk4_1; ++ib) {
                float d = 0.0f, m = 0.0f;
                int q[32];
                block_q4_1 blk;
                quantize_block_offset(src + ib * qk4_1, 15, d, m, blk.d, blk.m, q);
                for (int j = 0; j < 16; ++j) blk.qs[j] = uint8_t(q[j] | q[j + 16] << 4);
                std::memcpy(p + ib * sizeof(blk), &blk, sizeof(blk));
            }
            return;
        case ggml_type::q5_1:
            for (int64_t ib = 0; ib < n / qk5_1; ++ib) {
                float d = 0.0f, m = 0.0f;
                int q[32];
                block_q5_1 blk;
                quantize_block_offset(src + ib * qk5_1, 31, d, m, blk.d, blk.m, q);
                uint32_t qh = 0;
                for (int j = 0; j < 16; ++j) {
                    blk.qs[j] = uint8_t((q[j] & 15) | (q[j + 16] & 15) << 4);
                    qh |= uint32_t(q[j] >> 4) << j | uint32_t(q[j + 16] >> 4) << (j + 16);
                }
                std::memcpy(blk.qh, &qh, 4);
                std::memcpy(p + ib * sizeof(blk), &blk, sizeof(blk));
            }
            return;
        case ggml_type::q5_0:
            // As ggml's quantize_row_q5_0_ref: d = max / -16 (max the signed value of largest
            // magnitude, mapped to q = 0), q = min(31, trunc(x / d + 16.5)).
            for (int64_t ib = 0; ib < n / qk5_0; ++ib) {
                const float * x = src + ib * qk5_0;
                float amax = 0.0f, max = 0.0f;
                for (int j = 0; j < 32; ++j) {
                    if (amax < std::fabs(x[j])) {
                        amax = std::fabs(x[j]);
                        max = x[j];
                    }
                }
                const float d = max / -16.0f;
                const float id = d != 0.0f ? 1.0f / d : 0.0f;
                block_q5_0 blk;
                blk.d = fp32_to_fp16(d);
                uint32_t qh = 0;
                for (int j = 0; j < 16; ++j) {
                    const int q0 = std::min(31, int(int8_t(x[j] * id + 16.5f)));
                    const int q1 = std::min(31, int(int8_t(x[j + 16] * id + 16.5f)));
                    blk.qs[j] = uint8_t((q0 & 15) | (q1 & 15) << 4);
                    qh |= uint32_t(q0 >> 4) << j | uint32_t(q1 >> 4) << (j + 16);
                }
                std::memcpy(blk.qh, &qh, 4);
                std::memcpy(p + ib * sizeof(blk), &blk, sizeof(blk));
            }
            return;
        case ggml_type::q4_k:
        case ggml_type::q5_k: {
            const bool q5 = type == ggml_type::q5_k;
            for (int64_t ib = 0; ib < n / qk_k; ++ib) {
                int q[qk_k];
                uint8_t scales[12];
                f16_bits d16 = 0, dmin16 = 0;
                quantize_block_k(src + ib * qk_k, q5 ? 31 : 15, scales, d16, dmin16, q);
                uint8_t qs[qk_k / 2] = {}, qh[qk_k / 8] = {};
                for (int u = 0; u < 8; ++u) {
                    for (int l = 0; l < 32; ++l) {
                        const int v = q[32 * u + l];
                        qs[32 * (u / 2) + l] |= uint8_t((v & 15) << (4 * (u % 2)));
                        qh[l] |= uint8_t((v >> 4) << u);
                    }
                }
                if (q5) {
                    block_q5_k blk;
                    blk.d = d16;
                    blk.dmin = dmin16;
                    std::memcpy(blk.scales, scales, 12);
                    std::memcpy(blk.qh, qh, sizeof(qh));
                    std::memcpy(blk.qs, qs, sizeof(qs));
                    std::memcpy(p + ib * sizeof(blk), &blk, sizeof(blk));
                } else {
                    block_q4_k blk;
                    blk.d = d16;
                    blk.dmin = dmin16;
                    std::memcpy(blk.scales, scales, 12);
                    std::memcpy(blk.qs, qs, sizeof(qs));
                    std::memcpy(p + ib * sizeof(blk), &blk, sizeof(blk));
                }
            }
            return;
        }
        case ggml_type::q6_k:
            // Symmetric per 16 weights: s_g = max|x| / 31, d = max_g s_g / 127 rounded up to f16,
            // the 8-bit scale sc_g = ceil(s_g / d), so that a_g = d · sc_g >= s_g and every x lies
            // within ±31 · a_g; q = round(x / a_g) in [-31, 31] (q = -32 is not used).
            for (int64_t ib = 0; ib < n / qk_k; ++ib) {
                const float * x = src + ib * qk_k;
                float s[16], max_s = 0.0f;
                for (int g = 0; g < 16; ++g) {
                    float amax = 0.0f;
                    for (int j = 0; j < 16; ++j) amax = std::max(amax, std::fabs(x[16 * g + j]));
                    s[g] = amax / 31.0f;
                    max_s = std::max(max_s, s[g]);
                }
                block_q6_k blk = {};
                blk.d = f16_at_least(max_s / 127.0f);
                const float d = fp16_to_fp32(blk.d);
                for (int g = 0; g < 16; ++g) {
                    const int sc = ceil_div_clamped(s[g], d, 127);
                    blk.scales[g] = int8_t(sc);
                    const float a = d * float(sc);
                    for (int j = 0; j < 16; ++j) {
                        const int pos = 16 * g + j, u = pos / 32, l = pos % 32, nn = u / 4, k = u % 4;
                        const int v = round_div_clamped(x[pos], a, -31, 31) + 32;
                        blk.ql[64 * nn + 32 * (k % 2) + l] |= uint8_t((v & 15) << (k < 2 ? 0 : 4));
                        blk.qh[32 * nn + l] |= uint8_t((v >> 4) << (2 * k));
                    }
                }
                std::memcpy(p + ib * sizeof(blk), &blk, sizeof(blk));
            }
            return;
        default: break;
    }
    HILL_ASSERT(false && "quantize_row: no quantizer for this type (quantize_supported)");
}

bool quantize_supported(ggml_type type) {
    switch (type) {
        case ggml_type::q2_k:
        case ggml_type::q3_k:
        case ggml_type::iq4_nl:
        case ggml_type::iq4_xs: return false;
        default: return true;
    }
}

void blas_init_single_threaded() {
    openblas_set_num_threads(1);
}

}  // namespace hill
