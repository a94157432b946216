// libFuzzer target: byte-level BPE encode must take any bytes (invalid UTF-8 included) without a
// crash, sanitizer report or exception, and decode(encode(x)) must give x back. The first input
// byte picks the pre-tokenizer (GPT-2, Qwen2, Llama-3 with ignore_merges) and special-token
// parsing. Build with -DHILL_BUILD_FUZZ=ON and clang; see tests/tokenizer.cmake.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "tokenizer/bpe_tokenizer.h"

namespace {

std::unique_ptr<hill::bpe_tokenizer> make(int which) {
    hill::bpe_config c;
    c.source = "fuzz-vocab";
    for (int b = 0; b < 256; ++b) c.vocab.pieces.push_back(hill::bpe_byte_to_piece(uint8_t(b)));
    const std::pair<const char *, const char *> merges[] = {{" ", "t"},  {"h", "e"}, {" t", "he"}, {"1", "2"},
                                                            {"12", "3"}, {" ", " "}, {"\n", "\n"}, {"\xC3", "\xA9"}};
    for (const auto & [a, b] : merges) {
        c.merges.emplace_back(hill::bpe_bytes_to_pieces(a), hill::bpe_bytes_to_pieces(b));
        c.vocab.pieces.push_back(hill::bpe_bytes_to_pieces(std::string(a) + b));
    }
    c.vocab.pieces.push_back(hill::bpe_bytes_to_pieces("the"));  // reachable only with ignore_merges
    c.vocab.kinds.assign(c.vocab.pieces.size(), hill::token_kind::normal);
    c.vocab.pieces.push_back("<|end|>");
    c.vocab.kinds.push_back(hill::token_kind::control);
    c.vocab.pieces.push_back("<x>");
    c.vocab.kinds.push_back(hill::token_kind::user_defined);
    const char * patterns[] = {hill::k_bpe_pattern_gpt2, hill::k_bpe_pattern_qwen2, hill::k_bpe_pattern_llama3};
    c.patterns = {patterns[which % 3]};
    c.ignore_merges = which % 3 == 2;
    return std::make_unique<hill::bpe_tokenizer>(std::move(c));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static const std::unique_ptr<hill::bpe_tokenizer> tokenizers[3] = {make(0), make(1), make(2)};
    if (size == 0) return 0;
    const hill::bpe_tokenizer & t = *tokenizers[data[0] % 3];
    const std::string text(reinterpret_cast<const char *>(data + 1), size - 1);
    if (t.decode(t.encode(text, false)) != text) std::abort();
    (void)t.decode(t.encode_with_special(text, true));
    return 0;
}
