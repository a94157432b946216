// Tokenizer tests on real vocabularies from the shared data folder (skip cleanly without it):
// llama.cpp's expected ids, the llama2.c export of the same vocab, round trips of whole books with
// encode throughput, and the stories260K greedy-decode oracle.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "format/gguf_file.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace hill {
namespace {

using test::round_trip_books;

using test::read_all;
using test::read_case;
using test::vocab_case;

using test::expect_matches;

#define LLAMACPP_DIR "tokenizers/llamacpp-vocab/"

TEST(tokenizer_data, llama_spm_gguf_matches_llama_cpp) {
    HILL_REQUIRE_DATA(gguf_path, LLAMACPP_DIR "ggml-vocab-llama-spm.gguf");
    HILL_REQUIRE_DATA(inp, LLAMACPP_DIR "ggml-vocab-llama-spm.gguf.inp");
    HILL_REQUIRE_DATA(out, LLAMACPP_DIR "ggml-vocab-llama-spm.gguf.out");
    const vocab_case c = read_case(inp, out);
    // 46 strings: llama.cpp's generator writes every string followed by the separator line, so
    // splitting on the separator alone leaves a 47th, empty, piece after the last one (and the
    // `.out` a 47th, empty, line after its final newline); that artifact is not a test string.
    EXPECT_EQ(c.inputs.size(), 46u);
    const auto t = load_tokenizer(*gguf_file::open(gguf_path));
    EXPECT_EQ(t->vocab().n_vocab(), 32000);
    EXPECT_EQ(t->vocab().bos, 1);
    EXPECT_EQ(t->vocab().eos, 2);
    EXPECT_TRUE(t->vocab().add_bos);
    expect_matches(*t, c, "llama-spm gguf");
    EXPECT_EQ(t->encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186}));
}

TEST(tokenizer_data, llama2c_export_matches_llama_cpp) {
    HILL_REQUIRE_DATA(bin, "tokenizers/llama2/tokenizer.bin");
    HILL_REQUIRE_DATA(inp, LLAMACPP_DIR "ggml-vocab-llama-spm.gguf.inp");
    HILL_REQUIRE_DATA(out, LLAMACPP_DIR "ggml-vocab-llama-spm.gguf.out");
    const vocab_case c = read_case(inp, out);
    const auto t = load_llama2c_tokenizer(bin, 32000);
    expect_matches(*t, c, "llama2 tokenizer.bin");

    // Same pieces as the GGUF vocab once normalised (U+2581, "<s>", byte kinds).
    const std::string gguf_path = test::data_path(LLAMACPP_DIR "ggml-vocab-llama-spm.gguf");
    if (!gguf_path.empty()) {
        const auto g = load_tokenizer(*gguf_file::open(gguf_path));
        ASSERT_EQ(g->vocab().n_vocab(), t->vocab().n_vocab());
        size_t n_diff = 0;
        for (int32_t i = 0; i < t->vocab().n_vocab(); ++i) {
            n_diff += g->vocab().pieces[i] != t->vocab().pieces[i] || g->vocab().kinds[i] != t->vocab().kinds[i];
        }
        EXPECT_EQ(n_diff, 0u);
    }
}

// Slow reference: llama2.c's encode (rescan all adjacent pairs after every merge, best score,
// leftmost on ties), on valid UTF-8 with byte fallback. O(n^2): for short texts only.
std::vector<int32_t> reference_encode(const vocab & v, const std::string & text) {
    const std::string sp = "\xE2\x96\x81";
    std::unordered_map<std::string, int32_t> ids;
    for (size_t i = 0; i < v.pieces.size(); ++i) {
        if (v.kinds[i] == token_kind::normal) ids.emplace(v.pieces[i], int32_t(i));
    }
    std::vector<std::string> sym;
    const std::string s = (v.add_space_prefix && !text.empty()) ? " " + text : text;
    for (size_t i = 0; i < s.size();) {
        const uint8_t c = uint8_t(s[i]);
        const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        sym.push_back(s[i] == ' ' ? sp : s.substr(i, len));
        i += len;
    }
    while (true) {
        int best = -1;
        float best_score = 0;
        for (size_t i = 0; i + 1 < sym.size(); ++i) {
            const auto it = ids.find(sym[i] + sym[i + 1]);
            if (it != ids.end() && (best < 0 || v.scores[it->second] > best_score)) {
                best = int(i);
                best_score = v.scores[it->second];
            }
        }
        if (best < 0) break;
        sym[best] += sym[best + 1];
        sym.erase(sym.begin() + best + 1);
    }
    std::vector<int32_t> out;
    for (const auto & p : sym) {
        const auto it = ids.find(p);
        if (it != ids.end()) {
            out.push_back(it->second);
            continue;
        }
        for (const char c : (p == sp ? std::string(" ") : p)) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "<0x%02X>", unsigned(uint8_t(c)));
            const auto b = std::find(v.pieces.begin(), v.pieces.end(), std::string(buf));
            out.push_back(b == v.pieces.end() ? v.unk : int32_t(b - v.pieces.begin()));
        }
    }
    return out;
}

// Snippets of a book at character boundaries.
std::vector<std::string> snippets(const std::string & text, size_t n, size_t len) {
    std::vector<std::string> out;
    for (size_t k = 0; k < n; ++k) {
        size_t a = text.size() * k / n;
        while (a < text.size() && (uint8_t(text[a]) & 0xC0) == 0x80) ++a;
        size_t b = std::min(text.size(), a + len);
        while (b < text.size() && (uint8_t(text[b]) & 0xC0) == 0x80) ++b;
        out.push_back(text.substr(a, b - a));
    }
    return out;
}

TEST(tokenizer_data, book_snippets_match_slow_reference) {
    HILL_REQUIRE_DATA(gguf_path, LLAMACPP_DIR "ggml-vocab-llama-spm.gguf");
    HILL_REQUIRE_DATA(book, "text/gutenberg/pg11_alice_in_wonderland.txt");
    HILL_REQUIRE_DATA(bin, "tokenizers/tok512/tok512.bin");
    const std::string text = read_all(book);
    const auto llama = load_tokenizer(*gguf_file::open(gguf_path));
    const auto tok512 = load_llama2c_tokenizer(bin, 512);
    for (const tokenizer * t : {llama.get(), tok512.get()}) {
        for (const std::string & x : snippets(text, 12, 400)) {
            ASSERT_EQ(t->encode(x, false), reference_encode(t->vocab(), x)) << "snippet '" << x << "'";
        }
    }
}

TEST(tokenizer_data, books_round_trip_llama_spm) {
    HILL_REQUIRE_DATA(gguf_path, LLAMACPP_DIR "ggml-vocab-llama-spm.gguf");
    HILL_REQUIRE_DATA(book, "text/gutenberg/pg11_alice_in_wonderland.txt");
    const auto t = load_tokenizer(*gguf_file::open(gguf_path));
    round_trip_books(*t, "llama-spm");
}

TEST(tokenizer_data, books_round_trip_tok512) {
    HILL_REQUIRE_DATA(bin, "tokenizers/tok512/tok512.bin");
    HILL_REQUIRE_DATA(book, "text/gutenberg/pg11_alice_in_wonderland.txt");
    const auto t = load_llama2c_tokenizer(bin, 512);
    round_trip_books(*t, "tok512");
}

TEST(tokenizer_data, stories260k_greedy_text) {
    HILL_REQUIRE_DATA(bin, "tokenizers/tok512/tok512.bin");
    HILL_REQUIRE_DATA(oracle, "models/llama2c/stories260K.greedy256.json");
    const auto j = nlohmann::json::parse(read_all(oracle));
    std::vector<int32_t> ids = j.at("ids").get<std::vector<int32_t>>();
    const std::string text = j.at("text").get<std::string>();
    const auto t = load_llama2c_tokenizer(bin, 512);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), t->vocab().bos);
    EXPECT_EQ(t->decode(ids), text);  // BOS decodes to ""
    ids.erase(ids.begin());
    EXPECT_EQ(t->decode(ids), text);
    EXPECT_EQ(t->decode(t->encode(text, false)), text);
}

}  // namespace
}  // namespace hill
