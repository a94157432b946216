// The synthetic workload of `hillinfer bench step` (experiments/step_bench.h): calibration reaches its
// targets, the KV of a token does not depend on how it is generated, and the forward gives the
// calibrated queries.
#include "core/fp16.h"
#include "experiments/step_bench.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace hill {
namespace {

workload_params small_shape() {
    workload_params p;
    p.n_layer = 2;
    p.n_head = 8;
    p.n_head_kv = 2;
    p.head_dim = 64;
    return p;
}

TEST(step_bench, calibration_reaches_the_overlap_and_mass_targets) {
    for (const double overlap : {0.8, 0.9}) {
        for (const double mass : {0.85, 0.94}) {
            workload_params p = small_shape();
            p.target_overlap = overlap;
            p.target_mass = mass;
            const synthetic_workload w(p);
            EXPECT_NEAR(w.calibration().overlap, overlap, 0.01) << overlap << " " << mass;
            EXPECT_NEAR(w.calibration().mass, mass, 0.01) << overlap << " " << mass;
            EXPECT_GT(w.calibration().rho, 0.0);
            EXPECT_LT(w.calibration().rho, 1.0);
        }
    }
}

TEST(step_bench, a_tokens_kv_depends_only_on_its_layer_and_position) {
    const synthetic_workload w(small_shape());
    const int64_t nkv = 2 * 64, n = 40;
    std::vector<uint16_t> k_all(static_cast<size_t>(n * nkv)), v_all(k_all.size()), k1(static_cast<size_t>(nkv)), v1(k1.size());
    w.kv(1, 100, n, k_all.data(), v_all.data());
    for (int64_t i = 0; i < n; i += 7) {
        w.kv(1, 100 + i, 1, k1.data(), v1.data());
        EXPECT_TRUE(std::equal(k1.begin(), k1.end(), k_all.begin() + i * nkv)) << i;
        EXPECT_TRUE(std::equal(v1.begin(), v1.end(), v_all.begin() + i * nkv)) << i;
    }
    w.kv(0, 100, 1, k1.data(), v1.data());  // another layer: other keys
    EXPECT_FALSE(std::equal(k1.begin(), k1.end(), k_all.begin()));
    // Outlier channels: channel scales of 10 and 20 show in the keys' spread.
    const std::vector<float> & c = w.channel_scales();
    int n10 = 0, n20 = 0;
    for (const float x : c) {
        n10 += x == 10.0f;
        n20 += x == 20.0f;
    }
    EXPECT_EQ(n10, 2);
    EXPECT_EQ(n20, 2);
}

TEST(step_bench, the_forward_gives_the_new_tokens_kv_and_correlated_queries) {
    const synthetic_workload w(small_shape());
    auto fwd = w.make_forward(16);
    const int64_t nq = 8 * 64, nkv = 2 * 64;
    std::vector<float> x(static_cast<size_t>(nq)), q0(x.size()), q1(x.size()), k(static_cast<size_t>(nkv)), v(k.size()), logits(16, 1.0f);
    const int32_t tok = 3, pos = 77;
    fwd->embed(&tok, &pos, 1, x.data());
    fwd->attention_input(0, x.data(), &pos, 1, q0.data(), k.data(), v.data());
    std::vector<uint16_t> kb(static_cast<size_t>(nkv)), vb(kb.size());
    w.kv(0, pos, 1, kb.data(), vb.data());
    for (int64_t j = 0; j < nkv; ++j) {
        ASSERT_EQ(k[size_t(j)], fp16_to_fp32(kb[size_t(j)])) << j;
        ASSERT_EQ(v[size_t(j)], fp16_to_fp32(vb[size_t(j)])) << j;
    }
    fwd->embed(&tok, &pos, 1, x.data());
    fwd->attention_input(0, x.data(), &pos, 1, q1.data(), k.data(), v.data());
    double dot = 0, n0 = 0, n1 = 0;
    for (int64_t i = 0; i < nq; ++i) {
        dot += double(q0[size_t(i)]) * q1[size_t(i)];
        n0 += double(q0[size_t(i)]) * q0[size_t(i)];
        n1 += double(q1[size_t(i)]) * q1[size_t(i)];
    }
    const double cosine = dot / std::sqrt(n0 * n1);
    EXPECT_GT(cosine, 0.9);   // consecutive queries are correlated ...
    EXPECT_LT(cosine, 0.9999);  // ... and move
    fwd->logits(x.data(), 1, logits.data());
    for (const float l : logits) EXPECT_EQ(l, 0.0f);
    // A second forward restarts the queries: same first query.
    auto again = w.make_forward(16);
    std::vector<float> q2(static_cast<size_t>(nq));
    again->embed(&tok, &pos, 1, x.data());
    again->attention_input(0, x.data(), &pos, 1, q2.data(), k.data(), v.data());
    EXPECT_EQ(q2, q0);
}

}  // namespace
}  // namespace hill
