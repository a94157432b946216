// The Qwen family: `qwen2` (Qwen1.5, Qwen2, Qwen2.5: llama with Q/K/V biases), `qwen3` (Qwen3: llama
// without biases, with an RMSNorm over each head of Q and of K before RoPE, weights f32 [head_dim]
// shared by the heads: q_norm / k_norm, GGUF attn_q_norm / attn_k_norm) and `qwen` (Qwen-1: the same
// block with one fused QKV projection with bias, MHA). All rotate-half RoPE, in GGUF too (llama.cpp's
// NEOX type: its converter does not permute their Q/K rows).
//
// Qwen-1 specifics: its MLP is c_proj(w1(x) * silu(w2(x))), so w2 is the gate and w1 the up
// projection (hf_names.h); config.json's intermediate_size, and GGUF's qwen.feed_forward_length as
// llama.cpp writes it, are twice the width of each of them. Its dynamic NTK RoPE and log-n
// attention scaling act only beyond `seq_length` tokens and are not applied (docs/models.md).
//
// Forward pass: the llama family's (arch_llama.cpp), biases included.
#include "core/error.h"
#include "format/hf_checkpoint.h"
#include "model/model_loader.h"

namespace hill {

void qwen2_hparams_gguf(const gguf_file & f, hparams & hp) {
    gguf_llama_like_hparams(f, "qwen2", hp);
    hp.rope_pairs = rope_layout::rotate_half;
}

// Qwen2Config: LlamaConfig's keys; with use_sliding_window, the layers from max_window_layers on
// attend to a window of sliding_window tokens (hf_sliding_window).
void qwen2_hparams_hf(const hf_checkpoint & c, hparams & hp) {
    hp.arch = "qwen2";
    hf_llama_like_hparams(c, hp);
    hp.rope_pairs = rope_layout::rotate_half;
}

void qwen2_weights(const tensor_source & src, model & m) {
    model_loader::llama_family_weights(src, m, llama_family_options{.qkv_bias = true});
}

void qwen3_hparams_gguf(const gguf_file & f, hparams & hp) {
    gguf_llama_like_hparams(f, "qwen3", hp);
    hp.rope_pairs = rope_layout::rotate_half;
}

// Qwen3Config: Qwen2Config's keys, head_dim given (128 in the released models); attention_bias
// false only.
void qwen3_hparams_hf(const hf_checkpoint & c, hparams & hp) {
    hp.arch = "qwen3";
    hf_llama_like_hparams(c, hp);
    if (c.config().optional<bool>("/attention_bias").value_or(false)) {
        fail_input("'{}': attention_bias is true; supported: false (Qwen3 has no Q/K/V biases)", c.config_path());
    }
    hp.rope_pairs = rope_layout::rotate_half;
}

void qwen3_weights(const tensor_source & src, model & m) {
    model_loader::llama_family_weights(src, m, llama_family_options{.qk_norm = true});
}

void qwen_hparams_gguf(const gguf_file & f, hparams & hp) {
    gguf_llama_like_hparams(f, "qwen", hp);
    if (hp.n_ff % 2 != 0) {
        fail_input("'{}': qwen.feed_forward_length {} is odd; it holds twice the width of the w1/w2 projections",
                   f.name(), hp.n_ff);
    }
    hp.n_ff /= 2;
    hp.rope_pairs = rope_layout::rotate_half;
}

// QWenConfig (the checkpoint's own configuration_qwen.py): hidden_size, intermediate_size (2 ×
// n_ff), num_hidden_layers, num_attention_heads, kv_channels, layer_norm_epsilon, rotary_emb_base,
// rotary_pct (1.0 only), seq_length (trained context), vocab_size, no_bias (true only).
void qwen_hparams_hf(const hf_checkpoint & c, hparams & hp) {
    const std::string cfg = c.config_path();
    const json_value config = c.config();
    hp.arch = "qwen";
    hp.n_vocab = config.required_int("/vocab_size", 1, INT32_MAX);
    hp.n_embd = config.required_int("/hidden_size", 1, 1 << 20);
    const int32_t inter = config.required_int("/intermediate_size", 2, 1 << 23);
    if (inter % 2 != 0) fail_input("'{}': intermediate_size {} is odd; Qwen-1's is twice the w1/w2 width", cfg, inter);
    hp.n_ff = inter / 2;
    hf_layer_hparams(c, hp);
    if (auto kvc = config.optional<int64_t>("/kv_channels"); kvc && *kvc != hp.head_dim) {
        fail_input("'{}': kv_channels is {}; supported: hidden_size / num_attention_heads = {}", cfg, *kvc,
                   hp.head_dim);
    }
    if (auto pct = config.optional<double>("/rotary_pct"); pct && *pct != 1.0) {
        fail_input("'{}': rotary_pct is {}; supported: 1.0 (RoPE on the whole head)", cfg, *pct);
    }
    if (!config.optional<bool>("/no_bias").value_or(true)) {
        fail_input("'{}': no_bias is false; supported: true (biases on c_attn only)", cfg);
    }
    std::optional<int64_t> ctx = config.optional<int64_t>("/seq_length");
    if (!ctx) ctx = config.optional<int64_t>("/max_position_embeddings");
    hp.n_ctx_train = ctx ? int32_t(std::clamp<int64_t>(*ctx, 1, int64_t(1) << 30)) : 2048;
    hp.rms_eps = float(config.optional<double>("/layer_norm_epsilon").value_or(1e-6));
    hp.rope_freq_base = float(config.optional<double>("/rotary_emb_base").value_or(10000.0));
    hp.rope_pairs = rope_layout::rotate_half;
}

void qwen_weights(const tensor_source & src, model & m) {
    model_loader::llama_family_weights(src, m, llama_family_options{.qkv_bias = true, .fused_qkv = true});
}

}  // namespace hill
