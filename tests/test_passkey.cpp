// The passkey task: the generated haystack, the prompt, and retrieval at 1K tokens (passkey_check.h
// says what is checked; 4K and 16K in test_passkey_long, 64K and 128K in test_passkey_slow).
#include "core/error.h"
#include "passkey_check.h"

namespace hill {

TEST(passkey, generated_haystack_holds_no_needle_words_or_digits) {
    const std::string h = generated_haystack(7, 20000);
    EXPECT_GE(h.size(), 20000u);
    EXPECT_EQ(h.find_first_of("0123456789"), std::string::npos);
    for (const char * w : {" pass ", " key ", " is ", "Pass ", "Key ", "Is "}) EXPECT_EQ(h.find(w), std::string::npos) << w;
    EXPECT_EQ(h, generated_haystack(7, 20000));
    EXPECT_NE(h, generated_haystack(8, 20000));
}

TEST(passkey, prompt_has_the_needle_at_its_depth_and_fits) {
    test::temp_dir dir;
    write_passkey_model(dir.file("passkey.gguf"), passkey_model_params{.n_ctx = 4096});
    auto m = model::load(dir.file("passkey.gguf"));
    for (double depth : {0.0, 0.3, 1.0}) {
        const passkey_prompt p = make_passkey_prompt(m->tokenizer(), passkey_prompt_params{.n_tokens = 2000, .depth = depth});
        EXPECT_LE(p.n_tokens, 2000);
        EXPECT_GE(p.n_tokens, 1960);
        EXPECT_EQ(p.passkey.size(), 5u);
        const std::string needle = "The pass key is " + p.passkey + ". Remember it.";
        const std::string question = " What is the pass key? The pass key is";
        const size_t at = p.text.find(needle);
        ASSERT_NE(at, std::string::npos) << p.text.substr(0, 200);
        const double haystack = double(p.text.size() - needle.size() - question.size());
        EXPECT_NEAR(double(at) / haystack, depth, 0.01) << depth;
        EXPECT_TRUE(p.text.ends_with(" What is the pass key? The pass key is")) << p.text.substr(p.text.size() - 80);
    }
    EXPECT_THROW(make_passkey_prompt(m->tokenizer(), passkey_prompt_params{.n_tokens = 20}), error);
    EXPECT_THROW(make_passkey_prompt(m->tokenizer(), passkey_prompt_params{.depth = 1.5}), error);
}

TEST(passkey, retrieval_1k) { test::check_retrieval(1024); }

}  // namespace hill
