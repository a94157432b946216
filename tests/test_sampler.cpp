#include "core/error.h"
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace hill {
namespace {

TEST(sampler, greedy_picks_the_first_maximum) {
    sampler s(sampler_params{.temperature = 0.0f}, 5);
    std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f, 2.0f};
    EXPECT_EQ(s.sample(l.data()), 1);
}

// --ignore-eos: a banned token is never drawn, however likely, greedy or not; ids outside the vocabulary
// are ignored.
TEST(sampler, banned_tokens_are_never_sampled) {
    sampler greedy(sampler_params{.temperature = 0.0f, .banned = {1, 99, -1}}, 4);
    std::vector<float> l = {0.0f, 9.0f, 2.0f, 1.0f};
    EXPECT_EQ(greedy.sample(l.data()), 2);
    sampler drawn(sampler_params{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 5, .banned = {0}}, 3);
    for (int i = 0; i < 200; ++i) {
        std::vector<float> x = {5.0f, 0.0f, 0.0f};
        EXPECT_NE(drawn.sample(x.data()), 0);
    }
}

TEST(sampler, top_k_1_is_greedy_at_any_temperature) {
    sampler s(sampler_params{.temperature = 5.0f, .top_k = 1, .seed = 3}, 4);
    for (int i = 0; i < 50; ++i) {
        std::vector<float> l = {0.0f, 0.5f, 0.4f, 0.1f};
        EXPECT_EQ(s.sample(l.data()), 1);
    }
}

TEST(sampler, same_seed_same_tokens) {
    auto draw = [](uint64_t seed) {
        sampler s(sampler_params{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = seed}, 16);
        std::vector<int32_t> out;
        for (int i = 0; i < 40; ++i) {
            std::vector<float> l(16);
            for (int j = 0; j < 16; ++j) l[size_t(j)] = float(j % 5);
            out.push_back(s.sample(l.data()));
        }
        return out;
    };
    EXPECT_EQ(draw(9), draw(9));
    EXPECT_NE(draw(9), draw(10));
}

TEST(sampler, frequencies_follow_softmax_at_temperature_one) {
    sampler s(sampler_params{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 1}, 3);
    const std::vector<float> base = {0.0f, std::log(2.0f), std::log(7.0f)};  // p = 0.1, 0.2, 0.7
    std::map<int32_t, int> n;
    const int draws = 20000;
    for (int i = 0; i < draws; ++i) {
        std::vector<float> l = base;
        ++n[s.sample(l.data())];
    }
    EXPECT_NEAR(n[0] / double(draws), 0.1, 0.015);
    EXPECT_NEAR(n[1] / double(draws), 0.2, 0.015);
    EXPECT_NEAR(n[2] / double(draws), 0.7, 0.015);
}

TEST(sampler, top_p_keeps_the_smallest_prefix_reaching_p) {
    // p = 0.6, 0.3, 0.1: top_p 0.5 keeps only the first; 0.85 keeps two.
    const std::vector<float> base = {std::log(6.0f), std::log(3.0f), std::log(1.0f)};
    sampler a(sampler_params{.temperature = 1.0f, .top_k = 0, .top_p = 0.5f, .min_p = 0.0f, .seed = 2}, 3);
    sampler b(sampler_params{.temperature = 1.0f, .top_k = 0, .top_p = 0.85f, .min_p = 0.0f, .seed = 2}, 3);
    bool saw_second = false;
    for (int i = 0; i < 500; ++i) {
        std::vector<float> l = base;
        EXPECT_EQ(a.sample(l.data()), 0);
        l = base;
        const int32_t t = b.sample(l.data());
        EXPECT_NE(t, 2);
        saw_second |= t == 1;
    }
    EXPECT_TRUE(saw_second);
}

TEST(sampler, min_p_drops_unlikely_tokens) {
    // p = 0.6, 0.3, 0.1; min_p 0.2 drops tokens below 0.12: the third.
    const std::vector<float> base = {std::log(6.0f), std::log(3.0f), std::log(1.0f)};
    sampler s(sampler_params{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.2f, .seed = 4}, 3);
    for (int i = 0; i < 500; ++i) {
        std::vector<float> l = base;
        EXPECT_NE(s.sample(l.data()), 2);
    }
}

TEST(sampler, repetition_penalty_moves_greedy_away_from_recent_tokens) {
    sampler s(sampler_params{.temperature = 0.0f, .repeat_penalty = 2.0f, .repeat_last_n = 4}, 3);
    s.accept(0);
    std::vector<float> l = {2.0f, 1.5f, -1.0f};  // 2.0 / 2 = 1.0 < 1.5
    EXPECT_EQ(s.sample(l.data()), 1);
    EXPECT_FLOAT_EQ(l[0], 1.0f);
    // A negative logit is multiplied.
    sampler t(sampler_params{.temperature = 0.0f, .repeat_penalty = 2.0f}, 2);
    t.accept(1);
    std::vector<float> m = {-1.5f, -1.0f};
    EXPECT_EQ(t.sample(m.data()), 0);
    EXPECT_FLOAT_EQ(m[1], -2.0f);
}

TEST(sampler, bad_values_are_usage_errors) {
    for (sampler_params p : {sampler_params{.temperature = -1.0f}, sampler_params{.top_k = -2},
                             sampler_params{.top_p = 2.0f}, sampler_params{.top_p = 0.0f},
                             sampler_params{.min_p = 1.5f}, sampler_params{.repeat_penalty = 0.0f}}) {
        try {
            validate(p);
            FAIL() << "expected a usage error";
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::usage);
        }
    }
}

}  // namespace
}  // namespace hill
