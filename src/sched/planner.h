// The planner (APP; DESIGN.md §4; HillInfer paper §4.3 "Adaptive Prefetch-based Pipeline"): how much
// of the KV the hot pool holds when the storage device scores the cold keys, so that the host's path
// and the device's path of a decode step take the same time.
//
// Per decode step and layer, with M_c bytes of KV in the hot pool and M_s in the cold pool (Eq. 2):
//     T_cpu = M_c/f_c + α·M_c/B_c        T_csd = M_s/f_s + α·M_s/B_s
// (host scoring of the hot keys + gathering the selected hot KV; device scoring of the cold keys +
// returning the selected cold KV). Balancing them gives the hot/cold capacity ratio (Eq. 4)
//     β = M_c/M_s = B_c·f_c·(B_s + α·f_s) / (B_s·f_s·(B_c + α·f_c)),   s.t. M_c ≤ M0 (Eq. 3).
// Units: M in bytes of K and V, B in bytes of K and V per second; the calibration's f are bytes of
// keys per second (the scorers read only the keys), so the planner uses f·kv/key (twice f for f16 K
// and V) in Eq. 2–4.
//
// Empirical skewness correction (paper §4.3): HKM pins the tokens attention keeps selecting in the
// hot pool, so the hot pool's selected share α_c exceeds α and the cold pool's α_s is below it. The
// planner measures both at every step (selected hot tokens / hot tokens, selected SSD tokens / cold
// tokens) and uses them in place of α: β = B_c·f_c·(B_s + α_s·f_s) / (B_s·f_s·(B_c + α_c·f_c)), which
// is Eq. 4 when α_c = α_s = α.
//
// Re-planning: after each step the measured T_cpu (the host's scoring time, plus the attended hot KV
// over the calibrated B_c: the CPU build attends to hot rows in place, so the gather is not timed
// apart) and T_csd (the device's pass time: its scoring and KV-return passes, back-pressure excluded;
// csd::device_counters::t_pass_us) are averaged over the steps since the last change. When they differ
// by more than `drift` of the larger for `drift_steps` steps in a row, at least `settle_steps` after
// the last change (placement needs steps to fill a larger hot pool), β is re-planned from the per-token
// costs measured over those steps: β = (T_csd/M_s)/(T_cpu/M_c) — Eq. 4 with the measured α_c, α_s and
// the calibrated rates scaled by measured/predicted time of each path. A β the budget cannot hold while the device
// path is the slower one changes nothing (β stays M0-bound).
//
// The capacity is applied by the owner (engine/context.h) at step boundaries: kv_cells::set_hot_capacity,
// and evictions of the lowest hit counts down to it — metadata only, every token has its cold copy.
#pragma once

#include <cstdint>

#include "sched/calibration.h"

namespace hill {

struct planner_params {
    double beta = 0.0;    // > 0: this fixed β (bench step --beta), no planning; 0: planned
    double drift = 0.25;  // re-plan when |T_cpu − T_csd| > drift · max(T_cpu, T_csd) ...
    int drift_steps = 4;  // ... for this many steps in a row ...
    int settle_steps =
        16;           // ... at least this many steps after the last change (hkm promotes ≤ 1/16 of the pool a step)
    calibration cal;  // f_c, f_s, B_c, B_s (sched/calibration.h)
};

// Eq. 4 with the skewness correction: the hot/cold ratio that balances T_cpu and T_csd when α_c of the
// hot tokens and α_s of the cold tokens are selected. kv_per_key: bytes of K and V per byte of keys
// (2 for f16 K and V). Unbounded (no M0).
double balanced_beta(const calibration & c, double alpha_c, double alpha_s, double kv_per_key);

// Eq. 2: T_cpu and T_csd, seconds, of one layer-step with n_hot hot and n_cold cold tokens of
// kv_bytes bytes of K and V each (key_bytes of keys).
struct path_times {
    double t_cpu_s = 0.0, t_csd_s = 0.0;
};
path_times predict_times(const calibration & c, double alpha_c, double alpha_s, double n_hot, double n_cold,
                         double key_bytes, double kv_bytes);

// What one decode step showed, summed over its layers.
struct step_observation {
    double n_hot = 0, n_cold = 0;                // token-layers with a hot copy / scored by the storage device
    double attended_hot = 0, attended_cold = 0;  // of those, selected (attended) in the step
    double t_cpu_s = 0, t_csd_s = 0;             // measured T_cpu and T_csd (file comment)
};

class planner {
public:
    // alpha: the policy's retention ratio; key_bytes / kv_bytes: bytes of one token-layer's key / K and V;
    // n_layer: layers per step. Asserted: alpha in (0, 1], positive sizes and rates.
    planner(const planner_params & p, double alpha, int64_t key_bytes, int64_t kv_bytes, int n_layer);

    // The hot capacity in tokens per layer for n_tokens per layer (all sequences): n_tokens·β/(1 + β),
    // at least hot_min (sinks, windows, appends) and at most hot_max (what the host budget M0 holds).
    // Records the split for predicted() and whether β is M0-bound.
    int64_t capacity(int64_t n_tokens, int64_t hot_min, int64_t hot_max);
    // Takes one step's observation; returns true when it re-planned (β changed; the next capacity() applies it).
    bool observe(const step_observation & o);

    const planner_params & params() const { return p_; }
    double alpha() const { return alpha_; }
    bool fixed() const { return p_.beta > 0.0; }
    double beta() const { return beta_; }           // the planned (or fixed) β
    double beta_eq4() const { return beta_eq4_; }   // Eq. 4 at α, from the calibration alone
    double beta_skewed() const;                     // Eq. 4 at the measured α_c, α_s
    double beta_applied() const;                    // hot / cold tokens of the last capacity()
    bool m0_bound() const { return m0_bound_; }     // the last capacity() was cut to hot_max
    double alpha_hot() const { return alpha_c_; }   // measured α_c (α until measured)
    double alpha_cold() const { return alpha_s_; }  // measured α_s
    path_times predicted() const;                   // Eq. 2 per step (all layers) at the last split, measured α's
    path_times measured() const;                    // mean per step since the last change; 0 before a step
    int64_t n_observed() const { return n_obs_; }   // steps averaged in measured()
    int n_replans() const { return n_replans_; }

private:
    planner_params p_;
    double alpha_, key_bytes_, kv_bytes_;
    int n_layer_;
    double beta_, beta_eq4_;
    double alpha_c_, alpha_s_;
    bool m0_bound_ = false;
    double n_hot_ = 0, n_cold_ = 0;  // per layer, the last capacity()
    // Sums since the last change.
    step_observation sum_;
    int64_t n_obs_ = 0;
    int over_ = 0;            // steps in a row over the drift threshold
    step_observation drift_;  // their sums
    int64_t since_change_ = 0;
    int n_replans_ = 0;
};

}  // namespace hill
