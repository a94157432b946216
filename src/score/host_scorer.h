// The host scorer (DESIGN.md §3 step 2): importance scores of the DRAM-resident tokens of one layer
// against the decode query, one score per token and group of query heads.
//
// Method (HillInfer paper, §4.4 "CSD-based Evaluation Configuration"): the score of a key under one
// query head is the raw inner product q·k, with no softmax and no 1/√d (ranking needs only the order,
// and softmax is monotonic), computed on keys cast on the fly to INT8 or INT4 for scoring only: the
// stored KV stays FP16 and only its selected tokens are later read in full. The host scorer is the CPU
// side of that evaluation; the storage device scores the cold pool the same way.
//
// Score of token j for group g:
//     score[g][j] = aggregate over the query heads h of group g of  q_h · k_{j, h / (n_head / n_head_kv)}
// with groups per score_params::granularity (layer: one group of all n_head query heads; kv_head:
// group g = the n_head / n_head_kv query heads reading KV head g) and aggregate sum, max or softmax
// (each head's dot d_h turned into its weight exp2(d_h · c − b_h), the weights summed, the score their
// log2: score/head_softmax.h; c = log2(e) · s.scale, b_h given with the query). Each dot
// is computed at score_params::key / query precision (score_config.h):
//   fp16 keys:               f32 q · widened k, f32 accumulation;
//   int8/int4 keys, fp32 q:  (Σ q·k̂) · s_k, f32 accumulation;
//   int8/int4 keys, int8 q:  (Σ q̂·k̂) · s_q · s_k, the sum exact in int32;
// where k̂, s_k = quantize_symmetric(k) per (token, KV head) and q̂, s_q per query head. Never f16
// accumulation. Error of a quantized dot against the exact q·k: |Σ q·(k − k̂·s_k)| ≤ Σ|q| · s_k / 2
// (each element rounds to the nearest multiple of s_k), plus f32 rounding.
//
// Keys must be finite: a key head vector with an inf or NaN element scores NaN under the int paths
// (and whatever IEEE arithmetic gives under fp16); the selector ranks NaN lowest.
//
// Kernels: AVX2/FMA/F16C (score_avx2.cpp) or the scalar references, per kernel_mode_get(). Integer
// results are identical in both modes (same quantization, exact int32 sums); f32 results differ by
// float reassociation only. Throughput (GB/s of keys scored, the planner's f_c): bench/bench_score.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "compute/attention.h"
#include "core/ggml_type.h"
#include "core/thread_pool.h"
#include "score/score_config.h"

namespace hill {

// Largest head_dim the scorer takes: int32 sums of 127 · 127 products stay below 2^31 up to 133,000
// elements; 65536 leaves margin and is far beyond any model.
constexpr int score_max_head_dim = 65536;

// Symmetric quantization of one head vector for scoring: x[n] f32 or f16 bits (type), out int8 [n] =
// round(x · q_max / max|x|) (to nearest, ties to even) in [-q_max, q_max], q_max = 127 (p = int8) or
// 7 (p = int4; asserted: p is not fp16). Returns the scale s = max|x| / q_max, so x ≈ out · s.
// max|x| == 0 or below 2^-100 (the reciprocal q_max / max|x| must stay finite): out = 0, returns 0.
// An inf or NaN element: out = 0, returns NaN. Active kernel_mode; bit-identical in both modes.
float quantize_symmetric(ggml_type type, const void * x, int n, score_precision p, int8_t * out);

class host_scorer {
public:
    // s: the layer's shape (s.scale is used by the softmax aggregate only: the other scores are raw q·k);
    // n_threads: the most threads of the pools score() will run on (per-thread scratch). All buffers are
    // sized here, once.
    // Asserts: n_head, n_head_kv, head_dim > 0, n_head % n_head_kv == 0, head_dim <= score_max_head_dim,
    // n_threads >= 1; s.scale > 0 under softmax.
    host_scorer(const attention_shape & s, const score_params & p, int n_threads);

    const score_params & params() const { return params_; }

    // Score rows per call: 1 (layer granularity) or n_head_kv (kv_head).
    int n_group() const;

    // Once per decode step and layer, before score(): copies q f32 [n_head, head_dim] (the caller may
    // reuse it) and, for the int8 query, quantizes each head once (quantize_symmetric). head_mass f32
    // [n_head]: under the softmax aggregate, each head's b_h = log2 of its mass on the sinks and window
    // (head_log2_mass), copied; else ignored (may be null). Asserts: head_mass != nullptr under softmax.
    void prepare_query(const float * q, const float * head_mass = nullptr);

    // The prepared INT8 query q̂ int8 [n_head, head_dim] and its scales f32 [n_head] (int8/int4 keys with
    // an int8 query; else nullptr): what the storage device receives to score the cold pool.
    const int8_t * query_i8() const { return q_i8_.empty() ? nullptr : q_i8_.data(); }
    const float * query_scale() const { return q_scale_.empty() ? nullptr : q_scale_.data(); }
    const attention_shape & shape() const { return shape_; }
    // Softmax aggregate: the prepared b_h f32 [n_head] (else nullptr) and c = log2(e) · scale.
    const float * head_mass() const { return head_mass_.empty() ? nullptr : head_mass_.data(); }
    float log2_scale() const { return log2_scale_; }

    // scores[g · scores_stride + j] for g in [0, n_group()), j in [0, keys.n_kv): the score of token j,
    // whose key is row rows[j] of keys (rows == nullptr: row j). keys: f16 or f32 kv_view, only keys.k
    // is read: [.., n_head_kv, head_dim] rows keys.row_stride elements apart. scores_stride >= n_kv
    // when n_group() > 1, so a caller can place a segment's scores at an offset of a wider per-layer
    // buffer. Tokens are split into contiguous ranges across the pool; each token's score is computed
    // by one thread the same way whatever the thread count. Does not allocate.
    // Asserts: prepare_query() was called, a valid view, pool.n_threads() <= n_threads.
    void score(const kv_view & keys, const int32_t * rows, float * scores, int64_t scores_stride, thread_pool & pool);

private:
    // Tokens per kernel call: amortizes the call and lets the kernels work on tiles of several keys;
    // a block's key head vectors (16 · head_dim elements) and their int8 copies stay in L1.
    static constexpr int score_block = 16;

    attention_shape shape_;
    score_params params_;
    int n_threads_;
    int group_;        // query heads per KV head: n_head / n_head_kv
    int key_stride_;   // head_dim rounded up to 64: int8 key copies a cache line apart
    int dots_stride_;  // score_block · group_ rounded up to 16: per-thread dots a cache line apart
    bool query_ready_ = false;
    std::vector<float> q_f32_;       // f32 [n_head, head_dim]: the prepared query
    std::vector<int8_t> q_i8_;       // int8 [n_head, head_dim]: its int8 values (int8 query, int keys; else empty)
    std::vector<float> q_scale_;     // f32 [n_head]: their scales
    std::vector<int8_t> key_i8_;     // int8 [n_threads, score_block, key_stride]: int8/int4 copies of a block's keys
    std::vector<float> dots_f32_;    // f32 [n_threads, dots_stride]: a block's per-head dots [score_block, group]
    std::vector<int32_t> dots_i32_;  // int32 [n_threads, dots_stride]: the same before scaling (int8 query)
    std::vector<float> head_mass_;   // f32 [n_head]: b_h of the softmax aggregate (else empty)
    float log2_scale_ = 0.0f;        // c = log2(e) · scale (softmax aggregate)
};

// The softmax aggregate's normalizer (score/head_softmax.h): out[h] = log2 Σ_j 2^(c · q_h·k_j) over the
// tokens j of keys (row rows[j], or row j when rows == nullptr), c = log2(e) · s.scale, per query head h
// of q f32 [n_head, head_dim]: the log2 of head h's softmax mass on those tokens, up to the common
// normalizer. Exact f32 dots from the stored keys (f16 or f32 kv_view, only keys.k read), the sum taken
// relative to its largest term. Accumulates: out must hold a previous result (the mass of other tokens)
// or -inf for none, so that the sinks and the window may come from several regions (hot pool, open
// groups). Allocates nothing. Asserts: a valid view, s.scale > 0.
void head_log2_mass(const attention_shape & s, const float * q, const kv_view & keys, const int32_t * rows,
                    float * out);

}  // namespace hill
