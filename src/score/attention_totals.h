// Accumulated attention, H2O's scoring copy (Zhang et al., "H2O: Heavy-Hitter Oracle for Efficient
// Generative Inference of Large Language Models", NeurIPS 2023, §3-4): per (sequence, layer, token)
// the attention the token has been paid, summed over the query heads — its "heavy hitter" score. The
// policy h2o ranks tokens by it; nothing is computed from the query at scoring time.
//
// Update. A decode step that attends a set S observes, for each t in S, its weight
// w_t = Σ_h softmax_S(scale · q_h·k)_t (the attention the step's heads paid it, over S: what the
// attention kernel computed), and the score becomes
//     a_t ← a_t − a_t / 8 + w_t        (tokens not attended keep theirs),
// a moving sum over the steps that attended it rather than H2O's plain sum: under a plain sum the
// tokens kept only gain, so a token that left the set could never win again; here a kept token that
// stops earning attention decays below the offloaded ones, which are then read back (the offloading
// variant the HillInfer paper compares with, §5). A prefill observes its tokens' prefill importance
// (the attention of the prompt's last queries, context.h) once; an
// import of KV, the importance its exporter measured (context::import_kv). New positions start at 0 (write()).
//
// Layout: f32 [n_seq, n_layer, n_ctx] (4 bytes per token and layer, 0.1% of f16 K and V at 8 KV heads
// of 128), allocated once. Scores are the stored values: the same whatever the thread count.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compute/attention.h"
#include "score/scoring_copy.h"

namespace hill {

class attention_totals final : public scoring_copy {
public:
    // Room for n_seq × n_layer × n_ctx positions, zeroed. Asserts: n_seq, n_layer, n_ctx >= 1.
    // Errors (hill::error, exit_code::bad_input): the allocation fails, naming its size.
    attention_totals(int n_seq, int n_layer, int64_t n_ctx);

    static uint64_t bytes_for(int n_seq, int n_layer, int64_t n_ctx);

    std::string describe() const override;
    uint64_t bytes() const override;
    double bytes_per_token_layer() const override { return double(sizeof(float)); }
    int n_group() const override { return 1; }
    void set_params(const score_params &) override {}
    // Zeroes positions [p0, p0 + n) (the keys are not read). Asserts as quant_copy's.
    void write(int seq, int il, int64_t p0, int64_t n, ggml_type type, const void * k, int64_t row_stride) override;
    // Selects (seq, il) for score(); q and head_mass are not read.
    void prepare_query(int seq, int il, const float * q, const float * head_mass) override;
    // scores[t] = a_t for t in [0, n).
    void score(int64_t n, float * scores, int64_t stride, thread_pool & pool) override;
    bool wants_attention() const override { return true; }
    // a_t ← a_t − a_t / 8 + weights[j] for t = positions[j]. Asserts: positions in [0, n_ctx).
    void observe(int seq, int il, std::span<const int32_t> positions, const float * weights) override;

    float total(int seq, int il, int64_t t) const { return totals_[index(seq, il, t)]; }

private:
    size_t index(int seq, int il, int64_t t) const;

    int n_seq_, n_layer_;
    int64_t n_ctx_;
    std::vector<float> totals_;  // f32 [n_seq, n_layer, n_ctx]
    size_t query_ = 0;           // index of the prepared (seq, il), position 0
    bool query_ready_ = false;
};

}  // namespace hill
