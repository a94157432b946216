// Architecture `llama` (also Mistral, LongChat, Llama 3): RMSNorm, RoPE, GQA, SwiGLU (Touvron et al.
// 2023). From GGUF, Q and K rows come in the adjacent-pair RoPE layout llama.cpp's converter
// permutes them into; from a Hugging Face folder they stay in transformers' rotate-half layout and
// RoPE rotates (i, i + head_dim/2) instead: no copy of the weights, the same scores.
//
// The forward pass of the whole llama family (llama, qwen2, qwen, qwen3, gemma2, gemma3, phi3;
// model/forward.h) is here too: the block is the same, Q/K/V biases (qwen2, qwen; llama checkpoints
// with attention_bias) and an output projection bias are applied when the model has them, as are
// the per-head Q/K norms (qwen3, gemma3), the post-attention and post-FFN norms, GeGLU, the
// embedding scale and final soft-capping (gemma); fused QKV (qwen, phi3) and gate/up (phi3)
// projections are already split into views of their rows at load.
#include "compute/ops.h"
#include "core/error.h"
#include "format/hf_checkpoint.h"
#include "model/forward.h"
#include "model/model_loader.h"

namespace hill {

void llama_hparams_gguf(const gguf_file & f, hparams & hp) {
    gguf_llama_like_hparams(f, "llama", hp);
    hp.rope_pairs = rope_layout::adjacent_pairs;
}

// LlamaConfig / MistralConfig (Mistral's sliding_window: every layer; hf_llama_like_hparams).
void llama_hparams_hf(const hf_checkpoint & c, hparams & hp) {
    hp.arch = "llama";
    hf_llama_like_hparams(c, hp);
    hp.rope_pairs = rope_layout::rotate_half;
}

void llama_weights(const tensor_source & src, model & m) {
    model_loader::llama_family_weights(src, m, llama_family_options{});
}

namespace {

// The pre-norm block with RoPE and GQA attention and a gated FFN (Touvron et al. 2023), with what
// the later families add where the model has it:
//   x = embedding · embd_scale                                         (gemma: sqrt(n_embd))
//   q, k = wq · RMSNorm(x) + bq, wk · … + bk; v = wv · … + bv
//   q, k = RMSNorm of each head (attn_q_norm, attn_k_norm: qwen3, gemma3), then RoPE (the layer's
//          frequencies: gemma3's local layers have their own base) times rope_attn_factor (LongRoPE)
//   a = wo · attention(q, k, v) + bo; a = RMSNorm(a) (attn_post_norm: gemma); x += a
//   f = down · (act(gate · RMSNorm(x)) * (up · RMSNorm(x))), act silu (SwiGLU) or gelu-tanh (GeGLU);
//   f = RMSNorm(f) (ffn_post_norm: gemma); x += f
//   logits = output · RMSNorm(x), then c·tanh(logits / c) (final_softcap: gemma)
// Attention itself (its scale, soft-capping and sliding window) is the engine's (engine/context.h).
class llama_forward final : public arch_forward {
public:
    llama_forward(const model & m, thread_pool & pool, int64_t n_rows_max, int64_t n_ctx)
        : m_(m),
          hp_(m.hp()),
          pool_(pool),
          n_rows_max_(n_rows_max),
          xn_(size_t(n_rows_max) * size_t(hp_.n_embd)),
          gate_(size_t(n_rows_max) * size_t(hp_.n_ff)),
          up_(size_t(n_rows_max) * size_t(hp_.n_ff)) {
        // What every llama-family loader (here, arch_qwen.cpp, arch_gemma.cpp, arch_phi3.cpp,
        // llama2c_file.cpp) gives the model.
        HILL_ASSERT(hp_.norm == norm_kind::rms && hp_.norm_before && hp_.ffn != ffn_kind::relu &&
                    hp_.position == position_kind::rope);
        HILL_ASSERT(m.proj_in().n_rows == 0 && m.proj_out().n_rows == 0 && !m.output_norm().empty());
        // One table of RoPE frequencies per distinct layer kind (global, sliding).
        for (int il = 0; il < hp_.n_layer; ++il) {
            std::vector<double> f = hp_.rope_inv_freq(il, n_ctx);
            size_t i = 0;
            while (i < inv_freq_.size() && inv_freq_[i] != f) ++i;
            if (i == inv_freq_.size()) inv_freq_.push_back(std::move(f));
            layer_freq_.push_back(i);
        }
    }

    // RoPE: positions enter at attention_input.
    void embed(const int32_t * tokens, const int32_t * /*pos*/, int64_t n, float * x) override {
        HILL_ASSERT(n <= n_rows_max_);
        const weight_view & e = m_.token_embd();
        for (int64_t t = 0; t < n; ++t) {
            float * row = x + t * hp_.n_embd;
            dequantize_row(e.type, e.row(tokens[t]), row, hp_.n_embd);
            if (hp_.embd_scale != 1.0f) {
                for (int64_t i = 0; i < hp_.n_embd; ++i) row[i] *= hp_.embd_scale;
            }
        }
    }

    void attention_input(int il, const float * x, const int32_t * pos, int64_t n, float * q, float * k,
                         float * v) override {
        HILL_ASSERT(n <= n_rows_max_);
        const layer_weights & l = m_.layers()[size_t(il)];
        const int64_t n_q = hp_.n_embd_q(), n_kv = hp_.n_embd_kv();
        rmsnorm_rows(l.attn_norm, hp_.rms_eps, x, n, xn_.data());
        const bool with_kv = k != nullptr;  // nullptr: the query only (speculative_query)
        HILL_ASSERT(with_kv == (v != nullptr));
        linear(l.wq, l.bq, xn_.data(), n, q, pool_);
        if (with_kv) {
            linear(l.wk, l.bk, xn_.data(), n, k, pool_);
            linear(l.wv, l.bv, xn_.data(), n, v, pool_);
        }
        // Per-head norms: rows of head_dim (rmsnorm_rows over n · heads rows).
        if (!l.attn_q_norm.empty()) rmsnorm_rows(l.attn_q_norm, hp_.rms_eps, q, n * hp_.n_head, q);
        if (with_kv && !l.attn_k_norm.empty()) rmsnorm_rows(l.attn_k_norm, hp_.rms_eps, k, n * hp_.n_head_kv, k);
        const double * inv_freq = inv_freq_[layer_freq_[size_t(il)]].data();
        for (int64_t t = 0; t < n; ++t) {
            rope(q + t * n_q, hp_.n_head, hp_.head_dim, pos[t], inv_freq, hp_.rope_pairs);
            if (with_kv) rope(k + t * n_kv, hp_.n_head_kv, hp_.head_dim, pos[t], inv_freq, hp_.rope_pairs);
        }
        if (hp_.rope_attn_factor != 1.0f) {
            for (int64_t i = 0; i < n * n_q; ++i) q[i] *= hp_.rope_attn_factor;
            for (int64_t i = 0; with_kv && i < n * n_kv; ++i) k[i] *= hp_.rope_attn_factor;
        }
    }

    void attention_output(int il, float * x, const float * attn, int64_t n) override {
        HILL_ASSERT(n <= n_rows_max_);
        const layer_weights & l = m_.layers()[size_t(il)];
        const int64_t n_embd = hp_.n_embd;
        linear(l.wo, l.bo, attn, n, xn_.data(), pool_);
        if (!l.attn_post_norm.empty()) rmsnorm_rows(l.attn_post_norm, hp_.rms_eps, xn_.data(), n, xn_.data());
        add_inplace(x, xn_.data(), n * n_embd);
        rmsnorm_rows(l.ffn_norm, hp_.rms_eps, x, n, xn_.data());
        gemm(l.ffn_gate, xn_.data(), n, gate_.data(), pool_);
        gemm(l.ffn_up, xn_.data(), n, up_.data(), pool_);
        if (hp_.ffn == ffn_kind::geglu) {
            geglu(gate_.data(), up_.data(), n * hp_.n_ff);
        } else {
            swiglu(gate_.data(), up_.data(), n * hp_.n_ff);
        }
        gemm(l.ffn_down, gate_.data(), n, xn_.data(), pool_);
        if (!l.ffn_post_norm.empty()) rmsnorm_rows(l.ffn_post_norm, hp_.rms_eps, xn_.data(), n, xn_.data());
        add_inplace(x, xn_.data(), n * n_embd);
    }

    void logits(const float * x, int64_t n, float * out) override {
        HILL_ASSERT(n <= n_rows_max_);
        rmsnorm_rows(m_.output_norm(), hp_.rms_eps, x, n, xn_.data());
        gemm(m_.output(), xn_.data(), n, out, pool_);
        if (hp_.final_softcap > 0.0f) softcap(out, n * hp_.n_vocab, hp_.final_softcap);
    }

private:
    const model & m_;
    const hparams & hp_;
    thread_pool & pool_;
    int64_t n_rows_max_;
    std::vector<std::vector<double>> inv_freq_;  // f64 [kinds][head_dim/2]: RoPE angle per position of each pair
    std::vector<size_t> layer_freq_;             // [n_layer]: layer il's table in inv_freq_
    std::vector<float> xn_;              // f32 [n_rows_max, n_embd]: normed input, then a projection's output
    std::vector<float> gate_;            // f32 [n_rows_max, n_ff]
    std::vector<float> up_;              // f32 [n_rows_max, n_ff]
};

}  // namespace

std::unique_ptr<arch_forward> make_llama_forward(const model & m, thread_pool & pool, int64_t n_rows_max,
                                                 int64_t n_ctx) {
    return std::make_unique<llama_forward>(m, pool, n_rows_max, n_ctx);
}

}  // namespace hill
