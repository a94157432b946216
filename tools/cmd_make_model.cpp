// hillinfer make-model (random | bigram | passkey) -o FILE: models HillInfer builds itself.
#include <fmt/format.h>

#include <filesystem>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "core/sys_info.h"
#include "demo_text.h"
#include "model/synthetic_model.h"
#include "model/weight_scheme.h"
#include "tokenizer/chat_template.h"

namespace hill::cli {

command_fn add_make_model(CLI::App & app) {
    struct opts_t {
        std::string kind;
        std::string out;
        std::string text_file;
        std::string type = "f16";
        std::string seed = "1";  // parse_seed: [0, seed_max]
        std::string chat;        // --chat-template: a chat model of this family
        random_model_params rp;
    };
    auto o = std::make_shared<opts_t>();
    auto * sub = app.add_subcommand("make-model", "write a model HillInfer builds itself, as a GGUF file");
    sub->add_option("kind", o->kind,
                    "what to build: random (random weights of any shape), bigram (a word-bigram model of a text) or "
                    "passkey (retrieves a passkey at any context length)")
        ->required()
        ->check(CLI::IsMember({"random", "bigram", "passkey"}));
    sub->add_option("-o,--output", o->out, "GGUF file to write")->required();
    sub->add_option("--text", o->text_file, "bigram: training text (default: a short built-in story)");
    sub->add_option("--type", o->type,
                    "random: matrix type f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k or q4_k_m "
                    "(llama.cpp's Q4_K + Q6_K mix)")
        ->capture_default_str();
    sub->add_option("--n-vocab", o->rp.n_vocab, "random: vocabulary size (>= 259)")->capture_default_str();
    sub->add_option("--n-embd", o->rp.n_embd, "random: embedding size")->capture_default_str();
    sub->add_option("--n-ff", o->rp.n_ff, "random: feed-forward size")->capture_default_str();
    sub->add_option("--n-layer", o->rp.n_layer, "random: layers")->capture_default_str();
    sub->add_option("--n-head", o->rp.n_head, "random: query heads")->capture_default_str();
    sub->add_option("--n-head-kv", o->rp.n_head_kv, "random: key/value heads")->capture_default_str();
    const CLI::Option * n_ctx =
        sub->add_option("--n-ctx", o->rp.n_ctx, "trained context written to the metadata (passkey: default 131072)")
            ->capture_default_str();
    sub->add_option("--rope-freq-base", o->rp.rope_freq_base, "random: RoPE base")->capture_default_str();
    sub->add_option("--rope-scale", o->rp.rope_scaling_factor, "random: linear RoPE scaling factor")
        ->capture_default_str();
    sub->add_flag("--tied", o->rp.tied_output, "random: no output matrix (tied to the embedding)");
    sub->add_option("--arch", o->rp.arch, std::string("random: architecture, one of ") + random_model_archs)
        ->capture_default_str();
    sub->add_option("--n-swa", o->rp.n_swa, "random: sliding window in tokens (0: none; gemma2 needs one)")
        ->capture_default_str();
    sub->add_option("--chat-template", o->chat, "random: a chat model speaking this template (" +
                    chat_template::family_names() + "): its control tokens in the vocabulary, the template in the "
                    "metadata, replies that end by themselves");
    sub->add_option("--seed", o->seed, "random: seed, an integer in [0, 18446744073709551615] (2^64 - 1)")
        ->capture_default_str();
    return [o, sub, n_ctx]() {
        for (const CLI::Option * opt : sub->get_options()) {
            for (const char * kind : {"random", "bigram"}) {
                const bool kind_only = opt->get_description().rfind(std::string(kind) + ":", 0) == 0;
                if (kind_only && o->kind != kind && opt->count() > 0) {
                    fail_usage("{} applies to 'make-model {}' only, not to '{}'", opt->get_name(), kind, o->kind);
                }
            }
        }
        if (o->out.empty()) fail_usage("-o needs a file name");
        check_output_file("-o", o->out, {o->text_file});
        o->rp.seed = *parse_seed(o->seed, "--seed", false);
        const int64_t t0 = time_us();
        if (o->kind == "random") {
            const auto t = weight_scheme_from_name(o->type);
            if (!t) fail_usage("--type must be one of {}; got '{}'", weight_scheme_names(), o->type);
            o->rp.type = *t;
            if (!o->chat.empty()) {
                const chat_template ct = chat_template::named(o->chat);
                o->rp.control_tokens = ct.special_tokens();
                o->rp.chat_template = ct.reference_jinja();
                o->rp.chat_end_token = ct.end_of_turn().empty() ? "</s>" : std::string(ct.end_of_turn());
            }
            try {
                write_random_model(o->out, o->rp);
            } catch (const std::bad_alloc &) {
                const double n =
                    double(o->rp.n_vocab) * o->rp.n_embd * (o->rp.tied_output ? 1 : 2) +
                    double(o->rp.n_layer) * (2.0 * o->rp.n_embd * o->rp.n_embd +
                                             2.0 * o->rp.n_embd * o->rp.n_embd / o->rp.n_head * o->rp.n_head_kv +
                                             3.0 * o->rp.n_embd * o->rp.n_ff);
                fail_input(
                    "not enough memory to build a model of {:.3g} parameters ({} needs about {:.3g} GB in memory "
                    "while it is written)",
                    n, weight_scheme_name(o->rp.type), n * 4 / 1e9);
            }
        } else if (o->kind == "bigram") {
            const std::string text =
                o->text_file.empty() ? std::string(demo_text) : read_text_file(o->text_file, "text file");
            write_bigram_model(o->out, text, o->rp.n_ctx);
        } else {
            passkey_model_params pp;
            if (n_ctx->count() > 0) pp.n_ctx = o->rp.n_ctx;
            write_passkey_model(o->out, pp);
        }
        fmt::print(stderr, "wrote {} ({}) in {:.1f} s\n", o->out, format_bytes(std::filesystem::file_size(o->out)),
                   double(time_us() - t0) / 1e6);
        return 0;
    };
}

}  // namespace hill::cli
