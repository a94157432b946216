#include "score/selector.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "core/error.h"
#include "core/fp16.h"

namespace hill {

// The score mapped to an unsigned integer of the same order (high 32 bits), then the index reversed
// (low 32 bits, so that of two equal scores the lower index is greater). Floats map by their bit
// pattern: a negative one flips all bits (larger magnitude = smaller), a positive one sets the sign bit
// (above every negative). -0 becomes +0 first, and NaN maps to 0, below -inf (0x007fffff).
uint64_t select_rank_key(float x, int64_t i) {
    uint32_t ord = 0;
    if (!std::isnan(x)) {
        const uint32_t u = f32_to_bits(x == 0.0f ? 0.0f : x);
        ord = (u & 0x80000000u) != 0 ? ~u : u | 0x80000000u;
    }
    return uint64_t(ord) << 32 | (uint32_t(0xffffffffu) - uint32_t(i));
}

select_middle middle_of(int64_t n, int64_t n_sinks, int64_t n_window) {
    const int64_t s_end = std::min(n_sinks, n);
    return {s_end, std::max(s_end, n - n_window)};
}

int64_t n_top_for(double alpha, int64_t n) {
    HILL_ASSERT(alpha > 0.0 && alpha <= 1.0 && n >= 0);
    return int64_t(std::ceil(alpha * double(n) * (1.0 - 1e-12)));
}

token_selector::token_selector(int64_t n_max) {
    HILL_ASSERT(n_max >= 0);
    keys_.reserve(size_t(n_max));
}

void token_selector::select(const float * scores, int64_t n, int64_t n_top, int64_t n_sinks, int64_t n_window,
                            std::vector<int32_t> & out) {
    HILL_ASSERT(n >= 0 && n <= std::numeric_limits<int32_t>::max());
    HILL_ASSERT(n_top >= 0 && n_sinks >= 0 && n_window >= 0);
    const auto [s_end, w_begin] = middle_of(n, n_sinks, n_window);
    const int64_t n_mid = w_begin - s_end;
    out.clear();
    for (int64_t i = 0; i < s_end; ++i) out.push_back(int32_t(i));
    if (n_top >= n_mid) {
        for (int64_t i = s_end; i < w_begin; ++i) out.push_back(int32_t(i));
    } else if (n_top > 0) {
        HILL_ASSERT(scores != nullptr);
        keys_.resize(size_t(n_mid));
        for (int64_t i = s_end; i < w_begin; ++i) keys_[size_t(i - s_end)] = select_rank_key(scores[i], i);
        // The n_top-th best key: the middle tokens ranked at least as high are exactly the n_top best
        // (keys are distinct), taken in index order by one more pass over the scores (nth_element
        // has permuted keys_).
        const auto nth = keys_.begin() + (n_top - 1);
        std::nth_element(keys_.begin(), nth, keys_.end(), std::greater<>());
        const uint64_t threshold = *nth;
        for (int64_t i = s_end; i < w_begin; ++i) {
            if (select_rank_key(scores[i], i) >= threshold) out.push_back(int32_t(i));
        }
    }
    for (int64_t i = w_begin; i < n; ++i) out.push_back(int32_t(i));
}

}  // namespace hill
