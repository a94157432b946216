// Weight schemes of the model writers (model/weight_scheme.h): names, llama.cpp's Q4_K_M rule and
// fallbacks, and a random model written as q4_k_m / q6_k read back tensor by tensor.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/ggml_type.h"
#include "format/gguf_file.h"
#include "model/synthetic_model.h"
#include "model/weight_scheme.h"
#include "test_util.h"

namespace hill {
namespace {

TEST(weight_scheme, names) {
    EXPECT_EQ(weight_scheme_from_name("q4_k_m"), weight_scheme(ggml_type::q4_k, true));
    EXPECT_EQ(weight_scheme_from_name("Q4_K_M"), weight_scheme(ggml_type::q4_k, true));
    EXPECT_EQ(weight_scheme_from_name("q6_k"), weight_scheme(ggml_type::q6_k));
    EXPECT_EQ(weight_scheme_from_name("q5_1"), weight_scheme(ggml_type::q5_1));
    EXPECT_EQ(weight_scheme_from_name("f16"), weight_scheme(ggml_type::f16));
    // Read but not written, and names that are not schemes.
    for (const char * n : {"q2_k", "q3_k", "iq4_nl", "iq4_xs", "q4_k_s", "q8_k", ""}) {
        EXPECT_FALSE(weight_scheme_from_name(n)) << n;
    }
    EXPECT_EQ(weight_scheme_name(weight_scheme(ggml_type::q4_k, true)), "Q4_K_M");
    EXPECT_EQ(weight_scheme_name(ggml_type::q5_k), "Q5_K");
    EXPECT_EQ(weight_scheme_file_type(weight_scheme(ggml_type::q4_k, true)), 15u);
    EXPECT_EQ(weight_scheme_file_type(ggml_type::q6_k), 18u);
    EXPECT_EQ(weight_scheme_file_type(ggml_type::q8_0), 7u);
}

// llama.cpp's use_more_bits for 32 layers: layers 0-3 and 28-31, and 6, 9, ..., 27 in between.
TEST(weight_scheme, q4_k_m_rule) {
    const weight_scheme s(ggml_type::q4_k, true);
    auto type = [&](const std::string & name, bool has_output = true) {
        return weight_scheme_type(s, name, 4096, 32, has_output).type;
    };
    for (int il = 0; il < 32; ++il) {
        const bool more = il < 4 || il >= 28 || (il >= 4 && (il - 4) % 3 == 2);
        const ggml_type want = more ? ggml_type::q6_k : ggml_type::q4_k;
        EXPECT_EQ(type(fmt::format("blk.{}.attn_v.weight", il)), want) << il;
        EXPECT_EQ(type(fmt::format("blk.{}.ffn_down.weight", il)), want) << il;
        EXPECT_EQ(type(fmt::format("blk.{}.attn_q.weight", il)), ggml_type::q4_k) << il;
        EXPECT_EQ(type(fmt::format("blk.{}.ffn_up.weight", il)), ggml_type::q4_k) << il;
    }
    EXPECT_EQ(type("blk.6.attn_v.weight"), ggml_type::q6_k);
    EXPECT_EQ(type("blk.7.attn_v.weight"), ggml_type::q4_k);
    EXPECT_EQ(type("output.weight"), ggml_type::q6_k);
    EXPECT_EQ(type("token_embd.weight"), ggml_type::q4_k);
    EXPECT_EQ(type("token_embd.weight", false), ggml_type::q6_k);  // tied output
    // Not a layer tensor of the rule.
    EXPECT_EQ(type("blk.x.attn_v.weight"), ggml_type::q4_k);
    EXPECT_EQ(type("blk.3.attn_v.weight.extra"), ggml_type::q4_k);
}

TEST(weight_scheme, fallback_when_the_block_does_not_divide_the_row) {
    auto pick = [](ggml_type t, int64_t ne0) { return weight_scheme_type(t, "blk.0.ffn_down.weight", ne0, 4, true); };
    EXPECT_EQ(pick(ggml_type::q4_k, 512).type, ggml_type::q4_k);
    EXPECT_FALSE(pick(ggml_type::q4_k, 512).fallback);
    EXPECT_EQ(pick(ggml_type::q4_k, 704).type, ggml_type::q5_0);
    EXPECT_TRUE(pick(ggml_type::q4_k, 704).fallback);
    EXPECT_EQ(pick(ggml_type::q5_k, 704).type, ggml_type::q5_1);
    EXPECT_EQ(pick(ggml_type::q6_k, 96).type, ggml_type::q8_0);
    EXPECT_EQ(pick(ggml_type::q6_k, 48).type, ggml_type::f16);
    EXPECT_EQ(pick(ggml_type::q8_0, 33).type, ggml_type::f16);
    EXPECT_EQ(pick(ggml_type::f32, 33).type, ggml_type::f32);
}

TEST(weight_scheme, random_model_tensor_types) {
    test::temp_dir dir;
    const std::string path = dir.file("m.gguf");
    // 16 layers: attn_v / ffn_down get Q6_K in layers 0, 1, 4, 7, 10, 13, 14, 15. ffn_down's rows
    // (n_ff = 288) are not a multiple of 256: Q6_K -> Q8_0, Q4_K -> Q5_0.
    write_random_model(path, random_model_params{.n_vocab = 300, .n_embd = 256, .n_ff = 288, .n_layer = 16,
                                                 .n_head = 4, .n_head_kv = 2, .n_ctx = 64,
                                                 .type = weight_scheme(ggml_type::q4_k, true)});
    const auto g = gguf_file::open(path);
    auto type_of = [&](const std::string & name) {
        const gguf_tensor_info * t = g->find_tensor(name);
        EXPECT_NE(t, nullptr) << name;
        return t != nullptr ? t->type : ggml_type::f32;
    };
    EXPECT_EQ(type_of("output.weight"), ggml_type::q6_k);
    EXPECT_EQ(type_of("token_embd.weight"), ggml_type::q4_k);
    EXPECT_EQ(type_of("output_norm.weight"), ggml_type::f32);
    for (int il = 0; il < 16; ++il) {
        const bool more = il < 2 || il >= 14 || (il - 2) % 3 == 2;
        EXPECT_EQ(type_of(fmt::format("blk.{}.attn_v.weight", il)), more ? ggml_type::q6_k : ggml_type::q4_k) << il;
        EXPECT_EQ(type_of(fmt::format("blk.{}.ffn_down.weight", il)), more ? ggml_type::q8_0 : ggml_type::q5_0) << il;
        EXPECT_EQ(type_of(fmt::format("blk.{}.ffn_gate.weight", il)), ggml_type::q4_k) << il;
        EXPECT_EQ(type_of(fmt::format("blk.{}.attn_output.weight", il)), ggml_type::q4_k) << il;
    }
}

}  // namespace
}  // namespace hill
