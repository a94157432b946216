// What the model loaders share (internal to src/model): a tensor source that finds weights by their
// GGUF name in either container, typed helpers that check shapes, and the per-architecture entry
// points.
//
// Flow: model::load picks the container (gguf_model.cpp: a GGUF file; hf_model.cpp: a Hugging Face
// checkpoint folder), which reads the architecture name, lets that architecture read its
// hyperparameters (from GGUF metadata or from config.json) and then its weights through a
// tensor_source. The architecture code (arch_llama.cpp, arch_qwen.cpp, arch_opt.cpp) never sees the
// container: a folder's tensors are renamed to GGUF names by model/hf_names.h, the one place for
// that mapping.
#pragma once

#include "model/model.h"

#include <optional>
#include <string>
#include <vector>

namespace hill {

class hf_checkpoint;

// A stored tensor: element type, shape outermost first (as safetensors writes it; GGUF's ne
// reversed), data in the mapping.
struct tensor_ref {
    ggml_type type = ggml_type::f32;
    std::vector<int64_t> shape;
    const void * data = nullptr;
};

class tensor_source {
public:
    virtual ~tensor_source() = default;
    // The tensor called `gguf_name` in GGUF terms; nullopt when the container has none.
    virtual std::optional<tensor_ref> find(const std::string & gguf_name) const = 0;
    // The tensor's name in messages: the GGUF name, or "HF name (GGUF name)".
    virtual std::string describe(const std::string & gguf_name) const = 0;
    // The file or folder, for messages.
    virtual const std::string & name() const = 0;
    // Every tensor of the container, by its GGUF name.
    virtual std::vector<std::string> names() const = 0;
    // True for a GGUF file, false for a checkpoint folder (whose tensors may be stored as
    // transformers keeps them rather than as llama.cpp's converter writes them: Gemma's norms).
    virtual bool is_gguf() const = 0;
};

// What a llama-family model has beyond llama's block (llama_family_weights).
struct llama_family_options {
    bool qkv_bias = false;       // q/k/v biases required (otherwise optional)
    bool fused_qkv = false;      // one attn_qkv matrix (split into views of its q, k, v rows); with
                                 // qkv_bias its bias too (qwen)
    bool fused_gate_up = false;  // phi3: ffn_up holds gate rows [0, n_ff) then up rows (no ffn_gate)
    bool qk_norm = false;        // attn_q_norm, attn_k_norm f32 [head_dim] required (qwen3, gemma3)
    bool post_norms = false;     // post_attention_norm, post_ffw_norm required (gemma)
    // Gemma: every norm scales by (1 + w); GGUF stores 1 + w (llama.cpp's converter adds 1), a
    // checkpoint folder w, to which the loader adds 1.
    bool norm_plus_one = false;
};

// How an architecture reads one container. A null hparams_from_gguf: the architecture cannot be
// read from GGUF (none at present; opt reads the keys `hillinfer convert` writes).
struct architecture_loader {
    const char * name;  // GGUF general.architecture
    void (*hparams_from_gguf)(const gguf_file & f, hparams & hp);
    void (*hparams_from_hf)(const hf_checkpoint & c, hparams & hp);
    void (*weights)(const tensor_source & src, model & m);
};

// The loaders, a friend of model: they fill its private parts.
struct model_loader {
    static std::unique_ptr<model> load_gguf(const std::string & path);
    // with_tokenizer = false: the weights only (convert writes the tokenizer itself, and checks them first).
    static std::unique_ptr<model> load_hf(const std::string & dir, bool with_tokenizer = true);

    // The architecture called `arch`, or nullptr. supported(): "llama, qwen2, qwen, opt"; with
    // gguf_only, those with a GGUF reader (all four).
    static const architecture_loader * find(const std::string & arch);
    static std::string supported(bool gguf_only);

    // --- weights, by GGUF name; vectors add their element count by stored type to params_by_type() ---
    // Required matrix [rows, cols] of any supported type.
    static weight_view matrix(const tensor_source & src, model & m, const std::string & name, int64_t rows,
                              int64_t cols);
    static std::optional<weight_view> matrix_opt(const tensor_source & src, model & m, const std::string & name,
                                                 int64_t rows, int64_t cols);
    // Required vector of n elements (a float type), converted to f32.
    static std::vector<float> vector_f32(const tensor_source & src, model & m, const std::string & name, int64_t n);
    // Empty when absent.
    static std::vector<float> vector_opt(const tensor_source & src, model & m, const std::string & name, int64_t n);

    // The llama-family blocks (llama, qwen2, qwen, qwen3, gemma2, gemma3, phi3): token embedding,
    // norms, attention, gated FFN, output (tied when absent), with the options' extras.
    static void llama_family_weights(const tensor_source & src, model & m, const llama_family_options & o);
    static void opt_model_weights(const tensor_source & src, model & m);

    // Checks that hold for every architecture (positive sizes, GQA divisibility, even head_dim for
    // RoPE, factors' length); `where` names the file. Sets n_embd_word to n_embd when 0.
    static void check_hparams(hparams & hp, const std::string & where);
    // Refuses tensors of layers past the layer count (`blk.N.*` in GGUF terms, N >= hp.n_layer): the
    // container holds a deeper model than its metadata says (a corrupt or edited count), which would
    // run shorter without a word. `count` names the count in messages ("'llama.block_count'",
    // "num_hidden_layers in config.json"). Other tensors no loader reads stay accepted.
    static void check_layer_tensors(const tensor_source & src, const hparams & hp, const std::string & count);
};

// The per-architecture hyperparameter readers (arch_*.cpp) and weight loaders.
void llama_hparams_gguf(const gguf_file & f, hparams & hp);
void llama_hparams_hf(const hf_checkpoint & c, hparams & hp);
void llama_weights(const tensor_source & src, model & m);
void qwen2_hparams_gguf(const gguf_file & f, hparams & hp);
void qwen2_hparams_hf(const hf_checkpoint & c, hparams & hp);
void qwen2_weights(const tensor_source & src, model & m);
void qwen_hparams_gguf(const gguf_file & f, hparams & hp);
void qwen_hparams_hf(const hf_checkpoint & c, hparams & hp);
void qwen_weights(const tensor_source & src, model & m);
void qwen3_hparams_gguf(const gguf_file & f, hparams & hp);
void qwen3_hparams_hf(const hf_checkpoint & c, hparams & hp);
void qwen3_weights(const tensor_source & src, model & m);
void gemma2_hparams_gguf(const gguf_file & f, hparams & hp);
void gemma2_hparams_hf(const hf_checkpoint & c, hparams & hp);
void gemma3_hparams_gguf(const gguf_file & f, hparams & hp);
void gemma3_hparams_hf(const hf_checkpoint & c, hparams & hp);
void gemma_weights(const tensor_source & src, model & m);
void phi3_hparams_gguf(const gguf_file & f, hparams & hp);
void phi3_hparams_hf(const hf_checkpoint & c, hparams & hp);
void phi3_weights(const tensor_source & src, model & m);
// opt in GGUF: the keys hf_convert.cpp writes (opt.context_length, embedding_length,
// feed_forward_length, block_count, attention.head_count, attention.layer_norm_epsilon,
// word_embedding_length, layer_norm_before), each required; errors name the missing key.
void opt_hparams_gguf(const gguf_file & f, hparams & hp);
void opt_hparams_hf(const hf_checkpoint & c, hparams & hp);
void opt_weights(const tensor_source & src, model & m);

// GGUF metadata `key`, required, an integer in [lo, hi].
int32_t gguf_required_int(const gguf_file & f, const std::string & key, int64_t lo, int64_t hi);
// The `<arch>.*` keys llama.cpp writes for every llama-like architecture: context_length,
// embedding_length, feed_forward_length, block_count, attention.head_count[_kv],
// attention.key_length, rope.dimension_count, attention.layer_norm_rms_epsilon, rope.freq_base,
// rope.scaling.{type,factor} (none, linear), attention.sliding_window (optional; every layer).
void gguf_llama_like_hparams(const gguf_file & f, const std::string & arch, hparams & hp);
// GGUF metadata `key`, optional, a float that must be finite and > 0; nullopt when absent.
std::optional<float> gguf_optional_positive(const gguf_file & f, const std::string & key);
// The config.json keys of transformers' LlamaConfig and its relatives: hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
// max_position_embeddings, rms_norm_eps, rope_theta, rope_scaling (none/default, linear, llama3),
// hidden_act (silu), sliding_window (every layer; mistral; use_sliding_window + max_window_layers
// or layer_types for qwen2).
// num_hidden_layers, num_attention_heads, num_key_value_heads (default: MHA) and head_dim (default:
// hidden_size / num_attention_heads, which must divide) from config.json; hp.n_embd must be set.
void hf_layer_hparams(const hf_checkpoint & c, hparams & hp);
void hf_llama_like_hparams(const hf_checkpoint & c, hparams & hp);
// The sliding-window keys of config.json: layer_types ("sliding_attention" / "full_attention") when
// present, else `sliding_window` for every layer (null or absent: none). hp.n_layer must be set.
void hf_sliding_window(const hf_checkpoint & c, hparams & hp);

}  // namespace hill
