// How importance scores are computed and aggregated (DESIGN.md §1 "importance score", §3 steps 2-3).
//
// An importance score is the raw inner product q·k of a decode query with a key: no softmax and no
// 1/√d, since ranking only needs an order and softmax is monotonic (HillInfer paper, §4.4 "CSD-based
// Evaluation Configuration", "Algorithmic Simplification"). The keys may be cast on the fly to INT8 or
// INT4 for scoring only; the stored KV stays FP16 ("Streaming Execution and Asymmetric Precision").
#pragma once

#include <cmath>
#include <string_view>

#include "score/head_softmax.h"

namespace hill {

// Precision of the keys while scoring.
//   fp16: the keys as stored (an f16 or f32 kv_view), widened to f32; f32 accumulation.
//   int8: each key head vector k[head_dim] (one token, one KV head) quantized on the fly with a
//         symmetric scale: scale = max|k| / 127, values round(k · 127 / max|k|) in [-127, 127].
//   int4: the same with 7: scale = max|k| / 7, values in [-7, 7] (held as int8).
enum class score_precision { fp16, int8, int4 };

// Precision of the query while scoring against int8/int4 keys (the fp16 path always uses the f32 query).
//   fp32: f32 accumulation of q · k_int, times the key's scale.
//   int8: each query head quantized once per decode step (symmetric, scale = max|q_h| / 127); int32
//         accumulation of the int8 products, times both scales.
enum class query_precision { fp32, int8 };

// How the per-query-head scores of a token are combined over the query heads of the group:
//   sum:     the sum of the raw dots q_h·k;
//   max:     their maximum;
//   softmax: each head's dot turned into its attention weight relative to its mass on the sinks and
//            the window, the weights summed, the score the sum's log2 (score/head_softmax.h): ranks by
//            the attention the heads pay, each head normalized, so that no head outvotes the others by
//            the size of its logits.
enum class score_aggregate { sum, max, softmax };

// Which query heads share one token set (DESIGN.md §3, end):
//   layer:   one set per layer: every query head of the layer feeds one score per token (the paper's
//            token-level choice);
//   kv_head: one set per KV head: the n_head / n_head_kv query heads of a GQA group feed its score.
enum class select_granularity { layer, kv_head };

// What the host scorer computes. The defaults follow the paper (INT8 keys, raw q·k summed, token-level
// selection); the engine's default aggregate is softmax (policy_params::score, policy/policy.h), chosen
// by attention recall and perplexity (docs/policies.md, "When heads disagree").
struct score_params {
    score_precision key = score_precision::int8;
    query_precision query = query_precision::fp32;
    score_aggregate aggregate = score_aggregate::sum;
    select_granularity granularity = select_granularity::layer;
};

// Sum or max of two head scores a and b of a token (score_aggregate; softmax sums the heads' weights);
// max propagates NaN, so that a NaN head score makes the token's score NaN under every aggregate. Heads
// are combined in order.
inline float combine_scores(score_aggregate agg, float a, float b) {
    if (agg != score_aggregate::max) return a + b;
    return (b > a || std::isnan(b)) && !std::isnan(a) ? b : a;
}

// One head's dot d as it enters combine_scores: d itself, or under softmax its weight (head_softmax.h)
// with c = log2(e) · scale and b = the head's log2 mass on the sinks and window.
inline float head_term(score_aggregate agg, float d, float c, float b) {
    return agg == score_aggregate::softmax ? softmax_weight(d, c, b) : d;
}

// A group's score from its combined head terms: itself, or under softmax the log2 of the weights' sum.
inline float group_score(score_aggregate agg, float combined) {
    return agg == score_aggregate::softmax ? softmax_score(combined) : combined;
}

// Below this max|x| a head vector quantizes to zeros with scale 0 (symmetric quantization, the host
// scorer and the scoring copy): q_max / max|x| must stay finite (127 · 2^100 is far below FLT_MAX), and
// such a vector contributes nothing measurable to a score.
inline constexpr float quantize_min_amax = 0x1p-100f;

// Names as the CLI spells them: fp16 int8 int4 / fp32 int8 / sum max softmax / layer kv_head.
std::string_view name(score_precision p);
std::string_view name(query_precision p);
std::string_view name(score_aggregate a);
std::string_view name(select_granularity g);

// Inverse of name() (exact spelling). Errors (hill::error, exit_code::usage): an unknown name, naming
// the flag that spells it (--score-precision, --query-precision, --aggregate, --select) and the valid values.
score_precision parse_score_precision(std::string_view s);
query_precision parse_query_precision(std::string_view s);
score_aggregate parse_score_aggregate(std::string_view s);
select_granularity parse_select_granularity(std::string_view s);

}  // namespace hill
