// A loaded Llama-architecture model: hyperparameters, weight views into the mapped file, and its
// tokenizer. Weights are never copied (norm vectors, which are tiny, are converted to f32).
//
// Sources: GGUF (architecture `llama`, tensor names as llama.cpp writes them) and llama2.c legacy
// checkpoints (`.bin`, 7×int32 header then f32 arrays; see model/llama2c_file.cpp).
#pragma once

#include "compute/matmul.h"
#include "model/gguf_file.h"
#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hill {

struct hparams {
    std::string arch = "llama";
    int32_t n_vocab = 0;
    int32_t n_ctx_train = 0;      // trained context length (tokens)
    int32_t n_embd = 0;
    int32_t n_ff = 0;             // feed-forward hidden size
    int32_t n_layer = 0;
    int32_t n_head = 0;
    int32_t n_head_kv = 0;
    int32_t head_dim = 0;         // n_embd / n_head
    float rms_eps = 1e-5f;
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f; // linear RoPE scaling: position multiplier (1 / factor)

    int64_t n_embd_q() const { return int64_t(n_head) * head_dim; }
    int64_t n_embd_kv() const { return int64_t(n_head_kv) * head_dim; }
    // K and V of one token over all layers, in bytes, for a KV cache of element type `kv_type`.
    uint64_t kv_bytes_per_token(ggml_type kv_type) const;
};

struct layer_weights {
    std::vector<float> attn_norm;  // f32 [n_embd]
    weight_view wq;                // [n_head * head_dim, n_embd]
    weight_view wk;                // [n_head_kv * head_dim, n_embd]
    weight_view wv;                // [n_head_kv * head_dim, n_embd]
    weight_view wo;                // [n_embd, n_head * head_dim]
    std::vector<float> ffn_norm;   // f32 [n_embd]
    weight_view ffn_gate;          // [n_ff, n_embd]
    weight_view ffn_up;            // [n_ff, n_embd]
    weight_view ffn_down;          // [n_embd, n_ff]
};

class model {
public:
    // Loads a GGUF file, or a llama2.c checkpoint (anything not starting with the GGUF magic),
    // which needs `tokenizer_path` (a llama2.c tokenizer.bin). Errors: hill::error naming the
    // file and what is wrong (missing tensor, wrong shape or type, unsupported architecture,
    // size not matching the header); exit_code::usage for a missing file or a directory.
    static std::unique_ptr<model> load(const std::string & path, const std::string & tokenizer_path = "");

    const hparams & hp() const { return hp_; }
    const hill::tokenizer & tokenizer() const { return *tokenizer_; }
    const std::string & path() const { return path_; }
    const std::string & format() const { return format_; }  // "gguf" or "llama2.c"

    const weight_view & token_embd() const { return token_embd_; }  // [n_vocab, n_embd]
    const std::vector<float> & output_norm() const { return output_norm_; }  // f32 [n_embd]
    const weight_view & output() const { return output_; }  // [n_vocab, n_embd]; = token_embd when tied
    bool output_tied() const { return output_tied_; }
    const std::vector<layer_weights> & layers() const { return layers_; }

    // Number of weight elements (tied output counted once).
    uint64_t n_params() const;
    // Bytes of weight data read per decode step (all matrices once, embedding row excluded).
    uint64_t weight_bytes_per_token() const;
    // Element count per weight type over all matrices and vectors (for `info`).
    std::map<ggml_type, uint64_t> params_by_type() const;

private:
    friend std::unique_ptr<model> load_gguf_llama(const std::string &);
    friend std::unique_ptr<model> load_llama2c(const std::string &, const std::string &);
    model() = default;

    std::string path_;
    std::string format_;
    hparams hp_;
    std::unique_ptr<gguf_file> gguf_;      // owns the mapping the views point into (GGUF)
    std::optional<mapped_file> bin_;       // ... (llama2.c)
    std::unique_ptr<hill::tokenizer> tokenizer_;
    weight_view token_embd_;
    std::vector<float> output_norm_;
    weight_view output_;
    bool output_tied_ = false;
    std::vector<layer_weights> layers_;
    std::map<ggml_type, uint64_t> vector_params_;  // norm vectors by their stored type
};

// Format-specific loaders behind model::load (model/llama_gguf.cpp, model/llama2c_file.cpp).
std::unique_ptr<model> load_gguf_llama(const std::string & path);
std::unique_ptr<model> load_llama2c(const std::string & path, const std::string & tokenizer_path);

}  // namespace hill
