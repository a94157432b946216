// bench beta and bench ablation: configurations of the decode-step benchmark (experiments/step_bench.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "experiments/experiments.h"
#include "format/json_file.h"
#include "policy/policy.h"

namespace hill {

std::vector<std::string> registered_policies() {
    std::vector<std::string> out;
    const std::string names = policy_names();  // "a, b, c"
    size_t p0 = 0;
    while (p0 < names.size()) {
        size_t p1 = names.find(", ", p0);
        if (p1 == std::string::npos) p1 = names.size();
        out.push_back(names.substr(p0, p1 - p0));
        p0 = p1 + 2;
    }
    return out;
}

namespace {

// The step benchmark's grid for one configuration of the given context lengths.
step_bench_params one_config(const workload_params & w, std::vector<int64_t> ctxs, double cold, int n_steps,
                             int n_warmup, const std::string & kv_dir,
                             const std::function<calibration(const csd::device_profile &)> & calibrate) {
    step_bench_params s;
    s.workload = w;
    s.ctxs = std::move(ctxs);
    s.colds = {cold};
    s.n_steps = n_steps;
    s.n_warmup = n_warmup;
    s.kv_dir = kv_dir;
    s.calibrate = calibrate;
    return s;
}

}  // namespace

experiment_report run_beta(const beta_params & p, thread_pool & pool, const experiment_log & log) {
    if (p.betas.empty()) fail_usage("bench beta: --betas needs at least one value");
    if (!(p.cold > 0.0 && p.cold < 1.0))
        fail_usage("bench beta: --cold must be in (0, 1) (a cold pool to balance), got {}", p.cold);
    step_bench_params s = one_config(p.workload, {p.ctx}, p.cold, p.n_steps, p.n_warmup, p.kv_dir, p.calibrate);
    s.policies = {"hillinfer"};
    s.storages = {"emulator"};
    s.profiles = {p.profile};
    s.betas.clear();
    for (const double b : p.betas) s.betas.push_back(fmt::format("{}", b));
    s.betas.push_back("planner");
    check(s);
    const synthetic_workload w(p.workload);
    const std::vector<step_result> rs = run_step_bench(s, w, pool, [&](const step_result & r) {
        log(fmt::format(
            "beta {:>8} -> applied {:.3f}{}: step {:.2f} ms ({:.2f}-{:.2f}), T_cpu {:.2f} / T_csd {:.2f} ms",
            r.config.beta, r.beta, r.m0_bound ? " (M0-bound)" : "", r.step_ms, r.step_ms_min, r.step_ms_max, r.t_cpu_ms,
            r.t_csd_ms));
    });
    nlohmann::json points = nlohmann::json::array();
    const step_result *best = nullptr, *planned = nullptr;
    plot_series line{"step time at a fixed beta", {}};
    for (const step_result & r : rs) {
        if (r.config.beta == "planner") {
            planned = &r;
            continue;
        }
        points.push_back({{"beta_config", std::stod(r.config.beta)},
                          {"beta", number_or_null(r.beta)},
                          {"m0_bound", r.m0_bound},
                          {"step_ms", r.step_ms},
                          {"step_ms_min", r.step_ms_min},
                          {"step_ms_max", r.step_ms_max},
                          {"t_cpu_ms", number_or_null(r.t_cpu_ms)},
                          {"t_csd_ms", number_or_null(r.t_csd_ms)}});
        line.points.emplace_back(r.beta, r.step_ms);
        if (best == nullptr || r.step_ms < best->step_ms) best = &r;
    }
    HILL_ASSERT(best != nullptr && planned != nullptr);
    std::sort(line.points.begin(), line.points.end());
    const double off = std::abs(planned->beta - best->beta) / best->beta;
    log(fmt::format(
        "best beta {:.3f} ({:.2f} ms); planner's beta {:.3f} (Eq. 4 {:.3f}), {:.2f} ms: {:.1f}% from the best "
        "beta, step {:.2f}x the best's",
        best->beta, best->step_ms, planned->beta, planned->beta_eq4, planned->step_ms, 100 * off,
        planned->step_ms / best->step_ms));
    experiment_report rep;
    const workload_params & wp = p.workload;
    rep.json = {{"experiment", "beta"},
                {"ctx", p.ctx},
                {"cold", p.cold},
                {"profile", p.profile},
                {"policy", "hillinfer"},
                {"layers", wp.n_layer},
                {"n_head", wp.n_head},
                {"n_head_kv", wp.n_head_kv},
                {"head_dim", wp.head_dim},
                {"alpha", wp.alpha},
                {"steps", p.n_steps},
                {"warmup", p.n_warmup},
                {"points", points},
                {"best", {{"beta", best->beta}, {"step_ms", best->step_ms}}},
                {"planner",
                 {{"beta", number_or_null(planned->beta)},
                  {"beta_eq4", number_or_null(planned->beta_eq4)},
                  {"m0_bound", planned->m0_bound},
                  {"step_ms", planned->step_ms},
                  {"replans", planned->replans}}},
                {"planner_off_best", off},
                {"planner_step_over_best", planned->step_ms / best->step_ms}};
    rep.plot.title =
        fmt::format("hillinfer bench beta: decode step vs hot/cold ratio beta (ctx {}, {:.0f}% cold, emulator {})",
                    p.ctx, 100 * p.cold, p.profile);
    rep.plot.xlabel = "beta = hot / cold tokens (log)";
    rep.plot.ylabel = "ms per decode step";
    rep.plot.logx = true;
    rep.plot.series = {line, {"planner's beta", {{planned->beta, planned->step_ms}}}};
    rep.plot.xmarks = {{planned->beta, fmt::format("planner {:.3f}", planned->beta)}};
    return rep;
}

experiment_report run_ablation(const ablation_params & p, thread_pool & pool, const experiment_log & log) {
    if (!(p.cold > 0.0 && p.cold < 1.0)) fail_usage("bench ablation: --cold must be in (0, 1), got {}", p.cold);
    struct variant {
        const char * name;
        step_bench_params s;
    };
    const std::string note = "infinigen over the plain SSD with the pipeline's prefetch";
    std::vector<variant> vs(3);
    for (variant & v : vs) v.s = one_config(p.workload, p.ctxs, p.cold, p.n_steps, p.n_warmup, p.kv_dir, p.calibrate);
    vs[0].name = "baseline";
    vs[0].s.policies = {"infinigen"};
    vs[0].s.storages = {"plain"};
    vs[1].name = "+HKM";
    vs[1].s.policies = {"hillinfer"};
    vs[1].s.storages = {"emulator"};
    vs[1].s.profiles = {p.profile};
    vs[1].s.betas = {"1e9"};  // cut to what the host budget holds: the hot pool takes it all, no balance
    vs[2].name = "+HKM&APP";
    vs[2].s.policies = {"hillinfer"};
    vs[2].s.storages = {"emulator"};
    vs[2].s.profiles = {p.profile};
    vs[2].s.betas = {"planner"};
    for (const variant & v : vs) check(v.s);
    log("baseline: " + note);
    const synthetic_workload w(p.workload);
    nlohmann::json results = nlohmann::json::array();
    std::vector<plot_series> series;
    for (const variant & v : vs) series.push_back({v.name, {}});
    std::vector<std::string> categories;
    for (const int64_t n : p.ctxs) categories.push_back(fmt::format("ctx {}", n));
    for (size_t vi = 0; vi < vs.size(); ++vi) {
        step_bench_params s = vs[vi].s;
        const std::vector<step_result> rs = run_step_bench(s, w, pool, [&](const step_result & r) {
            log(fmt::format("ctx {:>7} {:9} {} {}: step {:.2f} ms ({:.2f}-{:.2f})", r.config.ctx, vs[vi].name,
                            r.config.policy, r.config.storage, r.step_ms, r.step_ms_min, r.step_ms_max));
        });
        for (const step_result & r : rs) {
            results.push_back({{"ctx", r.config.ctx},
                               {"variant", vs[vi].name},
                               {"policy", r.config.policy},
                               {"storage", r.config.storage},
                               {"profile", r.config.profile},
                               {"placement", vs[vi].s.placement.empty() ? "policy's own" : vs[vi].s.placement},
                               {"beta", number_or_null(r.beta)},
                               {"step_ms", r.step_ms},
                               {"step_ms_min", r.step_ms_min},
                               {"step_ms_max", r.step_ms_max}});
            series[vi].points.emplace_back(double(r.config.ctx), r.step_ms);
        }
    }
    // Each variant's reduction of the step time against the baseline at the same context length.
    for (nlohmann::json & j : results) {
        for (const nlohmann::json & b : results) {
            if (b["variant"] == "baseline" && b["ctx"] == j["ctx"]) {
                j["reduction_vs_baseline"] = 1.0 - j["step_ms"].get<double>() / b["step_ms"].get<double>();
            }
        }
    }
    experiment_report rep;
    const workload_params & wp = p.workload;
    rep.json = {{"experiment", "ablation"},
                {"cold", p.cold},
                {"profile", p.profile},
                {"baseline_note", note},
                {"baseline_policy", vs[0].s.policies[0]},
                {"layers", wp.n_layer},
                {"n_head", wp.n_head},
                {"n_head_kv", wp.n_head_kv},
                {"head_dim", wp.head_dim},
                {"alpha", wp.alpha},
                {"steps", p.n_steps},
                {"warmup", p.n_warmup},
                {"results", results}};
    rep.plot.title = fmt::format("hillinfer bench ablation: decode step, {:.0f}% cold (baseline: infinigen)",
                                 100 * p.cold);
    rep.plot.xlabel = "context length";
    rep.plot.ylabel = "ms per decode step";
    rep.plot.categories = categories;
    rep.plot.series = series;
    return rep;
}

}  // namespace hill
