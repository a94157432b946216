// Unit tests of the SentencePiece BPE tokenizer on hand-made vocabularies (no data files).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include "core/error.h"
#include "format/gguf_writer.h"
#include "test_util.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace hill {
namespace {

const std::string k_sp = "\xE2\x96\x81";  // U+2581

// A vocab laid out as llama's: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then `normal`
// pieces (' ' written as U+2581) with their scores. `with_bytes = false` leaves the byte pieces out.
vocab make_vocab(const std::vector<std::pair<std::string, float>> & normal, bool add_space_prefix = true,
                 bool with_bytes = true) {
    vocab v;
    const auto add = [&](const std::string & p, float s, token_kind k) {
        v.pieces.push_back(p);
        v.scores.push_back(s);
        v.kinds.push_back(k);
    };
    add("<unk>", 0, token_kind::unknown);
    add("<s>", 0, token_kind::control);
    add("</s>", 0, token_kind::control);
    if (with_bytes) {
        for (int b = 0; b < 256; ++b) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "<0x%02X>", b);
            add(buf, 0, token_kind::byte);
        }
    }
    for (const auto & [p, s] : normal) {
        std::string q;
        for (char c : p) {
            if (c == ' ') {
                q += k_sp;
            } else {
                q += c;
            }
        }
        add(q, s, token_kind::normal);
    }
    v.unk = 0;
    v.bos = 1;
    v.eos = 2;
    v.add_space_prefix = add_space_prefix;
    return v;
}

int32_t id_of(const tokenizer & t, const std::string & piece_with_spaces) {
    std::string q;
    for (char c : piece_with_spaces) {
        if (c == ' ') {
            q += k_sp;
        } else {
            q += c;
        }
    }
    const auto & p = t.vocab().pieces;
    for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] == q && t.vocab().kinds[i] != token_kind::byte) return int32_t(i);
    }
    ADD_FAILURE() << "no piece '" << piece_with_spaces << "'";
    return -1;
}

int32_t byte_id(uint8_t b) {
    return 3 + b;
}

// The pieces of `ids`, for readable failure messages.
std::string show(const tokenizer & t, const std::vector<int32_t> & ids) {
    std::string s;
    for (int32_t id : ids) s += "[" + t.vocab().pieces[id] + "]";
    return s;
}

// ---------------------------------------------------------------------------------------------
// Slow reference: llama2.c's algorithm (rescan every adjacent pair after each merge, take the best
// score, leftmost on ties), on the escaped text, with byte fallback per symbol.
std::vector<int32_t> reference_encode(const vocab & v, const std::string & text) {
    std::map<std::string, int32_t> ids;
    for (size_t i = 0; i < v.pieces.size(); ++i) {
        if (v.kinds[i] == token_kind::normal) ids.emplace(v.pieces[i], int32_t(i));
    }
    std::vector<int32_t> out;
    if (text.empty()) return out;
    std::string s = v.add_space_prefix ? " " + text : text;
    std::vector<std::string> sym;
    for (size_t i = 0; i < s.size(); ++i) {  // test alphabet: ASCII only
        sym.push_back(s[i] == ' ' ? k_sp : std::string(1, s[i]));
    }
    while (true) {
        float best = 0;
        int best_i = -1;
        for (size_t i = 0; i + 1 < sym.size(); ++i) {
            const auto it = ids.find(sym[i] + sym[i + 1]);
            if (it == ids.end()) continue;
            const float sc = v.scores[it->second];
            if (best_i < 0 || sc > best) {
                best = sc;
                best_i = int(i);
            }
        }
        if (best_i < 0) break;
        sym[best_i] += sym[best_i + 1];
        sym.erase(sym.begin() + best_i + 1);
    }
    for (const auto & p : sym) {
        const auto it = ids.find(p);
        if (it != ids.end()) {
            out.push_back(it->second);
        } else {
            for (unsigned char c : (p == k_sp ? std::string(" ") : p)) out.push_back(byte_id(c));
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------

TEST(spm_tokenizer, merges_follow_scores) {
    {
        spm_tokenizer t(make_vocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -1}, {"bc", -2}}, false));
        EXPECT_EQ(t.encode("abc", false), (std::vector<int32_t>{id_of(t, "ab"), id_of(t, "c")}));
    }
    {
        spm_tokenizer t(make_vocab({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -2}, {"bc", -1}}, false));
        EXPECT_EQ(t.encode("abc", false), (std::vector<int32_t>{id_of(t, "a"), id_of(t, "bc")}));
    }
    {
        // Ties go to the leftmost pair.
        spm_tokenizer t(make_vocab({{"a", -10}, {"aa", -1}}, false));
        EXPECT_EQ(t.encode("aaa", false), (std::vector<int32_t>{id_of(t, "aa"), id_of(t, "a")}));
        EXPECT_EQ(t.encode("aaaaa", false), (std::vector<int32_t>{id_of(t, "aa"), id_of(t, "aa"), id_of(t, "a")}));
    }
    {
        // Merges chain, best score first at every step: h e l l o -> h e l lo -> he l lo -> he llo
        // -> hello -> " hello". "ll" (-2) is never formed: "lo" (-0.5) takes its second 'l' first.
        spm_tokenizer t(make_vocab({{"h", -20},
                                    {"e", -20},
                                    {"l", -20},
                                    {"o", -20},
                                    {"he", -1},
                                    {"ll", -2},
                                    {"llo", -3},
                                    {"hello", -4},
                                    {"lo", -0.5f},
                                    {" ", -20},
                                    {" hello", -5}},
                                   true));
        EXPECT_EQ(t.encode("hello", false), (std::vector<int32_t>{id_of(t, " hello")}));
        EXPECT_EQ(t.encode("hell", false), (std::vector<int32_t>{id_of(t, " "), id_of(t, "he"), id_of(t, "ll")}));
    }
    {
        spm_tokenizer t(
            make_vocab({{"h", -20}, {"e", -20}, {"l", -20}, {"o", -20}, {"he", -1}, {"ll", -2}, {"lo", -0.5f}}, false));
        EXPECT_EQ(t.encode("hello", false), (std::vector<int32_t>{id_of(t, "he"), id_of(t, "l"), id_of(t, "lo")}));
    }
}

TEST(spm_tokenizer, byte_fallback) {
    spm_tokenizer t(make_vocab({{" ", -5}, {"a", -5}}, true));
    // "é" (C3 A9) is not a piece: its two bytes.
    EXPECT_EQ(t.encode("a\xC3\xA9", false),
              (std::vector<int32_t>{id_of(t, " "), id_of(t, "a"), byte_id(0xC3), byte_id(0xA9)}));
    // A 4-byte emoji.
    const std::string emoji = "\xF0\x9F\x98\x80";
    const auto ids = t.encode(emoji, false);
    ASSERT_EQ(ids.size(), 5u);
    EXPECT_EQ(ids[1], byte_id(0xF0));
    EXPECT_EQ(t.decode(ids), emoji);
    EXPECT_EQ(t.token_to_piece(byte_id('\n')), "\n");
}

TEST(spm_tokenizer, leading_space) {
    spm_tokenizer t(make_vocab({{" ", -5}, {"h", -9}, {"i", -9}, {"hi", -2}, {" hi", -1}}, true));
    EXPECT_EQ(t.encode("hi", false), (std::vector<int32_t>{id_of(t, " hi")}));
    EXPECT_EQ(t.encode("hi", true), (std::vector<int32_t>{1, id_of(t, " hi")}));
    EXPECT_EQ(t.encode(" hi", false), (std::vector<int32_t>{id_of(t, " "), id_of(t, " hi")}));
    EXPECT_EQ(t.decode(t.encode("hi", true)), "hi");
    EXPECT_EQ(t.decode(t.encode(" hi", false)), " hi");
    EXPECT_EQ(t.decode(t.encode("  hi hi", false)), "  hi hi");
    EXPECT_EQ(t.token_to_piece(id_of(t, " hi")), " hi");

    spm_tokenizer t2(make_vocab({{" ", -5}, {"h", -9}, {"i", -9}, {"hi", -2}, {" hi", -1}}, false));
    EXPECT_EQ(t2.encode("hi", false), (std::vector<int32_t>{id_of(t2, "hi")}));
    EXPECT_EQ(t2.decode(t2.encode(" hi", false)), " hi");
}

TEST(spm_tokenizer, control_tokens_never_from_text) {
    spm_tokenizer t(make_vocab({{"<", -5}, {"s", -5}, {">", -5}, {"/", -5}, {"<s", -1}, {"</", -1}}, false));
    for (const std::string text : {"<s>", "</s>", "<unk>", "<s><s>", "<0x41>"}) {
        const auto ids = t.encode(text, false);
        for (int32_t id : ids) {
            EXPECT_NE(t.vocab().kinds[id], token_kind::control) << text << " -> " << show(t, ids);
            EXPECT_NE(t.vocab().kinds[id], token_kind::unknown) << text << " -> " << show(t, ids);
        }
        EXPECT_EQ(t.decode(ids), text);
    }
    // "<0x41>" is text here, not the byte 'A'.
    EXPECT_NE(t.encode("<0x41>", false), (std::vector<int32_t>{byte_id('A')}));
    EXPECT_EQ(t.token_to_piece(1), "");
    EXPECT_EQ(t.token_to_piece(2), "");
    EXPECT_EQ(t.decode({1, 2}), "");
}

TEST(spm_tokenizer, empty_string) {
    spm_tokenizer t(make_vocab({{" ", -1}}));
    EXPECT_TRUE(t.encode("", false).empty());
    EXPECT_EQ(t.encode("", true), (std::vector<int32_t>{1}));
    EXPECT_EQ(t.decode({}), "");
    EXPECT_EQ(t.decode({1}), "");
}

TEST(spm_tokenizer, invalid_utf8_round_trips_as_bytes) {
    spm_tokenizer t(make_vocab({{" ", -1}, {"a", -1}, {"b", -1}, {"ab", -0.5f}}, true));
    const std::vector<std::string> bad = {
        "\xFF\xFE",              // never valid
        "\x80",                  // stray continuation
        "\xC3",                  // truncated 2-byte
        "\xE2\x82",              // truncated 3-byte
        "\xF0\x9F\x98",          // truncated 4-byte
        "\xC0\xAF",              // overlong '/'
        "\xC1\xBF",              // overlong
        "\xE0\x80\xAF",          // overlong 3-byte
        "\xF0\x80\x80\xAF",      // overlong 4-byte
        "\xED\xA0\x80",          // UTF-16 surrogate
        "\xF4\x90\x80\x80",      // above U+10FFFF
        "\xF8\x88\x80\x80\x80",  // 5-byte form
    };
    for (const auto & x : bad) {
        const auto ids = t.encode(x, false);
        // The prefix space, then one byte token per input byte.
        ASSERT_EQ(ids.size(), x.size() + 1) << show(t, ids);
        for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(ids[i + 1], byte_id(uint8_t(x[i])));
        EXPECT_EQ(t.decode(ids), x);
        // Around valid text, the valid part still merges.
        const std::string y = "ab" + x + "ab" + x;
        const auto ids2 = t.encode(y, false);
        EXPECT_EQ(t.decode(ids2), y);
        EXPECT_EQ(ids2[1], id_of(t, "ab"));
    }
    // A truncated sequence followed by valid bytes: only the lead byte is invalid.
    const auto ids = t.encode(
        "\xE2\x82"
        "ab",
        false);
    EXPECT_EQ(ids, (std::vector<int32_t>{id_of(t, " "), byte_id(0xE2), byte_id(0x82), id_of(t, "ab")}));
}

TEST(spm_tokenizer, literal_space_marker_round_trips) {
    spm_tokenizer t(make_vocab({{" ", -1}, {" a", -1}, {"a", -1}}, true));
    const std::string x = k_sp + "a " + k_sp + " a";
    EXPECT_EQ(t.decode(t.encode(x, false)), x);
}

TEST(spm_tokenizer, random_bytes_round_trip) {
    const uint32_t seed = test::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    spm_tokenizer t1(make_vocab({{" ", -1},
                                 {"a", -1},
                                 {" a", -0.5f},
                                 {"\xC3\xA9", -1},
                                 {"\xC3\xA9"
                                  "a",
                                  -0.2f}},
                                true));
    spm_tokenizer t2(make_vocab({{" ", -1}, {"a", -1}, {" a", -0.5f}}, false));
    // Bytes biased towards the interesting ones: ASCII, space, lead and continuation bytes.
    const std::string pool = std::string(" aa\n\xC3\xA9\xE2\x96\x81\xF0\x9F\x80\xBF\xFF\xC0\xED\xA0", 18);
    for (int it = 0; it < 2000; ++it) {
        const size_t n = rng() % 24;
        std::string x;
        for (size_t i = 0; i < n; ++i) x.push_back(rng() % 2 ? pool[rng() % pool.size()] : char(rng() % 256));
        for (const spm_tokenizer * t : {&t1, &t2}) {
            const auto ids = t->encode(x, false);
            ASSERT_EQ(t->decode(ids), x) << "text bytes: " << ::testing::PrintToString(x);
        }
    }
}

TEST(spm_tokenizer, fast_merge_matches_slow_reference) {
    const uint32_t seed = test::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const std::string alphabet = "abc ";
    for (int iv = 0; iv < 40; ++iv) {
        // Random vocab: all single characters, then random 2..6-character pieces with scores drawn
        // from a small set, so that ties are common.
        std::vector<std::pair<std::string, float>> normal = {{"a", -100}, {"b", -100}, {"c", -100}, {" ", -100}};
        std::map<std::string, bool> seen;
        for (int k = 0; k < 40; ++k) {
            std::string p;
            const size_t len = 2 + rng() % 5;
            for (size_t i = 0; i < len; ++i) p.push_back(alphabet[rng() % alphabet.size()]);
            if (seen[p]) continue;
            seen[p] = true;
            normal.push_back({p, -float(rng() % 6)});
        }
        const vocab v = make_vocab(normal, rng() % 2 == 0);
        spm_tokenizer t(v);
        for (int it = 0; it < 50; ++it) {
            std::string x;
            const size_t n = rng() % 40;
            for (size_t i = 0; i < n; ++i) x.push_back(alphabet[rng() % alphabet.size()]);
            const auto fast = t.encode(x, false);
            ASSERT_EQ(fast, reference_encode(v, x)) << "text '" << x << "': " << show(t, fast);
            ASSERT_EQ(t.decode(fast), x);
        }
    }
}

TEST(spm_tokenizer, unused_pieces_are_resegmented) {
    vocab v = make_vocab({{"a", -9}, {"b", -9}, {"c", -9}, {"ab", 0}, {"abc", -1}}, false);
    v.kinds[v.pieces.size() - 2] = token_kind::unused;  // "ab"
    spm_tokenizer t(v);
    EXPECT_EQ(t.encode("ab", false), (std::vector<int32_t>{id_of(t, "a"), id_of(t, "b")}));
    EXPECT_EQ(t.encode("abc", false), (std::vector<int32_t>{id_of(t, "abc")}));
    EXPECT_EQ(t.decode(t.encode("abab", false)), "abab");
}

TEST(spm_tokenizer, unknown_without_byte_pieces) {
    spm_tokenizer t(make_vocab({{" ", -1}, {"a", -1}}, true, false));
    EXPECT_EQ(t.encode("a\xC3\xA9"
                       "a",
                       false),
              (std::vector<int32_t>{3, 4, 0, 4}));
    vocab v = make_vocab({{"a", -1}}, false, false);
    v.unk = -1;
    spm_tokenizer t2(v);
    EXPECT_THROW(t2.encode("b", false), error);
}

TEST(spm_tokenizer, bad_vocab_and_ids) {
    vocab v = make_vocab({{"a", -1}});
    v.scores.pop_back();
    EXPECT_THROW(spm_tokenizer{v}, error);
    v = make_vocab({{"a", -1}});
    v.bos = int32_t(v.pieces.size());
    EXPECT_THROW(spm_tokenizer{v}, error);
    v = make_vocab({{"a", -1}});
    v.pieces[3] = "<0xZZ>";
    EXPECT_THROW(spm_tokenizer{v}, error);
    EXPECT_THROW(spm_tokenizer{vocab{}}, error);

    spm_tokenizer t(make_vocab({{"a", -1}}));
    EXPECT_THROW(t.token_to_piece(-1), error);
    EXPECT_THROW(t.token_to_piece(t.vocab().n_vocab()), error);
    try {
        t.decode({0, 999999});
        FAIL() << "expected an error";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::bad_input);
    }
}

// ---------------------------------------------------------------------------------------------
// llama2.c tokenizer.bin

void write_llama2c(const std::string & path, const std::vector<std::pair<std::string, float>> & tokens,
                   int32_t max_len = 16) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char *>(&max_len), 4);
    for (const auto & [p, s] : tokens) {
        const int32_t len = int32_t(p.size());
        f.write(reinterpret_cast<const char *>(&s), 4);
        f.write(reinterpret_cast<const char *>(&len), 4);
        f.write(p.data(), len);
    }
}

std::vector<std::pair<std::string, float>> llama2c_tokens() {
    std::vector<std::pair<std::string, float>> t = {{"<unk>", 0}, {"\n<s>\n", 0}, {"\n</s>\n", 0}};
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "<0x%02X>", b);
        t.push_back({buf, 0});
    }
    t.push_back({" h", -1});
    t.push_back({"h", -2});
    t.push_back({"i", -2});
    t.push_back({" hi", -0.5f});
    t.push_back({" ", -3});
    return t;
}

using test::error_of;

TEST(llama2c_tokenizer, loads_and_normalises) {
    test::temp_dir dir;
    const std::string path = dir.file("tok.bin");
    const auto toks = llama2c_tokens();
    write_llama2c(path, toks);
    const auto t = load_llama2c_tokenizer(path, int32_t(toks.size()));
    const vocab & v = t->vocab();
    EXPECT_EQ(v.n_vocab(), int32_t(toks.size()));
    EXPECT_EQ(v.kinds[0], token_kind::unknown);
    EXPECT_EQ(v.kinds[1], token_kind::control);
    EXPECT_EQ(v.kinds[2], token_kind::control);
    EXPECT_EQ(v.kinds[3 + 0x0A], token_kind::byte);
    EXPECT_EQ(v.pieces[259], k_sp + "h");  // ' ' stored as U+2581
    EXPECT_EQ(v.pieces[1], "<s>");
    EXPECT_EQ(v.bos, 1);
    EXPECT_EQ(v.eos, 2);
    EXPECT_EQ(v.unk, 0);
    EXPECT_EQ(t->encode("hi", true), (std::vector<int32_t>{1, 262}));
    EXPECT_EQ(t->encode("hi\n", false), (std::vector<int32_t>{262, 3 + '\n'}));
    EXPECT_EQ(t->decode({1, 262, 3 + '\n'}), "hi\n");
    EXPECT_EQ(t->token_to_piece(259), " h");
}

TEST(llama2c_tokenizer, corrupt_files) {
    test::temp_dir dir;
    const auto toks = llama2c_tokens();
    const int32_t n = int32_t(toks.size());
    const std::string good = dir.file("good.bin");
    write_llama2c(good, toks);
    std::string bytes;
    {
        std::ifstream f(good, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(f), {});
    }
    const auto write = [&](const std::string & name, const std::string & b) {
        std::ofstream(dir.file(name), std::ios::binary).write(b.data(), std::streamsize(b.size()));
        return dir.file(name);
    };

    // n_vocab mismatch: fewer tokens in the file, or more.
    std::string msg = error_of([&] { load_llama2c_tokenizer(good, n + 1); });
    EXPECT_NE(msg.find("good.bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("holds {} tokens, but the model's vocabulary has {}", n, n + 1)), std::string::npos)
        << msg;
    msg = error_of([&] { load_llama2c_tokenizer(good, n - 1); });
    EXPECT_NE(msg.find("more tokens than the model's vocabulary"), std::string::npos) << msg;

    // Truncated at every length: always a clean error.
    for (size_t len = 0; len < bytes.size(); len += 7) {
        const std::string p = write("cut.bin", bytes.substr(0, len));
        msg = error_of([&] { load_llama2c_tokenizer(p, n); });
        EXPECT_NE(msg.find("cut.bin"), std::string::npos) << msg;
    }

    // A length past the end, and a negative one.
    for (const int32_t bad_len : {1 << 30, -5}) {
        std::string b = bytes;
        std::memcpy(&b[4 + 4], &bad_len, 4);  // token 0's length
        const std::string p = write("len.bin", b);
        msg = error_of([&] { load_llama2c_tokenizer(p, n); });
        EXPECT_NE(msg.find("length"), std::string::npos) << msg;
    }

    // Missing file: a usage error from the file layer.
    EXPECT_THROW(load_llama2c_tokenizer(dir.file("missing.bin"), n), error);
}

// ---------------------------------------------------------------------------------------------
// GGUF metadata

void write_gguf_vocab(const std::string & path, const std::vector<std::string> & pieces, bool with_types,
                      bool with_scores, const std::string & model = "llama") {
    gguf_writer w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", model);
    w.set_string_array("tokenizer.ggml.tokens", pieces);
    if (with_scores) {
        std::vector<float> s(pieces.size());
        for (size_t i = 0; i < s.size(); ++i) s[i] = -float(i);
        w.set_f32_array("tokenizer.ggml.scores", s);
    }
    if (with_types) {
        std::vector<int32_t> t(pieces.size(), 1);
        t[0] = 2;
        t[1] = t[2] = 3;
        t[3] = 6;
        w.set_i32_array("tokenizer.ggml.token_type", t);
    }
    w.write(path);
}

TEST(gguf_tokenizer, metadata_and_defaults) {
    test::temp_dir dir;
    const std::vector<std::string> pieces = {"<unk>", "<s>", "</s>", "<0x0A>", k_sp, "a", k_sp + "a"};
    write_gguf_vocab(dir.file("v.gguf"), pieces, false, false);
    auto t = load_tokenizer(*gguf_file::open(dir.file("v.gguf")));
    const vocab & v = t->vocab();
    EXPECT_EQ(v.n_vocab(), 7);
    EXPECT_EQ(v.bos, 1);
    EXPECT_EQ(v.eos, 2);
    EXPECT_EQ(v.unk, 0);
    EXPECT_TRUE(v.add_bos);
    EXPECT_TRUE(v.add_space_prefix);
    EXPECT_EQ(v.kinds[3], token_kind::byte);  // inferred from "<0x0A>"
    EXPECT_EQ(v.kinds[1], token_kind::normal);
    EXPECT_EQ(v.scores[6], 0.0f);
    EXPECT_EQ(t->encode("a\n", true), (std::vector<int32_t>{1, 6, 3}));

    gguf_writer w;
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", pieces);
    w.set_u32("tokenizer.ggml.bos_token_id", 5);
    w.set_u32("tokenizer.ggml.eos_token_id", 4);
    w.set_u32("tokenizer.ggml.unknown_token_id", 3);
    w.set_bool("tokenizer.ggml.add_bos_token", false);
    w.set_bool("tokenizer.ggml.add_space_prefix", false);
    w.write(dir.file("w.gguf"));
    t = load_tokenizer(*gguf_file::open(dir.file("w.gguf")));
    EXPECT_EQ(t->vocab().bos, 5);
    EXPECT_EQ(t->vocab().eos, 4);
    EXPECT_EQ(t->vocab().unk, 3);
    EXPECT_FALSE(t->vocab().add_bos);
    EXPECT_FALSE(t->vocab().add_space_prefix);

    write_gguf_vocab(dir.file("x.gguf"), pieces, true, true);
    t = load_tokenizer(*gguf_file::open(dir.file("x.gguf")));
    EXPECT_EQ(t->vocab().kinds[1], token_kind::control);
    EXPECT_EQ(t->vocab().scores[6], -6.0f);
}

TEST(gguf_tokenizer, bad_metadata) {
    test::temp_dir dir;
    const std::vector<std::string> pieces = {"<unk>", "<s>", "</s>", "<0x0A>", "a"};

    write_gguf_vocab(dir.file("bert.gguf"), pieces, true, true, "bert");
    std::string msg = error_of([&] { load_tokenizer(*gguf_file::open(dir.file("bert.gguf"))); });
    EXPECT_NE(msg.find("tokenizer.ggml.model"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bert"), std::string::npos) << msg;
    EXPECT_NE(msg.find("llama"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gpt2"), std::string::npos) << msg;  // byte-level BPE: test_bpe_tokenizer.cpp

    {
        gguf_writer w;
        w.set_string("general.architecture", "llama");
        w.write(dir.file("none.gguf"));
    }
    msg = error_of([&] { load_tokenizer(*gguf_file::open(dir.file("none.gguf"))); });
    EXPECT_NE(msg.find("tokenizer.ggml.model"), std::string::npos) << msg;

    {
        gguf_writer w;
        w.set_string("tokenizer.ggml.model", "llama");
        w.set_string_array("tokenizer.ggml.tokens", pieces);
        w.set_f32_array("tokenizer.ggml.scores", {0, 0, 0});
        w.write(dir.file("scores.gguf"));
    }
    msg = error_of([&] { load_tokenizer(*gguf_file::open(dir.file("scores.gguf"))); });
    EXPECT_NE(msg.find("tokenizer.ggml.scores"), std::string::npos) << msg;

    {
        gguf_writer w;
        w.set_string("tokenizer.ggml.model", "llama");
        w.set_string_array("tokenizer.ggml.tokens", pieces);
        w.set_i32_array("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 1});
        w.write(dir.file("types.gguf"));
    }
    msg = error_of([&] { load_tokenizer(*gguf_file::open(dir.file("types.gguf"))); });
    EXPECT_NE(msg.find("tokenizer.ggml.token_type"), std::string::npos) << msg;

    {
        gguf_writer w;
        w.set_string("tokenizer.ggml.model", "llama");
        w.set_string_array("tokenizer.ggml.tokens", pieces);
        w.set_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 6, 9});
        w.write(dir.file("kind.gguf"));
    }
    msg = error_of([&] { load_tokenizer(*gguf_file::open(dir.file("kind.gguf"))); });
    EXPECT_NE(msg.find("token_type[4]"), std::string::npos) << msg;

    {
        gguf_writer w;
        w.set_string("tokenizer.ggml.model", "llama");
        w.set_string_array("tokenizer.ggml.tokens", pieces);
        w.set_u32("tokenizer.ggml.bos_token_id", 5);
        w.write(dir.file("bos.gguf"));
    }
    msg = error_of([&] { load_tokenizer(*gguf_file::open(dir.file("bos.gguf"))); });
    EXPECT_NE(msg.find("bos_token_id"), std::string::npos) << msg;

    {
        gguf_writer w;
        w.set_string("tokenizer.ggml.model", "llama");
        w.write(dir.file("notokens.gguf"));
    }
    msg = error_of([&] { load_tokenizer(*gguf_file::open(dir.file("notokens.gguf"))); });
    EXPECT_NE(msg.find("tokenizer.ggml.tokens"), std::string::npos) << msg;
}

}  // namespace
}  // namespace hill
