// Unit tests of the GGUF pre-tokenizer table (tokenizer/bpe_pre_tokenizer.h): every
// `tokenizer.ggml.pre` name llama.cpp knows loads from a GGUF file with its regexes and flags, and
// splits a tricky text (whitespace runs, apostrophes in both cases, a digit run, precomposed and
// combining accents, CR LF and LF, CJK and kana, an emoji, punctuation) the way its regexes say.
// The expected splits were worked out from the patterns by hand and agree with Python's `regex`
// module (an independent engine) running the same patterns.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>

#include "format/gguf_file.h"
#include "format/gguf_writer.h"
#include "test_util.h"
#include "tokenizer/bpe_pre_tokenizer.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace hill {
namespace {

using strs = std::vector<std::string>;
using ids_t = std::vector<int32_t>;

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

// "Hi  y'all, WE'RE 1234567 café née\r\n\n你好こん 🦙!!  x  ", the first é precomposed (U+00E9), the
// second an e with a combining acute (U+0301).
const std::string k_text =
    "Hi  y'all, WE'RE 1234567 caf\u00e9 ne\u0301e\r\n\n\u4f60\u597d\u3053\u3093 \U0001F999!!  x  ";

// A tokenizer of the 256 byte pieces (no merges) with the patterns of pre-tokenizer `name`.
bpe_tokenizer bytes_only(std::string_view name) {
    const bpe_pre_tokenizer * p = find_bpe_pre_tokenizer(name);
    EXPECT_NE(p, nullptr) << name;
    bpe_config c;
    c.source = std::string(name);
    for (int b = 0; b < 256; ++b) c.vocab.pieces.push_back(bpe_byte_to_piece(uint8_t(b)));
    c.vocab.kinds.assign(c.vocab.pieces.size(), token_kind::normal);
    if (p != nullptr) c.patterns.assign(p->patterns.begin(), p->patterns.end());
    return bpe_tokenizer(std::move(c));
}

TEST(bpe_pre_tokenizer, table) {
    // llama.cpp's names (commit 00ad355e, llama-vocab.cpp), each once.
    std::set<std::string_view> names;
    size_t n_refused = 0;
    for (const bpe_pre_tokenizer & p : bpe_pre_tokenizers()) {
        EXPECT_TRUE(names.insert(p.name).second) << p.name;
        if (p.unsupported != nullptr) {
            ++n_refused;
            EXPECT_TRUE(p.patterns.empty()) << p.name;
        } else {
            EXPECT_FALSE(p.patterns.empty()) << p.name;
        }
    }
    EXPECT_EQ(names.size(), 90u);
    EXPECT_EQ(n_refused, 1u);  // whitespace
    for (const char * name : {"default",        "gpt-2",       "llama3", "llama-bpe", "qwen2",       "deepseek-llm",
                              "deepseek-coder", "deepseek-v3", "falcon", "mpt",       "starcoder",   "gpt-4o",
                              "command-r",      "olmo",        "smollm", "tekken",    "chatglm-bpe", "glm4",
                              "kimi-k2",        "superbpe",    "afmoe",  "qwen35"}) {
        EXPECT_NE(find_bpe_pre_tokenizer(name), nullptr) << name;
    }
    EXPECT_EQ(find_bpe_pre_tokenizer("chatglm-4"), nullptr);  // the converter writes chatglm-bpe / glm4
    EXPECT_EQ(find_bpe_pre_tokenizer(""), nullptr);

    // Names that share a pre-type share its patterns.
    EXPECT_EQ(find_bpe_pre_tokenizer("olmo")->patterns.data(), find_bpe_pre_tokenizer("gpt-2")->patterns.data());
    EXPECT_EQ(find_bpe_pre_tokenizer("command-r")->patterns.data(),
              find_bpe_pre_tokenizer("starcoder")->patterns.data());
    EXPECT_EQ(find_bpe_pre_tokenizer("hunyuan-dense")->patterns.data(),
              find_bpe_pre_tokenizer("deepseek-v3")->patterns.data());
}

TEST(bpe_pre_tokenizer, every_pattern_compiles_and_splits_losslessly) {
    for (const bpe_pre_tokenizer & p : bpe_pre_tokenizers()) {
        if (p.unsupported != nullptr) continue;
        const bpe_tokenizer t = bytes_only(p.name);
        const strs words = t.pre_tokenize(k_text);
        std::string joined;
        for (const std::string & w : words) {
            EXPECT_FALSE(w.empty()) << p.name;
            joined += w;
        }
        EXPECT_EQ(joined, k_text) << p.name;
        EXPECT_EQ(t.decode(t.encode(k_text, false)), k_text) << p.name;
    }
}

TEST(bpe_pre_tokenizer, splits_the_tricky_text) {
    struct case_t {
        const char * name;
        strs expected;
    };
    const std::vector<case_t> cases = {
        // GPT-2: lowercase contractions only, digits in one run with their space, the combining
        // accent on its own (not a letter), "\s+(?!\S)" leaving the last space to " x".
        {"gpt-2",
         {"Hi",
          " ",
          " y",
          "'",
          "all",
          ",",
          " WE",
          "'",
          "RE",
          " 1234567",
          " caf\u00e9",
          " ne",
          "\u0301",
          "e",
          "\r\n",
          "\n",
          "\u4f60\u597d\u3053\u3093",
          " \U0001F999!!",
          " ",
          " x",
          "  "}},
        // llama.cpp's default: punctuation runs first, then GPT-2's, digit runs, then threes.
        {"default",
         {"Hi",          " ",   " y", "'",          "all", ",",      " WE", "'",    "RE", " ",
          "123",         "456", "7",  " caf\u00e9", " ne", "\u0301", "e",   "\r\n", "\n", "\u4f60\u597d\u3053\u3093",
          " \U0001F999", "!!",  " ",  " x",         "  "}},
        {"falcon",
         {"Hi",          " ",   " y", "'",          "all", ",",      " WE", "'",    "RE", " ",
          "123",         "456", "7",  " caf\u00e9", " ne", "\u0301", "e",   "\r\n", "\n", "\u4f60\u597d\u3053\u3093",
          " \U0001F999", "!!",  " ",  " x",         "  "}},
        // StarCoder family: digits one by one before GPT-2's pattern.
        {"starcoder",
         {"Hi",
          " ",
          " y",
          "'",
          "all",
          ",",
          " WE",
          "'",
          "RE",
          " ",
          "1",
          "2",
          "3",
          "4",
          "5",
          "6",
          "7",
          " caf\u00e9",
          " ne",
          "\u0301",
          "e",
          "\r\n",
          "\n",
          "\u4f60\u597d\u3053\u3093",
          " \U0001F999!!",
          " ",
          " x",
          "  "}},
        // Llama-3: any-case contractions, a non-letter glued before letters, digits in threes,
        // "\s*[\r\n]+" taking both line ends.
        {"llama3",
         {"Hi",
          " ",
          " y",
          "'all",
          ",",
          " WE",
          "'RE",
          " ",
          "123",
          "456",
          "7",
          " caf\u00e9",
          " ne",
          "\u0301e",
          "\r\n\n",
          "\u4f60\u597d\u3053\u3093",
          " \U0001F999!!",
          " ",
          " x",
          "  "}},
        {"qwen2",
         {"Hi",
          " ",
          " y",
          "'all",
          ",",
          " WE",
          "'RE",
          " ",
          "1",
          "2",
          "3",
          "4",
          "5",
          "6",
          "7",
          " caf\u00e9",
          " ne",
          "\u0301e",
          "\r\n\n",
          "\u4f60\u597d\u3053\u3093",
          " \U0001F999!!",
          " ",
          " x",
          "  "}},
        // Qwen3.5: combining marks count as letters.
        {"qwen35",
         {"Hi",
          " ",
          " y",
          "'all",
          ",",
          " WE",
          "'RE",
          " ",
          "1",
          "2",
          "3",
          "4",
          "5",
          "6",
          "7",
          " caf\u00e9",
          " ne\u0301e",
          "\r\n\n",
          "\u4f60\u597d\u3053\u3093",
          " \U0001F999!!",
          " ",
          " x",
          "  "}},
        // DeepSeek LLM: line ends one by one; "[!-/:-~...]" (which holds the ASCII letters) cuts
        // "caf" from a non-ASCII letter; digit runs whole; CJK and kana by range.
        {"deepseek-llm",
         {"Hi",          " ",    " y",     "'",   "all",    ",", " WE", "'",  "RE", " ",
          "1234567",     " caf", "\u00e9", " ne", "\u0301", "e", "\r",  "\n", "\n", "\u4f60\u597d\u3053\u3093",
          " \U0001F999", "!!",   " ",      " x",  "  "}},
        {"deepseek-coder", {"Hi",          " ",   " y",         "'",   "all",
                            ",",           " WE", "'",          "RE",  " ",
                            "1",           "2",   "3",          "4",   "5",
                            "6",           "7",   " caf\u00e9", " ne", "\u0301",
                            "e",           "\r",  "\n",         "\n",  "\u4f60\u597d\u3053\u3093",
                            " \U0001F999", "!!",  " ",          " x",  "  "}},
        // DeepSeek V3: digits in threes first, an ASCII punctuation glued to ASCII letters, marks
        // inside words.
        {"deepseek-v3",
         {"Hi", " ", " y", "'all", ",", " WE", "'RE", " ", "123", "456", "7", " caf\u00e9", " ne\u0301e", "\r\n\n",
          "\u4f60\u597d\u3053\u3093", " \U0001F999!!", " ", " x", "  "}},
        // GPT-4o: an uppercase run may take a contraction ("WE'RE"); a lowercase word cannot take
        // "'all" (not a contraction).
        {"gpt-4o",
         {"Hi", " ", " y", "'all", ",", " WE'RE", " ", "123", "456", "7", " caf\u00e9", " ne\u0301e", "\r\n\n",
          "\u4f60\u597d\u3053\u3093", " \U0001F999!!", " ", " x", "  "}},
        {"tekken",
         {"Hi",
          " ",
          " y",
          "'all",
          ",",
          " WE",
          "'RE",
          " ",
          "1",
          "2",
          "3",
          "4",
          "5",
          "6",
          "7",
          " caf\u00e9",
          " ne\u0301e",
          "\r\n\n",
          "\u4f60\u597d\u3053\u3093",
          " \U0001F999!!",
          " ",
          " x",
          "  "}},
        // Kimi K2: Han runs apart from the kana after them.
        {"kimi-k2",
         {"Hi", " ", " y", "'all", ",", " WE'RE", " ", "123", "456", "7", " caf\u00e9", " ne\u0301e", "\r\n\n",
          "\u4f60\u597d", "\u3053\u3093", " \U0001F999!!", " ", " x", "  "}},
        // Digits in threes from the right: Tiny Aya (a lookahead), AFMoE (llama.cpp's hand-written
        // split), SuperBPE (an empty-match lookahead; other text stays in long pieces).
        {"tiny_aya",
         {"Hi", " ", " y", "'all", ",", " WE'RE", " ", "1", "234", "567", " caf\u00e9", " ne\u0301e", "\r\n\n",
          "\u4f60\u597d\u3053\u3093", " \U0001F999!!", " ", " x", "  "}},
        {"afmoe",
         {"Hi", " ", " y", "'all", ",", " WE", "'RE", " ", "1", "234", "567", " caf\u00e9", " ne\u0301e", "\r\n\n",
          "\u4f60\u597d\u3053\u3093", " \U0001F999!!", " ", " x", "  "}},
        {"superbpe",
         {"Hi  y'all, WE'RE ", "1", "234", "567",
          " caf\u00e9 ne\u0301e\r\n\n\u4f60\u597d\u3053\u3093 \U0001F999!!  x  "}},
        // Poro/BLOOM: anything but whitespace and sentence punctuation, with one leading space.
        {"poro-chat",
         {"Hi", " ", " y'all", ",", " WE'RE", " 1234567", " caf\u00e9", " ne\u0301e", "\r\n\n",
          "\u4f60\u597d\u3053\u3093", " \U0001F999", "!! ", " x", "  "}},
        // Chameleon: double spaces, digits and punctuation isolated before GPT-2's pattern.
        {"chameleon", {"Hi",          "  ",  "y",          "'",   "all",
                       ",",           " WE", "'",          "RE",  " ",
                       "1",           "2",   "3",          "4",   "5",
                       "6",           "7",   " caf\u00e9", " ne", "\u0301",
                       "e",           "\r",  "\n",         "\n",  "\u4f60\u597d\u3053\u3093",
                       " \U0001F999", "!",   "!",          "  ",  "x",
                       "  "}},
        // EXAONE MoE: space-separated letters stay one word.
        {"exaone-moe",
         {"Hi",
          " ",
          " y",
          "'all",
          ",",
          " WE",
          "'RE",
          " ",
          "1",
          "2",
          "3",
          "4",
          "5",
          "6",
          "7",
          " caf\u00e9 ne\u0301e",
          "\r\n\n",
          "\u4f60\u597d\u3053\u3093",
          " \U0001F999!!",
          " ",
          " x",
          "  "}},
        // Laguna: lines first, so "\r" stays on its line.
        {"laguna",
         {"Hi",
          " ",
          " y",
          "'all",
          ",",
          " WE",
          "'RE",
          " ",
          "1",
          "2",
          "3",
          "4",
          "5",
          "6",
          "7",
          " caf\u00e9",
          " ne",
          "\u0301e",
          "\r",
          "\n\n",
          "\u4f60\u597d\u3053\u3093",
          " \U0001F999!!",
          " ",
          " x",
          "  "}},
        {"spark2_5",
         {"Hi",
          " ",
          " y",
          "'all",
          ",",
          " WE",
          "'RE",
          " ",
          "1",
          "2",
          "3",
          "4",
          "5",
          "6",
          "7",
          " caf\u00e9",
          " ne\u0301e",
          "\r",
          "\n",
          "\n",
          "\u4f60\u597d\u3053\u3093",
          " \U0001F999!!",
          " ",
          " x",
          "  "}},
    };
    for (const case_t & c : cases) EXPECT_EQ(bytes_only(c.name).pre_tokenize(k_text), c.expected) << c.name;
}

TEST(bpe_pre_tokenizer, splits_beyond_the_text) {
    // Upper/lower runs: gpt-4o, tekken and kimi-k2 cut camel case, Llama-3 does not.
    EXPECT_EQ(bytes_only("gpt-4o").pre_tokenize("HelloWorld"), (strs{"Hello", "World"}));
    EXPECT_EQ(bytes_only("kimi-k2").pre_tokenize("HelloWorld"), (strs{"Hello", "World"}));
    EXPECT_EQ(bytes_only("llama3").pre_tokenize("HelloWorld"), (strs{"HelloWorld"}));
    // Right-aligned threes against left-aligned ones.
    EXPECT_EQ(bytes_only("afmoe").pre_tokenize("12345678"), (strs{"12", "345", "678"}));
    EXPECT_EQ(bytes_only("superbpe").pre_tokenize("12345678"), (strs{"12", "345", "678"}));
    EXPECT_EQ(bytes_only("llama3").pre_tokenize("12345678"), (strs{"123", "456", "78"}));
    // DeepSeek LLM's "\s+$": trailing whitespace is one piece ($ is the end of the piece).
    EXPECT_EQ(bytes_only("deepseek-llm").pre_tokenize("x  "), (strs{"x", "  "}));
    // Jais-2's whitespace cascade: runs of 4 before a word keep their last space for the word.
    EXPECT_EQ(bytes_only("jais-2").pre_tokenize("a     x"), (strs{"a", "    ", " x"}));
}

// A GGUF vocabulary: 256 byte tokens (GPT-2's byte pieces, or SentencePiece style "<0xXX>" of
// kind byte), 256 "ab" (merge "a b"), 257 "<|endoftext|>"; SentencePiece style adds 258 "a",
// 259 "b" and 260 U+2581 (the escaped space).
void write_gguf(const std::string & path, const std::string & pre, bool byte_level = true, bool with_bos_id = false,
                const std::string & model = "gpt2") {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(byte_level ? bpe_byte_to_piece(uint8_t(b)) : fmt::format("<0x{:02X}>", b));
        types.push_back(byte_level ? 1 : 6);
    }
    tokens.push_back(byte_level ? bpe_bytes_to_pieces("ab") : "ab");
    tokens.push_back("<|endoftext|>");
    types.insert(types.end(), {1, 3});
    if (!byte_level) {
        tokens.insert(tokens.end(), {"a", "b", "\u2581"});
        types.insert(types.end(), {1, 1, 1});
    }
    gguf_writer w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", model);
    w.set_string("tokenizer.ggml.pre", pre);
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    w.set_i32_array("tokenizer.ggml.token_type", types);
    w.set_string_array("tokenizer.ggml.merges",
                       {byte_level ? bpe_bytes_to_pieces("a") + " " + bpe_bytes_to_pieces("b") : std::string("a b")});
    if (with_bos_id) w.set_u32("tokenizer.ggml.bos_token_id", 257);
    w.write(path);
}

TEST(bpe_pre_tokenizer, every_name_loads_from_gguf) {
    test::temp_dir dir;
    for (const bpe_pre_tokenizer & p : bpe_pre_tokenizers()) {
        const std::string name(p.name);
        const std::string path = dir.file("v.gguf");
        write_gguf(path, name, p.byte_level);
        if (p.unsupported != nullptr) {
            const std::string msg = test::error_of([&] { load_tokenizer(*gguf_file::open(path)); });
            EXPECT_HAS(msg, "'" + name + "'");
            EXPECT_HAS(msg, p.unsupported);
            continue;
        }
        const auto t = load_tokenizer(*gguf_file::open(path));
        const auto & bpe = dynamic_cast<const bpe_tokenizer &>(*t);
        EXPECT_EQ(bpe.patterns(), strs(p.patterns.begin(), p.patterns.end())) << name;
        EXPECT_EQ(bpe.ignore_merges(), p.ignore_merges) << name;
        EXPECT_EQ(bpe.byte_level(), p.byte_level) << name;
        EXPECT_EQ(t->vocab().add_bos, p.add_bos || p.force_bos) << name;
        EXPECT_EQ(t->vocab().bos, p.bos_none ? -1 : 257) << name;
        EXPECT_EQ(t->decode(t->encode(k_text, true)), k_text) << name;
        EXPECT_EQ(t->encode("ab", false), (ids_t{256})) << name;  // the merge applies under every pre-tokenizer
    }
}

TEST(bpe_pre_tokenizer, bos_rules) {
    test::temp_dir dir;
    // Llama-3 and tekken prepend BOS by default, GPT-2 does not.
    write_gguf(dir.file("t.gguf"), "tekken");
    EXPECT_EQ(load_tokenizer(*gguf_file::open(dir.file("t.gguf")))->encode("ab", true), (ids_t{257, 256}));
    write_gguf(dir.file("g.gguf"), "gpt-2");
    EXPECT_EQ(load_tokenizer(*gguf_file::open(dir.file("g.gguf")))->encode("ab", true), (ids_t{256}));
    // ChatGLM-4 has no BOS unless the file names one.
    write_gguf(dir.file("c.gguf"), "chatglm-bpe");
    EXPECT_EQ(load_tokenizer(*gguf_file::open(dir.file("c.gguf")))->vocab().bos, -1);
    write_gguf(dir.file("c2.gguf"), "chatglm-bpe", true, true);
    EXPECT_EQ(load_tokenizer(*gguf_file::open(dir.file("c2.gguf")))->vocab().bos, 257);
}

TEST(bpe_pre_tokenizer, sentencepiece_style) {
    // Gemma 4's kind of BPE: raw UTF-8 pieces, spaces as U+2581, "<0xXX>" byte fallback.
    bpe_config c;
    c.source = "spm-style";
    for (int b = 0; b < 256; ++b) {
        c.vocab.pieces.push_back(fmt::format("<0x{:02X}>", b));
        c.vocab.kinds.push_back(token_kind::byte);
    }
    for (const char * p : {"a", "b", "ab", "\u2581", "\u2581ab", "\n\n", "\n"}) {  // 256..262
        c.vocab.pieces.push_back(p);
        c.vocab.kinds.push_back(token_kind::normal);
    }
    c.merges = {{"a", "b"}, {"\u2581", "ab"}};
    const bpe_pre_tokenizer * gemma4 = find_bpe_pre_tokenizer("gemma4");
    ASSERT_NE(gemma4, nullptr);
    c.patterns.assign(gemma4->patterns.begin(), gemma4->patterns.end());
    c.byte_level = false;
    c.whole_newline_runs = true;
    const bpe_tokenizer t(c);
    EXPECT_EQ(t.pre_tokenize("ab ab\n\nx\n"), (strs{"ab\u2581ab", "\n\n", "x", "\n"}));
    // "ab▁ab": a b ▁ a b -> ab ▁ ab (rank 0, leftmost first) -> ab ▁ab; "\n\n" whole though no merge
    // builds it; "x" has no piece: its byte token.
    const std::string text = "ab ab\n\nx\n";
    EXPECT_EQ(t.encode(text, false), (ids_t{258, 260, 261, 'x', 262}));
    EXPECT_EQ(t.decode(t.encode(text, false)), text);
    // A character no piece holds falls back to its UTF-8 bytes, an invalid byte to its own.
    EXPECT_EQ(t.encode("a\u00e9\xFF", false), (ids_t{256, 0xC3, 0xA9, 0xFF}));
    EXPECT_EQ(t.decode(t.encode("a\u00e9\xFF b", false)), "a\u00e9\xFF b");
    EXPECT_EQ(t.token_to_piece(260), " ab");
    c.whole_newline_runs = false;  // sarvam-moe: newline runs merge like any text
    EXPECT_EQ(bpe_tokenizer(c).encode("\n\n", false), (ids_t{262, 262}));
}

TEST(bpe_pre_tokenizer, gemma4_from_gguf) {
    test::temp_dir dir;
    // tokenizer.ggml.model = gemma4 means the gemma4 pre-tokenizer whatever tokenizer.ggml.pre says,
    // and BOS even when add_bos_token is false (llama.cpp's override).
    write_gguf(dir.file("g.gguf"), "gpt-2", false, false, "gemma4");
    {
        gguf_writer w;
        const auto g = gguf_file::open(dir.file("g.gguf"));
        for (const auto & [key, value] : g->metadata()) w.set_value(key, value);
        w.set_bool("tokenizer.ggml.add_bos_token", false);
        w.set_bool("tokenizer.ggml.add_space_prefix", true);  // ignored: no space is prepended
        w.write(dir.file("g2.gguf"));
    }
    const auto t = load_tokenizer(*gguf_file::open(dir.file("g2.gguf")));
    const auto & bpe = dynamic_cast<const bpe_tokenizer &>(*t);
    EXPECT_EQ(bpe.patterns(), (strs{"[^\\n]+|[\\n]+"}));
    EXPECT_TRUE(t->vocab().add_bos);
    EXPECT_EQ(t->encode("ab a", true), (ids_t{257, 256, 260, 258}));  // BOS, "ab", "▁", "a"
    EXPECT_EQ(t->decode(t->encode("ab a", false)), "ab a");
}

TEST(bpe_pre_tokenizer, unknown_name_is_refused) {
    test::temp_dir dir;
    write_gguf(dir.file("x.gguf"), "no-such-pre");
    const std::string msg = test::error_of([&] { load_tokenizer(*gguf_file::open(dir.file("x.gguf"))); });
    EXPECT_HAS(msg, "tokenizer.ggml.pre");
    EXPECT_HAS(msg, "'no-such-pre'");
    EXPECT_HAS(msg, "'deepseek-v3'");  // the message lists the supported names
    EXPECT_HAS(msg, "'gpt-4o'");
    EXPECT_HAS(msg, "'gemma4'");
    EXPECT_EQ(msg.find("'whitespace'"), std::string::npos);  // but not the refused one
}

}  // namespace
}  // namespace hill
