// hillinfer generate: prefill a prompt, then sample tokens one by one, streaming the text.
#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "core/sys_info.h"
#include "core/log.h"
#include "engine/prompt_cache.h"
#include "engine/sampler.h"
#include "engine/session.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <new>
#include <random>
#include <unistd.h>

namespace hill::cli {

namespace {

struct generate_opts {
    model_opts model;
    prompt_opts prompt;
    thread_opts threads;
    kv_opts kv;
    policy_opts policy;
    int32_t n_predict = 128;
    int32_t n_ctx = 0;
    std::string prompt_cache;
    CLI::Option * prompt_cache_opt = nullptr;
    bool prompt_cache_fallback = false;
    sampler_params sp;
    std::string seed = "-1";  // parse_seed: [0, seed_max] or -1 (random)
    bool json = false;
};

int run_generate(const generate_opts & o) {
    if (o.n_predict < 0) fail_usage("-n must be >= 0, got {}", o.n_predict);
    if (o.n_ctx < 0) fail_usage("-c must be >= 0 (0: the model's trained context), got {}", o.n_ctx);
    o.kv.type();  // a bad --cache-type fails before the model is loaded
    sampler_params sp = o.sp;
    sp.seed = parse_seed(o.seed, "--seed", true).value_or(std::random_device{}());
    validate(sp);
    const int n_threads = o.threads.resolve();
    const policy_params pol = o.policy.resolve(o.kv.storage_kind());
    const std::string prompt = o.prompt.read();
    if (o.prompt_cache_opt->count() > 0 && o.prompt_cache.empty()) fail_usage("--prompt-cache needs a file name");
    if (o.prompt_cache_fallback && o.prompt_cache.empty()) fail_usage("--prompt-cache-fallback needs --prompt-cache FILE");
    if (!o.prompt_cache.empty()) {
        // Fail before the prefill, not after it, when the cache could not be written.
        const std::filesystem::path parent = std::filesystem::absolute(o.prompt_cache).parent_path();
        if (!std::filesystem::is_directory(parent) || ::access(parent.c_str(), W_OK) != 0) {
            fail_usage("--prompt-cache '{}': directory '{}' does not exist or is not writable", o.prompt_cache,
                       parent.string());
        }
    }

    auto m = o.model.load();
    const hparams & hp = m->hp();
    const tokenizer & tok = m->tokenizer();
    const int32_t n_ctx = o.n_ctx > 0 ? o.n_ctx : hp.n_ctx_train;
    std::vector<int32_t> prompt_ids = tok.encode(prompt, tok.vocab().add_bos);
    if (prompt_ids.empty()) fail_usage("the prompt is empty and the model has no BOS token to start from");
    if (int64_t(prompt_ids.size()) > n_ctx) {
        fail_usage("the prompt is {} tokens, longer than the context of {} tokens; raise -c (the model was trained "
                   "for {})", prompt_ids.size(), n_ctx, hp.n_ctx_train);
    }

    thread_pool pool(n_threads);
    session s(*m, o.kv.session(n_ctx, pol), pool);
    sampler smp(sp, hp.n_vocab);
    for (int32_t id : prompt_ids) smp.accept(id);

    prefill_progress progress;
    const int64_t t_prefill0 = time_us();
    int64_t n_cached = 0;  // prompt tokens whose KV came from --prompt-cache
    if (!o.prompt_cache.empty() && std::filesystem::exists(o.prompt_cache)) {
        try {
            n_cached = load_prompt_cache(o.prompt_cache, s, prompt_ids);
        } catch (const error & e) {
            if (!o.prompt_cache_fallback) throw;
            log_warn("{}; prefilling the whole prompt instead (--prompt-cache-fallback)", e.what());
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
            log_warn("prompt cache '{}' not saved: {}; generating without it", o.prompt_cache, e.what());
        } catch (const std::bad_alloc &) {
            log_warn("prompt cache '{}' not saved: out of memory for one layer's KV; generating without it",
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
            {"peak_rss_bytes", rss}, {"kv", kv_json(s.kv())}, {"storage", storage_json(s.storage(), s.kv())}, {"policy", policy_json(s.policy(), pol)},
        };
        fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    fmt::print(stderr, "{}prompt: {} tokens{}, {} | generated: {} tokens ({}), decode {} | "
               "peak RSS {} | threads {}, seed {}\n",
               o.json ? "" : "\n", prompt_ids.size(),
               n_cached > 0 ? fmt::format(" ({} from the prompt cache)", n_cached) : std::string(), prefill_text,
               out_ids.size(), stop,
               n_decode > 0 ? fmt::format("{:.1f} tokens/s", decode_tps) : std::string("n/a (no decode step)"),
               format_bytes(rss), n_threads, sp.seed);
    fmt::print(stderr, "{}{}", policy_summary(s.policy(), pol), kv_summary(s.kv()) + storage_summary(s.storage(), s.kv()));
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
    sub->add_option("--temp", o->sp.temperature, "temperature; 0: greedy")->capture_default_str();
    sub->add_option("--top-k", o->sp.top_k, "keep the k most likely tokens; 0: off")->capture_default_str();
    sub->add_option("--top-p", o->sp.top_p, "nucleus sampling mass in (0, 1]; 1: off")->capture_default_str();
    sub->add_option("--min-p", o->sp.min_p, "drop tokens below min-p times the top probability; 0: off")
        ->capture_default_str();
    sub->add_option("--repeat-penalty", o->sp.repeat_penalty, "penalty for recent tokens; 1: off")->capture_default_str();
    sub->add_option("--repeat-last-n", o->sp.repeat_last_n, "how many recent tokens the penalty sees")
        ->capture_default_str();
    o->prompt_cache_opt = sub->add_option("--prompt-cache", o->prompt_cache,
                    "file for the prompt's KV: loaded when the prompt starts with its tokens, written after prefill");
    sub->add_flag("--prompt-cache-fallback", o->prompt_cache_fallback,
                  "when the prompt cache is refused (another model, corrupt), prefill in full and rewrite it");
    sub->add_option("--seed", o->seed, "random seed, an integer in [0, 18446744073709551615] (2^64 - 1); -1: random "
                    "(printed at the end)")->capture_default_str();
    sub->add_flag("--json", o->json, "write one JSON object to stdout instead of streaming text");
    return [o]() { return run_generate(*o); };
}

}  // namespace hill::cli
