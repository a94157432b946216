// hillinfer serve: the OpenAI HTTP API over the engine's batches (server/server.h, docs/serve.md).
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/run_report.h"
#include "server/server.h"

namespace hill::cli {

namespace {

struct serve_opts {
    model_opts model;
    thread_opts threads;
    kv_opts kv;
    policy_opts policy;
    server::server_params srv;
    int32_t n_ctx = 0;
    std::string body_limit = "1M";
    std::string cache_dir_limit = "0";
    std::string template_name;
    bool no_prefix_reuse = false;
};

int run_serve(const serve_opts & o) {
    if (o.n_ctx < 0) fail_usage("-c must be >= 0 (0: the model's trained context), got {}", o.n_ctx);
    if (o.srv.parallel < 1 || o.srv.parallel > 256)
        fail_usage("--parallel must be in [1, 256], got {}", o.srv.parallel);
    if (o.srv.queue < 0 || o.srv.queue > 4096) fail_usage("--queue must be in [0, 4096], got {}", o.srv.queue);
    if (o.srv.port < 0 || o.srv.port > 65535)
        fail_usage("--port must be in [0, 65535] (0: any free port), got {}", o.srv.port);
    if (o.srv.prefill_chunk < 0)
        fail_usage("--prefill-chunk must be >= 0 (0: whole prompts), got {}", o.srv.prefill_chunk);
    if (o.srv.default_max_tokens < 0) fail_usage("-n must be >= 0, got {}", o.srv.default_max_tokens);
    if (!(o.srv.shutdown_wait_s >= 0))
        fail_usage("--shutdown-wait must be >= 0 seconds, got {}", o.srv.shutdown_wait_s);
    server::server_params sp = o.srv;
    sp.prefix_reuse = !o.no_prefix_reuse;
    sp.body_limit_bytes = parse_bytes(o.body_limit, "--body-limit");
    sp.cache_dir_limit_bytes = o.cache_dir_limit == "0" ? 0 : parse_bytes(o.cache_dir_limit, "--cache-dir-limit");
    if (sp.cache_dir_limit_bytes > 0 && sp.cache_dir.empty()) fail_usage("--cache-dir-limit needs --cache-dir DIR");
    o.kv.type();  // a bad --cache-type fails before the model is loaded
    const int n_threads = o.threads.resolve();
    const policy_params pol = o.policy.resolve(o.kv);
    std::optional<chat_template> tmpl;
    if (!o.template_name.empty()) tmpl = chat_template::named(o.template_name);

    auto m = o.model.load();
    if (!tmpl) {
        const std::string jinja = read_chat_template(m->path());
        if (!jinja.empty()) tmpl = chat_template::recognize(jinja);
    }
    if (sp.model_id.empty()) sp.model_id = std::filesystem::path(m->path()).filename().string();
    const int32_t n_ctx = o.n_ctx > 0 ? o.n_ctx : m->hp().n_ctx_train;
    context_params cp = o.kv.context(n_ctx, pol, sp.parallel);
    cp.storage.stop_requested = nullptr;  // SIGTERM lets the running streams finish (server::run)
    thread_pool pool(n_threads);
    context ctx(*m, cp, pool);
    server::server srv(*m, ctx, tmpl, sp);
    const int port = srv.bind();
    fmt::print(stderr,
               "hillinfer serve: {} (context {} tokens, --parallel {}, chat template {}, policy {}) listening on "
               "http://{}:{}\n",
               sp.model_id, n_ctx, sp.parallel, tmpl ? std::string(tmpl->name()) : "none", pol.name, sp.host, port);
    std::fflush(stderr);
    srv.run(interrupted);
    fmt::print(stderr, "hillinfer serve: stopped\n{}", run_summary(ctx));
    // ok, not exit_code::interrupted (130): SIGTERM or SIGINT is how a server is stopped, and a service
    // manager takes a non-zero exit for a failure (docs/serve.md, Shutdown).
    return int(exit_code::ok);
}

}  // namespace

command_fn add_serve(CLI::App & app) {
    auto o = std::make_shared<serve_opts>();
    auto * sub = app.add_subcommand("serve", "serve the model over the OpenAI HTTP API (completions, chat, streaming)");
    o->model.add(*sub);
    o->threads.add(*sub);
    o->kv.add(*sub);
    o->policy.add(*sub);
    sub->add_option("-c,--ctx-size", o->n_ctx,
                    "context size of each sequence in tokens; 0 (default): the model's trained "
                    "context");
    sub->add_option("--host", o->srv.host, "address to listen on")->capture_default_str();
    sub->add_option("--port", o->srv.port, "TCP port (0: any free port, printed at start)")->capture_default_str();
    sub->add_option("--parallel", o->srv.parallel, "requests decoding at once (sequences of the context)")
        ->capture_default_str();
    sub->add_option("--queue", o->srv.queue, "requests waiting for a sequence at most; more get 503")
        ->capture_default_str();
    sub->add_option("--api-key", o->srv.api_key, "require 'Authorization: Bearer KEY' on /v1/*");
    sub->add_option("--body-limit", o->body_limit,
                    "largest request body, bytes with a K, M, G or T suffix (larger: 413)")
        ->capture_default_str();
    sub->add_option("--prefill-chunk", o->srv.prefill_chunk,
                    "prompt tokens prefilled per step between the running "
                    "streams' decode steps (0: whole prompts)")
        ->capture_default_str();
    sub->add_flag("--no-prefix-reuse", o->no_prefix_reuse,
                  "free a finished request's KV at once instead of keeping it "
                  "for a prompt with the same prefix (a returning conversation)");
    sub->add_option("--cache-dir", o->srv.cache_dir,
                    "on-disk prompt cache: the KV of finished conversations, content-addressed by their tokens, "
                    "reused by a prompt with the same prefix (created if missing)");
    sub->add_option(
           "--cache-dir-limit", o->cache_dir_limit,
           "size limit of --cache-dir, bytes with a K, M, G or T suffix, least recently used evicted (0: none)")
        ->capture_default_str();
    sub->add_option("-n,--n-predict", o->srv.default_max_tokens,
                    "completions: tokens generated when a request gives "
                    "no max_tokens (chat: until the end of the turn)")
        ->capture_default_str();
    sub->add_option("--shutdown-wait", o->srv.shutdown_wait_s,
                    "SIGTERM/SIGINT: seconds the running requests may take to "
                    "finish")
        ->capture_default_str();
    sub->add_option("--model-id", o->srv.model_id, "the model's name in the API (default: the model file's name)");
    sub->add_option("--chat-template", o->template_name,
                    "chat template family instead of the model's own: " + chat_template::family_names());
    return [o]() { return run_serve(*o); };
}

}  // namespace hill::cli
