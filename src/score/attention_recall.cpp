#include "score/attention_recall.h"

#include "core/error.h"
#include "core/fp16.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hill {

attention_recall::attention_recall(const attention_shape & s, int64_t n_max)
    : shape_(s), q_(size_t(s.n_head) * size_t(s.head_dim)), scores_(size_t(s.n_head) * size_t(n_max)) {}

void attention_recall::begin(const float * q, int64_t n) {
    HILL_ASSERT(n >= 0 && size_t(n) * size_t(shape_.n_head) <= scores_.size());
    std::copy(q, q + q_.size(), q_.begin());
    n_ = n;
}

void attention_recall::add(const kv_view & keys, const int32_t * rows, const int32_t * tokens) {
    const int group = shape_.n_head / shape_.n_head_kv;
    const int64_t n_max = int64_t(scores_.size()) / shape_.n_head;
    const int hd = shape_.head_dim;
    for (int64_t j = 0; j < keys.n_kv; ++j) {
        HILL_ASSERT(tokens[j] >= 0 && tokens[j] < n_);
        const int64_t row = rows != nullptr ? rows[j] : j;
        for (int h = 0; h < shape_.n_head; ++h) {
            const int64_t off = row * keys.row_stride + int64_t(h / group) * hd;
            const float * q = q_.data() + size_t(h) * size_t(hd);
            double dot = 0.0;
            if (keys.type == ggml_type::f16) {
                const auto * k = static_cast<const uint16_t *>(keys.k) + off;
                for (int i = 0; i < hd; ++i) dot += double(q[i]) * double(fp16_to_fp32(k[i]));
            } else {
                const auto * k = static_cast<const float *>(keys.k) + off;
                for (int i = 0; i < hd; ++i) dot += double(q[i]) * double(k[i]);
            }
            scores_[size_t(h * n_max + tokens[j])] = float(dot * shape_.scale);
        }
    }
}

double attention_recall::recall(std::span<const std::vector<int32_t>> selected) const {
    HILL_ASSERT(selected.size() == 1 || selected.size() == size_t(shape_.n_head_kv));
    if (n_ == 0) return 1.0;
    const int group = shape_.n_head / shape_.n_head_kv;
    const int64_t n_max = int64_t(scores_.size()) / shape_.n_head;
    double sum = 0.0;
    for (int h = 0; h < shape_.n_head; ++h) {
        const float * s = scores_.data() + size_t(h * n_max);
        const float m = *std::max_element(s, s + n_);
        double total = 0.0;
        for (int64_t t = 0; t < n_; ++t) total += std::exp(double(s[t] - m));
        double covered = 0.0;
        for (const int32_t t : selected[selected.size() == 1 ? 0 : size_t(h / group)]) {
            covered += std::exp(double(s[t] - m));
        }
        sum += covered / total;
    }
    return sum / shape_.n_head;
}

}  // namespace hill
