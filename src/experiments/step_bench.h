// `hillinfer bench step`: the decode-step benchmark every change to the tiered decode is judged by.
//
// It runs real decode steps (sched/decode_step.h: scoring, merging, selection, gathers over the tiers,
// attention, placement) of one sequence over a context of the attention shape asked for, over the
// same tiers for every policy, and reports per configuration the median and spread of the step time,
// the time per stage, the bytes per tier and link, and the share of the attended tokens served from
// each tier. Only the projections around attention are synthetic (a synthetic_workload below stands
// in for the model's forward pass: no weight is read), so the step time is the KV cache's work.
//
// The synthetic workload behaves like a trained model where it matters to a sparse policy: the keys
// have outlier channels (a few channels 10-20x the rest, as real keys do), the query heads of a layer
// largely agree on which tokens matter (keys and queries share a component across heads), and
// consecutive queries are correlated, so that (a) the top-α tokens by summed q·k hold most of the
// attention mass and (b) consecutive steps select mostly the same tokens. The query scale and the
// step-to-step correlation are calibrated at start so that, on a sample of the keys, the attention
// mass of the top α and the overlap of consecutive top-α sets match the targets (by default what
// stories260K shows at α 0.2: 0.94 and 0.90); the values reached are reported beside the results.
#pragma once

#include "core/thread_pool.h"
#include "csd/device_profile.h"
#include "engine/context.h"
#include "model/forward.h"
#include "sched/calibration.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace hill {

class model;

// The shape and statistics of the synthetic attention workload.
struct workload_params {
    int n_layer = 2;
    int n_head = 32;
    int n_head_kv = 8;
    int head_dim = 128;
    double alpha = 0.2;           // the retention ratio the targets refer to
    double target_overlap = 0.90; // |S_t ∩ S_t-1| / |S_t| of consecutive exact top-α sets (summed q·k)
    double target_mass = 0.94;    // softmax attention mass of each query head on the top-α set, averaged
    double agreement = 0.9;       // share of the query's and the key's variance common to all heads, in [0, 1)
    uint64_t seed = 1;
};

// What calibration reached on its sample.
struct workload_calibration {
    double rho = 0;          // step-to-step correlation of the queries
    double logit_scale = 0;  // standard deviation of a query head's logit q·k/√d
    double overlap = 0;      // reached top-α overlap of consecutive steps
    double mass = 0;         // reached attention mass of the top-α set
    int sample_tokens = 0;
};

// Errors (hill::error, usage): an attention shape that is not one (heads not a multiple of KV heads, an
// odd head dimension), α outside (0, 1], agreement outside [0, 1).
void check(const workload_params & p);

// Keys, values and queries of the synthetic workload. Keys k[t, g, :] = c_g ⊙ (√a·z_t + √(1−a)·z_{t,g})
// with z standard normal, c_g the KV head's channel scales (2 outlier channels per head, ×10 and ×20)
// and a = agreement; values standard normal. Queries per layer: q_h = λ · (√a·s + √(1−a)·e_h) / c_{g(h)},
// where s and e_h follow AR(1) processes with correlation rho from step to step and λ = logit_scale.
// Dividing the query by c keeps the outlier channels from dominating q·k (as in trained models, whose
// query weights compensate), while the stored keys keep them.
class synthetic_workload {
public:
    static constexpr double spec_rho = 0.95;  // correlation of the speculated query's processes with the actual ones

    // Calibrates rho and logit_scale (see the file comment) on a sample of 4096 keys. Errors: check(p).
    explicit synthetic_workload(const workload_params & p);

    const workload_params & params() const { return p_; }
    const workload_calibration & calibration() const { return cal_; }
    const std::vector<float> & channel_scales() const { return chan_; }  // f32 [n_head_kv, head_dim]: c

    // Keys and values of tokens [p0, p0 + n) of layer il as f16 bits [n, n_head_kv * head_dim]; the
    // same for the same arguments (a token's KV depends only on (seed, il, position)).
    void kv(int il, int64_t p0, int64_t n, uint16_t * k, uint16_t * v) const;

    // A forward pass over this workload for context_params::forward: embed() advances every layer's
    // query by one step; attention_input() gives the layer's current query and the new token's K/V
    // (kv() at its position); speculative_query() (InfiniGen's speculation, which has no weights to
    // work from here) the layer's current query processes s and e each advanced once more with fresh
    // noise at correlation spec_rho (x ← ρ·x + √(1−ρ²)·ξ, a separate random stream): a speculated query
    // correlated about 0.95 with the actual one, an assumption standing in for the similarity of
    // consecutive layers' inputs that InfiniGen relies on (§4.2), not a measurement;
    // attention_output() and logits() leave x as is and write zero logits. The
    // query processes restart from the same state for every forward made, so every configuration of a
    // run sees the same queries. n_vocab: the model's vocabulary (logits width).
    std::unique_ptr<arch_forward> make_forward(int32_t n_vocab) const;

private:
    void key_row(int il, int64_t t, float * out) const;  // f32 [n_head_kv * head_dim]
    workload_params p_;
    workload_calibration cal_;
    std::vector<float> chan_;  // f32 [n_head_kv, head_dim]: channel scales c
};

// One configuration of the grid.
struct step_config {
    int64_t ctx = 0;
    double cold = 0;          // share of the tokens without a hot copy (0: all in RAM)
    std::string policy;
    std::string storage;      // plain or emulator ("ram" when cold == 0)
    std::string profile;      // device profile of the emulator (none, smartssd, ...)
    std::string score_copy;   // plain: a scoring policy's scoring copy, int4, int3, int2 or off; "-": none applies
    std::string beta;         // emulator: the hot/cold capacity ratio, a number or "planner" (the planner's); "-": none applies
    double device_cache = -1; // plain SSD: the device cache's share of the hot slots (context_params); -1: none applies
    std::string placement;    // the placement that ran (fifo, hkm): step_bench_params::placement or the policy's own
    bool placement_set = false;  // step_bench_params::placement chose it
};

struct step_result {
    step_config config;
    double step_ms = 0, step_ms_min = 0, step_ms_max = 0;  // median and spread over the measured steps
    // Time per stage, ms per step (sched/decode_step.h step_stats).
    double forward_ms = 0, score_host_ms = 0, score_device_ms = 0, select_ms = 0, attend_ms = 0, write_ms = 0;
    // Bytes per step: KV attended from the hot pool, from the open tails in RAM, read from the SSD;
    // the storage device's flash reads and link bytes; the host's own reads.
    double hot_bytes = 0, open_bytes = 0, disk_kv_bytes = 0, flash_read_bytes = 0, link_bytes = 0, host_read_bytes = 0;
    double cached_bytes = 0;  // KV attended from the device tier's cache (kv/device_cache.h)
    // Shares of the attended tokens by tier (the device cache's cold tokens apart); attended tokens per
    // layer and step; promotions and device cache fills per step, and of the fills, those into the row
    // of a cached token the step scored lower (step_stats::cache_swaps).
    double hot_share = 0, cache_share = 0, open_share = 0, disk_share = 0, attended_per_layer = 0, promotions = 0;
    double cache_fills = 0, cache_swaps = 0;
    // Of the tokens read from the SSD, the share the previous step attended too (step_layer_stats::n_disk_reread).
    double reread_share = 0;
    // The pipeline's prefetch (csd/device.h): of the tokens read from the SSD, the share found read
    // ahead; of the tokens read ahead, the share no read pass asked for (bytes read in vain).
    double prefetch_hit_share = 0, prefetch_waste_share = 0;
    // Of the measured steps that could send hints (step_stats::hint_steps), the share that sent none: the hint
    // gate's cost probe found the steps without them faster, or was probing (sched/hint_gate.h; the warm-up
    // runs the first probe). NaN where no step could: all in RAM, a policy without scores, the emulator,
    // step_bench_params::no_prefetch.
    double hints_off_share = NAN;
    uint64_t host_budget = 0;  // --kv-host-budget the configuration ran with (0: all in RAM)
    uint64_t copy_bytes = 0;   // of the budget, the scoring copy's (context::scoring_copy_bytes)
    int64_t hot_slots = 0;     // hot-pool slots per layer (kv_cells::hot_capacity)
    int64_t cache_rows = 0;    // the device cache's rows, all layers
    // The planner (emulator only; sched/planner.h), at the end of the run: β applied (hot / cold tokens), the
    // planned (or fixed) β, Eq. 4's β at α, whether the host budget bound it, the measured selected shares of
    // the hot and cold tokens, and T_cpu / T_csd per step, predicted and measured (mean over the steps since
    // the planner's last change, warm-up included); re-plans. NaN / 0 when no planner ran.
    double beta = NAN, beta_planned = NAN, beta_eq4 = NAN, alpha_hot = NAN, alpha_cold = NAN;
    bool m0_bound = false;
    double t_cpu_pred_ms = NAN, t_csd_pred_ms = NAN, t_cpu_ms = NAN, t_csd_ms = NAN;
    int replans = 0;
};

struct step_bench_params {
    workload_params workload;
    std::vector<int64_t> ctxs = {32768, 131072};
    std::vector<double> colds = {0.0, 0.75};
    std::vector<std::string> policies = {"full", "hillinfer"};
    std::vector<std::string> storages = {"plain", "emulator"};
    std::vector<std::string> profiles = {"none", "smartssd"};
    std::vector<std::string> score_copies = {"int3"};  // context_params::score_copy_bits by name (parse_score_copy)
    bool no_prefetch = false;                          // csd::storage_params::prefetch off
    std::vector<double> device_caches = {context_params{}.device_cache_share};  // plain SSD: the device cache's shares
    std::string placement;                             // fifo or hkm for every policy; empty: each policy's own
    // Emulator: hot/cold capacity ratios β to run (numbers > 0; planner_params::beta), or "planner": the planner's.
    std::vector<std::string> betas = {"planner"};
    // The planner's rates under a device profile (the calibration cache); empty: default_calibration.
    std::function<calibration(const csd::device_profile &)> calibrate;
    int n_steps = 5;
    // Steps run before the measured ones, so that placement settles: hkm promotes at most 1/16 of the
    // hot capacity per step, and the hot pool's share of the selected tokens reaches its steady value
    // after about 16 to 24 steps (docs/benchmarks.md "Decode step").
    int n_warmup = 24;
    std::string kv_dir;       // cold pool directory
};

// The checks of run_step_bench, alone: to refuse a bad grid before the workload is calibrated.
void check(const step_bench_params & p);

// A --beta value: 0 for "planner", else the number (> 0, finite). Errors (usage): anything else, naming it.
double parse_beta(const std::string & s);

// Runs the grid: per context length, per cold share, per policy, per storage (cold > 0 only), per
// profile and β (emulator only), per scoring copy (a scoring policy off the emulator only). on_result is
// called after each configuration (progress, printing).
// Errors: hill::error for bad parameters (usage: empty lists, a context below 1024 tokens, a cold share
// outside [0, 1), an unknown policy, storage or profile, a β that is neither "planner" nor a number > 0) and
// for cold-pool or device faults.
std::vector<step_result> run_step_bench(const step_bench_params & p, const synthetic_workload & w,
                                        thread_pool & pool, const std::function<void(const step_result &)> & on_result);

}  // namespace hill
