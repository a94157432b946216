// The device tier's cache of recently selected KV (kv/device_cache.h): which rows a step's fills take
// (never one the step used, empty ones first, then the lowest keys), what forget() drops; and in the
// decode step: the cache serves cold tokens without changing a result, also after a truncation
// rewrites positions it held, and it catches the tokens the hot pool evicts.
#include "engine/context.h"
#include "engine/session.h"
#include "kv/device_cache.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace hill {
namespace {

TEST(device_cache, fills_take_empty_rows_then_the_lowest_keys_never_a_row_the_step_used) {
    // One layer whose 4 rows are arena slots 10..13; two sequences.
    device_cache c(2, 64, {10}, {4});
    const auto key = [](int seq, int32_t t) { return uint32_t(seq * 100 + t); };
    c.begin_step(0);
    EXPECT_EQ(c.slot(0, 0, 5), device_cache::no_slot);
    ASSERT_EQ(c.prepare_fills(0, 3, key), 3);
    std::vector<uint32_t> s = {c.fill(0, 0, 5), c.fill(0, 0, 7), c.fill(1, 0, 5)};
    EXPECT_EQ(c.fill(1, 0, 9), device_cache::no_slot) << "only 3 rows were prepared";
    for (const uint32_t x : s) EXPECT_TRUE(c.holds(0, x)) << x;
    std::sort(s.begin(), s.end());
    EXPECT_EQ(std::unique(s.begin(), s.end()), s.end()) << "three different rows";
    EXPECT_EQ(c.slot(0, 0, 7), s[1]);
    EXPECT_EQ(c.slot(1, 0, 5), s[2]);
    EXPECT_FALSE(c.holds(0, 9));
    EXPECT_FALSE(c.holds(0, 14));

    // The next step uses (0, 5): of the other rows, the empty one goes first, then (0, 7) (key 7),
    // and (1, 5) (key 105) last.
    c.begin_step(1);
    const uint32_t used = c.slot(0, 0, 5);
    c.use(0, used);
    ASSERT_EQ(c.prepare_fills(0, 8, key), 3);
    const uint32_t a = c.fill(0, 0, 20), b = c.fill(0, 0, 21);
    EXPECT_NE(a, used);
    EXPECT_NE(b, used);
    EXPECT_EQ(b, s[1]) << "the row of (0, 7), the lowest key";
    EXPECT_EQ(c.slot(0, 0, 7), device_cache::no_slot);
    EXPECT_EQ(c.slot(1, 0, 5), s[2]) << "the highest key stays while others go";
    EXPECT_EQ(c.slot(0, 0, 5), used);
    EXPECT_EQ(c.fill(1, 0, 30), s[2]);
    EXPECT_EQ(c.slot(1, 0, 5), device_cache::no_slot);
    EXPECT_EQ(c.fill(1, 0, 31), device_cache::no_slot) << "the used row is never taken";

    // forget: positions >= 21 of sequence 0 only.
    c.forget(0, 21);
    EXPECT_EQ(c.slot(0, 0, 20), a);
    EXPECT_EQ(c.slot(0, 0, 21), device_cache::no_slot);
    EXPECT_EQ(c.slot(1, 0, 30), s[2]);
}

// plan_replacements: in position order, each incoming token takes the row of the lowest-scored held token
// at a lower position, if that one scored strictly lower; replace() moves the map and protects the row.
TEST(device_cache, incoming_tokens_take_the_rows_of_lower_scored_tokens_already_attended) {
    using st = device_cache::scored_token;
    const std::vector<st> held = {{2, 10, 5.0f}, {4, 11, 1.0f}, {9, 12, 0.0f}};
    std::vector<st> in = {{1, 7, 9.0f}, {3, 7, 7.0f}, {5, 7, 1.0f}, {6, 7, 3.0f}, {8, 7, 0.5f}, {10, 7, 4.0f}};
    device_cache c(1, 64, {10}, {3});
    c.plan_replacements(in, held);
    const std::vector<uint32_t> want = {device_cache::no_slot,  // nothing attended before position 1
                                        10,                     // (2, 5.0) is the only one passed
                                        device_cache::no_slot,  // (4, 1.0) ties: not lower
                                        11,                     // (4, 1.0) < 3.0
                                        device_cache::no_slot,  // nothing left below position 8
                                        12};                    // (9, 0.0) < 4.0
    for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(in[i].slot, want[i]) << "incoming position " << in[i].pos;

    c.begin_step(0);
    ASSERT_EQ(c.prepare_fills(0, 3, [](int, int32_t) { return 0u; }), 3);
    const uint32_t a = c.fill(0, 0, 2), b = c.fill(0, 0, 4);
    c.begin_step(1);
    c.use(0, a);
    c.use(0, b);
    c.replace(0, a, 0, 3);
    EXPECT_EQ(c.slot(0, 0, 3), a);
    EXPECT_EQ(c.slot(0, 0, 2), device_cache::no_slot);
    EXPECT_EQ(c.slot(0, 0, 4), b);
    ASSERT_EQ(c.prepare_fills(0, 3, [](int, int32_t) { return 0u; }), 1) << "used and replaced rows are kept";
    EXPECT_NE(c.fill(0, 0, 20), a);
}

TEST(device_cache, without_rows_it_holds_nothing) {
    device_cache none;
    EXPECT_TRUE(none.empty());
    EXPECT_EQ(none.n_rows(0), 0);
    device_cache zero(1, 16, {8, 8}, {0, 0});
    EXPECT_TRUE(zero.empty());
    EXPECT_EQ(zero.slot(0, 1, 3), device_cache::no_slot);
    EXPECT_FALSE(zero.holds(1, 8));
}

class device_cache_decode : public ::testing::Test {
protected:
    void SetUp() override {
        write_random_model(dir.file("m.gguf"), random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96,
                                                                   .n_layer = 2, .n_head = 8, .n_head_kv = 2,
                                                                   .n_ctx = 512, .seed = 6});
        m = model::load(dir.file("m.gguf"));
        for (int i = 0; i < 240; ++i) prompt.push_back(1 + (i * 37) % 299);
    }
    std::unique_ptr<session> make(const std::string & policy, double share) {
        context_params cp{.n_ctx = 320, .kv_type = ggml_type::f16, .n_batch = 64,
                          .policy = policy_params{.name = policy, .alpha = 0.2, .n_sinks = 4, .n_window = 8}};
        cp.kv_host_budget = context::host_budget_for(*m, cp, 80);
        cp.kv_dir = dir.file("kv" + std::to_string(n_dirs++));
        cp.device_cache_share = share;
        return std::make_unique<session>(*m, cp, pool);
    }
    test::temp_dir dir;
    std::unique_ptr<model> m;
    std::vector<int32_t> prompt;
    thread_pool pool{2};
    int n_dirs = 0;
};

// A half and a quarter of the hot slots as the device cache: the same logits bit for bit as without
// it, for a scoring policy and for full; the cache serves attended tokens and the SSD reads fewer.
// Then both cut the sequence back and decode other tokens at the same positions: the cache forgot what
// it held there.
TEST_F(device_cache_decode, it_serves_cold_tokens_without_changing_a_result) {
    for (const auto & [pol, share] : {std::pair<std::string, double>{"hillinfer", 0.5}, {"hillinfer", 0.25}, {"full", 0.5}}) {
        SCOPED_TRACE(pol + " " + std::to_string(share));
        auto with = make(pol, share), without = make(pol, 0.0);
        EXPECT_EQ(with->ctx().device_cache_rows(), 2 * int64_t(80 * share));
        EXPECT_EQ(without->ctx().device_cache_rows(), 0);
        const auto run = [&](int n_steps, int32_t salt) {
            for (int step = 0; step < n_steps; ++step) {
                const int32_t tok = 1 + (step * 29 + salt) % 299;
                for (session * s : {with.get(), without.get()}) s->eval(std::span<const int32_t>(&tok, 1));
                for (int32_t i = 0; i < 300; ++i) {
                    ASSERT_EQ(with->logits()[i], without->logits()[i]) << "step " << step << " salt " << salt;
                }
            }
        };
        for (session * s : {with.get(), without.get()}) s->eval(prompt);
        run(12, 0);
        uint64_t cached = 0, disk_with = 0, disk_without = 0;
        for (const step_layer_stats & L : with->ctx().decode_stats().layers) {
            cached += L.n_attended_cached;
            disk_with += L.n_attended_disk;
        }
        for (const step_layer_stats & L : without->ctx().decode_stats().layers) {
            EXPECT_EQ(L.n_attended_cached, 0u);
            disk_without += L.n_attended_disk;
        }
        EXPECT_GT(with->ctx().decode_stats().cache_fills, 0u);
        // With scores and more disk tokens than free rows (the quarter), disk tokens took rows of cached
        // tokens the step had attended and scored lower (the bit-for-bit check covers them); without
        // scores, the cache goes by hit counts only.
        if (pol == "full") {
            EXPECT_EQ(with->ctx().decode_stats().cache_swaps, 0u);
        } else if (share < 0.5) {
            EXPECT_GT(with->ctx().decode_stats().cache_swaps, 0u);
        }
        EXPECT_GT(cached, 0u);
        EXPECT_LT(disk_with, disk_without);
        // Positions the cache held come again: cut back into a written page (64 tokens of these rows; it goes
        // back to the open tail in RAM) and decode past it, so that the page is written again.
        const device_cache & dc = with->ctx().device_cache();
        const int64_t n_before = with->n_past();
        const auto held_from = [&](int64_t n) {
            int64_t k = 0;
            for (int il = 0; il < 2; ++il) {
                for (int64_t t = n; t < n_before; ++t) k += dc.slot(0, il, t) != device_cache::no_slot ? 1 : 0;
            }
            return k;
        };
        const int64_t cut = 100;
        ASSERT_GT(held_from(cut), 0) << "the cache holds positions the cut drops";
        for (session * s : {with.get(), without.get()}) s->truncate(cut);
        EXPECT_EQ(held_from(cut), 0);
        EXPECT_GT(held_from(0), 0) << "and keeps those before";
        run(40, 7);
    }
}

// The cache catches the hot pool's victims: a token placement evicts keeps its KV in a row the step did
// not use (kv/device_cache.h; decode_step's apply), so that selecting it again reads no SSD.
TEST_F(device_cache_decode, tokens_the_hot_pool_evicts_move_into_the_cache) {
    auto with = make("hillinfer", 0.5);
    with->eval(prompt);
    const kv_cells & cells = with->ctx().cells();
    const device_cache & dc = with->ctx().device_cache();
    int64_t evicted = 0, caught = 0;
    std::vector<char> was_hot, was_cached;
    for (int step = 0; step < 16; ++step) {
        const int64_t n = with->n_past();
        was_hot.assign(size_t(2 * n), 0);
        was_cached.assign(size_t(2 * n), 0);
        for (int il = 0; il < 2; ++il) {
            for (int64_t t = 0; t < n; ++t) {
                was_hot[size_t(il * n + t)] = cells.is_hot(0, il, t) ? 1 : 0;
                was_cached[size_t(il * n + t)] = dc.slot(0, il, t) != device_cache::no_slot ? 1 : 0;
            }
        }
        const int32_t tok = 1 + (step * 31) % 299;
        with->eval(std::span<const int32_t>(&tok, 1));
        for (int il = 0; il < 2; ++il) {
            for (int64_t t = 0; t < n; ++t) {
                if (was_hot[size_t(il * n + t)] == 0 || was_cached[size_t(il * n + t)] != 0 || cells.is_hot(0, il, t)) continue;
                ++evicted;
                caught += dc.slot(0, il, t) != device_cache::no_slot ? 1 : 0;
            }
        }
    }
    EXPECT_GT(evicted, 0);
    EXPECT_GT(caught, 0) << "of " << evicted << " evicted tokens";
}

}  // namespace
}  // namespace hill
