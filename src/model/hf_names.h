// Hugging Face checkpoint -> GGUF: architecture names, tensor names and the q/k row permutation.
//
// THE ONE PLACE for this mapping. Both the HF-folder loader (model::load on a checkpoint folder:
// src/model/hf_model.cpp and the per-architecture loaders) and `hillinfer convert`
// (src/model/hf_convert.cpp) go through these functions, so that a folder and the GGUF converted
// from it load the same weights under the same names. Loaders: ask hf_gguf_tensor_name() for every
// HF tensor (or hf_tensor_map() for the whole checkpoint) and look weights up by their GGUF name.
//
// Who permutes: only `convert`. The tensors hf_tensor_permutation() marks (llama q_proj / k_proj)
// are in rotate-half order; convert permutes them with permute_rotate_half_to_pairs() before
// writing, because a GGUF `llama` file holds adjacent pairs. The folder loader ignores the mark: it
// uses the tensors as stored and sets hparams::rope_pairs = rope_layout::rotate_half, so RoPE
// rotates (i, i + head_dim/2) — no copy of the weights, the same attention scores.
//
// Names follow llama.cpp's GGUF conventions (gguf-py tensor_mapping / constants):
//   token_embd, position_embd, output_norm, output, rope_freqs;
//   blk.{il}.attn_norm, attn_q, attn_k, attn_v, attn_qkv, attn_output, ffn_norm, ffn_gate, ffn_up,
//   ffn_down; suffix ".weight" / ".bias" kept from the HF name.
//
// Architectures (GGUF `general.architecture`) and the HF names they map from:
//   llama (LlamaForCausalLM, MistralForCausalLM; LongChat and Llama-3 are llama):
//     model.embed_tokens -> token_embd, model.norm -> output_norm, lm_head -> output,
//     model.layers.N.input_layernorm -> blk.N.attn_norm, self_attn.{q,k,v}_proj -> attn_{q,k,v},
//     self_attn.o_proj -> attn_output, post_attention_layernorm -> ffn_norm,
//     mlp.gate_proj -> ffn_gate, mlp.up_proj -> ffn_up, mlp.down_proj -> ffn_down.
//     q_proj / k_proj are marked for the row permutation (see below; applied by convert only).
//   qwen2 (Qwen2ForCausalLM): the llama names, plus the
//     q/k/v biases (.bias). No permutation: llama.cpp runs qwen2 with NEOX (rotate-half) RoPE.
//   qwen (QWenLMHeadModel, Qwen-1): transformer.wte -> token_embd, transformer.ln_f -> output_norm,
//     lm_head -> output, transformer.h.N.ln_1 -> attn_norm, attn.c_attn -> attn_qkv (fused q,k,v
//     rows, with bias), attn.c_proj -> attn_output, ln_2 -> ffn_norm, mlp.w1 -> ffn_up,
//     mlp.w2 -> ffn_gate (Qwen-1 computes w1(x) * silu(w2(x))), mlp.c_proj -> ffn_down. NEOX RoPE,
//     no permutation.
//   opt (OPTForCausalLM): [model.]decoder.embed_tokens -> token_embd, decoder.embed_positions ->
//     position_embd (rows include OPT's offset of 2), decoder.final_layer_norm -> output_norm,
//     decoder.project_in -> token_embd_proj, decoder.project_out -> output_proj (only when
//     word_embed_proj_dim != hidden_size, e.g. opt-350m), lm_head -> output,
//     decoder.layers.N.self_attn_layer_norm -> attn_norm, self_attn.{q,k,v}_proj -> attn_{q,k,v},
//     self_attn.out_proj -> attn_output, final_layer_norm -> ffn_norm, fc1 -> ffn_up,
//     fc2 -> ffn_down. llama.cpp has no OPT architecture; "opt", token_embd_proj and output_proj
//     are HillInfer's names, chosen in the same style.
// Tensors that carry no weights (e.g. self_attn.rotary_emb.inv_freq, attn.masked_bias) map to
// nullopt with hf_tensor_ignored() true; a name that is neither mapped nor ignored is an error for
// the caller to report (hf_tensor_map() does).
//
// The q/k permutation (llama only; `convert` applies it, the folder loader does not). HF's Llama
// stores q_proj and k_proj for rotate-half RoPE: in each head of head_dim rows, row i pairs with
// row i + head_dim/2. GGUF (and Meta's original checkpoints) store adjacent pairs: rows 2j and
// 2j+1 form pair j. GGUF row 2j + r (r in {0, 1}) of a head is HF row r * head_dim/2 + j of the
// same head. q uses n_head heads, k n_head_kv heads; the permutation is applied to rows (the
// outermost dimension), so it works on any element type and on bias vectors (one element per row).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hill {

class hf_checkpoint;

// GGUF architecture name for an HF config: from "model_type" ("llama", "mistral", "qwen2",
// "qwen", "opt"), else from "architectures"[0] (LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM, QWenLMHeadModel, OPTForCausalLM). Errors: hill::error(bad_input) naming
// config.json, the field, its value and the supported values.
std::string hf_architecture(const hf_checkpoint & ckpt);
// The values accepted above, for messages and docs.
std::string_view hf_supported_architectures();

// GGUF tensor name of an HF tensor for GGUF architecture `arch`; nullopt when the name is not
// part of that architecture (or is ignored: see hf_tensor_ignored).
std::optional<std::string> hf_gguf_tensor_name(std::string_view arch, std::string_view hf_name);
// The inverse: the Hugging Face name (with the "model."-style prefix the rules use) that maps to
// `gguf_name` under `arch`, or nullopt (a GGUF-only tensor such as rope_freqs.weight). For messages
// about a tensor the checkpoint lacks.
std::optional<std::string> hf_tensor_name_of(std::string_view arch, std::string_view gguf_name);
// True for tensors that hold no weights and are dropped (rotary inv_freq buffers, masks).
bool hf_tensor_ignored(std::string_view arch, std::string_view hf_name);

// Which row permutation an HF tensor needs to be written as its GGUF counterpart (convert); the
// folder loader uses the tensor as stored with rotate-half RoPE instead.
enum class hf_permutation { none, q, k };  // q: over n_head heads; k: over n_head_kv heads
hf_permutation hf_tensor_permutation(std::string_view arch, std::string_view hf_name);

// One tensor of the checkpoint with its GGUF name.
struct hf_tensor_mapping {
    std::string hf_name;
    std::string gguf_name;
    hf_permutation permutation = hf_permutation::none;
};
// Every weight tensor of `ckpt` mapped for `arch`, in GGUF order (token_embd, position_embd, ...
// then blk.0.*, blk.1.*, ... by layer, then output_norm, output). Errors: hill::error(bad_input)
// naming the checkpoint, the tensor and the architecture for a tensor that is neither mapped nor
// ignored; two HF tensors that map to one GGUF name.
std::vector<hf_tensor_mapping> hf_tensor_map(const hf_checkpoint & ckpt, const std::string & arch);

// HF row of GGUF row `row` (0 <= row < n_head * head_dim, head_dim even; asserted).
int64_t rotate_half_source_row(int64_t row, int64_t head_dim);

// dst row r = src row rotate_half_source_row(r, head_dim), for n_rows = n_head * head_dim rows
// of row_bytes bytes each (a weight matrix [n_rows, n_cols]: row_bytes = n_cols * element size; a
// bias [n_rows]: row_bytes = element size). src and dst must not overlap (asserted).
// Errors (asserted, programmer errors): n_rows not a multiple of n_head, odd head_dim.
void permute_rotate_half_to_pairs(const void * src, void * dst, int64_t n_rows, size_t row_bytes, int64_t n_head);
// The inverse (GGUF adjacent pairs -> HF rotate-half), for tests and for writing HF checkpoints.
void permute_pairs_to_rotate_half(const void * src, void * dst, int64_t n_rows, size_t row_bytes, int64_t n_head);

// Llama-3 `rope_scaling` {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
// "original_max_position_embeddings"}: per-frequency divisors f32 [head_dim / 2], stored in GGUF as
// `rope_freqs.weight` (llama.cpp's convention): the RoPE angle of pair i at position p is
// p * theta_i / factors[i] with theta_i = rope_theta^(-2i / head_dim). Source: the Llama 3.1
// reference (apply_scaling): wavelength 2π/θ below original/high_freq_factor: factor 1; above
// original/low_freq_factor: `factor`; between: smooth interpolation
// s = (original / wavelength − low) / (high − low), new θ = (1 − s) θ / factor + s θ.
std::vector<float> llama3_rope_freq_factors(double rope_theta, int64_t head_dim, double factor, double low_freq_factor,
                                            double high_freq_factor, double original_max_position);

}  // namespace hill
