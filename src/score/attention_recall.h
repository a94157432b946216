// Attention recall (DESIGN.md §6, diagnostic mode): the share of the exact softmax attention mass
// that a selected token set covers, per query head, averaged over the heads:
//     recall = mean_h  Σ_{t ∈ S(h)} exp(s_h,t) / Σ_{t < N} exp(s_h,t),   s_h,t = scale · q_h·k_t
// with exact f32 scores from the stored keys (not the scorer's INT8/INT4 casts). A recall of 1
// means sparse attention over S gives the dense output exactly. Slow path: it scores every key once
// more and holds f32 [n_head, N]; used only with --diag.
#pragma once

#include "compute/attention.h"

#include <cstdint>
#include <span>
#include <vector>

namespace hill {

class attention_recall {
public:
    // s: the layer shape (s.scale is applied); n_max: the longest context (scratch sized once).
    attention_recall(const attention_shape & s, int64_t n_max);

    // Starts a layer step: q f32 [n_head, head_dim] (copied), n tokens in the layer.
    void begin(const float * q, int64_t n);
    // Exact scores of a segment of keys (kv_store::for_each_segment with kv_part::k): key of token
    // tokens[j] is row rows[j] of keys (f16 or f32).
    void add(const kv_view & keys, const int32_t * rows, const int32_t * tokens);
    // Recall of the selection: selected.size() == 1 (one set for every head) or n_head_kv (set g
    // for the query heads of KV head g); each set holds token indices < n. Every token of the step
    // must have been added.
    double recall(std::span<const std::vector<int32_t>> selected) const;

private:
    attention_shape shape_;
    int64_t n_ = 0;
    std::vector<float> q_;       // f32 [n_head, head_dim]
    std::vector<float> scores_;  // f32 [n_head, n_max]: scale · q_h·k_t
};

}  // namespace hill
