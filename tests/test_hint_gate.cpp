// The pipeline's hint gate (sched/hint_gate.h): each layer's hint precision as a moving average, the
// gate shutting below 1/2 and opening again when the hints recover; and in the decode step: gated hints
// change no result, and a model whose selection jumps from step to step stops being hinted; the cost
// probe's rounds (A B B A), its choice by the rounds' medians, and its next probe.
#include "engine/context.h"
#include "engine/run_report.h"
#include "engine/session.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "sched/hint_gate.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace hill {
namespace {

std::vector<int32_t> iota_from(int32_t first, int n) {
    std::vector<int32_t> v(size_t(n), 0);
    std::iota(v.begin(), v.end(), first);
    return v;
}

TEST(hint_gate, opens_shuts_and_reopens_with_the_measured_precision) {
    hint_gate g(2, 3);
    for (int il = 0; il < 3; ++il) {
        EXPECT_TRUE(g.open(il));
        EXPECT_EQ(g.precision(il), 1.0f);
    }
    const std::vector<int32_t> hint = iota_from(0, 100);  // 0..99
    // Layer 0: 20 of 100 hinted tokens wanted (with 30 others); layer 1: 80 of 100; layer 2: no hint.
    const auto step = [&](float p0, float p1) {
        for (int seq = 0; seq < 2; ++seq) {
            g.named(seq, 0, hint);
            g.named(seq, 1, hint);
            std::vector<int32_t> w0 = iota_from(int32_t(100 - 100 * p0), int(100 * p0));
            for (int32_t t = 200; t < 230; ++t) w0.push_back(t);
            g.wanted(seq, 0, w0);
            g.wanted(seq, 1, iota_from(0, int(100 * p1)));
            g.wanted(seq, 2, hint);  // nothing named: counts nothing
        }
        g.end_step(1.0);
    };
    step(0.2f, 0.8f);
    EXPECT_FLOAT_EQ(g.precision(0), 0.6f);  // 1 + (0.2 − 1) / 2
    EXPECT_FLOAT_EQ(g.precision(1), 0.9f);
    EXPECT_EQ(g.precision(2), 1.0f);
    EXPECT_TRUE(g.open(0));
    step(0.2f, 0.8f);
    EXPECT_FLOAT_EQ(g.precision(0), 0.4f);
    EXPECT_FALSE(g.open(0));
    EXPECT_TRUE(g.open(1));
    EXPECT_TRUE(g.open(2));
    // Shut, the layer is still measured: precise hints open it again.
    step(1.0f, 0.8f);
    EXPECT_FLOAT_EQ(g.precision(0), 0.7f);
    EXPECT_TRUE(g.open(0));
}

TEST(hint_gate, a_failed_step_and_a_second_pass_count_nothing) {
    hint_gate g(1, 1);
    const std::vector<int32_t> hint = iota_from(10, 10), none = iota_from(100, 10);
    g.named(0, 0, hint);
    g.wanted(0, 0, none);
    g.discard_step();  // the step failed: its 0% is forgotten
    EXPECT_EQ(g.precision(0), 1.0f);
    g.named(0, 0, hint);
    g.wanted(0, 0, hint);  // 100%
    g.wanted(0, 0, none);  // a second pass of the step: the hint was taken
    g.end_step(1.0);
    EXPECT_EQ(g.precision(0), 1.0f);
    g.end_step(1.0);  // a step without hints leaves the precision
    EXPECT_EQ(g.precision(0), 1.0f);
}

// Runs n completed steps of g, each taking on_s or off_s seconds per token by its arm; returns the arms
// (true: hints on), one per step.
std::vector<bool> run_steps(hint_gate & g, int64_t n, double on_s, double off_s) {
    std::vector<bool> arms;
    for (int64_t i = 0; i < n; ++i) {
        arms.push_back(g.arm_on());
        EXPECT_EQ(g.open(0), g.arm_on()) << "precision 1: the arm decides";
        g.end_step(g.arm_on() ? on_s : off_s);
    }
    return arms;
}

// The probe's rounds A B B A of probe_steps steps each, A = a.
std::vector<bool> probe_arms(bool a) {
    std::vector<bool> v;
    for (const bool arm : {a, !a, !a, a}) v.insert(v.end(), size_t(hint_gate::probe_steps), arm);
    return v;
}

TEST(hint_gate_cost, hints_stay_on_when_the_steps_with_them_are_faster) {
    hint_gate g(1, 1);
    constexpr int64_t probe = 4 * hint_gate::probe_steps;
    EXPECT_EQ(run_steps(g, probe, 1.0, 1.2), probe_arms(true));
    EXPECT_TRUE(g.hints_pay());
    const std::vector<bool> after = run_steps(g, hint_gate::reprobe_every - probe, 1.0, 1.2);
    EXPECT_EQ(std::count(after.begin(), after.end(), false), 0) << "on until the next probe";
    EXPECT_TRUE(g.probing());
    EXPECT_EQ(run_steps(g, probe, 1.0, 1.2), probe_arms(true)) << "the next probe, from step reprobe_every";
    EXPECT_TRUE(g.hints_pay());
}

TEST(hint_gate_cost, off_when_the_steps_without_them_are_faster_and_on_again_when_that_turns) {
    hint_gate g(1, 2);
    constexpr int64_t probe = 4 * hint_gate::probe_steps;
    EXPECT_EQ(run_steps(g, probe, 1.2, 1.0), probe_arms(true));
    EXPECT_FALSE(g.hints_pay());
    EXPECT_FALSE(g.probing());
    EXPECT_FALSE(g.open(0));
    EXPECT_FALSE(g.open(1));
    EXPECT_FALSE(g.arm_on(true)) << "nor the wrap-around hint for the next step";
    const std::vector<bool> after = run_steps(g, hint_gate::reprobe_every - probe, 1.2, 1.0);
    EXPECT_EQ(std::count(after.begin(), after.end(), true), 0);
    // The machine changed: the next probe starts from off (A) and turns back.
    EXPECT_EQ(run_steps(g, probe, 1.0, 1.2), probe_arms(false));
    EXPECT_TRUE(g.hints_pay());
    EXPECT_TRUE(g.open(0));
}

TEST(hint_gate_cost, a_gain_below_min_gain_and_one_stalled_step_change_nothing) {
    constexpr int64_t probe = 4 * hint_gate::probe_steps;
    hint_gate g(1, 1);
    run_steps(g, probe, 1.0, 1.0 - 0.5 * hint_gate::min_gain);  // off faster, by less than min_gain
    EXPECT_TRUE(g.hints_pay());
    hint_gate h(1, 1);
    for (int64_t i = 0; i < probe; ++i) {
        // Off is 2x faster but for one step of each of its rounds, stalled 100x: the rounds' medians decide.
        const bool stalled = !h.arm_on() && (i % hint_gate::probe_steps) == 0;
        h.end_step(h.arm_on() ? 1.0 : stalled ? 50.0 : 0.5);
    }
    EXPECT_FALSE(h.hints_pay());
}

TEST(hint_gate_cost, failed_steps_and_steps_without_hints_do_not_advance_the_probe) {
    hint_gate g(1, 1);
    run_steps(g, hint_gate::probe_steps, 1.0, 0.5);  // round A (on) done
    ASSERT_FALSE(g.arm_on());
    g.discard_step();  // a failed step: the next is still round B's first
    g.end_step(0.0);   // a step that could send no hint: likewise
    EXPECT_FALSE(g.arm_on());
    const std::vector<bool> arms = probe_arms(true);
    EXPECT_EQ(run_steps(g, 3 * hint_gate::probe_steps, 1.0, 0.5),
              std::vector<bool>(arms.begin() + hint_gate::probe_steps, arms.end()));
    EXPECT_FALSE(g.hints_pay());
}

TEST(hint_gate_cost, a_shut_layer_stays_shut_in_the_on_arm) {
    hint_gate g(1, 2);
    const std::vector<int32_t> hint = iota_from(0, 10);
    for (int i = 0; i < 2; ++i) {  // layer 0's hints are never wanted: precision 1 -> 0.5 -> 0.25
        g.named(0, 0, hint);
        g.wanted(0, 0, iota_from(100, 10));
        g.end_step(1.0);
    }
    ASSERT_TRUE(g.arm_on());
    EXPECT_FALSE(g.open(0));
    EXPECT_TRUE(g.open(1));
}

class hint_gate_decode : public ::testing::Test {
protected:
    void SetUp() override {
        write_random_model(dir.file("m.gguf"), random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96,
                                                                   .n_layer = 3, .n_head = 8, .n_head_kv = 2,
                                                                   .n_ctx = 512, .seed = 4});
        m = model::load(dir.file("m.gguf"));
        for (int i = 0; i < 200; ++i) prompt.push_back(1 + (i * 37) % 299);
    }
    std::unique_ptr<session> make(bool prefetch, double alpha = 0.2) {
        context_params cp{.n_ctx = 300, .kv_type = ggml_type::f16, .n_batch = 64,
                          .policy = policy_params{.name = "hillinfer", .alpha = alpha, .n_sinks = 4, .n_window = 8}};
        cp.storage.prefetch = prefetch;
        cp.kv_host_budget = context::host_budget_for(*m, cp, 50);
        cp.kv_dir = dir.file("kv" + std::to_string(n_dirs++));
        return std::make_unique<session>(*m, cp, pool);
    }
    test::temp_dir dir;
    std::unique_ptr<model> m;
    std::vector<int32_t> prompt;
    thread_pool pool{2};
    int n_dirs = 0;
};

// A random model's selection jumps from step to step (its hints are right about as often as α): its
// layers' hints are gated, and the logits are those of a run without any prefetch. Selecting everything
// (α 1), every hinted token is wanted again: nothing is gated and every prefetched token is used — but
// the last step's hint for the next step's first layer (the pipeline wrapping around), which no step took.
TEST_F(hint_gate_decode, a_jumping_selection_is_not_hinted_and_a_stable_one_is) {
    auto hinted = make(true), unhinted = make(false), stable = make(true, 1.0);
    for (session * s : {hinted.get(), unhinted.get(), stable.get()}) s->eval(prompt);
    uint64_t last_hint = 0;  // the stable run's last step's hint for a step that never came
    for (int step = 0; step < 16; ++step) {
        const int32_t tok = 1 + (step * 29) % 299;
        const uint64_t carried = stable->ctx().decode_stats().hint_tokens_next_step;
        for (session * s : {hinted.get(), unhinted.get(), stable.get()}) s->eval(std::span<const int32_t>(&tok, 1));
        last_hint = stable->ctx().decode_stats().hint_tokens_next_step - carried;
        for (int32_t i = 0; i < 300; ++i) ASSERT_EQ(hinted->logits()[i], unhinted->logits()[i]) << "step " << step;
    }
    const csd::device_counters c = hinted->ctx().storage().counters();
    EXPECT_GT(hinted->ctx().decode_stats().hints_gated, 0u);
    EXPECT_LT(double(c.prefetch_hits), 0.5 * double(c.tokens_prefetched))
        << "prefetched " << c.tokens_prefetched << ", used " << c.prefetch_hits;
    EXPECT_EQ(unhinted->ctx().storage().counters().tokens_prefetched, 0u);
    const csd::device_counters cs = stable->ctx().storage().counters();
    EXPECT_EQ(stable->ctx().decode_stats().hints_gated, 0u);
    EXPECT_GT(cs.tokens_prefetched, 0u);
    EXPECT_GT(last_hint, 0u) << "the last layer hints the next step's first";
    EXPECT_EQ(cs.prefetch_hits, cs.tokens_prefetched - last_hint);
    // The 16 decode steps are the cost probe's first, A B B A with A = hints on: the 8 steps of its middle
    // rounds sent none. A device that does not read ahead is not probed.
    EXPECT_EQ(stable->ctx().decode_stats().hint_steps, 16u);
    EXPECT_EQ(unhinted->ctx().decode_stats().hint_steps, 0u);
    EXPECT_EQ(policy_json(stable->ctx()).at("hint_steps"), 16u);
    const std::string report = storage_summary(stable->ctx());
    EXPECT_NE(report.find("hints off in 8 of 16 steps: 8 probing whether they pay, 0 because"), std::string::npos)
        << report;
    EXPECT_EQ(stable->ctx().decode_stats().hint_steps_off_probing, 8u);
    EXPECT_EQ(stable->ctx().decode_stats().hint_steps_off_chosen, 0u);
    EXPECT_EQ(unhinted->ctx().decode_stats().hint_steps_off_probing, 0u);
    EXPECT_EQ(unhinted->ctx().decode_stats().hints_gated, 0u) << "nothing is held back where nothing is read ahead";
}

// The next step's hint (the pipeline wrapping around from the last layer) is still being read when the
// step ends; when the sequence is then cut at once and written again — its freed cold pages rewritten
// with other rows — no read may be in flight on them (the context drops the hint first), and the next
// step must not take rows the hint read: the logits stay those of a run without any prefetch, step
// after step. α 1 keeps the hints open (every hinted token is selected again).
TEST_F(hint_gate_decode, a_cut_between_steps_does_not_feed_the_next_step_stale_rows) {
    auto hinted = make(true, 1.0), unhinted = make(false, 1.0);
    const auto same_logits = [&](const char * when, int step) {
        for (int32_t i = 0; i < 300; ++i) ASSERT_EQ(hinted->logits()[i], unhinted->logits()[i]) << when << ", step " << step;
    };
    for (session * s : {hinted.get(), unhinted.get()}) s->eval(prompt);
    for (int round = 0; round < 3; ++round) {
        for (int step = 0; step < 4; ++step) {
            const int32_t tok = 1 + (round * 53 + step * 29) % 299;
            for (session * s : {unhinted.get(), hinted.get()}) s->eval(std::span<const int32_t>(&tok, 1));
            same_logits("decode", step);
        }
        // Cut to 60 tokens and write 150 others: most of the freed pages come back with other rows.
        std::vector<int32_t> other;
        for (int i = 0; i < 150; ++i) other.push_back(1 + (i * 41 + round * 7 + 3) % 299);
        for (session * s : {hinted.get(), unhinted.get()}) {  // the hinted run's cut right after its step
            s->truncate(60);
            s->eval(other);
        }
        same_logits("prefill after the cut", round);
    }
    const step_stats & st = hinted->ctx().decode_stats();
    EXPECT_GT(st.hint_tokens_next_step, 0u) << "the wrap-around hint was sent";
    EXPECT_EQ(st.hints_gated, 0u);
}

}  // namespace
}  // namespace hill
