// Architecture `llama` (also Mistral, LongChat, Llama 3): RMSNorm, RoPE, GQA, SwiGLU (Touvron et al.
// 2023). From GGUF, Q and K rows come in the adjacent-pair RoPE layout llama.cpp's converter
// permutes them into; from a Hugging Face folder they stay in transformers' rotate-half layout and
// RoPE rotates (i, i + head_dim/2) instead: no copy of the weights, the same scores.
//
// The forward pass of the whole llama family (llama, qwen2, qwen; model/forward.h) is here too: the
// block is the same, Q/K/V biases (qwen2, qwen; llama checkpoints with attention_bias) and an
// output projection bias are applied when the model has them, and qwen's fused QKV projection is
// already split into views of its q, k and v rows at load.
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

// LlamaConfig / MistralConfig. Mistral's sliding_window is not applied: attention spans the whole
// context (exact up to the window; docs/models.md).
void llama_hparams_hf(const hf_checkpoint & c, hparams & hp) {
    hp.arch = "llama";
    hf_llama_like_hparams(c, hp);
    hp.rope_pairs = rope_layout::rotate_half;
}

void llama_weights(const tensor_source & src, model & m) {
    model_loader::llama_family_weights(src, m, /*qkv_bias=*/false, /*fused_qkv=*/false);
}

namespace {

// The pre-norm block with RoPE and GQA attention and a SwiGLU FFN (Touvron et al. 2023):
//   x += wo · attention(RoPE(wq · RMSNorm(x) + bq), RoPE(wk · … + bk), wv · … + bv) + bo
//   x += down · (silu(gate · RMSNorm(x)) * (up · RMSNorm(x)))
//   logits = output · RMSNorm(x)
class llama_forward final : public arch_forward {
public:
    llama_forward(const model & m, thread_pool & pool, int64_t n_rows_max)
        : m_(m),
          hp_(m.hp()),
          pool_(pool),
          n_rows_max_(n_rows_max),
          rope_inv_freq_(hp_.rope_inv_freq()),
          xn_(size_t(n_rows_max) * size_t(hp_.n_embd)),
          gate_(size_t(n_rows_max) * size_t(hp_.n_ff)),
          up_(size_t(n_rows_max) * size_t(hp_.n_ff)) {
        // What every llama-family loader (here, arch_qwen.cpp, llama2c_file.cpp) gives the model.
        HILL_ASSERT(hp_.norm == norm_kind::rms && hp_.norm_before && hp_.ffn == ffn_kind::swiglu &&
                    hp_.position == position_kind::rope);
        HILL_ASSERT(m.proj_in().n_rows == 0 && m.proj_out().n_rows == 0 && !m.output_norm().empty());
    }

    // RoPE: positions enter at attention_input.
    void embed(const int32_t * tokens, const int32_t * /*pos*/, int64_t n, float * x) override {
        HILL_ASSERT(n <= n_rows_max_);
        const weight_view & e = m_.token_embd();
        for (int64_t t = 0; t < n; ++t) dequantize_row(e.type, e.row(tokens[t]), x + t * hp_.n_embd, hp_.n_embd);
    }

    void attention_input(int il, const float * x, const int32_t * pos, int64_t n, float * q, float * k,
                         float * v) override {
        HILL_ASSERT(n <= n_rows_max_);
        const layer_weights & l = m_.layers()[size_t(il)];
        const int64_t n_q = hp_.n_embd_q(), n_kv = hp_.n_embd_kv();
        rmsnorm_rows(l.attn_norm, hp_.rms_eps, x, n, xn_.data());
        linear(l.wq, l.bq, xn_.data(), n, q, pool_);
        linear(l.wk, l.bk, xn_.data(), n, k, pool_);
        linear(l.wv, l.bv, xn_.data(), n, v, pool_);
        for (int64_t t = 0; t < n; ++t) {
            rope(q + t * n_q, hp_.n_head, hp_.head_dim, pos[t], rope_inv_freq_.data(), hp_.rope_pairs);
            rope(k + t * n_kv, hp_.n_head_kv, hp_.head_dim, pos[t], rope_inv_freq_.data(), hp_.rope_pairs);
        }
    }

    void attention_output(int il, float * x, const float * attn, int64_t n) override {
        HILL_ASSERT(n <= n_rows_max_);
        const layer_weights & l = m_.layers()[size_t(il)];
        const int64_t n_embd = hp_.n_embd;
        linear(l.wo, l.bo, attn, n, xn_.data(), pool_);
        add_inplace(x, xn_.data(), n * n_embd);
        rmsnorm_rows(l.ffn_norm, hp_.rms_eps, x, n, xn_.data());
        gemm(l.ffn_gate, xn_.data(), n, gate_.data(), pool_);
        gemm(l.ffn_up, xn_.data(), n, up_.data(), pool_);
        swiglu(gate_.data(), up_.data(), n * hp_.n_ff);
        gemm(l.ffn_down, gate_.data(), n, xn_.data(), pool_);
        add_inplace(x, xn_.data(), n * n_embd);
    }

    void logits(const float * x, int64_t n, float * out) override {
        HILL_ASSERT(n <= n_rows_max_);
        rmsnorm_rows(m_.output_norm(), hp_.rms_eps, x, n, xn_.data());
        gemm(m_.output(), xn_.data(), n, out, pool_);
    }

private:
    const model & m_;
    const hparams & hp_;
    thread_pool & pool_;
    int64_t n_rows_max_;
    std::vector<double> rope_inv_freq_;  // f64 [head_dim/2]: RoPE angle per position of each pair
    std::vector<float> xn_;              // f32 [n_rows_max, n_embd]: normed input, then a projection's output
    std::vector<float> gate_;            // f32 [n_rows_max, n_ff]
    std::vector<float> up_;              // f32 [n_rows_max, n_ff]
};

}  // namespace

std::unique_ptr<arch_forward> make_llama_forward(const model & m, thread_pool & pool, int64_t n_rows_max) {
    return std::make_unique<llama_forward>(m, pool, n_rows_max);
}

}  // namespace hill
