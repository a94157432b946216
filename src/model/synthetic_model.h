// Models HillInfer makes itself, written as standard GGUF files (`llama`, and for random models the
// other llama-family architectures) that any GGUF engine for the architecture can load:
//
// - random: random weights of any shape and weight type, for tests (against the NumPy reference)
//   and benchmarks (a model large enough to leave the caches). Architectures, as llama.cpp's
//   converter writes them: llama (adjacent-pair Q/K rows), qwen2 (Q/K/V biases), qwen3 (per-head Q/K
//   norms), gemma2 and gemma3 (norms stored as 1 + w, post-attention and post-FFN norms, tied
//   output; gemma3 Q/K norms; gemma2 soft-capping keys 50 / 30), phi3 (fused attn_qkv, ffn_up of
//   2 n_ff rows holding gate then up). n_swa > 0 writes {arch}.attention.sliding_window (gemma2
//   needs one: every other layer slides; gemma3: five of six; the others: every layer).
//   A chat model is a random model with a chat template's control tokens in its vocabulary, the
//   template in `tokenizer.chat_template`, and the end-of-turn token's output row scaled up so that
//   its logit often wins: sampled replies end by themselves (after tens to hundreds of tokens), as a
//   chat model's do.
// - bigram: a word-bigram language model by construction, the README's no-download demo. The
//   vocabulary holds every word of a training text (with all its prefixes, so SentencePiece merges
//   can build each word) plus byte fallback. The embedding of token i is the one-hot vector e_i
//   (n_embd >= n_vocab); attention and FFN output projections are zero, so the residual stream
//   stays e_i; RMSNorm turns it into sqrt(n_embd)·e_i, and the output matrix holds
//   log P(next = j | current = i) / sqrt(n_embd) (add-k smoothed counts), so the logits are the
//   bigram log-probabilities of the text. The other matrices are random, exercising every kernel.
// - passkey: a model by construction that retrieves a passkey at any context length
//   (docs/passkey.md): after "… The pass key is 40582. Remember it. … What is the pass key? The
//   pass key is" it continues " 40582.". 2 layers, n_embd 640, 5 query heads / 1 KV head of 128,
//   rope.freq_base 1e14, zero FFN (n_ff 64), F32 (10.4 MB); 308 tokens: SentencePiece with byte
//   fallback, "0".."9", "▁0".."▁9", and the phrase words with their prefixes. Layer 0 copies the
//   classes of tokens t-1..t-5 by position only; layer 1, an induction head, matches the 5-gram
//   ending at t (digits, "is", "key", "pass"; other tokens never match) and copies the token that
//   follows it. Margins (scores after the 1/sqrt(head_dim) scale): layer-0 position 27.6 up to
//   512K tokens, 25.9 at 1M; layer-1 needle >= 20 above any other key; logit 20. Limits: the
//   phrase must tokenize as "▁pass ▁key ▁is" then digits; a haystack copy of the needle's 5-gram
//   followed by other digits ("The key is 4058x.") ties with it; not a language model otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/ggml_type.h"
#include "model/weight_scheme.h"

namespace hill {

struct random_model_params {
    int32_t n_vocab = 512;  // >= 259 (3 control tokens + 256 byte tokens)
    int32_t n_embd = 256;
    int32_t n_ff = 704;  // a multiple of 32, so every type works with the defaults (k-quants: weight_scheme.h)
    int32_t n_layer = 4;
    int32_t n_head = 8;
    int32_t n_head_kv = 2;
    int32_t n_ctx = 4096;             // llama.context_length
    weight_scheme type = ggml_type::f16;  // of the matrices (norms are f32); a ggml_type or q4_k_m
    float rope_freq_base = 10000.0f;
    float rope_scaling_factor = 1.0f;  // > 1 writes linear scaling metadata
    bool tied_output = false;          // no output.weight: the output reuses token_embd (always for gemma)
    uint64_t seed = 1;
    std::string arch = "llama";        // llama, qwen2, qwen3, gemma2, gemma3, phi3 (random_model_archs)
    int32_t n_swa = 0;                 // sliding window in tokens; 0: none
    // Chat: control tokens added after <unk>, <s>, </s> (before the byte tokens' fill; n_vocab stays),
    // the Jinja text written as tokenizer.chat_template (none when empty), and the token (one of them,
    // or "</s>") whose output row is scaled by chat_end_scale.
    std::vector<std::string> control_tokens;
    std::string chat_template;
    std::string chat_end_token;
};

// The architectures write_random_model writes, for messages and --help.
inline constexpr const char * random_model_archs = "llama, qwen2, qwen3, gemma2, gemma3, phi3";

// How much larger the end-of-turn token's output row is than the others in a chat model: its logit's
// spread is this many times theirs, so that sampling reaches it at all (consecutive hidden states of a
// random model are alike, so it wins in runs, not one step in k; a first reply can run thousands of
// steps before one, docs/chat.md "A chat model to try"; 6 did not shorten them).
constexpr float chat_end_scale = 4.0f;

// Writes a random model. Same params, same file (bit for bit). Errors: hill::error(usage) for
// inconsistent dims (n_embd % n_head, odd head_dim, n_head % n_head_kv, a matrix row length that
// is not a multiple of the type's block size, or of 32 for the super-block types, whose other
// rows fall back as weight_scheme.h says; an unknown arch, gemma2 without n_swa),
// hill::error(bad_input) when the file cannot be written.
void write_random_model(const std::string & path, const random_model_params & p);

// Writes the bigram model of `text` (words split on whitespace). Deterministic. Errors as above;
// hill::error(usage) for fewer than 2 words, or a vocabulary over bigram_max_vocab (n_embd is the
// vocabulary's size, so the matrices grow with its square: 8,192 tokens take about 3.2 GB in memory
// while built and 1.1 GB on disk).
void write_bigram_model(const std::string & path, std::string_view text, int32_t n_ctx = 2048);
inline constexpr int32_t bigram_max_vocab = 8192;

// Largest passkey context: the layer-0 positional margin is 25.9 there (23.5 at 4M, 19.8 at 12M)
// and the layer-1 match dims turn < 0.18 rad (RoPE), which costs the needle's lead about 0.3 of its 20.
constexpr int32_t passkey_n_ctx_max = 1 << 20;

struct passkey_model_params {
    int32_t n_ctx = 131072;  // llama.context_length, in [1, passkey_n_ctx_max]; the weights do not depend on it
};

// Writes the passkey model. Deterministic. Errors: n_ctx out of range (exit_code::usage), the file
// cannot be written (exit_code::bad_input).
void write_passkey_model(const std::string & path, const passkey_model_params & p);

}  // namespace hill
