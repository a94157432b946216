#include "model/model_loader.h"

#include "core/error.h"
#include "format/hf_checkpoint.h"
#include "model/hf_names.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

namespace hill {

namespace {

const architecture_loader k_architectures[] = {
    {"llama", llama_hparams_gguf, llama_hparams_hf, llama_weights},
    {"qwen2", qwen2_hparams_gguf, qwen2_hparams_hf, qwen2_weights},
    {"qwen", qwen_hparams_gguf, qwen_hparams_hf, qwen_weights},
    {"opt", opt_hparams_gguf, opt_hparams_hf, opt_weights},
};

std::string shape_str(const std::vector<int64_t> & shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", shape[i], i + 1 < shape.size() ? ", " : "");
    return s + "]";
}

}  // namespace

const architecture_loader * model_loader::find(const std::string & arch) {
    for (const architecture_loader & a : k_architectures) {
        if (arch == a.name) return &a;
    }
    return nullptr;
}

std::string model_loader::supported(bool gguf_only) {
    std::string s;
    for (const architecture_loader & a : k_architectures) {
        if (gguf_only && a.hparams_from_gguf == nullptr) continue;
        s += fmt::format("{}{}", s.empty() ? "" : ", ", a.name);
    }
    return s;
}

std::optional<weight_view> model_loader::matrix_opt(const tensor_source & src, model & m, const std::string & name,
                                                    int64_t rows, int64_t cols) {
    const std::optional<tensor_ref> t = src.find(name);
    if (!t) return std::nullopt;
    if (t->shape.size() != 2 || t->shape[0] != rows || t->shape[1] != cols) {
        fail_input("'{}': tensor {} has shape {}, expected [{}, {}] (rows, columns)", src.name(), src.describe(name),
                   shape_str(t->shape), rows, cols);
    }
    const void * data = t->data;
    if (ggml_block_size(t->type) == 1 && reinterpret_cast<uintptr_t>(data) % ggml_block_bytes(t->type) != 0) {
        // safetensors does not require aligned data (a header of odd length puts every tensor at an
        // odd address); the kernels read whole elements, so such a matrix is copied once, here.
        const size_t n_bytes = *ggml_row_bytes(t->type, cols) * size_t(rows);
        aligned_buffer & copy = m.weight_copies_.emplace_back(n_bytes, 64);
        if (n_bytes > 0) std::memcpy(copy.data(), data, n_bytes);
        m.copied_weight_bytes_ += n_bytes;
        data = copy.data();
    }
    return weight_view{t->type, rows, cols, data};
}

weight_view model_loader::matrix(const tensor_source & src, model & m, const std::string & name, int64_t rows,
                                 int64_t cols) {
    std::optional<weight_view> w = matrix_opt(src, m, name, rows, cols);
    if (!w) fail_input("'{}': tensor {} is missing", src.name(), src.describe(name));
    return *w;
}

std::vector<float> model_loader::vector_opt(const tensor_source & src, model & m, const std::string & name, int64_t n) {
    const std::optional<tensor_ref> t = src.find(name);
    if (!t) return {};
    if (t->shape.size() != 1 || t->shape[0] != n) {
        fail_input("'{}': tensor {} has shape {}, expected [{}]", src.name(), src.describe(name), shape_str(t->shape),
                   n);
    }
    if (ggml_block_size(t->type) != 1) {
        fail_input("'{}': tensor {} is {}, expected a float type (F32, F16, BF16) for a vector", src.name(),
                   src.describe(name), ggml_type_name(t->type));
    }
    std::vector<float> v(static_cast<size_t>(n));
    // Vectors are copied element by element through memcpy-safe dequantization of an aligned copy:
    // safetensors does not promise alignment.
    std::vector<uint8_t> raw(size_t(n) * ggml_block_bytes(t->type));
    std::memcpy(raw.data(), t->data, raw.size());
    dequantize_row(t->type, raw.data(), v.data(), n);
    m.vector_params_[t->type] += uint64_t(n);
    return v;
}

std::vector<float> model_loader::vector_f32(const tensor_source & src, model & m, const std::string & name, int64_t n) {
    std::vector<float> v = vector_opt(src, m, name, n);
    if (v.empty()) fail_input("'{}': tensor {} is missing", src.name(), src.describe(name));
    return v;
}

void model_loader::check_hparams(hparams & hp, const std::string & where) {
    const auto positive = [&](const char * what, int64_t v) {
        if (v <= 0) fail_input("'{}': {} is {}, expected > 0", where, what, v);
    };
    positive("the vocabulary size", hp.n_vocab);
    positive("the trained context length", hp.n_ctx_train);
    positive("the embedding length", hp.n_embd);
    positive("the feed-forward length", hp.n_ff);
    positive("the layer count", hp.n_layer);
    positive("the head count", hp.n_head);
    positive("the key/value head count", hp.n_head_kv);
    positive("the head dimension", hp.head_dim);
    if (hp.n_embd_word == 0) hp.n_embd_word = hp.n_embd;
    positive("the word embedding width", hp.n_embd_word);
    if (hp.n_head % hp.n_head_kv != 0) {
        fail_input("'{}': the head count {} is not a multiple of the key/value head count {}", where, hp.n_head,
                   hp.n_head_kv);
    }
    if (hp.position == position_kind::rope) {
        if (hp.head_dim % 2 != 0) fail_input("'{}': head dimension {} is odd; RoPE needs pairs", where, hp.head_dim);
        if (!(hp.rope_freq_base > 0.0f) || !std::isfinite(hp.rope_freq_base)) {
            fail_input("'{}': RoPE frequency base {} must be > 0", where, hp.rope_freq_base);
        }
        if (!(hp.rope_freq_scale > 0.0f) || !std::isfinite(hp.rope_freq_scale)) {
            fail_input("'{}': RoPE scaling factor {} must be > 0", where, 1.0f / hp.rope_freq_scale);
        }
        if (!hp.rope_freq_factors.empty()) {
            if (int64_t(hp.rope_freq_factors.size()) != hp.head_dim / 2) {
                fail_input("'{}': {} RoPE frequency factors, expected head_dim / 2 = {}", where,
                           hp.rope_freq_factors.size(), hp.head_dim / 2);
            }
            for (float f : hp.rope_freq_factors) {
                if (!(f > 0.0f) || !std::isfinite(f))
                    fail_input("'{}': RoPE frequency factor {} must be > 0", where, f);
            }
        }
    }
    if (!(hp.rms_eps >= 0.0f) || !std::isfinite(hp.rms_eps)) {
        fail_input("'{}': norm epsilon {} must be >= 0", where, hp.rms_eps);
    }
}

void model_loader::llama_family_weights(const tensor_source & src, model & m, bool qkv_bias, bool fused_qkv) {
    const hparams & hp = m.hp_;
    m.token_embd_ = matrix(src, m, "token_embd.weight", hp.n_vocab, hp.n_embd);
    m.output_norm_ = vector_f32(src, m, "output_norm.weight", hp.n_embd);
    if (std::optional<weight_view> out = matrix_opt(src, m, "output.weight", hp.n_vocab, hp.n_embd)) {
        m.output_ = *out;
    } else {
        m.output_ = m.token_embd_;
        m.output_tied_ = true;
    }
    const int64_t n_q = hp.n_embd_q(), n_kv = hp.n_embd_kv();
    m.layers_.resize(size_t(hp.n_layer));
    for (int il = 0; il < hp.n_layer; ++il) {
        layer_weights & l = m.layers_[size_t(il)];
        const std::string p = fmt::format("blk.{}.", il);
        l.attn_norm = vector_f32(src, m, p + "attn_norm.weight", hp.n_embd);
        if (fused_qkv) {
            // Qwen-1's c_attn: rows [0, n_q) are q, then k, then v; each part is a view of its rows.
            const weight_view qkv = matrix(src, m, p + "attn_qkv.weight", n_q + 2 * n_kv, hp.n_embd);
            const auto rows = [&](int64_t r0, int64_t n) { return weight_view{qkv.type, n, qkv.n_cols, qkv.row(r0)}; };
            l.wq = rows(0, n_q);
            l.wk = rows(n_q, n_kv);
            l.wv = rows(n_q + n_kv, n_kv);
            const std::vector<float> b = vector_f32(src, m, p + "attn_qkv.bias", n_q + 2 * n_kv);
            l.bq.assign(b.begin(), b.begin() + n_q);
            l.bk.assign(b.begin() + n_q, b.begin() + n_q + n_kv);
            l.bv.assign(b.begin() + n_q + n_kv, b.end());
        } else {
            l.wq = matrix(src, m, p + "attn_q.weight", n_q, hp.n_embd);
            l.wk = matrix(src, m, p + "attn_k.weight", n_kv, hp.n_embd);
            l.wv = matrix(src, m, p + "attn_v.weight", n_kv, hp.n_embd);
            // Llama checkpoints with attention_bias carry them too; qwen2 must.
            const auto bias = [&](const std::string & name, int64_t n) {
                return qkv_bias ? vector_f32(src, m, name, n) : vector_opt(src, m, name, n);
            };
            l.bq = bias(p + "attn_q.bias", n_q);
            l.bk = bias(p + "attn_k.bias", n_kv);
            l.bv = bias(p + "attn_v.bias", n_kv);
        }
        l.wo = matrix(src, m, p + "attn_output.weight", hp.n_embd, n_q);
        l.bo = vector_opt(src, m, p + "attn_output.bias", hp.n_embd);
        l.ffn_norm = vector_f32(src, m, p + "ffn_norm.weight", hp.n_embd);
        l.ffn_gate = matrix(src, m, p + "ffn_gate.weight", hp.n_ff, hp.n_embd);
        l.ffn_up = matrix(src, m, p + "ffn_up.weight", hp.n_ff, hp.n_embd);
        l.ffn_down = matrix(src, m, p + "ffn_down.weight", hp.n_embd, hp.n_ff);
    }
}

int32_t gguf_required_int(const gguf_file & f, const std::string & key, int64_t lo, int64_t hi) {
    const auto v = f.get_int(key);
    if (!v) fail_input("'{}': metadata key '{}' is missing", f.name(), key);
    if (*v < lo || *v > hi) fail_input("'{}': '{}' is {}, expected {}..{}", f.name(), key, *v, lo, hi);
    return int32_t(*v);
}

void gguf_llama_like_hparams(const gguf_file & f, const std::string & arch, hparams & hp) {
    const std::string a = arch + ".";
    const std::string & path = f.name();
    constexpr int64_t big = int64_t(1) << 30;
    hp.arch = arch;
    hp.n_ctx_train = gguf_required_int(f, a + "context_length", 1, big);
    hp.n_embd = gguf_required_int(f, a + "embedding_length", 1, 1 << 20);
    hp.n_ff = gguf_required_int(f, a + "feed_forward_length", 1, 1 << 22);
    hp.n_layer = gguf_required_int(f, a + "block_count", 1, 4096);
    hp.n_head = gguf_required_int(f, a + "attention.head_count", 1, 4096);
    hp.n_head_kv = f.get_int(a + "attention.head_count_kv")
                       ? gguf_required_int(f, a + "attention.head_count_kv", 1, 4096)
                       : hp.n_head;
    if (f.get_int(a + "attention.key_length")) {
        hp.head_dim = gguf_required_int(f, a + "attention.key_length", 1, 1 << 16);
        if (auto vl = f.get_int(a + "attention.value_length"); vl && *vl != hp.head_dim) {
            fail_input(
                "'{}': {}attention.value_length {} differs from key_length {}; only equal K and V head sizes "
                "are supported",
                path, a, *vl, hp.head_dim);
        }
    } else {
        if (hp.n_embd % hp.n_head != 0) {
            fail_input("'{}': embedding_length {} is not a multiple of head_count {}", path, hp.n_embd, hp.n_head);
        }
        hp.head_dim = hp.n_embd / hp.n_head;
    }
    if (auto rd = f.get_int(a + "rope.dimension_count"); rd && *rd != hp.head_dim) {
        fail_input("'{}': {}rope.dimension_count is {}, only full-head RoPE ({}) is supported", path, a, *rd,
                   hp.head_dim);
    }
    hp.rms_eps = float(f.get_float(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
    hp.rope_freq_base = float(f.get_float(a + "rope.freq_base").value_or(10000.0));
    if (!(hp.rope_freq_base > 0.0f)) fail_input("'{}': {}rope.freq_base must be > 0", path, a);
    const std::string scaling = f.get_string(a + "rope.scaling.type").value_or("");
    double factor = 1.0;
    if (auto fac = f.get_float(a + "rope.scaling.factor")) {
        if (scaling.empty() || scaling == "linear") {
            factor = *fac;
        } else if (scaling != "none") {
            fail_input("'{}': {}rope.scaling.type '{}' is not supported; supported: none, linear", path, a, scaling);
        }
    } else if (auto lin = f.get_float(a + "rope.scale_linear")) {
        factor = *lin;  // older key for linear scaling
    } else if (!scaling.empty() && scaling != "none" && scaling != "linear") {
        fail_input("'{}': {}rope.scaling.type '{}' is not supported; supported: none, linear", path, a, scaling);
    }
    if (!(factor > 0.0)) fail_input("'{}': RoPE scaling factor {} must be > 0", path, factor);
    hp.rope_freq_scale = float(1.0 / factor);
}

void hf_layer_hparams(const hf_checkpoint & c, hparams & hp) {
    const json_value config = c.config();
    hp.n_layer = config.required_int("/num_hidden_layers", 1, 4096);
    hp.n_head = config.required_int("/num_attention_heads", 1, 4096);
    hp.n_head_kv = config.optional_int("/num_key_value_heads", 1, 4096).value_or(hp.n_head);
    if (const std::optional<int64_t> head_dim = config.optional_int("/head_dim", 1, 1 << 16)) {
        hp.head_dim = *head_dim;
        return;
    }
    if (hp.n_embd % hp.n_head != 0) {
        fail_input("'{}': hidden_size {} is not a multiple of num_attention_heads {}", c.config_path(), hp.n_embd,
                   hp.n_head);
    }
    hp.head_dim = hp.n_embd / hp.n_head;
}

void hf_llama_like_hparams(const hf_checkpoint & c, hparams & hp) {
    const std::string cfg = c.config_path();
    const json_value config = c.config();
    constexpr int64_t big = int64_t(1) << 30;
    hp.n_vocab = config.required_int("/vocab_size", 1, INT32_MAX);
    hp.n_embd = config.required_int("/hidden_size", 1, 1 << 20);
    hp.n_ff = config.required_int("/intermediate_size", 1, 1 << 22);
    hf_layer_hparams(c, hp);
    hp.n_ctx_train = config.optional_int("/max_position_embeddings", 1, big).value_or(2048);
    hp.rms_eps = float(config.optional<double>("/rms_norm_eps").value_or(1e-6));
    hp.rope_freq_base = float(config.optional<double>("/rope_theta").value_or(10000.0));
    if (std::optional<std::string> act = config.optional<std::string>("/hidden_act"); act && *act != "silu") {
        fail_input("'{}': hidden_act is '{}'; supported: silu", cfg, *act);
    }
    if (config.optional<bool>("/mlp_bias").value_or(false)) {
        fail_input("'{}': mlp_bias is true; supported: false (the SwiGLU feed-forward has no biases)", cfg);
    }
    const std::optional<json_value> scaling = config.find("/rope_scaling");
    if (!scaling) return;
    // transformers wrote the kind as "type" before 4.43 and as "rope_type" since.
    std::optional<std::string> type = scaling->optional<std::string>("/rope_type");
    if (!type) type = scaling->optional<std::string>("/type");
    if (!type || *type == "default") return;
    const double factor = scaling->required<double>("/factor");
    if (!(factor > 0.0)) fail_input("'{}': rope_scaling.factor is {}, expected > 0", cfg, factor);
    if (*type == "linear") {
        hp.rope_freq_scale = float(1.0 / factor);
    } else if (*type == "llama3") {
        const int64_t orig = scaling->required<int64_t>("/original_max_position_embeddings");
        const double lo = scaling->required<double>("/low_freq_factor");
        const double hi = scaling->required<double>("/high_freq_factor");
        if (!(lo > 0.0) || !(hi > lo) || orig <= 0) {
            fail_input(
                "'{}': rope_scaling llama3 needs low_freq_factor > 0, high_freq_factor > low_freq_factor and "
                "original_max_position_embeddings > 0; got {}, {}, {}",
                cfg, lo, hi, orig);
        }
        hp.rope_freq_factors = llama3_rope_freq_factors(hp.rope_freq_base, hp.head_dim, factor, lo, hi, double(orig));
    } else {
        fail_input("'{}': rope_scaling type '{}' is not supported; supported: default, linear, llama3", cfg, *type);
    }
}

}  // namespace hill
