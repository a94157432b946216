// Architecture `llama` (also Mistral, LongChat, Llama 3): RMSNorm, RoPE, GQA, SwiGLU (Touvron et al.
// 2023). From GGUF, Q and K rows come in the adjacent-pair RoPE layout llama.cpp's converter
// permutes them into; from a Hugging Face folder they stay in transformers' rotate-half layout and
// RoPE rotates (i, i + head_dim/2) instead: no copy of the weights, the same scores.
#include "core/error.h"
#include "model/hf_checkpoint.h"
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

}  // namespace hill
