// The tiered KV store: placement, moves between tiers, segments covering every token once, and
// dense attention over the tiers equal to the all-in-RAM run.
#include "core/error.h"
#include "engine/session.h"
#include "kv/cold_pool.h"
#include "kv/kv_store.h"
#include "model/synthetic_model.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>

namespace hill {
namespace {

// Rows whose first element encodes the token id (and K/V), the rest random.
struct rows_maker {
    int64_t n_embd_kv;
    std::vector<float> k(int64_t t) const { return row(t, 0.25f); }
    std::vector<float> v(int64_t t) const { return row(t, 0.75f); }
    std::vector<float> row(int64_t t, float tag) const {
        std::vector<float> r(static_cast<size_t>(n_embd_kv));
        for (int64_t i = 0; i < n_embd_kv; ++i) r[size_t(i)] = float((t * 31 + i * 7) % 97) + tag;
        r[0] = float(t) + tag;
        return r;
    }
};

TEST(kv_store, placement_moves_and_segments) {
    test::temp_dir dir;
    const kv_layout layout{2, 24, ggml_type::f32};  // 96-byte rows: 128 tokens per page
    const int32_t n_ctx = 1000;
    // Budget for 100 tokens per layer: 900 go cold.
    kv_store s(layout, kv_store_params{n_ctx, 100 * 2 * layout.token_layer_bytes(), 4, dir.file("kv")});
    EXPECT_EQ(s.hot_capacity(), 100);
    const rows_maker mk{24};
    for (int il = 0; il < 2; ++il) {
        // Layer 0 in one batch (prefill), layer 1 token by token (decode).
        std::vector<float> k, v;
        for (int64_t t = 0; t < n_ctx; ++t) {
            const auto kr = mk.k(t), vr = mk.v(t);
            k.insert(k.end(), kr.begin(), kr.end());
            v.insert(v.end(), vr.begin(), vr.end());
        }
        if (il == 0) {
            s.append(il, n_ctx, k.data(), v.data());
        } else {
            for (int64_t t = 0; t < n_ctx; ++t) s.append(il, 1, k.data() + t * 24, v.data() + t * 24);
        }
        EXPECT_EQ(s.n_tokens(il), n_ctx);
        EXPECT_EQ(s.n_cold(il), n_ctx - 100);
        // Sinks and the most recent tokens are hot, the middle cold.
        for (int64_t t : {0, 1, 2, 3, 904, 999}) EXPECT_EQ(s.where(il, t).tier, kv_tier::hot) << t;
        for (int64_t t : {4, 500, 903}) EXPECT_EQ(s.where(il, t).tier, kv_tier::cold) << t;
    }
    // Every token reads back, wherever it lives.
    std::vector<float> kr(24), vr(24);
    for (int il = 0; il < 2; ++il) {
        for (int64_t t = 0; t < n_ctx; ++t) {
            s.read_token(il, t, kr.data(), vr.data());
            ASSERT_EQ(kr, mk.k(t)) << il << " " << t;
            ASSERT_EQ(vr, mk.v(t)) << il << " " << t;
        }
    }
    // Promote a cold token (a hot one must make room first), demote it again.
    EXPECT_FALSE(s.move(0, 500, kv_tier::hot));  // hot pool full
    EXPECT_TRUE(s.move(0, 950, kv_tier::cold));
    EXPECT_TRUE(s.move(0, 500, kv_tier::hot));
    EXPECT_EQ(s.where(0, 500).tier, kv_tier::hot);
    s.read_token(0, 500, kr.data(), vr.data());
    EXPECT_EQ(kr, mk.k(500));
    s.read_token(0, 950, kr.data(), vr.data());
    EXPECT_EQ(vr, mk.v(950));
    EXPECT_EQ(s.stats().promotions, 1u);
    // Segments cover every token exactly once, with the right rows.
    for (int il = 0; il < 2; ++il) {
        std::multiset<int64_t> seen;
        s.for_each_segment(il, [&](const kv_view & view, const int32_t * rows, const int32_t * tokens) {
            for (int64_t j = 0; j < view.n_kv; ++j) {
                const auto * kp = static_cast<const float *>(view.k) + int64_t(rows[j]) * view.row_stride;
                const auto * vp = static_cast<const float *>(view.v) + int64_t(rows[j]) * view.row_stride;
                const auto t = int64_t(kp[0]);
                ASSERT_EQ(tokens[j], t);
                ASSERT_EQ(std::vector<float>(kp, kp + 24), mk.k(t));
                ASSERT_EQ(std::vector<float>(vp, vp + 24), mk.v(t));
                seen.insert(t);
            }
        });
        ASSERT_EQ(seen.size(), size_t(n_ctx));
        EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), size_t(n_ctx));
    }
    EXPECT_GT(s.stats().cold_read_bytes, 0u);
    // A gather: exactly the chosen tokens with their rows, reading only the pages that hold them
    // (tokens 10..20 share the first group of 128 cold slots; 800 and 950 lie in two others).
    // Keys only: no V is read.
    const std::vector<int32_t> chosen = {0, 3, 10, 11, 20, 500, 800, 950, 999};
    for (kv_part part : {kv_part::k_and_v, kv_part::k}) {
        std::vector<int32_t> got;
        const uint64_t read0 = s.stats().cold_read_bytes;
        s.for_each_segment_of(1, chosen, [&](const kv_view & view, const int32_t * rows, const int32_t * tokens) {
            ASSERT_EQ(view.v == nullptr, part == kv_part::k);
            for (int64_t j = 0; j < view.n_kv; ++j) {
                const auto * kp = static_cast<const float *>(view.k) + int64_t(rows[j]) * view.row_stride;
                ASSERT_EQ(std::vector<float>(kp, kp + 24), mk.k(tokens[j])) << tokens[j];
                if (view.v != nullptr) {
                    const auto * vp = static_cast<const float *>(view.v) + int64_t(rows[j]) * view.row_stride;
                    ASSERT_EQ(std::vector<float>(vp, vp + 24), mk.v(tokens[j])) << tokens[j];
                }
                got.push_back(tokens[j]);
            }
        }, part);
        std::sort(got.begin(), got.end());
        EXPECT_EQ(got, chosen);
        const uint64_t pages = s.stats().cold_read_bytes - read0;
        EXPECT_EQ(pages, (part == kv_part::k ? 1u : 2u) * 3u * layout.page_bytes());
    }
    // Export: every layer's rows in token order.
    std::vector<float> ek(size_t(n_ctx) * 24), ev(ek.size());
    for (int il = 0; il < 2; ++il) {
        s.export_layer(il, ek.data(), ev.data());
        for (int64_t t = 0; t < n_ctx; ++t) {
            ASSERT_EQ(std::vector<float>(ek.begin() + t * 24, ek.begin() + (t + 1) * 24), mk.k(t)) << t;
            ASSERT_EQ(std::vector<float>(ev.begin() + t * 24, ev.begin() + (t + 1) * 24), mk.v(t)) << t;
        }
    }
    // Truncate forgets the tail in every layer.
    s.truncate(300);
    for (int il = 0; il < 2; ++il) {
        EXPECT_EQ(s.n_tokens(il), 300);
        int64_t n = 0;
        s.for_each_segment(il, [&](const kv_view & view, const int32_t *, const int32_t *) { n += view.n_kv; });
        EXPECT_EQ(n, 300);
    }
}

// Truncating and regrowing gives the cold pages back: a pool sized for n_ctx lasts any number of
// rounds (it ran out on the second perplexity window before), and the tokens read back are the ones
// appended last, wherever the truncation falls (inside a written page, at a page boundary, at 0).
TEST(kv_store, truncate_and_regrow_reuses_the_cold_pool) {
    test::temp_dir dir;
    const kv_layout layout{2, 64, ggml_type::f32};  // 256-byte rows: 16 tokens per 4 KiB page
    const int32_t n_ctx = 300;
    kv_store kv(layout, kv_store_params{n_ctx, 40 * 2 * layout.token_layer_bytes(), 4, dir.file("kv")});
    ASSERT_NE(kv.cold(), nullptr);
    std::mt19937 rng(3);
    std::vector<float> k[2], v[2];  // per layer: f32 [n_ctx, 64], what the store should hold
    for (int il = 0; il < 2; ++il) {
        k[il].resize(size_t(n_ctx) * 64);
        v[il].resize(k[il].size());
    }
    for (const int64_t cut : {0, 150, 77, 288, 64, 0, 299, 5}) {
        for (int il = 0; il < 2; ++il) {
            const int64_t n0 = kv.n_tokens(il);
            for (size_t i = size_t(n0) * 64; i < k[il].size(); ++i) {
                k[il][i] = float(rng() % 1000);
                v[il][i] = -float(rng() % 1000);
            }
            kv.append(il, n_ctx - n0, k[il].data() + n0 * 64, v[il].data() + n0 * 64);
        }
        for (int il = 0; il < 2; ++il) {
            std::vector<float> ko(k[il].size()), vo(v[il].size());
            kv.export_layer(il, ko.data(), vo.data());
            ASSERT_EQ(ko, k[il]) << "cut " << cut << " layer " << il;
            ASSERT_EQ(vo, v[il]) << "cut " << cut << " layer " << il;
        }
        kv.truncate(cut);
        EXPECT_EQ(kv.n_tokens(0), cut);
    }
    kv.truncate(0);
    EXPECT_EQ(kv.cold()->n_free(), kv.cold()->n_pages());  // everything back in the pool
}

TEST(kv_store, budget_errors) {
    const kv_layout layout{2, 24, ggml_type::f16};
    // No cold pool and a budget below the context.
    EXPECT_THROW(kv_store(layout, kv_store_params{1000, 4096, 4, ""}), error);
    // A budget below the sinks plus one token.
    test::temp_dir dir;
    EXPECT_THROW(kv_store(layout, kv_store_params{1000, 2 * 4 * layout.token_layer_bytes(), 4, dir.file("kv")}), error);
    // A context shorter than the sinks needs only its own tokens.
    EXPECT_NO_THROW(kv_store(layout, kv_store_params{2, 2 * 2 * layout.token_layer_bytes(), 4, ""}));
}

// Dense attention over the tiers (75%+ of the KV cold) gives the logits of the all-in-RAM run:
// ≤ 1e-5 relative with F32 KV; with F16 KV the changed order of the softmax sums can round a later
// layer's K/V to the neighbouring f16, so the bound is 1e-3 (see test_golden.cpp).
class tiered_session : public ::testing::TestWithParam<ggml_type> {};

TEST_P(tiered_session, logits_equal_all_in_ram) {
    test::temp_dir dir;
    write_random_model(dir.file("m.gguf"), random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96, .n_layer = 3,
                                                              .n_head = 8, .n_head_kv = 2, .n_ctx = 512, .seed = 5});
    auto m = model::load(dir.file("m.gguf"));
    const ggml_type type = GetParam();
    std::vector<int32_t> prompt;
    for (int i = 0; i < 300; ++i) prompt.push_back(1 + (i * 53) % 299);
    thread_pool pool(2);
    const uint64_t per_token = m->hp().kv_bytes_per_token(type);
    const int32_t n_ctx = 400;
    session ram(*m, session_params{n_ctx, type, 64}, pool);
    session tiered(*m, session_params{.n_ctx = n_ctx, .kv_type = type, .n_batch = 64,
                                      .kv_host_budget = per_token * 80, .kv_dir = dir.file("kv")}, pool);
    // A prompt prefilled in two parts: the second part's chunks attend to the first part in the tiers.
    session continued(*m, session_params{.n_ctx = n_ctx, .kv_type = type, .n_batch = 64,
                                         .kv_host_budget = per_token * 80, .kv_dir = dir.file("kv2")}, pool);
    // A prompt longer than n_segment: prefilled segment after segment over the tiers.
    session segmented(*m, session_params{.n_ctx = n_ctx, .kv_type = type, .n_batch = 32, .n_segment = 70,
                                         .kv_host_budget = per_token * 80, .kv_dir = dir.file("kv3")}, pool);
    auto compare = [&](const session & s, const char * what) {
        double max_ref = 0.0, max_err = 0.0;
        for (int32_t i = 0; i < m->hp().n_vocab; ++i) {
            max_ref = std::max(max_ref, std::abs(double(ram.logits()[i])));
            max_err = std::max(max_err, std::abs(double(s.logits()[i]) - double(ram.logits()[i])));
        }
        EXPECT_LE(max_err / max_ref, type == ggml_type::f32 ? 1e-5 : 1e-3) << what;
    };
    ram.eval(prompt);
    tiered.eval(prompt);
    compare(tiered, "prefill");
    continued.eval(std::span<const int32_t>(prompt).first(150));
    continued.eval(std::span<const int32_t>(prompt).subspan(150));
    compare(continued, "prefill continued over the tiers");
    segmented.eval(prompt);
    compare(segmented, "prefill in segments");
    for (int step = 0; step < 40; ++step) {
        const int32_t tok = 1 + (step * 17) % 299;
        ram.eval(std::span<const int32_t>(&tok, 1));
        tiered.eval(std::span<const int32_t>(&tok, 1));
        compare(tiered, "decode");
    }
    for (int il = 0; il < m->hp().n_layer; ++il) {
        EXPECT_GE(tiered.kv().n_cold(il) * 4, tiered.kv().n_tokens(il) * 3) << "at least 75% cold";
    }
}

INSTANTIATE_TEST_SUITE_P(kv_types, tiered_session, ::testing::Values(ggml_type::f32, ggml_type::f16),
                         [](const auto & info) { return std::string(ggml_type_name(info.param)); });

}  // namespace
}  // namespace hill
