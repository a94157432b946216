// hillinfer info -m MODEL: what a model is and what its KV cache costs.
#include "commands.h"
#include "common.h"
#include "core/sys_info.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace hill::cli {

namespace {

// The model's bias vectors, by role, as present in layer 0 (every layer has the same set).
std::vector<std::string> bias_names(const model & m) {
    std::vector<std::string> out;
    if (m.layers().empty()) return out;
    const layer_weights & l = m.layers()[0];
    const std::pair<const char *, const std::vector<float> *> all[] = {
        {"q", &l.bq}, {"k", &l.bk}, {"v", &l.bv}, {"attn_output", &l.bo}, {"ffn_up", &l.ffn_up_b},
        {"ffn_down", &l.ffn_down_b}, {"norm", &l.attn_norm_b}};
    for (const auto & [name, v] : all) {
        if (!v->empty()) out.emplace_back(name);
    }
    return out;
}

const char * layout_name(rope_layout l) {
    return l == rope_layout::rotate_half ? "rotate_half" : "adjacent_pairs";
}

// "RoPE, rotate-half pairs (i, i + head_dim/2), freq base 500000, linear scale 1, frequency
// factors 1 to 8 over 64 pairs (Llama 3 rope_scaling)", or "learned absolute embeddings, 2048
// positions".
std::string position_line(const model & m) {
    const hparams & hp = m.hp();
    if (hp.position == position_kind::learned) {
        return fmt::format("learned absolute embeddings, {} positions", m.pos_embd().n_rows);
    }
    std::string s = fmt::format("RoPE, {}, freq base {}, linear scale {}",
                                hp.rope_pairs == rope_layout::rotate_half ? "rotate-half pairs (i, i + head_dim/2)"
                                                                          : "adjacent pairs (2i, 2i + 1)",
                                hp.rope_freq_base, 1.0f / hp.rope_freq_scale);
    if (!hp.rope_freq_factors.empty()) {
        const auto [lo, hi] = std::minmax_element(hp.rope_freq_factors.begin(), hp.rope_freq_factors.end());
        s += fmt::format(", frequency factors {} to {} over {} pairs (Llama 3 rope_scaling)", *lo, *hi,
                         hp.rope_freq_factors.size());
    }
    return s;
}

std::string norm_line(const hparams & hp) {
    return fmt::format("{}, {}, eps {}", hp.norm == norm_kind::rms ? "RMSNorm" : "LayerNorm",
                       hp.norm_before ? "pre-norm" : "post-norm (no final norm)", hp.rms_eps);
}

std::string activation_line(const hparams & hp) {
    if (hp.ffn == ffn_kind::geglu) return "GeGLU (GELU-tanh-gated: gate, up, down)";
    return hp.ffn == ffn_kind::swiglu ? "SwiGLU (SiLU-gated: gate, up, down)" : "ReLU MLP (fc1, fc2)";
}

const char * ffn_name(const hparams & hp) {
    return hp.ffn == ffn_kind::geglu ? "geglu" : hp.ffn == ffn_kind::swiglu ? "swiglu" : "relu";
}

// "sliding window 4096 on 21 of 42 layers, scale 0.0625, soft-cap 50, final soft-cap 30"; "" when
// the attention is plain (every layer, 1/sqrt(head_dim), no caps).
std::string attention_line(const hparams & hp) {
    std::string s;
    const auto add = [&](const std::string & part) { s += (s.empty() ? "" : ", ") + part; };
    const auto n_swa = std::count(hp.swa_layers.begin(), hp.swa_layers.end(), 1);
    if (n_swa > 0) add(fmt::format("sliding window {} on {} of {} layers", hp.n_swa, n_swa, hp.n_layer));
    if (std::abs(hp.attn_scale * std::sqrt(float(hp.head_dim)) - 1.0f) > 1e-6f) add(fmt::format("scale {}", hp.attn_scale));
    if (hp.attn_softcap > 0.0f) add(fmt::format("soft-cap {}", hp.attn_softcap));
    if (hp.final_softcap > 0.0f) add(fmt::format("final soft-cap {}", hp.final_softcap));
    return s;
}

}  // namespace

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
                {"n_embd_word", hp.n_embd_word},
                {"position", hp.position == position_kind::rope ? "rope" : "learned"},
                {"rope_freq_base", hp.rope_freq_base}, {"rope_freq_scale", hp.rope_freq_scale},
                {"norm", hp.norm == norm_kind::rms ? "rms" : "layer"}, {"norm_before", hp.norm_before},
                {"ffn", ffn_name(hp)}, {"biases", bias_names(*m)},
                {"sliding_window", hp.n_swa}, {"swa_layers", hp.swa_layers}, {"attn_scale", hp.attn_scale},
                {"attn_softcap", hp.attn_softcap}, {"final_softcap", hp.final_softcap},
                {"rms_eps", hp.rms_eps}, {"output_tied", m->output_tied()}, {"n_params", m->n_params()},
                {"params_by_type", types}, {"kv_type", "F16"}, {"kv_bytes_per_token", kv_tok},
                {"kv_bytes_4k", kv_tok * 4096}, {"kv_bytes_32k", kv_tok * 32768}, {"kv_bytes_128k", kv_tok * 131072},
            };
            if (hp.position == position_kind::rope) {
                j["rope_layout"] = layout_name(hp.rope_pairs);
                j["rope_freq_factors"] = hp.rope_freq_factors;
            } else {
                j.erase("rope_freq_base");
                j.erase("rope_freq_scale");
                j["n_positions"] = m->pos_embd().n_rows;
            }
            fmt::print("{}\n", j.dump(2));
            return 0;
        }
        fmt::print("model:            {} ({})\n", m->path(), m->format());
        fmt::print("architecture:     {}\n", hp.arch);
        fmt::print("vocabulary:       {} tokens\n", hp.n_vocab);
        fmt::print("trained context:  {} tokens\n", hp.n_ctx_train);
        if (hp.n_embd_word != 0 && hp.n_embd_word != hp.n_embd) {
            fmt::print("embedding:        {} (word embedding {}, projected in and out)\n", hp.n_embd, hp.n_embd_word);
        } else {
            fmt::print("embedding:        {}\n", hp.n_embd);
        }
        fmt::print("feed-forward:     {}\n", hp.n_ff);
        fmt::print("layers:           {}\n", hp.n_layer);
        fmt::print("heads:            {} query, {} key/value ({}), head dim {}\n", hp.n_head, hp.n_head_kv,
                   hp.n_head == hp.n_head_kv ? "MHA" : hp.n_head_kv == 1 ? "MQA" : "GQA", hp.head_dim);
        fmt::print("positions:        {}\n", position_line(*m));
        fmt::print("normalization:    {}\n", norm_line(hp));
        fmt::print("activation:       {}\n", activation_line(hp));
        if (const std::string a = attention_line(hp); !a.empty()) fmt::print("attention:        {}\n", a);
        const std::vector<std::string> biases = bias_names(*m);
        std::string bl;
        for (const std::string & b : biases) bl += (bl.empty() ? "" : ", ") + b;
        fmt::print("biases:           {}\n", bl.empty() ? "none" : bl);
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
