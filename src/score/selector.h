// The token selector (DESIGN.md §3 step 3): from one score per token, the tokens a decode step attends
// to: the first S tokens (sinks), the last W tokens (recent window), and the ⌈α·N⌉ highest-scoring
// tokens among the others (HillInfer paper, §4 "System Workflow": "the CPU aggregates these scores
// globally, identifies the most critical tokens").
//
// Order of the scores: higher first; equal scores: lower token index first (so all-equal scores select
// the lowest indices); NaN ranks below every number, -inf included, and NaNs among themselves by index;
// -0 equals +0. Complexity O(N): a radix selection of the n_top-th best score (three counting passes
// over the scores' order as 32-bit integers), then one pass in index order; no sort.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/fp16.h"

namespace hill {

// Scores are ranked at the precision of a score block (DESIGN.md §1: `<u32 position, f16 score>`),
// whichever tier produced them, so that a token ranks the same whether the host or the storage
// device scored it. Round to nearest even; beyond the f16 range a score saturates to ±65504 (an
// overflow to ±inf would tie every large score); NaN stays NaN.
inline f16_bits score_to_f16(float x) {
    constexpr float f16_max = 65504.0f;
    if (!std::isnan(x)) x = std::fmax(-f16_max, std::fmin(f16_max, x));
    return fp32_to_fp16(x);
}
inline float round_score_f16(float x) { return fp16_to_fp32(score_to_f16(x)); }

// The score x as an unsigned integer of the same order (the order above, without the index): higher =
// better; -0 maps as +0, NaN to 0.
uint32_t select_rank_order(float x);
// The rank of token i with score x as one integer, higher = better, all distinct (the order above):
// select_rank_order(x) in the high 32 bits, the index reversed in the low 32.
uint64_t select_rank_key(float x, int64_t i);

// The middle of n tokens, between the sinks and the recent window: [s_end, w_begin).
struct select_middle {
    int64_t s_end = 0;    // sinks: [0, s_end)
    int64_t w_begin = 0;  // window: [w_begin, n)
};
select_middle middle_of(int64_t n, int64_t n_sinks, int64_t n_window);

// ⌈α·n⌉ for α in (0, 1] and n >= 0 (asserted): how many tokens the retention ratio α keeps of n.
// α·n is lowered by a relative 1e-12 before rounding up, so that the binary rounding of a decimal α
// does not add a token (0.7 · 10 is 7.000000000000001 in binary floating point: 7, not 8).
int64_t n_top_for(double alpha, int64_t n);

class token_selector {
public:
    // n_max: the longest context expected; select() does not allocate up to n_max tokens (beyond, its
    // scratch grows once).
    explicit token_selector(int64_t n_max = 0);

    // out = the selected token indices in [0, n), ascending, without repeats:
    //   sinks   [0, min(n_sinks, n)),
    //   window  [max(0, n - n_window), n),
    //   and the min(n_top, n_mid) best-ranked of the n_mid tokens between them (the middle).
    // n_top counts the middle only (pass n_top_for(α, N)), so |out| = |sinks ∪ window| + min(n_top, n_mid);
    // sinks and window may overlap or exceed n. scores: f32 [n] (read for the middle only; may be null
    // when nothing is ranked). out is cleared first; its capacity is reused.
    // Asserts: n in [0, 2^31), n_top, n_sinks, n_window >= 0.
    void select(const float * scores, int64_t n, int64_t n_top, int64_t n_sinks, int64_t n_window,
                std::vector<int32_t> & out);

private:
    std::vector<uint32_t> orders_;  // u32 [n_mid]: select_rank_order of the middle tokens' scores
    std::vector<int64_t> counts_;   // [2^11]: one radix pass's counts (selector.cpp)
};

}  // namespace hill
