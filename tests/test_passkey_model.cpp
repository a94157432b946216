// The passkey model (model/synthetic_model.h, docs/passkey.md): a deterministic file with the
// documented shape, the whole-word tokenization of the needle, and greedy retrieval of all five
// digits from a 1K-token haystack.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/session.h"
#include "model/synthetic_model.h"
#include "test_util.h"

namespace hill {
namespace {

std::string read_bytes(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

class passkey_model_test : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir = new test::temp_dir;
        write_passkey_model(dir->file("pk.gguf"), passkey_model_params{.n_ctx = 4096});
        m = model::load(dir->file("pk.gguf")).release();
    }
    static void TearDownTestSuite() {
        delete m;
        delete dir;
    }
    static test::temp_dir * dir;
    static model * m;
};

test::temp_dir * passkey_model_test::dir = nullptr;
model * passkey_model_test::m = nullptr;

TEST_F(passkey_model_test, same_params_same_bytes) {
    write_passkey_model(dir->file("again.gguf"), passkey_model_params{.n_ctx = 4096});
    const std::string a = read_bytes(dir->file("pk.gguf"));
    EXPECT_GT(a.size(), 10'000'000u);
    EXPECT_TRUE(a == read_bytes(dir->file("again.gguf")));
}

TEST_F(passkey_model_test, documented_shape) {
    const hparams & hp = m->hp();
    EXPECT_EQ(hp.n_vocab, 308);
    EXPECT_EQ(hp.n_ctx_train, 4096);
    EXPECT_EQ(hp.n_embd, 640);
    EXPECT_EQ(hp.n_ff, 64);
    EXPECT_EQ(hp.n_layer, 2);
    EXPECT_EQ(hp.n_head, 5);
    EXPECT_EQ(hp.n_head_kv, 1);
    EXPECT_EQ(hp.head_dim, 128);
    EXPECT_EQ(hp.rope_freq_base, 1e14f);
    EXPECT_FALSE(m->output_tied());
    EXPECT_EQ(m->token_embd().type, ggml_type::f32);
    EXPECT_EQ(m->tokenizer().vocab().pieces[282], "\xE2\x96\x81The");
}

TEST_F(passkey_model_test, context_out_of_range_is_a_usage_error) {
    for (int32_t n_ctx : {0, passkey_n_ctx_max + 1}) {
        try {
            write_passkey_model(dir->file("bad.gguf"), passkey_model_params{.n_ctx = n_ctx});
            FAIL() << "expected an error for n_ctx " << n_ctx;
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::usage) << e.what();
        }
    }
}

TEST_F(passkey_model_test, needle_tokenizes_into_whole_words_and_digits) {
    const tokenizer & tok = m->tokenizer();
    std::vector<std::string> pieces;
    for (int32_t id : tok.encode("The pass key is 40582. Remember it.", false))
        pieces.push_back(tok.vocab().pieces[size_t(id)]);
    const std::string sp = "\xE2\x96\x81";  // U+2581
    const std::vector<std::string> expected = {
        sp + "The", sp + "pass", sp + "key", sp + "is",       sp + "4",  "0",     "5",
        "8",        "2",         "<0x2E>",   sp + "Remember", sp + "it", "<0x2E>"};
    EXPECT_EQ(pieces, expected);
}

// "The grass ... wide." repeated around the needle (at 50% depth), the question at the end: about
// 1K tokens. Greedy decoding continues with the five digits and the period.
TEST_F(passkey_model_test, retrieves_passkey_from_1k_haystack) {
    const tokenizer & tok = m->tokenizer();
    const std::string sentence = "The grass is green and the river is wide. ";
    const auto n_sentence = int64_t(tok.encode(sentence, false).size());
    const int64_t n_half = 500 / n_sentence;
    std::string haystack_half;
    for (int64_t i = 0; i < n_half; ++i) haystack_half += sentence;
    const std::string prompt = haystack_half + "The pass key is 40582. Remember it. " + haystack_half +
                               "What is the pass key? The pass key is";
    const std::vector<int32_t> tokens = tok.encode(prompt, true);
    ASSERT_GT(tokens.size(), 900u);
    ASSERT_LT(tokens.size(), 1100u);

    thread_pool pool(2);
    session s(*m, context_params{.n_ctx = 1200}, pool);
    s.eval(tokens);
    std::vector<int32_t> out;
    for (int i = 0; i < 6; ++i) {
        const float * logits = s.logits();
        const auto next = int32_t(std::max_element(logits, logits + m->hp().n_vocab) - logits);
        out.push_back(next);
        const int32_t one[] = {next};
        s.eval(one);
    }
    EXPECT_EQ(out, tok.encode("40582.", false)) << "got '" << tok.decode(out) << "'";
}

}  // namespace
}  // namespace hill
