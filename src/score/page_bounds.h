// Page bounds, Quest's scoring copy (Tang et al., "Quest: Query-Aware Sparsity for Efficient
// Long-Context LLM Inference", ICML 2024, §3.2 "Query-aware criticality estimation"): per page of
// page_size consecutive tokens and per KV head, the elementwise minimum m and maximum M of its keys.
// A query head h reading KV head g scores the page by the upper bound of q_h·k over the page's keys,
//     U_h = Σ_d max(q_h,d · m_g,d, q_h,d · M_g,d)   ≥ q_h·k for every key k of the page,
// aggregated over the heads of the group as every scorer does (score_params: sum, max or softmax of
// head_softmax.h with the b_h given to prepare_query), and every token of the page gets the page's
// score. Quest then attends the top pages (policy `quest`, policy/quest.cpp).
//
// Layout, per (sequence, layer), allocated once for n_ctx positions (outermost first):
//     bounds f16 [n_pages, 2, n_head_kv, head_dim]   (m, then M), n_pages = ⌈n_ctx / page_size⌉
// f16, rounded outwards (m down, M up), so that the bounds stay bounds: 4 · n_head_kv · head_dim /
// page_size bytes per token and layer (256 at 8 KV heads of 128 and pages of 16: 6.25% of f16 K and
// V, as the INT2 quant_copy's 7%). Quest keeps them in f16 too.
//
// Writes. A position that starts a page (t mod page_size == 0) resets the page's bounds to its key;
// the page's later positions widen them. Positions written again after a truncation (context::truncate
// cut the sequence inside a page) widen bounds that may still cover the cut keys: they stay upper
// bounds, only looser, until the page is written from its start again. NaN keys give NaN bounds (the
// page's score is NaN, ranked last); infinities stay.
//
// Scores are computed per page in f32 (the page's bounds widened once, then each head's sum over the
// channels in order), heads in order: one code path, the same bits in every kernel mode (the pages are
// page_size times fewer than the tokens; at 32K tokens, pages of 16 and 32 query heads of 128 this is
// 8 M multiply-adds per layer).
#pragma once

#include <cstdint>
#include <vector>

#include "compute/attention.h"
#include "score/scoring_copy.h"

namespace hill {

class page_bounds final : public scoring_copy {
public:
    // s: the layer shape (s.scale > 0 under the softmax aggregate); p: granularity and aggregate (key
    // and query precision do not apply); page_size >= 1 tokens; room for n_seq × n_layer × n_ctx
    // positions, allocated once; n_threads: the most threads of the pools score() runs on (per-thread
    // scratch). Asserts: n_head, n_head_kv > 0, n_head % n_head_kv == 0, head_dim > 0, page_size, n_seq,
    // n_layer, n_ctx, n_threads >= 1.
    // Errors (hill::error, exit_code::bad_input): the allocation fails, naming its size.
    page_bounds(const attention_shape & s, const score_params & p, int page_size, int n_seq, int n_layer, int64_t n_ctx,
                int n_threads);

    // Bytes of the bounds of n_seq × n_layer × n_ctx positions.
    static uint64_t bytes_for(const attention_shape & s, int page_size, int n_seq, int n_layer, int64_t n_ctx);

    std::string describe() const override;
    uint64_t bytes() const override;
    double bytes_per_token_layer() const override;
    int n_group() const override;
    void set_params(const score_params & p) override;
    // Asserts: seq, il in range, 0 <= p0, n >= 0, p0 + n <= n_ctx, k != nullptr when n > 0; type f16 or f32.
    void write(int seq, int il, int64_t p0, int64_t n, ggml_type type, const void * k, int64_t row_stride) override;
    // Asserts: head_mass != nullptr under softmax.
    void prepare_query(int seq, int il, const float * q, const float * head_mass) override;
    // Every token of a page scores the page's bound (pages split over the pool).
    void score(int64_t n, float * scores, int64_t stride, thread_pool & pool) override;

    int page_size() const { return page_size_; }
    // The bounds of page `page` of (seq, il): f16 [2, n_head_kv, head_dim] (m, then M). For tests.
    const uint16_t * bounds(int seq, int il, int64_t page) const;

private:
    size_t page_offset(int seq, int il, int64_t page) const;  // in f16 elements

    attention_shape shape_;
    score_params params_;
    int page_size_;
    int n_seq_, n_layer_;
    int64_t n_ctx_, n_pages_;
    int n_threads_;
    size_t row_;                      // n_head_kv · head_dim
    std::vector<uint16_t> bounds_;    // f16 [n_seq, n_layer, n_pages, 2, n_head_kv, head_dim]
    size_t query_page0_ = 0;          // page_offset of the prepared (seq, il), page 0
    bool query_ready_ = false;
    std::vector<float> q_;            // f32 [n_head, head_dim]: the prepared query
    std::vector<float> head_mass_;    // f32 [n_head]: b_h (softmax)
    std::vector<float> scratch_;      // f32 [n_threads, 2, n_head_kv, head_dim]: a page's bounds widened
};

}  // namespace hill
