// Tokenizer interface and the vocabulary it is built from.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hill {

class gguf_file;

// Token kinds, numbered as GGUF `tokenizer.ggml.token_type` numbers them.
enum class token_kind : int32_t {
    normal = 1,
    unknown = 2,
    control = 3,       // BOS, EOS, ...: never produced from plain text
    user_defined = 4,
    unused = 5,
    byte = 6,          // byte fallback piece "<0xXX>"
};

struct vocab {
    std::vector<std::string> pieces;  // [n_vocab] token text as stored (SPM: U+2581 for space)
    std::vector<float> scores;        // [n_vocab] merge priority (SPM: higher merges first)
    std::vector<token_kind> kinds;    // [n_vocab]
    int32_t bos = -1;                 // -1: none
    int32_t eos = -1;
    int32_t unk = -1;
    bool add_bos = true;              // prepend BOS when encoding a prompt
    bool add_space_prefix = true;     // SPM: prepend one space to non-empty text

    int32_t n_vocab() const { return int32_t(pieces.size()); }
};

class tokenizer {
public:
    virtual ~tokenizer() = default;

    // Token ids of `text` (any bytes: invalid UTF-8 is documented per implementation, never a
    // crash). BOS is prepended when add_bos and the vocab has one; byte-level BPE also requires
    // vocab().add_bos (the model's rule: Llama-3 yes, GPT-2/Qwen no). Text that spells a control
    // token ("<|endoftext|>", "<s>") is encoded as plain text.
    virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;

    // As encode(), but control (special) tokens spelled in the text become those tokens, e.g. in a
    // chat template (spm_tokenizer.h and bpe_tokenizer.h say how the text around them is split). The
    // default returns encode(text, add_bos).
    virtual std::vector<int32_t> encode_with_special(std::string_view text, bool add_bos) const {
        return encode(text, add_bos);
    }

    // The bytes token `id` stands for (SPM: U+2581 -> ' ', "<0xXX>" -> that byte; control
    // tokens -> ""). `id` out of range: hill::error(exit_code::bad_input).
    virtual std::string token_to_piece(int32_t id) const = 0;

    // Concatenated pieces with the space prefix that encode() added removed from the start:
    // decode(encode(x, false)) == x.
    virtual std::string decode(const std::vector<int32_t> & ids) const = 0;

    virtual const hill::vocab & vocab() const = 0;
};

// Builds the tokenizer a GGUF file describes: `tokenizer.ggml.model` = "llama" (SentencePiece
// BPE, spm_tokenizer.h), "gpt2" (BPE, bpe_tokenizer.h) or "gemma4" (SentencePiece-style BPE,
// bpe_tokenizer.h, with the gemma4 pre-tokenizer whatever tokenizer.ggml.pre says). For "gpt2"
// and "gemma4": tokens, merges ("a b", rank order), token_type (3 control, 4 user-defined, 6
// byte), bos/eos/unknown ids (default: the "<|endoftext|>" token when present; none for
// ChatGLM-4), add_space_prefix (byte-level only), and `tokenizer.ggml.pre` choosing the
// pre-tokenizer: any name llama.cpp knows, with its regexes, ignore_merges and BOS rule
// (bpe_pre_tokenizer.h; absent: "default", as in llama.cpp). BOS rule: add_bos_token when
// present, else the pre-tokenizer's (true for the Llama-3 names, tekken, chameleon and Gemma 4,
// which has BOS even when add_bos_token says false, as in llama.cpp).
// Errors: missing or inconsistent tokenizer metadata, an unsupported model, a pre-tokenizer name
// llama.cpp does not know (listing the known ones) or one it knows that is not supported here
// (saying why), a merge naming pieces not in tokens, naming key and values.
std::unique_ptr<tokenizer> load_tokenizer(const gguf_file & gguf);

// Byte-level BPE from a Hugging Face tokenizer.json and, when `tokenizer_config_path` is not empty,
// its tokenizer_config.json. Supported: model.type "BPE" (merges as "a b" strings or [a, b] pairs,
// ignore_merges) whose pre_tokenizer has a ByteLevel step: ByteLevel alone (use_regex: the GPT-2
// pattern), or a Sequence of Split (pattern Regex or String, behavior "Isolated", invert false) and
// ByteLevel steps; normalizer null or NFC (NFC is not applied). added_tokens with special = true
// are control tokens, the others user-defined. A tokenizer.json that is not byte-level (Llama-2's
// Metaspace + byte_fallback, WordPiece, Unigram) is rejected naming the field: load such a model's
// GGUF file instead.
// BOS rule: tokenizer_config add_bos_token when present; else a special token that starts the
// post_processor's TemplateProcessing `single`; else true when tokenizer_config names a bos_token
// that is not also its eos_token (Llama-3 yes; GPT-2's "<|endoftext|>" doubles as both: no).
// bos/eos/unk: tokenizer_config bos_token/eos_token/unk_token (a string or {"content": ...}); a
// named token that is an ordinary vocab entry becomes a control token. Without them: BOS from the
// template, else "<|endoftext|>" when present, which is also the default EOS (GPT-2, Qwen base);
// UNK from model.unk_token. model.dropout is ignored (no dropout at inference).
// Errors (exit_code::bad_input): unreadable or malformed JSON, a missing or mistyped field, an
// unsupported type, a merge not in the vocab — naming the file and the field.
std::unique_ptr<tokenizer> load_tokenizer_json(const std::string & tokenizer_json_path,
                                               const std::string & tokenizer_config_path);

// Byte-level BPE from OpenAI's GPT-2 files encoder.json + vocab.bpe, which are also Hugging Face's
// vocab.json + merges.txt (GPT-2, OPT checkpoints without tokenizer.json): a JSON object piece ->
// id and a merges file ("#version" header line, then "a b" per line, rank order). GPT-2 pattern.
// "<|endoftext|>" when present is a control token and BOS = EOS; add_bos false. With a
// `tokenizer_config_path` (may be empty), its added_tokens_decoder, bos/eos/unk tokens and BOS rule
// apply as for load_tokenizer_json (OPT: add_bos_token = true, BOS "</s>").
// Errors: as load_tokenizer_json, naming the file and the line of a bad merge.
std::unique_ptr<tokenizer> load_vocab_merges_tokenizer(const std::string & vocab_json_path,
                                                       const std::string & merges_path,
                                                       const std::string & tokenizer_config_path);

// The tokenizer files of a folder, first found: tokenizer.json (Hugging Face), vocab.json +
// merges.txt (Hugging Face GPT-2/OPT), encoder.json + vocab.bpe (OpenAI GPT-2); tokenizer_config.json
// beside them is used when present. Errors: none of these present (listing what was looked for),
// then as the loader used.
std::unique_ptr<tokenizer> load_tokenizer_folder(const std::string & dir);

// Reads a llama2.c `tokenizer.bin` (int32 max_token_length, then per token: f32 score, int32 len,
// bytes) with `n_vocab` entries; BOS = 1, EOS = 2, UNK = 0 as llama2.c assigns them.
// Errors: truncated file, lengths past the end, size not matching n_vocab.
std::unique_ptr<tokenizer> load_llama2c_tokenizer(const std::string & path, int32_t n_vocab);

}  // namespace hill
