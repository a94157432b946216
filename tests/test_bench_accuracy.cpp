// `hillinfer bench accuracy --quick` on the shared data (stories260K, a Gutenberg book, RTE, PIQA) and
// the passkey model: every policy at α 0.1 and 0.2 and full, with values that hold whatever the policy.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "experiments/experiments.h"
#include "test_util.h"

namespace hill {
namespace {

double num(const nlohmann::json & j, const std::string & key) {
    EXPECT_TRUE(j.contains(key) && j[key].is_number()) << "'" << key << "' is not a number in " << j.dump();
    return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

// k / n for some integer k: the share of n items.
bool share_of(double x, int n) {
    return x >= 0 && x <= 1 && std::abs(x * n - std::round(x * n)) < 1e-9;
}

TEST(bench_accuracy, every_policy_at_each_alpha_against_full) {
    HILL_REQUIRE_DATA(model, "models/gguf/stories260K.gguf");
    HILL_REQUIRE_DATA(rte, "eval/rte/val.jsonl");
    test::temp_dir dir;
    const std::string json = dir.file("acc.json"), png = dir.file("acc.png");
    const test::cli_result r = test::run_cli("bench accuracy --quick -t 2 --data " + test::data_dir() + " --kv-dir " +
                                             dir.file("kv") + " --json " + json + " --plot " + png);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(std::filesystem::exists(png) && std::filesystem::file_size(png) > 0);
    const nlohmann::json j = nlohmann::json::parse(test::read_whole_file(json), nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    const size_t n_pol = registered_policies().size();
    ASSERT_EQ(j["results"].size(), 1 + 2 * (n_pol - 1));  // full once, every other policy at 0.1 and 0.2
    const nlohmann::json & full = j["results"][0];
    EXPECT_EQ(full["policy"], "full");
    EXPECT_TRUE(full["alpha"].is_null());
    EXPECT_EQ(num(full, "perplexity_ratio_to_full"), 1.0);
    EXPECT_EQ(num(full, "rte_agreement"), 1.0);
    EXPECT_EQ(num(full, "piqa_agreement"), 1.0);
    // The passkey model retrieves the key at any depth with full attention.
    EXPECT_EQ(num(full, "passkey_accuracy"), 1.0);
    for (const nlohmann::json & x : j["results"]) {
        EXPECT_GT(num(x, "perplexity"), 1.0);
        EXPECT_NEAR(num(x, "perplexity_ratio_to_full"), num(x, "perplexity") / num(full, "perplexity"), 1e-9);
        EXPECT_TRUE(share_of(num(x, "passkey_accuracy"), 3)) << x.dump();  // 1 length × 3 depths
        for (const char * k : {"rte_accuracy", "piqa_accuracy", "rte_agreement", "piqa_agreement"}) {
            EXPECT_TRUE(share_of(num(x, k), 4)) << k << " " << x.dump();  // 4 items each
        }
        if (x["policy"] != "full") {
            EXPECT_TRUE(x["alpha"] == 0.1 || x["alpha"] == 0.2) << x.dump();
        }
    }
    EXPECT_EQ(j["passkey"].size(), 3 * j["results"].size());
}

}  // namespace
}  // namespace hill
