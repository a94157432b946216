// A model from a Hugging Face checkpoint folder (format/hf_checkpoint.h): config.json names the
// architecture (model/hf_names.h: model_type, else architectures[0]) and its hyperparameters; the
// safetensors tensors are renamed to their GGUF names (hf_names.h) and used in place: the views
// point into the mapped shards, F32, F16 or BF16 as stored.
//
// Q/K layout: transformers' llama stores q_proj/k_proj for rotate-half RoPE. Rather than permuting
// those rows into GGUF's adjacent pairs at load (a copy of every Q and K matrix), the model keeps
// them as stored and RoPE rotates (i, i + head_dim/2) (hparams::rope_pairs = rotate_half). The
// attention scores are the same; `hillinfer convert` permutes, since a GGUF `llama` file must hold
// adjacent pairs.
//
// Tensors of layers past num_hidden_layers (model.layers.N.*, N >= num_hidden_layers) are refused
// naming the layer (model_loader::check_layer_tensors), as a GGUF's past block_count.
//
// Output matrix: lm_head.weight, else the token embedding (tied), unless config.json says
// "tie_word_embeddings": false, which makes a missing lm_head.weight an error.
//
// Tokenizer: tokenizer.json, else vocab.json + merges.txt (or encoder.json + vocab.bpe), with
// tokenizer_config.json (tokenizer/tokenizer.h load_tokenizer_folder). A folder with none of them
// (e.g. Qwen-1, whose tokenizer is a tiktoken file) loads without a tokenizer: it runs on token ids,
// and model::tokenizer() says why text cannot be used.
#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <optional>

#include "core/error.h"
#include "format/hf_checkpoint.h"
#include "model/hf_names.h"
#include "model/model_loader.h"

namespace hill {

namespace {

class hf_source final : public tensor_source {
public:
    hf_source(const hf_checkpoint & c, const std::string & arch) : c_(c), arch_(arch) {
        for (const hf_tensor_mapping & t : hf_tensor_map(c, arch)) by_gguf_[t.gguf_name] = t.hf_name;
    }

    std::optional<tensor_ref> find(const std::string & gguf_name) const override {
        const auto it = by_gguf_.find(gguf_name);
        if (it == by_gguf_.end()) return std::nullopt;
        const safetensors_tensor * t = c_.find(it->second);
        HILL_ASSERT(t != nullptr);  // hf_tensor_map lists only tensors of the checkpoint
        return tensor_ref{t->type, t->shape, t->data};
    }
    std::string describe(const std::string & gguf_name) const override {
        const auto it = by_gguf_.find(gguf_name);
        if (it == by_gguf_.end()) {
            const std::optional<std::string> hf = hf_tensor_name_of(arch_, gguf_name);
            return hf ? fmt::format("'{}' ({})", *hf, gguf_name) : fmt::format("'{}'", gguf_name);
        }
        return fmt::format("'{}' ({})", it->second, gguf_name);
    }
    const std::string & name() const override { return c_.dir(); }
    std::vector<std::string> names() const override {
        std::vector<std::string> out;
        for (const auto & [gguf, hf] : by_gguf_) out.push_back(gguf);
        return out;
    }
    bool is_gguf() const override { return false; }

private:
    const hf_checkpoint & c_;
    std::string arch_;
    std::map<std::string, std::string> by_gguf_;  // GGUF name -> HF name
};

bool has_tokenizer_files(const std::string & dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path d(dir);
    const auto has = [&](const char * f) { return fs::is_regular_file(d / f, ec); };
    return has("tokenizer.json") || (has("vocab.json") && has("merges.txt")) ||
           (has("encoder.json") && has("vocab.bpe"));
}

}  // namespace

std::unique_ptr<model> model_loader::load_hf(const std::string & dir, bool with_tokenizer) {
    std::shared_ptr<const hf_checkpoint> ckpt = hf_checkpoint::open(dir);
    const hf_checkpoint & c = *ckpt;
    const std::string arch = hf_architecture(c);
    const architecture_loader * a = find(arch);
    if (a == nullptr) {
        fail_input("'{}': architecture '{}' has no loader; supported: {}", c.config_path(), arch, supported(false));
    }

    std::unique_ptr<model> m(new model());
    m->path_ = dir;
    m->format_ = "hf";
    hparams & hp = m->hp_;
    a->hparams_from_hf(c, hp);
    check_hparams(hp, c.config_path());
    if (with_tokenizer && has_tokenizer_files(dir)) {
        m->tokenizer_ = load_tokenizer_folder(dir);
        const int32_t n_tok = m->tokenizer_->vocab().n_vocab();
        if (n_tok > hp.n_vocab) {
            fail_input("'{}': the tokenizer has {} tokens, more than the model's vocab_size {} in config.json", dir,
                       n_tok, hp.n_vocab);
        }
    }
    const hf_source src(c, arch);
    check_layer_tensors(src, hp, "num_hidden_layers in " + c.config_path());
    a->weights(src, *m);
    // transformers ties lm_head to the input embedding only when tie_word_embeddings is true
    // (PretrainedConfig's default); with false and no lm_head.weight it leaves the output layer
    // randomly initialized, so such a folder is incomplete rather than tied.
    const std::optional<bool> tie = c.config().optional<bool>("/tie_word_embeddings");
    if (m->output_tied_ && tie && !*tie) {
        fail_input(
            "'{}': tensor {} is missing, and {} says tie_word_embeddings is false (the output matrix is not "
            "the token embedding)",
            dir, src.describe("output.weight"), c.config_path());
    }
    m->hf_ = std::move(ckpt);
    return m;
}

}  // namespace hill
