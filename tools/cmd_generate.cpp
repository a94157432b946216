// hillinfer generate: prefill a prompt, then sample tokens one by one, streaming the text; or, with
// --prompts FILE, many prompts decoded --parallel at a time with continuous batching.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <new>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/sys_info.h"
#include "engine/batch_generator.h"
#include "engine/prompt_cache.h"
#include "engine/run_report.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "format/json_file.h"

namespace hill::cli {

namespace {

struct generate_opts {
    model_opts model;
    prompt_opts prompt;
    thread_opts threads;
    kv_opts kv;
    policy_opts policy;
    trace_opts trace;
    int32_t n_predict = 128;
    int32_t n_ctx = 0;
    std::string prompt_cache;
    CLI::Option * prompt_cache_opt = nullptr;
    bool prompt_cache_fallback = false;
    sampling_opts sampling;
    bool special = false;          // --special: control tokens spelled in the prompt are tokens
    bool json = false;
    std::string prompts_file;      // --prompts: JSON Lines of {"prompt": TEXT, "n_predict": N}
    int32_t parallel = 0;          // --parallel: sequences at once (0: all prompts, up to 8)
    CLI::Option * parallel_opt = nullptr;
};

// The prompts of a JSON Lines file: one object per non-empty line, "prompt" (string, required) and
// "n_predict" (integer >= 0, default -n). Errors: unreadable file (usage); a line that is not such an
// object (bad_input, naming the file, the line and the field: format/json_file.h).
std::vector<std::pair<std::string, int32_t>> read_prompts(const std::string & path, int32_t n_default) {
    const std::string text = read_text_file(path, "prompts file");
    std::vector<std::pair<std::string, int32_t>> out;
    size_t line_no = 0, pos = 0;
    while (pos <= text.size()) {
        const size_t end = std::min(text.find('\n', pos), text.size());
        const std::string_view line = std::string_view(text).substr(pos, end - pos);
        pos = end + 1;
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
        const json_file doc = json_file::parse(line, fmt::format("{}, line {}", path, line_no), "a prompt");
        const json_value root = doc.root();
        root.for_each_member([&](const std::string & key, const json_value & v) {
            if (key != "prompt" && key != "n_predict") fail_input("{}: unknown field (a prompt has prompt and n_predict)", v.where());
        });
        out.emplace_back(root.required<std::string>("/prompt"),
                         int32_t(root.optional_int("/n_predict", 0, INT32_MAX).value_or(n_default)));
    }
    if (out.empty()) fail_input("--prompts '{}' holds no prompt", path);
    return out;
}

// generate --prompts: continuous batching of every prompt of the file (engine/batch_generator.h).
int run_generate_prompts(const generate_opts & o, const sampler_params & sp, int n_threads, const policy_params & pol) {
    if (o.prompt.text_opt->count() + o.prompt.file_opt->count() > 0) fail_usage("--prompts replaces -p and -f: give one");
    if (!o.prompt_cache.empty()) fail_usage("--prompt-cache takes one prompt, not --prompts");
    if (o.parallel_opt->count() > 0 && (o.parallel < 1 || o.parallel > 256)) {
        fail_usage("--parallel must be in [1, 256], got {}", o.parallel);
    }
    const auto prompts = read_prompts(o.prompts_file, o.n_predict);
    auto m = o.model.load();
    const hparams & hp = m->hp();
    const tokenizer & tok = m->tokenizer();
    const int32_t n_ctx = o.n_ctx > 0 ? o.n_ctx : hp.n_ctx_train;
    std::vector<generation_request> reqs(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        reqs[i].prompt = o.special ? tok.encode_with_special(prompts[i].first, tok.vocab().add_bos)
                                   : tok.encode(prompts[i].first, tok.vocab().add_bos);
        if (reqs[i].prompt.empty()) fail_usage("prompt {} of '{}' is empty and the model has no BOS token", i + 1, o.prompts_file);
        reqs[i].n_predict = prompts[i].second;
        reqs[i].sampling = o.sampling.ban_ends(sp, {tok.vocab().eos});
        reqs[i].sampling.seed = sp.seed + i;  // one stream per prompt, whatever the batch
    }
    // No more sequences than prompts (each takes its share of the hot pool and its scratch).
    const int parallel = int(std::min<size_t>(prompts.size(), size_t(o.parallel > 0 ? o.parallel : 8)));
    thread_pool pool(n_threads);
    context ctx(*m, o.kv.context(n_ctx, pol, parallel), pool);
    batch_generator gen(ctx, parallel, tok.vocab().eos);
    // Text (or JSON) of each prompt printed in input order as soon as it and every earlier one finished.
    std::vector<generation_result> done(prompts.size());
    std::vector<char> finished(prompts.size(), 0);
    size_t next_out = 0;
    const auto emit = [&] {
        for (; next_out < prompts.size() && finished[next_out] != 0; ++next_out) {
            const generation_result & r = done[next_out];
            if (!r.error.empty()) fmt::print(stderr, "prompt {} failed: {}\n", next_out + 1, r.error);
            std::string text;
            for (const int32_t id : r.ids) text += tok.token_to_piece(id);
            if (o.json) {
                nlohmann::json j = {{"index", next_out}, {"prompt_tokens", r.prompt_tokens}, {"generated_tokens", r.ids.size()},
                                    {"ids", r.ids}, {"text", text}, {"stop", r.stop}, {"prefill_s", r.prefill_s},
                                    {"decode_s", r.decode_s}, {"decode_steps", r.decode_steps}, {"max_batch", r.max_batch},
                                    {"seed", reqs[next_out].sampling.seed}};
                if (!r.error.empty()) j["error"] = r.error;
                fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
            } else {
                fmt::print("--- prompt {} ({} tokens, {} generated, stop {}{}) ---\n{}{}\n", next_out + 1, r.prompt_tokens,
                           r.ids.size(), r.stop, r.error.empty() ? std::string() : ": " + r.error, prompts[next_out].first, text);
            }
            std::fflush(stdout);
        }
    };
    batch_progress cb;
    cb.on_done = [&](size_t i, const generation_result & r) {
        done[i] = r;
        finished[i] = 1;
        emit();
    };
    cb.stop_requested = interrupted;
    // Ctrl-C stops a prompt's prefill within a layer (its request ends "interrupted"), not after it.
    cb.on_prefill = [](int64_t, int64_t) { throw_if_stopped("prefill"); };
    const int64_t t0 = time_us();
    const std::vector<generation_result> results = gen.run(reqs, cb);
    for (size_t i = 0; i < results.size(); ++i) {
        if (finished[i] == 0) {
            done[i] = results[i];
            finished[i] = 1;
        }
    }
    emit();
    const double wall = double(time_us() - t0) / 1e6;
    const batch_generator::totals & t = gen.last_totals();
    int n_error = 0, n_interrupted = 0;
    for (const generation_result & r : results) {
        n_error += r.stop == "error" ? 1 : 0;
        n_interrupted += r.stop == "interrupted" ? 1 : 0;
    }
    fmt::print(
        stderr,
        "prompts: {} ({} prompt tokens prefilled), parallel {}; prefill {:.1f} tokens/s; decode: {} tokens in {} steps "
        "(largest batch {}), {:.1f} tokens/s aggregate; wall {:.1f} s | peak RSS {} | threads {}, seed {}{}\n",
        results.size(), t.prompt_tokens, parallel, t.prefill_s > 0 ? double(t.prompt_tokens) / t.prefill_s : 0.0,
        t.tokens, t.steps, t.max_batch, t.decode_s > 0 ? double(t.tokens) / t.decode_s : 0.0, wall,
        format_bytes(peak_rss_bytes()), n_threads, sp.seed,
        n_error > 0 ? fmt::format(" | {} failed", n_error) : std::string());
    fmt::print(stderr, "{}", run_summary(ctx));
    if (n_interrupted > 0) return int(exit_code::interrupted);
    return n_error > 0 ? int(exit_code::bad_input) : 0;
}

int run_generate(const generate_opts & o) {
    if (o.n_predict < 0) fail_usage("-n must be >= 0, got {}", o.n_predict);
    if (o.n_ctx < 0) fail_usage("-c must be >= 0 (0: the model's trained context), got {}", o.n_ctx);
    o.kv.type();  // a bad --cache-type fails before the model is loaded
    const sampler_params sp = o.sampling.resolve();
    const int n_threads = o.threads.resolve();
    const policy_params pol = o.policy.resolve(o.kv);
    if (!o.prompts_file.empty()) return run_generate_prompts(o, sp, n_threads, pol);
    if (o.parallel_opt->count() > 0) fail_usage("--parallel goes with --prompts (sequences decoded together)");
    const std::string prompt = o.prompt.read();
    if (o.prompt_cache_opt->count() > 0 && o.prompt_cache.empty()) fail_usage("--prompt-cache needs a file name");
    if (o.prompt_cache_fallback && o.prompt_cache.empty()) fail_usage("--prompt-cache-fallback needs --prompt-cache FILE");
    if (!o.prompt_cache.empty()) {
        // Fail before the prefill, not after it, when the cache could not be written.
        check_output_file("--prompt-cache", o.prompt_cache,
                          {o.model.path, o.model.tokenizer, o.prompt.file, o.kv.csd_profile});
    }

    auto m = o.model.load();
    const hparams & hp = m->hp();
    const tokenizer & tok = m->tokenizer();
    const int32_t n_ctx = o.n_ctx > 0 ? o.n_ctx : hp.n_ctx_train;
    std::vector<int32_t> prompt_ids =
        o.special ? tok.encode_with_special(prompt, tok.vocab().add_bos) : tok.encode(prompt, tok.vocab().add_bos);
    if (prompt_ids.empty()) fail_usage("the prompt is empty and the model has no BOS token to start from");
    if (int64_t(prompt_ids.size()) > n_ctx) {
        fail_usage("the prompt is {} tokens, longer than the context of {} tokens; raise -c (the model was trained "
                   "for {})", prompt_ids.size(), n_ctx, hp.n_ctx_train);
    }

    thread_pool pool(n_threads);
    session s(*m, o.kv.context(n_ctx, pol), pool);
    sampler smp(o.sampling.ban_ends(sp, {tok.vocab().eos}), hp.n_vocab);
    for (int32_t id : prompt_ids) smp.accept(id);

    prefill_progress progress;
    const int64_t t_prefill0 = time_us();
    int64_t n_cached = 0;  // prompt tokens whose KV came from --prompt-cache
    if (!o.prompt_cache.empty() && std::filesystem::exists(o.prompt_cache)) {
        try {
            n_cached = load_prompt_cache(o.prompt_cache, s, prompt_ids);
        } catch (const error & e) {
            if (!o.prompt_cache_fallback) throw;
            log_warn(
                "{}; prefilling the whole prompt instead (--prompt-cache-fallback), then rewriting the file "
                "for this model",
                e.what());
        }
    }
    if (!o.json) {
        fmt::print("{}", prompt);
        std::fflush(stdout);
    }
    std::string stop = "length";
    bool prefilled = true;
    try {
        s.eval(std::span<const int32_t>(prompt_ids).subspan(size_t(n_cached)), false, std::ref(progress));
    } catch (const error & e) {
        // Ctrl-C during prefill (the progress callback throws): the session is back where it was;
        // nothing is generated, and the summary below still reports the run.
        if (e.code() != exit_code::interrupted) throw;
        stop = "interrupted";
        prefilled = false;
    }
    const int64_t t_prefill = time_us() - t_prefill0;
    if (prefilled && !o.prompt_cache.empty() && n_cached + 1 < int64_t(prompt_ids.size())) {
        // The cache only saves work: a failed save (a full disk, a directory that became unwritable)
        // leaves the previous cache file as it was, and generation goes on.
        try {
            save_prompt_cache(o.prompt_cache, s, prompt_ids);
        } catch (const error & e) {
            log_warn("prompt cache '{}' not saved: {}; the file is left as it was, and generation goes on",
                     o.prompt_cache, e.what());
        } catch (const std::bad_alloc &) {
            log_warn(
                "prompt cache '{}' not saved: out of memory for one layer's KV; the file is left as it was, and "
                "generation goes on",
                o.prompt_cache);
        }
    }

    // At most n_ctx - n_past + 1 tokens can be generated (the last one is sampled when the context
    // is full): reserve that, not -n, which may be far larger.
    const int64_t n_room = int64_t(n_ctx) - s.n_past() + 1;
    std::vector<int32_t> out_ids;
    out_ids.reserve(size_t(std::min<int64_t>(o.n_predict, n_room)));
    std::string out_text;
    std::vector<float> logits(size_t(hp.n_vocab));
    const bool only_bos = prompt_ids.size() == 1 && prompt_ids[0] == tok.vocab().bos;
    int64_t n_decode = 0;  // forward passes of one generated token
    const int64_t t_decode0 = time_us();
    for (int32_t i = 0; prefilled && i < o.n_predict; ++i) {
        if (interrupted()) {
            stop = "interrupted";
            break;
        }
        std::copy(s.logits(), s.logits() + hp.n_vocab, logits.begin());
        const int32_t id = smp.sample(logits.data());
        if (id == tok.vocab().eos) {
            stop = "eos";
            break;
        }
        smp.accept(id);
        out_ids.push_back(id);
        std::string piece = tok.token_to_piece(id);
        // After a lone BOS, SentencePiece decoding drops the leading space of the first piece.
        if (out_ids.size() == 1 && only_bos && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
        out_text += piece;
        if (!o.json) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            if (std::ferror(stdout)) {  // a closed pipe, a full disk: the run ends, exit 1 names the fault
                stop = "output";
                break;
            }
        }
        if (i + 1 == o.n_predict) break;
        if (s.n_past() >= n_ctx) {
            stop = "context";
            break;
        }
        try {
            s.eval(std::span<const int32_t>(&id, 1));
        } catch (const error & e) {
            if (e.code() != exit_code::interrupted) throw;
            stop = "interrupted";  // Ctrl-C while the storage device worked: the step was rolled back
            break;
        }
        ++n_decode;
    }
    const int64_t t_decode = time_us() - t_decode0;
    if (!o.json) fmt::print("\n");

    const double prefill_tps = t_prefill > 0 ? double(prompt_ids.size()) / (double(t_prefill) / 1e6) : 0.0;
    const std::string prefill_text =
        prefilled ? fmt::format("prefill {:.1f} tokens/s", prefill_tps)
                  : fmt::format("prefill interrupted after {:.1f} s", double(t_prefill) / 1e6);
    // Decode rate: sampling plus one forward pass per generated token, over the steps that ran one.
    const double decode_tps = n_decode > 0 && t_decode > 0 ? double(n_decode) / (double(t_decode) / 1e6) : 0.0;
    const uint64_t rss = peak_rss_bytes();
    if (o.json) {
        nlohmann::json j = {
            {"model", m->path()}, {"prompt_tokens", prompt_ids.size()}, {"prompt_cached_tokens", n_cached}, {"generated_tokens", out_ids.size()},
            {"ids", out_ids}, {"text", out_text}, {"stop", stop}, {"n_ctx", n_ctx}, {"n_threads", n_threads},
            {"seed", sp.seed}, {"prefill_s", double(t_prefill) / 1e6},
            {"prefill_tokens_per_s", prefilled ? nlohmann::json(prefill_tps) : nlohmann::json(nullptr)},
            {"decode_s", double(t_decode) / 1e6}, {"decode_steps", n_decode},
            {"decode_tokens_per_s", n_decode > 0 ? nlohmann::json(decode_tps) : nlohmann::json(nullptr)},
            {"peak_rss_bytes", rss}, {"kv", kv_json(s.ctx())}, {"storage", storage_json(s.ctx())}, {"policy", policy_json(s.ctx())},
            {"planner", planner_json(s.ctx())},
        };
        fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    fmt::print(stderr,
               "{}prompt: {}{}, {} | generated: {} ({}), decode {} | "
               "peak RSS {} | threads {}, seed {}\n",
               o.json ? "" : "\n", format_count(int64_t(prompt_ids.size()), "token"),
               n_cached > 0 ? fmt::format(" ({} from the prompt cache)", n_cached) : std::string(), prefill_text,
               format_count(int64_t(out_ids.size()), "token"), stop,
               n_decode > 0 ? fmt::format("{:.1f} tokens/s", decode_tps) : std::string("n/a (no decode step)"),
               format_bytes(rss), n_threads, sp.seed);
    fmt::print(stderr, "{}", run_summary(s.ctx()));
    return stop == "interrupted" ? int(exit_code::interrupted) : 0;
}

}  // namespace

command_fn add_generate(CLI::App & app) {
    auto o = std::make_shared<generate_opts>();
    auto * sub = app.add_subcommand("generate", "generate text from a prompt");
    o->model.add(*sub);
    o->prompt.add(*sub);
    o->threads.add(*sub);
    o->kv.add(*sub);
    o->policy.add(*sub);
    sub->add_option("-n,--n-predict", o->n_predict, "tokens to generate (stops earlier at EOS)")->capture_default_str();
    sub->add_option("-c,--ctx-size", o->n_ctx, "context size in tokens; 0 (default): the model's trained context");
    o->sampling.add(*sub);
    o->prompt_cache_opt = sub->add_option("--prompt-cache", o->prompt_cache,
                    "file for the prompt's KV: loaded when the prompt starts with its tokens, written after prefill");
    sub->add_flag("--prompt-cache-fallback", o->prompt_cache_fallback,
                  "when the prompt cache is refused (another model, corrupt), prefill in full and rewrite it");
    sub->add_flag("--special", o->special, "control tokens spelled in the prompt (<s>, <|im_start|>, ...) are those tokens, as "
                  "in a chat template's text; without it they are plain text");
    sub->add_flag("--json", o->json, "write one JSON object to stdout instead of streaming text (--prompts: one "
                  "per prompt, in input order)");
    sub->add_option("--prompts", o->prompts_file, "JSON Lines file of prompts, one {\"prompt\": TEXT, \"n_predict\": N} "
                    "per line (n_predict optional: -n); decoded --parallel at a time with continuous batching");
    o->parallel_opt = sub->add_option("--parallel", o->parallel, "--prompts: sequences decoded together (default: all "
                                      "prompts, up to 8)");
    o->trace.add(*sub);
    return [o]() {
        o->trace.start(
            {o->model.path, o->model.tokenizer, o->prompt.file, o->prompts_file, o->kv.csd_profile, o->prompt_cache});
        const int rc = run_generate(*o);
        o->trace.finish("hillinfer generate");
        return rc;
    };
}

}  // namespace hill::cli
