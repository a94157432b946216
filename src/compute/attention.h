// Exact softmax attention (scaled dot product, Vaswani et al. 2017) with grouped KV heads
// (GQA: query head h reads KV head h / (n_head / n_head_kv)), computed with an online softmax
// (Milakov & Gimelshein 2018): one pass over the keys, no score matrix.
#pragma once

#include "core/ggml_type.h"
#include "core/thread_pool.h"

#include <cstdint>
#include <limits>

namespace hill {

struct attention_shape {
    int n_head = 0;     // query heads
    int n_head_kv = 0;  // key/value heads; n_head % n_head_kv == 0
    int head_dim = 0;
    float scale = 0.0f; // usually 1/sqrt(head_dim)
    // Soft-capping of the scores (Gemma 2): s = softcap · tanh(q·k·scale / softcap); 0: none. The
    // fused AVX2 kernel does not take it: capped heads run the per-head kernels.
    float softcap = 0.0f;
    // Sliding window (Mistral, Gemma): with a causal mask (causal_p0 below), query token t sees only
    // the keys j > causal_p0 + t - window, i.e. the last `window` positions up to its own; 0: no
    // lower bound. Decode callers pass the window's keys themselves.
    int64_t window = 0;
};

// K and V of tokens [0, n_kv) of one layer: f32 or f16, each token's row of n_head_kv * head_dim
// elements `row_stride` elements apart (K and V share the layout).
// k, v: [n_kv, n_head_kv, head_dim] (token stride row_stride)
struct kv_view {
    ggml_type type = ggml_type::f32;  // f32 or f16
    const void * k = nullptr;
    const void * v = nullptr;
    int64_t n_kv = 0;
    int64_t row_stride = 0;
};

// Decode: out[n_head, head_dim] = softmax(q·Kᵀ·scale) · V over all n_kv tokens (s.softcap must be 0).
// q: f32 [n_head, head_dim]. Heads split across the pool (contiguous ranges, so the query heads of
// one KV head stay on one thread); each head is attention_head, so the result does not depend on
// the thread count.
void attention_decode(const attention_shape & s, const float * q, const kv_view & kv, float * out, thread_pool & pool);

// Prefill, causal: query token t (t in [0, n_tok), position p0 + t) attends to KV tokens
// [0, p0 + t]; kv.n_kv >= p0 + n_tok. q, out: f32 [n_tok, n_head, head_dim].
// Work is split in chunks of query tokens × heads across the pool; memory is O(head_dim) per
// thread (no n_tok × n_kv matrix). Chunks are taken dynamically, latest tokens first (the causal
// rows are unequal). Output row t equals attention_decode with kv.n_kv = p0 + t + 1, bit for bit.
void attention_prefill(const attention_shape & s, const float * q, int64_t n_tok, int64_t p0, const kv_view & kv,
                       float * out, thread_pool & pool);

// Running state of one query head's online softmax over the keys seen so far: m = max score,
// l = Σ exp(score - m); the caller's accumulator holds Σ exp(score - m) · v (not normalized).
// Feeding the keys of a layer in any number of segments, in any order, gives the attention over
// their union (softmax is invariant to the order of the keys): how attention runs over KV that
// lives in several tiers.
struct softmax_state {
    float m = -std::numeric_limits<float>::infinity();
    double l = 0.0;
};

// Continues st and acc[head_dim] (start: softmax_state{} and zeros) of one query head over n more
// keys: k, v point at the KV head's first element; key j is row rows[j] (rows == nullptr: row j),
// rows `row_stride` elements apart. softcap > 0: scores capped as attention_shape::softcap says.
// Current thread, active kernel_mode.
void attention_head_accumulate(const float * q, ggml_type kv_type, const void * k, const void * v, const int32_t * rows,
                               int64_t n, int64_t row_stride, int head_dim, float scale, float * acc,
                               softmax_state & st, float softcap = 0.0f);

// out[head_dim] = acc / l (zeros when no key was seen). out may alias acc.
void attention_head_finish(const float * acc, const softmax_state & st, int head_dim, float * out);

// attention_head_accumulate for every query head of a decode query q f32 [n_head, head_dim] over
// the tokens of kv (rows: as above, kv.n_kv of them; nullptr = rows 0..n_kv-1): acc f32
// [n_head, head_dim], st [n_head]. The KV heads (slices of a KV head's query heads when there are
// fewer KV heads than threads) split across the pool in contiguous ranges; a thread walks the keys
// in blocks over all of its KV heads, and with the AVX2 kernel (head_dim % 8 == 0) the query heads
// of a KV head take each block together, each K and V row read and widened once for all of them
// (avx2::attention_group_accumulate). Each head's result is that of attention_head_accumulate over
// all the keys, bit for bit, whatever the thread count.
void attention_decode_accumulate(const attention_shape & s, const float * q, const kv_view & kv, const int32_t * rows,
                                 float * acc, softmax_state * st, thread_pool & pool);

// causal_p0 argument of attention_prefill_accumulate: every query token sees every key.
inline constexpr int64_t no_causal_mask = INT64_MAX / 4;

// attention_head_accumulate for every (query token, head) of a prompt chunk q f32
// [n_tok, n_head, head_dim] over the tokens of kv (rows as above; nullptr = rows 0..n_kv-1):
// acc f32 [n_tok, n_head, head_dim], st [n_tok, n_head]. Query token t sees keys j with
// j <= causal_p0 + t (clamped to [0, n_kv)), and with s.window > 0 (and a causal mask) only those
// with j > causal_p0 + t - s.window: causal_p0 = p0 for a chunk at positions p0.. over its
// prompt's own KV (key j at position j); no_causal_mask for KV of earlier positions (a segment of
// the tiered store). Keys [j0, j1) of the prompt's KV passed on their own take causal_p0 - j0,
// which may be negative (the chunk's first queries see none of them). Work items (a tile of 16
// query tokens, one KV head) are taken dynamically across the pool, longest first; each walks the
// keys in blocks (64 keys with the AVX2 kernel, where a token's query heads take a block together
// as in decode; 512 otherwise) that all its query rows consume before the next block (K/V read
// once per tile), with the same kernel chunks as one pass, so the result is that of
// attention_head_accumulate per (token, head) bit for bit (without a window: a windowed row's first
// chunk starts at its window).
void attention_prefill_accumulate(const attention_shape & s, const float * q, int64_t n_tok, const kv_view & kv,
                                  const int32_t * rows, int64_t causal_p0, float * acc, softmax_state * st,
                                  thread_pool & pool);
// A prompt's own keys split at multiples of this ([j0, j1) passed with causal_p0 - j0) give, calls
// together, the result of one attention_prefill_accumulate over all of them bit for bit: it is a
// multiple of both of its key blocks.
inline constexpr int64_t attention_key_split = 512;

// The attention logits of a decode query q f32 [n_head, head_dim] over n = keys.n_kv keys (keys.v is
// not read): out[h · ld + j] = scale · q_h·k_j (soft-capped when s.softcap > 0), key j row rows[j]
// (rows == nullptr: row j); ld >= n.
// The same f32 dot per (head, key) as attention_head_accumulate's per-head kernels in the active
// kernel_mode (not the fused AVX2 one, which keeps its scores on the stack): the attention weights a
// policy learns from (H2O's accumulated attention, policy h2o). Query heads split across the pool.
void attention_logits(const attention_shape & s, const float * q, const kv_view & keys, const int32_t * rows, float * out,
                      int64_t ld, thread_pool & pool);

// One query head against tokens [0, n) of its KV head, on the current thread, with the active
// kernel_mode: out[head_dim] = softmax(q·k_j·scale) · v_j. k, v point at the KV head's first
// element; consecutive tokens are `row_stride` elements apart. Keys are scored in chunks (scores
// on the stack): 32 in the scalar reference, 64 in the AVX2 kernel of head_dim % 8 == 0, which
// fuses scores, a polynomial e^x (relative error < 1e-7) and p·V (kernels_avx2.h); out itself is
// the running accumulator, rescaled when the running max grows, so no memory beyond out is used.
// n == 0 gives out = 0. Scores, exps and the accumulator are f32 (the running sum of exps is f64;
// the AVX2 kernel sums a chunk's exps in f32, then adds them to it); f16 K/V are widened on the
// fly, never accumulated in f16.
void attention_head(const float * q, ggml_type kv_type, const void * k, const void * v, int64_t n, int64_t row_stride,
                    int head_dim, float scale, float * out);

}  // namespace hill
