// One sequence being run through a model: its KV cache (all in RAM for now), the activation
// buffers, and the forward pass of the Llama block (RMSNorm -> attention with RoPE and GQA ->
// residual -> RMSNorm -> SwiGLU FFN -> residual; Touvron et al. 2023).
//
// Buffers are allocated once in the constructor; eval() does not allocate.
#pragma once

#include "core/thread_pool.h"
#include "model/model.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace hill {

struct session_params {
    int32_t n_ctx = 0;                  // KV capacity in tokens (> 0)
    ggml_type kv_type = ggml_type::f16; // f16 or f32
    int32_t n_batch = 256;              // prompt tokens per forward chunk (activation memory)
};

class session {
public:
    // Errors: n_ctx <= 0 or kv_type not f16/f32 (exit_code::usage); KV allocation failure.
    session(const model & m, const session_params & p, thread_pool & pool);

    // Runs `tokens` at positions [n_past(), n_past() + n) and appends their K/V. When
    // logits_all, logits() holds f32 [n, n_vocab] (one row per token); otherwise f32 [n_vocab]
    // for the last token. `progress(done, total)` is called after each chunk of the prompt.
    // Errors: n_past() + n > n_ctx (exit_code::usage, naming both), a token id out of range.
    void eval(std::span<const int32_t> tokens, bool logits_all = false,
              const std::function<void(int64_t, int64_t)> & progress = {});

    const float * logits() const { return logits_.data(); }
    int64_t n_past() const { return n_past_; }
    int32_t n_ctx() const { return params_.n_ctx; }
    // Forgets tokens from position n on (n <= n_past()).
    void truncate(int64_t n);

private:
    void forward_chunk(const int32_t * tokens, int64_t n, bool logits_all, float * logits_out);

    const model & model_;
    session_params params_;
    thread_pool & pool_;
    int64_t n_past_ = 0;

    size_t kv_layer_bytes_ = 0;                // bytes of K (or V) for one layer: n_ctx * n_embd_kv * elem
    std::unique_ptr<uint8_t[]> k_cache_;       // kv_type [n_layer, n_ctx, n_head_kv, head_dim]
    std::unique_ptr<uint8_t[]> v_cache_;       // kv_type [n_layer, n_ctx, n_head_kv, head_dim]

    // Activations for up to n_batch tokens.
    std::vector<float> x_;       // f32 [n_batch, n_embd] residual stream
    std::vector<float> xn_;      // f32 [n_batch, n_embd] normed input
    std::vector<float> q_;       // f32 [n_batch, n_head * head_dim]
    std::vector<float> k_;       // f32 [n_batch, n_head_kv * head_dim]
    std::vector<float> v_;       // f32 [n_batch, n_head_kv * head_dim]
    std::vector<float> attn_;    // f32 [n_batch, n_head * head_dim]
    std::vector<float> gate_;    // f32 [n_batch, n_ff]
    std::vector<float> up_;      // f32 [n_batch, n_ff]
    std::vector<float> logits_;  // f32 [n_batch or 1, n_vocab] (eval() with logits_all resizes it once)
};

}  // namespace hill
