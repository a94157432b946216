// hillinfer demo: passkey retrieval over a long context with most of the KV cache on SSD. Makes the
// passkey model (docs/passkey.md) in the cache directory if it is not there, builds a prompt of
// --ctx tokens with a 5-digit key at a random (or given) depth, runs it under policy hillinfer with
// a hot budget that puts at least 75% of the KV in the cold pool, and says whether the key came back.
#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sys_info.h"
#include "engine/passkey.h"
#include "engine/run_report.h"
#include "model/synthetic_model.h"

#include <fmt/format.h>

#include <filesystem>
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
};

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
    if (o.depth != -1.0 && !(o.depth >= 0.0 && o.depth <= 1.0)) fail_usage("--depth must be in [0, 1], got {}", o.depth);
    const uint64_t seed = parse_seed(o.seed, "--seed", true).value_or(std::random_device{}());
    const int n_threads = o.threads.resolve();
    const policy_params pol = o.policy.resolve(o.kv.storage_kind());
    o.kv.type();
    std::mt19937_64 rng(seed);
    const double depth = o.depth >= 0.0 ? o.depth : double(rng() % 101) / 100.0;
    const std::string haystack = o.haystack_file.empty() ? std::string() : read_text_file(o.haystack_file, "haystack file");
    if (!o.haystack_file.empty() && haystack.empty()) fail_usage("the haystack file '{}' is empty", o.haystack_file);

    auto m = model::load(o.model.empty() ? passkey_model_path(o.n_ctx) : o.model);
    // The prompt leaves room for the answer: 5 digits and a few tokens around them.
    const passkey_prompt prompt = make_passkey_prompt(
        m->tokenizer(), passkey_prompt_params{.n_tokens = o.n_ctx - 8, .depth = depth, .seed = seed, .haystack = haystack});
    context_params sp = o.kv.context(o.n_ctx, pol);
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
        // Ctrl-C during prefill: the summary of what ran, as generate prints it.
        fmt::print(stderr, "prompt: {} tokens, prefill interrupted after {:.1f} s | no answer | peak RSS {} | threads "
                   "{}\n{}", ids.size(), double(time_us() - t0) / 1e6, format_bytes(peak_rss_bytes()), n_threads,
                   run_summary(s.ctx()));
        return int(exit_code::interrupted);
    }
    const int64_t t1 = time_us();
    s.eval(std::span<const int32_t>(&ids.back(), 1));
    const passkey_answer a = answer_passkey(s, prompt.passkey);
    const int64_t t2 = time_us();
    const double prefill_tps = double(ids.size()) / std::max(1e-9, double(t1 - t0) / 1e6);
    const int64_t n_steps = s.n_past() - int64_t(ids.size()) + 1;
    if (o.json) {
        const nlohmann::json j = {
            {"passkey", prompt.passkey}, {"answer", a.text}, {"digits", a.digits}, {"correct", a.correct},
            {"prompt_tokens", ids.size()}, {"depth", depth}, {"seed", seed}, {"n_ctx", o.n_ctx},
            {"prefill_s", double(t1 - t0) / 1e6}, {"prefill_tokens_per_s", prefill_tps},
            {"decode_s", double(t2 - t1) / 1e6}, {"decode_steps", n_steps}, {"peak_rss_bytes", peak_rss_bytes()},
            {"kv", kv_json(s.ctx())}, {"storage", storage_json(s.ctx())}, {"policy", policy_json(s.ctx())},
        };
        fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
        fmt::print("passkey {} | answer '{}' | {}\n", prompt.passkey, a.text, a.correct ? "correct" : "WRONG");
    }
    fmt::print(stderr, "prompt: {} tokens, prefill {:.1f} tokens/s ({:.1f} s) | answer: {} decode steps in {:.2f} s | "
               "peak RSS {} | threads {}\n{}", ids.size(), prefill_tps, double(t1 - t0) / 1e6, n_steps,
               double(t2 - t1) / 1e6, format_bytes(peak_rss_bytes()), n_threads, run_summary(s.ctx()));
    return a.correct ? 0 : int(exit_code::check_failed);
}

}  // namespace

command_fn add_demo(CLI::App & app) {
    auto o = std::make_shared<demo_opts>();
    auto * sub = app.add_subcommand("demo", "passkey retrieval over a long context with most of the KV cache on SSD");
    o->policy.p.name = "hillinfer";
    o->policy.p.alpha = 0.1;
    o->kv.storage = "emulator";  // the main job shows near-data scoring of the cold pool
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
    o->trace.add(*sub);
    return [o]() {
        o->trace.start();
        const int rc = run_demo(*o);
        o->trace.finish("hillinfer demo");
        return rc;
    };
}

}  // namespace hill::cli
