// hillinfer demo: passkey retrieval over a long context with most of the KV cache on SSD. Makes the
// passkey model (docs/passkey.md) in the cache directory if it is not there, builds a prompt of
// --ctx tokens with a 5-digit key at a random (or given) depth, runs it under policy hillinfer with
// a hot budget that puts at least 75% of the KV in the cold pool, and says whether the key came back.
// Then (unless --no-compare) it runs the same decode steps again under policy full over the same
// tiers and prints the two median step times and the bytes each moved from the SSD per step.
#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sys_info.h"
#include "engine/passkey.h"
#include "engine/run_report.h"
#include "model/synthetic_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <random>

namespace hill::cli {

namespace {

struct demo_opts {
    std::string model;
    std::string haystack_file;
    thread_opts threads;
    kv_opts kv;
    policy_opts policy;
    trace_opts trace;
    int32_t n_ctx = 32768;
    double depth = -1.0;
    std::string seed = "-1";  // parse_seed: [0, seed_max] or -1 (random)
    bool json = false;
    bool no_compare = false;  // skip the rerun of the decode steps under policy full
};

// The decode steps of one run of the answer: their wall times and what the storage device moved.
struct step_run {
    std::string policy;
    std::vector<int64_t> step_us;   // wall time of each completed decode step
    uint64_t link_bytes = 0;        // over the storage device's link to the host (scoring and KV), all steps
    uint64_t flash_read_bytes = 0;  // read from flash inside the device, all steps (plain SSD: = link bytes)
    uint64_t score_device_us = 0;   // waiting for the storage device's scores, all steps (step_stats)

    int64_t n_steps() const { return int64_t(step_us.size()); }
    // The median step time (of an even count: the mean of the middle two), in ms; 0 without steps.
    double median_ms() const {
        if (step_us.empty()) return 0.0;
        std::vector<int64_t> t = step_us;
        std::sort(t.begin(), t.end());
        return double(t[(t.size() - 1) / 2] + t[t.size() / 2]) / 2e3;
    }
    double per_step(uint64_t bytes) const { return step_us.empty() ? 0.0 : double(bytes) / double(step_us.size()); }
    // What the device moved between two snapshots of its counters.
    void count(const csd::device_counters & a, const csd::device_counters & b) {
        link_bytes = (b.link_score_bytes + b.link_kv_bytes) - (a.link_score_bytes + a.link_kv_bytes);
        flash_read_bytes = b.internal_read_bytes - a.internal_read_bytes;
    }
    nlohmann::json json() const {
        return {{"policy", policy},
                {"steps", n_steps()},
                {"step_ms", median_ms()},
                {"link_bytes_per_step", per_step(link_bytes)},
                {"flash_read_bytes_per_step", per_step(flash_read_bytes)},
                {"score_device_ms_per_step", per_step(score_device_us) / 1e3}};
    }
};

// "4.12 ms", "38.2 ms", "412 ms": three significant digits up to a second.
std::string format_ms(double ms) {
    return ms < 10.0    ? fmt::format("{:.2f} ms", ms)
           : ms < 100.0 ? fmt::format("{:.1f} ms", ms)
                        : fmt::format("{:.0f} ms", ms);
}

std::string format_mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / double(1 << 20)); }

// Runs `tokens` again as decode steps under policy full, from position n_prompt on, over the same
// tiers: the session is truncated back to n_prompt (the cold pool, the hot pool and its placement
// stay as the first run left them) and its policy replaced, so the run report must be taken before.
// Stops cleanly on Ctrl-C (between steps, or a step the storage device abandoned: it changed nothing);
// `stopped` says so, and the result holds the steps that completed.
step_run rerun_under_full(session & s, int64_t n_prompt, std::span<const int32_t> tokens, const policy_params & pol,
                          bool & stopped) {
    s.truncate(n_prompt);
    // The sinks, the window and the migration budget of the first run; full's own placement (fifo).
    s.set_policy(policy_params{.name = "full", .n_sinks = pol.n_sinks, .n_window = pol.n_window,
                               .migrate_bytes = pol.migrate_bytes});
    step_run r{.policy = "full"};
    const csd::device_counters c0 = s.ctx().storage().counters();
    stopped = false;
    for (const int32_t id : tokens) {
        if (interrupted()) {
            stopped = true;
            break;
        }
        const int64_t t0 = time_us();
        try {
            s.eval(std::span<const int32_t>(&id, 1));
        } catch (const error & e) {
            if (e.code() != exit_code::interrupted) throw;
            stopped = true;
            break;
        }
        r.step_us.push_back(time_us() - t0);
    }
    r.count(c0, s.ctx().storage().counters());
    r.score_device_us = s.ctx().decode_stats().t_score_device_us;
    return r;
}

// "decode step: hillinfer 4.12 ms, full over the same tiers 38.2 ms (9.3x faster); per step, full reads
// 24.3 MiB from the SSD, hillinfer 5.4 MiB", or without a comparison the run's own step time. The
// bytes are what crossed the SSD's link to the host; the emulator scores where the keys live, so what
// it read of its own flash is added, and the mean time the policy waited for its scores (the
// emulator's threads share this machine's cores: a SmartSSD's kernel would not).
std::string step_line(const step_run & run, const std::optional<step_run> & full, bool stopped, int64_t n_planned,
                      bool emulator) {
    std::string out = fmt::format("decode step: {} {}", run.policy, format_ms(run.median_ms()));
    if (!full) {
        out += fmt::format("; it reads {} from the SSD per step", format_mib(run.per_step(run.link_bytes)));
        if (emulator) {
            out += fmt::format(" (over the link; the device read {} of its flash)",
                               format_mib(run.per_step(run.flash_read_bytes)));
        }
        return out + "\n";
    }
    if (stopped) {
        if (full->step_us.empty()) return out + "; the comparison with full over the same tiers was interrupted\n";
        return out + fmt::format("; full over the same tiers interrupted after {} of {} steps (median {} so far)\n",
                                 full->n_steps(), n_planned, format_ms(full->median_ms()));
    }
    if (emulator && run.per_step(run.score_device_us) >= 1e3) {
        // The emulator is software: its scoring runs on this machine's cores, beside the host's work.
        out += fmt::format(" ({} of it waiting for the emulated device, which scores on this CPU)",
                           format_ms(run.per_step(run.score_device_us) / 1e3));
    }
    const double x = full->median_ms() / std::max(1e-9, run.median_ms());
    out += fmt::format(", full over the same tiers {} ({:.1f}x {}); per step, full reads {} from the SSD, {} {}",
                       format_ms(full->median_ms()), x >= 1.0 ? x : 1.0 / x, x >= 1.0 ? "faster" : "slower",
                       format_mib(full->per_step(full->link_bytes)), run.policy,
                       format_mib(run.per_step(run.link_bytes)));
    if (emulator) {
        out += fmt::format(" (over the link; the device read {} and {} of its flash)",
                           format_mib(full->per_step(full->flash_read_bytes)),
                           format_mib(run.per_step(run.flash_read_bytes)));
    }
    return out + "\n";
}

// The cached passkey model for contexts up to n_ctx tokens, made when absent.
std::string passkey_model_path(int32_t n_ctx) {
    const int32_t model_ctx = std::max<int32_t>(n_ctx, 131072);
    const std::string dir = cache_dir() + "/models";
    const std::string path = fmt::format("{}/passkey-{}.gguf", dir, model_ctx);
    if (std::filesystem::exists(path)) return path;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) fail_usage("cannot create the model cache directory '{}': {}", dir, ec.message());
    fmt::print(stderr, "making the passkey model: {}\n", path);
    write_passkey_model(path, passkey_model_params{.n_ctx = model_ctx});
    return path;
}

int run_demo(const demo_opts & o) {
    if (o.n_ctx < 256) fail_usage("--ctx must be at least 256 tokens, got {}", o.n_ctx);
    if (o.model.empty() && o.n_ctx > passkey_n_ctx_max) {
        fail_usage(
            "--ctx must be at most {} tokens with the built-in passkey model (where its margins hold; "
            "docs/passkey.md), got {}",
            passkey_n_ctx_max, o.n_ctx);
    }
    if (o.depth != -1.0 && !(o.depth >= 0.0 && o.depth <= 1.0)) fail_usage("--depth must be in [0, 1], got {}", o.depth);
    const uint64_t seed = parse_seed(o.seed, "--seed", true).value_or(std::random_device{}());
    const int n_threads = o.threads.resolve();
    const policy_params pol = o.policy.resolve(o.kv);
    o.kv.type();
    std::mt19937_64 rng(seed);
    const double depth = o.depth >= 0.0 ? o.depth : double(rng() % 101) / 100.0;
    const std::string haystack = o.haystack_file.empty() ? std::string() : read_text_file(o.haystack_file, "haystack file");
    if (!o.haystack_file.empty() && haystack.empty()) fail_usage("the haystack file '{}' is empty", o.haystack_file);

    auto m = model::load(o.model.empty() ? passkey_model_path(o.n_ctx) : o.model);
    context_params sp = o.kv.context(o.n_ctx, pol);
    context::check_metadata_memory(*m, sp);  // a context too large is refused before its prompt is built
    // The prompt leaves room for the answer: 5 digits and a few tokens around them.
    const passkey_prompt prompt = make_passkey_prompt(
        m->tokenizer(),
        passkey_prompt_params{.n_tokens = o.n_ctx - 8, .depth = depth, .seed = seed, .haystack = haystack});
    if (!o.kv.budget_given()) {
        // A quarter of the prompt's KV: at least 75% of it goes to the cold pool.
        sp.kv_host_budget = m->hp().kv_bytes_per_token(sp.kv_type) * uint64_t(prompt.n_tokens) / 4;
    }
    thread_pool pool(n_threads);
    session s(*m, sp, pool);  // checks the KV and storage parameters before the banner
    if (!o.json) {
        fmt::print(stderr, "passkey demo: a {}-token prompt ({}), the key at depth {:.0f}%, hot KV budget {}, seed {}\n",
                   prompt.n_tokens, haystack.empty() ? "generated haystack" : o.haystack_file, 100.0 * depth,
                   format_bytes(sp.kv_host_budget), seed);
    }
    const std::vector<int32_t> ids = m->tokenizer().encode(prompt.text, true);
    // All but the prompt's last token are prefilled (dense); the last token and the answer are decode
    // steps, so every digit is predicted by attention under the policy.
    prefill_progress progress;
    const int64_t t0 = time_us();
    try {
        s.eval(std::span<const int32_t>(ids).first(ids.size() - 1), false, std::ref(progress));
    } catch (const error & e) {
        if (e.code() != exit_code::interrupted) throw;
        // Ctrl-C during prefill: the summary of what ran, as generate prints it (and, with --json, its object
        // without an answer).
        if (o.json) {
            const nlohmann::json j = {
                {"passkey", prompt.passkey},
                {"answer", nullptr},
                {"correct", nullptr},
                {"interrupted", true},
                {"prompt_tokens", ids.size()},
                {"depth", depth},
                {"seed", seed},
                {"n_ctx", o.n_ctx},
                {"prefill_s", double(time_us() - t0) / 1e6},
                {"prefill_tokens_per_s", nullptr},
                {"peak_rss_bytes", peak_rss_bytes()},
                {"kv", kv_json(s.ctx())},
                {"storage", storage_json(s.ctx())},
                {"policy", policy_json(s.ctx())},
                {"planner", planner_json(s.ctx())},
            };
            fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        }
        fmt::print(stderr, "prompt: {} tokens, prefill interrupted after {:.1f} s | no answer | peak RSS {} | threads "
                   "{}\n{}", ids.size(), double(time_us() - t0) / 1e6, format_bytes(peak_rss_bytes()), n_threads,
                   run_summary(s.ctx()));
        return int(exit_code::interrupted);
    }
    const int64_t t1 = time_us();
    const csd::device_counters c1 = s.ctx().storage().counters();
    s.eval(std::span<const int32_t>(&ids.back(), 1));
    const int64_t t_first = time_us() - t1;
    const passkey_answer a = answer_passkey(s, prompt.passkey);
    const int64_t t2 = time_us();
    const double prefill_tps = double(ids.size()) / std::max(1e-9, double(t1 - t0) / 1e6);
    const int64_t n_steps = s.n_past() - int64_t(ids.size()) + 1;
    // The decode steps: the prompt's last token, then the answer's tokens that were evaluated.
    std::vector<int32_t> steps{ids.back()};
    steps.insert(steps.end(), a.ids.begin(), a.ids.begin() + std::ptrdiff_t(a.step_us.size()));
    HILL_ASSERT(int64_t(steps.size()) == n_steps);
    step_run run{.policy = pol.name, .step_us = {t_first}};
    run.step_us.insert(run.step_us.end(), a.step_us.begin(), a.step_us.end());
    run.count(c1, s.ctx().storage().counters());
    run.score_device_us = s.ctx().decode_stats().t_score_device_us;  // the policy's statistics start after prefill
    // The report of this run, taken before the comparison replaces the policy (fresh step statistics)
    // and reads the cold pool again.
    const uint64_t peak_rss = peak_rss_bytes();
    const std::string report = run_summary(s.ctx());
    const nlohmann::json report_kv = kv_json(s.ctx()), report_storage = storage_json(s.ctx()),
                         report_policy = policy_json(s.ctx()), report_planner = planner_json(s.ctx());
    if (!o.json) {
        fmt::print("passkey {} | answer '{}' | {}\n", prompt.passkey, a.text, a.correct ? "correct" : "WRONG");
        std::fflush(stdout);  // the answer before the comparison's wait
    }
    // The same decode steps under policy full over the same tiers: what the policy saves.
    std::optional<step_run> full;
    bool stopped = false;
    const bool can_rerun = s.ctx().can_truncate(0, int64_t(ids.size()) - 1);
    if (!o.no_compare && pol.name != "full" && !can_rerun && !o.json) {
        fmt::print(stderr, "not comparing with policy full: the model's sliding-window layers keep only their window, "
                   "so the answer's steps cannot be run again over the same tiers\n");
    }
    if (!o.no_compare && pol.name != "full" && can_rerun) {
        if (!o.json) {
            fmt::print(stderr, "comparing: the same {} decode steps under policy full over the same tiers "
                       "(--no-compare skips this)\n", n_steps);
        }
        full = rerun_under_full(s, int64_t(ids.size()) - 1, steps, pol, stopped);
    }
    const bool emulator = s.ctx().storage().kind() == csd::storage_kind::emulator;
    if (o.json) {
        nlohmann::json step = {{"policy", run.json()}, {"interrupted", stopped}};
        if (full) {
            step["full"] = full->json();
            if (!stopped) step["speedup"] = full->median_ms() / std::max(1e-9, run.median_ms());
        }
        const nlohmann::json j = {
            {"passkey", prompt.passkey}, {"answer", a.text}, {"digits", a.digits}, {"correct", a.correct},
            {"prompt_tokens", ids.size()}, {"depth", depth}, {"seed", seed}, {"n_ctx", o.n_ctx},
            {"prefill_s", double(t1 - t0) / 1e6}, {"prefill_tokens_per_s", prefill_tps},
            {"decode_s", double(t2 - t1) / 1e6}, {"decode_steps", n_steps}, {"decode_step", step},
            {"peak_rss_bytes", peak_rss}, {"kv", report_kv}, {"storage", report_storage}, {"policy", report_policy},
            {"planner", report_planner},
        };
        fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else if (!o.no_compare) {
        fmt::print("{}", step_line(run, full, stopped, n_steps, emulator));
    }
    fmt::print(stderr, "prompt: {} tokens, prefill {:.1f} tokens/s ({:.1f} s) | answer: {} decode steps in {:.2f} s | "
               "peak RSS {} | threads {}\n{}", ids.size(), prefill_tps, double(t1 - t0) / 1e6, n_steps,
               double(t2 - t1) / 1e6, format_bytes(peak_rss), n_threads, report);
    if (stopped) return int(exit_code::interrupted);
    return a.correct ? 0 : int(exit_code::check_failed);
}

}  // namespace

command_fn add_demo(CLI::App & app) {
    auto o = std::make_shared<demo_opts>();
    auto * sub = app.add_subcommand("demo", "passkey retrieval over a long context with most of the KV cache on SSD");
    o->policy.p.name = "hillinfer";
    o->policy.p.alpha = 0.1;
    // The main job runs on what most machines have, an ordinary SSD (the host scores from the scoring
    // copy and reads only the selected KV); --storage emulator shows near-data scoring.
    o->kv.storage = "plain";
    sub->add_option("--ctx", o->n_ctx, "context size in tokens (the prompt fills it)")->capture_default_str();
    sub->add_option("--depth", o->depth, "where the key goes, in [0, 1] of the haystack (default: random)");
    sub->add_option("--haystack", o->haystack_file, "text file to take the haystack from (default: generated sentences)");
    sub->add_option("--seed", o->seed, "seed of the key, the depth and the haystack, an integer in "
                    "[0, 18446744073709551615] (2^64 - 1); -1: random (printed)")
        ->capture_default_str();
    sub->add_option("-m,--model", o->model, "model (default: the passkey model, made in the cache directory)");
    o->threads.add(*sub);
    o->kv.add(*sub);
    o->kv.budget_opt->description("hot KV pool in DRAM, bytes with K/M/G/T suffix (default: a quarter of the prompt's KV, "
                                  "so that at least 75% of it is cold)");
    o->policy.add(*sub);
    sub->add_flag("--json", o->json, "write one JSON object to stdout");
    sub->add_flag("--no-compare", o->no_compare, "skip the rerun of the answer's decode steps under policy full over "
                  "the same tiers (and the 'decode step:' line comparing their step times)");
    o->trace.add(*sub);
    return [o]() {
        o->trace.start({o->model, o->haystack_file, o->kv.csd_profile});
        const int rc = run_demo(*o);
        o->trace.finish("hillinfer demo");
        return rc;
    };
}

}  // namespace hill::cli
