// Per-head softmax aggregation of importance scores (score_aggregate::softmax, issue 13 item 9): the
// arithmetic every scoring tier shares — the host scorer (host_scorer.h), the scoring copy
// (quant_copy.h) and the storage device's kernel (csd/hls/score_kernel.h) — so that a token scores the
// same bits whichever tier scored it.
//
// Why. Raw dots q_h·k summed over the heads are not the attention those heads pay: a head whose
// logits are 4x the others' outvotes them, and its top tokens crowd out what the other heads attend
// to. Attention recall (score/attention_recall.h) is the mean over query heads h of the softmax mass
// p_h,t = softmax_t(scale · q_h·k_t) that the set covers, so the k tokens that maximize it for one
// set shared by the heads are the top k of Σ_h p_h,t: the heads' attention, each head normalized.
//
// Normalizer. p_h,t needs each head's log-sum-exp over all N tokens, which no tier knows before all
// have scored (hot tokens by the host, cold ones by the storage device, in blocks). Each head is
// instead normalized by its mass on the sinks and the recent window — tokens every step attends and
// keeps in DRAM —, which the host computes exactly from their stored keys before the step's scoring
// (head_log2_mass, host_scorer.h) and hands to every tier with the query (one f32 per query head: the
// scoring stays one pass). Token t's weight under head h is then p_h,t / P_h(sinks ∪ window): its
// attention relative to what that head pays the tokens always attended. Heads with little mass on
// sinks and window weigh more (by 1 / that mass): they are the heads that need the middle. Raising
// b_h to the previous decode step's exact normalizer (its attention over what it selected, which
// covers the middle) measured worse on every model tried (docs/policies.md): the middle's share is
// what the selection is for, and the heads that put theirs there should weigh more.
//
// Score of token t over a group G of query heads (all heads: select_granularity::layer; a KV head's:
// kv_head), from each head's dot d_h (the tier's q_h·k at its precision):
//     x_h   = d_h · c − b_h,     c = log2(e) · scale  (scale: the attention's, 1/√head_dim),
//                                b_h = log2 Σ_{u ∈ sinks ∪ window} 2^(c · q_h·k_u)
//     score = log2 Σ_{h ∈ G} exp2_approx(clamp(x_h, -125, 100))   (heads in order)
// in the log domain, so that a score block's f16 keeps ~3 significant digits of the weight over its
// whole range (a linear f16 weight would flush weights below 6e-8 to 0 and tie them). The clamp keeps
// every exp2 a normal float and their sum below 2^107 for up to 2^7 heads; a token 2^100 times the
// sinks' and window's mass is selected whatever the others. NaN dots give a NaN score (ranked last).
//
// exp2_approx and log2_approx use only +, −, ×, ÷, floor and bit moves (no libm): the same bits on the
// CPU and in synthesized hardware, and no exponential unit in the kernel. Relative error of
// exp2_approx 1.6e-4 (degree-5 Taylor of 2^f on [0, 1)), absolute error of log2_approx 2e-5 (atanh
// series to z^7): far below the f16 step (2^-10 relative) of the score. All call sites are built
// without FMA contraction (no -mfma in their compile options), which keeps their bits equal.
// Cost per token: one exp2 per query head and one log2 per score: O(n_head · tokens) beside the
// O(n_head · head_dim · tokens) of the dots.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace hill {

// Bounds of x_h above (why: see the header comment).
inline constexpr float softmax_x_min = -125.0f;
inline constexpr float softmax_x_max = 100.0f;

// log2(e): c = log2_e · scale turns natural-log logits into base-2 exponents.
inline constexpr float log2_e = 1.44269504088896341f;

// 2^x for x in [softmax_x_min, softmax_x_max] (callers clamp); relative error < 1.6e-4.
inline float exp2_approx(float x) {
    const float xi = std::floor(x);
    const float f = x - xi;  // [0, 1)
    // Taylor coefficients ln(2)^k / k!, Horner form.
    const float p = 1.0f + f * (0.693147181f +
                                f * (0.240226507f + f * (0.0555041087f + f * (0.00961812911f + f * 0.00133335581f))));
    const uint32_t bits = uint32_t(int32_t(xi) + 127) << 23;
    float two_xi;
    std::memcpy(&two_xi, &bits, 4);
    return p * two_xi;
}

// log2(y) for a positive normal finite y; absolute error < 2e-5. ln(m) = 2·atanh(z), z = (m−1)/(m+1)
// in [0, 1/3) for the mantissa m in [1, 2): increasing in y.
inline float log2_approx(float y) {
    uint32_t bits;
    std::memcpy(&bits, &y, 4);
    const float e = float(int32_t(bits >> 23) - 127);
    const uint32_t mbits = (bits & 0x007fffffu) | 0x3f800000u;
    float m;
    std::memcpy(&m, &mbits, 4);
    const float z = (m - 1.0f) / (m + 1.0f);
    const float z2 = z * z;
    const float ln_m = 2.0f * z * (1.0f + z2 * (0.333333333f + z2 * (0.2f + z2 * 0.142857143f)));
    return e + ln_m * log2_e;
}

// The weight of one head: exp2(clamp(d · c − b)); NaN d gives NaN.
inline float softmax_weight(float d, float c, float b) {
    const float x = d * c - b;
    if (std::isnan(x)) return x;
    return exp2_approx(x < softmax_x_min ? softmax_x_min : (x > softmax_x_max ? softmax_x_max : x));
}

// The score of a group from the sum of its heads' weights (NaN stays NaN).
inline float softmax_score(float weight_sum) {
    if (std::isnan(weight_sum)) return weight_sum;
    return log2_approx(weight_sum);
}

}  // namespace hill
