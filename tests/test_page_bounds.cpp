// Page bounds (score/page_bounds.h, Quest's scoring copy): a page's score bounds q·k of every key in the
// page from above, per head; pages of one token score q·k itself; bounds round outwards to f16; a page
// written again from its start forgets its old keys; a NaN key makes its page's score NaN and no other;
// heads aggregate as score_params says.
#include "core/fp16.h"
#include "score/page_bounds.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace hill {
namespace {

// f16 keys [n, n_kv · hd] from N(0, 1) with channel 3 of every head ×20 (an outlier channel).
std::vector<uint16_t> random_keys(std::mt19937 & rng, int64_t n, int n_kv, int hd) {
    std::normal_distribution<float> nd;
    std::vector<uint16_t> k(size_t(n) * size_t(n_kv) * size_t(hd));
    for (size_t i = 0; i < k.size(); ++i) k[i] = fp32_to_fp16(nd(rng) * (i % size_t(hd) == 3 ? 20.0f : 1.0f));
    return k;
}

double dot(const float * q, const uint16_t * k, int hd) {
    double s = 0.0;
    for (int d = 0; d < hd; ++d) s += double(q[d]) * double(fp16_to_fp32(k[d]));
    return s;
}

TEST(page_bounds, a_page_score_bounds_every_key_of_the_page_per_head) {
    const uint32_t seed = test::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const int n_kv = 4, hd = 32, n = 203;  // one head per KV head: kv_head granularity gives each head's bound
    const attention_shape s{n_kv, n_kv, hd, 1.0f / std::sqrt(float(hd))};
    thread_pool pool(2);
    for (const int page : {1, 7, 16}) {
        SCOPED_TRACE("page " + std::to_string(page));
        page_bounds pb(s, score_params{.aggregate = score_aggregate::sum, .granularity = select_granularity::kv_head},
                       page, 1, 2, 256, 2);
        const std::vector<uint16_t> k = random_keys(rng, n, n_kv, hd);
        // In two writes, the second from inside a page (a decode step's append).
        pb.write(0, 1, 0, 150, ggml_type::f16, k.data(), n_kv * hd);
        pb.write(0, 1, 150, n - 150, ggml_type::f16, k.data() + 150 * n_kv * hd, n_kv * hd);
        const std::vector<float> q = test::random_floats(rng, size_t(n_kv * hd), -2.0f, 2.0f);
        pb.prepare_query(0, 1, q.data(), nullptr);
        std::vector<float> sc(size_t(n_kv) * n);
        pb.score(n, sc.data(), n, pool);
        for (int g = 0; g < n_kv; ++g) {
            for (int64_t t = 0; t < n; ++t) {
                const int64_t p0 = t / page * page;
                double best = -INFINITY, qabs = 0.0;
                for (int64_t u = p0; u < std::min<int64_t>(n, p0 + page); ++u) {
                    best = std::max(best, dot(q.data() + g * hd, k.data() + (u * n_kv + g) * hd, hd));
                }
                for (int d = 0; d < hd; ++d) qabs += std::fabs(q[size_t(g * hd + d)]) * 100.0;
                const float u = sc[size_t(g) * n + t];
                EXPECT_GE(double(u), best - 1e-6 * qabs) << "head " << g << " token " << t;
                if (page == 1) {
                    EXPECT_NEAR(double(u), best, 1e-6 * qabs) << "head " << g << " token " << t;
                }
                EXPECT_EQ(u, sc[size_t(g) * n + p0]) << "every token of a page scores the page";
            }
        }
    }
}

TEST(page_bounds, bounds_round_outwards_to_f16_and_a_page_start_resets_them) {
    const attention_shape s{2, 1, 4, 0.5f};
    page_bounds pb(s, score_params{.aggregate = score_aggregate::sum}, 4, 1, 1, 16, 1);
    const float third = 1.0f / 3.0f;
    const std::vector<float> k0 = {third, -third, 70000.0f, 0.0f}, k1 = {-1.0f, 1.0f, 0.0f, -1e-9f};
    pb.write(0, 0, 0, 1, ggml_type::f32, k0.data(), 4);
    const uint16_t * b = pb.bounds(0, 0, 0);
    for (int d = 0; d < 2; ++d) {
        const float x = k0[size_t(d)];
        EXPECT_LT(fp16_to_fp32(b[d]), x);
        EXPECT_GT(fp16_to_fp32(b[4 + d]), x);
        EXPECT_EQ(b[4 + d], uint16_t(b[d] + (x > 0 ? 1 : -1)));  // adjacent f16 values (magnitude order)
    }
    EXPECT_EQ(fp16_to_fp32(b[2]), 65504.0f);  // the largest f16 below 70000
    EXPECT_TRUE(std::isinf(fp16_to_fp32(b[6])));
    EXPECT_EQ(b[3], 0u);
    EXPECT_EQ(b[7], 0u);
    pb.write(0, 0, 1, 1, ggml_type::f32, k1.data(), 4);  // widens
    EXPECT_EQ(fp16_to_fp32(b[0]), -1.0f);
    EXPECT_EQ(fp16_to_fp32(b[5]), 1.0f);
    EXPECT_LT(fp16_to_fp32(b[3]), 0.0f);  // below -1e-9: the smallest negative subnormal
    EXPECT_EQ(b[7], 0u);
    // Written again from its start (after a truncation): the page holds the new keys only.
    pb.write(0, 0, 0, 1, ggml_type::f32, k1.data(), 4);
    EXPECT_EQ(fp16_to_fp32(b[0]), -1.0f);
    EXPECT_EQ(fp16_to_fp32(b[4]), -1.0f);
    EXPECT_EQ(fp16_to_fp32(b[1]), 1.0f);
    EXPECT_EQ(fp16_to_fp32(b[6]), 0.0f);
}

TEST(page_bounds, a_nan_key_makes_its_page_nan_and_heads_aggregate_as_asked) {
    const int n_head = 4, n_kv = 2, hd = 8, n = 40, page = 8;
    const attention_shape s{n_head, n_kv, hd, 1.0f / std::sqrt(float(hd))};
    std::mt19937 rng(5);
    std::vector<uint16_t> k = random_keys(rng, n, n_kv, hd);
    k[size_t(17 * n_kv * hd + hd + 2)] = 0x7e00u;  // token 17, KV head 1: NaN
    const std::vector<float> q = test::random_floats(rng, size_t(n_head * hd));
    thread_pool pool(2);
    // Each head's bound, from single-head copies (kv_head granularity over MHA shapes).
    std::vector<std::vector<float>> head(n_head, std::vector<float>(n));
    for (int h = 0; h < n_head; ++h) {
        page_bounds one(attention_shape{1, 1, hd, s.scale}, score_params{.aggregate = score_aggregate::sum}, page, 1, 1, n,
                        2);
        std::vector<uint16_t> kh(size_t(n) * hd);
        for (int t = 0; t < n; ++t) {
            std::copy_n(k.begin() + (t * n_kv + h / 2) * hd, hd, kh.begin() + t * hd);
        }
        one.write(0, 0, 0, n, ggml_type::f16, kh.data(), hd);
        one.prepare_query(0, 0, q.data() + h * hd, nullptr);
        one.score(n, head[size_t(h)].data(), n, pool);
    }
    const std::vector<float> mass = {0.5f, -1.0f, 2.0f, 0.0f};
    for (const score_aggregate agg : {score_aggregate::sum, score_aggregate::max, score_aggregate::softmax}) {
        for (const select_granularity gr : {select_granularity::layer, select_granularity::kv_head}) {
            SCOPED_TRACE(std::string(name(agg)) + " " + std::string(name(gr)));
            page_bounds pb(s, score_params{.aggregate = agg, .granularity = gr}, page, 1, 1, n, 2);
            pb.write(0, 0, 0, n, ggml_type::f16, k.data(), n_kv * hd);
            pb.prepare_query(0, 0, q.data(), mass.data());
            std::vector<float> sc(size_t(n_kv) * n);
            pb.score(n, sc.data(), n, pool);
            const int n_group = gr == select_granularity::layer ? 1 : n_kv, per = n_head / n_group;
            for (int g = 0; g < n_group; ++g) {
                for (int t = 0; t < n; ++t) {
                    float c = 0.0f;
                    for (int i = 0; i < per; ++i) {
                        const int h = g * per + i;
                        const float term = head_term(agg, head[size_t(h)][size_t(t)], log2_e * s.scale, mass[size_t(h)]);
                        c = i == 0 ? term : combine_scores(agg, c, term);
                    }
                    const float want = group_score(agg, c);
                    const float got = sc[size_t(g) * n + size_t(t)];
                    const bool nan_page = t / page == 17 / page && (gr == select_granularity::layer || g == 1);
                    EXPECT_EQ(std::isnan(got), nan_page) << "group " << g << " token " << t;
                    if (!nan_page) {
                        EXPECT_EQ(got, want) << "group " << g << " token " << t;
                    }
                }
            }
        }
    }
}

}  // namespace
}  // namespace hill
