// A loaded model: hyperparameters, weight views into the mapped file(s), and its tokenizer. Weights
// are not copied (norm vectors and biases, which are tiny, are converted to f32), except the
// matrices of a safetensors file whose data is not aligned to the element size (the format allows
// it; copied_weight_bytes() counts them).
//
// Architectures (hparams::arch; see docs/models.md "Architectures"):
//   llama  RMSNorm, RoPE, GQA, SwiGLU; also Mistral, LongChat (linear RoPE scaling) and Llama 3
//          (`rope_scaling` type llama3: per-pair frequency factors)
//   qwen2  llama with Q/K/V biases
//   qwen   Qwen-1: llama with a fused QKV projection with bias, MHA
//   qwen3  llama with an RMSNorm over each head of Q and K before RoPE (Qwen3)
//   gemma2 embeddings times sqrt(n_embd), GeGLU, norms after attention and after the FFN too,
//          attention and final logit soft-capping, a query scale of its own, sliding-window
//          attention in every other layer (Gemma 2)
//   gemma3 gemma2 without soft-capping (final capping optional), with Q/K head norms, and five
//          sliding-window layers (RoPE base of their own) to one global layer (Gemma 3 text)
//   phi3   llama with fused QKV and gate/up projections and LongRoPE ("su"/"longrope") scaling (Phi-3)
//   opt    learned positions, LayerNorm (pre- or post-norm), ReLU MLP, biases everywhere, optional
//          projection between the word embedding width and the hidden size
// Sliding-window layers (gemma2, gemma3; mistral, qwen2 and phi3 where the model declares a window)
// attend only to the last `n_swa` positions (hparams::window).
// Sources: GGUF (all but opt as llama.cpp writes them; model/gguf_model.cpp), Hugging Face
// checkpoint folders (all; model/hf_model.cpp) and llama2.c legacy checkpoints (`.bin`,
// 7×int32 header then f32 arrays; model/llama2c_file.cpp). The per-architecture files
// (model/arch_*.cpp) read the hyperparameters and find the weights under their GGUF names in either
// container (model/model_loader.h), and hold the architecture's forward pass around attention
// (model/forward.h: arch_llama.cpp for every architecture but opt; arch_opt.cpp for opt).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "compute/attention.h"
#include "compute/matmul.h"
#include "compute/ops.h"
#include "core/aligned_buffer.h"
#include "format/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace hill {

// Normalization: RMSNorm (weight only) or LayerNorm (weight and bias).
enum class norm_kind { rms, layer };
// Where position enters: RoPE on Q and K (in either pair layout, compute/ops.h), or learned absolute
// position embeddings added to the token embedding (OPT).
enum class position_kind { rope, learned };
// Feed-forward: SwiGLU (gate, up, down; no biases), GeGLU (the same with the tanh-approximated GELU
// on the gate: Gemma) or ReLU MLP (up = fc1, down = fc2, with biases).
enum class ffn_kind { swiglu, geglu, relu };

struct hparams {
    std::string arch = "llama";   // llama, qwen2, qwen, qwen3, gemma2, gemma3, phi3, opt
    int32_t n_vocab = 0;
    int32_t n_ctx_train = 0;      // trained context length (tokens)
    int32_t n_embd = 0;
    int32_t n_ff = 0;             // feed-forward hidden size
    int32_t n_layer = 0;
    int32_t n_head = 0;
    int32_t n_head_kv = 0;
    int32_t head_dim = 0;         // usually n_embd / n_head (HF `head_dim` may say otherwise)
    int32_t n_embd_word = 0;      // width of the token embedding and the output matrix: n_embd, or
                                  // OPT's word_embed_proj_dim (projected in and out of n_embd)
    float rms_eps = 1e-5f;        // epsilon of the norms (RMSNorm or LayerNorm)
    norm_kind norm = norm_kind::rms;
    bool norm_before = true;      // pre-norm blocks (x + f(norm(x))); false: OPT-350m's post-norm
                                  // (norm(x + f(x))), which also has no final norm
    ffn_kind ffn = ffn_kind::swiglu;
    position_kind position = position_kind::rope;
    rope_layout rope_pairs = rope_layout::adjacent_pairs;  // how Q/K rows are laid out for RoPE
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f; // linear RoPE scaling: position multiplier (1 / factor)
    std::vector<float> rope_freq_factors;  // f32 [head_dim/2] pair i's frequency is divided by; empty: all 1
                                           // (Llama 3 `rope_scaling`, GGUF `rope_freqs.weight`;
                                           // phi3: the LongRoPE factors chosen for the context, see
                                           // rope_freq_factors_long)
    // LongRoPE (phi3): the long factors f32 [head_dim/2], used instead of rope_freq_factors when the
    // context exceeds n_ctx_orig (llama.cpp's rule: the choice is made once, for the whole context,
    // since cached keys keep their rotation); empty otherwise.
    std::vector<float> rope_freq_factors_long;
    int32_t n_ctx_orig = 0;       // LongRoPE: original_max_position_embeddings
    float rope_attn_factor = 1.0f;  // multiplies cos and sin of RoPE (LongRoPE: sqrt(1 + ln(s)/ln(n_ctx_orig)))
    // Sliding-window layers: rope base and scale of their own (gemma3's local layers; 0: the global ones).
    float rope_freq_base_swa = 0.0f;
    int32_t n_swa = 0;            // sliding window in tokens: a query attends to keys (pos - n_swa, pos]
    std::vector<uint8_t> swa_layers;  // [n_layer] 1: layer il is a sliding-window layer (empty: none)
    float attn_scale = 0.0f;      // scale of q·k; 0: 1/sqrt(head_dim) (set by check_hparams)
    float attn_softcap = 0.0f;    // attention logits s -> c·tanh(s/c) (gemma2); 0: none
    float final_softcap = 0.0f;   // output logits likewise (gemma2, gemma3); 0: none
    float embd_scale = 1.0f;      // token embeddings are multiplied by it (gemma: sqrt(n_embd))

    int64_t n_embd_q() const { return int64_t(n_head) * head_dim; }
    int64_t n_embd_kv() const { return int64_t(n_head_kv) * head_dim; }
    // K and V of one token over all layers, in bytes, for a KV cache of element type `kv_type`.
    uint64_t kv_bytes_per_token(ggml_type kv_type) const;
    // f64 [head_dim/2]: RoPE angle per position of each pair (compute/ops.h rope_inv_freq) in layer
    // il (sliding-window layers may have their own base), for a context of n_ctx tokens (LongRoPE's
    // choice of factors).
    std::vector<double> rope_inv_freq(int il = 0, int64_t n_ctx = 0) const;
    // The attention of every layer: heads, scale, soft-cap (window 0: a sliding layer's is window(il)).
    attention_shape attn_shape() const {
        attention_shape s{n_head, n_head_kv, head_dim, attn_scale};
        s.softcap = attn_softcap;
        return s;
    }
    // The sliding window of layer il in tokens, 0 for a layer that attends to the whole context.
    int32_t window(int il) const { return swa_layers.empty() || swa_layers[size_t(il)] == 0 ? 0 : n_swa; }
    // Marks every layer (pattern 1), or every layer but each pattern-th (il % pattern == pattern - 1
    // is global: gemma2 2, gemma3 6), as sliding with window n; n == 0 clears them.
    void set_swa(int32_t n, int pattern);
};

// One block. Optional vectors are empty when the architecture has none; `ffn_gate` is empty
// (n_rows 0) for the ReLU MLP.
struct layer_weights {
    std::vector<float> attn_norm;    // f32 [n_embd]
    std::vector<float> attn_norm_b;  // f32 [n_embd] (LayerNorm)
    weight_view wq;                  // [n_head * head_dim, n_embd]
    weight_view wk;                  // [n_head_kv * head_dim, n_embd]
    weight_view wv;                  // [n_head_kv * head_dim, n_embd]
    weight_view wo;                  // [n_embd, n_head * head_dim]
    std::vector<float> bq;           // f32 [n_head * head_dim] (qwen2, qwen, opt)
    std::vector<float> bk;           // f32 [n_head_kv * head_dim]
    std::vector<float> bv;           // f32 [n_head_kv * head_dim]
    std::vector<float> bo;           // f32 [n_embd] (opt)
    std::vector<float> ffn_norm;     // f32 [n_embd]
    std::vector<float> ffn_norm_b;   // f32 [n_embd] (LayerNorm)
    weight_view ffn_gate;            // [n_ff, n_embd] (SwiGLU)
    weight_view ffn_up;              // [n_ff, n_embd]
    weight_view ffn_down;            // [n_embd, n_ff]
    std::vector<float> ffn_up_b;     // f32 [n_ff] (opt)
    std::vector<float> ffn_down_b;   // f32 [n_embd] (opt)
    std::vector<float> attn_q_norm;  // f32 [head_dim]: RMSNorm of each query head (qwen3, gemma3)
    std::vector<float> attn_k_norm;  // f32 [head_dim]: ... of each key head
    std::vector<float> attn_post_norm;  // f32 [n_embd]: RMSNorm of the attention output before the residual (gemma)
    std::vector<float> ffn_post_norm;   // f32 [n_embd]: ... of the FFN output (gemma)
};

class model {
public:
    // Loads a Hugging Face checkpoint folder (config.json + safetensors), a GGUF file, or a
    // llama2.c checkpoint (anything not starting with the GGUF magic), which needs
    // `tokenizer_path` (a llama2.c tokenizer.bin). Errors: hill::error naming the file and what is
    // wrong (missing tensor, wrong shape or type, unsupported architecture or dtype with the
    // supported values, size not matching the header); exit_code::usage for a missing file or a
    // folder that is not a checkpoint.
    static std::unique_ptr<model> load(const std::string & path, const std::string & tokenizer_path = "");

    const hparams & hp() const { return hp_; }
    // The tokenizer. A checkpoint folder without tokenizer files (tokenizer.json, vocab.json +
    // merges.txt, encoder.json + vocab.bpe) has none and runs on token ids only: then this throws
    // hill::error(bad_input) naming the folder. Its vocabulary may be smaller than hp().n_vocab
    // (embedding rows padded, as Qwen's are).
    const hill::tokenizer & tokenizer() const;
    bool has_tokenizer() const { return tokenizer_ != nullptr; }
    const std::string & path() const { return path_; }
    const std::string & format() const { return format_; }  // "gguf", "hf" or "llama2.c"

    const weight_view & token_embd() const { return token_embd_; }  // [n_vocab, n_embd_word]
    // Learned absolute positions (opt): row p is position p's embedding (OPT's offset of 2 already
    // applied); empty otherwise. [n_ctx_train, n_embd]
    const weight_view & pos_embd() const { return pos_embd_; }
    // Projections between the word embedding width and n_embd (opt-350m); empty when equal.
    const weight_view & proj_in() const { return proj_in_; }    // [n_embd, n_embd_word]
    const weight_view & proj_out() const { return proj_out_; }  // [n_embd_word, n_embd]
    const std::vector<float> & output_norm() const { return output_norm_; }  // f32 [n_embd]; empty: none
    const std::vector<float> & output_norm_b() const { return output_norm_b_; }  // f32 [n_embd] (LayerNorm)
    const weight_view & output() const { return output_; }  // [n_vocab, n_embd_word]; = token_embd when tied
    bool output_tied() const { return output_tied_; }
    const std::vector<layer_weights> & layers() const { return layers_; }

    // Number of weight elements (tied output counted once).
    uint64_t n_params() const;
    // Bytes of weight data read per decode step (all matrices once, embedding row excluded).
    uint64_t weight_bytes_per_token() const;
    // Element count per weight type over all matrices and vectors (for `info`).
    std::map<ggml_type, uint64_t> params_by_type() const;
    // Bytes of matrices copied at load because their data in the file was not aligned to their
    // element size (safetensors only; 0 for every file a standard writer makes).
    uint64_t copied_weight_bytes() const { return copied_weight_bytes_; }
    // XXH3-64 of every byte the model was loaded from: the file (GGUF, llama2.c), or a checkpoint
    // folder's config.json, model.safetensors.index.json and every *.safetensors file, in name order
    // with their names (links followed; the folder's own path is not hashed, so a copy hashes the
    // same). Computed on the first call — one read of the files, about 0.1 s per GB from the page
    // cache — and kept; thread-safe. Errors: hill::error(bad_input) naming a file or folder that can
    // no longer be read.
    uint64_t source_hash() const;

private:
    friend struct model_loader;
    friend std::unique_ptr<model> load_llama2c(const std::string &, const std::string &);
    model() = default;

    std::string path_;
    std::string format_;
    hparams hp_;
    std::unique_ptr<gguf_file> gguf_;      // owns the mapping the views point into (GGUF)
    std::optional<mapped_file> bin_;       // ... (llama2.c)
    std::shared_ptr<const void> hf_;       // ... (the hf_checkpoint, type-erased to keep its header out)
    std::unique_ptr<hill::tokenizer> tokenizer_;
    weight_view token_embd_;
    weight_view pos_embd_;
    weight_view proj_in_;
    weight_view proj_out_;
    std::vector<float> output_norm_;
    std::vector<float> output_norm_b_;
    weight_view output_;
    bool output_tied_ = false;
    std::vector<layer_weights> layers_;
    std::map<ggml_type, uint64_t> vector_params_;  // norm vectors by their stored type
    std::vector<aligned_buffer> weight_copies_;    // matrices whose file data was misaligned (64-byte aligned copies)
    uint64_t copied_weight_bytes_ = 0;
    mutable std::once_flag source_hash_once_;
    mutable uint64_t source_hash_ = 0;
};

// The llama2.c loader behind model::load (model/llama2c_file.cpp); GGUF and checkpoint folders go
// through model_loader (model/model_loader.h).
std::unique_ptr<model> load_llama2c(const std::string & path, const std::string & tokenizer_path);

}  // namespace hill
