#include "compute/ops.h"

#include "compute/kernel_mode.h"
#include "compute/kernels_avx2.h"
#include "core/error.h"
#include "core/fp16.h"

#include <algorithm>
#include <cmath>

namespace hill {

void rmsnorm(const float * x, const float * w, float * y, int64_t n, float eps) {
    HILL_ASSERT(n > 0);
    double ss = 0.0;
    if (kernel_mode_get() == kernel_mode::avx2) {
        ss = avx2::sum_squares(x, n);
    } else {
        for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
    }
    const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

void layernorm(const float * x, const float * w, const float * b, float * y, int64_t n, float eps) {
    HILL_ASSERT(n > 0);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += double(x[i]);
    const double mean = sum / double(n);
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += (double(x[i]) - mean) * (double(x[i]) - mean);
    const double inv = 1.0 / std::sqrt(ss / double(n) + double(eps));
    for (int64_t i = 0; i < n; ++i) y[i] = float((double(x[i]) - mean) * inv) * w[i] + b[i];
}

void rope_inv_freq(int head_dim, float freq_base, float freq_scale, const float * freq_factors, double * out) {
    HILL_ASSERT(head_dim > 0 && head_dim % 2 == 0);
    for (int i = 0; i < head_dim / 2; ++i) {
        double f = double(freq_scale) * std::pow(double(freq_base), -2.0 * double(i) / double(head_dim));
        if (freq_factors != nullptr) f /= double(freq_factors[i]);
        out[i] = f;
    }
}

void rope(float * x, int n_head, int head_dim, int64_t pos, const double * inv_freq, rope_layout layout) {
    HILL_ASSERT(n_head >= 0 && head_dim > 0 && head_dim % 2 == 0);
    // Angles in double: at pos ~1e5 an f32 angle would already be off by ~1e-2 rad. One cos/sin
    // per pair index, shared by all heads.
    const int half = head_dim / 2;
    // Offsets of the pair's two elements within a head.
    const int step = layout == rope_layout::adjacent_pairs ? 2 : 1;
    const int other = layout == rope_layout::adjacent_pairs ? 1 : half;
    for (int i = 0; i < half; ++i) {
        const double theta = double(pos) * inv_freq[i];
        const double c = std::cos(theta), s = std::sin(theta);
        for (int h = 0; h < n_head; ++h) {
            float * v = x + int64_t(h) * head_dim + step * i;
            const double x0 = v[0], x1 = v[other];
            v[0] = float(x0 * c - x1 * s);
            v[other] = float(x0 * s + x1 * c);
        }
    }
}

void rope(float * x, int n_head, int head_dim, int64_t pos, float freq_base, float freq_scale) {
    HILL_ASSERT(head_dim > 0 && head_dim % 2 == 0 && head_dim <= 4096);
    double inv_freq[2048];
    rope_inv_freq(head_dim, freq_base, freq_scale, nullptr, inv_freq);
    rope(x, n_head, head_dim, pos, inv_freq, rope_layout::adjacent_pairs);
}

void swiglu(float * gate, const float * up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

void geglu(float * gate, const float * up, int64_t n) {
    constexpr float k = 0.7978845608028654f;  // √(2/π)
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = 0.5f * g * (1.0f + std::tanh(k * (g + 0.044715f * g * g * g))) * up[i];
    }
}

void softcap(float * x, int64_t n, float cap) {
    for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void relu(float * x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void softmax(float * x, int64_t n) {
    if (n <= 0) return;
    const float m = *std::max_element(x, x + n);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - m);
        sum += x[i];
    }
    const float inv = float(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void add_inplace(float * y, const float * x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_bias_rows(float * y, const float * b, int64_t n_rows, int64_t n_cols) {
    for (int64_t r = 0; r < n_rows; ++r) add_inplace(y + r * n_cols, b, n_cols);
}

void fp16_to_fp32_row(const uint16_t * src, float * dst, int64_t n) {
    if (kernel_mode_get() == kernel_mode::avx2) {
        avx2::fp16_to_fp32_row(src, dst, n);
        return;
    }
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

void fp32_to_fp16_row(const float * src, uint16_t * dst, int64_t n) {
    if (kernel_mode_get() == kernel_mode::avx2) {
        avx2::fp32_to_fp16_row(src, dst, n);
        return;
    }
    for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

}  // namespace hill
