// hillinfer bench: experiments that measure the engine (src/experiments). `bench step` is the
// decode-step benchmark of experiments/step_bench.h.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <thread>

#include "commands.h"
#include "common.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sys_info.h"
#include "experiments/experiments.h"
#include "experiments/plot.h"
#include "experiments/step_bench.h"
#include "format/json_file.h"
#include "kv/cold_pool.h"

namespace hill::cli {

namespace {

// Where the plot's data and script go: beside the JSON (its name without the extension) when there is
// one, else beside the PNG.
std::string plot_stem(const std::string & json_path, const std::string & png_path) {
    std::filesystem::path p = json_path.empty() ? png_path : json_path;
    return p.replace_extension().string();
}

// The CPU's model name (/proc/cpuinfo), for the machine line of a report; "unknown" elsewhere.
std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
    }
    return "unknown";
}

// A bench subcommand and what runs it once parsed.
struct bench_cmd {
    CLI::App * app;
    std::function<int()> run;
};

// Before minutes of measuring: gnuplot for --plot, and that the --json and --plot files can be written
// (check_output_file: nothing is left behind, an existing file is kept). Errors: usage, as
// check_output_file's and require_gnuplot's.
void check_outputs(const std::string & json_path, const std::string & plot_path,
                   const std::vector<std::string> & inputs) {
    if (!plot_path.empty()) require_gnuplot();
    if (!json_path.empty()) check_output_file("--json", json_path, inputs);
    std::vector<std::string> before = inputs;  // two outputs may not be one file either
    before.push_back(json_path);
    if (!plot_path.empty()) check_output_file("--plot", plot_path, before);
}

// Runs each writer of a command's outputs in turn, even when one fails (a full disk), so that one
// failure does not cost the outputs that would still have been written: the first failure is thrown
// after the last writer; a later one is printed as it happens.
void write_outputs(std::initializer_list<std::function<void()>> writers) {
    std::optional<error> failed;
    for (const std::function<void()> & write : writers) {
        try {
            write();
        } catch (const error & e) {
            if (failed) {
                fmt::print(stderr, "hillinfer: error: {}\n", e.what());
            } else {
                failed = e;
            }
        }
    }
    if (failed) throw *failed;
}

// The options every experiment takes.
struct experiment_opts {
    std::string json_path, plot_path, kv_dir;
    bool quick = false;
    thread_opts threads;
    void add(CLI::App & sub) {
        sub.add_option("--json", json_path, "write the results as JSON to this file");
        sub.add_option("--plot", plot_path, "draw the results as a PNG with gnuplot (its .dat and .gp beside the JSON, "
                       "or beside the PNG without --json)");
        sub.add_flag("--quick", quick, "a small grid (about a minute on 2 cores) in place of the grid options");
        sub.add_option("--kv-dir", kv_dir, "cold pool and scratch directory (default: the cache directory's kv/)");
        threads.add(sub);
    }
    // Checks what can be checked before measuring (check_outputs, against the files the experiment
    // reads: `inputs`); resolves the kv-dir.
    void prepare(const std::vector<std::string> & inputs) {
        check_outputs(json_path, plot_path, inputs);
        if (kv_dir.empty()) kv_dir = cache_dir() + "/kv";
        (void)prepare_kv_dir(kv_dir);  // before any calibration or prefill
    }
    std::function<calibration(const csd::device_profile &)> calibrate() const {
        const std::string cache = calibration_path(), dir = kv_dir;
        return [cache, dir](const csd::device_profile & prof) {
            return calibration_for(cache, dir, csd::storage_kind::emulator, prof);
        };
    }
    // Adds the machine to the report and writes --json and --plot.
    int finish(experiment_report & rep) const {
        rep.json["machine"] = {{"cpu", cpu_model()}, {"logical_cpus", std::thread::hardware_concurrency()},
                               {"threads", threads.resolve()}, {"quick", quick}};
        const auto write_json = [&] {
            if (json_path.empty()) return;
            const std::string text = rep.json.dump(2) + "\n";
            atomic_file f(json_path);
            f.write(text.data(), text.size());
            f.commit();
            fmt::print("wrote {}\n", json_path);
        };
        const auto write_png = [&] {
            if (plot_path.empty()) return;
            write_plot(rep.plot, plot_stem(json_path, plot_path), plot_path);
            fmt::print("wrote {}\n", plot_path);
        };
        write_outputs({write_json, write_png});
        return 0;
    }
};

void print_line(const std::string & s) {
    fmt::print("{}\n", s);
    std::fflush(stdout);
}

// The synthetic workload of the quick step experiments: a small attention shape.
void quick_workload(workload_params & w) {
    w.n_layer = 1;
    w.n_head = 8;
    w.n_head_kv = 2;
    w.head_dim = 64;
}

// The shared data folder: $HILLINFER_DATA, else ../shared/data when it is a folder, else empty.
std::string data_dir_default() {
    if (const char * env = std::getenv("HILLINFER_DATA"); env != nullptr) return env;
    std::error_code ec;
    return std::filesystem::is_directory("../shared/data", ec) ? std::string("../shared/data") : std::string();
}

void add_workload_options(CLI::App & sub, workload_params & w) {
    sub.add_option("--layers", w.n_layer, "layers")->capture_default_str();
    sub.add_option("--heads", w.n_head, "query heads")->capture_default_str();
    sub.add_option("--kv-heads", w.n_head_kv, "KV heads")->capture_default_str();
    sub.add_option("--head-dim", w.head_dim, "head dimension")->capture_default_str();
    sub.add_option("--alpha", w.alpha, "retention ratio")->capture_default_str();
}

bench_cmd add_beta(CLI::App & bench) {
    auto o = std::make_shared<std::pair<experiment_opts, beta_params>>();
    beta_params & p = o->second;
    p.workload.n_head_kv = 32;  // LLaMA-2-7B's attention: 32 heads of 128, no GQA
    CLI::App * sub = bench.add_subcommand("beta",
                                          "decode-step time over a sweep of the hot/cold capacity ratio beta, the "
                                          "planner's beta marked (hillinfer on the storage device emulator)");
    add_workload_options(*sub, p.workload);
    sub->add_option("--ctx", p.ctx, "context length in tokens")->capture_default_str();
    sub->add_option("--cold", p.cold, "share of the KV without a hot copy, in (0, 1)")->capture_default_str();
    sub->add_option("--profile,--csd-profile", p.profile, "emulator device profile: none, smartssd, FILE.json")->capture_default_str();
    add_list_option(*sub, "--betas", p.betas, "hot/cold ratios to measure (comma-separated)");
    sub->add_option("--steps", p.n_steps, "measured decode steps per beta")->capture_default_str();
    sub->add_option("--warmup", p.n_warmup, "decode steps before the measured ones")->capture_default_str();
    o->first.add(*sub);
    return {sub, [o]() -> int {
        experiment_opts & e = o->first;
        beta_params & q = o->second;
        e.prepare({q.profile});
        if (e.quick) {
            quick_workload(q.workload);
            q.ctx = 8192;
            q.betas = {0.1, 0.2, 0.3};
            q.n_steps = 5;
            q.n_warmup = 16;
        }
        q.kv_dir = e.kv_dir;
        q.calibrate = e.calibrate();
        thread_pool pool(e.threads.resolve());
        experiment_report rep = run_beta(q, pool, print_line);
        return e.finish(rep);
    }};
}

bench_cmd add_ablation(CLI::App & bench) {
    auto o = std::make_shared<std::pair<experiment_opts, ablation_params>>();
    ablation_params & p = o->second;
    p.workload.n_head_kv = 32;
    CLI::App * sub = bench.add_subcommand("ablation",
                                          "decode-step time of the prefetch-based baseline, + HKM, and + HKM "
                                          "and APP (the paper's ablation)");
    add_workload_options(*sub, p.workload);
    add_list_option(*sub, "--ctx", p.ctxs, "context lengths in tokens (comma-separated)");
    sub->add_option("--cold", p.cold, "share of the KV without a hot copy, in (0, 1)")->capture_default_str();
    sub->add_option("--profile,--csd-profile", p.profile, "emulator device profile: none, smartssd, FILE.json")->capture_default_str();
    sub->add_option("--steps", p.n_steps, "measured decode steps per configuration")->capture_default_str();
    sub->add_option("--warmup", p.n_warmup, "decode steps before the measured ones")->capture_default_str();
    o->first.add(*sub);
    return {sub, [o]() -> int {
        experiment_opts & e = o->first;
        ablation_params & q = o->second;
        e.prepare({q.profile});
        if (e.quick) {
            quick_workload(q.workload);
            q.ctxs = {8192};
            q.n_steps = 5;
            q.n_warmup = 16;
        }
        q.kv_dir = e.kv_dir;
        q.calibrate = e.calibrate();
        thread_pool pool(e.threads.resolve());
        experiment_report rep = run_ablation(q, pool, print_line);
        return e.finish(rep);
    }};
}

// latency and batch: the same runner, different grids.
bench_cmd add_e2e(CLI::App & bench, const std::string & name) {
    auto o = std::make_shared<std::pair<experiment_opts, e2e_params>>();
    e2e_params & p = o->second;
    const bool batch = name == "batch";
    if (batch) {
        p.ctxs = {1920};
        p.batches = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 21, 22, 23, 24, 25};
        p.n_gen = 128;
        p.colds = {0.75};
    }
    std::string shapes;
    for (const model_shape & s : model_shapes()) shapes += (shapes.empty() ? "" : ", ") + std::string(s.name);
    CLI::App * sub = bench.add_subcommand(
        name,
        batch ? "latency and throughput of every policy over batch sizes at 1,920 prompt + 128 generated tokens"
              : "end-to-end latency (prefill + decode steps) and decode speedup of every policy against the context "
                "length, batch 8");
    sub->add_option("--shape", p.shape, "the paper model whose shape the random model takes: " + shapes)->capture_default_str();
    sub->add_option("--layers", p.n_layer, "layers of the random model (the shape's count reduced to fit)")->capture_default_str();
    sub->add_option("--weights", p.weights, "weight type of the random model's matrices")->capture_default_str();
    add_list_option(*sub, "--ctx", p.ctxs, "prompt lengths in tokens (comma-separated)");
    add_list_option(*sub, "--batch", p.batches, "batch sizes (comma-separated)");
    sub->add_option("--gen", p.n_gen, "decode steps after the prompt")->capture_default_str();
    add_list_option(*sub, "--policies", p.policies, "policies (comma-separated; default: every registered one)");
    sub->add_option("--alpha", p.alpha, "retention ratio")->capture_default_str();
    add_list_option(*sub, "--cold", p.colds, "shares of the KV without a hot copy, in [0, 1) (comma-separated)");
    add_list_option(*sub, "--storage", p.storages, "storage devices of the cold pool: plain, emulator (comma-separated)");
    sub->add_option("--profile,--csd-profile", p.profile, "emulator device profile: none, smartssd, FILE.json")->capture_default_str();
    sub->add_option("--text-dir", p.text_dir,
                    "books (*.txt) to take the prompts from (default: DATA/text/gutenberg, DATA = $HILLINFER_DATA or "
                    "../shared/data, when it exists, else generated text)");
    sub->add_flag("--same-prompt", p.same_prompt,
                  "every sequence of a batch gets the same prompt: one dense prefill per length, charged to every "
                  "sequence (for lengths where prefilling each prompt would take hours)");
    o->first.add(*sub);
    return {sub, [o, name, batch]() -> int {
        experiment_opts & e = o->first;
        e2e_params & q = o->second;
        e.prepare({q.profile});
        if (e.quick) {
            q.shape = "tiny";
            q.n_layer = 1;
            q.n_gen = 8;
            q.ctxs = batch ? std::vector<int64_t>{512} : std::vector<int64_t>{1024, 2048};
            q.batches = batch ? std::vector<int>{1, 2, 4} : std::vector<int>{2};
            q.colds = batch ? std::vector<double>{0.75} : std::vector<double>{0.0, 0.75};
            q.storages = batch ? std::vector<std::string>{"plain"} : std::vector<std::string>{"plain", "emulator"};
        }
        if (q.text_dir.empty()) {
            const std::string d = data_dir_default() + "/text/gutenberg";
            if (!data_dir_default().empty() && std::filesystem::is_directory(d)) q.text_dir = d;
        }
        q.kv_dir = e.kv_dir;
        q.calibrate = e.calibrate();
        thread_pool pool(e.threads.resolve());
        experiment_report rep = run_e2e(name, q, pool, print_line);
        return e.finish(rep);
    }};
}

bench_cmd add_accuracy(CLI::App & bench) {
    auto o = std::make_shared<std::tuple<experiment_opts, accuracy_params, std::string>>();
    accuracy_params & p = std::get<1>(*o);
    std::get<2>(*o) = data_dir_default();
    CLI::App * sub = bench.add_subcommand("accuracy",
                                          "perplexity, passkey retrieval and RTE / PIQA accuracy of every "
                                          "policy at each alpha against full");
    sub->add_option("--data", std::get<2>(*o),
                    "the shared data folder: models/, text/, eval/ (default: $HILLINFER_DATA, else ../shared/data)");
    sub->add_option("-m,--model", p.model_path, "trained model (default: DATA/models/gguf/stories260K.gguf)");
    sub->add_option("--tokenizer", p.tokenizer_path, "the model's tokenizer (llama2.c checkpoints)");
    sub->add_option("--book", p.book_path, "perplexity text (default: DATA/text/gutenberg/pg1184_count_of_monte_cristo.txt)");
    add_list_option(*sub, "--policies", p.policies, "policies (comma-separated; default: every registered one)");
    add_list_option(*sub, "--alphas", p.alphas, "retention ratios (comma-separated)");
    sub->add_option("--ppl-ctx", p.ppl_ctx, "perplexity window and multiple-choice context, tokens")->capture_default_str();
    sub->add_option("--ppl-windows", p.ppl_windows, "perplexity windows")->capture_default_str();
    add_list_option(*sub, "--passkey-ctx", p.passkey_ctxs, "passkey prompt lengths (comma-separated)");
    add_list_option(*sub, "--passkey-depth", p.passkey_depths, "passkey depths in [0, 1] (comma-separated)");
    sub->add_option("--rte", p.n_rte, "RTE items (0: all 277)")->capture_default_str();
    sub->add_option("--piqa", p.n_piqa, "PIQA items (0: all 1838)")->capture_default_str();
    std::get<0>(*o).add(*sub);
    return {sub, [o]() -> int {
        experiment_opts & e = std::get<0>(*o);
        accuracy_params & q = std::get<1>(*o);
        const std::string & data = std::get<2>(*o);
        e.prepare({q.model_path, q.tokenizer_path, q.book_path});
        if (data.empty() && (q.model_path.empty() || q.book_path.empty())) {
            fail_usage("bench accuracy needs the shared data folder: --data DIR or HILLINFER_DATA (or -m, --book and --eval)");
        }
        if (q.model_path.empty()) q.model_path = data + "/models/gguf/stories260K.gguf";
        if (q.book_path.empty()) q.book_path = data + "/text/gutenberg/pg1184_count_of_monte_cristo.txt";
        q.eval_dir = data + "/eval";
        if (e.quick) {
            q.ppl_ctx = 256;
            q.ppl_windows = 1;
            q.passkey_ctxs = {512};
            q.passkey_depths = {0.0, 0.5, 1.0};
            q.n_rte = 4;
            q.n_piqa = 4;
        }
        q.kv_dir = e.kv_dir;
        thread_pool pool(e.threads.resolve());
        experiment_report rep = run_accuracy(q, pool, print_line);
        return e.finish(rep);
    }};
}

struct step_opts {
    step_bench_params p;
    CLI::Option * placement_opt = nullptr;
    thread_opts threads;
    trace_opts trace;
    std::string json_path, plot_path;
};

// The pipeline's hints in the measured steps (step_result::hints_off_share): "on", "off", the share of
// steps without them, or "-" where no step could send one.
std::string hints_label(double off_share) {
    if (!std::isfinite(off_share)) return "-";
    if (off_share == 0.0) return "on";
    if (off_share == 1.0) return "off";
    return fmt::format("{:.0f}% off", 100 * off_share);
}

std::string label(const step_config & c) {
    std::string s = c.cold == 0.0 ? fmt::format("{} in RAM", c.policy) : fmt::format("{} {:.0f}% cold {}", c.policy, 100 * c.cold, c.storage);
    if (c.storage == "emulator") s += " " + c.profile;
    if (c.score_copy != "-") s += " " + c.score_copy;
    if (c.beta != "-") s += " beta " + c.beta;
    if (c.device_cache >= 0.0 && c.device_cache != context_params{}.device_cache_share) s += fmt::format(" cache {:g}", c.device_cache);
    if (c.placement_set) s += " " + c.placement;
    return s;
}

nlohmann::json to_json(const step_result & r) {
    const step_config & c = r.config;
    return {{"ctx", c.ctx},
            {"cold", c.cold},
            {"policy", c.policy},
            {"storage", c.storage},
            {"profile", c.profile},
            {"score_copy", c.score_copy},
            {"device_cache", number_or_null(c.device_cache >= 0.0 ? c.device_cache : NAN)},
            {"placement", c.placement},
            {"host_budget_bytes", r.host_budget},
            {"scoring_copy_bytes", r.copy_bytes},
            {"hot_slots_per_layer", r.hot_slots},
            {"device_cache_rows", r.cache_rows},
            {"step_ms", r.step_ms},
            {"step_ms_min", r.step_ms_min},
            {"step_ms_max", r.step_ms_max},
            {"forward_ms", r.forward_ms},
            {"score_host_ms", r.score_host_ms},
            {"score_device_ms", r.score_device_ms},
            {"select_ms", r.select_ms},
            {"attend_ms", r.attend_ms},
            {"write_ms", r.write_ms},
            {"hot_bytes", r.hot_bytes},
            {"cached_bytes", r.cached_bytes},
            {"open_bytes", r.open_bytes},
            {"disk_kv_bytes", r.disk_kv_bytes},
            {"flash_read_bytes", r.flash_read_bytes},
            {"link_bytes", r.link_bytes},
            {"host_read_bytes", r.host_read_bytes},
            {"hot_share", r.hot_share},
            {"cache_share", r.cache_share},
            {"cache_fills", r.cache_fills},
            {"cache_swaps", r.cache_swaps},
            {"open_share", r.open_share},
            {"disk_share", r.disk_share},
            {"reread_share", r.reread_share},
            {"attended_per_layer", r.attended_per_layer},
            {"promotions", r.promotions},
            {"prefetch_hit_share", r.prefetch_hit_share},
            {"prefetch_waste_share", r.prefetch_waste_share},
            {"hints_off_share", number_or_null(r.hints_off_share)},
            {"beta_config", c.beta},
            {"beta", number_or_null(r.beta)},
            {"beta_planned", number_or_null(r.beta_planned)},
            {"beta_eq4", number_or_null(r.beta_eq4)},
            {"m0_bound", r.m0_bound},
            {"alpha_hot", number_or_null(r.alpha_hot)},
            {"alpha_cold", number_or_null(r.alpha_cold)},
            {"t_cpu_predicted_ms", number_or_null(r.t_cpu_pred_ms)},
            {"t_csd_predicted_ms", number_or_null(r.t_csd_pred_ms)},
            {"t_cpu_ms", number_or_null(r.t_cpu_ms)},
            {"t_csd_ms", number_or_null(r.t_csd_ms)},
            {"replans", r.replans}};
}

// The β sweeps of a run: per emulator configuration (all but β) with numeric βs, the step time of each β,
// the best, and the planner's β beside it (when "planner" ran too): printed, and returned as JSON.
nlohmann::json beta_sweeps(const std::vector<step_result> & rs) {
    nlohmann::json out = nlohmann::json::array();
    std::vector<step_config> groups;
    const auto same = [](const step_config & a, const step_config & b) {
        return a.ctx == b.ctx && a.cold == b.cold && a.policy == b.policy && a.storage == b.storage &&
               a.profile == b.profile && a.score_copy == b.score_copy;
    };
    for (const step_result & r : rs) {
        if (r.config.beta == "-" || r.config.beta == "planner") continue;
        if (std::none_of(groups.begin(), groups.end(), [&](const step_config & g) { return same(g, r.config); })) {
            groups.push_back(r.config);
        }
    }
    for (const step_config & g : groups) {
        const step_result * best = nullptr, * planned = nullptr;
        nlohmann::json points = nlohmann::json::array();
        step_config gl = g;
        gl.beta = "-";
        fmt::print("\nbeta sweep, {} ctx {}: beta (asked -> applied: hot/cold tokens), step ms, T_cpu / T_csd measured ms\n",
                   label(gl), g.ctx);
        for (const step_result & r : rs) {
            if (!same(g, r.config)) continue;
            if (r.config.beta == "planner") {
                planned = &r;
                continue;
            }
            fmt::print("  {:>8} -> {:.3f}{} {:>9.1f} ({:.1f}-{:.1f}) {:>9.2f} / {:.2f}\n", r.config.beta, r.beta,
                       r.m0_bound ? " (M0)" : "     ", r.step_ms, r.step_ms_min, r.step_ms_max, r.t_cpu_ms, r.t_csd_ms);
            points.push_back({{"beta_config", r.config.beta}, {"beta", number_or_null(r.beta)}, {"step_ms", r.step_ms}});
            if (best == nullptr || r.step_ms < best->step_ms) best = &r;
        }
        nlohmann::json j = {{"ctx", g.ctx}, {"cold", g.cold}, {"policy", g.policy}, {"storage", g.storage},
                            {"profile", g.profile}, {"points", points}, {"best_beta", number_or_null(best->beta)},
                            {"best_step_ms", best->step_ms}};
        fmt::print("  best: beta {:.3f}, {:.1f} ms", best->beta, best->step_ms);
        if (planned != nullptr) {
            const double off = std::abs(planned->beta - best->beta) / best->beta;
            fmt::print("; planner: beta {:.3f}{} (Eq. 4 {:.3f}, planned {:.3f}, {} re-plans), {:.1f} ms: {:.1f}% from the "
                       "best beta ({} 10%), step {:.2f}x the best's\n", planned->beta, planned->m0_bound ? " (M0-bound)" : "",
                       planned->beta_eq4, planned->beta_planned, planned->replans, planned->step_ms, 100.0 * off,
                       off <= 0.10 ? "within" : "outside", planned->step_ms / best->step_ms);
            j["planner_beta"] = number_or_null(planned->beta);
            j["planner_step_ms"] = planned->step_ms;
            j["planner_off_best"] = number_or_null(off);
        } else {
            fmt::print(" (add 'planner' to --beta to compare the planner's choice)\n");
        }
        out.push_back(std::move(j));
    }
    return out;
}

// A bar chart of the step times, one group of bars per context length (experiments/plot.h).
void write_step_plot(const std::string & path, const std::vector<step_result> & rs) {
    plot_spec spec;
    spec.title = "hillinfer bench step: decode step time";
    spec.ylabel = "ms per step (log)";
    spec.logy = true;
    std::vector<int64_t> ctxs;
    for (const step_result & r : rs) {
        if (std::find(spec.categories.begin(), spec.categories.end(), label(r.config)) == spec.categories.end()) {
            spec.categories.push_back(label(r.config));
        }
        if (std::find(ctxs.begin(), ctxs.end(), r.config.ctx) == ctxs.end()) ctxs.push_back(r.config.ctx);
    }
    for (const int64_t n : ctxs) {
        plot_series s{fmt::format("ctx {}", n), {}};
        for (size_t c = 0; c < spec.categories.size(); ++c) {
            double ms = NAN;
            for (const step_result & r : rs) {
                if (r.config.ctx == n && label(r.config) == spec.categories[c]) ms = r.step_ms;
            }
            s.points.emplace_back(double(c), ms);
        }
        spec.series.push_back(std::move(s));
    }
    write_plot(spec, plot_stem("", path), path);
}

int run_step(step_opts & o) {
    const int n_threads = o.threads.resolve();
    if (o.p.kv_dir.empty()) o.p.kv_dir = cache_dir() + "/kv";
    (void)prepare_kv_dir(o.p.kv_dir);  // before the calibration
    check_outputs(o.json_path, o.plot_path, o.p.profiles);
    for (const std::string & b : o.p.betas) {  // 'planner' or a decimal number (no 0x10, ' 2')
        const std::string why = b == "planner" ? std::string() : decimal_number_error(b, false, true);
        if (!why.empty()) fail_usage("--beta: {}", why);
    }
    check(o.p);
    if (o.placement_opt->count() > 0) (void)parse_placement(o.p.placement);  // "" too (check() reads "" as none)
    // The device cache's shares apply to the plain SSD's cold configurations: say so when the grid has none.
    const bool any_cache = std::any_of(o.p.device_caches.begin(), o.p.device_caches.end(), [](double d) { return d > 0.0; });
    const bool plain = std::find(o.p.storages.begin(), o.p.storages.end(), "plain") != o.p.storages.end();
    if (any_cache && (!plain || std::none_of(o.p.colds.begin(), o.p.colds.end(), [](double c) { return c > 0.0; }))) {
        log_warn("--device-cache applies to the plain SSD's cold configurations (--storage plain, --cold above 0); this "
                 "grid has none, so it runs without the cache");
    }
    // The planner's rates per device profile: the calibration cache's entry for the kv-dir, or the defaults.
    nlohmann::json calibrations = nlohmann::json::array();
    if (std::find(o.p.storages.begin(), o.p.storages.end(), "emulator") != o.p.storages.end()) {
        for (const std::string & name : o.p.profiles) {
            const calibration c = calibration_for(calibration_path(), o.p.kv_dir, csd::storage_kind::emulator,
                                                  csd::load_device_profile(name));
            fmt::print("calibration, emulator, profile {}: f_c {:.3g} GB/s, f_s {:.3g} GB/s, B_c {:.3g} GB/s, B_s {:.3g} "
                       "GB/s from {}\n", name, c.f_c_bps / 1e9, c.f_s_bps / 1e9, c.b_c_bps / 1e9, c.b_s_bps / 1e9, c.source);
            calibrations.push_back({{"profile", name}, {"f_c_gbps", c.f_c_bps / 1e9}, {"f_s_gbps", c.f_s_bps / 1e9},
                                    {"b_c_gbps", c.b_c_bps / 1e9}, {"b_s_gbps", c.b_s_bps / 1e9}, {"source", c.source}});
        }
        const std::string cache = calibration_path(), dir = o.p.kv_dir;
        o.p.calibrate = [cache, dir](const csd::device_profile & prof) {
            return calibration_for(cache, dir, csd::storage_kind::emulator, prof);
        };
    }
    std::vector<std::string> trace_inputs = o.p.profiles;
    trace_inputs.push_back(o.json_path);
    trace_inputs.push_back(o.plot_path);
    o.trace.start(trace_inputs);
    thread_pool pool(n_threads);
    const workload_params & wp = o.p.workload;
    fmt::print(stderr, "bench step: calibrating the synthetic workload ...\n");
    const synthetic_workload w(wp);
    const workload_calibration & cal = w.calibration();
    fmt::print("bench step: {} layers, {} query / {} KV heads of {}, f16 KV, alpha {}, {} warm-up + {} measured steps, "
               "{} threads, kv-dir {}\n", wp.n_layer, wp.n_head, wp.n_head_kv, wp.head_dim, wp.alpha, o.p.n_warmup,
               o.p.n_steps, n_threads, o.p.kv_dir);
    fmt::print("workload: top-alpha overlap of consecutive steps {:.3f} (target {}), attention mass of the top alpha "
               "{:.3f} (target {}), head agreement {} ({}-token sample; query correlation {:.4f}, logit scale {:.2f})\n",
               cal.overlap, wp.target_overlap, cal.mass, wp.target_mass, wp.agreement, cal.sample_tokens, cal.rho,
               cal.logit_scale);
    fmt::print("\n{:>7} {:42} {:>20} {:>44} {:>10} {:>10} {:>10} {:>23} {:>8}\n", "ctx", "configuration",
               "step ms (min-max)", "forward / score / device / select / attend ms", "RAM/step", "SSD/step",
               "link/step", "hot/cache/open/disk %", "hints");
    const std::vector<step_result> rs = run_step_bench(o.p, w, pool, [](const step_result & r) {
        fmt::print(
            "{:>7} {:42} {:>8.1f} ({:.1f}-{:.1f}) {:>8.1f} / {:.1f} / {:.1f} / {:.1f} / {:.1f} {:>10} {:>10} {:>10} "
            "{:>5.1f}/{:.1f}/{:.1f}/{:.1f} {:>8}\n",
            r.config.ctx, label(r.config), r.step_ms, r.step_ms_min, r.step_ms_max, r.forward_ms, r.score_host_ms,
            r.score_device_ms, r.select_ms, r.attend_ms, format_bytes(uint64_t(r.hot_bytes + r.cached_bytes)),
            format_bytes(uint64_t(r.disk_kv_bytes + r.host_read_bytes)), format_bytes(uint64_t(r.link_bytes)),
            100 * r.hot_share, 100 * r.cache_share, 100 * r.open_share, 100 * r.disk_share,
            hints_label(r.hints_off_share));
        if (std::isfinite(r.beta)) {
            fmt::print(
                "{:>7} {:42} planner: beta {:.3f}{} (planned {:.3f}, Eq. 4 {:.3f}; selected {:.1f}% of hot, {:.1f}% "
                "of cold tokens); T_cpu {:.2f} ms predicted / {:.2f} measured, T_csd {:.2f} / {:.2f}; {} re-plans\n",
                "", "", r.beta, r.m0_bound ? " M0-bound" : "", r.beta_planned, r.beta_eq4, 100 * r.alpha_hot,
                100 * r.alpha_cold, r.t_cpu_pred_ms, r.t_cpu_ms, r.t_csd_pred_ms, r.t_csd_ms, r.replans);
        }
        std::fflush(stdout);
    });
    // Ratios from this run: each sparse configuration against `full` over the same tiers and against
    // `full` with everything in RAM.
    const auto find = [&](const step_config & c) -> const step_result * {
        for (const step_result & r : rs) {
            const step_config & d = r.config;
            if (d.ctx == c.ctx && d.cold == c.cold && d.policy == c.policy && d.storage == c.storage && d.profile == c.profile &&
                d.score_copy == c.score_copy && d.device_cache == c.device_cache) {
                return &r;
            }
        }
        return nullptr;
    };
    nlohmann::json ratios = nlohmann::json::array();
    bool header = false, missing_full = false, missing_ram = false;
    for (const step_result & r : rs) {
        if (r.config.policy == "full") continue;
        step_config same = r.config, ram{r.config.ctx, 0.0, "full", "ram", "none", "-", "-", -1.0};
        same.policy = "full";
        same.score_copy = "-";
        const step_result * f = find(same);
        const step_result * fr = find(ram);
        if (f == nullptr && fr == nullptr) continue;
        if (!header) {
            fmt::print("\n{:>7} {:42} {:>26} {:>26}\n", "ctx", "configuration", "speedup over full, same tiers",
                       "step / full step in RAM");
            header = true;
        }
        const double speedup = f != nullptr ? f->step_ms / r.step_ms : NAN;
        const double vs_ram = fr != nullptr ? r.step_ms / fr->step_ms : NAN;
        // A ratio without its `full` configuration in the grid prints as "-" (null in the JSON).
        const auto ratio = [](const step_result * base, double v) {
            return base != nullptr ? fmt::format("{:.2f}x", v) : std::string("-");
        };
        fmt::print("{:>7} {:42} {:>26} {:>26}\n", r.config.ctx, label(r.config), ratio(f, speedup), ratio(fr, vs_ram));
        missing_full = missing_full || f == nullptr;
        missing_ram = missing_ram || fr == nullptr;
        nlohmann::json j = {{"ctx", r.config.ctx}, {"cold", r.config.cold}, {"policy", r.config.policy},
                            {"storage", r.config.storage}, {"profile", r.config.profile},
                            {"score_copy", r.config.score_copy},
                            {"device_cache", number_or_null(r.config.device_cache >= 0.0 ? r.config.device_cache : NAN)}};
        j["speedup_over_full"] = f != nullptr ? nlohmann::json(speedup) : nlohmann::json(nullptr);
        j["ratio_to_full_in_ram"] = fr != nullptr ? nlohmann::json(vs_ram) : nlohmann::json(nullptr);
        ratios.push_back(std::move(j));
    }
    // Say why a ratio is "-": its `full` configuration was not in the grid.
    if (missing_full) fmt::print("(-: `full` over the same tiers was not run: add full to --policies)\n");
    if (missing_ram)
        fmt::print("(-: `full` with everything in RAM was not run: add 0 to --cold and full to --policies)\n");
    const nlohmann::json sweeps = beta_sweeps(rs);
    const auto write_json = [&] {
        if (o.json_path.empty()) return;
        nlohmann::json out = {{"layers", wp.n_layer}, {"n_head", wp.n_head}, {"n_head_kv", wp.n_head_kv},
                              {"head_dim", wp.head_dim}, {"alpha", wp.alpha}, {"steps", o.p.n_steps},
                              {"warmup", o.p.n_warmup}, {"threads", n_threads},
                              {"workload", {{"overlap", cal.overlap}, {"mass", cal.mass}, {"agreement", wp.agreement},
                                            {"target_overlap", wp.target_overlap}, {"target_mass", wp.target_mass},
                                            {"rho", cal.rho}, {"logit_scale", cal.logit_scale},
                                            {"sample_tokens", cal.sample_tokens}}},
                              {"results", nlohmann::json::array()}, {"ratios", ratios}, {"beta_sweeps", sweeps},
                              {"calibrations", calibrations}};
        for (const step_result & r : rs) out["results"].push_back(to_json(r));
        const std::string text = out.dump(2) + "\n";
        atomic_file f(o.json_path);
        f.write(text.data(), text.size());
        f.commit();
    };
    write_outputs({write_json,
                   [&] {
                       if (!o.plot_path.empty()) write_step_plot(o.plot_path, rs);
                   },
                   [&] { o.trace.finish("hillinfer bench step"); }});
    return 0;
}

}  // namespace

command_fn add_bench(CLI::App & app) {
    CLI::App * bench =
        app.add_subcommand("bench", "benchmarks of the engine (bench step: the decode step over the KV tiers)");
    bench->require_subcommand(1);
    auto o = std::make_shared<step_opts>();
    CLI::App * step = bench->add_subcommand(
        "step",
        "decode-step time per policy, context length, cold share and storage device, over a synthetic workload "
        "calibrated to a trained model's attention statistics");
    step_bench_params & p = o->p;
    workload_params & w = p.workload;
    add_list_option(*step, "--ctx", p.ctxs, "context lengths in tokens (comma-separated)");
    step->add_option("--layers", w.n_layer, "layers")->capture_default_str();
    step->add_option("--heads", w.n_head, "query heads")->capture_default_str();
    step->add_option("--kv-heads", w.n_head_kv, "KV heads")->capture_default_str();
    step->add_option("--head-dim", w.head_dim, "head dimension")->capture_default_str();
    add_list_option(*step, "--cold", p.colds, "shares of the KV without a hot copy, in [0, 1); 0: all in RAM (comma-separated)");
    step->add_option("--alpha", w.alpha, "retention ratio")->capture_default_str();
    add_list_option(*step, "--policies", p.policies, "policies (comma-separated)");
    add_list_option(*step, "--storage", p.storages, "storage devices of the cold pool: plain, emulator (comma-separated)");
    add_list_option(*step, "--profile,--csd-profile", p.profiles, "emulator device profiles: none, smartssd, FILE.json (comma-separated)");
    add_list_option(*step, "--score-copy", p.score_copies,
                    "scoring copies of a scoring policy off the emulator: int4, int3, int2, "
                    "off (comma-separated)");
    add_list_option(*step, "--beta", p.betas, "emulator: hot/cold capacity ratios beta (numbers > 0, cut to what the host "
                     "budget holds) or planner (the planner's choice, docs/storage.md \"The planner\") (comma-separated)");
    o->placement_opt = step->add_option("--placement", p.placement, "fifo or hkm for every policy (default: each policy's own)");
    step->add_flag("--no-prefetch", p.no_prefetch, "plain storage: without the pipeline's prefetch (for comparisons)");
    add_list_option(*step, "--device-cache", p.device_caches, "plain storage: shares of the hot slots that the device tier's "
                     "cache of the cold tokens the last steps read takes (the highest-scored when they are more "
                     "than its rows), in [0, 1); 0: none (comma-separated)");
    step->add_option("--steps", p.n_steps, "measured decode steps per configuration")->capture_default_str();
    step->add_option("--warmup", p.n_warmup, "decode steps before the measured ones (the hot pool settles)")
        ->capture_default_str();
    step->add_option("--head-agreement", w.agreement,
                     "share of the query's and key's variance common to all heads, in [0, 1)")->capture_default_str();
    step->add_option("--kv-dir", p.kv_dir, "cold pool directory (default: the cache directory's kv/)");
    step->add_option("--json", o->json_path, "also write the results as JSON");
    step->add_option("--plot", o->plot_path, "also draw the step times as a PNG bar chart (gnuplot)");
    o->threads.add(*step);
    o->trace.add(*step);
    const std::vector<bench_cmd> experiments = {add_e2e(*bench, "latency"), add_e2e(*bench, "batch"), add_beta(*bench),
                                                add_ablation(*bench), add_accuracy(*bench)};
    return [o, step, experiments]() -> int {
        if (step->parsed()) return run_step(*o);
        for (const bench_cmd & c : experiments) {
            if (c.app->parsed()) return c.run();
        }
        return int(exit_code::usage);
    };
}

}  // namespace hill::cli
