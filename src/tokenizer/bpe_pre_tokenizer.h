// The BPE pre-tokenizers GGUF files name in `tokenizer.ggml.pre`: every value
// llama.cpp recognizes, with the regexes that cut text into pre-tokens and the flags that go with
// them.
//
// Source: llama.cpp, src/llama-vocab.cpp (llama_vocab::impl::load maps each name to a pre-type
// and its flags; llm_tokenizer_bpe lists each pre-type's regexes) and src/unicode.cpp (the
// pre-types split by hand-written code instead of a regex), read at ggml-org/llama.cpp commit
// 00ad355e009e83abf98f96a6ded7193b95763681. The names, regexes and flags are facts about the
// models' tokenizers; no code is taken from there.
//
// Which regex, when llama.cpp has two. llama.cpp runs its regexes with std::regex, which lacks
// `(?i:...)`, `\p{Lu}`, `&&` and possessive quantifiers, so for several pre-types it keeps the
// model's original pattern (from its tokenizer.json) in a comment and runs an adapted one. PCRE2
// runs the original as written, so the table holds the original where llama.cpp gives it: the
// split is then the model's own. The adaptations differ only on rare text (`(?i:'s)` also takes the
// Kelvin sign; the adapted gpt-4o/tekken letter classes tell upper from lower case for ASCII
// letters only, and leave combining marks out of words).
// Where llama.cpp splits by hand-written code, the table holds the regex that code implements:
// kimi-k2 (its tokenizer's pattern, `[X&&[^\p{Han}]]` written as `(?:(?!\p{Han})[X])`; llama.cpp's
// code merges upper- and lowercase runs, "HelloWorld" in one piece, where the pattern gives
// "Hello" + "World") and afmoe's digit runs (groups of three from the right:
// `\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))`). llama.cpp's GPT-2 regex lacks the final `|\s+`; the
// two split alike (a gap between matches is a pre-token too, and the only whitespace `\s+(?!\S)`
// leaves is a single character), so the table uses the full pattern everywhere.
//
// Flags, as llama.cpp sets them:
// - ignore_merges: a pre-token that is itself a vocabulary piece is one token (Llama-3 family,
//   tekken, youtu, minicpm5, granite-embed-multi-97m).
// - add_bos: the default of `tokenizer.ggml.add_bos_token` (Llama-3 family, tekken, chameleon,
//   Gemma 4).
// - bos_none: no BOS token unless `tokenizer.ggml.bos_token_id` names one (ChatGLM-4: glm4,
//   chatglm-bpe).
// - byte_level = false: SentencePiece-style BPE over raw UTF-8 with spaces as U+2581 and "<0xXX>"
//   byte tokens (llama.cpp's byte_encode = false with escape_whitespaces: gemma4,
//   granite-embed-multi-311m, sarvam-moe), split into lines and newline runs first.
// - force_bos: BOS even when `tokenizer.ggml.add_bos_token` is false (llama.cpp overrides the key
//   for Gemma 4), and whole_newline_runs: a pre-token of newlines that is a vocabulary piece is one
//   token (Gemma 4's newline-run tokens have no merges).
// Not applied, as they do not change the ids of a prompt: llama.cpp's clean_spaces (a decode
// cosmetic that removes spaces before punctuation; decode here is exact) and add_sep (the
// separator that the jina/roberta embedding models append).
//
// Recognized but refused (with a message naming the reason): whitespace (the pre-tokenizer of an
// embedding model's `tokenizer.ggml.model = whitespace`, which drops the whitespace).
#pragma once

#include <span>
#include <string_view>

namespace hill {

struct bpe_pre_tokenizer {
    std::string_view name;                   // the tokenizer.ggml.pre value
    std::span<const char * const> patterns;  // PCRE2 regexes, applied in order (bpe_tokenizer.h)
    bool ignore_merges = false;
    bool add_bos = false;             // BOS rule when tokenizer.ggml.add_bos_token is absent
    bool bos_none = false;            // no default BOS token
    bool byte_level = true;           // false: SentencePiece-style BPE (bpe_config::byte_level)
    bool force_bos = false;           // add_bos even when tokenizer.ggml.add_bos_token says false
    bool whole_newline_runs = false;  // bpe_config::whole_newline_runs
    // Non-null: recognized but not supported, and why (the patterns are then empty).
    const char * unsupported = nullptr;
};

// Every pre-tokenizer name llama.cpp recognizes, in llama.cpp's order. "default" is also the
// pre-tokenizer of a GGUF without tokenizer.ggml.pre (as in llama.cpp).
std::span<const bpe_pre_tokenizer> bpe_pre_tokenizers();

// The entry named `name`, nullptr when llama.cpp does not know it.
const bpe_pre_tokenizer * find_bpe_pre_tokenizer(std::string_view name);

}  // namespace hill
