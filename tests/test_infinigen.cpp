// Policy infinigen (policy/infinigen.cpp) and its key sketch (score/key_sketch.h): the channel choice
// from the weights against a brute-force statement (the r channels, or r/2 RoPE pairs, of largest
// total importance, over every subset); the sketch's scores against partial dots computed here from
// the f16 keys, under each aggregate and granularity; the selection against a brute-force top-k of
// those scores; in the decode step, α = 1 gives dense logits, the selection (speculated from the
// previous layer's input) does not depend on the tiers or the storage device, every speculated cold
// token of layer 1 is found prefetched, and the sketch is counted in the host budget.
#include "core/error.h"
#include "core/fp16.h"
#include "engine/session.h"
#include "model/forward.h"
#include "model/synthetic_model.h"
#include "policy/policies.h"
#include "score/key_sketch.h"
#include "score/selector.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

namespace hill {
namespace {

// The subsets of k of [0, n), each ascending.
std::vector<std::vector<int>> subsets(int n, int k) {
    std::vector<std::vector<int>> out;
    std::vector<int> cur;
    const std::function<void(int)> rec = [&](int i) {
        if (int(cur.size()) == k) {
            out.push_back(cur);
            return;
        }
        for (int j = i; j < n; ++j) {
            cur.push_back(j);
            rec(j + 1);
            cur.pop_back();
        }
    };
    rec(0);
    return out;
}

TEST(key_sketch, channel_importance_is_the_product_of_weight_norms) {
    std::mt19937 rng(5);
    const attention_shape s{4, 2, 6, 0.5f};
    const int n_embd = 10;
    const std::vector<float> wq = test::random_floats(rng, size_t(s.n_head * s.head_dim * n_embd));
    const std::vector<float> wk = test::random_floats(rng, size_t(s.n_head_kv * s.head_dim * n_embd));
    const weight_view q{ggml_type::f32, s.n_head * s.head_dim, n_embd, wq.data()};
    const weight_view k{ggml_type::f32, s.n_head_kv * s.head_dim, n_embd, wk.data()};
    std::vector<float> imp(size_t(s.n_head_kv * s.head_dim));
    sketch_channel_importance(q, k, s, imp.data());
    const auto norm = [&](const std::vector<float> & w, int row) {
        double a = 0;
        for (int j = 0; j < n_embd; ++j) a += double(w[size_t(row * n_embd + j)]) * w[size_t(row * n_embd + j)];
        return std::sqrt(a);
    };
    for (int g = 0; g < s.n_head_kv; ++g) {
        for (int d = 0; d < s.head_dim; ++d) {
            // Query heads 2g and 2g + 1 read KV head g.
            const double nq = std::sqrt(std::pow(norm(wq, (2 * g) * s.head_dim + d), 2) +
                                        std::pow(norm(wq, (2 * g + 1) * s.head_dim + d), 2));
            EXPECT_NEAR(imp[size_t(g * s.head_dim + d)], nq * norm(wk, g * s.head_dim + d), 1e-5) << g << " " << d;
        }
    }
}

TEST(key_sketch, chosen_channels_have_the_largest_total_importance) {
    std::mt19937 rng(7);
    const int n_head_kv = 3, hd = 8;
    for (int trial = 0; trial < 40; ++trial) {
        const std::vector<float> imp = test::random_floats(rng, size_t(n_head_kv * hd), 0.0f, 1.0f);
        for (const sketch_pairing pairing : {sketch_pairing::none, sketch_pairing::adjacent, sketch_pairing::half}) {
            for (const int r : {2, 4, 6}) {
                std::vector<int32_t> got(size_t(n_head_kv * r));
                sketch_choose_channels(imp.data(), n_head_kv, hd, r, pairing, got.data());
                for (int g = 0; g < n_head_kv; ++g) {
                    // Brute force: among every set of r channels that keeps RoPE pairs whole, the one of
                    // largest summed importance (random importance: no ties).
                    const float * w = imp.data() + g * hd;
                    const int unit = pairing == sketch_pairing::none ? 1 : 2;
                    double best = -1;
                    std::vector<int32_t> want;
                    for (const std::vector<int> & units : subsets(hd / unit, r / unit)) {
                        std::vector<int32_t> ch;
                        for (const int u : units) {
                            if (pairing == sketch_pairing::none) ch.push_back(u);
                            if (pairing == sketch_pairing::adjacent) ch.insert(ch.end(), {2 * u, 2 * u + 1});
                            if (pairing == sketch_pairing::half) ch.insert(ch.end(), {u, u + hd / 2});
                        }
                        double sum = 0;
                        for (const int32_t c : ch) sum += w[c];
                        if (sum > best) {
                            best = sum;
                            want = ch;
                        }
                    }
                    std::sort(want.begin(), want.end());
                    const std::vector<int32_t> have(got.begin() + g * r, got.begin() + (g + 1) * r);
                    ASSERT_EQ(have, want) << "trial " << trial << " r " << r << " pairing " << int(pairing) << " head " << g;
                }
            }
        }
    }
}

// Partial dots from the f16 keys, aggregated as score_config.h says (softmax: b_h over sinks and window).
std::vector<float> brute_scores(const attention_shape & s, const score_params & p, const std::vector<int32_t> & ch,
                                int r, const std::vector<float> & q, const std::vector<float> & k, int64_t n,
                                int n_sinks, int n_window) {
    const int group = s.n_head / s.n_head_kv;
    const auto dot = [&](int h, int64_t t) {
        const int g = h / group;
        float d = 0;
        for (int j = 0; j < r; ++j) {
            const int c = ch[size_t(g * r + j)];
            d += q[size_t(h * s.head_dim + c)] * fp16_to_fp32(fp32_to_fp16(k[size_t(t * s.n_head_kv * s.head_dim + g * s.head_dim + c)]));
        }
        return d;
    };
    const float c = log2_e * s.scale;
    std::vector<float> b(size_t(s.n_head), 0.0f);
    if (p.aggregate == score_aggregate::softmax) {
        const auto [s_end, w_begin] = middle_of(n, n_sinks, n_window);
        for (int h = 0; h < s.n_head; ++h) {
            double sum = 0;
            for (int64_t u = 0; u < n; ++u) {
                if (u < s_end || u >= w_begin) sum += std::exp2(double(c) * dot(h, u));
            }
            b[size_t(h)] = float(std::log2(sum));
        }
    }
    const int n_g = p.granularity == select_granularity::kv_head ? s.n_head_kv : 1;
    const int per = s.n_head / n_g;
    std::vector<float> out(size_t(n_g * n));
    for (int g = 0; g < n_g; ++g) {
        for (int64_t t = 0; t < n; ++t) {
            double acc = p.aggregate == score_aggregate::max ? -INFINITY : 0.0;
            for (int i = 0; i < per; ++i) {
                const int h = g * per + i;
                const double d = dot(h, t);
                if (p.aggregate == score_aggregate::sum) acc += d;
                if (p.aggregate == score_aggregate::max) acc = std::max(acc, d);
                if (p.aggregate == score_aggregate::softmax) acc += std::exp2(double(c) * d - b[size_t(h)]);
            }
            out[size_t(g * n + t)] = float(p.aggregate == score_aggregate::softmax ? std::log2(acc) : acc);
        }
    }
    return out;
}

TEST(key_sketch, scores_are_the_partial_channel_dots) {
    std::mt19937 rng(9);
    const attention_shape s{4, 2, 16, 0.25f};
    const int r = 4, n_layer = 2, n_seq = 2;
    const int64_t n_ctx = 50, n = 41;
    std::vector<int32_t> ch(size_t(n_layer * s.n_head_kv * r));
    for (int i = 0; i < n_layer * s.n_head_kv; ++i) {
        std::vector<int32_t> all(size_t(s.head_dim));
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        std::sort(all.begin(), all.begin() + r);
        std::copy(all.begin(), all.begin() + r, ch.begin() + i * r);
    }
    const std::vector<float> k = test::random_floats(rng, size_t(n * s.n_head_kv * s.head_dim), -2.0f, 2.0f);
    const std::vector<float> q = test::random_floats(rng, size_t(s.n_head * s.head_dim), -2.0f, 2.0f);
    thread_pool pool(3);
    for (const score_aggregate agg : {score_aggregate::sum, score_aggregate::max, score_aggregate::softmax}) {
        for (const select_granularity gran : {select_granularity::layer, select_granularity::kv_head}) {
            SCOPED_TRACE(std::string(name(agg)) + " " + std::string(name(gran)));
            const score_params p{.aggregate = agg, .granularity = gran};
            key_sketch sk(s, p, r, ch, 4, 8, n_seq, n_layer, n_ctx, 3);
            EXPECT_EQ(sk.bytes(), key_sketch::bytes_for(s, r, n_seq, n_layer, n_ctx));
            EXPECT_EQ(sk.bytes_per_token_layer(), double(2 * s.n_head_kv * r));
            // Layer 1 of sequence 1, in two writes (f32 rows).
            sk.write(1, 1, 0, 30, ggml_type::f32, k.data(), s.n_head_kv * s.head_dim);
            sk.write(1, 1, 30, n - 30, ggml_type::f32, k.data() + 30 * s.n_head_kv * s.head_dim, s.n_head_kv * s.head_dim);
            sk.prepare_query(1, 1, q.data(), nullptr);
            const int n_g = sk.n_group();
            std::vector<float> got(size_t(n_g * n_ctx));
            sk.score(n, got.data(), n_ctx, pool);
            const std::vector<int32_t> ch1(ch.begin() + s.n_head_kv * r, ch.end());
            const std::vector<float> want = brute_scores(s, p, ch1, r, q, k, n, 4, 8);
            for (int g = 0; g < n_g; ++g) {
                for (int64_t t = 0; t < n; ++t) {
                    const float w = want[size_t(g * n + t)];
                    EXPECT_NEAR(got[size_t(g * n_ctx + t)], w, 1e-3f * std::max(1.0f, std::fabs(w))) << g << " " << t;
                }
            }
        }
    }
}

TEST(infinigen, selects_sinks_window_and_the_top_alpha_by_score) {
    std::mt19937 rng(13);
    for (int trial = 0; trial < 60; ++trial) {
        const int64_t n = std::uniform_int_distribution<int64_t>(1, 120)(rng);
        const int sinks = std::uniform_int_distribution<int>(0, 5)(rng);
        const int window = std::uniform_int_distribution<int>(1, 20)(rng);
        const double alpha = std::uniform_real_distribution<double>(0.05, 1.0)(rng);
        std::vector<float> scores(static_cast<size_t>(n));
        for (auto & x : scores) x = round_score_f16(float(std::uniform_int_distribution<int>(-20, 20)(rng)) / 4.0f);  // ties
        const auto pol = make_policy(policy_params{.name = "infinigen", .alpha = alpha, .n_sinks = sinks, .n_window = window}, 2);
        std::vector<std::vector<int32_t>> sets(1);
        pol->select(select_input{n, scores.data()}, sets);
        // Brute force: the middle ranked by score, higher first, the lower position among equals.
        const int64_t s_end = std::min<int64_t>(sinks, n), w_begin = std::max<int64_t>(s_end, n - window);
        std::vector<int32_t> mid;
        for (int64_t t = s_end; t < w_begin; ++t) mid.push_back(int32_t(t));
        std::stable_sort(mid.begin(), mid.end(), [&](int32_t a, int32_t b) { return scores[size_t(a)] > scores[size_t(b)]; });
        mid.resize(size_t(std::min<int64_t>(int64_t(mid.size()), n_top_for(alpha, n))));
        std::vector<int32_t> want;
        for (int64_t t = 0; t < n; ++t) {
            if (t < s_end || t >= w_begin || std::find(mid.begin(), mid.end(), int32_t(t)) != mid.end()) want.push_back(int32_t(t));
        }
        ASSERT_EQ(sets[0], want) << "trial " << trial << " n " << n;
    }
    const auto pol = make_policy(policy_params{.name = "infinigen"}, 2);
    EXPECT_EQ(pol->scores_from(), copy_kind::sketch);
    EXPECT_EQ(pol->placement(), placement_kind::hkm);
}

// The speculation's query (the query only: no K and V projected) is attention_input's query of the same
// layer from the same stream, bit for bit (llama, and qwen3 with its per-head query norms).
TEST(infinigen, speculative_query_is_the_layers_query_from_the_given_stream) {
    test::temp_dir dir;
    thread_pool pool(2);
    for (const char * arch : {"llama", "qwen3"}) {
        SCOPED_TRACE(arch);
        write_random_model(dir.file(std::string(arch) + ".gguf"),
                           random_model_params{.n_vocab = 300, .n_embd = 32, .n_ff = 64, .n_layer = 2, .n_head = 4,
                                               .n_head_kv = 2, .n_ctx = 64, .seed = 6, .arch = arch});
        const auto m = model::load(dir.file(std::string(arch) + ".gguf"));
        const auto fwd = make_forward(*m, pool, 2);
        std::mt19937 rng(2);
        const std::vector<float> x = test::random_floats(rng, 2 * 32);
        const int32_t pos[2] = {5, 17};
        std::vector<float> q(2 * 32), k(2 * 16), v(2 * 16), q_spec(2 * 32);
        fwd->attention_input(1, x.data(), pos, 2, q.data(), k.data(), v.data());
        fwd->speculative_query(1, x.data(), pos, 2, q_spec.data());
        EXPECT_EQ(q, q_spec);
    }
}

class infinigen_test : public ::testing::Test {
protected:
    void SetUp() override {
        write_random_model(dir.file("m.gguf"), random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96,
                                                                   .n_layer = 3, .n_head = 8, .n_head_kv = 2,
                                                                   .n_ctx = 512, .seed = 4});
        m = model::load(dir.file("m.gguf"));
        for (int i = 0; i < 200; ++i) prompt.push_back(1 + (i * 37) % 299);
    }
    std::unique_ptr<session> make(const policy_params & p, int64_t budget_tokens,
                                  csd::storage_kind storage = csd::storage_kind::plain) {
        context_params cp{.n_ctx = 300, .kv_type = ggml_type::f16, .n_batch = 64, .policy = p};
        cp.storage.kind = storage;
        if (budget_tokens > 0) {
            cp.kv_host_budget = context::host_budget_for(*m, cp, budget_tokens);
            cp.kv_dir = dir.file("kv" + std::to_string(n_dirs++));
        }
        return std::make_unique<session>(*m, cp, pool);
    }
    test::temp_dir dir;
    std::unique_ptr<model> m;
    std::vector<int32_t> prompt;
    thread_pool pool{2};
    int n_dirs = 0;
};

TEST_F(infinigen_test, selecting_everything_equals_dense_attention) {
    for (const auto & [budget, gran] : {std::pair{int64_t(0), select_granularity::layer},
                                        std::pair{int64_t(50), select_granularity::layer},
                                        std::pair{int64_t(50), select_granularity::kv_head}}) {
        SCOPED_TRACE("budget " + std::to_string(budget) + " " + std::string(name(gran)));
        auto dense = make(policy_params{}, 0);
        policy_params all{.name = "infinigen", .alpha = 1.0};
        all.score.granularity = gran;
        auto ig = make(all, budget);
        dense->eval(prompt);
        ig->eval(prompt);
        for (int step = 0; step < 5; ++step) {
            const int32_t tok = 1 + (step * 17) % 299;
            dense->eval(std::span<const int32_t>(&tok, 1));
            ig->eval(std::span<const int32_t>(&tok, 1));
            for (int32_t i = 0; i < 300; ++i) ASSERT_EQ(dense->logits()[i], ig->logits()[i]) << "step " << step;
        }
        ASSERT_NE(ig->ctx().scoring_copy(), nullptr);
        EXPECT_NE(ig->ctx().scoring_copy()->describe().find("key sketch (2 of 8 channels"), std::string::npos)
            << ig->ctx().scoring_copy()->describe();
    }
}

// The sketch is in DRAM whatever the storage, so the speculated selection, and the logits, are the same
// all in RAM, mostly cold on the plain SSD and on the emulator; the attended counts follow α; on the
// plain SSD every cold token layers 1 and 2 read was prefetched (the hint is the speculated set itself).
TEST_F(infinigen_test, speculated_selection_is_the_same_over_any_tiers_and_is_prefetched) {
    const policy_params p{.name = "infinigen", .alpha = 0.2, .n_sinks = 4, .n_window = 16};
    auto ram = make(p, 0);
    auto plain = make(p, 50);
    auto emu = make(p, 50, csd::storage_kind::emulator);
    for (session * s : {ram.get(), plain.get(), emu.get()}) s->eval(prompt);
    const int n_steps = 8;
    for (int step = 0; step < n_steps; ++step) {
        const int32_t tok = 1 + (step * 29) % 299;
        for (session * s : {ram.get(), plain.get(), emu.get()}) s->eval(std::span<const int32_t>(&tok, 1));
        for (int32_t i = 0; i < 300; ++i) {
            ASSERT_EQ(ram->logits()[i], plain->logits()[i]) << "step " << step;
            ASSERT_EQ(ram->logits()[i], emu->logits()[i]) << "step " << step;
        }
    }
    uint64_t want = 0;
    for (int step = 0; step < n_steps; ++step) want += 20 + uint64_t(n_top_for(0.2, int64_t(prompt.size()) + step + 1));
    for (int il = 0; il < 3; ++il) EXPECT_EQ(ram->ctx().decode_stats().layers[size_t(il)].n_attended, want) << il;
    for (session * s : {plain.get(), emu.get()}) {
        EXPECT_EQ(s->ctx().storage().counters().n_score_passes, 0u);  // scored from the sketch only
        EXPECT_GT(s->ctx().decode_stats().layers[1].n_attended_disk, 0u);
    }
    const auto & L = plain->ctx().decode_stats().layers;
    const csd::device_counters c = plain->ctx().storage().counters();
    EXPECT_GE(c.prefetch_hits, L[1].n_attended_disk + L[2].n_attended_disk) << "prefetched " << c.tokens_prefetched << ", read " << c.tokens_read;
    EXPECT_EQ(c.tokens_read, L[0].n_attended_disk + L[1].n_attended_disk + L[2].n_attended_disk);
}

// What layers 0 and 1 attend (read from the hit table: a selected token's hits climb) against a
// brute-force statement: layer 0 scores with its own query, layer 1 with the query speculated from the
// stream entering layer 0 (the token's embedding); partial dots over the channels chosen from the
// weights, summed over the heads in order (the sum aggregate), f16-rounded, the step's own token
// attended by rule; sinks, window and the top ⌈α·N⌉, lower positions first among equals.
TEST_F(infinigen_test, layers_attend_the_top_tokens_of_the_speculated_partial_scores) {
    policy_params p{.name = "infinigen", .alpha = 0.1, .n_sinks = 4, .n_window = 16};
    p.score.aggregate = score_aggregate::sum;
    auto s = make(p, 0);
    s->eval(prompt);
    const hparams & hp = m->hp();
    const attention_shape shape = hp.attn_shape();
    const int r = key_sketch::channels_for(hp.head_dim), n_kv = hp.n_embd_kv(), group = hp.n_head / hp.n_head_kv;
    ASSERT_EQ(hp.rope_pairs, rope_layout::adjacent_pairs);
    std::vector<std::vector<int32_t>> channels(2, std::vector<int32_t>(size_t(hp.n_head_kv * r)));
    for (int il = 0; il < 2; ++il) {
        std::vector<float> imp(size_t(hp.n_head_kv * hp.head_dim));
        sketch_channel_importance(m->layers()[size_t(il)].wq, m->layers()[size_t(il)].wk, shape, imp.data());
        sketch_choose_channels(imp.data(), hp.n_head_kv, hp.head_dim, r, sketch_pairing::adjacent, channels[size_t(il)].data());
    }
    const auto fwd = make_forward(*m, pool, 1);
    const kv_cells & cells = s->ctx().cells();
    for (int step = 0; step < 5; ++step) {
        const int64_t n = s->n_past() + 1;
        const int32_t tok = 11 + 7 * step, pos = int32_t(n - 1);
        std::vector<float> x(static_cast<size_t>(hp.n_embd)), q0(static_cast<size_t>(hp.n_embd_q())),
            k0(static_cast<size_t>(n_kv)), v0(static_cast<size_t>(n_kv)), q1(static_cast<size_t>(hp.n_embd_q()));
        fwd->embed(&tok, &pos, 1, x.data());
        fwd->attention_input(0, x.data(), &pos, 1, q0.data(), k0.data(), v0.data());
        fwd->speculative_query(1, x.data(), &pos, 1, q1.data());
        std::vector<std::vector<int32_t>> want(2);
        std::vector<std::vector<uint16_t>> hits(2);
        for (int il = 0; il < 2; ++il) {
            // Layer 0's keys include the step's own (f16 as stored); layer 1's stop before it.
            const int64_t n_scored = il == 0 ? n : n - 1;
            std::vector<uint16_t> k(size_t(n * n_kv)), v(size_t(n * n_kv));
            s->ctx().export_layer(0, il, k.data(), v.data());
            for (int j = 0; j < n_kv; ++j) k[size_t((n - 1) * n_kv + j)] = fp32_to_fp16(k0[size_t(j)]);
            const std::vector<float> & q = il == 0 ? q0 : q1;
            std::vector<std::pair<float, int32_t>> mid;
            for (int64_t t = 4; t < n - 16; ++t) {
                float score = 0.0f;
                for (int h = 0; h < hp.n_head; ++h) {
                    const int g = h / group;
                    float d = 0.0f;
                    for (int j = 0; j < r; ++j) {
                        const int c = channels[size_t(il)][size_t(g * r + j)];
                        d += q[size_t(h * hp.head_dim + c)] * fp16_to_fp32(k[size_t(t * n_kv + g * hp.head_dim + c)]);
                    }
                    score = h == 0 ? d : score + d;
                }
                mid.emplace_back(t < n_scored ? round_score_f16(score) : INFINITY, int32_t(t));
            }
            std::stable_sort(mid.begin(), mid.end(), [](const auto & a, const auto & b) { return a.first > b.first; });
            for (int64_t i = 0; i < n_top_for(0.1, n); ++i) want[size_t(il)].push_back(mid[size_t(i)].second);
            std::sort(want[size_t(il)].begin(), want[size_t(il)].end());
            for (int64_t t = 0; t < n - 1; ++t) hits[size_t(il)].push_back(cells.hits(0, il, t));
        }
        s->eval(std::span<const int32_t>(&tok, 1));
        for (int il = 0; il < 2; ++il) {
            std::vector<int32_t> got;
            for (int64_t t = 4; t < n - 16; ++t) {
                if (cells.hits(0, il, t) == kv_cells::hit_next(hits[size_t(il)][size_t(t)], true)) got.push_back(int32_t(t));
            }
            EXPECT_EQ(got, want[size_t(il)]) << "step " << step << " layer " << il;
        }
    }
}

TEST_F(infinigen_test, the_sketch_is_counted_in_the_host_budget) {
    context_params cp{.n_ctx = 300, .policy = policy_params{.name = "infinigen"}};
    // r = 2 of head_dim 8 (a quarter, even), 2 KV heads, f16, 3 layers, 300 positions; plus the channel table.
    const int r = key_sketch::channels_for(8);
    EXPECT_EQ(r, 2);
    EXPECT_EQ(key_sketch::channels_for(128), 32);
    EXPECT_EQ(key_sketch::channels_for(64), 16);
    EXPECT_EQ(context::scoring_copy_bytes(*m, cp), uint64_t(300 * 3 * 2 * r * 2 + 3 * 2 * r * 4));
    EXPECT_EQ(context::host_budget_for(*m, cp, 10), 10 * m->hp().kv_bytes_per_token(ggml_type::f16) +
                                                        context::scoring_copy_bytes(*m, cp));
    // Another kind of copy cannot take over the context.
    auto s = make(policy_params{.name = "infinigen"}, 60);
    try {
        s->set_policy(policy_params{.name = "quest"});
        ADD_FAILURE() << "quest took infinigen's context";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::usage);
        EXPECT_NE(std::string(e.what()).find("keeps the key sketch"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace hill
