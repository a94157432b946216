// Attention policies in the decode step: hillinfer selecting everything (α = 1, through the scoring
// path) gives dense attention's logits bit for bit at any split between the tiers; the attended counts
// follow ⌈α·N⌉ + sinks + window and the hit table counts them; streaming attends to sinks and window
// only, all hot; every step leaves the next one its free hot slot; a hillinfer step over a mostly cold
// cache equals a brute-force reference (exact scores, sinks + window + top ⌈α·N⌉, dense attention
// over that set); diagnostics measure recall; bad parameters are usage errors. Quest: its page
// selection against a brute-force statement of its rule; α = 1 gives dense logits; its selection,
// and so its logits, do not depend on the tiers or the storage device; a context scores from the
// copy it was made with. H2O: the attention logits of its second pass, its accumulated attention
// (moving sums of the weights attention paid, summing to the heads per step), the heaviest hitters
// selected (read from the hit table) against a brute-force top-k of those sums, the same logits over
// any tiers.
#include "core/error.h"
#include "engine/session.h"
#include "model/forward.h"
#include "model/synthetic_model.h"
#include "compute/attention.h"
#include "compute/kernel_mode.h"
#include "core/fp16.h"
#include "policy/policies.h"
#include "score/attention_totals.h"
#include "score/quant_copy.h"
#include "score/selector.h"
#include "kernel_test_util.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace hill {
namespace {

// Tokens of the session's sequence without a hot copy in layer il.
int64_t n_cold(const session & s, int il = 0) {
    return s.ctx().cells().n_tokens(0) - s.ctx().cells().n_hot(il);
}

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
    std::unique_ptr<session> make(const policy_params & p, ggml_type type, int64_t budget_tokens,
                                  csd::storage_kind storage = csd::storage_kind::plain) {
        context_params cp{.n_ctx = 300, .kv_type = type, .n_batch = 64, .policy = p};
        cp.storage.kind = storage;  // quest scores from its page bounds: any query precision on the emulator
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

// Attention reads the selected tokens in position order wherever they live (kv/ordered_gather.h), and
// both sessions ran the same one-pass prefill: the logits are equal bit for bit, f16 KV included.
TEST_F(policy_test, selecting_everything_equals_dense_attention_at_any_tier_split) {
    for (ggml_type type : {ggml_type::f32, ggml_type::f16}) {
        for (select_granularity g : {select_granularity::layer, select_granularity::kv_head}) {
            for (int64_t budget : {0, 50}) {  // all in RAM; 75% and more cold
                SCOPED_TRACE(std::string(ggml_type_name(type)) + " " + std::string(name(g)) + " budget " +
                             std::to_string(budget));
                policy_params all{.name = "hillinfer", .alpha = 1.0, .n_sinks = 4, .n_window = 16};
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
                    for (int32_t i = 0; i < 300; ++i) {
                        ASSERT_EQ(dense->logits()[i], sparse->logits()[i]) << "step " << step << " logit " << i;
                    }
                }
                const step_layer_stats & L = sparse->ctx().decode_stats().layers[0];
                EXPECT_EQ(L.n_steps, 12u);
                EXPECT_EQ(L.n_attended, L.n_context);
                EXPECT_EQ(L.n_attended_hot + L.n_attended_open + L.n_attended_disk, L.n_attended);
                if (budget > 0) {
                    EXPECT_GE(n_cold(*sparse, 0) * 4, sparse->n_past() * 3);
                    EXPECT_GT(L.n_attended_disk, 0u);  // the cold pages were read
                    // α = 1 runs the scoring path too (policy hillinfer.cpp): from the scoring copy in DRAM
                    // (the plain SSD scores nothing, reads only the selected KV).
                    ASSERT_NE(sparse->ctx().scoring_copy(), nullptr);
                    EXPECT_EQ(sparse->ctx().storage().counters().tokens_scored, 0u);
                    EXPECT_EQ(sparse->ctx().storage().counters().n_score_passes, 0u);
                } else {
                    EXPECT_EQ(L.n_attended_hot, L.n_attended);
                }
            }
        }
    }
}

// The context tells the scoring copy of a RoPE model how its keys turn (quant_copy::set_rope): RoPE's
// first pair turns by 1 radian per position, so over a 300-token context every first key sweeps a full
// turn and both channels of the pair get its largest amplitude as their scale — equal, where the first
// keys' maxima of two channels would differ. Both pair layouts: llama's adjacent pairs (channels 0 and 1
// of a head of 8), qwen2's halves (channels 0 and 4).
TEST_F(policy_test, the_scoring_copy_of_a_rope_model_bounds_the_turn) {
    for (const auto & [arch, mate] : {std::pair<std::string, int>{"llama", 1}, {"qwen2", 4}}) {
        SCOPED_TRACE(arch);
        write_random_model(dir.file(arch + ".gguf"), random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96,
                                                                         .n_layer = 2, .n_head = 8, .n_head_kv = 2,
                                                                         .n_ctx = 512, .seed = 3, .arch = arch});
        const auto rm = model::load(dir.file(arch + ".gguf"));
        context_params cp{.n_ctx = 300, .kv_type = ggml_type::f16, .n_batch = 64,
                          .policy = policy_params{.name = "hillinfer", .alpha = 0.2, .n_sinks = 4, .n_window = 16}};
        cp.kv_host_budget = context::host_budget_for(*rm, cp, 50);
        cp.kv_dir = dir.file("kv" + std::to_string(n_dirs++));
        session s(*rm, cp, pool);
        s.eval(prompt);
        const auto * copy = dynamic_cast<const quant_copy *>(s.ctx().scoring_copy());
        ASSERT_NE(copy, nullptr);
        for (int il = 0; il < 2; ++il) {
            for (int g = 0; g < 2; ++g) {
                const float * c = copy->channel_scales(0, il) + g * 8;
                EXPECT_GT(c[0], 0.0f);
                EXPECT_EQ(c[0], c[mate]) << "layer " << il << ", KV head " << g;
            }
        }
    }
}

TEST_F(policy_test, attended_counts_follow_alpha_sinks_and_window) {
    policy_params p{.name = "hillinfer", .alpha = 0.1, .n_sinks = 4, .n_window = 16};
    auto s = make(p, ggml_type::f16, 50);
    s->eval(prompt);
    const kv_cells & cells = s->ctx().cells();
    const uint16_t sink_hits0 = cells.hits(0, 0, 0);
    uint64_t want = 0;
    for (int step = 0; step < 5; ++step) {
        const int32_t tok = 7;
        s->eval(std::span<const int32_t>(&tok, 1));
        const int64_t n = int64_t(prompt.size()) + step + 1;
        want += uint64_t(4 + 16 + int64_t(std::ceil(0.1 * double(n))));
    }
    for (const step_layer_stats & L : s->ctx().decode_stats().layers) {
        EXPECT_EQ(L.n_steps, 5u);
        EXPECT_EQ(L.n_attended, want);
        EXPECT_EQ(L.n_attended_hot + L.n_attended_open + L.n_attended_disk, L.n_attended);
    }
    // The hit table (kv_cells.h): a token attended at every step climbs by hit_next(h, true) each step;
    // the sinks are attended and hot by rule and count no hit, so theirs only decays.
    uint16_t window_hits = 0, sink_hits = sink_hits0;
    for (int step = 0; step < 5; ++step) {
        window_hits = kv_cells::hit_next(window_hits, true);
        sink_hits = kv_cells::hit_next(sink_hits, false);
    }
    EXPECT_EQ(cells.hits(0, 0, 0), sink_hits);
    EXPECT_EQ(cells.hits(0, 1, int64_t(prompt.size())), window_hits);  // the first decoded token stays in the window
    EXPECT_EQ(cells.hits(0, 0, int64_t(prompt.size())), window_hits);
}

TEST_F(policy_test, streaming_attends_sinks_and_window_only) {
    policy_params p{.name = "streaming", .n_sinks = 4, .n_window = 16, .diag = true};
    policy_params full_diag{.name = "hillinfer", .alpha = 1.0, .diag = true};
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
        const step_layer_stats & L = s->ctx().decode_stats().layers[size_t(il)];
        EXPECT_EQ(L.n_attended, 4u * 20u);
        // Sinks and window are pinned hot: streaming reads nothing from the cold tier.
        EXPECT_EQ(L.n_attended_hot, L.n_attended);
        // A random model spreads attention: sinks + window cover only part of the mass.
        EXPECT_GT(L.recall_sum / double(L.n_steps), 0.0);
        EXPECT_LT(L.recall_sum / double(L.n_steps), 0.95);
        // The window slides by one token per step: 19 of 20 tokens stay selected.
        EXPECT_NEAR(L.overlap_sum / double(L.n_overlap), 19.0 / 20.0, 1e-12);
        const step_layer_stats & F = f->ctx().decode_stats().layers[size_t(il)];
        EXPECT_NEAR(F.recall_sum / double(F.n_steps), 1.0, 1e-9);
    }
    EXPECT_EQ(s->ctx().storage().counters().n_read_passes, 0u);
}

// placement_plan (policy.h): after a step's plan, n_free − |promote| + |evict| >= n_reserve, so every
// step leaves the next one's appends their free slots: context::decode's make_room then has nothing to
// evict before the step — an eviction there happens outside prepare/apply and would survive a step
// that fails. Under every policy, whatever it selects (full and α = 1 select every hot token).
TEST_F(policy_test, placement_leaves_the_next_step_its_free_slot) {
    const policy_params configs[] = {
        policy_params{.name = "full"},
        policy_params{.name = "streaming"},
        policy_params{.name = "hillinfer", .alpha = 0.2},
        policy_params{.name = "hillinfer", .alpha = 1.0},
        policy_params{.name = "full", .placement = placement_kind::hkm},
        policy_params{.name = "hillinfer", .alpha = 0.2, .placement = placement_kind::fifo},
    };
    // 50 hot slots, and the least a sequence needs: its sinks, its window and the new token (4 + 16 + 1),
    // where an exchange of hkm must not take the one victim the next append needs.
    for (const int64_t hot : {int64_t(50), int64_t(21)})
    for (const policy_params & p : configs) {
        const std::string what = p.name + " alpha " + std::to_string(p.alpha) + " placement " +
                                 std::string(name(make_policy(p, 2)->placement())) + ", " + std::to_string(hot) + " hot";
        auto s = make(p, ggml_type::f16, hot);
        s->eval(prompt);
        // The first (step, layer) without a free slot, step -1: after the prefill.
        std::string short_of_room;
        for (int step = -1; step < 6 && short_of_room.empty(); ++step) {
            if (step >= 0) {
                const int32_t tok = 1 + (step * 19) % 299;
                s->eval(std::span<const int32_t>(&tok, 1));
            }
            for (int il = 0; il < 2; ++il) {
                EXPECT_LE(s->ctx().cells().n_hot(il), hot) << what;
                if (short_of_room.empty() && s->ctx().cells().n_hot_free(il) < 1) {
                    short_of_room =
                        "no free hot slot in layer " + std::to_string(il) + " after step " + std::to_string(step);
                }
            }
        }
        EXPECT_EQ(short_of_room, "") << what;
    }
}

// One decode step of hillinfer over a cache that is mostly cold (60 of 400 tokens hot), against a
// brute-force reference built from the cache's own KV (context::export_layer) and the step's query
// (the model's forward pass for the same token and position): exact scores (fp16 key precision = the
// stored f32 keys here), aggregated per group and rounded to f16 as score blocks carry them, sinks +
// window + the top ⌈α·N⌉ of the middle (lower position first among equal scores), then each query
// head's dense attention over its group's set in double, and the rest of the model to the logits.
TEST(hillinfer_step, sparse_attention_equals_attention_over_the_reference_set) {
    test::temp_dir dir;
    write_random_model(dir.file("m.gguf"), random_model_params{.n_vocab = 300,
                                                               .n_embd = 64,
                                                               .n_ff = 96,
                                                               .n_layer = 1,
                                                               .n_head = 4,
                                                               .n_head_kv = 2,
                                                               .n_ctx = 512,
                                                               .seed = 9});
    const auto m = model::load(dir.file("m.gguf"));
    const int n_head = 4, n_head_kv = 2, head_dim = 16, n_embd_kv = n_head_kv * head_dim, n_vocab = 300;
    const int64_t n = 400;  // tokens at the step, its own included
    std::vector<int32_t> prompt;
    for (int64_t i = 0; i < n - 1; ++i) prompt.push_back(int32_t(1 + (i * 53 + 7) % 299));
    const int32_t tok = 17;
    thread_pool pool(2);
    int n_dirs = 0;
    for (select_granularity g : {select_granularity::layer, select_granularity::kv_head}) {
        for (score_aggregate agg : {score_aggregate::sum, score_aggregate::max}) {
            SCOPED_TRACE(std::string(name(g)) + " " + std::string(name(agg)));
            policy_params p{.name = "hillinfer", .alpha = 0.05, .n_sinks = 4, .n_window = 8};
            p.score = score_params{.key = score_precision::fp16, .aggregate = agg, .granularity = g};
            // Scored from the stored keys (FP16), not the scoring copy: the reference ranks exact scores.
            session s(*m,
                      context_params{.n_ctx = 512,
                                     .kv_type = ggml_type::f32,
                                     .kv_host_budget = 60 * m->hp().kv_bytes_per_token(ggml_type::f32),
                                     .kv_dir = dir.file("kv" + std::to_string(n_dirs++)),
                                     .policy = p,
                                     .score_copy_bits = 0},
                      pool);
            s.eval(prompt);
            // The cache's keys and values of positions [0, n - 1), then the step's own row.
            std::vector<float> k(size_t(n * n_embd_kv)), v(k.size());
            s.ctx().export_layer(0, 0, k.data(), v.data());
            auto fwd = make_forward(*m, pool, 1);
            const int32_t pos = int32_t(n - 1);
            std::vector<float> x(64), q(size_t(n_head * head_dim)), attn(q.size()), ref_logits(n_vocab);
            fwd->embed(&tok, &pos, 1, x.data());
            fwd->attention_input(0, x.data(), &pos, 1, q.data(), k.data() + (n - 1) * n_embd_kv,
                                 v.data() + (n - 1) * n_embd_kv);
            s.eval(std::span<const int32_t>(&tok, 1));

            const int n_sets = g == select_granularity::layer ? 1 : n_head_kv;
            const int heads_per_kv = n_head / n_head_kv;
            const int64_t n_top = int64_t(std::ceil(0.05 * double(n)));
            auto dot = [&](int hq, int64_t t) {
                double d = 0.0;
                for (int i = 0; i < head_dim; ++i) {
                    d += double(q[size_t(hq * head_dim + i)]) *
                         k[size_t(t * n_embd_kv + (hq / heads_per_kv) * head_dim + i)];
                }
                return d;
            };
            std::vector<std::vector<int64_t>> sets(static_cast<size_t>(n_sets));
            std::vector<int64_t> runner_up(static_cast<size_t>(n_sets));  // the best middle token left out
            for (int set = 0; set < n_sets; ++set) {
                std::vector<float> score(static_cast<size_t>(n));
                for (int64_t t = 0; t < n; ++t) {
                    double a = agg == score_aggregate::sum ? 0.0 : -1e300;
                    for (int hq = 0; hq < n_head; ++hq) {
                        if (n_sets > 1 && hq / heads_per_kv != set) continue;
                        a = agg == score_aggregate::sum ? a + dot(hq, t) : std::max(a, dot(hq, t));
                    }
                    score[size_t(t)] = round_score_f16(float(a));
                }
                std::vector<int64_t> mid(size_t(n - 12));
                std::iota(mid.begin(), mid.end(), 4);
                std::stable_sort(mid.begin(), mid.end(),
                                 [&](int64_t a, int64_t b) { return score[size_t(a)] > score[size_t(b)]; });
                // The cut must not fall between equal scores, or the tie rule alone would decide.
                ASSERT_GT(score[size_t(mid[size_t(n_top - 1)])], score[size_t(mid[size_t(n_top)])]);
                std::vector<int64_t> & chosen = sets[size_t(set)];
                chosen.assign(mid.begin(), mid.begin() + n_top);
                for (int64_t t : {0, 1, 2, 3}) chosen.push_back(t);
                for (int64_t t = n - 8; t < n; ++t) chosen.push_back(t);
                runner_up[size_t(set)] = mid[size_t(n_top)];
            }
            // The logits of the step over the given sets: each head's attention in double, then the rest of
            // the model (the same forward pass for the same token and position).
            const auto reference = [&](const std::vector<std::vector<int64_t>> & over) {
                for (int h = 0; h < n_head; ++h) {
                    const std::vector<int64_t> & chosen = over[size_t(n_sets == 1 ? 0 : h / heads_per_kv)];
                    double mx = -1e300, l = 0.0;
                    for (int64_t t : chosen) mx = std::max(mx, dot(h, t) * 0.25);
                    std::vector<double> acc(size_t(head_dim), 0.0);
                    for (int64_t t : chosen) {
                        const double w = std::exp(dot(h, t) * 0.25 - mx);
                        l += w;
                        for (int i = 0; i < head_dim; ++i) {
                            acc[size_t(i)] += w * v[size_t(t * n_embd_kv + (h / heads_per_kv) * head_dim + i)];
                        }
                    }
                    for (int i = 0; i < head_dim; ++i) attn[size_t(h * head_dim + i)] = float(acc[size_t(i)] / l);
                }
                std::vector<float> xr = x;
                fwd->attention_output(0, xr.data(), attn.data(), 1);
                fwd->logits(xr.data(), 1, ref_logits.data());
                double max_ref = 0.0, max_err = 0.0;
                for (int i = 0; i < n_vocab; ++i) {
                    max_ref = std::max(max_ref, std::abs(double(ref_logits[size_t(i)])));
                    max_err = std::max(max_err, std::abs(double(s.logits()[i]) - double(ref_logits[size_t(i)])));
                }
                return max_err / max_ref;
            };
            EXPECT_LE(reference(sets), 1e-5);
            // The check can tell: the set with its last-ranked token swapped for the runner-up is off by more.
            std::vector<std::vector<int64_t>> swapped = sets;
            for (int set = 0; set < n_sets; ++set) swapped[size_t(set)][size_t(n_top - 1)] = runner_up[size_t(set)];
            EXPECT_GT(reference(swapped), 1e-5);

            // The union of the sets: one set of 12 + n_top; two sets share the sinks and the window.
            const step_layer_stats & L = s.ctx().decode_stats().layers[0];
            std::vector<int64_t> all;
            for (const auto & c : sets) all.insert(all.end(), c.begin(), c.end());
            std::sort(all.begin(), all.end());
            all.erase(std::unique(all.begin(), all.end()), all.end());
            EXPECT_EQ(L.n_attended, uint64_t(all.size()));
            if (n_sets == 1) {
                EXPECT_EQ(L.n_attended, uint64_t(12 + n_top));
            }
            EXPECT_GT(L.n_attended_disk, 0u);  // mostly cold: some of the set came from SSD
            EXPECT_GE(n_cold(s), 3 * n / 4);
        }
    }
}

// Quest's rule stated page by page: a page is attended when the middle tokens of the pages ranked
// strictly above it (score, then lower page first; NaN last) number fewer than n_top.
TEST(quest_select, equals_a_brute_force_statement_of_the_rule) {
    const uint32_t seed = test::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    std::vector<std::pair<uint64_t, int64_t>> scratch;
    std::vector<int32_t> got;
    for (int trial = 0; trial < 400; ++trial) {
        const int64_t n = std::uniform_int_distribution<int64_t>(0, 300)(rng);
        const int64_t page = std::uniform_int_distribution<int64_t>(1, 20)(rng);
        const int64_t sinks = std::uniform_int_distribution<int64_t>(0, 24)(rng);
        const int64_t window = std::uniform_int_distribution<int64_t>(0, 24)(rng);
        const int64_t n_top = std::uniform_int_distribution<int64_t>(0, n)(rng);
        // Page-constant scores from a few values (ties), some NaN.
        std::vector<float> sc(static_cast<size_t>(n));
        for (int64_t j = 0; j * page < n; ++j) {
            const int v = std::uniform_int_distribution<int>(0, 6)(rng);
            const float x = v == 6 ? std::nanf("") : float(v);
            for (int64_t t = j * page; t < std::min(n, (j + 1) * page); ++t) sc[size_t(t)] = x;
        }
        quest_select(sc.data(), n, n_top, sinks, window, page, scratch, got);
        const auto [s_end, w_begin] = middle_of(n, sinks, window);
        const auto mid = [&](int64_t j) { return std::max<int64_t>(0, std::min(w_begin, (j + 1) * page) - std::max(s_end, j * page)); };
        const auto above = [&](int64_t a, int64_t b) {  // page a ranks above page b
            const float x = sc[size_t(std::max(s_end, a * page))], y = sc[size_t(std::max(s_end, b * page))];
            if (std::isnan(x) != std::isnan(y)) return std::isnan(y);
            if (!std::isnan(x) && x != y) return x > y;
            return a < b;
        };
        std::vector<int32_t> want;
        for (int64_t t = 0; t < n; ++t) {
            bool in = t < s_end || t >= w_begin;
            if (!in) {
                const int64_t j = t / page;
                int64_t before = 0;
                for (int64_t i = 0; i * page < n; ++i) {
                    if (i != j && mid(i) > 0 && above(i, j)) before += mid(i);
                }
                in = before < n_top;
            }
            if (in) want.push_back(int32_t(t));
        }
        ASSERT_EQ(got, want) << "n " << n << " page " << page << " sinks " << sinks << " window " << window << " n_top " << n_top;
    }
}

// α = 1: every page, so dense attention's logits bit for bit, all in RAM and mostly cold.
TEST_F(policy_test, quest_and_leoam_selecting_everything_equal_dense_attention) {
    for (const auto & [name, budget] : {std::pair{"quest", 0}, std::pair{"quest", 50}, std::pair{"leoam", 50}}) {
        SCOPED_TRACE(std::string(name) + " budget " + std::to_string(budget));
        auto dense = make(policy_params{}, ggml_type::f16, 0);
        auto quest = make(policy_params{.name = name, .alpha = 1.0}, ggml_type::f16, budget);
        dense->eval(prompt);
        quest->eval(prompt);
        for (int step = 0; step < 6; ++step) {
            const int32_t tok = 1 + (step * 17) % 299;
            dense->eval(std::span<const int32_t>(&tok, 1));
            quest->eval(std::span<const int32_t>(&tok, 1));
            for (int32_t i = 0; i < 300; ++i) ASSERT_EQ(dense->logits()[i], quest->logits()[i]) << "step " << step;
        }
        ASSERT_NE(quest->ctx().scoring_copy(), nullptr);
        EXPECT_NE(quest->ctx().scoring_copy()->describe().find(std::string(name) == "quest" ? "page bounds" : "chunk bounds"),
                  std::string::npos);
    }
}

// Page bounds score every token in DRAM, so the selection, and the logits, are the same whether the KV
// is all in RAM or mostly cold, on the plain SSD or the emulator (which then only reads); the pages
// attended are whole and hold at least ⌈α·N⌉ middle tokens.
TEST_F(policy_test, quest_and_leoam_select_the_same_pages_over_any_tiers_and_storage) {
  for (const char * name : {"quest", "leoam"}) {
    SCOPED_TRACE(name);
    const policy_params p{.name = name, .alpha = 0.2, .n_sinks = 4, .n_window = 16, .page_size = 8};
    auto ram = make(p, ggml_type::f16, 0);
    auto plain = make(p, ggml_type::f16, 50);
    auto emu = make(p, ggml_type::f16, 50, csd::storage_kind::emulator);
    for (session * s : {ram.get(), plain.get(), emu.get()}) s->eval(prompt);
    for (int step = 0; step < 8; ++step) {
        const int32_t tok = 1 + (step * 29) % 299;
        for (session * s : {ram.get(), plain.get(), emu.get()}) s->eval(std::span<const int32_t>(&tok, 1));
        for (int32_t i = 0; i < 300; ++i) {
            ASSERT_EQ(ram->logits()[i], plain->logits()[i]) << "step " << step;
            ASSERT_EQ(ram->logits()[i], emu->logits()[i]) << "step " << step;
        }
    }
    for (session * s : {plain.get(), emu.get()}) {
        EXPECT_GE(n_cold(*s) * 4, s->n_past() * 3);
        EXPECT_EQ(s->ctx().storage().counters().n_score_passes, 0u);  // nothing scored on the device
        EXPECT_GT(s->ctx().decode_stats().layers[0].n_attended_disk, 0u);
    }
    const step_layer_stats & L = ram->ctx().decode_stats().layers[1];
    const step_layer_stats & C = plain->ctx().decode_stats().layers[1];
    EXPECT_EQ(L.n_attended, C.n_attended);
    // Per step: the sinks and the window (20), then whole pages: at least ⌈0.2·n⌉ and at most 7 more.
    uint64_t lo = 0;
    for (int step = 0; step < 8; ++step) lo += 20 + uint64_t(n_top_for(0.2, int64_t(prompt.size()) + step + 1));
    EXPECT_GE(L.n_attended, lo);
    EXPECT_LE(L.n_attended, lo + 8 * 7);
  }
}

TEST_F(policy_test, a_policy_scoring_from_another_copy_needs_its_own_context) {
    auto q = make(policy_params{.name = "quest"}, ggml_type::f16, 60);
    auto h = make(policy_params{.name = "hillinfer"}, ggml_type::f16, 60);
    const auto usage_error_of = [](const std::function<void()> & f) -> std::string {
        try {
            f();
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::usage) << e.what();
            return e.what();
        }
        ADD_FAILURE() << "no hill::error thrown";
        return "";
    };
    const std::string a = usage_error_of([&] { q->set_policy(policy_params{.name = "hillinfer"}); });
    EXPECT_NE(a.find("policy 'hillinfer' scores from the KV tiers"), std::string::npos) << a;
    const std::string b = usage_error_of([&] { h->set_policy(policy_params{.name = "quest"}); });
    EXPECT_NE(b.find("policy 'quest' scores from page bounds"), std::string::npos) << b;
    EXPECT_NO_THROW(q->set_policy(policy_params{.name = "streaming"}));  // no scores: any copy will do
    EXPECT_NO_THROW(h->set_policy(policy_params{.name = "full"}));
}

TEST(h2o, attention_logits_equal_double_dots_in_both_kernel_modes) {
    std::mt19937 rng(11);
    const attention_shape s{8, 2, 16, 0.25f};
    const int64_t n = 37;
    const std::vector<float> q = test::random_floats(rng, size_t(s.n_head * s.head_dim));
    std::vector<uint16_t> k(size_t(n) * 2 * 32);
    for (auto & x : k) x = fp32_to_fp16(std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng));
    std::vector<int32_t> rows(20);
    for (auto & r : rows) r = int32_t(std::uniform_int_distribution<int64_t>(0, n - 1)(rng));
    thread_pool pool(2);
    const kernel_mode saved = kernel_mode_get();
    for (const kernel_mode m : test::kernel_modes_tested()) {
        kernel_mode_set(m);
        std::vector<float> out(size_t(s.n_head) * 24, -1.0f);
        attention_logits(s, q.data(), kv_view{ggml_type::f16, k.data(), k.data(), 20, 64}, rows.data(), out.data(), 24, pool);
        for (int h = 0; h < s.n_head; ++h) {
            for (int j = 0; j < 20; ++j) {
                double d = 0.0;
                for (int i = 0; i < 16; ++i) {
                    d += double(q[size_t(h * 16 + i)]) * double(fp16_to_fp32(k[size_t(rows[size_t(j)] * 64 + (h / 4) * 16 + i)]));
                }
                EXPECT_NEAR(out[size_t(h * 24 + j)], d * 0.25, 1e-5) << "head " << h << " key " << j;
            }
            EXPECT_EQ(out[size_t(h * 24 + 20)], -1.0f);  // beyond n: untouched
        }
    }
    kernel_mode_set(saved);
}

TEST(h2o, accumulated_attention_is_a_moving_sum_of_the_observed_weights) {
    attention_totals a(2, 3, 10);
    const std::vector<int32_t> pos = {1, 4, 9};
    const std::vector<float> w1 = {8.0f, 1.0f, 0.5f}, w2 = {0.0f, 2.0f, 0.5f};
    a.observe(1, 2, pos, w1.data());
    a.observe(1, 2, pos, w2.data());
    EXPECT_EQ(a.total(1, 2, 1), 7.0f);            // 8 − 1 + 0
    EXPECT_EQ(a.total(1, 2, 4), 1.0f - 0.125f + 2.0f);
    EXPECT_EQ(a.total(1, 2, 9), 0.5f - 0.0625f + 0.5f);
    EXPECT_EQ(a.total(1, 1, 4), 0.0f);             // other layers and sequences untouched
    EXPECT_EQ(a.total(0, 2, 4), 0.0f);
    std::vector<float> sc(10, -1.0f);
    thread_pool pool(1);
    a.prepare_query(1, 2, nullptr, nullptr);
    a.score(10, sc.data(), 10, pool);
    EXPECT_EQ(sc[4], a.total(1, 2, 4));
    a.write(1, 2, 4, 6, ggml_type::f16, nullptr, 0);  // positions written again start at 0
    EXPECT_EQ(a.total(1, 2, 4), 0.0f);
    EXPECT_EQ(a.total(1, 2, 9), 0.0f);
    EXPECT_EQ(a.total(1, 2, 1), 7.0f);
}

// Each step attends a set S and its weights over S sum to one per head: with α = 1 (S = every token)
// the sum of the accumulated attention goes from A to A − A/8 + n_head; and the logits equal dense.
TEST_F(policy_test, h2o_weights_sum_to_the_heads_and_alpha_1_equals_dense) {
    auto dense = make(policy_params{}, ggml_type::f16, 0);
    auto h = make(policy_params{.name = "h2o", .alpha = 1.0}, ggml_type::f16, 50);
    dense->eval(prompt);
    h->eval(prompt);
    const auto * totals = dynamic_cast<const attention_totals *>(h->ctx().scoring_copy());
    ASSERT_NE(totals, nullptr);
    const auto sum = [&](int il) {
        double a = 0.0;
        for (int64_t t = 0; t < h->n_past(); ++t) a += totals->total(0, il, t);
        return a;
    };
    for (int step = 0; step < 5; ++step) {
        const double before = sum(1);
        const int32_t tok = 3 + step;
        dense->eval(std::span<const int32_t>(&tok, 1));
        h->eval(std::span<const int32_t>(&tok, 1));
        for (int32_t i = 0; i < 300; ++i) ASSERT_EQ(dense->logits()[i], h->logits()[i]) << "step " << step;
        EXPECT_NEAR(sum(1), before - before / 8 + 8.0, 1e-3 * (1.0 + before)) << "step " << step;  // 8 query heads
    }
}

// The tokens h2o attends (read from the hit table: a selected token's hits climb) are the sinks, the
// window and the ⌈α·N⌉ largest accumulated attentions before the step (f16-rounded as every score,
// lower positions first among equals); the same logits all in RAM and mostly cold.
TEST_F(policy_test, h2o_selects_the_heaviest_hitters_over_any_tiers) {
    const policy_params p{.name = "h2o", .alpha = 0.1, .n_sinks = 4, .n_window = 16};
    auto ram = make(p, ggml_type::f16, 0);
    auto cold = make(p, ggml_type::f16, 50);
    ram->eval(prompt);
    cold->eval(prompt);
    const auto * totals = dynamic_cast<const attention_totals *>(ram->ctx().scoring_copy());
    ASSERT_NE(totals, nullptr);
    const kv_cells & cells = ram->ctx().cells();
    for (int step = 0; step < 6; ++step) {
        const int64_t n = ram->n_past() + 1;
        std::vector<std::vector<uint16_t>> hits(2);
        std::vector<std::vector<int32_t>> want(2);
        for (int il = 0; il < 2; ++il) {
            for (int64_t t = 0; t < n - 1; ++t) hits[size_t(il)].push_back(cells.hits(0, il, t));
            std::vector<std::pair<float, int32_t>> mid;
            for (int64_t t = 4; t < n - 16; ++t) mid.emplace_back(round_score_f16(totals->total(0, il, t)), int32_t(t));
            std::stable_sort(mid.begin(), mid.end(), [](const auto & a, const auto & b) { return a.first > b.first; });
            for (int64_t i = 0; i < n_top_for(0.1, n); ++i) want[size_t(il)].push_back(mid[size_t(i)].second);
            std::sort(want[size_t(il)].begin(), want[size_t(il)].end());
        }
        const int32_t tok = 11 + step;
        ram->eval(std::span<const int32_t>(&tok, 1));
        cold->eval(std::span<const int32_t>(&tok, 1));
        for (int32_t i = 0; i < 300; ++i) ASSERT_EQ(ram->logits()[i], cold->logits()[i]) << "step " << step;
        for (int il = 0; il < 2; ++il) {
            std::vector<int32_t> got;
            for (int64_t t = 4; t < n - 16; ++t) {
                if (cells.hits(0, il, t) == kv_cells::hit_next(hits[size_t(il)][size_t(t)], true)) got.push_back(int32_t(t));
            }
            EXPECT_EQ(got, want[size_t(il)]) << "step " << step << " layer " << il;
        }
    }
    EXPECT_GE(n_cold(*cold) * 4, cold->n_past() * 3);
    EXPECT_GT(cold->ctx().decode_stats().layers[0].n_attended_disk, 0u);
}

// A prefill's KV imported elsewhere (bench accuracy, context::import_kv) with its prefill importance gives
// h2o the state its own prefill gives: the same accumulated attention, hot set, selections and logits,
// all in RAM and mostly cold. Without the importance (the import before issue 14's fix) the accumulated
// attention starts from 0 and h2o ranks the prompt by position: other selections.
TEST_F(policy_test, h2o_after_an_import_with_the_prefill_importance_equals_h2o_after_its_prefill) {
    const policy_params p{.name = "h2o", .alpha = 0.1, .n_sinks = 4, .n_window = 16};
    context_params cp{.n_ctx = 300, .kv_type = ggml_type::f16, .n_batch = 64, .policy = policy_params{}};
    cp.keep_prefill_importance = true;
    session source(*m, cp, pool);  // policy full: it measures the importance only because it is asked to
    source.eval(prompt);
    const int n_layer = m->hp().n_layer;
    const int64_t n = source.n_past();
    const size_t bytes = size_t(n) * size_t(m->hp().n_embd_kv()) * 2;
    std::vector<std::vector<uint8_t>> k(static_cast<size_t>(n_layer), std::vector<uint8_t>(bytes)), v = k;
    std::vector<std::vector<float>> imp(static_cast<size_t>(n_layer), std::vector<float>(static_cast<size_t>(n)));
    std::vector<const void *> kp, vp;
    std::vector<const float *> ip;
    for (int il = 0; il < n_layer; ++il) {
        source.ctx().export_layer(0, il, k[size_t(il)].data(), v[size_t(il)].data());
        source.ctx().export_importance(0, il, imp[size_t(il)].data());
        kp.push_back(k[size_t(il)].data());
        vp.push_back(v[size_t(il)].data());
        ip.push_back(imp[size_t(il)].data());
    }
    for (const int64_t budget : {0, 50}) {
        SCOPED_TRACE("budget " + std::to_string(budget));
        auto direct = make(p, ggml_type::f16, budget);
        auto imported = make(p, ggml_type::f16, budget);
        auto blank = make(p, ggml_type::f16, budget);
        direct->eval(prompt);
        imported->ctx().import_kv(0, n, kp, vp, ip);
        blank->ctx().import_kv(0, n, kp, vp);
        const auto totals_of = [](const session & s) {
            return dynamic_cast<const attention_totals *>(s.ctx().scoring_copy());
        };
        const attention_totals *td = totals_of(*direct), *ti = totals_of(*imported), *tb = totals_of(*blank);
        ASSERT_TRUE(td != nullptr && ti != nullptr && tb != nullptr);
        const auto hot = [](const session & s, int il) {
            std::vector<int32_t> out;
            const std::span<const uint32_t> slots = s.ctx().cells().hot_slots(0, il);
            for (size_t t = 0; t < slots.size(); ++t) {
                if (slots[t] != kv_cells::no_slot) out.push_back(int32_t(t));
            }
            return out;
        };
        int n_blank_differs = 0;
        for (int il = 0; il < n_layer; ++il) {
            for (int64_t t = 0; t < n; ++t) {
                ASSERT_EQ(ti->total(0, il, t), td->total(0, il, t)) << "layer " << il << " token " << t;
                EXPECT_EQ(tb->total(0, il, t), 0.0f);
                n_blank_differs += td->total(0, il, t) != 0.0f ? 1 : 0;
            }
            EXPECT_EQ(hot(*imported, il), hot(*direct, il)) << "layer " << il;
        }
        EXPECT_GT(n_blank_differs, n_layer * n / 2);  // the prior is there to lose
        int n_blank_other = 0;  // steps whose logits under the blank import differ from the prefill's
        for (int step = 0; step < 8; ++step) {
            const int32_t tok = 7 + step;
            for (auto * s : {direct.get(), imported.get(), blank.get()}) s->eval(std::span<const int32_t>(&tok, 1));
            for (int32_t i = 0; i < 300; ++i) ASSERT_EQ(imported->logits()[i], direct->logits()[i]) << "step " << step;
            n_blank_other += std::equal(blank->logits(), blank->logits() + 300, direct->logits()) ? 0 : 1;
            for (int il = 0; il < n_layer; ++il) {
                for (int64_t t = 0; t < direct->n_past(); ++t) {
                    ASSERT_EQ(ti->total(0, il, t), td->total(0, il, t)) << "step " << step << " layer " << il;
                }
                EXPECT_EQ(hot(*imported, il), hot(*direct, il)) << "step " << step << " layer " << il;
            }
        }
        EXPECT_GT(n_blank_other, 0);
    }
}

TEST(policy_params_test, bad_parameters_are_usage_errors) {
    auto expect_usage = [](const policy_params & p, const char * what, int n_head_kv = 2) -> std::string {
        try {
            validate(p, n_head_kv);
            ADD_FAILURE() << "accepted " << what;
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::usage) << what;
            return e.what();
        }
        return "";
    };
    expect_usage(policy_params{.alpha = 0.0}, "alpha 0");
    expect_usage(policy_params{.alpha = 1.5}, "alpha 1.5");
    expect_usage(policy_params{.alpha = std::nan("")}, "alpha NaN");
    expect_usage(policy_params{.n_sinks = -1}, "negative sinks");
    expect_usage(policy_params{.n_window = -2}, "negative window");
    // Sinks 0 and window 0: full attends to everything, streaming and hillinfer to nothing by rule.
    EXPECT_NO_THROW(validate(policy_params{.alpha = 1.0, .n_sinks = 0, .n_window = 0}, 2));
    for (const char * pol : {"streaming", "hillinfer"}) {
        const std::string msg = expect_usage(policy_params{.name = pol, .n_sinks = 0, .n_window = 0}, pol);
        EXPECT_NE(msg.find(std::string("--policy ") + pol), std::string::npos) << msg;
        EXPECT_NO_THROW(validate(policy_params{.name = pol, .n_sinks = 0, .n_window = 1}, 2)) << pol;
    }
    policy_params wide{.name = "hillinfer"};
    wide.score.granularity = select_granularity::kv_head;
    EXPECT_NO_THROW(validate(wide, 64));
    expect_usage(wide, "kv_head with 65 KV heads", 65);
    policy_params h2o_wide{.name = "h2o"};
    h2o_wide.score.granularity = select_granularity::kv_head;
    try {
        make_policy(h2o_wide, 2);
        ADD_FAILURE() << "h2o took --select kv_head";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::usage);
        EXPECT_NE(std::string(e.what()).find("one token set per layer"), std::string::npos) << e.what();
    }

    expect_usage(policy_params{.name = "quest", .page_size = 0}, "page size 0");
    EXPECT_EQ(policy_names(), "full, streaming, hillinfer, quest, h2o, leoam, infinigen");
    for (const char * pol : {"full", "streaming", "hillinfer", "quest", "h2o", "leoam", "infinigen"}) {
        EXPECT_EQ(make_policy(policy_params{.name = pol}, 2)->name(), pol);
    }
    const std::string msg = expect_usage(policy_params{.name = "lru"}, "lru");
    EXPECT_NE(msg.find("'lru'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("full, streaming, hillinfer, quest, h2o, leoam, infinigen"), std::string::npos) << msg;

    EXPECT_EQ(parse_placement("fifo"), placement_kind::fifo);
    EXPECT_EQ(parse_placement("hkm"), placement_kind::hkm);
    try {
        parse_placement("lru");
        ADD_FAILURE() << "accepted placement lru";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::usage);
        EXPECT_NE(std::string(e.what()).find("fifo or hkm"), std::string::npos) << e.what();
    }
    // The policy's default placement, or the one asked for.
    EXPECT_EQ(make_policy(policy_params{.name = "hillinfer"}, 2)->placement(), placement_kind::hkm);
    EXPECT_EQ(make_policy(policy_params{.name = "full"}, 2)->placement(), placement_kind::fifo);
    EXPECT_EQ(make_policy(policy_params{.name = "full", .placement = placement_kind::hkm}, 2)->placement(),
              placement_kind::hkm);
}

}  // namespace
}  // namespace hill
