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

void rope(float * x, int n_head, int head_dim, int64_t pos, float freq_base, float freq_scale) {
    HILL_ASSERT(n_head >= 0 && head_dim > 0 && head_dim % 2 == 0);
    // Angles in double: at pos ~1e5 an f32 angle would already be off by ~1e-2 rad. One cos/sin
    // per pair index, shared by all heads.
    const double p = double(pos) * double(freq_scale);
    for (int i = 0; i < head_dim / 2; ++i) {
        const double theta = p * std::pow(double(freq_base), -2.0 * double(i) / double(head_dim));
        const double c = std::cos(theta), s = std::sin(theta);
        for (int h = 0; h < n_head; ++h) {
            float * v = x + int64_t(h) * head_dim + 2 * i;
            const double x0 = v[0], x1 = v[1];
            v[0] = float(x0 * c - x1 * s);
            v[1] = float(x0 * s + x1 * c);
        }
    }
}

void swiglu(float * gate, const float * up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
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
