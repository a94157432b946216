// The scoring copy (DESIGN.md §1 "scoring copy", §3 "Scoring copy"): a compact summary of every key,
// kept in DRAM only to score tokens, so that a decode step reads from the slower tiers only the
// tokens it selects. Its bytes are counted in --kv-host-budget beside the hot pool.
//
// Implementations (one per summary; a policy names the one it scores from, policy::copy_kind):
//   quant_copy  (quant_copy.h)  INT4, INT3 or INT2 keys with per-channel scales, one score per token: the
//                               hillinfer policy's copy on a plain SSD;
//   page_bounds (page_bounds.h) per page of keys, the elementwise min and max (Quest, Tang et al.,
//                               ICML 2024, §3): one upper bound of q·k per page, given to every token
//                               of the page;
//   attention_totals (attention_totals.h) per token the attention it has been paid (H2O, Zhang et al.,
//                               NeurIPS 2023): learned from the steps' attention, not from the query.
//
// A score is what the policy ranks tokens by (raw q·k or its bound: no softmax, no 1/√d), aggregated
// over query heads per score_params (score/score_config.h) exactly as host_scorer does, so that a
// policy's selection does not depend on which summary scored.
//
// Threads: score() splits tokens over the pool; the other methods run on the caller's thread.
// prepare_query() and score() share the prepared query: one caller at a time.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/ggml_type.h"
#include "core/thread_pool.h"
#include "score/score_config.h"

namespace hill {

class scoring_copy {
public:
    virtual ~scoring_copy() = default;

    // What the run report says it scores from, e.g. "the INT2 scoring copy / int8 query".
    virtual std::string describe() const = 0;
    // Everything allocated, in bytes (what the host budget holds for it).
    virtual uint64_t bytes() const = 0;
    // Bytes one token of one layer costs, on average (the run report's per-token figure).
    virtual double bytes_per_token_layer() const = 0;

    // Score rows per call: 1 (granularity layer) or n_head_kv (kv_head).
    virtual int n_group() const = 0;
    // Takes the granularity and aggregate of p (a policy set later than the copy was made): what is
    // stored does not depend on them. The next score needs a new prepare_query.
    virtual void set_params(const score_params & p) = 0;

    // Writes n keys k (f16 or f32, [n, n_head_kv · head_dim], rows row_stride elements apart) at
    // positions [p0, p0 + n) of (seq, il). The copy does not track lengths: the caller knows which
    // positions hold keys. n == 0 does nothing. Does not allocate.
    virtual void write(int seq, int il, int64_t p0, int64_t n, ggml_type type, const void * k, int64_t row_stride) = 0;

    // Before score(): q f32 [n_head, head_dim], the decode query of (seq, il) (copied). head_mass f32
    // [n_head]: under the softmax aggregate each head's b_h (host_scorer.h, head_log2_mass); else
    // ignored (may be null).
    virtual void prepare_query(int seq, int il, const float * q, const float * head_mass) = 0;

    // scores[g · stride + t] for g in [0, n_group()), t in [0, n): the scores of positions [0, n) of the
    // prepared (seq, il). stride >= n when n_group() > 1. A token's score does not depend on the
    // thread count. Does not allocate.
    virtual void score(int64_t n, float * scores, int64_t stride, thread_pool & pool) = 0;

    // Whether the copy learns from attention (observe()): then a decode step hands it the attention
    // weights of the tokens it attended when it applies, and a prefill its tokens' prefill importance.
    virtual bool wants_attention() const { return false; }
    // weights[j]: the attention paid token positions[j] of (seq, il), summed over the query heads.
    virtual void observe(int, int, std::span<const int32_t>, const float *) {}
};

}  // namespace hill
