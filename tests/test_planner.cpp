// The planner (sched/planner.h: Eq. 2–4 of the HillInfer paper §4.3, the M0 cap, re-planning on drift), its
// calibration cache (sched/calibration.h), and the context applying the planned hot capacity.
#include "core/error.h"
#include "core/fp16.h"
#include "engine/context.h"
#include "experiments/calibrate.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "sched/calibration.h"
#include "sched/planner.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <iterator>

namespace hill {
namespace {

std::string read_text(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// f_c 2, f_s 1, B_c 10, B_s 2 GB/s.
calibration cal_2_1_10_2() {
    return calibration{2e9, 1e9, 10e9, 2e9, "test"};
}

TEST(planner, eq4_matches_hand_computed_values) {
    const calibration c = cal_2_1_10_2();
    // kv_per_key 2 (f16 K and V): f in K and V bytes is 4 and 2 GB/s;
    // β = 10·4·(2 + 0.2·2) / (2·2·(10 + 0.2·4)) = 96 / 43.2 = 20/9.
    EXPECT_NEAR(balanced_beta(c, 0.2, 0.2, 2.0), 20.0 / 9.0, 1e-12);
    // The paper's units (f in the same bytes as M): 10·2·(2 + 0.2) / (2·1·(10 + 0.4)) = 44 / 20.8 = 55/26.
    EXPECT_NEAR(balanced_beta(c, 0.2, 0.2, 1.0), 55.0 / 26.0, 1e-12);
    // Skewness correction: α_c 0.5 of the hot tokens, α_s 0.1 of the cold ones selected:
    // 10·4·(2 + 0.1·2) / (2·2·(10 + 0.5·4)) = 88 / 48 = 11/6.
    EXPECT_NEAR(balanced_beta(c, 0.5, 0.1, 2.0), 11.0 / 6.0, 1e-12);
    // At that β the two paths of Eq. 2 take the same time.
    const double beta = balanced_beta(c, 0.2, 0.2, 2.0);
    const path_times t = predict_times(c, 0.2, 0.2, 1000.0 * beta, 1000.0, 256.0, 512.0);
    EXPECT_NEAR(t.t_cpu_s, t.t_csd_s, 1e-12 * t.t_csd_s);
    // Eq. 2 by hand: 1000 hot tokens of 256 B of keys, 512 B of K and V: 1000·256/2e9 + 0.2·1000·512/10e9.
    const path_times h = predict_times(c, 0.2, 0.3, 1000.0, 500.0, 256.0, 512.0);
    EXPECT_NEAR(h.t_cpu_s, 1.28e-4 + 1.024e-5, 1e-15);
    EXPECT_NEAR(h.t_csd_s, 500.0 * 256.0 / 1e9 + 0.3 * 500.0 * 512.0 / 2e9, 1e-15);
}

TEST(planner, capacity_is_cut_to_the_host_budget) {
    planner pl(planner_params{.cal = cal_2_1_10_2()}, 0.2, 256, 512, 2);
    EXPECT_NEAR(pl.beta(), 20.0 / 9.0, 1e-12);
    EXPECT_NEAR(pl.beta_eq4(), 20.0 / 9.0, 1e-12);
    // 1000 tokens at β 20/9: 1000·(20/9)/(29/9) = 689.66 → 690 hot.
    EXPECT_EQ(pl.capacity(1000, 20, 800), 690);
    EXPECT_FALSE(pl.m0_bound());
    EXPECT_NEAR(pl.beta_applied(), 690.0 / 310.0, 1e-12);
    // M0 holds 100 tokens: β = M0/M_s = 100/900, bound.
    EXPECT_EQ(pl.capacity(1000, 20, 100), 100);
    EXPECT_TRUE(pl.m0_bound());
    EXPECT_NEAR(pl.beta_applied(), 100.0 / 900.0, 1e-12);
    // Predicted per step (2 layers) at that split: Eq. 2 at α.
    const path_times t = pl.predicted();
    const path_times one = predict_times(cal_2_1_10_2(), 0.2, 0.2, 100.0, 900.0, 256.0, 512.0);
    EXPECT_NEAR(t.t_cpu_s, 2 * one.t_cpu_s, 1e-15);
    EXPECT_NEAR(t.t_csd_s, 2 * one.t_csd_s, 1e-15);
    // A fixed β below the floor of sinks and windows: the floor.
    planner fixed(planner_params{.beta = 0.001, .cal = cal_2_1_10_2()}, 0.2, 256, 512, 2);
    EXPECT_TRUE(fixed.fixed());
    EXPECT_EQ(fixed.capacity(1000, 20, 800), 20);
    planner quarter(planner_params{.beta = 0.25, .cal = cal_2_1_10_2()}, 0.2, 256, 512, 2);
    EXPECT_EQ(quarter.capacity(1000, 20, 800), 200);
}

// n steps of per-token costs c_cpu, c_csd (seconds) at the split of the last capacity(): hot tokens
// selected at share a_hot, cold ones at a_cold. Returns the step (1-based) that re-planned, or 0.
int feed(planner & pl, int n, double n_hot, double n_cold, double c_cpu, double c_csd, double a_hot = 0.4,
         double a_cold = 0.1) {
    for (int i = 1; i <= n; ++i) {
        step_observation o{n_hot, n_cold, a_hot * n_hot, a_cold * n_cold, c_cpu * n_hot, c_csd * n_cold};
        if (pl.observe(o)) return i;
    }
    return 0;
}

TEST(planner, replans_when_the_measured_times_drift_apart) {
    planner pl(planner_params{.drift = 0.25, .drift_steps = 4, .settle_steps = 16, .cal = cal_2_1_10_2()}, 0.2, 256,
               512, 1);
    ASSERT_EQ(pl.capacity(1000, 0, 1000), 690);
    // The host costs 1 µs a token, the device 0.5: T_cpu 690 µs against T_csd 155 µs. No re-plan before
    // 16 steps since the start; then β = c_csd / c_cpu = 0.5.
    EXPECT_EQ(feed(pl, 40, 690, 310, 1e-6, 0.5e-6), 16);
    EXPECT_NEAR(pl.beta(), 0.5, 1e-9);
    EXPECT_EQ(pl.n_replans(), 1);
    // The selected shares measured over those steps: the skew.
    EXPECT_NEAR(pl.alpha_hot(), 0.4, 1e-12);
    EXPECT_NEAR(pl.alpha_cold(), 0.1, 1e-12);
    EXPECT_NEAR(pl.beta_skewed(), balanced_beta(cal_2_1_10_2(), 0.4, 0.1, 2.0), 1e-12);
    EXPECT_EQ(pl.n_observed(), 0);  // the averages restart at a change
    ASSERT_EQ(pl.capacity(1000, 0, 1000), 333);  // 1000·0.5/1.5
    // Balanced now (333 µs against 333.5 µs): no re-plan, however long.
    EXPECT_EQ(feed(pl, 100, 333, 667, 1e-6, 0.5e-6), 0);
    EXPECT_EQ(pl.n_replans(), 1);
    EXPECT_EQ(pl.n_observed(), 100);
    EXPECT_NEAR(pl.measured().t_cpu_s, 333e-6, 1e-12);
    EXPECT_NEAR(pl.measured().t_csd_s, 333.5e-6, 1e-12);
    // The device slows down 4x: T_csd 1334 µs against 333: re-planned to β = 2 after 4 steps over the
    // threshold (more than 16 since the change).
    EXPECT_EQ(feed(pl, 10, 333, 667, 1e-6, 2e-6), 4);
    EXPECT_NEAR(pl.beta(), 2.0, 1e-9);
}

TEST(planner, drift_within_the_threshold_or_for_too_few_steps_does_not_replan) {
    planner pl(planner_params{.drift = 0.25, .drift_steps = 4, .settle_steps = 0, .cal = cal_2_1_10_2()}, 0.2, 256, 512,
               1);
    pl.capacity(1000, 0, 1000);
    // 20% apart: under the 25% threshold.
    EXPECT_EQ(feed(pl, 50, 690, 310, 1e-6, 0.8 * 690.0 / 310.0 * 1e-6), 0);
    // 3 steps far apart, then one balanced, three times over: never 4 in a row.
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(feed(pl, 3, 690, 310, 1e-6, 0.1e-6), 0);
        EXPECT_EQ(feed(pl, 1, 690, 310, 1e-6, 690.0 / 310.0 * 1e-6), 0);
    }
    EXPECT_EQ(pl.n_replans(), 0);
}

TEST(planner, an_m0_bound_beta_stays_while_the_device_path_is_the_slower) {
    planner pl(planner_params{.drift_steps = 2, .settle_steps = 0, .cal = cal_2_1_10_2()}, 0.2, 256, 512, 1);
    ASSERT_EQ(pl.capacity(1000, 0, 100), 100);
    ASSERT_TRUE(pl.m0_bound());
    // The device is 10x slower per token than the host: balance wants β = 10, the budget holds 1/9.
    EXPECT_EQ(feed(pl, 20, 100, 900, 1e-6, 10e-6), 0);
    EXPECT_NEAR(pl.beta(), 20.0 / 9.0, 1e-12);
    // The host is the slower (2000 µs against 450): β goes down, below the bound (β = 0.5 / 20 = 0.025).
    EXPECT_EQ(feed(pl, 20, 100, 900, 20e-6, 0.5e-6), 2);
    EXPECT_NEAR(pl.beta(), 0.025, 1e-9);
    EXPECT_EQ(pl.capacity(1000, 0, 100), 24);  // 1000·0.025/1.025
    EXPECT_FALSE(pl.m0_bound());
    // A fixed β never re-plans.
    planner fixed(planner_params{.beta = 0.5, .drift_steps = 1, .settle_steps = 0, .cal = cal_2_1_10_2()}, 0.2, 256,
                  512, 1);
    fixed.capacity(1000, 0, 1000);
    EXPECT_EQ(feed(fixed, 20, 333, 667, 1e-6, 10e-6), 0);
    EXPECT_EQ(fixed.beta(), 0.5);
}

TEST(calibration, json_round_trip_keeps_other_entries) {
    test::temp_dir d;
    const std::string path = d.file("sub/calibration.json");  // the directory is created
    const calibration a{3.1e9, 0.31e9, 9.8e9, 0.92e9, ""}, b{1e9, 2e9, 3e9, 4e9, ""};
    EXPECT_FALSE(load_calibration(path, "k1").has_value());  // no file yet
    save_calibration(path, "k1", a, {{"note", "a"}});
    save_calibration(path, "dev 8:1/emulator/smartssd", b, nlohmann::json::object());
    const std::optional<calibration> ra = load_calibration(path, "k1"),
                                     rb = load_calibration(path, "dev 8:1/emulator/smartssd");
    ASSERT_TRUE(ra && rb);
    EXPECT_DOUBLE_EQ(ra->f_c_bps, a.f_c_bps);
    EXPECT_DOUBLE_EQ(ra->f_s_bps, a.f_s_bps);
    EXPECT_DOUBLE_EQ(ra->b_c_bps, a.b_c_bps);
    EXPECT_DOUBLE_EQ(ra->b_s_bps, a.b_s_bps);
    EXPECT_DOUBLE_EQ(rb->b_s_bps, 4e9);
    EXPECT_NE(ra->source.find(path), std::string::npos) << ra->source;
    EXPECT_FALSE(load_calibration(path, "k2").has_value());
    const nlohmann::json j = nlohmann::json::parse(read_text(path));
    EXPECT_EQ(j["entries"]["k1"]["note"], "a");
    EXPECT_EQ(j["version"], 1);
    // calibration_for: the cached entry of a key, else the defaults.
    const csd::device_profile smartssd = csd::load_device_profile("smartssd");
    const calibration def = calibration_for(path, d.path.string(), csd::storage_kind::emulator, smartssd);
    EXPECT_NE(def.source.find("default"), std::string::npos) << def.source;
    EXPECT_DOUBLE_EQ(def.f_s_bps, 3.2e9);  // the smaller of score 16 and internal read 3.2 GB/s
    EXPECT_DOUBLE_EQ(def.b_s_bps, 3.2e9);  // the smaller of internal read 3.2 and link 3.5 GB/s
    save_calibration(path, calibration_key(d.path.string(), "emulator", "smartssd"), a, nlohmann::json::object());
    const calibration got = calibration_for(path, d.file("kv-not-yet"), csd::storage_kind::emulator, smartssd);
    EXPECT_DOUBLE_EQ(got.f_c_bps, a.f_c_bps);  // a directory to come shares its parent's disk
    EXPECT_EQ(calibration_key(d.path.string(), "emulator", "none").rfind("dev ", 0), 0u);
}

TEST(calibration, bad_files_are_errors_naming_the_file_and_the_value) {
    test::temp_dir d;
    const auto write = [&](const std::string & text) {
        const std::string p = d.file("c.json");
        std::ofstream(p) << text;
        return p;
    };
    const std::string ok_entry = R"({"f_c_gbps": 1, "f_s_gbps": 1, "b_c_gbps": 1, "b_s_gbps": 1})";
    struct bad_case {
        std::string text, expect;
        bool whole;  // the file is not a calibration cache (else one entry is bad: a save replaces it)
    };
    for (const bad_case & c : std::vector<bad_case>{
             {"{not json", "not valid JSON", true},
             {"[1, 2]", "expected an object", true},
             {R"({"entries": {}})", "/version", true},
             {R"({"version": 2, "entries": {}})", "/version", true},
             {R"({"version": 1})", "/entries", true},
             {R"({"version": 1, "entries": {"k": {"f_c_gbps": 1, "b_c_gbps": 1, "b_s_gbps": 1}}})", "f_s_gbps", false},
             {R"({"version": 1, "entries": {"k": {"f_c_gbps": 1, "f_s_gbps": -1, "b_c_gbps": 1, "b_s_gbps": 1}}})",
              "above 0", false},
             {R"({"version": 1, "entries": {"k": {"f_c_gbps": 1, "f_s_gbps": "3", "b_c_gbps": 1, "b_s_gbps": 1}}})",
              "a string", false},
         }) {
        const std::string p = write(c.text);
        const std::string msg = test::error_of([&] { (void)load_calibration(p, "k"); });
        EXPECT_NE(msg.find(p), std::string::npos) << c.text << "\n" << msg;
        EXPECT_NE(msg.find(c.expect), std::string::npos) << c.text << "\n" << msg;
        // What to do: a rerun replaces a bad entry, not a file calibrate refuses to overwrite.
        EXPECT_NE(msg.find(c.whole ? "remove the file, or give `hillinfer calibrate --out` another path"
                                   : "rerun `hillinfer calibrate`: it replaces the entry"),
                  std::string::npos)
            << msg;
        if (c.whole) {
            // Saving over a file that is not a calibration cache is refused too (it is not overwritten).
            (void)test::error_of([&] { save_calibration(p, "k", cal_2_1_10_2(), nlohmann::json::object()); });
            EXPECT_EQ(read_text(p), c.text);
            // A run only warns: the planner takes the default rates and says why.
            const csd::device_profile smartssd = csd::load_device_profile("smartssd");
            const calibration fb = calibration_for(p, d.path.string(), csd::storage_kind::emulator, smartssd);
            EXPECT_DOUBLE_EQ(fb.f_c_bps, 4e9) << c.text;
            EXPECT_DOUBLE_EQ(fb.f_s_bps, 3.2e9) << c.text;
            EXPECT_NE(fb.source.find("the calibration cache " + p + " is unusable"), std::string::npos) << fb.source;
        } else {
            // A bad entry is what a new calibration replaces.
            save_calibration(p, "k", cal_2_1_10_2(), nlohmann::json::object());
            EXPECT_DOUBLE_EQ(load_calibration(p, "k")->f_s_bps, 1e9);
        }
    }
    (void)write(R"({"version": 1, "entries": {"k": )" + ok_entry + "}}");
    EXPECT_TRUE(load_calibration(d.file("c.json"), "k").has_value());
    // Unwritable places: a directory as the file, a directory that cannot be created.
    try {
        save_calibration(d.path.string(), "k", cal_2_1_10_2(), nlohmann::json::object());
        ADD_FAILURE() << "a directory taken as the cache file";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find(d.path.string()), std::string::npos) << e.what();
    }
    const std::string msg2 = test::error_of([&] {
        save_calibration("/proc/hill-no-such-dir/c.json", "k", cal_2_1_10_2(), nlohmann::json::object());
    });
    EXPECT_NE(msg2.find("/proc/hill-no-such-dir"), std::string::npos) << msg2;
}

// A context of 1024 random tokens of a small model on the emulator, a budget of half of them.
struct planned_context {
    test::temp_dir dir;
    std::unique_ptr<model> m;
    thread_pool pool{1};
    std::unique_ptr<context> make(csd::storage_kind storage, double beta, int64_t n_tokens = 1024) {
        if (m == nullptr) {
            write_random_model(dir.file("m.gguf"), random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96,
                                                                        .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                                                                        .n_ctx = 2048, .type = ggml_type::f32});
            m = model::load(dir.file("m.gguf"));
        }
        context_params cp;
        cp.n_ctx = 1100;
        cp.kv_host_budget = 512 * m->hp().kv_bytes_per_token(ggml_type::f16);
        cp.kv_dir = dir.file("kv");
        cp.policy.name = "hillinfer";
        cp.policy.score = score_params{score_precision::int8, query_precision::int8};
        cp.storage.kind = storage;
        cp.score_copy_bits = 0;
        cp.planner.beta = beta;
        cp.planner.cal = cal_2_1_10_2();
        auto ctx = std::make_unique<context>(*m, cp, pool);
        std::vector<std::vector<uint16_t>> k(2, std::vector<uint16_t>(1024 * 32)), v = k;
        for (int il = 0; il < 2; ++il) {
            for (size_t i = 0; i < k[size_t(il)].size(); ++i) {
                k[size_t(il)][i] = fp32_to_fp16(float((i * 7 + size_t(il)) % 13) / 13.0f - 0.5f);
                v[size_t(il)][i] = fp32_to_fp16(float((i * 5) % 11) / 11.0f - 0.5f);
            }
        }
        ctx->import_kv(0, n_tokens, std::vector<const void *>{k[0].data(), k[1].data()},
                       std::vector<const void *>{v[0].data(), v[1].data()});
        return ctx;
    }
};

TEST(planner, context_applies_the_capacity_and_evicts_without_io) {
    planned_context pc;
    // Fixed β 0.25: 1024·0.25/1.25 = 205 hot per layer of the 512 the budget holds.
    auto ctx = pc.make(csd::storage_kind::emulator, 0.25);
    ASSERT_NE(ctx->planner(), nullptr);
    EXPECT_EQ(ctx->hot_slots_max(), 512);
    EXPECT_EQ(ctx->cells().hot_capacity(), 205);
    for (int il = 0; il < 2; ++il) EXPECT_LE(ctx->cells().n_hot(il), 205);
    const uint64_t read0 = ctx->io_stats().cold_read_bytes;
    std::vector<float> logits(300);
    for (int step = 0; step < 5; ++step) {
        const int seq = 0;
        const int32_t tok = 1;
        ctx->decode(std::span<const int>(&seq, 1), std::span<const int32_t>(&tok, 1), logits.data());
        for (int il = 0; il < 2; ++il) EXPECT_LE(ctx->cells().n_hot(il), ctx->cells().hot_capacity());
    }
    EXPECT_EQ(ctx->io_stats().cold_read_bytes, read0);  // the host read nothing to evict
    EXPECT_EQ(ctx->planner()->n_observed(), 5);
    EXPECT_NEAR(ctx->planner()->beta_applied(), 0.25, 0.01);
    // The planner's own β: Eq. 4 from the calibration, 20/9, is more than the budget holds: M0-bound.
    auto planned = pc.make(csd::storage_kind::emulator, 0.0);
    EXPECT_NEAR(planned->planner()->beta_eq4(), 20.0 / 9.0, 1e-12);
    EXPECT_TRUE(planned->planner()->m0_bound());
    EXPECT_EQ(planned->cells().hot_capacity(), 512);
    // On a plain SSD there is no planner: the hot pool takes the whole budget.
    auto plain = pc.make(csd::storage_kind::plain, 0.25);
    EXPECT_EQ(plain->planner(), nullptr);
    EXPECT_EQ(plain->cells().hot_capacity(), 512);
}

// The measured α_c is the share of the hot tokens a step selects, and the step's own new token is one
// of them: over a context so short that every token is attended it is 1, not (n + 1) / n (the run
// report said "116.7% of the hot tokens selected").
TEST(planner, the_share_of_hot_tokens_selected_counts_the_new_token) {
    planned_context pc;
    auto ctx = pc.make(csd::storage_kind::emulator, 0.0, 6);
    std::vector<float> logits(300);
    for (int step = 0; step < 3; ++step) {
        const int seq = 0;
        const int32_t tok = 1;
        ctx->decode(std::span<const int>(&seq, 1), std::span<const int32_t>(&tok, 1), logits.data());
    }
    ASSERT_EQ(ctx->planner()->n_observed(), 3);
    EXPECT_DOUBLE_EQ(ctx->planner()->alpha_hot(), 1.0);
}

}  // namespace
}  // namespace hill
