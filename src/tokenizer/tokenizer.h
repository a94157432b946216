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
    // crash). BOS is prepended when add_bos and the vocab has one.
    virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;

    // The bytes token `id` stands for (SPM: U+2581 -> ' ', "<0xXX>" -> that byte; control
    // tokens -> ""). `id` out of range: hill::error(exit_code::bad_input).
    virtual std::string token_to_piece(int32_t id) const = 0;

    // Concatenated pieces with the space prefix that encode() added removed from the start:
    // decode(encode(x, false)) == x.
    virtual std::string decode(const std::vector<int32_t> & ids) const = 0;

    virtual const hill::vocab & vocab() const = 0;
};

// Builds the tokenizer a GGUF file describes (`tokenizer.ggml.model` = "llama" for now).
// Errors: missing or inconsistent tokenizer metadata, unsupported model, naming key and values.
std::unique_ptr<tokenizer> load_tokenizer(const gguf_file & gguf);

// Reads a llama2.c `tokenizer.bin` (int32 max_token_length, then per token: f32 score, int32 len,
// bytes) with `n_vocab` entries; BOS = 1, EOS = 2, UNK = 0 as llama2.c assigns them.
// Errors: truncated file, lengths past the end, size not matching n_vocab.
std::unique_ptr<tokenizer> load_llama2c_tokenizer(const std::string & path, int32_t n_vocab);

}  // namespace hill
