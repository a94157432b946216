#include "score/selector.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/error.h"
#include "core/fp16.h"

namespace hill {

// Floats map by their bit pattern: a negative one flips all bits (larger magnitude = smaller), a
// positive one sets the sign bit (above every negative). -0 becomes +0 first, and NaN maps to 0, below
// -inf (0x007fffff).
uint32_t select_rank_order(float x) {
    if (std::isnan(x)) return 0;
    const uint32_t u = f32_to_bits(x == 0.0f ? 0.0f : x);
    return (u & 0x80000000u) != 0 ? ~u : u | 0x80000000u;
}

// The index reversed in the low 32 bits: of two equal scores the lower index is greater.
uint64_t select_rank_key(float x, int64_t i) {
    return uint64_t(select_rank_order(x)) << 32 | (uint32_t(0xffffffffu) - uint32_t(i));
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
    orders_.reserve(size_t(n_max));
    counts_.reserve(size_t(1) << 11);
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
        // Radix selection on the order of the scores (select_rank_order), 11 + 11 + 10 bits from the top:
        // each pass counts the orders that match the digits fixed so far by their next digit, and fixes
        // the digit whose bucket holds the n_top-th best. That leaves the n_top-th best order T and how
        // many of the n_top take an order equal to T (`ties`, the rest rank above it); one pass in index
        // order then takes every order above T and the first `ties` equal to it (equal scores: lower
        // index first).
        orders_.resize(size_t(n_mid));
        for (int64_t i = s_end; i < w_begin; ++i) orders_[size_t(i - s_end)] = select_rank_order(scores[i]);
        uint32_t prefix = 0, mask = 0;
        int64_t ties = n_top;
        for (const auto & [shift, bits] : {std::pair{21, 11}, std::pair{10, 11}, std::pair{0, 10}}) {
            const uint32_t digit_mask = (1u << bits) - 1u;
            counts_.assign(size_t(1) << bits, 0);
            for (const uint32_t o : orders_) {
                if ((o & mask) == prefix) ++counts_[(o >> shift) & digit_mask];
            }
            uint32_t d = digit_mask;
            for (; d > 0 && counts_[d] < ties; --d) ties -= counts_[d];
            prefix |= d << shift;
            mask |= digit_mask << shift;
        }
        for (int64_t i = s_end; i < w_begin; ++i) {
            const uint32_t o = orders_[size_t(i - s_end)];
            if (o > prefix || (o == prefix && ties-- > 0)) out.push_back(int32_t(i));
        }
    }
    for (int64_t i = w_begin; i < n; ++i) out.push_back(int32_t(i));
}

}  // namespace hill
