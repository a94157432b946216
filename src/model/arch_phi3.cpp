// Architecture `phi3` (Phi-3, Phi-3.5, Phi-4-mini with full rotary): the llama block with one fused
// QKV projection (qkv_proj: q rows, then k, then v; GGUF attn_qkv) and one fused gate/up projection
// (gate_up_proj [2 n_ff, n_embd]: gate rows first, as transformers' Phi3MLP chunks it; GGUF ffn_up
// of 2 n_ff rows and no ffn_gate), both used as views of their rows. Rotate-half RoPE (llama.cpp's
// NEOX type), with LongRoPE ("su", "longrope") scaling: short and long per-pair factors, the long
// ones for a context longer than the original one, and an attention factor on cos and sin
// (hf_llama_like_hparams; GGUF: rope_factors_short.weight / rope_factors_long.weight, f32
// [head_dim/2], phi3.rope.scaling.attn_factor, phi3.rope.scaling.original_context_length, as
// llama.cpp's converter writes them). A declared sliding_window (Phi-3-mini-4k: 2047) applies to
// every layer, as in transformers (llama.cpp currently ignores it).
#include "core/error.h"
#include "format/hf_checkpoint.h"
#include "model/model_loader.h"

namespace hill {

void phi3_hparams_gguf(const gguf_file & f, hparams & hp) {
    gguf_llama_like_hparams(f, "phi3", hp);
    hp.rope_pairs = rope_layout::rotate_half;
    if (const std::optional<float> af = gguf_optional_positive(f, "phi3.rope.scaling.attn_factor")) {
        hp.rope_attn_factor = *af;
    }
    if (f.get_int("phi3.rope.scaling.original_context_length")) {
        hp.n_ctx_orig = gguf_required_int(f, "phi3.rope.scaling.original_context_length", 1, int64_t(1) << 30);
    }
}

// Phi3Config: LlamaConfig's keys, original_max_position_embeddings, rope_scaling (null, or longrope
// / su), partial_rotary_factor 1.0 only, sliding_window.
void phi3_hparams_hf(const hf_checkpoint & c, hparams & hp) {
    hp.arch = "phi3";
    hf_llama_like_hparams(c, hp);
    if (const std::optional<double> pr = c.config().optional<double>("/partial_rotary_factor"); pr && *pr != 1.0) {
        fail_input("'{}': partial_rotary_factor is {}; supported: 1.0 (RoPE on the whole head)", c.config_path(), *pr);
    }
    hp.rope_pairs = rope_layout::rotate_half;
}

void phi3_weights(const tensor_source & src, model & m) {
    model_loader::llama_family_weights(src, m, llama_family_options{.fused_qkv = true, .fused_gate_up = true});
}

}  // namespace hill
