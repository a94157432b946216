// The partial-channel key sketch, InfiniGen's scoring copy (Lee et al., "InfiniGen: Efficient
// Generative Inference of Large Language Models with Dynamic KV Cache Management", OSDI 2024, §4.2
// "Prefetching Opportunities" and §4.3 "Efficient Prefetching Module"): per layer and KV head, r of
// the head_dim channels, chosen offline from the layer's weights, and per cached key those r channels
// in DRAM. A query scores a token by the partial inner product over the chosen channels: the channels
// that carry most of q·k, at a fraction of the key's bytes. The policy `infinigen` scores the next
// layer's tokens from it with a speculated query (policy/infinigen.cpp, sched/decode_step.h).
//
// Channel choice. InfiniGen skews W_q and W_k offline (an SVD of the layer's query weights, applied
// to both, so that a few columns carry most of the query's and key's magnitude) and keeps the columns
// of largest magnitude. Here, without the SVD (the stored K stays as the model wrote it), channel d of
// KV head g is ranked by the product of the weight norms that bound its term of q·k:
//     imp[g, d] = ‖W_k[g·hd + d, :]‖ · sqrt(Σ_{h ∈ group g} ‖W_q[h·hd + d, :]‖²)
// (rows of W = output channels; hd = head_dim; the group: the n_head / n_head_kv query heads reading
// KV head g). Under RoPE a channel's term rotates into its pair partner's, and only the pair's sum
// q_d k_d + q_d' k_d' is a function of the two vectors before rotation: channels are then taken in
// pairs (adjacent: (2i, 2i + 1); rotate_half: (i, i + hd/2)), ranked by the pair's summed importance.
// The top r (r/2 pairs) per KV head, higher importance first, the lower channel on ties, are kept
// ascending.
//
// Score of token t for query heads h of a group (score_params: granularity layer → all heads, kv_head
// → the KV head's query heads), with C_g the chosen channels of h's KV head g:
//     d_h,t = Σ_{j ∈ [0, r)} q_h[C_g[j]] · k̃_t,g[j]        (k̃: the sketch's f16 values, f32 sum in j order)
// aggregated as every scorer does (combine_scores / head_term / group_score, score_config.h): sum, max
// or softmax. Under softmax each head's normalizer b_h is the sketch's own, over the sinks and the
// window of the n scored positions (score/head_softmax.h, with the partial dots): the sketch scores a
// layer whose window keys are not all computed yet (the speculation runs before the layer), so it does
// not take prepare_query's head_mass.
//
// Layout, allocated once (outermost first):
//     sketch   f16 [n_seq, n_layer, n_ctx, n_head_kv, r]   the chosen channels of every key
//     channels i32 [n_layer, n_head_kv, r]                 C, ascending per head
// Bytes per token and layer: 2 · n_head_kv · r. At r = head_dim / 4 (channels_for) and 8 KV heads of
// 128: 512, 12.5% of the f16 K and V (4096); at r = head_dim / 8 it would be 6.25%, as quest's page bounds.
//
// Threads: score() splits tokens over the pool; the other methods run on the caller's thread.
#pragma once

#include <cstdint>
#include <vector>

#include "compute/attention.h"
#include "compute/matmul.h"
#include "score/scoring_copy.h"

namespace hill {

// How RoPE pairs a head's channels (compute/ops.h rope_layout), or none (no RoPE: OPT).
enum class sketch_pairing { none, adjacent, half };

// imp f32 [n_head_kv, head_dim] as the file comment says, from wq [n_head · head_dim, n_embd] and wk
// [n_head_kv · head_dim, n_embd] of any weight type (rows dequantized). Asserts the row counts.
void sketch_channel_importance(const weight_view & wq, const weight_view & wk, const attention_shape & s, float * imp);

// channels i32 [n_head_kv, r]: per KV head the r most important channels of imp f32 [n_head_kv, head_dim]
// (pairs under RoPE, ranked by the pair's sum), ascending. NaN importance ranks last. Asserts: 1 <= r <=
// head_dim, r and head_dim even under a pairing.
void sketch_choose_channels(const float * imp, int n_head_kv, int head_dim, int r, sketch_pairing pairing,
                            int32_t * channels);

class key_sketch final : public scoring_copy {
public:
    // s: the layer shape (s.scale > 0 under softmax); p: granularity and aggregate (precisions do not
    // apply); channels i32 [n_layer, n_head_kv, r], each head's ascending in [0, head_dim); the sinks
    // and window of the softmax normalizer; room for n_seq × n_layer × n_ctx positions; n_threads: the
    // most threads of the pools score() runs on (per-thread scratch). Asserts the shapes and ranges.
    // Errors (hill::error, exit_code::bad_input): the allocation fails, naming its size.
    key_sketch(const attention_shape & s, const score_params & p, int r, std::vector<int32_t> channels, int n_sinks,
               int n_window, int n_seq, int n_layer, int64_t n_ctx, int n_threads);

    // r for a head dimension: head_dim / 4 rounded up to an even count (2 at least, head_dim at most).
    static int channels_for(int head_dim);
    // Bytes of the sketch and its channel table.
    static uint64_t bytes_for(const attention_shape & s, int r, int n_seq, int n_layer, int64_t n_ctx);

    std::string describe() const override;
    uint64_t bytes() const override;
    double bytes_per_token_layer() const override;
    int n_group() const override;
    void set_params(const score_params & p) override;
    // Keeps the chosen channels of n keys (f16 or f32 rows). Asserts as page_bounds::write.
    void write(int seq, int il, int64_t p0, int64_t n, ggml_type type, const void * k, int64_t row_stride) override;
    // Takes q's chosen channels per query head; head_mass is not read (see the file comment).
    void prepare_query(int seq, int il, const float * q, const float * head_mass) override;
    // The partial-channel scores of positions [0, n), all written. A token's score does not depend on
    // the thread count.
    void score(int64_t n, float * scores, int64_t stride, thread_pool & pool) override;

    int r() const { return r_; }
    // The chosen channels of (il, KV head g): r ascending.
    const int32_t * channels(int il, int g) const;

private:
    size_t token_offset(int seq, int il, int64_t t) const;  // in f16 elements
    float head_dot(int h, const float * key) const;         // d_h of one token's sketch row f32 [n_head_kv, r]

    attention_shape shape_;
    score_params params_;
    int r_;
    std::vector<int32_t> channels_;  // i32 [n_layer, n_head_kv, r]
    int n_sinks_, n_window_;
    int n_seq_, n_layer_;
    int64_t n_ctx_;
    size_t row_;                     // n_head_kv · r
    std::vector<uint16_t> sketch_;   // f16 [n_seq, n_layer, n_ctx, n_head_kv, r]
    size_t query_base_ = 0;          // token_offset of the prepared (seq, il), position 0
    bool query_ready_ = false;
    std::vector<float> qp_;          // f32 [n_head, r]: the prepared query's chosen channels
    std::vector<float> head_mass_;   // f32 [n_head]: b_h of the current score (softmax)
    std::vector<float> scratch_;     // f32 [n_threads, n_head_kv, r]: one token's sketch row, widened once for all heads
};

}  // namespace hill
