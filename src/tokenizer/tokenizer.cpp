#include "tokenizer/tokenizer.h"

#include <cstring>
#include <optional>

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/gguf_file.h"
#include "tokenizer/spm_tokenizer.h"

namespace hill {

namespace {

constexpr std::string_view k_space_marker = "\xE2\x96\x81";  // U+2581

bool is_byte_piece(std::string_view p) {
    const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
    return p.size() == 6 && p.substr(0, 3) == "<0x" && hex(p[3]) && hex(p[4]) && p[5] == '>';
}

// A token id from GGUF metadata `key`, `def` when absent; must lie in [0, n_vocab).
int32_t gguf_token_id(const gguf_file & gguf, const std::string & key, int32_t def, size_t n_vocab) {
    const std::optional<int64_t> v = gguf.get_int(key);
    if (!v) return def;
    if (*v < 0 || uint64_t(*v) >= n_vocab) {
        fail_input("'{}': {} = {} is out of range, expected a token id in [0, {})", gguf.name(), key, *v, n_vocab);
    }
    return int32_t(*v);
}

}  // namespace

std::unique_ptr<tokenizer> load_tokenizer(const gguf_file & gguf) {
    const std::string & file = gguf.name();
    const std::optional<std::string> model = gguf.get_string("tokenizer.ggml.model");
    if (!model) fail_input("'{}' has no tokenizer: metadata key tokenizer.ggml.model is missing", file);
    if (*model != "llama") {
        fail_input("'{}': tokenizer.ggml.model = '{}' is not supported (supported: 'llama')", file, *model);
    }

    vocab v;
    std::optional<std::vector<std::string>> tokens = gguf.get_string_array("tokenizer.ggml.tokens");
    if (!tokens) fail_input("'{}': metadata key tokenizer.ggml.tokens is missing", file);
    if (tokens->empty()) fail_input("'{}': tokenizer.ggml.tokens is empty", file);
    if (tokens->size() > size_t(INT32_MAX)) {
        fail_input("'{}': tokenizer.ggml.tokens has {} entries, at most {} supported", file, tokens->size(), INT32_MAX);
    }
    v.pieces = std::move(*tokens);
    const size_t n_vocab = v.pieces.size();

    if (std::optional<std::vector<float>> scores = gguf.get_float_array("tokenizer.ggml.scores")) {
        if (scores->size() != n_vocab) {
            fail_input("'{}': tokenizer.ggml.scores has {} entries, expected {} (as tokenizer.ggml.tokens)", file,
                       scores->size(), n_vocab);
        }
        v.scores = std::move(*scores);
    } else {
        v.scores.assign(n_vocab, 0.0f);
    }

    v.kinds.resize(n_vocab);
    if (std::optional<std::vector<int64_t>> types = gguf.get_int_array("tokenizer.ggml.token_type")) {
        if (types->size() != n_vocab) {
            fail_input("'{}': tokenizer.ggml.token_type has {} entries, expected {} (as tokenizer.ggml.tokens)", file,
                       types->size(), n_vocab);
        }
        for (size_t i = 0; i < n_vocab; ++i) {
            const int64_t t = (*types)[i];
            if (t == 0) {
                v.kinds[i] = token_kind::normal;  // llama.cpp's "undefined"
            } else if (t >= 1 && t <= 6) {
                v.kinds[i] = token_kind(t);
            } else {
                fail_input("'{}': tokenizer.ggml.token_type[{}] = {} (token '{}'), expected 0..6", file, i, t,
                           v.pieces[i]);
            }
            if (v.kinds[i] == token_kind::byte && !is_byte_piece(v.pieces[i])) {
                fail_input("'{}': token {} has type byte (6) but piece '{}', expected <0xXX>", file, i, v.pieces[i]);
            }
        }
    } else {
        for (size_t i = 0; i < n_vocab; ++i) {
            v.kinds[i] = is_byte_piece(v.pieces[i]) ? token_kind::byte : token_kind::normal;
        }
    }

    v.bos = gguf_token_id(gguf, "tokenizer.ggml.bos_token_id", 1, n_vocab);
    v.eos = gguf_token_id(gguf, "tokenizer.ggml.eos_token_id", 2, n_vocab);
    v.unk = gguf_token_id(gguf, "tokenizer.ggml.unknown_token_id", 0, n_vocab);
    v.add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
    v.add_space_prefix = gguf.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    return std::make_unique<spm_tokenizer>(std::move(v));
}

std::unique_ptr<tokenizer> load_llama2c_tokenizer(const std::string & path, int32_t n_vocab) {
    if (n_vocab < 3) fail_input("llama2.c tokenizer '{}': n_vocab = {}, expected at least 3", path, n_vocab);
    const mapped_file map(path);
    const uint8_t * data = map.data();
    const size_t size = map.size();
    size_t pos = 0;
    const auto read_bytes = [&](void * dst, size_t n, const char * what, int32_t i) {
        if (n > size - pos) {
            fail_input(
                "llama2.c tokenizer '{}' is truncated: {} of token {} needs {} bytes at offset {}, file has {} "
                "bytes (expected {} tokens)",
                path, what, i, n, pos, size, n_vocab);
        }
        std::memcpy(dst, data + pos, n);
        pos += n;
    };

    int32_t max_token_length = 0;
    if (size < 4)
        fail_input("llama2.c tokenizer '{}' is truncated: {} bytes, expected at least a 4-byte header", path, size);
    read_bytes(&max_token_length, 4, "header", 0);
    if (max_token_length < 0)
        fail_input("llama2.c tokenizer '{}': max_token_length = {}, expected >= 0", path, max_token_length);

    vocab v;
    v.pieces.resize(size_t(n_vocab));
    v.scores.resize(size_t(n_vocab));
    v.kinds.resize(size_t(n_vocab));
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (pos == size) {
            fail_input("llama2.c tokenizer '{}' holds {} tokens, but the model's vocabulary has {}: is it the "
                       "tokenizer of another model?", path, i, n_vocab);
        }
        int32_t len = 0;
        read_bytes(&v.scores[i], 4, "the score", i);
        read_bytes(&len, 4, "the length", i);
        if (len < 0 || size_t(len) > size - pos) {
            fail_input("llama2.c tokenizer '{}': token {} has length {} at offset {}, past the end of the {}-byte file",
                       path, i, len, pos - 4, size);
        }
        const std::string_view raw(reinterpret_cast<const char *>(data + pos), size_t(len));
        pos += size_t(len);
        // llama2.c exports pieces with U+2581 turned into ' '; store them as SentencePiece does.
        std::string & piece = v.pieces[i];
        piece.reserve(raw.size());
        for (const char c : raw) {
            if (c == ' ') {
                piece.append(k_space_marker);
            } else {
                piece.push_back(c);
            }
        }
        v.kinds[i] = is_byte_piece(piece) ? token_kind::byte : token_kind::normal;
    }
    if (pos != size) {
        fail_input("llama2.c tokenizer '{}' has {} bytes after token {}: it holds more tokens than the model's "
                   "vocabulary of {}; is it the tokenizer of another model?", path, size - pos, n_vocab - 1, n_vocab);
    }
    // llama2.c's fixed ids: 0 = <unk>, 1 = <s> (exported as "\n<s>\n"), 2 = </s> ("\n</s>\n").
    if (v.pieces[1] == "\n<s>\n") v.pieces[1] = "<s>";
    if (v.pieces[2] == "\n</s>\n") v.pieces[2] = "</s>";
    v.kinds[0] = token_kind::unknown;
    v.kinds[1] = token_kind::control;
    v.kinds[2] = token_kind::control;
    v.unk = 0;
    v.bos = 1;
    v.eos = 2;
    v.add_bos = true;
    v.add_space_prefix = true;
    return std::make_unique<spm_tokenizer>(std::move(v));
}

}  // namespace hill
