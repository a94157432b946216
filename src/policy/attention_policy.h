// Attention policies (DESIGN.md §1-3): which cached tokens a decode step attends to, and how they
// are found. Every policy runs in the same engine over the same tiered KV store
// (kv/kv_store.h) and device tier (kv/device_tier.h), so comparisons are side by side:
//   full       dense attention over every token wherever it lives (the FlexGen-like baseline);
//   streaming  the first S tokens (attention sinks) and the last W (recent window) only
//              (StreamingLLM, Xiao et al. 2024);
//   hillinfer  query-aware importance scoring of every cached token where it lives — the host
//              scores the tokens in memory (score/host_scorer.h) while the storage device scores
//              its cold pages (csd/device.h) and streams score blocks — merged into a running top
//              ⌈α·N⌉, plus sinks and window (score/selector.h); exact attention over that set
//              gathered from the tiers (HillInfer paper §4; DESIGN.md §3 steps 2-5).
// Every policy reads the tokens in written cold pages through the storage device (plain or emulator),
// and the rest from the KV store in place.
// Prefill is dense for every policy (causal attention over the whole prompt); policies act at
// decode steps.
#pragma once

#include "compute/attention.h"
#include "core/thread_pool.h"
#include "csd/device.h"
#include "kv/device_tier.h"
#include "kv/kv_store.h"
#include "score/score_config.h"

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace hill {

enum class policy_kind { full, hillinfer, streaming };

std::string_view name(policy_kind k);
// "full", "hillinfer" or "streaming"; anything else is a usage error listing them.
policy_kind parse_policy(std::string_view s);

struct policy_params {
    policy_kind kind = policy_kind::full;
    double alpha = 0.2;        // hillinfer: retention ratio α, in (0, 1]: ⌈α·N⌉ scored tokens per step
    int32_t n_sinks = 4;       // S: first tokens always attended (and always kept in the hot pool)
    int32_t n_window = 16;     // W: last tokens always attended (hillinfer, streaming)
    score_params score;        // hillinfer: scoring precision, aggregation, selection granularity
    bool diag = false;         // measure attention recall and selection overlap (slow: scores twice)
};

// Errors (exit_code::usage): α not in (0, 1], negative S or W.
void validate(const policy_params & p);

// Per layer, summed over decode steps.
struct policy_layer_stats {
    uint64_t n_steps = 0;
    uint64_t n_context = 0;        // Σ tokens in the layer
    uint64_t n_attended = 0;       // Σ tokens attended (kv_head granularity: the union of the sets)
    uint64_t n_attended_hot = 0;   // of those, Σ tokens found in the hot pool
    double recall_sum = 0.0;       // diag: Σ attention recall (score/attention_recall.h)
    double overlap_sum = 0.0;      // diag: Σ |S_t ∩ S_t-1| / |S_t| over steps with a previous step
    uint64_t n_overlap = 0;        // diag: steps counted in overlap_sum
};

struct policy_stats {
    std::vector<policy_layer_stats> layers;  // [n_layer]
    uint64_t t_score_us = 0;    // hillinfer: the host scoring the keys in memory (hot pool, open cold group)
    uint64_t t_drain_us = 0;    // hillinfer: the storage device's share — waiting for its score blocks and merging
                                // them (plain SSD: the host reading and scoring the cold pages, on this thread)
    uint64_t t_select_us = 0;   // top-α selection (hillinfer)
    uint64_t t_attend_us = 0;   // gathering the KV and attending (every policy)
    uint64_t t_diag_us = 0;     // diag measurements
};

class attention_policy {
public:
    virtual ~attention_policy() = default;
    virtual policy_kind kind() const = 0;

    // One decode step of layer il: out f32 [n_head, head_dim] = attention of the query q f32
    // [n_head, head_dim] over the tokens the policy chooses among the n_tokens(il) tokens of kv
    // (the step's own token included), run in dev; the tokens in written cold pages are scored and
    // read by `storage`. Updates the hit table of the chosen tokens.
    // Errors: cold pool read failures and storage device errors (hill::error); the device is left idle.
    virtual void attend(int il, const float * q, kv_store & kv, csd::device & storage, device_tier & dev,
                        float * out) = 0;

    const policy_stats & stats() const { return stats_; }

protected:
    policy_stats stats_;
};

// Cancels the storage device's pass unless done() was called: a step that throws between a begin and
// the end of its drain leaves the device idle.
class device_pass_guard {
public:
    explicit device_pass_guard(csd::device & d) : d_(d) {}
    ~device_pass_guard() {
        if (armed_) d_.cancel();
    }
    device_pass_guard(const device_pass_guard &) = delete;
    device_pass_guard & operator=(const device_pass_guard &) = delete;
    void done() { armed_ = false; }

private:
    csd::device & d_;
    bool armed_ = true;
};

// s: the model's attention shape; n_ctx: the context capacity; pool: the threads that score.
std::unique_ptr<attention_policy> make_policy(const policy_params & p, const attention_shape & s, int n_layer,
                                              int64_t n_ctx, thread_pool & pool);

}  // namespace hill
