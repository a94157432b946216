// Unit tests of the byte-level BPE tokenizer on hand-made vocabularies (no data files): the byte
// table, merge order, ignore_merges, pre-tokenizer boundaries, added and special tokens, BOS
// rules, invalid UTF-8, the fast merge loop against a slow reference, and the loaders' errors.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "core/error.h"
#include "format/gguf_file.h"
#include "format/gguf_writer.h"
#include "test_util.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace hill {
namespace {

using ids_t = std::vector<int32_t>;

using test::error_of;

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

// A vocab of the 256 byte pieces (ids 0..255, byte b = id b) followed by `extra` pieces given as
// plain bytes (turned into byte-level text), and merges given as plain-byte pairs.
bpe_config make_config(const std::vector<std::string> & extra,
                       const std::vector<std::pair<std::string, std::string>> & merges,
                       std::vector<std::string> patterns = {}) {
    bpe_config c;
    c.source = "test-vocab";
    for (int b = 0; b < 256; ++b) c.vocab.pieces.push_back(bpe_byte_to_piece(uint8_t(b)));
    for (const auto & e : extra) c.vocab.pieces.push_back(bpe_bytes_to_pieces(e));
    c.vocab.kinds.assign(c.vocab.pieces.size(), token_kind::normal);
    for (const auto & [a, b] : merges) c.merges.emplace_back(bpe_bytes_to_pieces(a), bpe_bytes_to_pieces(b));
    c.patterns = std::move(patterns);
    c.vocab.add_bos = false;
    c.vocab.add_space_prefix = false;
    return c;
}

// Adds a token of `kind` with plain text `text`; returns its id.
int32_t add_token(bpe_config & c, const std::string & text, token_kind kind) {
    c.vocab.pieces.push_back(text);
    c.vocab.kinds.push_back(kind);
    return int32_t(c.vocab.pieces.size() - 1);
}

// The pieces of `ids` as plain bytes, for readable expectations.
std::vector<std::string> pieces_of(const tokenizer & t, const ids_t & ids) {
    std::vector<std::string> out;
    for (const int32_t id : ids) out.push_back(t.token_to_piece(id));
    return out;
}

using strs = std::vector<std::string>;

TEST(bpe_tokenizer, byte_table) {
    std::set<std::string> seen;
    for (int b = 0; b < 256; ++b) {
        const std::string p = bpe_byte_to_piece(uint8_t(b));
        EXPECT_TRUE(seen.insert(p).second) << b;
        if (b >= '!' && b <= '~') {
            EXPECT_EQ(p, std::string(1, char(b)));
        }
    }
    EXPECT_EQ(bpe_byte_to_piece(' '), "\xC4\xA0");   // U+0120 'Ġ'
    EXPECT_EQ(bpe_byte_to_piece('\n'), "\xC4\x8A");  // U+010A 'Ċ'
    EXPECT_EQ(bpe_byte_to_piece(0xA1), "\xC2\xA1");  // printable Latin-1 stands for itself
    EXPECT_EQ(bpe_byte_to_piece(0xAD), "\xC5\x83");  // soft hyphen: the last of the 68, U+0143
    EXPECT_EQ(bpe_bytes_to_pieces(" Hi\n"), "\xC4\xA0Hi\xC4\x8A");
}

TEST(bpe_tokenizer, lowest_rank_merges_first) {
    // "abc": (b, c) has rank 0, so "a" + "bc" although (a, b) comes first in the text.
    bpe_tokenizer t(make_config({"ab", "bc"}, {{"b", "c"}, {"a", "b"}}));
    EXPECT_EQ(pieces_of(t, t.encode("abc", false)), (strs{"a", "bc"}));
    bpe_tokenizer u(make_config({"ab", "bc"}, {{"a", "b"}, {"b", "c"}}));
    EXPECT_EQ(pieces_of(u, u.encode("abc", false)), (strs{"ab", "c"}));
    EXPECT_EQ(u.n_merges(), 2);
}

TEST(bpe_tokenizer, equal_pairs_merge_leftmost_first) {
    bpe_tokenizer t(make_config({"aa", "aaaa"}, {{"a", "a"}, {"aa", "aa"}}));
    EXPECT_EQ(pieces_of(t, t.encode("aaa", false)), (strs{"aa", "a"}));
    EXPECT_EQ(pieces_of(t, t.encode("aaaaa", false)), (strs{"aaaa", "a"}));
    EXPECT_EQ(pieces_of(t, t.encode("aaaaaaa", false)), (strs{"aaaa", "aa", "a"}));
}

TEST(bpe_tokenizer, merge_chains_rebuild_pairs) {
    // After "b c" the new pair ("a", "bc") becomes possible, then ("abc", "d").
    bpe_tokenizer t(make_config({"bc", "abc", "abcd"}, {{"b", "c"}, {"a", "bc"}, {"abc", "d"}}));
    EXPECT_EQ(pieces_of(t, t.encode("abcd", false)), (strs{"abcd"}));
    EXPECT_EQ(pieces_of(t, t.encode("xabcdy", false)), (strs{"x", "abcd", "y"}));
}

TEST(bpe_tokenizer, ignore_merges_takes_whole_vocab_pre_tokens) {
    // "abc" is in the vocab but no merge path leads to it (the merges give "ab" + "c").
    bpe_config c = make_config({"ab", "abc"}, {{"a", "b"}});
    bpe_tokenizer plain(c);
    EXPECT_EQ(pieces_of(plain, plain.encode("abc", false)), (strs{"ab", "c"}));
    c.ignore_merges = true;
    bpe_tokenizer ignoring(c);
    EXPECT_EQ(pieces_of(ignoring, ignoring.encode("abc", false)), (strs{"abc"}));
    EXPECT_EQ(pieces_of(ignoring, ignoring.encode("abcc", false)), (strs{"ab", "c", "c"}));
}

TEST(bpe_tokenizer, merges_stay_inside_pre_tokens) {
    // GPT-2's pattern cuts " hello world" into " hello" and " world": the merge ("o", " ") must not
    // apply across the cut, while (" ", "w") applies inside " world".
    bpe_tokenizer t(make_config({"o ", " w"}, {{"o", " "}, {" ", "w"}}, {k_bpe_pattern_gpt2}));
    EXPECT_EQ(pieces_of(t, t.encode("hello world", false)), (strs{"h", "e", "l", "l", "o", " w", "o", "r", "l", "d"}));
    bpe_tokenizer whole(make_config({"o ", " w"}, {{"o", " "}, {" ", "w"}}));  // no pre-tokenizer
    EXPECT_EQ(pieces_of(whole, whole.encode("o w", false)), (strs{"o ", "w"}));
}

TEST(bpe_tokenizer, pre_tokenizer_patterns_split_like_hf) {
    // Every pre-token becomes exactly one token when the vocab holds it with a merge path; the
    // expected splits follow from the patterns (GPT-2: " ?\p{L}+", "\s+(?!\S)"; Qwen2: single
    // digits; Llama-3: digits in threes, case-insensitive contractions).
    struct case_t {
        const char * pattern;
        std::string text;
        strs expected;
    };
    const std::vector<case_t> cases = {
        {k_bpe_pattern_gpt2, "Hi  you're 123", {"Hi", " ", " you", "'re", " 123"}},
        {k_bpe_pattern_qwen2, "Hi  you'RE 123", {"Hi", " ", " you", "'RE", " ", "1", "2", "3"}},
        {k_bpe_pattern_llama3, "Hi  you'RE 12345", {"Hi", " ", " you", "'RE", " ", "123", "45"}},
        {k_bpe_pattern_llama3, "a\n\n b", {"a", "\n\n", " b"}},
    };
    for (const case_t & k : cases) {
        // Merges that build each expected pre-token from its bytes left to right.
        std::vector<std::string> extra;
        std::vector<std::pair<std::string, std::string>> merges;
        std::set<std::string> have;
        for (const std::string & p : k.expected) {
            for (size_t n = 2; n <= p.size(); ++n) {
                if (have.insert(p.substr(0, n)).second) {
                    extra.push_back(p.substr(0, n));
                    merges.emplace_back(p.substr(0, n - 1), p.substr(n - 1, 1));
                }
            }
        }
        bpe_tokenizer t(make_config(extra, merges, {k.pattern}));
        EXPECT_EQ(pieces_of(t, t.encode(k.text, false)), k.expected) << k.text;
    }
}

TEST(bpe_tokenizer, several_patterns_and_empty_matches) {
    // The second pattern splits the pieces of the first; an empty match cuts the text where it
    // matches (as in HF tokenizers' Split and llama.cpp: SuperBPE's lookahead-only pattern).
    bpe_tokenizer t(make_config({"ab", "cd"}, {{"a", "b"}, {"c", "d"}}, {"\\s+|\\S+", "b|[^b]+"}));
    EXPECT_EQ(pieces_of(t, t.encode("abcd", false)), (strs{"a", "b", "cd"}));
    bpe_tokenizer e(make_config({"ab"}, {{"a", "b"}}, {"x*"}));
    EXPECT_EQ(pieces_of(e, e.encode("abxab", false)), (strs{"a", "b", "x", "a", "b"}));
    EXPECT_EQ(e.decode(e.encode("abxab", false)), "abxab");
    bpe_tokenizer l(make_config({"ab"}, {{"a", "b"}}, {"(?=b)"}));  // cuts before every "b"
    EXPECT_EQ(l.pre_tokenize("abab"), (strs{"a", "ba", "b"}));
    EXPECT_EQ(pieces_of(l, l.encode("abab", false)), (strs{"a", "b", "a", "b"}));
}

TEST(bpe_tokenizer, added_tokens) {
    bpe_config c = make_config({"ab"}, {{"a", "b"}}, {k_bpe_pattern_gpt2});
    const int32_t eot = add_token(c, "<|eot|>", token_kind::control);
    const int32_t eo = add_token(c, "<|eo", token_kind::user_defined);
    const int32_t think = add_token(c, "<think>", token_kind::user_defined);
    c.vocab.eos = eot;
    bpe_tokenizer t(c);

    // User-defined tokens always; control tokens only with encode_with_special.
    ids_t ids = t.encode("ab<think>ab", false);
    EXPECT_EQ(pieces_of(t, ids), (strs{"ab", "<think>", "ab"}));
    EXPECT_EQ(ids[1], think);
    ids = t.encode("x<|eot|>", false);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), eot), 0);
    EXPECT_EQ(ids[1], eo);  // the user-defined "<|eo" still matches inside the control text
    EXPECT_EQ(t.decode(ids), "x<|eot|>");
    ids = t.encode_with_special("x<|eot|>", false);
    EXPECT_EQ(ids, (ids_t{'x', eot}));  // longest match wins over "<|eo"
    EXPECT_EQ(t.decode(ids), "x");      // control tokens decode to ""
    EXPECT_EQ(t.token_to_piece(eot), "");
    EXPECT_EQ(t.token_to_piece(think), "<think>");
    // Around an added token the text is pre-tokenized on its own: no merge across it.
    EXPECT_EQ(pieces_of(t, t.encode("a<think>b", false)), (strs{"a", "<think>", "b"}));
}

TEST(bpe_tokenizer, added_token_strip_and_single_word) {
    bpe_config c = make_config({}, {});
    const int32_t m = add_token(c, "<m>", token_kind::user_defined);
    const int32_t w = add_token(c, "ok", token_kind::user_defined);
    c.added = {{m, true, true, false}, {w, false, false, true}};
    bpe_tokenizer t(c);
    EXPECT_EQ(t.encode("a  <m>  b", false), (ids_t{'a', m, 'b'}));
    EXPECT_EQ(t.encode("ok", false), (ids_t{w}));
    EXPECT_EQ(t.encode("a ok.", false), (ids_t{'a', ' ', w, '.'}));
    EXPECT_EQ(t.encode("book", false), (ids_t{'b', 'o', 'o', 'k'}));  // not a single word there

    c.added = {{5, false, false, false}};  // flags for a normal token
    EXPECT_HAS(error_of([&] { bpe_tokenizer bad(c); }), "id 5");
}

TEST(bpe_tokenizer, bos_rule) {
    bpe_config c = make_config({}, {});
    c.vocab.bos = add_token(c, "<s>", token_kind::control);
    c.vocab.add_bos = true;
    bpe_tokenizer with(c);
    EXPECT_EQ(with.encode("a", true), (ids_t{c.vocab.bos, 'a'}));
    EXPECT_EQ(with.encode("a", false), (ids_t{'a'}));
    EXPECT_EQ(with.decode(with.encode("a", true)), "a");
    c.vocab.add_bos = false;  // GPT-2, Qwen: the model's rule says no BOS even when asked
    bpe_tokenizer without(c);
    EXPECT_EQ(without.encode("a", true), (ids_t{'a'}));
}

TEST(bpe_tokenizer, add_prefix_space) {
    bpe_config c = make_config({" a"}, {{" ", "a"}}, {k_bpe_pattern_gpt2});
    c.vocab.add_space_prefix = true;
    bpe_tokenizer t(c);
    EXPECT_EQ(pieces_of(t, t.encode("a", false)), (strs{" a"}));
    EXPECT_EQ(pieces_of(t, t.encode(" a", false)), (strs{" a"}));  // already starts with ' '
    EXPECT_EQ(t.encode("", false), ids_t{});
}

TEST(bpe_tokenizer, invalid_utf8_round_trips) {
    bpe_tokenizer t(make_config({"ab"}, {{"a", "b"}}, {k_bpe_pattern_llama3}));
    const std::vector<std::string> bad = {
        "\xff",
        "ab\xfe"
        "ab",
        "\xe2\x82",
        "\xc0\xaf",
        "\xed\xa0\x80",
        "\xf4\x90\x80\x80",
        "a\x80"
        "b",
        std::string("a\0b", 3),
        "\xf0\x9f\x98",
        "ok \xe2\x82\xac \xe2\x82 end",
    };
    for (const std::string & s : bad) {
        const ids_t ids = t.encode(s, false);
        EXPECT_EQ(t.decode(ids), s);
    }
    // An invalid byte is a pre-token of its own, so no merge reaches across it.
    EXPECT_EQ(pieces_of(t, t.encode("a\xff"
                                    "b",
                                    false)),
              (strs{"a", "\xff", "b"}));
    EXPECT_EQ(pieces_of(t, t.encode("ab\xff"
                                    "ab",
                                    false)),
              (strs{"ab", "\xff", "ab"}));

    // Random bytes never crash and always round-trip.
    const uint32_t seed = test::fresh_seed();
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    for (int k = 0; k < 300; ++k) {
        std::string s(rng() % 40, '\0');
        for (char & ch : s) ch = char(rng() % 4 == 0 ? 0x80 + rng() % 128 : rng() % 128);
        EXPECT_EQ(t.decode(t.encode(s, false)), s);
    }
}

TEST(bpe_tokenizer, missing_byte_token) {
    bpe_config c = make_config({}, {});
    c.vocab.pieces[0x7F] = "DEL-is-gone";
    bpe_tokenizer t(c);
    EXPECT_HAS(error_of([&] { t.encode("a\x7f", false); }), "0x7F");
    c.vocab.unk = add_token(c, "<unk>", token_kind::unknown);
    bpe_tokenizer u(c);
    EXPECT_EQ(u.encode("a\x7f", false), (ids_t{'a', c.vocab.unk}));
}

// Slow reference BPE: rescan all adjacent pairs, merge the lowest rank (leftmost), repeat.
std::vector<std::string> reference_bpe(const std::string & word,
                                       const std::vector<std::pair<std::string, std::string>> & merges) {
    std::map<std::pair<std::string, std::string>, size_t> rank;
    for (size_t r = 0; r < merges.size(); ++r) rank.emplace(merges[r], r);
    std::vector<std::string> sym;
    for (const char ch : word) sym.emplace_back(1, ch);
    while (true) {
        size_t best = SIZE_MAX, at = 0;
        for (size_t i = 0; i + 1 < sym.size(); ++i) {
            const auto it = rank.find({sym[i], sym[i + 1]});
            if (it != rank.end() && it->second < best) {
                best = it->second;
                at = i;
            }
        }
        if (best == SIZE_MAX) return sym;
        sym[at] += sym[at + 1];
        sym.erase(sym.begin() + long(at) + 1);
    }
}

TEST(bpe_tokenizer, merge_loop_matches_slow_reference) {
    const uint32_t seed = test::fresh_seed();
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    for (int round = 0; round < 20; ++round) {
        // Random merges over a 4-letter alphabet, each joining two tokens that exist already.
        std::vector<std::string> tokens = {"a", "b", "c", "d"};
        std::vector<std::string> extra;
        std::vector<std::pair<std::string, std::string>> merges;
        std::set<std::string> have(tokens.begin(), tokens.end());
        for (int k = 0; k < 60; ++k) {
            const std::string & x = tokens[rng() % tokens.size()];
            const std::string & y = tokens[rng() % tokens.size()];
            if (x.size() + y.size() > 8 || !have.insert(x + y).second) continue;
            merges.emplace_back(x, y);
            extra.push_back(x + y);
            tokens.push_back(x + y);
        }
        bpe_tokenizer t(make_config(extra, merges));
        for (int k = 0; k < 50; ++k) {
            std::string s(1 + rng() % 200, 'a');
            for (char & ch : s) ch = char('a' + rng() % 4);
            ASSERT_EQ(pieces_of(t, t.encode(s, false)), reference_bpe(s, merges)) << s;
        }
    }
}

TEST(bpe_tokenizer, long_pre_token_is_fast) {
    // One pre-token of 512 KiB of spaces (GPT-2's "\s+"): the heap merge loop is O(n log n).
    bpe_tokenizer t(make_config({"  ", "    "}, {{" ", " "}, {"  ", "  "}}, {k_bpe_pattern_gpt2}));
    const std::string s(size_t(512) << 10, ' ');
    const ids_t ids = t.encode(s, false);
    EXPECT_EQ(ids.size(), s.size() / 4);
    EXPECT_EQ(t.decode(ids), s);
}

TEST(bpe_tokenizer, long_runs_of_each_class_round_trip) {
    // Long runs for every alternative of the patterns (letters, digits, punctuation, mixed
    // whitespace and newlines): no regex resource limit cuts them short, the round trip holds.
    const std::vector<std::string> runs = {
        std::string(300000, 'x'),
        std::string(300000, '7'),
        std::string(300000, '!'),
        [] {
            std::string s;
            for (int i = 0; i < 100000; ++i) s += " \n\t";
            return s;
        }(),
        [] {
            std::string s;
            for (int i = 0; i < 50000; ++i) s += "\xC3\xA9'S ";  // "é'S "
            return s;
        }(),
    };
    for (const char * pattern : {k_bpe_pattern_gpt2, k_bpe_pattern_qwen2, k_bpe_pattern_llama3}) {
        bpe_tokenizer t(make_config({"xx", "77"}, {{"x", "x"}, {"7", "7"}}, {pattern}));
        for (const std::string & s : runs) EXPECT_EQ(t.decode(t.encode(s, false)), s) << pattern;
    }
    // Digits in threes (Llama-3) or one by one (Qwen2) even in a long run.
    bpe_tokenizer q(make_config({}, {}, {k_bpe_pattern_qwen2}));
    EXPECT_EQ(q.encode(runs[1], false).size(), runs[1].size());
}

TEST(bpe_tokenizer, construction_errors) {
    bpe_config c = make_config({"ab"}, {{"a", "x"}});
    std::string msg = error_of([&] { bpe_tokenizer t(c); });
    EXPECT_HAS(msg, "test-vocab");
    EXPECT_HAS(msg, "merges[0]");
    EXPECT_HAS(msg, "'ax'");
    c = make_config({}, {}, {"(unclosed"});
    msg = error_of([&] { bpe_tokenizer t(c); });
    EXPECT_HAS(msg, "(unclosed");
    EXPECT_HAS(msg, "PCRE2");
    c = make_config({}, {});
    c.vocab.bos = 9999;
    EXPECT_HAS(error_of([&] { bpe_tokenizer t(c); }), "bos");
    bpe_tokenizer ok(make_config({}, {}));
    EXPECT_HAS(error_of([&] { ok.token_to_piece(256); }), "256");
    EXPECT_HAS(error_of([&] { ok.decode({-1}); }), "-1");
}

// ---------------------------------------------------------------------------------------------
// Loaders on hand-made files

void write_file(const std::string & path, const std::string & text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
}

// A small byte-level tokenizer.json: the 256 bytes, "ab", " ab", merges, an added control token.
std::string tiny_json(const std::string & pre_tokenizer, const std::string & extra_model = "",
                      const std::string & merges = R"(["a b", ["Ġ", "ab"]])", const std::string & more = "") {
    std::string vocab = "{";
    for (int b = 0; b < 256; ++b) {
        nlohmann::json key = bpe_byte_to_piece(uint8_t(b));
        vocab += key.dump() + ":" + std::to_string(b) + ",";
    }
    vocab += R"("ab":256,"Ġab":257})";
    return R"({"version":"1.0","added_tokens":[{"id":258,"content":"<|bos|>","special":true},)"
           R"({"id":259,"content":"<|end|>","special":true}],)"
           R"("normalizer":null,"pre_tokenizer":)" +
           pre_tokenizer + more + R"(,"model":{"type":"BPE","vocab":)" + vocab + R"(,"merges":)" + merges +
           extra_model + "}}";
}

const std::string k_byte_level = R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":true})";

TEST(bpe_loaders, tokenizer_json) {
    test::temp_dir dir;
    const std::string path = dir.file("tokenizer.json");
    write_file(path, tiny_json(k_byte_level));
    auto t = load_tokenizer_json(path, "");
    EXPECT_EQ(t->vocab().n_vocab(), 260);
    EXPECT_EQ(t->vocab().kinds[258], token_kind::control);
    EXPECT_FALSE(t->vocab().add_bos);
    EXPECT_EQ(t->encode("ab ab", true), (ids_t{256, 257}));
    const auto * bpe = dynamic_cast<const bpe_tokenizer *>(t.get());
    ASSERT_NE(bpe, nullptr);
    EXPECT_EQ(bpe->patterns(), (strs{k_bpe_pattern_gpt2}));

    // BOS from tokenizer_config.json, or from a TemplateProcessing post_processor.
    const std::string cfg = dir.file("tokenizer_config.json");
    write_file(cfg, R"({"bos_token": {"content": "<|bos|>"}, "eos_token": "<|end|>"})");
    t = load_tokenizer_json(path, cfg);
    EXPECT_EQ(t->vocab().bos, 258);
    EXPECT_EQ(t->vocab().eos, 259);
    EXPECT_TRUE(t->vocab().add_bos);
    EXPECT_EQ(t->encode("ab", true), (ids_t{258, 256}));
    write_file(cfg, R"({"bos_token": "<|bos|>", "eos_token": "<|end|>", "add_bos_token": false})");
    EXPECT_FALSE(load_tokenizer_json(path, cfg)->vocab().add_bos);
    write_file(cfg, R"({"bos_token": "<|end|>", "eos_token": "<|end|>"})");  // GPT-2 style: BOS = EOS
    EXPECT_FALSE(load_tokenizer_json(path, cfg)->vocab().add_bos);
    write_file(path, tiny_json(k_byte_level, "", R"(["a b"])",
                               R"(,"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":)"
                               R"({"id":"<|bos|>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],)"
                               R"("special_tokens":{"<|bos|>":{"id":"<|bos|>","ids":[258],"tokens":["<|bos|>"]}}})"));
    t = load_tokenizer_json(path, "");
    EXPECT_EQ(t->vocab().bos, 258);
    EXPECT_TRUE(t->vocab().add_bos);

    // Split + ByteLevel sequence (Qwen2 / Llama-3 layout) with ignore_merges.
    write_file(path, tiny_json(R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\s+|\\S+"},)"
                               R"("behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,)"
                               R"("use_regex":false}]})",
                               R"(,"ignore_merges":true)"));
    t = load_tokenizer_json(path, "");
    bpe = dynamic_cast<const bpe_tokenizer *>(t.get());
    ASSERT_NE(bpe, nullptr);
    EXPECT_EQ(bpe->patterns(), (strs{"\\s+|\\S+"}));
    EXPECT_TRUE(bpe->ignore_merges());
    EXPECT_EQ(t->encode("ab ab", false), (ids_t{256, ' ', 256}));  // " " and "ab" are pre-tokens
}

TEST(bpe_loaders, tokenizer_json_errors) {
    test::temp_dir dir;
    const std::string path = dir.file("tokenizer.json");
    const auto msg_for = [&](const std::string & text) {
        write_file(path, text);
        return error_of([&] { load_tokenizer_json(path, ""); });
    };
    std::string msg = msg_for("{\"model\": ");
    EXPECT_HAS(msg, path);
    EXPECT_HAS(msg, "JSON");
    msg = msg_for(R"({"pre_tokenizer":{"type":"ByteLevel"}})");
    EXPECT_HAS(msg, "model");
    EXPECT_HAS(msg, "missing");
    msg = msg_for(R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"WordPiece","vocab":{}}})");
    EXPECT_HAS(msg, "/model/type");
    EXPECT_HAS(msg, "WordPiece");
    // Llama-2's tokenizer.json: Metaspace + byte_fallback, not byte-level.
    msg = msg_for(R"({"pre_tokenizer":{"type":"Metaspace","replacement":"▁"},)"
                  R"("model":{"type":"BPE","byte_fallback":true,"vocab":{"a":0},"merges":[]}})");
    EXPECT_HAS(msg, "pre_tokenizer");
    EXPECT_HAS(msg, "Metaspace");
    EXPECT_HAS(msg, "byte-level");
    msg = msg_for(R"({"pre_tokenizer":null,"model":{"type":"BPE","vocab":{"a":0},"merges":[]}})");
    EXPECT_HAS(msg, "ByteLevel");
    msg = msg_for(tiny_json(R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"a"},)"
                            R"("behavior":"Removed","invert":false},{"type":"ByteLevel"}]})"));
    EXPECT_HAS(msg, "/pre_tokenizer/pretokenizers/0/behavior");
    EXPECT_HAS(msg, "Isolated");
    msg = msg_for(tiny_json(R"({"type":"Digits","individual_digits":true})"));
    EXPECT_HAS(msg, "/pre_tokenizer/type");
    EXPECT_HAS(msg, "Digits");
    msg = msg_for(tiny_json(k_byte_level, "", R"(["a b c"])"));
    EXPECT_HAS(msg, "/model/merges/0");
    msg = msg_for(tiny_json(k_byte_level, "", R"(["a b", 7])"));
    EXPECT_HAS(msg, "/model/merges/1");
    msg = msg_for(tiny_json(k_byte_level, "", R"(["a z"])"));
    EXPECT_HAS(msg, "model.merges[0]");
    EXPECT_HAS(msg, "'az'");
    msg = msg_for(tiny_json(k_byte_level, R"(,"continuing_subword_prefix":"##")"));
    EXPECT_HAS(msg, "/model/continuing_subword_prefix");
    msg = msg_for(R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":-3},"merges":[]}})");
    EXPECT_HAS(msg, "/model/vocab/a");
    msg = msg_for(
        R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":2000000000},"merges":[]}})");
    EXPECT_HAS(msg, "/model/vocab/a");  // refused before allocating the gap
    msg = msg_for(R"({"normalizer":{"type":"Lowercase"},"pre_tokenizer":{"type":"ByteLevel"},)"
                  R"("model":{"type":"BPE","vocab":{"a":0},"merges":[]}})");
    EXPECT_HAS(msg, "/normalizer/type");
    EXPECT_HAS(msg, "Lowercase");

    write_file(path, tiny_json(k_byte_level));
    const std::string cfg = dir.file("tokenizer_config.json");
    write_file(cfg, R"({"bos_token": "<nope>"})");
    msg = error_of([&] { load_tokenizer_json(path, cfg); });
    EXPECT_HAS(msg, cfg);
    EXPECT_HAS(msg, "bos_token");
    EXPECT_HAS(msg, "<nope>");
    write_file(cfg, R"({"add_bos_token": "yes"})");
    msg = error_of([&] { load_tokenizer_json(path, cfg); });
    EXPECT_HAS(msg, "add_bos_token");
}

TEST(bpe_loaders, vocab_json_and_merges_txt) {
    test::temp_dir dir;
    std::string vocab = "{";
    for (int b = 0; b < 256; ++b)
        vocab += nlohmann::json(bpe_byte_to_piece(uint8_t(b))).dump() + ":" + std::to_string(b) + ",";
    vocab += R"("ab":256,"<|endoftext|>":257})";
    write_file(dir.file("encoder.json"), vocab);
    write_file(dir.file("vocab.bpe"), "#version: 0.2\na b\n");
    auto t = load_tokenizer_folder(dir.path.string());
    EXPECT_EQ(t->vocab().n_vocab(), 258);
    EXPECT_EQ(t->vocab().kinds[257], token_kind::control);
    EXPECT_EQ(t->vocab().bos, 257);
    EXPECT_EQ(t->vocab().eos, 257);
    EXPECT_FALSE(t->vocab().add_bos);
    EXPECT_EQ(t->encode("ab<|endoftext|>", true), t->encode("ab<|endoftext|>", false));
    EXPECT_EQ(t->encode_with_special("ab<|endoftext|>", true), (ids_t{256, 257}));

    // OPT's layout: "</s>" is an ordinary vocab.json entry, named BOS by tokenizer_config.json.
    write_file(dir.file("vocab.json"), vocab.substr(0, vocab.size() - 1) + R"(,"</s>":258})");
    write_file(dir.file("merges.txt"), "#version: 0.2\na b\n");
    write_file(dir.file("tokenizer_config.json"),
               R"({"add_bos_token": true, "bos_token": "</s>", "eos_token": "</s>", "added_tokens_decoder":)"
               R"({"259": {"content": "<pad>", "special": true}}})");
    t = load_tokenizer_folder(dir.path.string());
    EXPECT_EQ(t->vocab().n_vocab(), 260);
    EXPECT_EQ(t->vocab().bos, 258);
    EXPECT_EQ(t->vocab().kinds[258], token_kind::control);
    EXPECT_EQ(t->vocab().kinds[259], token_kind::control);
    EXPECT_EQ(t->encode("ab", true), (ids_t{258, 256}));

    write_file(dir.file("merges.txt"), "#version: 0.2\na b\nab\n");
    std::string msg = error_of([&] { load_tokenizer_folder(dir.path.string()); });
    EXPECT_HAS(msg, "merges.txt");
    EXPECT_HAS(msg, "line 3");
    write_file(dir.file("merges.txt"), "#version: 0.2\na b\na q\n");
    msg = error_of([&] { load_tokenizer_folder(dir.path.string()); });
    EXPECT_HAS(msg, "line 3");
    EXPECT_HAS(msg, "'aq'");

    test::temp_dir empty;
    msg = error_of([&] { load_tokenizer_folder(empty.path.string()); });
    EXPECT_HAS(msg, "tokenizer.json");
}

void write_gpt2_gguf(const std::string & path, const std::string & pre, bool with_merges = true) {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(bpe_byte_to_piece(uint8_t(b)));
    tokens.push_back("ab");
    tokens.push_back("<|endoftext|>");
    std::vector<int32_t> types(tokens.size(), 1);
    types.back() = 3;
    gguf_writer w;
    w.set_string("general.architecture", "gpt2");
    w.set_string("tokenizer.ggml.model", "gpt2");
    if (!pre.empty()) w.set_string("tokenizer.ggml.pre", pre);
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    if (with_merges) w.set_string_array("tokenizer.ggml.merges", {"a b"});
    w.write(path);
}

TEST(bpe_loaders, gguf) {
    test::temp_dir dir;
    write_gpt2_gguf(dir.file("g.gguf"), "");
    auto t = load_tokenizer(*gguf_file::open(dir.file("g.gguf")));
    EXPECT_EQ(t->vocab().bos, 257);  // <|endoftext|> without bos/eos ids
    EXPECT_EQ(t->vocab().eos, 257);
    EXPECT_FALSE(t->vocab().add_bos);
    EXPECT_EQ(t->encode("ab1234", true), (ids_t{256, '1', '2', '3', '4'}));

    write_gpt2_gguf(dir.file("l.gguf"), "llama-bpe");
    t = load_tokenizer(*gguf_file::open(dir.file("l.gguf")));
    const auto * bpe = dynamic_cast<const bpe_tokenizer *>(t.get());
    ASSERT_NE(bpe, nullptr);
    EXPECT_TRUE(bpe->ignore_merges());
    EXPECT_TRUE(t->vocab().add_bos);
    EXPECT_EQ(bpe->patterns(), (strs{k_bpe_pattern_llama3}));

    write_gpt2_gguf(dir.file("q.gguf"), "qwen2");
    t = load_tokenizer(*gguf_file::open(dir.file("q.gguf")));
    EXPECT_EQ(dynamic_cast<const bpe_tokenizer &>(*t).patterns(), (strs{k_bpe_pattern_qwen2}));

    write_gpt2_gguf(dir.file("x.gguf"), "chatglm-4");  // not a name llama.cpp knows (all: test_bpe_pre_tokenizer)
    std::string msg = error_of([&] { load_tokenizer(*gguf_file::open(dir.file("x.gguf"))); });
    EXPECT_HAS(msg, "tokenizer.ggml.pre");
    EXPECT_HAS(msg, "chatglm-4");
    EXPECT_HAS(msg, "qwen2");
    write_gpt2_gguf(dir.file("m.gguf"), "gpt-2", false);
    msg = error_of([&] { load_tokenizer(*gguf_file::open(dir.file("m.gguf"))); });
    EXPECT_HAS(msg, "tokenizer.ggml.merges");
}

}  // namespace
}  // namespace hill
