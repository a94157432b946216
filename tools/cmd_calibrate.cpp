// hillinfer calibrate: measures the planner's f_c, f_s, B_c and B_s on this machine (experiments/calibrate.h)
// and caches them as JSON (sched/calibration.h), where generate, demo, perplexity and bench step find them.
#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/sys_info.h"
#include "experiments/calibrate.h"
#include "sched/planner.h"

namespace hill::cli {

namespace {

struct calibrate_opts {
    std::string kv_dir, storage = "emulator", profile = "none", out;
    bool json = false;
    calibrate_params p;
    thread_opts threads;
    CLI::Option * out_opt = nullptr;
};

// Refuses, before seconds of measuring, an output that could not be written: a directory that cannot be
// created or written, a path that is a directory, an existing file that is not a calibration cache.
void check_output(const std::string & path, const std::string & key, const std::string & profile) {
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
        std::filesystem::create_directories(dir, ec);
        if (ec) fail_usage("--out '{}': cannot create the directory '{}': {}", path, dir.string(), ec.message());
    }
    check_output_file("--out", path, {profile});
    (void)load_calibration(path, key);  // a corrupt cache: its error names the file
}

int run_calibrate(calibrate_opts & o) {
    const int n_threads = o.threads.resolve();
    calibrate_params & p = o.p;
    p.kv_dir = o.kv_dir.empty() ? cache_dir() + "/kv" : o.kv_dir;
    p.storage = csd::parse_storage(o.storage);
    p.profile = csd::load_device_profile(o.profile);
    if (o.out_opt->count() > 0 && o.out.empty()) fail_usage("--out needs a file name");
    const std::string out = o.out.empty() ? calibration_path() : o.out;
    check(p);
    const std::string key = calibration_key(p.kv_dir, name(p.storage), p.profile.name);
    check_output(out, key, o.profile);
    thread_pool pool(n_threads);
    if (!o.json) {
        fmt::print(
            "calibrate: {} storage, profile {}, kv-dir {} ({}); {} query / {} KV heads of {}, f16, {} tokens, "
            "alpha {}, {} threads, {} s per rate\n",
            name(p.storage), csd::describe(p.profile), p.kv_dir, key, p.n_head, p.n_head_kv, p.head_dim, p.n_tokens,
            p.alpha, n_threads, p.seconds);
        std::fflush(stdout);
    }
    const calibrate_result r = run_calibration(p, pool);
    const calibration & c = r.cal;
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    const nlohmann::json extra = {
        {"kv_dir", p.kv_dir},
        {"storage", std::string(name(p.storage))},
        {"profile", p.profile.name},
        {"measured_at", when},
        {"threads", n_threads},
        {"shape",
         {{"n_head", p.n_head}, {"n_head_kv", p.n_head_kv}, {"head_dim", p.head_dim}, {"tokens", p.n_tokens}}}};
    // Eq. 4 at this alpha: where the planner starts before the host budget (M0) and the measured skew.
    const double beta = balanced_beta(c, p.alpha, p.alpha, 2.0);
    // The rates as text: on stdout, or on stderr when --json's object is not written (the cache failed).
    const auto print_rates = [&](std::FILE * f) {
        const auto line = [f](const char * what, const std::string & desc, const rate_measurement & m) {
            fmt::print(f, "  {:4} {:55} {:8.3f} GB/s  ({} passes, {} in {:.2f} s)\n", what, desc, m.bps() / 1e9,
                       m.passes, format_bytes(uint64_t(m.bytes)), m.seconds);
        };
        line("f_c", "host scoring, INT8 keys and query (key bytes)", r.f_c);
        line("f_s", fmt::format("{} scoring, pages read (key bytes)", name(p.storage)), r.f_s);
        line("B_c", "hot KV gather from DRAM (K and V bytes)", r.b_c);
        line("B_s", fmt::format("{} KV reads of selected tokens (K and V bytes)", name(p.storage)), r.b_s);
        fmt::print(f,
                   "  Eq. 4 at alpha {}: beta = M_c/M_s = {:.3f} (before the host budget M0 and the measured skew)\n",
                   p.alpha, beta);
    };
    if (!o.json) {  // before the save: a cache that cannot be written loses no measurement
        print_rates(stdout);
        std::fflush(stdout);  // and before the save's error, in a log that takes both streams
    }
    try {
        save_calibration(out, key, c, extra);
    } catch (const error &) {
        if (o.json) print_rates(stderr);
        throw;
    }
    if (o.json) {
        nlohmann::json j = extra;
        j["file"] = out;
        j["key"] = key;
        j["f_c_gbps"] = c.f_c_bps / 1e9;
        j["f_s_gbps"] = c.f_s_bps / 1e9;
        j["b_c_gbps"] = c.b_c_bps / 1e9;
        j["b_s_gbps"] = c.b_s_bps / 1e9;
        j["alpha"] = p.alpha;
        j["beta_eq4"] = beta;
        fmt::print("{}\n", j.dump());
        return 0;
    }
    fmt::print("written to {} [{}]\n", out, key);
    return 0;
}

}  // namespace

command_fn add_calibrate(CLI::App & app) {
    auto o = std::make_shared<calibrate_opts>();
    CLI::App * cmd = app.add_subcommand(
        "calibrate",
        "measure this machine's scoring and transfer rates (f_c, f_s, B_c, B_s) for the planner and cache "
        "them as JSON");
    cmd->add_option("--kv-dir", o->kv_dir,
                    "cold pool directory, on the disk to measure (default: the cache "
                    "directory's kv/)");
    cmd->add_option("--storage", o->storage, "storage device of the cold pool: emulator or plain")
        ->capture_default_str();
    cmd->add_option("--profile,--csd-profile", o->profile, "device profile: none, smartssd or a JSON file")->capture_default_str();
    o->out_opt = cmd->add_option("--out", o->out,
                                 "cache file to write (default: $XDG_CACHE_HOME/hillinfer/"
                                 "calibration.json or ~/.cache/hillinfer/calibration.json); other entries are kept");
    cmd->add_flag("--json", o->json, "print the result as one JSON object");
    cmd->add_option("--alpha", o->p.alpha, "share of the tokens gathered and read per pass")->capture_default_str();
    cmd->add_option("--seconds", o->p.seconds, "seconds per rate, at least (one pass at least)")->capture_default_str();
    cmd->add_option("--tokens", o->p.n_tokens, "tokens of the measured layer (32 query / 8 KV heads of 128)")
        ->capture_default_str();
    o->threads.add(*cmd);
    return [o, cmd]() -> int {
        if (cmd->parsed()) return run_calibrate(*o);
        return int(exit_code::usage);
    };
}

}  // namespace hill::cli
