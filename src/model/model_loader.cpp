#include "model/model_loader.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>

#include "core/error.h"
#include "format/hf_checkpoint.h"
#include "model/hf_names.h"

namespace hill {

namespace {

const architecture_loader k_architectures[] = {
    {"llama", llama_hparams_gguf, llama_hparams_hf, llama_weights},
    {"qwen2", qwen2_hparams_gguf, qwen2_hparams_hf, qwen2_weights},
    {"qwen", qwen_hparams_gguf, qwen_hparams_hf, qwen_weights},
    {"qwen3", qwen3_hparams_gguf, qwen3_hparams_hf, qwen3_weights},
    {"gemma2", gemma2_hparams_gguf, gemma2_hparams_hf, gemma_weights},
    {"gemma3", gemma3_hparams_gguf, gemma3_hparams_hf, gemma_weights},
    {"phi3", phi3_hparams_gguf, phi3_hparams_hf, phi3_weights},
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

void model_loader::check_layer_tensors(const tensor_source & src, const hparams & hp, const std::string & count) {
    // The layer index N of "blk.N.<rest>" (every architecture's GGUF names); an index too large for
    // 64 bits counts as the largest.
    const auto layer_of = [](std::string_view name) -> std::optional<uint64_t> {
        constexpr std::string_view prefix = "blk.";
        if (!name.starts_with(prefix)) return std::nullopt;
        name.remove_prefix(prefix.size());
        const char * end = name.data() + name.size();
        uint64_t il = 0;
        const auto [p, ec] = std::from_chars(name.data(), end, il);
        if (p == name.data() || p == end || *p != '.') return std::nullopt;
        return ec == std::errc::result_out_of_range ? std::numeric_limits<uint64_t>::max() : il;
    };
    std::optional<std::string> deepest;
    uint64_t il_deepest = 0;
    for (const std::string & t : src.names()) {
        const std::optional<uint64_t> il = layer_of(t);
        if (il && *il >= uint64_t(hp.n_layer) && (!deepest || *il > il_deepest)) {
            deepest = t;
            il_deepest = *il;
        }
    }
    if (deepest) {
        fail_input("'{}': it has tensors of layer {} ({}) but {} is {}: expected the tensors of layers 0..{} only",
                   src.name(), il_deepest, src.describe(*deepest), count, hp.n_layer, hp.n_layer - 1);
    }
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
            fail_input("'{}': RoPE frequency base {} must be finite and > 0", where, hp.rope_freq_base);
        }
        if (!(hp.rope_freq_scale > 0.0f) || !std::isfinite(hp.rope_freq_scale)) {
            fail_input("'{}': RoPE scaling factor {} must be finite and > 0", where, 1.0f / hp.rope_freq_scale);
        }
        if (!hp.rope_freq_factors.empty()) {
            if (int64_t(hp.rope_freq_factors.size()) != hp.head_dim / 2) {
                fail_input("'{}': {} RoPE frequency factors, expected head_dim / 2 = {}", where,
                           hp.rope_freq_factors.size(), hp.head_dim / 2);
            }
            for (float f : hp.rope_freq_factors) {
                if (!(f > 0.0f) || !std::isfinite(f))
                    fail_input("'{}': RoPE frequency factor {} must be finite and > 0", where, f);
            }
        }
    }
    if (!hp.rope_freq_factors_long.empty()) {
        if (int64_t(hp.rope_freq_factors_long.size()) != hp.head_dim / 2 || hp.rope_freq_factors.empty()) {
            fail_input("'{}': {} long RoPE factors, expected head_dim / 2 = {} (and as many short ones)", where,
                       hp.rope_freq_factors_long.size(), hp.head_dim / 2);
        }
        for (float f : hp.rope_freq_factors_long) {
            if (!(f > 0.0f) || !std::isfinite(f))
                fail_input("'{}': RoPE frequency factor {} must be finite and > 0", where, f);
        }
        positive("the original context length (LongRoPE)", hp.n_ctx_orig);
    }
    if (!(hp.rope_attn_factor > 0.0f) || !std::isfinite(hp.rope_attn_factor)) {
        fail_input("'{}': RoPE attention factor {} must be > 0", where, hp.rope_attn_factor);
    }
    if (!hp.swa_layers.empty()) {
        HILL_ASSERT(int64_t(hp.swa_layers.size()) == hp.n_layer);
        positive("the sliding window", hp.n_swa);
    }
    if (hp.attn_scale == 0.0f) hp.attn_scale = 1.0f / std::sqrt(float(hp.head_dim));
    for (const auto & [what, v] : {std::pair{"the attention scale", hp.attn_scale},
                                   std::pair{"the attention soft-cap", hp.attn_softcap},
                                   std::pair{"the final logit soft-cap", hp.final_softcap},
                                   std::pair{"the embedding scale", hp.embd_scale}}) {
        if (!(v >= 0.0f) || !std::isfinite(v)) fail_input("'{}': {} is {}, expected a finite number >= 0", where, what, v);
    }
    if (!(hp.rms_eps >= 0.0f) || !std::isfinite(hp.rms_eps)) {
        fail_input("'{}': norm epsilon {} must be >= 0", where, hp.rms_eps);
    }
}

void model_loader::llama_family_weights(const tensor_source & src, model & m, const llama_family_options & o) {
    const hparams & hp = m.hp_;
    // A norm vector as the forward pass uses it (x / rms · w): Gemma's checkpoint folders store w - 1.
    const auto norm = [&](const std::string & name, int64_t n) {
        std::vector<float> w = vector_f32(src, m, name, n);
        if (o.norm_plus_one && !src.is_gguf()) {
            for (float & x : w) x += 1.0f;
        }
        return w;
    };
    m.token_embd_ = matrix(src, m, "token_embd.weight", hp.n_vocab, hp.n_embd);
    m.output_norm_ = norm("output_norm.weight", hp.n_embd);
    if (std::optional<weight_view> out = matrix_opt(src, m, "output.weight", hp.n_vocab, hp.n_embd)) {
        m.output_ = *out;
    } else {
        m.output_ = m.token_embd_;
        m.output_tied_ = true;
    }
    const int64_t n_q = hp.n_embd_q(), n_kv = hp.n_embd_kv();
    // Rows [r0, r0 + n) of a fused matrix, as a view.
    const auto rows = [](const weight_view & w, int64_t r0, int64_t n) {
        return weight_view{w.type, n, w.n_cols, w.row(r0)};
    };
    m.layers_.resize(size_t(hp.n_layer));
    for (int il = 0; il < hp.n_layer; ++il) {
        layer_weights & l = m.layers_[size_t(il)];
        const std::string p = fmt::format("blk.{}.", il);
        l.attn_norm = norm(p + "attn_norm.weight", hp.n_embd);
        // Llama checkpoints with attention_bias carry biases too; qwen2 and qwen must.
        const auto bias = [&](const std::string & name, int64_t n) {
            return o.qkv_bias ? vector_f32(src, m, name, n) : vector_opt(src, m, name, n);
        };
        // Fused QKV (qwen's c_attn, phi3's qkv_proj): rows [0, n_q) are q, then k, then v. Phi3's
        // GGUF may also hold them apart (llama.cpp reads either).
        std::optional<weight_view> qkv;
        if (o.fused_qkv) {
            qkv = o.qkv_bias ? matrix(src, m, p + "attn_qkv.weight", n_q + 2 * n_kv, hp.n_embd)
                             : matrix_opt(src, m, p + "attn_qkv.weight", n_q + 2 * n_kv, hp.n_embd);
        }
        if (qkv) {
            l.wq = rows(*qkv, 0, n_q);
            l.wk = rows(*qkv, n_q, n_kv);
            l.wv = rows(*qkv, n_q + n_kv, n_kv);
            const std::vector<float> b = bias(p + "attn_qkv.bias", n_q + 2 * n_kv);
            if (!b.empty()) {
                l.bq.assign(b.begin(), b.begin() + n_q);
                l.bk.assign(b.begin() + n_q, b.begin() + n_q + n_kv);
                l.bv.assign(b.begin() + n_q + n_kv, b.end());
            }
        } else {
            l.wq = matrix(src, m, p + "attn_q.weight", n_q, hp.n_embd);
            l.wk = matrix(src, m, p + "attn_k.weight", n_kv, hp.n_embd);
            l.wv = matrix(src, m, p + "attn_v.weight", n_kv, hp.n_embd);
            l.bq = bias(p + "attn_q.bias", n_q);
            l.bk = bias(p + "attn_k.bias", n_kv);
            l.bv = bias(p + "attn_v.bias", n_kv);
        }
        if (o.qk_norm) {
            l.attn_q_norm = norm(p + "attn_q_norm.weight", hp.head_dim);
            l.attn_k_norm = norm(p + "attn_k_norm.weight", hp.head_dim);
        }
        l.wo = matrix(src, m, p + "attn_output.weight", hp.n_embd, n_q);
        l.bo = vector_opt(src, m, p + "attn_output.bias", hp.n_embd);
        if (o.post_norms) l.attn_post_norm = norm(p + "post_attention_norm.weight", hp.n_embd);
        l.ffn_norm = norm(p + "ffn_norm.weight", hp.n_embd);
        if (o.fused_gate_up) {
            // Phi3's gate_up_proj: gate rows first, then up (transformers chunks it in two).
            const weight_view gate_up = matrix(src, m, p + "ffn_up.weight", 2 * int64_t(hp.n_ff), hp.n_embd);
            l.ffn_gate = rows(gate_up, 0, hp.n_ff);
            l.ffn_up = rows(gate_up, hp.n_ff, hp.n_ff);
        } else {
            l.ffn_gate = matrix(src, m, p + "ffn_gate.weight", hp.n_ff, hp.n_embd);
            l.ffn_up = matrix(src, m, p + "ffn_up.weight", hp.n_ff, hp.n_embd);
        }
        l.ffn_down = matrix(src, m, p + "ffn_down.weight", hp.n_embd, hp.n_ff);
        if (o.post_norms) l.ffn_post_norm = norm(p + "post_ffw_norm.weight", hp.n_embd);
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
    // Mistral-style sliding window over every layer, where the file declares one.
    if (f.get_int(a + "attention.sliding_window")) {
        hp.set_swa(gguf_required_int(f, a + "attention.sliding_window", 0, big), 1);
    }
}

std::optional<float> gguf_optional_positive(const gguf_file & f, const std::string & key) {
    const std::optional<double> v = f.get_float(key);  // a value of another type: an error naming the key
    if (!v) return std::nullopt;
    if (!(*v > 0.0) || !std::isfinite(*v)) fail_input("'{}': '{}' is {}, expected a number > 0", f.name(), key, *v);
    return float(*v);
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

namespace {

// LongRoPE (Ding et al. 2024, "LongRoPE"; transformers' _compute_longrope_parameters, Phi-3's "su"):
// rope_scaling {long_factor, short_factor: f32 [head_dim/2] each, attention_factor (optional)} and
// original_max_position_embeddings (top level, or in rope_scaling). Pair i's frequency is divided by
// the long factors when the context exceeds the original length, else by the short ones; cos and
// sin are multiplied by attention_factor, by default sqrt(1 + ln(s) / ln(original)) with s =
// max_position_embeddings / original (1 when s <= 1).
void hf_longrope(const hf_checkpoint & c, const json_value & scaling, hparams & hp) {
    const json_value config = c.config();
    const std::string cfg = c.config_path();
    std::optional<int64_t> orig = config.optional_int("/original_max_position_embeddings", 1, int64_t(1) << 30);
    if (!orig) orig = scaling.optional_int("/original_max_position_embeddings", 1, int64_t(1) << 30);
    if (!orig) fail_input("'{}': rope_scaling longrope needs original_max_position_embeddings", cfg);
    hp.n_ctx_orig = int32_t(*orig);
    const auto factors = [&](const char * key) {
        const json_value a = scaling.at(key, "an array of head_dim / 2 numbers");
        if (int64_t(a.size()) != hp.head_dim / 2) {
            fail_input("'{}': rope_scaling{} has {} entries, expected head_dim / 2 = {}", cfg, key, a.size(),
                       hp.head_dim / 2);
        }
        std::vector<float> f(a.size());
        for (size_t i = 0; i < a.size(); ++i) f[i] = float(a.item(i).get<double>());
        return f;
    };
    hp.rope_freq_factors = factors("/short_factor");
    hp.rope_freq_factors_long = factors("/long_factor");
    if (const std::optional<double> af = scaling.optional<double>("/attention_factor")) {
        if (!(*af > 0.0)) fail_input("'{}': rope_scaling.attention_factor is {}, expected > 0", cfg, *af);
        hp.rope_attn_factor = float(*af);
    } else {
        const double s = double(hp.n_ctx_train) / double(hp.n_ctx_orig);
        hp.rope_attn_factor = s <= 1.0 ? 1.0f : float(std::sqrt(1.0 + std::log(s) / std::log(double(hp.n_ctx_orig))));
    }
}

}  // namespace

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
    // Gemma names it hidden_activation (and Gemma 2 both).
    const char * act_key = config.find("/hidden_activation") ? "hidden_activation" : "hidden_act";
    const char * act_expected = hp.ffn == ffn_kind::geglu ? "gelu_pytorch_tanh" : "silu";
    if (std::optional<std::string> act = config.optional<std::string>(std::string("/") + act_key);
        act && *act != act_expected) {
        fail_input("'{}': {} is '{}'; supported: {}", cfg, act_key, *act, act_expected);
    }
    if (config.optional<bool>("/mlp_bias").value_or(false)) {
        fail_input("'{}': mlp_bias is true; supported: false (the SwiGLU feed-forward has no biases)", cfg);
    }
    hf_sliding_window(c, hp);
    const std::optional<json_value> scaling = config.find("/rope_scaling");
    if (!scaling) return;
    // transformers wrote the kind as "type" before 4.43 and as "rope_type" since.
    std::optional<std::string> type = scaling->optional<std::string>("/rope_type");
    if (!type) type = scaling->optional<std::string>("/type");
    if (!type || *type == "default") return;
    if (*type == "longrope" || *type == "su") {
        hf_longrope(c, *scaling, hp);
        return;
    }
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
        fail_input("'{}': rope_scaling type '{}' is not supported; supported: default, linear, llama3, longrope (su)",
                   cfg, *type);
    }
}

void hf_sliding_window(const hf_checkpoint & c, hparams & hp) {
    const std::string cfg = c.config_path();
    const json_value config = c.config();
    HILL_ASSERT(hp.n_layer > 0);
    hp.set_swa(0, 1);
    // Qwen2, Qwen3: the window applies only with use_sliding_window, to layers from max_window_layers on.
    const bool qwen2 = hp.arch == "qwen2" || hp.arch == "qwen3";
    if (qwen2 && !config.optional<bool>("/use_sliding_window").value_or(false)) return;
    const std::optional<json_value> window = config.find("/sliding_window");
    if (!window) return;
    const int32_t n = config.required_int("/sliding_window", 1, INT32_MAX);
    if (const std::optional<std::vector<std::string>> types = config.optional<std::vector<std::string>>("/layer_types")) {
        if (int64_t(types->size()) != hp.n_layer) {
            fail_input("'{}': layer_types has {} entries, expected num_hidden_layers = {}", cfg, types->size(),
                       hp.n_layer);
        }
        hp.set_swa(n, 1);
        for (int il = 0; il < hp.n_layer; ++il) {
            const std::string & t = (*types)[size_t(il)];
            if (t != "sliding_attention" && t != "full_attention") {
                fail_input("'{}': layer_types[{}] is '{}'; supported: sliding_attention, full_attention", cfg, il, t);
            }
            hp.swa_layers[size_t(il)] = t == "sliding_attention";
        }
        return;
    }
    hp.set_swa(n, 1);
    if (qwen2) {
        const int64_t from = config.optional_int("/max_window_layers", 0, 4096).value_or(0);
        for (int il = 0; il < hp.n_layer && il < from; ++il) hp.swa_layers[size_t(il)] = 0;
    }
}

}  // namespace hill
