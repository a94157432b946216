// `hillinfer bench latency|batch|beta|ablation` with --quick: every experiment runs, its JSON holds the
// fields docs/experiments.md describes (numbers as numbers) with values that agree with each other, and
// its plot (PNG, .dat, .gp) is written. (bench accuracy needs the shared data: test_bench_accuracy.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "experiments/experiments.h"
#include "test_util.h"

namespace hill {
namespace {

namespace fs = std::filesystem;

// The number at j[key]: fails the test when it is missing or not a number.
double num(const nlohmann::json & j, const std::string & key) {
    EXPECT_TRUE(j.contains(key) && j[key].is_number()) << "'" << key << "' is not a number in " << j.dump();
    return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

class bench_experiments : public ::testing::Test {
protected:
    test::temp_dir dir;

    // Runs `bench NAME --quick` with --json and --plot; checks the files and returns the JSON.
    nlohmann::json run(const std::string & name, const std::string & more = "") {
        const std::string json = dir.file(name + ".json"), png = dir.file(name + ".png");
        const test::cli_result r = test::run_cli("bench " + name + " --quick -t 2 --kv-dir " + dir.file("kv") +
                                                 " --json " + json + " --plot " + png + more);
        EXPECT_EQ(r.code, 0) << r.out;
        EXPECT_TRUE(fs::exists(png) && fs::file_size(png) > 0) << png;
        // The plot's data and script beside the JSON, and the PNG a PNG.
        EXPECT_TRUE(fs::exists(dir.file(name + ".dat")) && fs::file_size(dir.file(name + ".dat")) > 0);
        EXPECT_TRUE(fs::exists(dir.file(name + ".gp")));
        EXPECT_EQ(test::read_whole_file(png).substr(1, 3), "PNG");
        const nlohmann::json j = nlohmann::json::parse(test::read_whole_file(json), nullptr, false);
        EXPECT_FALSE(j.is_discarded()) << test::read_whole_file(json);
        EXPECT_EQ(j.value("experiment", ""), name);
        EXPECT_TRUE(j["machine"]["quick"].get<bool>());
        return j;
    }
};

TEST_F(bench_experiments, latency_times_every_policy_end_to_end_and_compares_hillinfer_with_each) {
    const nlohmann::json j = run("latency");
    const std::vector<std::string> pols = registered_policies();
    EXPECT_EQ(j["shape"], "tiny");
    EXPECT_EQ(num(j, "layers"), 1);
    // 2 prompt lengths × (in RAM + 75% cold on plain and emulator) × every policy, batch 2.
    ASSERT_EQ(j["results"].size(), 2 * 3 * pols.size());
    for (const nlohmann::json & r : j["results"]) {
        EXPECT_EQ(num(r, "batch"), 2);
        EXPECT_GT(num(r, "prefill_s"), 0);
        EXPECT_GT(num(r, "decode_s"), 0);
        EXPECT_NEAR(num(r, "e2e_s"), num(r, "prefill_s") + num(r, "decode_s"), 1e-9);
        EXPECT_NEAR(num(r, "tokens_per_s"), 2 * 8 / num(r, "e2e_s"), 1e-6);
        EXPECT_NEAR(num(r, "step_ms"), 1e3 * num(r, "decode_s") / 8, 1e-6);
    }
    // Every policy of a prompt length reuses the same prefill.
    for (const nlohmann::json & a : j["results"]) {
        for (const nlohmann::json & b : j["results"]) {
            if (a["ctx"] == b["ctx"]) {
                EXPECT_EQ(num(a, "prefill_s"), num(b, "prefill_s"));
            }
        }
    }
    // hillinfer against each other policy, per configuration: the ratio of the measured decode times.
    ASSERT_EQ(j["speedups"].size(), 2 * 3 * (pols.size() - 1));
    for (const nlohmann::json & s : j["speedups"]) {
        double hill = NAN, base = NAN;
        for (const nlohmann::json & r : j["results"]) {
            if (r["ctx"] != s["ctx"] || r["cold"] != s["cold"] || r["storage"] != s["storage"]) continue;
            if (r["policy"] == "hillinfer") hill = num(r, "decode_s");
            if (r["policy"] == s["baseline"]) base = num(r, "decode_s");
        }
        EXPECT_NEAR(num(s, "decode_speedup"), base / hill, 1e-9);
    }
}

TEST_F(bench_experiments, batch_reports_latency_and_throughput_per_batch_size) {
    const nlohmann::json j = run("batch");
    const std::vector<std::string> pols = registered_policies();
    ASSERT_EQ(j["results"].size(), 3 * pols.size());  // batches 1, 2, 4 at 75% cold on the plain SSD
    std::map<int, double> prefill;
    for (const nlohmann::json & r : j["results"]) {
        EXPECT_EQ(num(r, "ctx"), 512);
        EXPECT_NEAR(num(r, "tokens_per_s"), num(r, "batch") * 8 / num(r, "e2e_s"), 1e-6);
        prefill[int(num(r, "batch"))] = num(r, "prefill_s");
    }
    // A batch's prefill is the sum of its prompts' (each measured once): it grows with the batch.
    ASSERT_EQ(prefill.size(), 3u);
    EXPECT_LT(prefill[1], prefill[2]);
    EXPECT_LT(prefill[2], prefill[4]);
}

// --same-prompt: one prefill per length, charged to every sequence of a batch.
TEST_F(bench_experiments, the_same_prompt_is_prefilled_once_and_charged_per_sequence) {
    const nlohmann::json j = run("batch", " --same-prompt --policies full,hillinfer");
    EXPECT_TRUE(j["same_prompt"].get<bool>());
    ASSERT_EQ(j["results"].size(), 3 * 2u);
    std::map<int, double> prefill;
    for (const nlohmann::json & r : j["results"]) prefill[int(num(r, "batch"))] = num(r, "prefill_s");
    ASSERT_EQ(prefill.size(), 3u);
    EXPECT_GT(prefill[1], 0);
    EXPECT_DOUBLE_EQ(prefill[2], 2 * prefill[1]);
    EXPECT_DOUBLE_EQ(prefill[4], 4 * prefill[1]);
}

TEST_F(bench_experiments, beta_sweeps_the_ratio_and_marks_the_planners) {
    const nlohmann::json j = run("beta");
    ASSERT_EQ(j["points"].size(), 3u);
    double best = INFINITY, best_beta = NAN;
    std::vector<double> asked;
    for (const nlohmann::json & p : j["points"]) {
        asked.push_back(num(p, "beta_config"));
        // The applied β is what the host budget holds: at most the asked one (M0-bound), above 0.
        EXPECT_GT(num(p, "beta"), 0);
        EXPECT_LE(num(p, "beta"), num(p, "beta_config") * 1.05);
        if (num(p, "step_ms") < best) {
            best = num(p, "step_ms");
            best_beta = num(p, "beta");
        }
    }
    EXPECT_EQ(asked, (std::vector<double>{0.1, 0.2, 0.3}));
    EXPECT_EQ(num(j["best"], "step_ms"), best);
    const double planned = num(j["planner"], "beta");
    EXPECT_GT(planned, 0);
    EXPECT_GT(num(j["planner"], "step_ms"), 0);
    EXPECT_NEAR(num(j, "planner_off_best"), std::abs(planned - best_beta) / best_beta, 1e-9);
    // The planner's β is marked in the plot's script.
    EXPECT_NE(test::read_whole_file(dir.file("beta.gp")).find("planner"), std::string::npos);
}

TEST_F(bench_experiments, ablation_runs_the_baseline_then_hkm_then_hkm_and_app) {
    const nlohmann::json j = run("ablation");
    ASSERT_EQ(j["results"].size(), 3u);
    const std::vector<std::string> variants = {"baseline", "+HKM", "+HKM&APP"};
    EXPECT_EQ(j["baseline_policy"], "infinigen");
    const double base = num(j["results"][0], "step_ms");
    for (size_t i = 0; i < 3; ++i) {
        const nlohmann::json & r = j["results"][i];
        EXPECT_EQ(r["variant"], variants[i]);
        EXPECT_EQ(r["storage"], i == 0 ? "plain" : "emulator");
        EXPECT_NEAR(num(r, "reduction_vs_baseline"), 1.0 - num(r, "step_ms") / base, 1e-9);
    }
    // +HKM holds the whole budget hot (no balance), +HKM&APP the planner's β: at most as many hot tokens.
    EXPECT_GE(num(j["results"][1], "beta") * 1.05, num(j["results"][2], "beta"));
}

TEST_F(bench_experiments, bad_values_and_a_missing_gnuplot_are_refused_before_measuring) {
    test::cli_result r = test::run_cli("bench latency --shape gpt-5 --kv-dir " + dir.file("kv"));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("unknown model shape 'gpt-5'"), std::string::npos) << r.out;
    r = test::run_cli("bench batch --batch 0 --kv-dir " + dir.file("kv"));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("batch sizes must be in [1, 256], got 0"), std::string::npos) << r.out;
    r = test::run_cli("bench beta --cold 0 --kv-dir " + dir.file("kv"));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("--cold must be in (0, 1)"), std::string::npos) << r.out;
    // Without gnuplot on PATH, --plot is refused at once with the package to install.
    r = test::run_shell("PATH=/nonexistent " + std::string(HILL_CLI_PATH) + " bench beta --quick --kv-dir " +
                        dir.file("kv") + " --plot " + dir.file("x.png") + " 2>&1");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("gnuplot-nox"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(dir.file("x.png")));
}

}  // namespace
}  // namespace hill
