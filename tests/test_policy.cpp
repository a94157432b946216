// Attention policies in the session: hillinfer selecting everything equals dense attention at any
// split between the tiers; the attended counts follow ⌈α·N⌉ + sinks + window; streaming attends to
// sinks and window only; diagnostics measure recall; bad parameters are usage errors.
#include "core/error.h"
#include "engine/session.h"
#include "model/synthetic_model.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace hill {
namespace {

class policy_test : public ::testing::Test {
protected:
    void SetUp() override {
        write_random_model(dir.file("m.gguf"), random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96,
                                                                   .n_layer = 2, .n_head = 8, .n_head_kv = 2,
                                                                   .n_ctx = 512, .seed = 3});
        m = model::load(dir.file("m.gguf"));
        for (int i = 0; i < 200; ++i) prompt.push_back(1 + (i * 41) % 299);
    }
    // budget_tokens: hot tokens per layer (0: everything in RAM).
    std::unique_ptr<session> make(const policy_params & p, ggml_type type, int64_t budget_tokens) {
        context_params sp{.n_ctx = 300, .kv_type = type, .n_batch = 64, .policy = p};
        if (budget_tokens > 0) {
            sp.kv_host_budget = uint64_t(budget_tokens) * m->hp().kv_bytes_per_token(type);
            sp.kv_dir = dir.file("kv" + std::to_string(n_dirs++));
        }
        return std::make_unique<session>(*m, sp, pool);
    }
    static double max_rel_diff(const session & a, const session & b, int32_t n_vocab) {
        double max_ref = 0.0, max_err = 0.0;
        for (int32_t i = 0; i < n_vocab; ++i) {
            max_ref = std::max(max_ref, std::abs(double(a.logits()[i])));
            max_err = std::max(max_err, std::abs(double(a.logits()[i]) - double(b.logits()[i])));
        }
        return max_err / max_ref;
    }
    test::temp_dir dir;
    std::unique_ptr<model> m;
    std::vector<int32_t> prompt;
    thread_pool pool{2};
    int n_dirs = 0;
};

TEST_F(policy_test, selecting_everything_equals_dense_attention_at_any_tier_split) {
    for (ggml_type type : {ggml_type::f32, ggml_type::f16}) {
        for (select_granularity g : {select_granularity::layer, select_granularity::kv_head}) {
            for (int64_t budget : {0, 50}) {  // all in RAM; 75% and more cold
                policy_params all{.kind = policy_kind::hillinfer, .alpha = 1.0, .n_sinks = 4, .n_window = 16};
                all.score.granularity = g;
                all.score.key = score_precision::int4;
                auto dense = make(policy_params{}, type, 0);
                auto sparse = make(all, type, budget);
                dense->eval(prompt);
                sparse->eval(prompt);
                for (int step = 0; step < 12; ++step) {
                    const int32_t tok = 1 + (step * 13) % 299;
                    dense->eval(std::span<const int32_t>(&tok, 1));
                    sparse->eval(std::span<const int32_t>(&tok, 1));
                    // f16 KV: the tiers change the order of the softmax sums (see test_kv_store.cpp).
                    ASSERT_LE(max_rel_diff(*dense, *sparse, 300), type == ggml_type::f32 ? 1e-5 : 1e-3)
                        << ggml_type_name(type) << " " << name(g) << " budget " << budget << " step " << step;
                }
                if (budget > 0) {
                    EXPECT_GE(sparse->kv().n_cold(0) * 4, sparse->kv().n_tokens(0) * 3);
                }
                const policy_layer_stats & L = sparse->policy().stats().layers[0];
                EXPECT_EQ(L.n_steps, 12u);
                EXPECT_EQ(L.n_attended, L.n_context);
            }
        }
    }
}

TEST_F(policy_test, attended_counts_follow_alpha_sinks_and_window) {
    policy_params p{.kind = policy_kind::hillinfer, .alpha = 0.1, .n_sinks = 4, .n_window = 16};
    auto s = make(p, ggml_type::f16, 50);
    s->eval(prompt);
    uint64_t want = 0;
    for (int step = 0; step < 5; ++step) {
        const int32_t tok = 7;
        s->eval(std::span<const int32_t>(&tok, 1));
        const int64_t n = int64_t(prompt.size()) + step + 1;
        want += uint64_t(4 + 16 + int64_t(std::ceil(0.1 * double(n))));
    }
    for (const policy_layer_stats & L : s->policy().stats().layers) EXPECT_EQ(L.n_attended, want);
    // Every selected token got a hit; the window and the sinks every step.
    EXPECT_EQ(s->kv().hits().get(0, 0), 5);
    EXPECT_EQ(s->kv().hits().get(1, int64_t(prompt.size())), 5);  // the first decoded token stays in the window
}

TEST_F(policy_test, streaming_attends_sinks_and_window_only) {
    policy_params p{.kind = policy_kind::streaming, .n_sinks = 4, .n_window = 16, .diag = true};
    policy_params full_diag{.kind = policy_kind::hillinfer, .alpha = 1.0, .diag = true};
    auto s = make(p, ggml_type::f32, 50);
    auto f = make(full_diag, ggml_type::f32, 0);
    s->eval(prompt);
    f->eval(prompt);
    for (int step = 0; step < 4; ++step) {
        const int32_t tok = 11;
        s->eval(std::span<const int32_t>(&tok, 1));
        f->eval(std::span<const int32_t>(&tok, 1));
    }
    for (int il = 0; il < 2; ++il) {
        const policy_layer_stats & L = s->policy().stats().layers[size_t(il)];
        EXPECT_EQ(L.n_attended, 4u * 20u);
        // A random model spreads attention: sinks + window cover only part of the mass.
        EXPECT_GT(L.recall_sum / double(L.n_steps), 0.0);
        EXPECT_LT(L.recall_sum / double(L.n_steps), 0.95);
        // The window slides by one token per step: 19 of 20 tokens stay selected.
        EXPECT_NEAR(L.overlap_sum / double(L.n_overlap), 19.0 / 20.0, 1e-12);
        const policy_layer_stats & F = f->policy().stats().layers[size_t(il)];
        EXPECT_NEAR(F.recall_sum / double(F.n_steps), 1.0, 1e-9);
    }
}

// One decode step of hillinfer over a store that is mostly cold, against a brute-force reference:
// exact scores (fp16 key precision = the stored f32 keys here), aggregate per group, sinks + window
// + top ⌈α·N⌉ of the middle, then each query head's dense attention over its group's set.
TEST(selection_policy, sparse_attention_equals_attention_over_the_reference_set) {
    test::temp_dir dir;
    const attention_shape shape{4, 2, 16, 0.25f};
    const int64_t n_embd_kv = 2 * 16, n = 400;
    const kv_layout layout{1, n_embd_kv, ggml_type::f32};
    std::mt19937 rng(9);
    std::normal_distribution<float> nd;
    std::vector<float> k(size_t(n * n_embd_kv)), v(k.size()), q(4 * 16);
    for (float & x : k) x = nd(rng);
    for (float & x : v) x = nd(rng);
    for (float & x : q) x = nd(rng);
    thread_pool pool(2);
    for (select_granularity g : {select_granularity::layer, select_granularity::kv_head}) {
        for (score_aggregate agg : {score_aggregate::sum, score_aggregate::max}) {
            kv_store kv(layout, kv_store_params{int32_t(n), 60 * layout.token_layer_bytes(), 4,
                                                dir.file(std::string(name(g)) + std::string(name(agg)))});
            kv.append(0, n, k.data(), v.data());
            policy_params p{.kind = policy_kind::hillinfer, .alpha = 0.05, .n_sinks = 4, .n_window = 8};
            p.score = score_params{.key = score_precision::fp16, .aggregate = agg, .granularity = g};
            auto policy = make_policy(p, shape, 1, n, pool);
            auto dev = make_cpu_device_tier(pool, 1, 4 * 16, 4);
            auto storage = csd::make_device(csd::storage_params{}, kv, shape, pool);
            std::vector<float> out(4 * 16);
            policy->attend(0, q.data(), kv, *storage, *dev, out.data());

            const int n_sets = g == select_granularity::layer ? 1 : 2;
            const int64_t n_top = int64_t(std::ceil(0.05 * double(n)));
            for (int h = 0; h < 4; ++h) {
                const int set = n_sets == 1 ? 0 : h / 2;
                auto dot = [&](int hq, int64_t t) {
                    double d = 0.0;
                    for (int i = 0; i < 16; ++i) d += double(q[size_t(hq * 16 + i)]) * k[size_t(t * n_embd_kv + (hq / 2) * 16 + i)];
                    return d;
                };
                std::vector<double> score(static_cast<size_t>(n), 0.0);
                for (int64_t t = 0; t < n; ++t) {
                    double a = agg == score_aggregate::sum ? 0.0 : -1e300;
                    for (int hq = 0; hq < 4; ++hq) {
                        if (n_sets == 2 && hq / 2 != set) continue;
                        a = agg == score_aggregate::sum ? a + dot(hq, t) : std::max(a, dot(hq, t));
                    }
                    score[size_t(t)] = a;
                }
                std::vector<int64_t> mid(size_t(n - 12));
                std::iota(mid.begin(), mid.end(), 4);
                std::sort(mid.begin(), mid.end(), [&](int64_t a, int64_t b) { return score[size_t(a)] > score[size_t(b)]; });
                std::vector<int64_t> chosen(mid.begin(), mid.begin() + n_top);
                for (int64_t t : {0, 1, 2, 3}) chosen.push_back(t);
                for (int64_t t = n - 8; t < n; ++t) chosen.push_back(t);
                double m = -1e300, l = 0.0;
                for (int64_t t : chosen) m = std::max(m, dot(h, t) * 0.25);
                std::vector<double> acc(16, 0.0);
                for (int64_t t : chosen) {
                    const double w = std::exp(dot(h, t) * 0.25 - m);
                    l += w;
                    for (int i = 0; i < 16; ++i) acc[size_t(i)] += w * v[size_t(t * n_embd_kv + (h / 2) * 16 + i)];
                }
                for (int i = 0; i < 16; ++i) {
                    ASSERT_NEAR(out[size_t(h * 16 + i)], acc[size_t(i)] / l, 1e-5)
                        << name(g) << " " << name(agg) << " head " << h << " dim " << i;
                }
            }
            // The union of the sets: one set of 12 + n_top; two sets share the sinks and window.
            const uint64_t attended = policy->stats().layers[0].n_attended;
            if (n_sets == 1) {
                EXPECT_EQ(attended, uint64_t(12 + n_top));
            } else {
                EXPECT_GE(attended, uint64_t(12 + n_top));
                EXPECT_LE(attended, uint64_t(12 + 2 * n_top));
            }
        }
    }
}

TEST_F(policy_test, bad_parameters_are_usage_errors) {
    auto expect_usage = [](const policy_params & p, const char * what) {
        try {
            validate(p);
            ADD_FAILURE() << "accepted " << what;
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::usage) << what;
        }
    };
    expect_usage(policy_params{.alpha = 0.0}, "alpha 0");
    expect_usage(policy_params{.alpha = 1.5}, "alpha 1.5");
    expect_usage(policy_params{.alpha = std::nan("")}, "alpha NaN");
    expect_usage(policy_params{.n_sinks = -1}, "negative sinks");
    expect_usage(policy_params{.n_window = -2}, "negative window");
    EXPECT_NO_THROW(validate(policy_params{.alpha = 1.0, .n_sinks = 0, .n_window = 0}));
    EXPECT_EQ(parse_policy("streaming"), policy_kind::streaming);
    try {
        parse_policy("h2o");
        ADD_FAILURE() << "accepted h2o";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("full, hillinfer or streaming"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace hill
