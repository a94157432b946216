// hillinfer convert CHECKPOINT_DIR -o OUT.gguf [--type f16|q8_0|q4_k_m|...]: a Hugging Face
// checkpoint folder written out as GGUF (model/hf_convert.h says what is written).
#include <fmt/format.h>

#include <filesystem>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "core/sys_info.h"
#include "model/hf_convert.h"
#include "model/weight_scheme.h"

namespace hill::cli {

command_fn add_convert(CLI::App & app) {
    struct opts_t {
        std::string dir;
        std::string out;
        std::string type;
    };
    auto o = std::make_shared<opts_t>();
    auto * sub = app.add_subcommand("convert", "write a Hugging Face checkpoint folder out as a GGUF file");
    sub->add_option("checkpoint", o->dir,
                    "checkpoint folder: config.json, model.safetensors or model.safetensors.index.json + shards, "
                    "tokenizer files")
        ->required();
    sub->add_option("-o,--output", o->out, "GGUF file to write")->required();
    sub->add_option("--type", o->type,
                    "type of the weight matrices: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k "
                    "or q4_k_m (llama.cpp's Q4_K + Q6_K mix) (default: as the checkpoint stores them); norms and "
                    "biases stay f32");
    return [o]() {
        if (o->out.empty()) fail_usage("-o needs a file name");
        if (std::filesystem::is_directory(o->out)) fail_usage("-o '{}' is a directory, expected a file name", o->out);
        const std::filesystem::path dir = std::filesystem::path(o->out).parent_path();
        if (!dir.empty() && !std::filesystem::is_directory(dir)) {
            fail_usage("cannot write '{}': directory '{}' does not exist", o->out, dir.string());
        }
        convert_params p;
        if (!o->type.empty()) {
            const auto t = weight_scheme_from_name(o->type);
            if (!t) fail_usage("--type must be one of {}; got '{}'", weight_scheme_names(), o->type);
            p.type = *t;
        }
        const int64_t t0 = time_us();
        const convert_result r = convert_hf_to_gguf(o->dir, o->out, p);
        for (const std::string & w : r.warnings) fmt::print(stderr, "warning: {}\n", w);
        fmt::print(stderr, "wrote {} ({}): architecture {}, {} tensors, matrices {}{}{}, tokenizer {}, in {:.1f} s\n",
                   o->out, format_bytes(r.bytes_written), r.arch, r.n_tensors, weight_scheme_name(r.type),
                   r.n_permuted > 0 ? fmt::format(", {} q/k tensors permuted to adjacent pairs", r.n_permuted) : "",
                   r.n_fallback > 0
                       ? fmt::format(", {} matrices in a fallback type (rows not a multiple of the block)", r.n_fallback)
                       : "",
                   r.tokenizer_model.empty() ? "none" : r.tokenizer_model, double(time_us() - t0) / 1e6);
        return 0;
    };
}

}  // namespace hill::cli
