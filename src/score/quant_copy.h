// The quantized scoring copy (scoring_copy.h; DESIGN.md §1 "scoring copy", §3 "Scoring copy"): a compact
// INT4, INT3 or INT2 copy of every key, kept in DRAM only to score tokens, so that a plain SSD reads only the
// selected tokens' KV instead of every cold key at every decode step.
//
// Why per-channel scales. Keys of real models have outlier channels, a few channels 10-50 times the
// rest. A per-token INT4 cast (host_scorer's score_precision::int4: one scale per token and KV head)
// takes its scale from the outlier and rounds most other channels to zero: among keys N(0, 1) with one
// channel ×50, it finds 9 of 16 planted needle tokens on average (5 to 14 over 300 draws) where FP16,
// per-token INT8 and this copy find 16 (15 at worst; tests/test_score_copy.cpp, needles_*).
// The copy therefore divides out a per-channel scale first, as KIVI quantizes keys per channel (Liu
// et al., "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache", ICML 2024, §3), then
// quantizes each token symmetrically, so that every channel keeps its levels (15 at 4 bits, 8 at 3, 4 at 2).
// (No per-channel zero point: a mean over the first keys is no mean of later ones once RoPE has turned
// them; on stories260K subtracting it cost 0.009 of recall under summed scores and gained none under
// softmax — docs/storage.md.)
//
// Method. Per (sequence, layer, KV head g), channel scales c[head_dim] from the keys of the sequence's
// first scale_rows (32) positions (re-derived, and those positions re-quantized, while they arrive):
//     c_d = max over those rows of |k_d|  (finite elements only), or, for keys rotated by RoPE
//     (set_rope), the largest |k_d| each row's key would take rotated on to the context's last position:
//     a pair (d, e) of angle θ per position holds (x, y) at row position r, and at p ≥ r
//     (x cos φ − y sin φ, x sin φ + y cos φ), φ = θ (p − r); over φ in [0, Φ], Φ = θ (n_ctx − 1 − r),
//     |k_d| = A |cos(φ + ψ)| (A = hypot(x, y), ψ = atan2(y, x); k_e likewise with ψ − π/2) peaks at A
//     where φ + ψ passes a multiple of π, and otherwise at an end of the range (a row with a non-finite
//     element of the pair counts its finite elements unrotated). Why: keys of real models have outlier
//     channels before RoPE, and RoPE turns a low-frequency pair by less than a radian over the first 32
//     positions but by many over a long context, so that the outlier's energy reaches its partner channel,
//     whose scale from the first rows is small: k̃ of that channel then dwarfs every other and the
//     quantization zeroes them (KVQuant, Hooper et al., arXiv 2401.18079, "Pre-RoPE Key Quantization",
//     quantizes keys before RoPE for the same reason; the copy gets post-RoPE keys). On stories260K
//     (head_dim 8, 512 positions) this took the INT2 copy's recall from 0.9503 to 0.9515
//     (docs/storage.md);
//     then c_d = max(c_d, 1e-3 · max_d c_d)  — a silent channel must not blow up later tokens' k / c;
//     all 1 when max_d c_d < 2^-60 (every value 0, or negligible).
// Later writes keep them. Per (token, KV head), in f32, k̃ = k · (1 / c) (elementwise, the reciprocals
// rounded to f32 once), then
//   4 bits: s_k = max|k̃| / 7,  k̂ = round(k̃ · 7 / max|k̃|) in [-7, 7], to nearest, ties to even: exactly
//           quantize_symmetric(f32 k̃, int4) of host_scorer.h;
//   2 bits: k̂ = 2u − 3 in {-3, -1, 1, 3} and s_k = max|k̃| · σ, the scale fitted by least squares: in
//           units of max|k̃| (y = k̃ · (1 / max|k̃|)), start at σ = rms(y) / 2 (near the best uniform
//           4-level quantizer of a Gaussian, whose step is 0.996 σ_y), then one round of Lloyd's
//           iteration (Lloyd, "Least squares quantization in PCM", IEEE Trans. IT 28(2), 1982): each
//           element its nearest level, u = clamp(round((y / σ + 3) / 2), 0, 3), ties to even; σ = Σ y ℓ /
//           Σ ℓ² over those levels ℓ; the stored u are the nearest levels under that σ. Sums in f32, in
//           element order. Against the former scale max|k̃| / 3 (levels at ±max), this halves the score
//           error of 128-wide Gaussian keys (docs/storage.md): most elements sit well inside the largest.
//   3 bits: k̂ = 2u − 7 in {-7, -5, ..., 7} and s_k as at 2 bits with top level 7 for 3: start at
//           σ = 0.293 · rms(y) (the best uniform 8-level quantizer of a Gaussian has step 0.586 σ_y),
//           one round of Lloyd's iteration with u = clamp(round((y / σ + 7) / 2), 0, 7).
// with quantize_symmetric's special cases in all (max|k̃| < 2^-100: s_k = 0; an inf or NaN in k̃:
// s_k = NaN; the stored values are then k̂ = 0 at 4 bits, u = 0 at 3 and 2 bits, and do not matter).
// The decode query of (sequence, layer), per query head h of KV head g(h) = h / (n_head / n_head_kv):
//     q'_h = q_h ⊙ c_g(h),  q̂'_h, s_q = quantize_symmetric(f32 q'_h, int8)   (scale max|q'_h| / 127),
// so that q_h · k = q'_h · k̃ ≈ s_q · s_k · Σ_d q̂'_h,d · k̂_d, the sum exact in int32. A score is the raw
// inner product, no softmax and no 1/√d (HillInfer paper, §4.4 "CSD-based Evaluation Configuration",
// "Algorithmic Simplification": ranking needs only the order). Per head, in f32:
//     dot_h = (float(Σ q̂'·k̂) · s_q) · s̃_k,   s̃_k = s_k stored as bfloat16 (layout below),
// aggregated exactly as host_scorer does (score_params: granularity layer → one score per token over all
// query heads, kv_head → one per KV head over its query heads; sum, max or softmax — score/head_softmax.h,
// with c = log2(e) · s.scale and the b_h given to prepare_query —; heads in order, then KV heads in
// order; max propagates NaN).
//
// Error against the exact q·k, per head: |q'·k̃ − s_q s_k Σ q̂'k̂| ≤ Σ|q'| · e_k + s_q/2 · Σ|k̂| s_k,
// e_k = s_k / 2 at 4 bits (each key element rounds to the nearest multiple of s_k) and, at 2 and 3 bits,
// max(s_k, |k̃_d| − top · s_k) per element, top 3 or 7 (the nearest odd multiple, or the largest level
// top · s_k below an element beyond it), each query element to the nearest multiple of s_q; plus
// |s_q Σ q̂'k̂| · |s̃_k − s_k| ≤ 2^-9 of the product (the stored scale) and f32 rounding.
// The int32 sums take the stored fields: Σ q̂'(u − 8) = Σ q̂'u − 8 Σ q̂' at 4 bits, Σ q̂'(2u − top) =
// 2 Σ q̂'u − top Σ q̂' at 3 and 2 bits.
//
// Layout, per (sequence, layer), allocated once for n_ctx positions (outermost first):
//     keys    u8  [n_ctx, n_head_kv, head_dim · bits / 8]  4 bits: k̂ + 8 in [1, 15], two per byte;
//                                                   3 bits: u in [0, 7], as below;
//                                                   2 bits: u in [0, 3], four per byte;
//     scales  bf16 [n_ctx, n_head_kv]               s_k rounded to bfloat16 (to nearest, ties to even;
//                                                   0 and NaN kept): its relative error <= 2^-9, far
//                                                   below the levels' (a level is s_k wide), and f32's
//                                                   range, so no scale overflows or flushes to 0; 2
//                                                   bytes where f32 took 4 (at 8 KV heads of 128, 5.6%
//                                                   of the INT2 copy, which the hot pool gets);
//     channel f32 [n_head_kv, head_dim]             c, and 1 / c.
// Packing of one head vector: its elements in blocks of 32, the last block the remaining head_dim mod
// 32 (even at 4 bits, a multiple of 8 at 3 bits, of 4 at 2 bits); at 4 bits byte j of a block of b
// elements holds element j in its low nibble and element j + b/2 in its high nibble (the Q4_0 order of
// core/ggml_type.h), so that one 16-byte load and a shift give 32 elements in query order; at 2 bits
// byte j holds elements j + m · b/4 in bits 2m, 2m + 1 (m = 0..3): one 8-byte load broadcast to four
// lanes, each shifted by 2m. At 3 bits a block takes 3b/8 bytes: the low two bits of each u packed as
// at 2 bits in its first b/4 bytes, then the high bits, element j's at bit j mod 8 of byte b/4 + j / 8
// (of 32 elements: byte m holds elements 8m .. 8m + 7, which the 2-bit lane m holds too; one 4-byte
// load, a byte shuffle and a bit mask give them). Keys are token-major: scoring streams the copy once,
// in address order.
// Bytes per token and layer: n_head_kv · (head_dim · bits / 8 + 2) (at 8 KV heads of 128, where f16 K
// and V take 4096: 528 at 4 bits, 13% of K and V; 400 at 3 bits, 9.8%; 272 at 2 bits, 6.6%).
//
// Which width: docs/storage.md "The scoring copy" gives attention recall and perplexity at each; the
// context's default (context_params::score_copy_bits) is chosen there.
//
// Kernels: AVX2 (score_packed.cpp, dots_u4_i8, dots_u3_i8 and dots_u2_i8, in the build int8_isa_get() names: plain
// AVX2, AVX-VNNI or AVX-512 VNNI) or the scalar reference, per kernel_mode_get() at each call; all give
// the same int32 sums and share the f32 scaling and aggregation, so scores are bit-identical in every
// mode and build. Writing: the fields of eight head vectors at a time (score_avx2.h, copy_fields: the
// heads are the lanes, so each head's sums keep their element order) or their scalar reference, per
// kernel_mode_get(), the same bits; the packing is shared. About 0.9 µs per INT3 token of 8 KV heads of 128
// on one thread of the test VM (docs/storage.md). Throughput: bench/bench_score.cpp (row "copy").
//
// Threads: score() splits tokens over the pool. The other methods run on the caller's thread. write()
// calls touch only their positions (and, at p0 == 0, their pair's channel scales): calls for different
// (sequence, layer) pairs, or for disjoint positions p0 > 0 of one pair, may run concurrently, with
// each other and with score() of another pair. prepare_query(), score() and score_row() share the
// prepared query and scratch: one caller at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "compute/attention.h"
#include "compute/ops.h"
#include "core/fp16.h"
#include "core/ggml_type.h"
#include "core/thread_pool.h"
#include "score/score_config.h"
#include "score/scoring_copy.h"

namespace hill {

// The key width of a scoring copy as the CLI spells it (--score-copy): "int4" 4, "int3" 3, "int2" 2, "off" 0 (no
// copy). Errors (hill::error, exit_code::usage): another name, naming the flag and the valid values.
int parse_score_copy(std::string_view name);

class quant_copy final : public scoring_copy {
public:
    // s: the layer shape (n_head, n_head_kv, head_dim; s.scale: the softmax aggregate's, asserted > 0
    // under it); p: granularity and aggregate
    // (p.key and p.query are ignored: the copy always scores its keys against an INT8 query); bits: 4, 3 or
    // 2 (supports(head_dim, bits)); room for
    // n_seq sequences × n_layer layers × n_ctx positions, allocated here once (not zero-filled: pages are
    // touched as positions are written; channel scales start at 1); n_threads: the most threads of the
    // pools score() will run on (per-thread scratch).
    // Asserts: n_head, n_head_kv > 0, n_head % n_head_kv == 0, supports(head_dim, bits), n_seq, n_layer,
    // n_ctx, n_threads >= 1.
    // Errors (hill::error, exit_code::bad_input): the allocation fails, naming its size.
    quant_copy(const attention_shape & s, const score_params & p, int bits, int n_seq, int n_layer, int64_t n_ctx,
               int n_threads);

    // The widest head vector a copy quantizes (write() keeps one head's values on the stack; models'
    // heads have 64 to 256 elements).
    static constexpr int max_head_dim = 1024;
    // Whether a copy of `bits` (4, 3 or 2) packs head vectors of head_dim elements: head_dim at most
    // max_head_dim, and 4 bits an even head_dim, 3 bits a multiple of 8, 2 bits a multiple of 4.
    static bool supports(int head_dim, int bits);

    // What the copy of n_seq sequences × n_layer layers × n_ctx positions stores: n_ctx tokens per
    // (sequence, layer) at bytes_per_token_layer, plus per (sequence, layer) the channel scales, their
    // reciprocals and the first scale_rows keys in f32 ((scale_rows + 2) · n_head_kv · head_dim · 4 bytes).
    static uint64_t bytes_for(const attention_shape & s, int bits, int n_seq, int n_layer, int64_t n_ctx);
    // Bytes one token of one layer costs: n_head_kv · (head_dim · bits / 8 + sizeof(bf16_bits)).
    static uint64_t bytes_per_token_layer(const attention_shape & s, int bits);

    // Everything allocated: n_seq · n_layer · (n_ctx · bytes_per_token_layer + channel scales), plus the
    // prepared query and the per-thread scratch.
    uint64_t bytes() const override;
    // "the INT<bits> scoring copy / int8 query"; bytes_per_token_layer(shape(), bits()).
    std::string describe() const override;
    double bytes_per_token_layer() const override;

    // Rows of the first write of a sequence the channel scales come from (outlier channels are
    // channels of every token: a few rows find them).
    static constexpr int64_t scale_rows = 32;

    // Score rows per call: 1 (layer granularity) or n_head_kv (kv_head).
    int n_group() const override;

    // The keys arrive rotated by RoPE (model/model.h: hparams::rope_pairs, rope_inv_freq): channel pairs of
    // `layout`, layer il's pair j turning by inv_freq[il][j] radians per position (f64 [n_layer][head_dim /
    // 2]). The channel scales of positions written from now on bound the rotation (the method above);
    // without it they are the first rows' maxima (a forward without RoPE, as bench step's synthetic one).
    // Asserts: one vector of head_dim / 2 per layer, head_dim even.
    void set_rope(rope_layout layout, std::vector<std::vector<double>> inv_freq);

    // Takes the granularity and aggregate of p (a policy set later than the copy was made): the stored
    // copy does not depend on them. The next score needs a new prepare_query. Asserts: s.scale > 0 for
    // softmax.
    void set_params(const score_params & p) override;

    const attention_shape & shape() const { return shape_; }
    const score_params & params() const { return params_; }
    int bits() const { return bits_; }
    int64_t n_ctx() const { return n_ctx_; }

    // Writes n keys k (f16 or f32, [n, n_head_kv · head_dim], rows row_stride elements apart, row_stride
    // >= n_head_kv · head_dim) at positions [p0, p0 + n) of (seq, il), overwriting what was there.
    // The channel scales of (seq, il) are those of its first scale_rows positions: a write that reaches
    // into them keeps those keys (f32), takes the channel scales again from positions [0, min(p0 + n,
    // scale_rows)) and quantizes positions [0, p0) again under them; later writes keep them. So they are a
    // function of the sequence's first keys alone, not of how the keys came in (a prompt of 1 token and
    // then decode steps, or a whole prompt; a sequence truncated and one prefilled with the same tokens
    // score alike). The copy does not track lengths: the caller knows which positions hold keys (the
    // others score unspecified values); positions past p0 + n keep their quantization.
    // n == 0 does nothing. Does not allocate.
    // Asserts: seq, il in range, 0 <= p0, n >= 0, p0 + n <= n_ctx, k != nullptr when n > 0.
    void write(int seq, int il, int64_t p0, int64_t n, ggml_type type, const void * k, int64_t row_stride) override;

    // Before score() and score_row(): q f32 [n_head, head_dim], the decode query of (seq, il); copies
    // it (the caller may reuse q) scaled by the channel scales of (seq, il) as they are now, and
    // quantizes it. head_mass f32 [n_head]: under the softmax aggregate each head's b_h (host_scorer.h,
    // head_log2_mass), copied; else ignored (may be null). A later write at p0 == 0 to (seq, il) needs a
    // new prepare_query. Does not allocate. Asserts: head_mass != nullptr under softmax.
    void prepare_query(int seq, int il, const float * q, const float * head_mass = nullptr) override;

    // scores[g · stride + t] for g in [0, n_group()), t in [0, n): the scores of positions [0, n) of the
    // prepared (seq, il). stride >= n when n_group() > 1. Positions are split into contiguous ranges
    // over the pool; a token's score does not depend on the thread count. Does not allocate.
    // Asserts: prepare_query() was called, 0 <= n <= n_ctx, pool.n_threads() <= n_threads.
    void score(int64_t n, float * scores, int64_t stride, thread_pool & pool) override;

    // One key row from outside the copy (a token not written yet, e.g. the decode step's new one):
    // scores[g · stride] for g in [0, n_group()) of k (f16 or f32, [n_head_kv · head_dim]), quantized as
    // write() would at p0 > 0 (the channel scales the query was prepared with): the same bits as score()
    // gives once the row is written. Does not allocate.
    void score_row(ggml_type type, const void * k, float * scores, int64_t stride);

    // The stored copy of (seq, il) (layout above): keys u8 [n_ctx, n_head_kv, head_dim · bits / 8], their
    // scales bf16 [n_ctx, n_head_kv], the channel scales f32 [n_head_kv, head_dim]. For tests and for a
    // consumer that ships the copy elsewhere.
    const uint8_t * keys(int seq, int il) const;
    const bf16_bits * key_scales(int seq, int il) const;
    const float * channel_scales(int seq, int il) const;

private:
    // Tokens per kernel call: amortizes the call over tiles of keys (up to 8 tokens, for MHA). While
    // score_tokens() scores a block, KV head by KV head, it prefetches the same KV head's bytes of the
    // next block (score() the next block's scales): the kernel reads each token row 64 bytes at a time
    // (at head_dim 128), once per KV head, a pattern the hardware prefetchers follow poorly. On the
    // 2-core AMD EPYC (Zen 3) test VM, one thread, 8 KV heads × 128, 32 query heads, the copy of 128K
    // tokens in DRAM (another process busy on the machine: means of 8 runs, ±20%): no prefetch, blocks
    // of 32: 1.3 million tokens per CPU-second; the whole next block prefetched at once: 2.0 (blocks of
    // 32), 2.3 (16); spread over the KV heads as now: 3.1 (16), 2.8 (8). With the copy in L3: 1.7
    // without prefetch, 2.7 to 3.8 with.
    static constexpr int score_block = 16;

    // dots_u4_i8, dots_u3_i8 or dots_u2_i8 of score_avx2.h (per bits) in int8_isa_get()'s build, or its scalar
    // reference, per kernel_mode_get().
    using dots_fn = void (*)(const int8_t * q, int n_q, const uint8_t * const * k, int n_k, int n, int32_t * out);
    dots_fn kernel() const;

    size_t pair_index(int seq, int il) const;
    // Quantizes the head vectors of one key row (f16 or f32 at k) under the reciprocals rc f32 [n_head_kv,
    // head_dim] of the channel scales into packed u8 [n_head_kv, head_dim · bits / 8] and scales bf16 [n_head_kv].
    void quantize_row(ggml_type type, const void * k, const float * rc, uint8_t * packed, bf16_bits * scale) const;
    // The largest |k_d| of element i (channel d of its head) of the first-rows key x at position r of
    // layer il, turned by RoPE on to position n_ctx − 1 (set_rope; both elements of its pair finite).
    float rotated_bound(const float * x, int64_t i, int d, int il, int64_t r) const;
    // out[g · stride + t] for t in [0, nb <= score_block): the scores of nb quantized tokens, packed keys
    // u8 [nb, n_head_kv, head_dim · bits / 8] and scales bf16 [nb, n_head_kv], against the prepared query; dots:
    // int32 scratch of dots_stride_. Prefetches the keys of the n_next tokens that follow the nb.
    void score_tokens(dots_fn dots_of, const uint8_t * keys, const bf16_bits * scales, int nb, int n_next,
                      int32_t * dots, float * out, int64_t stride) const;

    attention_shape shape_;
    score_params params_;
    int bits_;                         // 4, 3 or 2
    int n_seq_, n_layer_;
    int64_t n_ctx_;
    int n_threads_;
    int group_;                        // query heads per KV head: n_head / n_head_kv
    size_t head_bytes_;                // packed bytes of one head vector: head_dim · bits / 8
    size_t row_bytes_;                 // packed bytes of one token: n_head_kv · head_bytes_
    int dots_stride_;                  // score_block · group rounded up to 16: per-thread dots a cache line apart
    std::unique_ptr<uint8_t[]> keys_;  // u8  [n_seq, n_layer, n_ctx, n_head_kv, head_bytes_]
    std::unique_ptr<bf16_bits[]> scales_;  // bf16 [n_seq, n_layer, n_ctx, n_head_kv]
    std::vector<float> channel_;       // f32 [n_seq, n_layer, n_head_kv, head_dim]
    std::vector<float> inv_channel_;   // f32 [n_seq, n_layer, n_head_kv, head_dim]: 1 / c
    std::vector<float> first_;         // f32 [n_seq, n_layer, scale_rows, n_head_kv, head_dim]: the first keys
    std::vector<int> partner_;         // [head_dim]: the channel each one turns with under RoPE; empty: none
    std::vector<int> pair_;            // [head_dim]: its pair j as j + 1, negated for the pair's trailing element
    std::vector<std::vector<double>> rope_theta_;  // f64 [n_layer][head_dim / 2]: radians per position
    bool query_ready_ = false;
    size_t query_pair_ = 0;          // pair_index of the prepared (seq, il)
    std::vector<float> q_scaled_;    // f32 [n_head, head_dim]: q ⊙ c, the prepared query
    std::vector<int8_t> q_i8_;       // int8 [n_head, head_dim]: its int8 values
    std::vector<float> q_scale_;     // f32 [n_head]: their scales
    std::vector<int32_t> q_offset_;  // int32 [n_head]: 8 · Σ q̂'_h (4 bits), 7 · (3 bits) or 3 · (2 bits)
    std::vector<int32_t> dots_;      // int32 [n_threads, dots_stride]: a block's dots [score_block, group]
    std::vector<uint8_t> row_keys_;  // u8 [n_head_kv, head_bytes_]: score_row's quantized key
    std::vector<bf16_bits> row_scales_;  // bf16 [n_head_kv]: its scales
    std::vector<float> head_mass_;   // f32 [n_head]: b_h of the softmax aggregate (else empty)
    float log2_scale_ = 0.0f;        // c = log2(e) · scale (softmax aggregate)
};

}  // namespace hill
