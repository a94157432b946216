#include "compute/q8_dot.h"
#include "compute/block_fields.h"

#include "compute/kernel_mode.h"
#include "compute/kernels_avx2.h"
#include "core/error.h"
#include "core/fp16.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

namespace hill {

namespace {

float f16_at(const uint8_t * p) {
    return fp16_to_fp32(load_u16(p));
}

// One 32-weight block as integers: w[j] = d · q[j] + m.
struct legacy_block {
    float d = 0.0f, m = 0.0f;
    bool offset = false;  // m is used (Q4_1, Q5_1)
    int q[32];
};

void unpack_legacy(ggml_type type, const uint8_t * b, legacy_block & o) {
    o.d = f16_at(b);
    switch (type) {
        case ggml_type::q8_0: {
            const auto * qs = reinterpret_cast<const int8_t *>(b + offsetof(block_q8_0, qs));
            for (int j = 0; j < 32; ++j) o.q[j] = qs[j];
            return;
        }
        case ggml_type::q4_0:
        case ggml_type::q4_1:
        case ggml_type::iq4_nl: {
            const uint8_t * qs = b + (type == ggml_type::q4_1 ? offsetof(block_q4_1, qs) : offsetof(block_q4_0, qs));
            for (int j = 0; j < 16; ++j) {
                int lo = qs[j] & 15, hi = qs[j] >> 4;
                if (type == ggml_type::q4_0) lo -= 8, hi -= 8;
                if (type == ggml_type::iq4_nl) lo = kvalues_iq4nl[lo], hi = kvalues_iq4nl[hi];
                o.q[j] = lo;
                o.q[j + 16] = hi;
            }
            if (type == ggml_type::q4_1) o.offset = true, o.m = f16_at(b + offsetof(block_q4_1, m));
            return;
        }
        case ggml_type::q5_0:
        case ggml_type::q5_1: {
            const bool q5_1 = type == ggml_type::q5_1;
            uint32_t qh;
            std::memcpy(&qh, b + (q5_1 ? offsetof(block_q5_1, qh) : offsetof(block_q5_0, qh)), 4);
            const uint8_t * qs = b + (q5_1 ? offsetof(block_q5_1, qs) : offsetof(block_q5_0, qs));
            const int bias = q5_1 ? 0 : 16;
            for (int j = 0; j < 16; ++j) {
                o.q[j] = ((qs[j] & 15) | int((qh >> j) & 1) << 4) - bias;
                o.q[j + 16] = ((qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4) - bias;
            }
            if (q5_1) o.offset = true, o.m = f16_at(b + offsetof(block_q5_1, m));
            return;
        }
        default: break;
    }
    HILL_ASSERT(false && "unpack_legacy: not a 32-weight int8 type");
}

// One k-quant super-block as integers: Σ w·x = d · Σ_g sc[g] Σ_{i in g} q[i]·x[i]
//                                            − dm · Σ_g mc[g] Σ_{i in g} x[i]   (g: 16 weights).
struct k_block {
    float d = 0.0f, dm = 0.0f;
    bool fold = false;  // dm == d: the two integer sums are subtracted before the f32 part (Q6_K)
    int q[256];
    int sc[16];
    int mc[16];
};

void unpack_k(ggml_type type, const uint8_t * b, k_block & o) {
    switch (type) {
        case ggml_type::q4_k:
        case ggml_type::q5_k: {
            const bool q5 = type == ggml_type::q5_k;
            o.d = f16_at(b);
            o.dm = f16_at(b + 2);
            const uint8_t * scales = b + 4;
            const uint8_t * qh = b + offsetof(block_q5_k, qh);
            const uint8_t * qs = b + (q5 ? offsetof(block_q5_k, qs) : offsetof(block_q4_k, qs));
            for (int u = 0; u < 8; ++u) {
                int sc = 0, mn = 0;
                scale_min_k4(scales, u, sc, mn);
                o.sc[2 * u] = o.sc[2 * u + 1] = sc;
                o.mc[2 * u] = o.mc[2 * u + 1] = mn;
                for (int l = 0; l < 32; ++l) {
                    int q = (qs[32 * (u / 2) + l] >> (4 * (u % 2))) & 15;
                    if (q5) q |= ((qh[l] >> u) & 1) << 4;
                    o.q[32 * u + l] = q;
                }
            }
            return;
        }
        case ggml_type::q6_k: {
            const uint8_t * ql = b + offsetof(block_q6_k, ql);
            const uint8_t * qh = b + offsetof(block_q6_k, qh);
            const auto * scales = reinterpret_cast<const int8_t *>(b + offsetof(block_q6_k, scales));
            o.d = o.dm = f16_at(b + offsetof(block_q6_k, d));
            o.fold = true;
            for (int g = 0; g < 16; ++g) {
                o.sc[g] = scales[g];
                o.mc[g] = 32 * scales[g];
            }
            for (int u = 0; u < 8; ++u) {
                const int n = u / 4, k = u % 4;
                for (int l = 0; l < 32; ++l) {
                    const int lo = (ql[64 * n + 32 * (k % 2) + l] >> (k < 2 ? 0 : 4)) & 15;
                    const int hi = (qh[32 * n + l] >> (2 * k)) & 3;
                    o.q[32 * u + l] = lo | hi << 4;
                }
            }
            return;
        }
        default: break;
    }
    HILL_ASSERT(false && "unpack_k: not a k-quant with an int8 product");
}

bool is_k_type(ggml_type type) {
    return type == ggml_type::q4_k || type == ggml_type::q5_k || type == ggml_type::q6_k;
}

// d = max|x| / 127, q = round(x · (1 / d)) (ties to even: nearbyint in the default rounding mode).
float quantize_block(const float * x, int n, int8_t * q) {
    float amax = 0.0f;
    for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < n; ++j) q[j] = int8_t(std::clamp(std::nearbyint(x[j] * id), -127.0f, 127.0f));
    return d;
}

float row_legacy(ggml_type type, const uint8_t * w, int64_t nb, const act_q8 * xa) {
    float a[8] = {};
    float o = 0.0f;
    legacy_block blk;
    for (int64_t ib = 0; ib < nb; ++ib) {
        unpack_legacy(type, w + size_t(ib) * ggml_block_bytes(type), blk);
        const act_q8 & xb = xa[ib];
        const float dd = blk.d * xb.d;
        for (int i = 0; i < 8; ++i) {
            int s = 0;
            for (int j = 4 * i; j < 4 * i + 4; ++j) s += blk.q[j] * xb.q[j];
            a[i] = std::fma(dd, float(s), a[i]);
        }
        if (blk.offset) o = std::fma(blk.m * xb.d, float(xb.sum), o);
    }
    return (((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))) + o;
}

// The 8 lanes of the AVX2 kernel: lane i holds, of every 32-weight sub-block u, the products of
// its weights 4i .. 4i + 3 (group 2u + i / 4) times the group's scale, and the mins of groups 2i
// and 2i + 1.
float row_k(ggml_type type, const uint8_t * w, int64_t nb, const act_q8k * xa) {
    float a[8] = {};
    k_block blk;
    for (int64_t ib = 0; ib < nb; ++ib) {
        unpack_k(type, w + size_t(ib) * ggml_block_bytes(type), blk);
        const act_q8k & xb = xa[ib];
        for (int i = 0; i < 8; ++i) {
            int32_t s = 0;
            for (int u = 0; u < 8; ++u) {
                int32_t sg = 0;
                for (int j = 32 * u + 4 * i; j < 32 * u + 4 * i + 4; ++j) sg += blk.q[j] * xb.q[j];
                s += blk.sc[2 * u + i / 4] * sg;
            }
            const int32_t sm = blk.mc[2 * i] * xb.bsum[2 * i] + blk.mc[2 * i + 1] * xb.bsum[2 * i + 1];
            if (blk.fold) {
                a[i] = std::fma(blk.d * xb.d, float(s - sm), a[i]);
            } else {
                a[i] = std::fma(blk.d * xb.d, float(s), a[i]);
                a[i] = std::fma(-(blk.dm * xb.d), float(sm), a[i]);
            }
        }
    }
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

std::atomic<int8_isa> & isa_ref() {
    static std::atomic<int8_isa> isa{cpu_has_avx512_vnni() ? int8_isa::avx512_vnni
                                     : cpu_has_avx_vnni()   ? int8_isa::avx_vnni
                                                            : int8_isa::avx2};
    return isa;
}

}  // namespace

bool int8_isa_supported(int8_isa isa) {
    switch (isa) {
        case int8_isa::avx2: return cpu_has_avx2();
        case int8_isa::avx_vnni: return cpu_has_avx_vnni();
        case int8_isa::avx512_vnni: return cpu_has_avx512_vnni();
    }
    return false;
}

int8_isa int8_isa_get() {
    return isa_ref().load(std::memory_order_relaxed);
}

void int8_isa_set(int8_isa isa) {
    HILL_ASSERT(isa == int8_isa::avx2 || int8_isa_supported(isa));
    isa_ref().store(isa, std::memory_order_relaxed);
}

bool int8_dot_supported(ggml_type type) {
    switch (type) {
        case ggml_type::q8_0:
        case ggml_type::q4_0:
        case ggml_type::q4_1:
        case ggml_type::q5_0:
        case ggml_type::q5_1:
        case ggml_type::iq4_nl:
        case ggml_type::q4_k:
        case ggml_type::q5_k:
        case ggml_type::q6_k: return true;
        default: return false;
    }
}

int64_t int8_act_block_size(ggml_type type) {
    HILL_ASSERT(int8_dot_supported(type));
    return is_k_type(type) ? 256 : 32;
}

size_t int8_act_row_bytes(ggml_type type, int64_t n) {
    HILL_ASSERT(n >= 0 && n % int8_act_block_size(type) == 0);
    return is_k_type(type) ? size_t(n / 256) * sizeof(act_q8k) : size_t(n / 32) * sizeof(act_q8);
}

void quantize_activation_row(ggml_type type, const float * x, int64_t n, void * dst) {
    HILL_ASSERT(n >= 0 && n % int8_act_block_size(type) == 0);
    if (kernel_mode_get() == kernel_mode::avx2) {
        avx2::quantize_activation_row(is_k_type(type), x, n, dst);
        return;
    }
    if (is_k_type(type)) {
        auto * o = static_cast<act_q8k *>(dst);
        for (int64_t ib = 0; ib < n / 256; ++ib) {
            act_q8k & b = o[ib];
            b.d = quantize_block(x + 256 * ib, 256, b.q);
            for (int g = 0; g < 16; ++g) {
                int s = 0;
                for (int j = 0; j < 16; ++j) s += b.q[16 * g + j];
                b.bsum[g] = int16_t(s);
            }
        }
        return;
    }
    auto * o = static_cast<act_q8 *>(dst);
    for (int64_t ib = 0; ib < n / 32; ++ib) {
        act_q8 & b = o[ib];
        b.d = quantize_block(x + 32 * ib, 32, b.q);
        int s = 0;
        for (int j = 0; j < 32; ++j) s += b.q[j];
        b.sum = s;
    }
}

void int8_dot_rows_scalar(ggml_type type, const uint8_t * w, size_t row_bytes, int64_t n_cols, const uint8_t * xq,
                          size_t ldq, int64_t n_tok, float * y, int64_t ldy, int64_t n_rows) {
    HILL_ASSERT(int8_dot_supported(type) && n_cols % ggml_block_size(type) == 0);
    const int64_t nb = n_cols / ggml_block_size(type);
    for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t * row = w + size_t(r) * row_bytes;
        for (int64_t t = 0; t < n_tok; ++t) {
            const uint8_t * xt = xq + size_t(t) * ldq;
            y[t * ldy + r] = is_k_type(type) ? row_k(type, row, nb, reinterpret_cast<const act_q8k *>(xt))
                                             : row_legacy(type, row, nb, reinterpret_cast<const act_q8 *>(xt));
        }
    }
}

bool int8_gemm_supported(ggml_type type) {
    return type == ggml_type::q8_0 || type == ggml_type::q4_0 || type == ggml_type::q5_0 || type == ggml_type::iq4_nl ||
           is_k_type(type);
}

void int8_gemm_rows_scalar(ggml_type type, const uint8_t * w, size_t row_bytes, int64_t n_cols, const uint8_t * xq,
                           size_t ldq, int64_t n_tok, float * y, int64_t ldy, int64_t n_rows) {
    HILL_ASSERT(int8_gemm_supported(type) && n_cols % ggml_block_size(type) == 0);
    if (is_k_type(type)) {
        const int64_t nb = n_cols / 256;
        k_block blk;
        for (int64_t r = 0; r < n_rows; ++r) {
            const uint8_t * row = w + size_t(r) * row_bytes;
            for (int64_t t = 0; t < n_tok; ++t) {
                const auto * xa = reinterpret_cast<const act_q8k *>(xq + size_t(t) * ldq);
                float a = 0.0f;
                for (int64_t ib = 0; ib < nb; ++ib) {
                    unpack_k(type, row + size_t(ib) * ggml_block_bytes(type), blk);
                    int32_t s = 0, sm = 0;
                    for (int g = 0; g < 16; ++g) {
                        int32_t sg = 0;
                        for (int i = 16 * g; i < 16 * g + 16; ++i) sg += blk.q[i] * xa[ib].q[i];
                        s += blk.sc[g] * sg;
                        sm += blk.mc[g] * xa[ib].bsum[g];
                    }
                    if (blk.fold) {
                        a = std::fma(blk.d * xa[ib].d, float(s - sm), a);
                    } else {
                        a = std::fma(blk.d * xa[ib].d, float(s), a);
                        a = std::fma(-(blk.dm * xa[ib].d), float(sm), a);
                    }
                }
                y[t * ldy + r] = a;
            }
        }
        return;
    }
    const int64_t nb = n_cols / 32;
    legacy_block blk;
    for (int64_t r = 0; r < n_rows; ++r) {
        const uint8_t * row = w + size_t(r) * row_bytes;
        for (int64_t t = 0; t < n_tok; ++t) {
            const auto * xa = reinterpret_cast<const act_q8 *>(xq + size_t(t) * ldq);
            float a = 0.0f;
            for (int64_t ib = 0; ib < nb; ++ib) {
                unpack_legacy(type, row + size_t(ib) * ggml_block_bytes(type), blk);
                int32_t s = 0;
                for (int j = 0; j < 32; ++j) s += blk.q[j] * xa[ib].q[j];
                a = std::fma(blk.d * xa[ib].d, float(s), a);
            }
            y[t * ldy + r] = a;
        }
    }
}

}  // namespace hill
