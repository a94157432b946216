// Placement rules (policy/placement.h) on hand-made KV cells: fifo evicts the oldest, hkm promotes the
// selected cold tokens into spare slots or in exchange for colder ones, never touches sinks, window,
// the selection or a token moved within the protected period, and leaves room for the next step's
// appends; prefill placement keeps sinks, window and the tokens of highest importance (ranked as the
// selector ranks), or the most recent ones. A random-input test checks the invariants of every plan.
#include "core/error.h"
#include "kv/kv_cells.h"
#include "policy/placement.h"
#include "policy/policy.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

namespace hill {
namespace {

policy_params params(const std::string & name, placement_kind k) {
    policy_params p;
    p.name = name;
    p.n_sinks = 2;
    p.n_window = 3;
    p.placement = k;
    return p;
}

// One sequence of n tokens in layer 0 with the given tokens hot and their hit counts.
kv_cells make_cells(int64_t n, int64_t slots, const std::vector<int32_t> & hot, const std::vector<uint16_t> & hits = {}) {
    kv_cells c(kv_cells_params{1, 2, 64, slots});
    c.grow(0, n);
    for (size_t i = 0; i < hot.size(); ++i) {
        c.take_hot(0, 0, hot[i]);
        if (!hits.empty()) c.set_hits(0, 0, hot[i], hits[i]);
    }
    return c;
}

std::set<int32_t> positions(const std::vector<std::pair<int, int32_t>> & v) {
    std::set<int32_t> s;
    for (const auto & [seq, t] : v) s.insert(t);
    return s;
}

TEST(placement, fifo_evicts_the_oldest_outside_sinks_and_window) {
    const auto pol = make_policy(params("full", placement_kind::fifo), 1);
    EXPECT_EQ(pol->placement(), placement_kind::fifo);
    // 12 tokens (the step adds the 13th), 10 slots all used: sinks 0-1, then 4..11.
    kv_cells c = make_cells(12, 10, {0, 1, 4, 5, 6, 7, 8, 9, 10, 11});
    const int32_t sel[] = {2, 3, 4};
    const place_seq s{0, 13, sel};
    placement_plan plan;
    pol->place(place_input{0, 100, &c, {&s, 1}, 0, 2, 4}, plan);
    EXPECT_TRUE(plan.promote.empty());
    EXPECT_EQ(positions(plan.evict), (std::set<int32_t>{5, 6}))
        << "two slots for the next step's appends, oldest first but for 4, which the step attended";
}

// Under `full` every token is attended: the appends' room comes from attended tokens, oldest first.
TEST(placement, room_for_the_appends_when_the_step_attended_everything) {
    kv_cells c = make_cells(12, 10, {0, 1, 4, 5, 6, 7, 8, 9, 10, 11});
    const int32_t all[] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const place_seq s{0, 13, all};
    placement_plan plan;
    for (const placement_kind k : {placement_kind::fifo, placement_kind::hkm}) {
        const auto pol = make_policy(params("full", k), 1);
        pol->place(place_input{0, 100, &c, {&s, 1}, 0, 1, 4}, plan);
        EXPECT_TRUE(plan.promote.empty());
        ASSERT_EQ(plan.evict.size(), 1u) << name(k);
        EXPECT_EQ(plan.evict[0].second, 4) << name(k);
    }
}

TEST(placement, hkm_promotes_into_spare_slots_then_in_exchange_for_colder_tokens) {
    const auto pol = make_policy(params("hillinfer", placement_kind::hkm), 1);
    EXPECT_EQ(pol->placement(), placement_kind::hkm);
    // 20 tokens; hot: sinks 0-1, 5 (cold-ish), 6 (hot), 17-19 (window of the step's 21 tokens: 18, 19, 20).
    kv_cells c = make_cells(20, 8, {0, 1, 5, 6, 17, 18, 19}, {0, 0, 100, 40000, 3000, 0, 0});
    c.set_hits(0, 0, 9, 500);
    // Selected: 9, 12 (cold), 6 (hot).
    const int32_t counted[] = {6, 9, 12, 18, 19, 20};
    const place_seq s{0, 21, counted};
    placement_plan plan;
    // One slot free after the appends, one needed by the next step: no spare slot; exchanges only.
    pol->place(place_input{0, 50, &c, {&s, 1}, 1, 1, 8}, plan);
    // Candidates 9 (hits 500 -> 8629) and 12 (0 -> 8191); victims by hits: 17 (3000 -> 2625), 5 (100 -> 88).
    EXPECT_EQ(positions(plan.promote), (std::set<int32_t>{9, 12}));
    EXPECT_EQ(positions(plan.evict), (std::set<int32_t>{5, 17}));
    // With a budget of one promotion, only the hottest candidate goes.
    pol->place(place_input{0, 50, &c, {&s, 1}, 1, 1, 1}, plan);
    EXPECT_EQ(positions(plan.promote), (std::set<int32_t>{9}));
    EXPECT_EQ(positions(plan.evict), (std::set<int32_t>{5}));
    // Spare free slots first: three free, one reserved.
    pol->place(place_input{0, 50, &c, {&s, 1}, 3, 1, 8}, plan);
    EXPECT_EQ(positions(plan.promote), (std::set<int32_t>{9, 12}));
    EXPECT_TRUE(plan.evict.empty());
}

TEST(placement, hkm_protects_recent_moves_and_the_selection) {
    const auto pol = make_policy(params("hillinfer", placement_kind::hkm), 1);
    kv_cells c = make_cells(20, 8, {0, 1, 5, 6, 17, 18, 19});
    c.set_last_move(0, 0, 5, 45, true);   // promoted 5 steps ago: protected
    c.set_last_move(0, 0, 9, 47, false);  // evicted 3 steps ago: not back yet
    const int32_t counted[] = {6, 9, 12, 18, 19, 20};
    const place_seq s{0, 21, counted};
    placement_plan plan;
    pol->place(place_input{0, 50, &c, {&s, 1}, 1, 1, 8}, plan);
    EXPECT_EQ(positions(plan.promote), (std::set<int32_t>{12})) << "9 was evicted within 8 steps";
    EXPECT_EQ(positions(plan.evict), (std::set<int32_t>{17})) << "5 was promoted within 8 steps; 6 is selected";
    // Nine steps later both are free to move again.
    pol->place(place_input{0, 57, &c, {&s, 1}, 1, 1, 8}, plan);
    EXPECT_EQ(positions(plan.promote), (std::set<int32_t>{9, 12}));
    EXPECT_EQ(positions(plan.evict), (std::set<int32_t>{5, 17}));
    // When the next step's appends need room and only protected tokens are left, they go.
    kv_cells d = make_cells(20, 6, {0, 1, 5, 18, 19});
    d.set_last_move(0, 0, 5, 49, true);
    const int32_t none[] = {18, 19, 20};
    const place_seq s2{0, 21, none};
    pol->place(place_input{0, 50, &d, {&s2, 1}, 0, 1, 8}, plan);
    EXPECT_EQ(positions(plan.evict), (std::set<int32_t>{5}));
}

TEST(placement, moved_lately_counts_eight_steps) {
    EXPECT_FALSE(moved_lately(kv_cells::never_moved, 10, true));
    const uint32_t promoted_at_10 = 10u | 0x80000000u;
    EXPECT_TRUE(moved_lately(promoted_at_10, 18, true));
    EXPECT_FALSE(moved_lately(promoted_at_10, 19, true));
    EXPECT_FALSE(moved_lately(promoted_at_10, 12, false));
    EXPECT_TRUE(undoes_recent_move(promoted_at_10, 12, false)) << "evicting it now undoes the promotion";
    EXPECT_FALSE(undoes_recent_move(promoted_at_10, 12, true));
}

TEST(placement, prefill_hkm_keeps_sinks_window_and_the_most_important) {
    const auto pol = make_policy(params("hillinfer", placement_kind::hkm), 1);
    kv_cells c(kv_cells_params{1, 1, 64, 9});
    // 16 tokens, none before: importance ties between 7 and 8 go to the lower position (as the selector ranks).
    std::vector<float> imp(16, 0.0f);
    imp[4] = 5.0f;
    imp[7] = 3.0f;
    imp[8] = 3.0f;
    imp[10] = 4.0f;
    prefill_plan plan;
    pol->place_prefill(prefill_place_input{0, 0, 0, 16, &c, imp.data(), 9, 1}, plan);
    // Room 8: sinks 0-1, window 13-15, then 4, 10, 7.
    EXPECT_EQ(std::set<int32_t>(plan.place.begin(), plan.place.end()), (std::set<int32_t>{0, 1, 4, 7, 10, 13, 14, 15}));
    for (size_t i = 0; i < plan.place.size(); ++i) {
        const bool pinned = plan.place[i] < 2 || plan.place[i] >= 13;
        EXPECT_EQ(plan.place_hits[i], pinned ? 0 : kv_cells::hit_increment) << plan.place[i];
    }
    EXPECT_TRUE(plan.evict.empty());
}

TEST(placement, prefill_of_a_continued_sequence_evicts_its_own_less_important_tokens) {
    const auto pol = make_policy(params("hillinfer", placement_kind::hkm), 1);
    kv_cells c(kv_cells_params{1, 1, 64, 8});
    c.grow(0, 10);
    for (const int32_t t : {0, 1, 5, 7, 8, 9}) c.take_hot(0, 0, t);
    std::vector<float> imp(14, 0.0f);
    imp[3] = 9.0f;  // an older cold token that matters now
    imp[5] = 1.0f;
    prefill_plan plan;
    pol->place_prefill(prefill_place_input{0, 0, 10, 14, &c, imp.data(), 2, 1}, plan);
    // Room: 2 free + 6 own - 1 reserved = 7: sinks 0-1, window 11-13, then 3 and 5.
    EXPECT_EQ(std::set<int32_t>(plan.evict.begin(), plan.evict.end()), (std::set<int32_t>{7, 8, 9}));
    EXPECT_EQ(std::set<int32_t>(plan.place.begin(), plan.place.end()), (std::set<int32_t>{3, 11, 12, 13}));
    // fifo: the most recent instead.
    const auto fifo = make_policy(params("hillinfer", placement_kind::fifo), 1);
    fifo->place_prefill(prefill_place_input{0, 0, 10, 14, &c, imp.data(), 2, 1}, plan);
    // (room 7: sinks, window 11-13, then 10 and 9)
    EXPECT_EQ(std::set<int32_t>(plan.evict.begin(), plan.evict.end()), (std::set<int32_t>{5, 7, 8}));
    EXPECT_EQ(std::set<int32_t>(plan.place.begin(), plan.place.end()), (std::set<int32_t>{10, 11, 12, 13}));
}

// Random cells, selections and budgets: every plan keeps the rules.
TEST(placement, plans_keep_their_invariants_on_random_inputs) {
    HILL_FRESH_RNG(rng);
    for (const placement_kind k : {placement_kind::fifo, placement_kind::hkm}) {
        const auto pol = make_policy(params("hillinfer", k), 1);
        for (int round = 0; round < 300; ++round) {
            const int n_seq = 1 + int(rng() % 3);
            const int64_t slots = 20 + int64_t(rng() % 40);
            kv_cells c(kv_cells_params{1, n_seq, 64, slots});
            std::vector<std::vector<int32_t>> counted(static_cast<size_t>(n_seq));
            std::vector<place_seq> seqs;
            for (int s = 0; s < n_seq; ++s) {
                const int64_t n = 6 + int64_t(rng() % 50);
                c.grow(s, n);
                for (int64_t t = 0; t < n; ++t) {
                    if (c.n_hot_free(0) > 2 && rng() % 3 != 0) c.take_hot(s, 0, t);
                    c.set_hits(s, 0, t, uint16_t(rng() % 30000));
                    if (rng() % 5 == 0) c.set_last_move(s, 0, t, uint32_t(90 + rng() % 12), rng() % 2 == 0);
                }
                for (int64_t t = 2; t <= n; ++t) {
                    if (rng() % 3 == 0 || t >= n - 2) counted[size_t(s)].push_back(int32_t(t));
                }
                seqs.push_back({s, n + 1, counted[size_t(s)]});
            }
            const int64_t free = c.n_hot_free(0);
            const int64_t reserve = int64_t(rng() % 3);
            const int64_t budget = int64_t(rng() % 6);
            placement_plan plan;
            pol->place(place_input{0, 100, &c, seqs, free, reserve, budget}, plan);
            EXPECT_LE(int64_t(plan.promote.size()), budget);
            std::set<std::pair<int, int32_t>> moved;
            for (const auto & [s, t] : plan.promote) {
                EXPECT_FALSE(c.is_hot(s, 0, t));
                EXPECT_TRUE(std::binary_search(counted[size_t(s)].begin(), counted[size_t(s)].end(), t)) << "promote only what the step read";
                EXPECT_FALSE(undoes_recent_move(c.last_move(s, 0, t), 100, true));
                EXPECT_TRUE(moved.insert({s, t}).second);
            }
            bool evicted_selected = false;
            for (const auto & [s, t] : plan.evict) {
                EXPECT_TRUE(c.is_hot(s, 0, t));
                const int64_t n = c.n_tokens(s) + 1;
                EXPECT_GE(t, 2) << "not a sink";
                EXPECT_LT(t, n - 3) << "not in the window";
                evicted_selected |= std::binary_search(counted[size_t(s)].begin(), counted[size_t(s)].end(), t);
                EXPECT_TRUE(moved.insert({s, t}).second);
            }
            if (k == placement_kind::fifo) {
                EXPECT_TRUE(plan.promote.empty());
            }
            // Room for the next step, unless nothing evictable was left; a token the step attended goes
            // only when every other evictable one went too.
            int64_t evictable = 0, unselected = 0, unselected_evicted = 0;
            for (int s = 0; s < n_seq; ++s) {
                for (int64_t t = 2; t < c.n_tokens(s) + 1 - 3; ++t) {
                    if (!c.is_hot(s, 0, t)) continue;
                    ++evictable;
                    if (!std::binary_search(counted[size_t(s)].begin(), counted[size_t(s)].end(), int32_t(t))) {
                        ++unselected;
                        unselected_evicted += moved.count({s, int32_t(t)});
                    }
                }
            }
            const int64_t after = free - int64_t(plan.promote.size()) + int64_t(plan.evict.size());
            EXPECT_TRUE(after >= reserve || int64_t(plan.evict.size()) == evictable) << "free after " << after;
            EXPECT_GE(after, 0);
            if (evicted_selected) {
                EXPECT_EQ(unselected_evicted, unselected);
                EXPECT_LT(after, reserve + 1) << "a selected token went only for the appends";
            }
        }
    }
}

}  // namespace
}  // namespace hill
