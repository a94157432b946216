// The Gemma family from Gemma 2 on: `gemma2` and `gemma3` (Gemma 3's text model, model_type
// gemma3_text). The llama block (arch_llama.cpp's forward pass) with:
//   - token embeddings multiplied by sqrt(n_embd);
//   - GeGLU: down · (gelu_tanh(gate · x) * (up · x));
//   - RMSNorms that scale by (1 + w): transformers stores w, llama.cpp's converter writes 1 + w (so a
//     GGUF file's norms are used as stored; a folder's get 1 added at load: llama_family_options);
//   - an RMSNorm on the attention output and on the FFN output before each residual sum
//     (post_attention_layernorm / post_feedforward_layernorm; GGUF post_attention_norm /
//     post_ffw_norm), the pre-FFN norm being pre_feedforward_layernorm (GGUF ffn_norm);
//   - attention scaled by query_pre_attn_scalar^-1/2 rather than head_dim^-1/2;
//   - sliding-window layers: gemma2 every other one (even layers slide), gemma3 five of six (il % 6
//     == 5 is global), with RoPE base rope_local_base_freq (10000, unscaled) on gemma3's;
//   - gemma2: attention logits soft-capped (attn_logit_softcapping, 50) and final logits
//     (final_logit_softcapping, 30): x -> c·tanh(x/c);
//   - gemma3: per-head RMSNorms of Q and K before RoPE (q_norm / k_norm; GGUF attn_q_norm /
//     attn_k_norm), optional final soft-capping, linear RoPE scaling of the global layers.
// Both use rotate-half RoPE (llama.cpp's NEOX type: no Q/K permutation in GGUF).
//
// GGUF metadata as llama.cpp reads it (src/llama-model.cpp): {arch}.attention.sliding_window
// (required for gemma2; gemma3 without it has no sliding layers), gemma2.attn_logit_softcapping and
// final_logit_softcapping (defaults 50 and 30), gemma3.final_logit_softcapping (optional),
// gemma3.rope.freq_base_swa (default 10000). The files carry no query scale: llama.cpp uses
// 1/sqrt(head_dim), and 1/sqrt(n_embd / n_head) for the 27B models (46 layers for gemma2, 62 for
// gemma3), whose query_pre_attn_scalar is n_embd / n_head; so does HillInfer, unless
// {arch}.attention.scale is given.
#include "core/error.h"
#include "format/hf_checkpoint.h"
#include "model/model_loader.h"

#include <cmath>

namespace hill {

namespace {

// What both Gemma readers set after the llama-like keys.
void gemma_common(hparams & hp) {
    hp.ffn = ffn_kind::geglu;
    hp.rope_pairs = rope_layout::rotate_half;
    hp.embd_scale = std::sqrt(float(hp.n_embd));
}

void gemma_hparams_gguf(const gguf_file & f, const std::string & arch, int pattern, int n_layer_27b, hparams & hp) {
    gguf_llama_like_hparams(f, arch, hp);
    gemma_common(hp);
    const std::string a = arch + ".";
    if (hp.n_swa > 0) hp.set_swa(hp.n_swa, pattern);
    if (const std::optional<float> scale = gguf_optional_positive(f, a + "attention.scale")) {
        hp.attn_scale = *scale;
    } else if (hp.n_layer == n_layer_27b) {
        hp.attn_scale = 1.0f / std::sqrt(float(hp.n_embd / hp.n_head));
    }
}

void gemma_hparams_hf(const hf_checkpoint & c, const std::string & arch, int pattern, hparams & hp) {
    const std::string cfg = c.config_path();
    const json_value config = c.config();
    hp.arch = arch;
    hp.ffn = ffn_kind::geglu;  // first: hf_llama_like_hparams checks the activation against it
    hf_llama_like_hparams(c, hp);  // the window of every layer (or layer_types), rope_scaling
    gemma_common(hp);
    if (config.optional<bool>("/attention_bias").value_or(false)) {
        fail_input("'{}': attention_bias is true; supported: false", cfg);
    }
    // Without layer_types: the family's pattern (Gemma 3's configs name it sliding_window_pattern).
    if (hp.n_swa > 0 && !config.find("/layer_types")) {
        hp.set_swa(hp.n_swa, int(config.optional_int("/sliding_window_pattern", 1, 4096).value_or(pattern)));
    }
    const double qpas = double(config.required_int("/query_pre_attn_scalar", 1, 1 << 20));
    hp.attn_scale = float(1.0 / std::sqrt(qpas));
    const auto cap = [&](const char * key) {
        const std::optional<double> v = config.optional<double>(key);
        if (v && !(*v > 0.0)) fail_input("'{}': {} is {}, expected > 0 or null", cfg, key + 1, *v);
        return v ? float(*v) : 0.0f;
    };
    hp.attn_softcap = cap("/attn_logit_softcapping");
    hp.final_softcap = cap("/final_logit_softcapping");
}

}  // namespace

void gemma2_hparams_gguf(const gguf_file & f, hparams & hp) {
    gemma_hparams_gguf(f, "gemma2", 2, 46, hp);
    if (hp.n_swa == 0) fail_input("'{}': metadata key 'gemma2.attention.sliding_window' is missing or 0", f.name());
    hp.attn_softcap = gguf_optional_positive(f, "gemma2.attn_logit_softcapping").value_or(50.0f);
    hp.final_softcap = gguf_optional_positive(f, "gemma2.final_logit_softcapping").value_or(30.0f);
}

// Gemma2Config: LlamaConfig's keys with hidden_activation gelu_pytorch_tanh, head_dim,
// query_pre_attn_scalar, sliding_window, attn_logit_softcapping, final_logit_softcapping.
void gemma2_hparams_hf(const hf_checkpoint & c, hparams & hp) { gemma_hparams_hf(c, "gemma2", 2, hp); }

void gemma3_hparams_gguf(const gguf_file & f, hparams & hp) {
    gemma_hparams_gguf(f, "gemma3", 6, 62, hp);
    hp.rope_freq_base_swa = gguf_optional_positive(f, "gemma3.rope.freq_base_swa").value_or(10000.0f);
    hp.final_softcap = gguf_optional_positive(f, "gemma3.final_logit_softcapping").value_or(0.0f);
}

// Gemma3TextConfig: Gemma2Config's keys (soft-capping usually null), rope_local_base_freq,
// sliding_window_pattern (6) or layer_types.
void gemma3_hparams_hf(const hf_checkpoint & c, hparams & hp) {
    gemma_hparams_hf(c, "gemma3", 6, hp);
    if (hp.attn_softcap != 0.0f) {
        fail_input("'{}': attn_logit_softcapping is {}; Gemma 3 has none (null)", c.config_path(), hp.attn_softcap);
    }
    hp.rope_freq_base_swa = float(c.config().optional<double>("/rope_local_base_freq").value_or(10000.0));
    if (!(hp.rope_freq_base_swa > 0.0f)) {
        fail_input("'{}': rope_local_base_freq is {}, expected > 0", c.config_path(), hp.rope_freq_base_swa);
    }
}

void gemma_weights(const tensor_source & src, model & m) {
    model_loader::llama_family_weights(src, m, llama_family_options{.qk_norm = m.hp().arch == "gemma3",
                                                                    .post_norms = true,
                                                                    .norm_plus_one = true});
}

}  // namespace hill
