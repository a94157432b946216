// The storage device on a trained model (stories260K): the emulator's kernel scores the model's own
// keys bit for bit as the host scorer does, and greedy decoding under hillinfer is the same token for
// token and logit for logit with the emulator as with the plain SSD (the same selection at the same
// scoring precision), with a hot pool of a quarter of the context.
#include "csd/device.h"
#include "csd/hls/score_kernel.h"
#include "engine/session.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

namespace hill {
namespace {

TEST(csd_data, emulator_equals_host_scoring_on_a_real_models_keys) {
    HILL_REQUIRE_DATA(path, "models/gguf/stories260K.gguf");
    auto m = model::load(path);
    const hparams & hp = m->hp();
    test::temp_dir dir;
    thread_pool pool(2);
    policy_params pp{.name = "hillinfer", .alpha = 0.2};
    pp.score = score_params{score_precision::int8, query_precision::int8, score_aggregate::sum, select_granularity::layer};
    const uint64_t budget = 128 * hp.kv_bytes_per_token(ggml_type::f16);  // 75% of 512 tokens cold
    std::vector<int32_t> ids[2];
    std::vector<float> logits[2];  // f32 [400, n_vocab]
    csd::device_counters c[2];
    for (int e = 0; e < 2; ++e) {
        // The plain SSD scores the stored keys (no scoring copy), as the emulator does.
        context_params sp{.n_ctx = 512, .kv_host_budget = budget, .kv_dir = dir.file("kv"), .policy = pp,
                          .score_copy_bits = 0};
        sp.storage.kind = e == 0 ? csd::storage_kind::plain : csd::storage_kind::emulator;
        sp.device_cache_share = 0.0;  // the same tiers on both devices (the emulator has no device cache)
        sp.planner.beta = 1e9;  // the emulator's hot pool takes the whole budget, as the plain SSD's: the same placement
        session s(*m, sp, pool);
        ids[e] = {m->tokenizer().vocab().bos};
        s.eval(ids[e]);
        for (int i = 0; i < 400; ++i) {
            const float * l = s.logits();
            logits[e].insert(logits[e].end(), l, l + hp.n_vocab);
            ids[e].push_back(int32_t(std::max_element(l, l + hp.n_vocab) - l));
            s.eval(std::span<const int32_t>(&ids[e].back(), 1));
        }
        c[e] = s.ctx().storage().counters();
        if (e == 1) {
            // The kernel against the host scorer on every layer's keys, with this step's query stand-in:
            // the keys of the last token as a query for each head.
            const attention_shape shape{hp.n_head, hp.n_head_kv, hp.head_dim, 1.0f};
            const int64_t n = s.n_past(), row = hp.n_embd_kv();
            std::vector<f16_bits> k(size_t(n * row)), v(k.size());
            for (int il = 0; il < hp.n_layer; ++il) {
                s.ctx().export_layer(0, il, k.data(), v.data());
                std::vector<float> q(size_t(hp.n_embd_q()));
                for (int h = 0; h < hp.n_head; ++h) {
                    for (int i = 0; i < hp.head_dim; ++i) {
                        q[size_t(h * hp.head_dim + i)] =
                            fp16_to_fp32(k[size_t((n - 1 - h) * row + (h * hp.n_head_kv / hp.n_head) * hp.head_dim + i)]);
                    }
                }
                for (const score_precision key : {score_precision::int8, score_precision::int4}) {
                    host_scorer hs(shape, score_params{key, query_precision::int8}, pool.n_threads());
                    hs.prepare_query(q.data());
                    std::vector<float> host(static_cast<size_t>(n)), dev(static_cast<size_t>(n));
                    hs.score(kv_view{ggml_type::f16, k.data(), nullptr, n, row}, nullptr, host.data(), n, pool);
                    csd::hls::kernel_config c{hp.n_head, hp.n_head_kv, hp.head_dim, false, key == score_precision::int4};
                    auto qb = std::make_unique<csd::hls::query_buffer>();
                    csd::hls::load_query(c, hs.query_i8(), hs.query_scale(), hs.head_mass(), hs.log2_scale(), *qb);
                    csd::hls::score_tokens(c, *qb, k.data(), row, n, dev.data());
                    for (int64_t t = 0; t < n; ++t) {
                        ASSERT_EQ(f32_to_bits(host[size_t(t)]), f32_to_bits(dev[size_t(t)])) << "layer " << il << " token " << t;
                    }
                }
            }
        }
    }
    EXPECT_EQ(ids[0], ids[1]);
    EXPECT_TRUE(logits[0] == logits[1]) << "the logits differ";
    EXPECT_EQ(c[0].tokens_scored, c[1].tokens_scored);
    EXPECT_EQ(c[0].tokens_read, c[1].tokens_read);
    std::printf("the storage devices scored %llu and read %llu cold tokens\n", (unsigned long long)c[1].tokens_scored,
                (unsigned long long)c[1].tokens_read);
    // The device scored the cold tokens in written pages of 5 layers at each of the 400 steps (186,849 here).
    EXPECT_GT(c[1].tokens_scored, 100000u);
}

}  // namespace
}  // namespace hill
