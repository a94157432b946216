// The policies that attend to a selected token set (attention_policy.h): `streaming` (sinks and
// recent window) and `hillinfer` (those plus the top ⌈α·N⌉ by query-aware score). One decode step
// of layer il (DESIGN.md §3; HillInfer paper §4.2 "Hierarchical Importance Evaluation"):
//   1. hillinfer: score every key of the layer where it lives: the storage device starts on the
//      keys in its cold pages (csd/device.h) while the host scores the tokens in memory (hot pool
//      and the cold group being filled; host_scorer, raw q·k at the scoring precision); every
//      score is rounded to f16 (score_to_f16) as a score block carries it, and offered to a running
//      top-k per group (layer or KV head) as it arrives — the device's blocks as they stream in;
//   2. select per group: sinks ∪ window ∪ top ⌈α·N⌉ of the rest;
//   3. gather the selected KV and attend exactly in the device tier: the storage device starts
//      reading the selected tokens of its cold pages while the host attends to its winners in
//      place, then the device's KV is attended as it arrives; with a token set per KV head, each KV
//      head's query heads attend to their own set;
//   4. count a hit for every selected token (kv/hit_table.h).
// With ⌈α·N⌉ + S + W ≥ N every token is selected and the output is dense attention.
#pragma once

#include "policy/attention_policy.h"
#include "score/attention_recall.h"
#include "score/host_scorer.h"
#include "score/selector.h"

#include <memory>

namespace hill {

class selection_policy final : public attention_policy {
public:
    // p.kind: hillinfer or streaming (asserted).
    selection_policy(const policy_params & p, const attention_shape & s, int n_layer, int64_t n_ctx,
                     thread_pool & pool);
    policy_kind kind() const override { return params_.kind; }
    void attend(int il, const float * q, kv_store & kv, csd::device & storage, device_tier & dev,
                float * out) override;

private:
    void score_and_select(int il, const float * q, kv_store & kv, csd::device & storage, int64_t n_top);
    void gather_and_attend(int il, const float * q, kv_store & kv, csd::device & storage, device_tier & dev,
                           float * out);
    void measure(int il, const float * q, kv_store & kv);

    policy_params params_;
    attention_shape shape_;
    int64_t n_ctx_;
    thread_pool & pool_;
    int n_group_;                              // token sets per step: 1 (layer) or n_head_kv (kv_head)
    std::unique_ptr<host_scorer> scorer_;      // hillinfer only
    token_selector selector_;                  // streaming: sinks and window
    std::vector<running_topk> topk_;           // hillinfer: [n_group] the running top ⌈α·N⌉ of the middle
    std::vector<float> seg_scores_;            // f32 [n_group, n_ctx]: one host segment's scores, in segment order
    std::vector<std::vector<int32_t>> sel_;    // [n_group] selected token positions, ascending
    std::vector<int32_t> union_;               // kv_head: the union of the sets, ascending
    std::vector<uint64_t> member_;             // u64 [n_ctx] kv_head: bit g set = in set g
    std::vector<int32_t> rows_g_;              // kv_head: one group's rows of a segment
    std::vector<int32_t> disk_;                // the chosen tokens in written cold pages
    std::unique_ptr<attention_recall> recall_; // diag only
    std::vector<std::vector<int32_t>> prev_;   // diag: [n_layer] the previous step's union
};

}  // namespace hill
