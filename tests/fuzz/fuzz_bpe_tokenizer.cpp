// libFuzzer target: BPE encode must take any bytes (invalid UTF-8 included) without a crash,
// sanitizer report or exception, and decode(encode(x)) must give x back (SentencePiece style: with
// a literal U+2581 given back as ' '). The first input byte picks the pre-tokenizer — one of every
// GGUF pre-tokenizer llama.cpp knows (bpe_pre_tokenizer.h), with its ignore_merges and byte-level
// or SentencePiece-style mode — and special-token parsing. Build with -DHILL_BUILD_FUZZ=ON and
// clang; see tests/tokenizer.cmake.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/bpe_pre_tokenizer.h"
#include "tokenizer/bpe_tokenizer.h"

namespace {

std::unique_ptr<hill::bpe_tokenizer> make(const hill::bpe_pre_tokenizer & p) {
    hill::bpe_config c;
    c.source = "fuzz-vocab";
    c.byte_level = p.byte_level;
    // Piece text: byte-level, or raw UTF-8 with U+2581 for ' ' (SentencePiece style).
    const auto piece = [&](const std::string & s) {
        if (p.byte_level) return hill::bpe_bytes_to_pieces(s);
        std::string out;
        for (const char ch : s) out += ch == ' ' ? std::string("\xE2\x96\x81") : std::string(1, ch);
        return out;
    };
    for (int b = 0; b < 256; ++b) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "<0x%02X>", b);
        c.vocab.pieces.push_back(p.byte_level ? hill::bpe_byte_to_piece(uint8_t(b)) : std::string(hex));
        c.vocab.kinds.push_back(p.byte_level ? hill::token_kind::normal : hill::token_kind::byte);
    }
    if (!p.byte_level) {  // the characters the merges start from
        for (const char * s : {" ", "t", "h", "e", "1", "2", "3", "\n", "\xC3\xA9"}) {
            c.vocab.pieces.push_back(piece(s));
            c.vocab.kinds.push_back(hill::token_kind::normal);
        }
    }
    const std::pair<const char *, const char *> merges[] = {{" ", "t"},  {"h", "e"}, {" t", "he"}, {"1", "2"},
                                                            {"12", "3"}, {" ", " "}, {"\n", "\n"}, {"\xC3", "\xA9"}};
    for (const auto & [a, b] : merges) {
        if (!p.byte_level && std::string(a) == "\xC3") continue;  // no byte pieces to merge
        c.merges.emplace_back(piece(a), piece(b));
        c.vocab.pieces.push_back(piece(std::string(a) + b));
        c.vocab.kinds.push_back(hill::token_kind::normal);
    }
    c.vocab.pieces.push_back(piece("the"));  // reachable only with ignore_merges
    c.vocab.kinds.push_back(hill::token_kind::normal);
    c.vocab.pieces.push_back("<|end|>");
    c.vocab.kinds.push_back(hill::token_kind::control);
    c.vocab.pieces.push_back("<x>");
    c.vocab.kinds.push_back(hill::token_kind::user_defined);
    c.patterns.assign(p.patterns.begin(), p.patterns.end());
    c.ignore_merges = p.ignore_merges;
    c.whole_newline_runs = p.whole_newline_runs;
    return std::make_unique<hill::bpe_tokenizer>(std::move(c));
}

std::vector<std::unique_ptr<hill::bpe_tokenizer>> make_all() {
    std::vector<std::unique_ptr<hill::bpe_tokenizer>> out;
    for (const hill::bpe_pre_tokenizer & p : hill::bpe_pre_tokenizers()) {
        if (p.unsupported == nullptr) out.push_back(make(p));
    }
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static const std::vector<std::unique_ptr<hill::bpe_tokenizer>> tokenizers = make_all();
    if (size == 0) return 0;
    const hill::bpe_tokenizer & t = *tokenizers[data[0] % tokenizers.size()];
    const std::string text(reinterpret_cast<const char *>(data + 1), size - 1);
    std::string expected = text;
    if (!t.byte_level()) {  // SentencePiece style: U+2581 decodes as ' '
        for (size_t i; (i = expected.find("\xE2\x96\x81")) != std::string::npos;) expected.replace(i, 3, " ");
    }
    if (t.decode(t.encode(text, false)) != expected) std::abort();
    (void)t.decode(t.encode_with_special(text, true));
    return 0;
}
