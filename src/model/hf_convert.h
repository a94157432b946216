// Hugging Face checkpoint folder -> GGUF file (`hillinfer convert`).
//
// What is written (llama.cpp's GGUF conventions, so that llama.cpp-style readers and HillInfer's
// GGUF loader read it back):
//   - general.architecture (llama, qwen2, qwen, opt: model/hf_names.h), general.name (the folder
//     name), general.file_type (llama.cpp's llama_ftype: weight_scheme_file_type),
//     general.quantization_version = 2 for the quantized types;
//   - hyperparameters as the HF loader reads them (model_loader, arch_*.cpp), under {arch}.:
//     vocab_size, context_length, embedding_length, block_count, feed_forward_length (qwen: twice
//     the w1/w2 width, as llama.cpp writes it), attention.head_count, attention.head_count_kv,
//     attention.key_length / value_length (only when head_dim != n_embd / n_head),
//     attention.layer_norm_rms_epsilon (RMSNorm) or attention.layer_norm_epsilon (LayerNorm, opt),
//     rope.dimension_count, rope.freq_base, rope.scaling.type "linear" + rope.scaling.factor (linear
//     scaling); Llama 3 `rope_scaling` as the tensor rope_freqs.weight (f32 [head_dim/2]).
//     opt (no llama.cpp architecture; HillInfer's keys): opt.word_embedding_length
//     (word_embed_proj_dim), opt.layer_norm_before (do_layer_norm_before);
//   - every weight under its GGUF name (hf_names.h), llama q/k rows permuted from rotate-half to
//     adjacent pairs (hf_names.h); 2-D matrices in the requested type, vectors (norms, biases) and
//     rope_freqs in F32 (as llama.cpp keeps them); q4_k_m mixes Q4_K and Q6_K as llama.cpp does, and
//     a matrix whose rows are not a multiple of its type's block size falls back to another type
//     (weight_scheme.h; counted in the result);
//   - the tokenizer, when the folder has one: byte-level BPE (tokenizer.json, vocab.json +
//     merges.txt) as tokenizer.ggml.model "gpt2" with tokens, token_type, merges, pre ("gpt-2",
//     "qwen2" or "llama-bpe" from the pre-tokenizer regex), bos/eos/unknown ids, add_bos_token,
//     add_space_prefix; SentencePiece-style tokenizer.json (Llama-2: BPE with byte_fallback and the
//     U+2581 space) as "llama" with tokens, scores (merge rank order), token_type (byte pieces
//     <0xXX> type 6, special added tokens 3, unk 2), bos/eos/unknown ids, add_bos_token,
//     add_space_prefix. No tokenizer files: no tokenizer keys (a warning is returned).
//
// Memory: the GGUF writer holds the converted tensors in memory until the file is written (about
// the output file's size); the source shards stay memory-mapped.
//
// Errors: as hf_checkpoint::open and the HF loader's hyperparameter checks (naming config.json);
// unsupported tokenizer.json (naming the field); a tensor of more than 4 dimensions; an unwritable
// output (naming it).
#pragma once

#include "core/ggml_type.h"
#include "model/weight_scheme.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hill {

struct convert_params {
    // Type of the 2-D matrices: a weight_scheme (weight_scheme_from_name); nullopt: the type
    // token_embd is stored in.
    std::optional<weight_scheme> type;
};

struct convert_result {
    std::string arch;
    weight_scheme type = ggml_type::f32;  // the matrices' type
    int64_t n_tensors = 0;
    int64_t n_fallback = 0;  // matrices whose rows the type's block does not divide (weight_scheme.h)
    int64_t n_permuted = 0;           // q/k tensors permuted to adjacent pairs
    std::string tokenizer_model;      // "gpt2", "llama", or "" (none written)
    std::vector<std::string> warnings;
    uint64_t bytes_written = 0;
};

// Converts the checkpoint folder `dir` to the GGUF file `out` (written atomically).
convert_result convert_hf_to_gguf(const std::string & dir, const std::string & out, const convert_params & p);

}  // namespace hill
