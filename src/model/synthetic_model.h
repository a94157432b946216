// Models HillInfer makes itself, written as standard `llama` GGUF files that any GGUF engine for
// the llama architecture can load:
//
// - random: random weights of any shape and weight type, for tests (against the NumPy reference)
//   and benchmarks (a model large enough to leave the caches).
// - bigram: a word-bigram language model by construction, the README's no-download demo. The
//   vocabulary holds every word of a training text (with all its prefixes, so SentencePiece merges
//   can build each word) plus byte fallback. The embedding of token i is the one-hot vector e_i
//   (n_embd >= n_vocab); attention and FFN output projections are zero, so the residual stream
//   stays e_i; RMSNorm turns it into sqrt(n_embd)·e_i, and the output matrix holds
//   log P(next = j | current = i) / sqrt(n_embd) (add-k smoothed counts), so the logits are the
//   bigram log-probabilities of the text. The other matrices are random, exercising every kernel.
#pragma once

#include "core/ggml_type.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace hill {

struct random_model_params {
    int32_t n_vocab = 512;          // >= 259 (3 control tokens + 256 byte tokens)
    int32_t n_embd = 256;
    int32_t n_ff = 704;             // a multiple of 32, so Q8_0/Q4_0 work with the defaults
    int32_t n_layer = 4;
    int32_t n_head = 8;
    int32_t n_head_kv = 2;
    int32_t n_ctx = 4096;           // llama.context_length
    ggml_type type = ggml_type::f16; // of every matrix (norms are f32)
    float rope_freq_base = 10000.0f;
    float rope_scaling_factor = 1.0f; // > 1 writes linear scaling metadata
    bool tied_output = false;       // no output.weight: the output reuses token_embd
    uint64_t seed = 1;
};

// Writes a random model. Same params, same file (bit for bit). Errors: hill::error(usage) for
// inconsistent dims (n_embd % n_head, odd head_dim, n_head % n_head_kv, a matrix row length that
// is not a multiple of the type's block size), hill::error(bad_input) when the file cannot be
// written.
void write_random_model(const std::string & path, const random_model_params & p);

// Writes the bigram model of `text` (words split on whitespace). Deterministic. Errors as above;
// fewer than 2 words is a usage error.
void write_bigram_model(const std::string & path, std::string_view text, int32_t n_ctx = 2048);

}  // namespace hill
