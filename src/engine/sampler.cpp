#include "engine/sampler.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>

namespace hill {

void validate(const sampler_params & p) {
    if (!std::isfinite(p.temperature) || p.temperature < 0.0f) fail_usage("--temp must be >= 0, got {}", p.temperature);
    if (p.top_k < 0) fail_usage("--top-k must be >= 0, got {}", p.top_k);
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail_usage("--top-p must be in (0, 1], got {}", p.top_p);
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) fail_usage("--min-p must be in [0, 1], got {}", p.min_p);
    if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty)) {
        fail_usage("--repeat-penalty must be > 0, got {}", p.repeat_penalty);
    }
    if (p.repeat_last_n < 0) fail_usage("--repeat-last-n must be >= 0, got {}", p.repeat_last_n);
}

sampler::sampler(const sampler_params & p, int32_t n_vocab) : p_(p), n_vocab_(n_vocab), rng_(p.seed) {
    validate(p);
    HILL_ASSERT(n_vocab > 0);
    cand_.resize(size_t(n_vocab));
    seen_.reserve(size_t(p.repeat_last_n));
}

void sampler::accept(int32_t token) {
    if (p_.repeat_last_n == 0) return;
    recent_.push_back(token);
    if (int32_t(recent_.size()) > p_.repeat_last_n) recent_.pop_front();
}

int32_t sampler::sample(float * logits) {
    for (const int32_t t : p_.banned) {
        if (t >= 0 && t < n_vocab_) logits[t] = -INFINITY;
    }
    if (p_.repeat_penalty != 1.0f) {
        // Each distinct recent token is penalised once.
        seen_.assign(recent_.begin(), recent_.end());
        std::sort(seen_.begin(), seen_.end());
        seen_.erase(std::unique(seen_.begin(), seen_.end()), seen_.end());
        for (int32_t t : seen_) {
            float & l = logits[t];
            l = l > 0.0f ? l / p_.repeat_penalty : l * p_.repeat_penalty;
        }
    }
    if (p_.temperature <= 0.0f) {
        return int32_t(std::max_element(logits, logits + n_vocab_) - logits);  // first maximum: lowest id
    }
    for (int32_t i = 0; i < n_vocab_; ++i) cand_[size_t(i)] = {logits[i], i};
    auto by_logit = [](const auto & a, const auto & b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
    size_t n = cand_.size();
    if (p_.top_k > 0 && size_t(p_.top_k) < n) {
        std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
        n = size_t(p_.top_k);
    } else {
        std::sort(cand_.begin(), cand_.end(), by_logit);
    }
    // Softmax over the kept candidates (sorted, largest first).
    const float max_l = cand_[0].first;
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
        cand_[i].first = std::exp((cand_[i].first - max_l) / p_.temperature);
        sum += cand_[i].first;
    }
    for (size_t i = 0; i < n; ++i) cand_[i].first = float(cand_[i].first / sum);
    // Top-p: the smallest prefix whose mass reaches top_p.
    if (p_.top_p < 1.0f) {
        double cum = 0.0;
        size_t keep = n;
        for (size_t i = 0; i < n; ++i) {
            cum += cand_[i].first;
            if (cum >= p_.top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    // Min-p: drop candidates below min_p times the top probability.
    if (p_.min_p > 0.0f) {
        const float thr = p_.min_p * cand_[0].first;
        size_t keep = 1;
        while (keep < n && cand_[keep].first >= thr) ++keep;
        n = keep;
    }
    double mass = 0.0;
    for (size_t i = 0; i < n; ++i) mass += cand_[i].first;
    std::uniform_real_distribution<double> u(0.0, mass);
    const double r = u(rng_);
    double cum = 0.0;
    for (size_t i = 0; i < n; ++i) {
        cum += cand_[i].first;
        if (r < cum) return cand_[i].second;
    }
    return cand_[n - 1].second;
}

}  // namespace hill
