// The run report (DESIGN.md §6): what generate, perplexity, demo and the benchmarks print at the end
// of a run about the policy, the KV tiers and the storage device — summary lines for stderr and the
// same numbers as JSON for scripts. One module, so every command reports the same way.
#pragma once

#include "engine/context.h"

#include <nlohmann/json.hpp>

#include <string>

namespace hill {

// Sums over the layers of a context's decode steps.
struct attended_totals {
    uint64_t steps = 0, context = 0, attended = 0, hot = 0, cached = 0, open = 0, disk = 0, disk_reread = 0, n_overlap = 0;
    double recall = 0.0, overlap = 0.0;
    // Share of the attended tokens read from the cold tier (its open tails in RAM or SSD): the
    // attended tokens without a hot copy that the device tier's cache did not hold.
    double cold_share() const { return attended > 0 ? double(open + disk) / double(attended) : 0.0; }
};
attended_totals totals(const step_stats & s);

// "policy: ..." (the policy and its parameters; the share of the cached tokens attended and where they
// came from; time per stage; with diag: attention recall and selection overlap per layer).
std::string policy_summary(const context & ctx);
nlohmann::json policy_json(const context & ctx);

// "KV cache: ..." and "migration: ..." (the hot pool, the cold pool, bytes read and written by the
// host; promotions, demotions, bytes migrated and the ping-pong rate); "" when everything is in RAM.
std::string kv_summary(const context & ctx);
nlohmann::json kv_json(const context & ctx);

// "storage: ..." (what crossed the storage device's link per cold token scored, against the key row a
// plain SSD moves; selected KV returned; device time); "" when the device had no pass.
std::string storage_summary(const context & ctx);
nlohmann::json storage_json(const context & ctx);

// "planner: ..." (DESIGN.md §4): the hot/cold capacity ratio β chosen, whether the host budget M0 bound
// it, Eq. 4's β at α and at the measured skew, predicted and measured T_cpu and T_csd per step, and where
// the calibration came from; on a plain SSD that β is M0-bound (the hot pool is a cache of the whole
// budget). "" without a cold pool.
std::string planner_summary(const context & ctx);
nlohmann::json planner_json(const context & ctx);

// The four above together: lines, and {"policy": ..., "kv": ..., "storage": ..., "planner": ...}.
std::string run_summary(const context & ctx);
nlohmann::json run_json(const context & ctx);

}  // namespace hill
