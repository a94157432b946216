#include "sched/planner.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hill {

double balanced_beta(const calibration & c, double alpha_c, double alpha_s, double kv_per_key) {
    // Eq. 4 in bytes of K and V: the scorers' rates are of keys, kv_per_key times more of K and V.
    const double f_c = c.f_c_bps * kv_per_key, f_s = c.f_s_bps * kv_per_key;
    return c.b_c_bps * f_c * (c.b_s_bps + alpha_s * f_s) / (c.b_s_bps * f_s * (c.b_c_bps + alpha_c * f_c));
}

path_times predict_times(const calibration & c, double alpha_c, double alpha_s, double n_hot, double n_cold,
                         double key_bytes, double kv_bytes) {
    return {n_hot * key_bytes / c.f_c_bps + alpha_c * n_hot * kv_bytes / c.b_c_bps,
            n_cold * key_bytes / c.f_s_bps + alpha_s * n_cold * kv_bytes / c.b_s_bps};
}

planner::planner(const planner_params & p, double alpha, int64_t key_bytes, int64_t kv_bytes, int n_layer)
    : p_(p),
      alpha_(alpha),
      key_bytes_(double(key_bytes)),
      kv_bytes_(double(kv_bytes)),
      n_layer_(n_layer),
      alpha_c_(alpha),
      alpha_s_(alpha) {
    HILL_ASSERT(alpha > 0.0 && alpha <= 1.0 && key_bytes > 0 && kv_bytes >= key_bytes && n_layer > 0);
    HILL_ASSERT(p.cal.f_c_bps > 0 && p.cal.f_s_bps > 0 && p.cal.b_c_bps > 0 && p.cal.b_s_bps > 0 && p.beta >= 0.0);
    beta_eq4_ = balanced_beta(p.cal, alpha, alpha, kv_bytes_ / key_bytes_);
    beta_ = fixed() ? p.beta : beta_eq4_;
}

int64_t planner::capacity(int64_t n_tokens, int64_t hot_min, int64_t hot_max) {
    HILL_ASSERT(n_tokens >= 0 && hot_min >= 0 && hot_min <= hot_max);
    const auto want = int64_t(std::llround(double(n_tokens) * beta_ / (1.0 + beta_)));
    // Every token hot as planned: no cap below what the budget holds (room for the tokens to come).
    const int64_t cap = want >= n_tokens ? hot_max : std::clamp(want, hot_min, hot_max);
    m0_bound_ = want > hot_max;
    n_hot_ = double(std::min(cap, n_tokens));
    n_cold_ = double(n_tokens) - n_hot_;
    return cap;
}

double planner::beta_skewed() const {
    return balanced_beta(p_.cal, alpha_c_, alpha_s_, kv_bytes_ / key_bytes_);
}

double planner::beta_applied() const {
    return n_cold_ > 0 ? n_hot_ / n_cold_ : INFINITY;
}

path_times planner::predicted() const {
    const path_times t = predict_times(p_.cal, alpha_c_, alpha_s_, n_hot_, n_cold_, key_bytes_, kv_bytes_);
    return {t.t_cpu_s * n_layer_, t.t_csd_s * n_layer_};
}

path_times planner::measured() const {
    if (n_obs_ == 0) return {};
    return {sum_.t_cpu_s / double(n_obs_), sum_.t_csd_s / double(n_obs_)};
}

bool planner::observe(const step_observation & o) {
    const auto add = [](step_observation & a, const step_observation & b) {
        a.n_hot += b.n_hot;
        a.n_cold += b.n_cold;
        a.attended_hot += b.attended_hot;
        a.attended_cold += b.attended_cold;
        a.t_cpu_s += b.t_cpu_s;
        a.t_csd_s += b.t_csd_s;
    };
    add(sum_, o);
    ++n_obs_;
    ++since_change_;
    if (sum_.n_hot > 0) alpha_c_ = sum_.attended_hot / sum_.n_hot;
    if (sum_.n_cold > 0) alpha_s_ = sum_.attended_cold / sum_.n_cold;
    if (fixed()) return false;
    const double hi = std::max(o.t_cpu_s, o.t_csd_s);
    if (hi > 0 && std::abs(o.t_cpu_s - o.t_csd_s) > p_.drift * hi) {
        ++over_;
        add(drift_, o);
    } else {
        over_ = 0;
        drift_ = step_observation{};
    }
    if (over_ < p_.drift_steps || since_change_ < p_.settle_steps) return false;
    // The measured per-token cost of each path over the drifting steps.
    const step_observation w = drift_;
    over_ = 0;
    drift_ = step_observation{};
    if (w.n_hot <= 0 || w.n_cold <= 0 || w.t_cpu_s <= 0 || w.t_csd_s <= 0) return false;
    const double next = (w.t_csd_s / w.n_cold) / (w.t_cpu_s / w.n_hot);
    if (m0_bound_ && next >= beta_applied()) return false;  // the device path is the slower, and the budget is full
    beta_ = next;
    sum_ = step_observation{};
    n_obs_ = 0;
    since_change_ = 0;
    ++n_replans_;
    return true;
}

}  // namespace hill
