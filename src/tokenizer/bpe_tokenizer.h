// Byte-level BPE as GPT-2 defined it and GPT-2, OPT, Qwen2/3, Llama-3, DeepSeek, Mistral's tekken
// and the other models of bpe_pre_tokenizer.h use it.
//
// Sources: Radford et al., "Language Models are Unsupervised Multitask Learners" (2019), §2.2, and
// OpenAI's GPT-2 release (encoder.json + vocab.bpe, the byte-to-unicode table, the pre-tokenizer
// pattern); the Hugging Face tokenizers JSON format (model BPE with `merges` and `ignore_merges`,
// pre_tokenizer Split/ByteLevel/Sequence, added_tokens); llama.cpp's GGUF keys tokenizer.ggml.*.
//
// encode(text):
//  1. Added tokens are cut out of the text first, leftmost then longest: user-defined tokens (HF
//     added tokens with special = false, GGUF token type 4) always, control tokens (special = true,
//     type 3) only in encode_with_special() — plain encode() treats "<|endoftext|>" in a prompt as
//     text, so user text cannot inject control tokens. `lstrip`/`rstrip` absorb ASCII whitespace
//     beside the token; `single_word` requires no ASCII letter/digit/'_' or non-ASCII byte beside it.
//  2. If add_space_prefix (HF ByteLevel add_prefix_space) and the text does not start with ' ', one
//     ' ' is prepended to its first stretch (HF prepends one to every stretch between added
//     tokens; no vocabulary supported here sets add_prefix_space).
//  3. Each remaining stretch is split into pre-tokens by the regexes in order (PCRE2, UTF + UCP:
//     \p{L}, \p{N}, \s are Unicode classes; DOLLAR_ENDONLY: `$` is the end of the piece only, as
//     in Rust's regex and std::regex); every match and every unmatched gap is a pre-token (HF Split
//     behaviour "Isolated"), and an empty match cuts the text where it matches (SuperBPE's
//     lookahead-only pattern, as in HF and llama.cpp). With several regexes, each splits the pieces
//     of the previous.
//  4. Each pre-token's bytes become their byte tokens (the vocab pieces of GPT-2's byte-to-unicode
//     table: printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100..U+0143).
//     With ignore_merges (Llama-3) a pre-token that is itself a vocab piece is emitted whole.
//     Otherwise the adjacent pair with the lowest merge rank is merged, repeatedly (leftmost
//     first among equal ranks), until no adjacent pair has a merge. Linked list + binary heap,
//     O(n log n) per pre-token, so long runs (whitespace, digits for GPT-2) stay fast.
//
// SentencePiece-style BPE (bpe_config::byte_level = false; llama.cpp's gemma4 and sarvam-moe
// pre-tokenizers, its byte_encode = false): the same steps on raw UTF-8 — before step 3 each ' '
// of a stretch becomes U+2581; in step 4 the symbols are the pre-token's UTF-8 characters as
// pieces, a character no piece holds never merges and becomes its bytes' "<0xXX>" tokens, and
// (whole_newline_runs, Gemma 4) a pre-token of newlines that is a vocab piece is one token.
// decode() turns U+2581 back into ' ', so a literal U+2581 in the text comes back as ' '.
//
// Invalid UTF-8 never throws: the text is split into maximal valid UTF-8 stretches (strict:
// no overlong forms, surrogates or code points above U+10FFFF) and single invalid bytes; each
// invalid byte is a pre-token of its own (its byte token), and the valid stretches around it are
// pre-tokenized independently. decode() gives the exact bytes back.
//
// Not applied: Unicode normalizers (Qwen's NFC; as llama.cpp, text is tokenized as given, which
// keeps decode(encode(x)) == x exactly), BPE dropout. PCRE2's \s also matches U+180E, which
// Unicode (and the Rust regex crate behind HF tokenizers) no longer counts as white space.
//
// BOS: encode(text, add_bos) prepends vocab().bos only when add_bos, vocab().add_bos and a BOS
// exists: the caller says "this starts a sequence", the model's rule (Llama-3 yes, GPT-2/Qwen no)
// decides. Loaders set add_bos from the sources listed at each loader in tokenizer.h.
//
// decode(): normal pieces through the inverse byte table (SentencePiece style: their text with
// U+2581 as ' '), byte tokens their byte, user-defined pieces as their text,
// control and unused tokens "" (as the SPM tokenizer does), so decode(encode(x)) == x for any
// bytes x, except that a prepended add_space_prefix ' ' stays (as in HF), whitespace absorbed by an
// lstrip/rstrip added token is lost, and encode_with_special() drops the control tokens' text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace hill {

// GPT-2's pre-tokenizer pattern (gpt-2, OPT; HF ByteLevel with use_regex = true).
inline constexpr const char * k_bpe_pattern_gpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama-3's split pattern: case-insensitive contractions, digits in groups of up to 3.
inline constexpr const char * k_bpe_pattern_llama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2's (and Qwen3's) split pattern: as Llama-3's with single digits.
inline constexpr const char * k_bpe_pattern_qwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The piece text of byte `b` in GPT-2's byte-to-unicode table (UTF-8 of one code point).
std::string bpe_byte_to_piece(uint8_t b);

// `bytes` with every byte replaced by its piece text: the form vocab pieces and merges are in.
std::string bpe_bytes_to_pieces(std::string_view bytes);

// Everything a bpe_tokenizer is built from; the loaders fill it.
struct bpe_config {
    // pieces: byte-level text for normal tokens, plain text for user-defined and control tokens;
    // scores: unused by BPE (zeros); kinds: normal, control (special), user_defined (always matched),
    // unused (gaps in the id space). add_space_prefix = HF ByteLevel add_prefix_space. Both flags
    // default to false here (hill::vocab's defaults are SentencePiece's).
    hill::vocab vocab{.add_bos = false, .add_space_prefix = false};
    // Merges in rank order (rank 0 first): the two piece texts, byte-level.
    std::vector<std::pair<std::string, std::string>> merges;
    // Pre-tokenizer regexes (PCRE2 syntax), applied in order; empty: each stretch is one pre-token.
    std::vector<std::string> patterns;
    bool ignore_merges = false;
    // false: SentencePiece-style BPE (Gemma 4, Sarvam): normal pieces and merges are raw UTF-8
    // with U+2581 for ' ', the text's spaces become U+2581 before pre-tokenization, merging starts
    // from UTF-8 characters, and a character no piece holds falls back to its bytes' "<0xXX>" tokens
    // (kind byte).
    bool byte_level = true;
    // A pre-token of '\n' only that is itself a vocab piece is one token (Gemma 4).
    bool whole_newline_runs = false;

    // Per added token (kinds control / user_defined), optional: HF added_tokens flags.
    struct added_flags {
        int32_t id = -1;
        bool lstrip = false;
        bool rstrip = false;
        bool single_word = false;
    };
    std::vector<added_flags> added;

    // For error messages: the file, and how the merges are named there ("model.merges",
    // "tokenizer.ggml.merges"); merges_line0 >= 0: merge i is on line merges_line0 + i (vocab.bpe).
    std::string source;
    std::string merges_field = "merges";
    int64_t merges_line0 = -1;
};

class bpe_tokenizer final : public tokenizer {
public:
    // Errors (hill::error, exit_code::bad_input, naming config.source): empty vocab, sizes that
    // disagree, bos/eos/unk out of range, a merge whose halves or concatenation are not normal
    // vocab pieces (naming the merge and its rank or line), a regex PCRE2 rejects (with its
    // message and offset), added-token flags for an id that is not a control/user-defined token.
    explicit bpe_tokenizer(bpe_config config);
    ~bpe_tokenizer() override;

    // Errors: only when a byte of the text has no byte token in the vocab and there is no UNK
    // (GPT-2, Qwen and Llama-3 have all 256); such a byte becomes UNK when there is one.
    std::vector<int32_t> encode(std::string_view text, bool add_bos) const override;
    std::vector<int32_t> encode_with_special(std::string_view text, bool add_bos) const override;
    std::string token_to_piece(int32_t id) const override;
    std::string decode(const std::vector<int32_t> & ids) const override;
    const hill::vocab & vocab() const override { return vocab_; }

    // The pre-tokens of `text` (step 3 above: the regexes, invalid UTF-8 bytes on their own) as
    // plain bytes, without added-token matching or a space prefix; their concatenation is `text`
    // (SentencePiece style: `text` with its spaces as U+2581).
    std::vector<std::string> pre_tokenize(std::string_view text) const;

    const std::vector<std::string> & patterns() const { return patterns_; }
    bool ignore_merges() const { return ignore_merges_; }
    bool byte_level() const { return byte_level_; }
    int32_t n_merges() const { return n_merges_; }

private:
    struct regex;  // a compiled PCRE2 pattern
    struct scratch;
    struct added_token {
        std::string text;
        int32_t id;
        bool special;  // control: matched only by encode_with_special
        bool lstrip, rstrip, single_word;
    };

    std::vector<int32_t> encode_impl(std::string_view text, bool add_bos, bool parse_special) const;
    void encode_stretch(std::string_view text, scratch & s, std::vector<int32_t> & out) const;
    // Appends the pre-tokens of `text` (step 3, invalid UTF-8 bytes on their own) to s.words.
    void pre_tokenize_stretch(std::string_view text, scratch & s) const;
    // Appends the pre-tokens of valid UTF-8 `text` under regexes_[level..] to s.words.
    void split(std::string_view text, size_t level, scratch & s) const;
    void encode_word(std::string_view word, scratch & s, std::vector<int32_t> & out) const;
    int32_t find_piece(std::string_view piece) const;  // normal piece id, -1 if none
    // Merge of the pair (left, right): rank in the high 32 bits, merged id in the low; -1: none.
    int64_t find_merge(int32_t left, int32_t right) const;

    hill::vocab vocab_;
    std::string source_;
    bool byte_level_ = true;
    bool ignore_merges_ = false;
    bool whole_newline_runs_ = false;
    int32_t n_merges_ = 0;
    std::vector<std::string> patterns_;
    std::vector<std::unique_ptr<regex>> regexes_;

    // Normal pieces: open addressing with linear probing on hash(piece), storing the id (-1 empty).
    std::vector<int32_t> piece_slots_;  // [power of two >= 2 * n_vocab]
    // Merges keyed by (left << 32 | right) + 1 (0 = empty), value rank << 32 | merged id.
    std::vector<uint64_t> merge_keys_;        // [power of two >= 2 * n_merges]
    std::vector<uint64_t> merge_vals_;        // [same]
    int32_t byte_token_[256];                 // id of each byte's token; -1 if the vocab lacks it
    std::vector<added_token> added_;          // longest first
    std::vector<uint32_t> added_first_[256];  // indices into added_ by first byte (longest first)
    std::vector<std::string> surface_;        // [n_vocab] what token_to_piece returns
};

}  // namespace hill
