// Tokenizer tests of byte-level BPE on real vocabularies from the shared data folder (skip
// cleanly without it): llama.cpp's expected ids for GPT-2 (its vocab GGUF and OpenAI's
// encoder.json + vocab.bpe), Qwen2 (with Qwen3's tokenizer.json: the same base BPE) and Llama-3
// (tokenizer.json, ids embedded below), BOS and special-token rules, and round trips of the books.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "format/gguf_file.h"
#include "test_util.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace hill {
namespace {

using test::round_trip_books;

using test::vocab_case;

#define LLAMACPP_DIR "tokenizers/llamacpp-vocab/"

using test::expect_matches;

vocab_case gpt2_case() {
    return test::read_case(test::data_path(LLAMACPP_DIR "ggml-vocab-gpt-2.gguf.inp"),
                           test::data_path(LLAMACPP_DIR "ggml-vocab-gpt-2.gguf.out"));
}

TEST(bpe_tokenizer_data, gpt2_gguf_matches_llama_cpp) {
    HILL_REQUIRE_DATA(gguf_path, LLAMACPP_DIR "ggml-vocab-gpt-2.gguf");
    HILL_REQUIRE_DATA(inp, LLAMACPP_DIR "ggml-vocab-gpt-2.gguf.inp");
    HILL_REQUIRE_DATA(out, LLAMACPP_DIR "ggml-vocab-gpt-2.gguf.out");
    const vocab_case c = gpt2_case();
    EXPECT_EQ(c.inputs.size(), 46u);  // see test_tokenizer_data.cpp about the 47th, empty, piece
    const auto t = load_tokenizer(*gguf_file::open(gguf_path));
    const vocab & v = t->vocab();
    EXPECT_EQ(v.n_vocab(), 50257);
    EXPECT_EQ(v.bos, 50256);
    EXPECT_EQ(v.eos, 50256);
    EXPECT_FALSE(v.add_bos);
    EXPECT_EQ(v.kinds[50256], token_kind::control);
    EXPECT_EQ(expect_matches(*t, c, "gpt-2 gguf"), c.inputs.size());
    EXPECT_EQ(t->encode("Hello world", true), (std::vector<int32_t>{15496, 995}));  // GPT-2 adds no BOS
}

TEST(bpe_tokenizer_data, gpt2_openai_files_match_llama_cpp) {
    HILL_REQUIRE_DATA(encoder, "tokenizers/gpt2/encoder.json");
    HILL_REQUIRE_DATA(bpe, "tokenizers/gpt2/vocab.bpe");
    HILL_REQUIRE_DATA(inp, LLAMACPP_DIR "ggml-vocab-gpt-2.gguf.inp");
    HILL_REQUIRE_DATA(out, LLAMACPP_DIR "ggml-vocab-gpt-2.gguf.out");
    const vocab_case c = gpt2_case();
    const auto t = load_vocab_merges_tokenizer(encoder, bpe, "");
    EXPECT_EQ(t->vocab().n_vocab(), 50257);
    EXPECT_EQ(t->vocab().bos, 50256);
    EXPECT_EQ(t->vocab().eos, 50256);
    EXPECT_FALSE(t->vocab().add_bos);
    EXPECT_EQ(expect_matches(*t, c, "gpt-2 encoder.json+vocab.bpe"), c.inputs.size());

    // The folder loader finds the same files; the GGUF vocab holds the same pieces.
    const auto f = load_tokenizer_folder(std::filesystem::path(encoder).parent_path().string());
    EXPECT_EQ(f->vocab().pieces, t->vocab().pieces);
    const std::string gguf_path = test::data_path(LLAMACPP_DIR "ggml-vocab-gpt-2.gguf");
    if (!gguf_path.empty()) {
        const auto g = load_tokenizer(*gguf_file::open(gguf_path));
        EXPECT_EQ(g->vocab().pieces, t->vocab().pieces);
        EXPECT_EQ(g->vocab().kinds, t->vocab().kinds);
    }
}

TEST(bpe_tokenizer_data, qwen3_json_matches_llama_cpp_qwen2) {
    HILL_REQUIRE_DATA(json_path, "tokenizers/qwen3/tokenizer.json");
    HILL_REQUIRE_DATA(config, "tokenizers/qwen3/tokenizer_config.json");
    HILL_REQUIRE_DATA(inp, LLAMACPP_DIR "ggml-vocab-qwen2.gguf.inp");
    HILL_REQUIRE_DATA(out, LLAMACPP_DIR "ggml-vocab-qwen2.gguf.out");
    const vocab_case c = test::read_case(inp, out);
    const auto t = load_tokenizer_json(json_path, config);
    const vocab & v = t->vocab();
    EXPECT_EQ(v.n_vocab(), 151669);
    EXPECT_EQ(v.kinds[151643], token_kind::control);  // <|endoftext|>
    EXPECT_EQ(v.pieces[151645], "<|im_end|>");
    EXPECT_EQ(v.eos, 151645);  // tokenizer_config eos_token <|im_end|>
    EXPECT_FALSE(v.add_bos);   // bos_token null, add_bos_token false
    EXPECT_EQ(expect_matches(*t, c, "qwen3 tokenizer.json"), c.inputs.size());

    // Without tokenizer_config.json: no BOS rule, EOS falls back to <|endoftext|>.
    const auto bare = load_tokenizer_json(json_path, "");
    EXPECT_EQ(bare->vocab().eos, 151643);
    EXPECT_FALSE(bare->vocab().add_bos);
    EXPECT_EQ(bare->encode("Hello world", true), (std::vector<int32_t>{9707, 1879}));

    // Control tokens are text in encode(), tokens in encode_with_special(); decode drops them.
    const std::string chat = "<|im_start|>user\nHi<|im_end|>";
    const auto plain = t->encode(chat, false);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), 151644), 0);
    EXPECT_EQ(t->decode(plain), chat);
    const auto special = t->encode_with_special(chat, false);
    ASSERT_GE(special.size(), 3u);
    EXPECT_EQ(special.front(), 151644);
    EXPECT_EQ(special.back(), 151645);
    EXPECT_EQ(t->decode(special), "user\nHi");
    // <think> is an added token with special = false: always one token, decoded as its text.
    const auto think = t->encode("a<think>b", false);
    EXPECT_EQ(std::count(think.begin(), think.end(), 151667), 1);
    EXPECT_EQ(t->decode(think), "a<think>b");
}

// llama.cpp's expected ids for Llama-3 (Meta-Llama-3-8B's tokenizer through Hugging Face), from
// ggerganov/llama.cpp commit 284870c8686e1f8cee9871331675b5ef24031f74,
// models/ggml-vocab-llama-bpe.gguf.out (MIT). That file belongs to an older test-string list of 44
// strings: strings 0..32 are ours 0..32, 33..41 ours 34..42, 42 our 45, and 43 is " Việt".
const char * const k_llama3_out = R"( 1142 220 19 220 27154 4038
 37 51853 261

 220
 256
 262
 197
 198
 271
 1432
 1602
 9906 1917
 22691 1917
 9906 4435
 22691 4435
 22691 4435 0
 9906 11 1917 0
 22691 11 1917 0
 420 374 11410 99 247 13 11055
 86 23904 220 22 83 2005 42908 11729 3013 17156
 79862 102118 13373 64571 34694 3114 112203 80112
 21549 222 98629 241 45358 233 21549 237 45358 224 21549 244 21549 115 21549 253 45358 223 21549 253 21549 95 98629 227 21549 223 21549 249 21549 227 45358 223 21549 231
 9468 248 222 320 8416 8 27623 114 102470 9468 234 104 31643 320 36773 100166 98634 8 26602 227 320 3323 43465 430 706 1202 1866 4037 8
 9906
 22691
 220 22691
 256 22691
 262 22691
 262 22691 198 262 22691
 320
 198 284
 6 11639
 9906 11 379 65948 0 2650 527 499 27623 223 949 37046 101067 19000 23182 102301 9263 18136 16 36827 21909
 18
 1644
 8765
 8765 18
 8765 1644
 8765 8765
 8765 8765 18
 8765 8765 1644
 8765 8765 8765
 198 4815 15073 66597 8004 1602 2355 79772 11187 9468 248 222 320 8416 8 27623 114 102470 9468 234 104 31643 320 36773 100166 98634 8 26602 227 11410 99 247 9468 99 247 220 18 220 1644 220 8765 220 8765 18 220 8765 1644 220 8765 8765 220 8765 8765 18 220 8765 8765 1644 220 18 13 18 220 18 497 18 220 18 1131 18 220 21549 222 98629 241 45358 233 21549 237 45358 224 21549 244 21549 115 21549 253 45358 223 21549 253 21549 95 98629 227 76460 223 949 37046 101067 19000 23182 102301 9263 18136 16 36827 21909 56560 54337 19175 102118 13373 64571 34694 3114 112203 80112 3436 106451 14196 14196 74694 3089 3089 29249 17523 3001 27708 7801 358 3077 1027 364 83 820 568 596 1070 11 364 793 499 2771 30 364 44 539 2771 358 3358 1304 433 11 364 35 499 1093 1063 15600 30 1226 6 43712 264 64966 43
 101798)";

TEST(bpe_tokenizer_data, llama3_json_matches_llama_cpp) {
    HILL_REQUIRE_DATA(json_path, "tokenizers/llama3/tokenizer.json");
    HILL_REQUIRE_DATA(config, "tokenizers/llama3/tokenizer_config.json");
    HILL_REQUIRE_DATA(inp, LLAMACPP_DIR "ggml-vocab-gpt-2.gguf.inp");
    const std::vector<std::string> ours = test::split_inp(test::read_all(inp));
    ASSERT_EQ(ours.size(), 46u);
    vocab_case c;
    for (size_t i = 0; i <= 32; ++i) c.inputs.push_back(ours[i]);
    for (size_t i = 34; i <= 42; ++i) c.inputs.push_back(ours[i]);
    c.inputs.push_back(ours[45]);
    c.inputs.push_back(" Vi\u1EC7t");
    c.expected = test::split_out(k_llama3_out);
    ASSERT_EQ(c.expected.size(), c.inputs.size());

    const auto t = load_tokenizer_json(json_path, config);
    const auto * bpe = dynamic_cast<const bpe_tokenizer *>(t.get());
    ASSERT_NE(bpe, nullptr);
    EXPECT_TRUE(bpe->ignore_merges());
    const vocab & v = t->vocab();
    EXPECT_EQ(v.n_vocab(), 128256);
    EXPECT_EQ(v.bos, 128000);  // <|begin_of_text|>
    EXPECT_EQ(v.eos, 128001);  // <|end_of_text|>
    EXPECT_TRUE(v.add_bos);    // bos_token named and not the eos_token
    EXPECT_EQ(expect_matches(*t, c, "llama3 tokenizer.json"), c.inputs.size());
    EXPECT_EQ(t->encode("Hello world", true), (std::vector<int32_t>{128000, 9906, 1917}));
    EXPECT_EQ(t->encode("Hello world", false), (std::vector<int32_t>{9906, 1917}));
    EXPECT_EQ(t->encode_with_special("<|begin_of_text|>Hi", false), (std::vector<int32_t>{128000, 13347}));
}

TEST(bpe_tokenizer_data, books_round_trip_gpt2) {
    HILL_REQUIRE_DATA(gguf_path, LLAMACPP_DIR "ggml-vocab-gpt-2.gguf");
    HILL_REQUIRE_DATA(book, "text/gutenberg/pg11_alice_in_wonderland.txt");
    round_trip_books(*load_tokenizer(*gguf_file::open(gguf_path)), "gpt-2");
}

TEST(bpe_tokenizer_data, books_round_trip_qwen3) {
    HILL_REQUIRE_DATA(json_path, "tokenizers/qwen3/tokenizer.json");
    HILL_REQUIRE_DATA(book, "text/gutenberg/pg11_alice_in_wonderland.txt");
    round_trip_books(*load_tokenizer_json(json_path, ""), "qwen3");
}

TEST(bpe_tokenizer_data, books_round_trip_llama3) {
    HILL_REQUIRE_DATA(json_path, "tokenizers/llama3/tokenizer.json");
    HILL_REQUIRE_DATA(book, "text/gutenberg/pg11_alice_in_wonderland.txt");
    round_trip_books(*load_tokenizer_json(json_path, ""), "llama3");
}

}  // namespace
}  // namespace hill
