// Golden values: stories260K (llama2.c checkpoint and its GGUF twin) decoded greedily from BOS for
// 256 steps gives the ids of stories260K.greedy256.json, and the logits of its first 4 positions
// match within 1e-4 relative.
#include "hillinfer/hillinfer.h"  // the umbrella header: also checks that it compiles on its own
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

namespace hill {
namespace {

struct golden {
    std::vector<int32_t> ids;
    std::vector<std::vector<double>> logits;  // [4, n_vocab]
    std::string text;
};

golden read_golden(const std::string & path) {
    std::ifstream in(path);
    const auto j = nlohmann::json::parse(in);
    golden g;
    g.ids = j.at("ids").get<std::vector<int32_t>>();
    g.logits = j.at("logits_pos0_3").get<std::vector<std::vector<double>>>();
    g.text = j.at("text").get<std::string>();
    return g;
}

void check_model(const model & m, const golden & g, ggml_type kv_type, bool check_logits) {
    thread_pool pool(2);
    session s(m, context_params{512, kv_type}, pool);
    sampler greedy(sampler_params{.temperature = 0.0f}, m.hp().n_vocab);
    std::vector<int32_t> ids = {g.ids[0]};
    for (size_t step = 0; step + 1 < g.ids.size(); ++step) {
        s.eval(std::span<const int32_t>(&ids.back(), 1));
        if (check_logits && step < g.logits.size()) {
            double max_ref = 0.0, max_err = 0.0;
            for (size_t i = 0; i < g.logits[step].size(); ++i) {
                max_ref = std::max(max_ref, std::abs(g.logits[step][i]));
                max_err = std::max(max_err, std::abs(double(s.logits()[i]) - g.logits[step][i]));
            }
            std::printf("position %zu: max |logit error| / max |logit| = %.2e\n", step, max_err / max_ref);
            EXPECT_LE(max_err / max_ref, 1e-4) << "position " << step;
        }
        std::vector<float> logits(s.logits(), s.logits() + m.hp().n_vocab);
        ids.push_back(greedy.sample(logits.data()));
    }
    EXPECT_EQ(ids, g.ids);
    std::vector<int32_t> generated(ids.begin() + 1, ids.end());
    EXPECT_EQ(m.tokenizer().decode(generated), g.text);
}

TEST(golden, stories260k_llama2c) {
    HILL_REQUIRE_DATA(bin, "models/llama2c/stories260K.bin");
    HILL_REQUIRE_DATA(tok, "tokenizers/tok512/tok512.bin");
    HILL_REQUIRE_DATA(ref, "models/llama2c/stories260K.greedy256.json");
    auto m = model::load(bin, tok);
    check_model(*m, read_golden(ref), ggml_type::f32, true);
}

TEST(golden, stories260k_gguf) {
    HILL_REQUIRE_DATA(path, "models/gguf/stories260K.gguf");
    HILL_REQUIRE_DATA(ref, "models/llama2c/stories260K.greedy256.json");
    auto m = model::load(path);
    check_model(*m, read_golden(ref), ggml_type::f32, true);
}

// The default F16 KV cache keeps the greedy path of this model.
TEST(golden, stories260k_f16_kv_cache) {
    HILL_REQUIRE_DATA(path, "models/gguf/stories260K.gguf");
    HILL_REQUIRE_DATA(ref, "models/llama2c/stories260K.greedy256.json");
    auto m = model::load(path);
    check_model(*m, read_golden(ref), ggml_type::f16, false);
}

// Prefilling a prompt in one batch gives the logits of token-by-token decoding.
TEST(golden, stories260k_prefill_equals_decode) {
    HILL_REQUIRE_DATA(path, "models/gguf/stories260K.gguf");
    HILL_REQUIRE_DATA(ref, "models/llama2c/stories260K.greedy256.json");
    auto m = model::load(path);
    const golden g = read_golden(ref);
    const std::vector<int32_t> prompt(g.ids.begin(), g.ids.begin() + 100);
    thread_pool pool(2);
    session a(*m, context_params{512, ggml_type::f32, 64}, pool);
    a.eval(prompt, true);
    session b(*m, context_params{512, ggml_type::f32, 1}, pool);
    const int32_t n_vocab = m->hp().n_vocab;
    for (size_t t = 0; t < prompt.size(); ++t) {
        b.eval(std::span<const int32_t>(&prompt[t], 1));
        for (int32_t i = 0; i < n_vocab; ++i) {
            ASSERT_NEAR(a.logits()[t * size_t(n_vocab) + size_t(i)], b.logits()[i], 1e-4) << "token " << t;
        }
    }
}


// With 75% of the KV only in the cold tier, dense attention over the tiers gives the logits of the
// all-in-RAM run bit for bit at every step of the golden decode, for F32 and F16 KV, and the same ids:
// the decode step attends in position order, window by window, wherever each token lives
// (kv/ordered_gather.h), so the tiers change neither the values nor the order of the softmax sums.
TEST(golden, stories260k_with_75_percent_of_the_kv_cold) {
    HILL_REQUIRE_DATA(path, "models/gguf/stories260K.gguf");
    HILL_REQUIRE_DATA(ref, "models/llama2c/stories260K.greedy256.json");
    auto m = model::load(path);
    const golden g = read_golden(ref);
    test::temp_dir dir;
    thread_pool pool(2);
    const int32_t n_vocab = m->hp().n_vocab;
    for (ggml_type type : {ggml_type::f32, ggml_type::f16}) {
        SCOPED_TRACE(std::string(ggml_type_name(type)));
        const uint64_t per_token = m->hp().kv_bytes_per_token(type);
        session ram(*m, context_params{512, type}, pool);
        // 64 hot tokens per layer: after 256 steps, 75% of the KV is cold.
        session tiered(*m, context_params{.n_ctx = 512, .kv_type = type, .kv_host_budget = per_token * 64,
                                          .kv_dir = dir.file("kv")}, pool);
        ASSERT_EQ(ram.ctx().cold(), nullptr);
        ASSERT_NE(tiered.ctx().cold(), nullptr);
        std::vector<int32_t> ids = {g.ids[0]};
        for (size_t step = 0; step + 1 < g.ids.size(); ++step) {
            ram.eval(std::span<const int32_t>(&ids.back(), 1));
            tiered.eval(std::span<const int32_t>(&ids.back(), 1));
            for (int32_t i = 0; i < n_vocab; ++i) {
                ASSERT_EQ(f32_to_bits(tiered.logits()[i]), f32_to_bits(ram.logits()[i]))
                    << "step " << step << " logit " << i << ": tiered " << tiered.logits()[i] << ", in RAM "
                    << ram.logits()[i];
            }
            ids.push_back(int32_t(std::max_element(ram.logits(), ram.logits() + n_vocab) - ram.logits()));
        }
        EXPECT_EQ(ids, g.ids);
        const kv_cells & c = tiered.ctx().cells();
        for (int il = 0; il < m->hp().n_layer; ++il) {
            EXPECT_GE(4 * (c.n_tokens(0) - c.n_hot(il)), 3 * c.n_tokens(0)) << "layer " << il;
        }
        // The cold tokens were read from the cold pool's pages by the storage device.
        const csd::device_counters dc = tiered.ctx().storage().counters();
        EXPECT_GT(dc.tokens_read, 0u);
        EXPECT_GT(dc.internal_read_bytes, 0u);
        EXPECT_GT(tiered.ctx().io_stats().cold_write_bytes, 0u);
        EXPECT_EQ(tiered.ctx().decode_stats().n_failed, 0u);
    }
}

}  // namespace
}  // namespace hill
