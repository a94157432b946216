// The forward pass of one architecture around attention (which the engine runs over the KV tiers):
// embeddings, each block's input to attention (norm, Q/K/V projections with biases, RoPE) and its
// output (output projection, residual, FFN), and the final logits. Rows are tokens, each at its own
// position, so one call can carry a prompt chunk (consecutive positions) or a decode batch (one row
// per sequence, unrelated positions). Every row's result is computed the same way whatever the
// other rows (batch invariance: relies on compute/matmul's gemm contract for small n).
//
// Implementations, one per architecture family, in its own file:
//   llama, qwen2, qwen, model/arch_llama.cpp (RMSNorm, RoPE, SwiGLU or GeGLU, optional biases, Q/K
//   qwen3, gemma2,                           head norms, post-attention / post-FFN norms, embedding
//   gemma3, phi3                             scale, final soft-capping)
//   opt                 model/arch_opt.cpp   (learned positions, LayerNorm pre/post, ReLU MLP, biases,
//                                             proj_in / proj_out)
// make_forward (model/forward.cpp) picks one by hparams::arch: the place to add an architecture.
#pragma once

#include "compute/matmul.h"
#include "core/thread_pool.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace hill {

class model;

class arch_forward {
public:
    virtual ~arch_forward() = default;
    // x f32 [n, n_embd] = input embeddings of tokens[i] at positions pos[i] (n <= n_rows_max).
    virtual void embed(const int32_t * tokens, const int32_t * pos, int64_t n, float * x) = 0;
    // From the residual stream x f32 [n, n_embd] entering block il: q f32 [n, n_head * head_dim],
    // k, v f32 [n, n_head_kv * head_dim], with biases and RoPE at pos[i] where the model has them.
    // k and v both nullptr: the query only.
    virtual void attention_input(int il, const float * x, const int32_t * pos, int64_t n, float * q, float * k,
                                 float * v) = 0;
    // The query of block il estimated from x f32 [n, n_embd], the residual stream entering block il − 1
    // (InfiniGen's speculation, policy/infinigen.cpp): q f32 [n, n_head * head_dim]. The models compute
    // block il's query input (norm, W_q, bias, RoPE at pos[i]) from that stream; a synthetic forward may
    // stand in otherwise (experiments/step_bench.h).
    virtual void speculative_query(int il, const float * x, const int32_t * pos, int64_t n, float * q) {
        attention_input(il, x, pos, n, q, nullptr, nullptr);
    }
    // Block il after attention, in place: x += output projection of attn f32 [n, n_head * head_dim],
    // then the FFN block (post-norm models norm each sum).
    virtual void attention_output(int il, float * x, const float * attn, int64_t n) = 0;
    // logits f32 [n, n_vocab] from x f32 [n, n_embd]: final norm (if any), output projection.
    virtual void logits(const float * x, int64_t n, float * out) = 0;
    // Whether attention_input's keys are the model's, positioned as its hparams say (RoPE: rope_pairs,
    // rope_inv_freq); false for a synthetic forward whose keys they do not describe (experiments/step_bench.h).
    virtual bool keys_from_model() const { return true; }
};

// The forward pass of m's architecture; scratch for up to n_rows_max rows per call is allocated here, once.
// Calls run their matrix products on `pool`. `m` and `pool` must outlive the result. n_ctx: the
// context it serves (tokens; LongRoPE picks its factors by it, hparams::rope_inv_freq; 0: short).
std::unique_ptr<arch_forward> make_forward(const model & m, thread_pool & pool, int64_t n_rows_max, int64_t n_ctx = 0);

// --- What the implementations share (model/forward.cpp) ---

// y f32 [n, w.size()] = RMSNorm of each row of x f32 [n, w.size()], times w; y may alias x.
void rmsnorm_rows(const std::vector<float> & w, float eps, const float * x, int64_t n, float * y);
// y f32 [n, w.size()] = LayerNorm of each row of x, times w, plus b; y may alias x.
void layernorm_rows(const std::vector<float> & w, const std::vector<float> & b, float eps, const float * x, int64_t n,
                    float * y);
// y f32 [n, w.n_rows] = x f32 [n, w.n_cols] · wᵀ (compute/matmul.h gemm), + b f32 [w.n_rows] when not empty.
void linear(const weight_view & w, const std::vector<float> & b, const float * x, int64_t n, float * y,
            thread_pool & pool);

// The implementations make_forward chooses from.
std::unique_ptr<arch_forward> make_llama_forward(const model & m, thread_pool & pool, int64_t n_rows_max,
                                                 int64_t n_ctx);
std::unique_ptr<arch_forward> make_opt_forward(const model & m, thread_pool & pool, int64_t n_rows_max);

}  // namespace hill
