// Policies (DESIGN.md §1-3): the deciders of a decode step. A policy answers two questions and
// changes nothing itself — the step (sched/decode_step.h) sequences the work and applies:
//   select  which tokens attention reads at this step, per sequence and group of query heads, from
//           the importance scores the step computed (when the policy asked for them);
//   place   which moves the hot pool makes: cold tokens to promote (they are read by this step's
//           gather anyway) and hot tokens to evict; and, after a prefill, which tokens start hot.
// Every policy runs in the same engine over the same tiers and storage devices, so comparisons are
// side by side. One file per policy (full.cpp, streaming.cpp, hillinfer.cpp, quest.cpp, h2o.cpp, leoam.cpp, infinigen.cpp) and one line in the
// registry (registry.cpp) make a new one.
//
// Placement rules shared by the policies (placement.h): `fifo` (the sinks and the most recent tokens
// stay hot; the oldest is evicted when room is needed) and `hkm` (HillInfer paper §4.2 "Bidirectional
// KV Cache Pools": hit-rate driven promotion and demotion with a margin, a per-step budget, the recent
// window kept hot, and prefill placement by prefill importance).
#pragma once

#include "kv/kv_cells.h"
#include "score/score_config.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hill {

enum class placement_kind { by_policy, fifo, hkm };

// The scoring copy a policy scores from (score/scoring_copy.h), when it scores:
//   tier:        where the keys live — the host scores what is in DRAM, a computational storage
//                device its cold pages — or, on a plain SSD, the quantized scoring copy in DRAM
//                (score/quant_copy.h, --score-copy; off: the plain SSD reads the cold keys);
//   page_bounds: per-page key bounds in DRAM (score/page_bounds.h, Quest), whatever the storage;
//   chunk_bounds: the same, scored over adaptive chunks of pages first (LeoAM);
//   attention:   the accumulated attention of every token (score/attention_totals.h, H2O), learned
//                from the steps' attention weights;
//   sketch:      r channels of every key in DRAM (score/key_sketch.h, InfiniGen), scored with the
//                query speculated one layer ahead: the decode step selects layer il + 1 while layer
//                il computes and prefetches the selection (sched/decode_step.h).
enum class copy_kind { tier, page_bounds, chunk_bounds, attention, sketch };
std::string_view name(placement_kind k);
// "fifo" or "hkm"; anything else is a usage error listing them.
placement_kind parse_placement(std::string_view s);

struct policy_params {
    std::string name = "full";  // a registered policy (policy_names())
    double alpha = 0.2;         // retention ratio α in (0, 1]: ⌈α·N⌉ scored tokens per step (hillinfer)
    int32_t n_sinks = 4;        // S: first tokens always attended and always hot
    int32_t n_window = 16;      // W: last tokens always attended (hillinfer, streaming) and always hot
    // Scoring precision, aggregation, selection granularity (hillinfer). Aggregate softmax: chosen by
    // attention recall and perplexity on stories260K and on models whose heads disagree (docs/policies.md).
    score_params score{.aggregate = score_aggregate::softmax};
    placement_kind placement = placement_kind::by_policy;  // by_policy: the policy's own default
    uint64_t migrate_bytes = 0;  // promotions per decode step, in bytes of K and V (all layers, all sequences);
                                 // 0: a sixteenth of the hot pool; at most the hot pool (larger is the same)
    int32_t page_size = 16;     // tokens per page of a page-scoring policy (quest, leoam; 16: Quest's default)
    bool diag = false;          // measure attention recall and selection overlap (slow: scores twice)
};

// One sequence's choice at a decode step of one layer.
struct select_input {
    int64_t n = 0;                  // tokens, the step's own token (position n − 1) included
    const float * scores = nullptr; // f32 [n_group, n]: importance by position (f16-rounded, score_to_f16);
                                    // nullptr when the policy did not ask for scores
};

// One sequence of a decode step, as placement sees it.
struct place_seq {
    int seq = 0;                          // sequence id in the cells
    int64_t n = 0;                        // tokens after the step (the new token, position n − 1, is hot)
    std::span<const int32_t> counted;     // the tokens whose hit counts this step raises (the selection
                                          // without the sinks, policy::counted), ascending
};

struct place_input {
    int il = 0;
    uint32_t step = 0;                    // the cache's decode step counter
    const kv_cells * cells = nullptr;     // as before the step (n_tokens(seq) == n − 1)
    std::span<const place_seq> seqs;      // the step's sequences
    int64_t n_free = 0;                   // hot slots free after the step's own appends
    int64_t n_reserve = 0;                // hot slots the next step needs free for its appends
    int64_t max_promotions = 0;           // the per-step budget, in tokens of this layer
};

// Moves of one layer at one step, applied when the step succeeded: evict[i] (hot → cold only: the cold
// copy exists, nothing is written), then promote[i] (cold → hot: the step keeps the token's rows from
// its gather, and at apply the token takes a free slot — one an eviction of the plan freed, possibly).
// After the plan, n_free − |promote| + |evict| >= n_reserve. Entries are (sequence id, position).
struct placement_plan {
    std::vector<std::pair<int, int32_t>> promote;
    std::vector<std::pair<int, int32_t>> evict;
    void clear() {
        promote.clear();
        evict.clear();
    }
};

// After a prefill segment of one sequence, layer il.
struct prefill_place_input {
    int il = 0;
    int seq = 0;
    int64_t p0 = 0;                       // the segment: positions [p0, n)
    int64_t n = 0;
    const kv_cells * cells = nullptr;     // tokens [0, p0) of seq as they are
    const float * importance = nullptr;   // f32 [n]: prefill importance of every position; nullptr: none measured
    int64_t n_free = 0;                   // free hot slots now
    int64_t n_reserve = 0;                // slots to leave free (the next decode step's appends)
};

// Which tokens of the sequence are hot after the segment: evict (positions < p0 now hot), then place
// (positions not hot now, in this order) with their starting hit counts.
struct prefill_plan {
    std::vector<int32_t> evict;
    std::vector<int32_t> place;
    std::vector<uint16_t> place_hits;     // [place.size()]
    void clear() {
        evict.clear();
        place.clear();
        place_hits.clear();
    }
};

class policy {
public:
    virtual ~policy() = default;
    virtual std::string_view name() const = 0;
    const policy_params & params() const { return params_; }
    // Token sets per sequence and step: 1 (select_granularity::layer) or n_head_kv (kv_head).
    int n_group() const { return n_group_; }
    // The placement rule in force (params().placement, or the policy's default).
    placement_kind placement() const { return placement_; }

    // Whether select() ever reads importance scores (the storage device must then score at the
    // policy's precision), and whether it reads them for a sequence of n tokens (the step scores only then).
    virtual bool uses_scores() const = 0;
    virtual bool wants_scores(int64_t n) const = 0;
    // Where the scores come from (copy_kind).
    virtual copy_kind scores_from() const { return copy_kind::tier; }
    // sets[g] = the tokens attention reads for group g, ascending, without repeats. sets.size() == n_group().
    virtual void select(const select_input & in, std::span<std::vector<int32_t>> sets) const = 0;
    // The part of a selection that raises hit counts (kv_cells.h): the positions of `set` but the sinks,
    // which are attended and hot by rule. The window counts: a token leaving it carries its recent use.
    void counted(std::span<const int32_t> set, int64_t n, std::vector<int32_t> & out) const;

    // Placement (placement.h; a policy may refine it).
    virtual void place(const place_input & in, placement_plan & plan) const;
    virtual void place_prefill(const prefill_place_input & in, prefill_plan & plan) const;
    // Whether the prefill measures prefill importance: place_prefill() reads it (hkm), or the policy's
    // scoring copy starts from it (h2o's accumulated attention).
    bool wants_prefill_importance() const {
        return placement_ == placement_kind::hkm || scores_from() == copy_kind::attention;
    }

protected:
    policy(const policy_params & p, int n_group, placement_kind default_placement);
    policy_params params_;
    int n_group_;
    placement_kind placement_;
};

// Errors (exit_code::usage): an unknown policy (the registered ones listed), α not in (0, 1], negative
// S or W, a page size below 1, a policy that attends by rule to nothing (S = W = 0 with streaming or hillinfer), a kv_head
// granularity with more than 64 KV heads.
void validate(const policy_params & p, int n_head_kv);

// The policy named p.name (validated). n_head_kv: the model's KV heads (groups of kv_head granularity).
std::unique_ptr<policy> make_policy(const policy_params & p, int n_head_kv);

// The registered policy names, in registry order ("full, streaming, hillinfer, quest, h2o, leoam, infinigen").
std::string policy_names();

}  // namespace hill
