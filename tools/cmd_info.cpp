// hillinfer info -m MODEL: what a model is and what its KV cache costs.
#include "commands.h"
#include "common.h"
#include "core/sys_info.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace hill::cli {

command_fn add_info(CLI::App & app) {
    auto * sub = app.add_subcommand("info", "print a model's architecture, dimensions, weight types and KV cost");
    auto opts = std::make_shared<model_opts>();
    auto json = std::make_shared<bool>(false);
    opts->add(*sub);
    sub->add_flag("--json", *json, "print one JSON object");
    return [opts, json]() {
        auto m = opts->load();
        const hparams & hp = m->hp();
        const uint64_t kv_tok = hp.kv_bytes_per_token(ggml_type::f16);
        nlohmann::json types = nlohmann::json::object();
        for (auto [t, n] : m->params_by_type()) types[std::string(ggml_type_name(t))] = n;
        if (*json) {
            nlohmann::json j = {
                {"path", m->path()}, {"format", m->format()}, {"architecture", hp.arch}, {"n_vocab", hp.n_vocab},
                {"n_ctx_train", hp.n_ctx_train}, {"n_embd", hp.n_embd}, {"n_ff", hp.n_ff}, {"n_layer", hp.n_layer},
                {"n_head", hp.n_head}, {"n_head_kv", hp.n_head_kv}, {"head_dim", hp.head_dim},
                {"rope_freq_base", hp.rope_freq_base}, {"rope_freq_scale", hp.rope_freq_scale},
                {"rms_eps", hp.rms_eps}, {"output_tied", m->output_tied()}, {"n_params", m->n_params()},
                {"params_by_type", types}, {"kv_type", "F16"}, {"kv_bytes_per_token", kv_tok},
                {"kv_bytes_4k", kv_tok * 4096}, {"kv_bytes_32k", kv_tok * 32768}, {"kv_bytes_128k", kv_tok * 131072},
            };
            fmt::print("{}\n", j.dump(2));
            return 0;
        }
        fmt::print("model:            {} ({})\n", m->path(), m->format());
        fmt::print("architecture:     {}\n", hp.arch);
        fmt::print("vocabulary:       {} tokens\n", hp.n_vocab);
        fmt::print("trained context:  {} tokens\n", hp.n_ctx_train);
        fmt::print("embedding:        {}\n", hp.n_embd);
        fmt::print("feed-forward:     {}\n", hp.n_ff);
        fmt::print("layers:           {}\n", hp.n_layer);
        fmt::print("heads:            {} query, {} key/value ({}), head dim {}\n", hp.n_head, hp.n_head_kv,
                   hp.n_head == hp.n_head_kv ? "MHA" : hp.n_head_kv == 1 ? "MQA" : "GQA", hp.head_dim);
        fmt::print("rope:             freq base {}, linear scale {}\n", hp.rope_freq_base, 1.0f / hp.rope_freq_scale);
        fmt::print("output matrix:    {}\n", m->output_tied() ? "tied to the token embedding" : "separate");
        fmt::print("parameters:       {} ({:.2f} M)\n", m->n_params(), double(m->n_params()) / 1e6);
        std::string tl;
        for (auto [t, n] : m->params_by_type()) tl += fmt::format("{}{} {}", tl.empty() ? "" : ", ", ggml_type_name(t), n);
        fmt::print("weight types:     {}\n", tl);
        fmt::print("KV cache (F16):   {} per token; 4K: {}, 32K: {}, 128K: {}\n", format_bytes(kv_tok),
                   format_bytes(kv_tok * 4096), format_bytes(kv_tok * 32768), format_bytes(kv_tok * 131072));
        return 0;
    };
}

}  // namespace hill::cli
