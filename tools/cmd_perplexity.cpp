// hillinfer perplexity: how well the model predicts a text under an attention policy, in windows
// of -c tokens (engine/perplexity.h).
#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "core/sys_info.h"
#include "engine/perplexity.h"
#include "engine/run_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace hill::cli {

namespace {

struct perplexity_opts {
    model_opts model;
    prompt_opts text;
    thread_opts threads;
    kv_opts kv;
    policy_opts policy;
    int32_t n_ctx = 0;
    int32_t n_chunks = 0;
    bool json = false;
};

int run_perplexity(const perplexity_opts & o) {
    if (o.n_ctx < 0) fail_usage("-c must be >= 0 (0: the model's trained context), got {}", o.n_ctx);
    if (o.n_chunks < 0) fail_usage("--chunks must be >= 0 (0: all), got {}", o.n_chunks);
    o.kv.type();  // a bad --cache-type fails before the model is loaded
    const int n_threads = o.threads.resolve();
    const policy_params pol = o.policy.resolve(o.kv);
    const std::string text = o.text.read();
    auto m = o.model.load();
    const hparams & hp = m->hp();
    const tokenizer & tok = m->tokenizer();
    const int32_t n_ctx = o.n_ctx > 0 ? o.n_ctx : hp.n_ctx_train;
    const int32_t bos = tok.vocab().bos;
    if (bos < 0) fail_input("model '{}' has no BOS token to start the windows with", m->path());
    const std::vector<int32_t> ids = tok.encode(text, false);
    thread_pool pool(n_threads);
    session s(*m, o.kv.context(n_ctx, pol), pool);
    const int64_t per_window = n_ctx - 1;  // below 1: evaluate_perplexity refuses the context
    const int64_t n_windows =
        per_window < 1 ? 0
                       : std::min<int64_t>(int64_t(ids.size()) / per_window, o.n_chunks > 0 ? o.n_chunks : INT64_MAX);
    if (!o.json && n_windows > 0) {
        fmt::print(stderr, "perplexity: {} tokens of text, {} windows of {} tokens (-c {} with BOS)\n", ids.size(),
                   n_windows, per_window, n_ctx);
    }
    const int64_t t0 = time_us();
    int64_t last_print = t0, last_window = 0;
    std::string stop = "done";
    const perplexity_result r = evaluate_perplexity(s, ids, bos, o.n_chunks, [&](const perplexity_result & p) {
        if (interrupted()) {
            stop = "interrupted";
            return false;
        }
        if (o.json || p.n_windows == last_window) return true;
        last_window = p.n_windows;
        const int64_t now = time_us();
        if (now - last_print > 2'000'000 || p.n_windows == p.n_windows_total) {
            last_print = now;
            fmt::print(stderr, "[{}/{}] running perplexity {:.4f}\n", p.n_windows, p.n_windows_total, p.perplexity);
        }
        return true;
    });
    if (r.interrupted) stop = "interrupted";  // Ctrl-C while the storage device read the cold pool
    const double secs = double(time_us() - t0) / 1e6;
    if (o.json) {
        nlohmann::json j = {
            {"model", m->path()}, {"perplexity", r.perplexity}, {"tokens", r.n_tokens}, {"windows", r.n_windows}, {"n_ctx", n_ctx},
            {"stop", stop}, {"seconds", secs}, {"tokens_per_s", double(r.n_tokens) / std::max(secs, 1e-9)},
            {"peak_rss_bytes", peak_rss_bytes()}, {"kv", kv_json(s.ctx())}, {"storage", storage_json(s.ctx())}, {"policy", policy_json(s.ctx())},
            {"planner", planner_json(s.ctx())},
        };
        fmt::print("{}\n", j.dump());
    } else {
        fmt::print("perplexity: {:.4f} over {} tokens{}\n", r.perplexity, r.n_tokens,
                   stop == "done" ? std::string()
                                  : fmt::format(" (interrupted: {} of {} windows complete)", r.n_windows, r.n_windows_total));
    }
    fmt::print(stderr, "{} tokens in {:.1f} s ({:.0f} tokens/s), peak RSS {}\n{}", r.n_tokens, secs,
               double(r.n_tokens) / std::max(secs, 1e-9), format_bytes(peak_rss_bytes()), run_summary(s.ctx()));
    return stop == "interrupted" ? int(exit_code::interrupted) : 0;
}

}  // namespace

command_fn add_perplexity(CLI::App & app) {
    auto o = std::make_shared<perplexity_opts>();
    auto * sub = app.add_subcommand("perplexity", "perplexity of a text under an attention policy");
    o->model.add(*sub);
    o->text.what = "text";
    o->text.add(*sub);
    o->threads.add(*sub);
    o->kv.add(*sub);
    o->policy.add(*sub);
    sub->add_option("-c,--ctx-size", o->n_ctx, "window size in tokens, BOS included; 0 (default): the model's "
                    "trained context");
    sub->add_option("--chunks", o->n_chunks, "score at most this many windows; 0: all")->capture_default_str();
    sub->add_flag("--json", o->json, "write one JSON object to stdout");
    return [o]() { return run_perplexity(*o); };
}

}  // namespace hill::cli
