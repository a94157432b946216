// Architecture `llama` from GGUF: hyperparameters from `llama.*` metadata, weights by the tensor
// names llama.cpp uses (token_embd, output_norm, output, blk.N.{attn_norm, attn_q, attn_k,
// attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}). Q and K rows are stored in the
// adjacent-pair RoPE layout, which compute/ops.h rope() applies directly.
#include "compute/matmul.h"
#include "core/error.h"
#include "model/model.h"

#include <fmt/format.h>

namespace hill {

namespace {

std::string shape_str(const int64_t * ne, int n) {
    std::string s = "[";
    for (int i = n - 1; i >= 0; --i) s += fmt::format("{}{}", ne[i], i > 0 ? ", " : "]");
    return s;
}

// Required tensor `name` with shape [rows, cols] (GGUF ne = {cols, rows}), any supported type.
weight_view matrix(const gguf_file & f, const std::string & name, int64_t rows, int64_t cols) {
    const gguf_tensor_info * t = f.find_tensor(name);
    if (t == nullptr) fail_input("'{}': tensor '{}' is missing", f.name(), name);
    if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows) {
        fail_input("'{}': tensor '{}' has shape {}, expected [{}, {}] (rows, columns)", f.name(), name,
                   shape_str(t->ne, t->n_dims), rows, cols);
    }
    return weight_view{t->type, rows, cols, t->data};
}

// Required vector `name` of n elements, converted to f32.
std::vector<float> vector_f32(const gguf_file & f, const std::string & name, int64_t n,
                              std::map<ggml_type, uint64_t> & by_type) {
    const gguf_tensor_info * t = f.find_tensor(name);
    if (t == nullptr) fail_input("'{}': tensor '{}' is missing", f.name(), name);
    if (t->n_dims != 1 || t->ne[0] != n) {
        fail_input("'{}': tensor '{}' has shape {}, expected [{}]", f.name(), name, shape_str(t->ne, t->n_dims), n);
    }
    if (ggml_block_size(t->type) != 1) {
        fail_input("'{}': tensor '{}' is {}, expected a float type (F32, F16, BF16) for a norm vector", f.name(), name,
                   ggml_type_name(t->type));
    }
    std::vector<float> v(static_cast<size_t>(n));
    dequantize_row(t->type, t->data, v.data(), n);
    by_type[t->type] += uint64_t(n);
    return v;
}

int32_t required_int(const gguf_file & f, const std::string & key, int64_t lo, int64_t hi) {
    const auto v = f.get_int(key);
    if (!v) fail_input("'{}': metadata key '{}' is missing", f.name(), key);
    if (*v < lo || *v > hi) fail_input("'{}': '{}' is {}, expected {}..{}", f.name(), key, *v, lo, hi);
    return int32_t(*v);
}

}  // namespace

std::unique_ptr<model> load_gguf_llama(const std::string & path) {
    auto gguf = gguf_file::open(path);
    const gguf_file & f = *gguf;
    const std::string arch = f.get_string("general.architecture").value_or("");
    if (arch.empty()) fail_input("'{}': metadata key 'general.architecture' is missing", path);
    if (arch != "llama") {
        fail_input("'{}': general.architecture is '{}'; supported: llama", path, arch);
    }

    std::unique_ptr<model> m(new model());
    m->path_ = path;
    m->format_ = "gguf";
    hparams & hp = m->hp_;
    hp.arch = arch;
    constexpr int64_t big = int64_t(1) << 30;
    hp.n_ctx_train = required_int(f, "llama.context_length", 1, big);
    hp.n_embd = required_int(f, "llama.embedding_length", 1, 1 << 20);
    hp.n_ff = required_int(f, "llama.feed_forward_length", 1, 1 << 22);
    hp.n_layer = required_int(f, "llama.block_count", 1, 4096);
    hp.n_head = required_int(f, "llama.attention.head_count", 1, 4096);
    hp.n_head_kv = f.get_int("llama.attention.head_count_kv") ? required_int(f, "llama.attention.head_count_kv", 1, 4096)
                                                               : hp.n_head;
    if (hp.n_embd % hp.n_head != 0) {
        fail_input("'{}': embedding_length {} is not a multiple of head_count {}", path, hp.n_embd, hp.n_head);
    }
    hp.head_dim = hp.n_embd / hp.n_head;
    if (hp.head_dim % 2 != 0) fail_input("'{}': head dimension {} is odd; RoPE needs pairs", path, hp.head_dim);
    if (hp.n_head % hp.n_head_kv != 0) {
        fail_input("'{}': head_count {} is not a multiple of head_count_kv {}", path, hp.n_head, hp.n_head_kv);
    }
    if (auto rd = f.get_int("llama.rope.dimension_count"); rd && *rd != hp.head_dim) {
        fail_input("'{}': llama.rope.dimension_count is {}, only full-head RoPE ({}) is supported", path, *rd,
                   hp.head_dim);
    }
    hp.rms_eps = float(f.get_float("llama.attention.layer_norm_rms_epsilon").value_or(1e-5));
    hp.rope_freq_base = float(f.get_float("llama.rope.freq_base").value_or(10000.0));
    if (!(hp.rope_freq_base > 0.0f)) fail_input("'{}': llama.rope.freq_base must be > 0", path);
    const std::string scaling = f.get_string("llama.rope.scaling.type").value_or("");
    double factor = 1.0;
    if (auto fac = f.get_float("llama.rope.scaling.factor")) {
        if (scaling.empty() || scaling == "linear") factor = *fac;
        else if (scaling != "none") fail_input("'{}': llama.rope.scaling.type '{}' is not supported; supported: none, linear", path, scaling);
    } else if (auto lin = f.get_float("llama.rope.scale_linear")) {
        factor = *lin;  // older key for linear scaling
    }
    if (!(factor > 0.0)) fail_input("'{}': RoPE scaling factor {} must be > 0", path, factor);
    hp.rope_freq_scale = float(1.0 / factor);

    m->tokenizer_ = load_tokenizer(f);
    hp.n_vocab = m->tokenizer_->vocab().n_vocab();

    m->token_embd_ = matrix(f, "token_embd.weight", hp.n_vocab, hp.n_embd);
    m->output_norm_ = vector_f32(f, "output_norm.weight", hp.n_embd, m->vector_params_);
    if (f.find_tensor("output.weight") != nullptr) {
        m->output_ = matrix(f, "output.weight", hp.n_vocab, hp.n_embd);
    } else {
        m->output_ = m->token_embd_;
        m->output_tied_ = true;
    }
    m->layers_.resize(size_t(hp.n_layer));
    for (int il = 0; il < hp.n_layer; ++il) {
        layer_weights & l = m->layers_[size_t(il)];
        const std::string p = fmt::format("blk.{}.", il);
        l.attn_norm = vector_f32(f, p + "attn_norm.weight", hp.n_embd, m->vector_params_);
        l.wq = matrix(f, p + "attn_q.weight", hp.n_embd_q(), hp.n_embd);
        l.wk = matrix(f, p + "attn_k.weight", hp.n_embd_kv(), hp.n_embd);
        l.wv = matrix(f, p + "attn_v.weight", hp.n_embd_kv(), hp.n_embd);
        l.wo = matrix(f, p + "attn_output.weight", hp.n_embd, hp.n_embd_q());
        l.ffn_norm = vector_f32(f, p + "ffn_norm.weight", hp.n_embd, m->vector_params_);
        l.ffn_gate = matrix(f, p + "ffn_gate.weight", hp.n_ff, hp.n_embd);
        l.ffn_up = matrix(f, p + "ffn_up.weight", hp.n_ff, hp.n_embd);
        l.ffn_down = matrix(f, p + "ffn_down.weight", hp.n_embd, hp.n_ff);
    }
    m->gguf_ = std::move(gguf);
    return m;
}

}  // namespace hill
