// A model from a GGUF file: `general.architecture` picks the architecture (llama, qwen2, qwen, qwen3,
// gemma2, gemma3, phi3; opt as
// `hillinfer convert` writes it), which reads its `<arch>.*` metadata; the tokenizer comes from the
// file's `tokenizer.ggml.*` metadata and fixes the vocabulary size; weights are views of the tensors
// under llama.cpp's names (opt: HillInfer's in the same style, hf_names.h). A `rope_freqs.weight`
// tensor (Llama 3.1, f32 [head_dim/2]) divides each RoPE pair's frequency; `rope_factors_short.weight`
// and `rope_factors_long.weight` (phi3's LongRoPE) do, one or the other by the context length.
// Tensors of layers past `<arch>.block_count` (`blk.N.*`, N >= block_count) are refused naming the
// layer and the key (model_loader::check_layer_tensors); other tensors the architecture does not
// read are ignored.
#include <fmt/format.h>

#include "core/error.h"
#include "model/model_loader.h"

namespace hill {

namespace {

class gguf_source final : public tensor_source {
public:
    explicit gguf_source(const gguf_file & f) : f_(f) {}

    std::optional<tensor_ref> find(const std::string & gguf_name) const override {
        const gguf_tensor_info * t = f_.find_tensor(gguf_name);
        if (t == nullptr) return std::nullopt;
        tensor_ref r{t->type, {}, t->data};
        for (int i = t->n_dims - 1; i >= 0; --i) r.shape.push_back(t->ne[i]);
        return r;
    }
    std::string describe(const std::string & gguf_name) const override { return fmt::format("'{}'", gguf_name); }
    const std::string & name() const override { return f_.name(); }
    std::vector<std::string> names() const override {
        std::vector<std::string> out;
        for (const gguf_tensor_info & t : f_.tensors()) out.push_back(t.name);
        return out;
    }
    bool is_gguf() const override { return true; }

private:
    const gguf_file & f_;
};

}  // namespace

std::unique_ptr<model> model_loader::load_gguf(const std::string & path) {
    // The weights are read into huge pages: decode streams them once per token (core/mapped_file.h).
    auto gguf = gguf_file::open(path, file_access::read);
    const gguf_file & f = *gguf;
    const std::string arch = f.get_string("general.architecture").value_or("");
    if (arch.empty()) fail_input("'{}': metadata key 'general.architecture' is missing", path);
    const architecture_loader * a = find(arch);
    if (a == nullptr || a->hparams_from_gguf == nullptr) {
        fail_input("'{}': general.architecture is '{}'; supported in GGUF: {}", path, arch, supported(true));
    }

    std::unique_ptr<model> m(new model());
    m->path_ = path;
    m->format_ = "gguf";
    hparams & hp = m->hp_;
    a->hparams_from_gguf(f, hp);
    if (f.find("tokenizer.ggml.model") != nullptr) {
        m->tokenizer_ = load_tokenizer(f);
        hp.n_vocab = m->tokenizer_->vocab().n_vocab();
    } else {
        // No tokenizer (convert of a folder without one): the model runs on token ids, and its
        // vocabulary size comes from {arch}.vocab_size, which convert writes.
        const std::optional<uint64_t> n = f.get_uint(arch + ".vocab_size");
        if (!n || *n == 0 || *n > uint64_t(INT32_MAX)) {
            fail_input("'{}' has no tokenizer (metadata key tokenizer.ggml.model is missing) and no {}.vocab_size", path,
                       arch);
        }
        hp.n_vocab = int32_t(*n);
    }
    const gguf_source src(f);
    if (hp.head_dim > 0 && hp.head_dim % 2 == 0) {
        hp.rope_freq_factors = vector_opt(src, *m, "rope_freqs.weight", hp.head_dim / 2);
        // LongRoPE (phi3): both or neither, and the original context length they switch at.
        std::vector<float> s = vector_opt(src, *m, "rope_factors_short.weight", hp.head_dim / 2);
        std::vector<float> l = vector_opt(src, *m, "rope_factors_long.weight", hp.head_dim / 2);
        if (s.empty() != l.empty()) {
            fail_input("'{}': tensor '{}' is missing (LongRoPE needs rope_factors_short.weight and "
                       "rope_factors_long.weight)", path, s.empty() ? "rope_factors_short.weight" : "rope_factors_long.weight");
        }
        if (!l.empty()) {
            if (!hp.rope_freq_factors.empty()) fail_input("'{}': both rope_freqs.weight and LongRoPE factors", path);
            if (hp.n_ctx_orig == 0) {
                fail_input("'{}': metadata key '{}.rope.scaling.original_context_length' is missing (the file has "
                           "LongRoPE factors)", path, arch);
            }
            hp.rope_freq_factors = std::move(s);
            hp.rope_freq_factors_long = std::move(l);
        }
    }
    check_hparams(hp, path);
    check_layer_tensors(src, hp, "'" + arch + ".block_count'");
    a->weights(src, *m);
    m->gguf_ = std::move(gguf);
    return m;
}

}  // namespace hill
