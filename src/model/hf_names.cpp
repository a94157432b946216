#include "model/hf_names.h"

#include "core/error.h"
#include "format/hf_checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numbers>

namespace hill {

namespace {

// One name pattern: `hf` and `gguf` without the ".weight"/".bias" suffix; "{}" stands for the
// layer index in both. `rank` orders tensors inside their group (global-before, per layer,
// global-after) the way llama.cpp's converter writes them.
struct name_rule {
    const char * hf;
    const char * gguf;
    int rank;
    hf_permutation perm = hf_permutation::none;
};

// Groups for ordering: before the layers, in the layers, after the layers.
constexpr int group_pre = 0, group_layer = 1, group_post = 2;

constexpr name_rule llama_rules[] = {
    {"model.embed_tokens", "token_embd", 0},
    {"model.layers.{}.input_layernorm", "blk.{}.attn_norm", 0},
    {"model.layers.{}.self_attn.q_proj", "blk.{}.attn_q", 1, hf_permutation::q},
    {"model.layers.{}.self_attn.k_proj", "blk.{}.attn_k", 2, hf_permutation::k},
    {"model.layers.{}.self_attn.v_proj", "blk.{}.attn_v", 3},
    {"model.layers.{}.self_attn.o_proj", "blk.{}.attn_output", 4},
    {"model.layers.{}.post_attention_layernorm", "blk.{}.ffn_norm", 5},
    {"model.layers.{}.mlp.gate_proj", "blk.{}.ffn_gate", 6},
    {"model.layers.{}.mlp.up_proj", "blk.{}.ffn_up", 7},
    {"model.layers.{}.mlp.down_proj", "blk.{}.ffn_down", 8},
    {"model.norm", "output_norm", 0},
    {"lm_head", "output", 1},
};

// qwen3: llama's names plus the per-head Q/K norms.
constexpr name_rule qwen3_rules[] = {
    {"model.embed_tokens", "token_embd", 0},
    {"model.layers.{}.input_layernorm", "blk.{}.attn_norm", 0},
    {"model.layers.{}.self_attn.q_proj", "blk.{}.attn_q", 1},
    {"model.layers.{}.self_attn.q_norm", "blk.{}.attn_q_norm", 2},
    {"model.layers.{}.self_attn.k_proj", "blk.{}.attn_k", 3},
    {"model.layers.{}.self_attn.k_norm", "blk.{}.attn_k_norm", 4},
    {"model.layers.{}.self_attn.v_proj", "blk.{}.attn_v", 5},
    {"model.layers.{}.self_attn.o_proj", "blk.{}.attn_output", 6},
    {"model.layers.{}.post_attention_layernorm", "blk.{}.ffn_norm", 7},
    {"model.layers.{}.mlp.gate_proj", "blk.{}.ffn_gate", 8},
    {"model.layers.{}.mlp.up_proj", "blk.{}.ffn_up", 9},
    {"model.layers.{}.mlp.down_proj", "blk.{}.ffn_down", 10},
    {"model.norm", "output_norm", 0},
    {"lm_head", "output", 1},
};

// gemma2, gemma3: post_attention_layernorm is the norm of the attention output (not the pre-FFN
// norm, which is pre_feedforward_layernorm); gemma3 adds q_norm / k_norm.
constexpr name_rule gemma_rules[] = {
    {"model.embed_tokens", "token_embd", 0},
    {"model.layers.{}.input_layernorm", "blk.{}.attn_norm", 0},
    {"model.layers.{}.self_attn.q_proj", "blk.{}.attn_q", 1},
    {"model.layers.{}.self_attn.q_norm", "blk.{}.attn_q_norm", 2},
    {"model.layers.{}.self_attn.k_proj", "blk.{}.attn_k", 3},
    {"model.layers.{}.self_attn.k_norm", "blk.{}.attn_k_norm", 4},
    {"model.layers.{}.self_attn.v_proj", "blk.{}.attn_v", 5},
    {"model.layers.{}.self_attn.o_proj", "blk.{}.attn_output", 6},
    {"model.layers.{}.post_attention_layernorm", "blk.{}.post_attention_norm", 7},
    {"model.layers.{}.pre_feedforward_layernorm", "blk.{}.ffn_norm", 8},
    {"model.layers.{}.mlp.gate_proj", "blk.{}.ffn_gate", 9},
    {"model.layers.{}.mlp.up_proj", "blk.{}.ffn_up", 10},
    {"model.layers.{}.mlp.down_proj", "blk.{}.ffn_down", 11},
    {"model.layers.{}.post_feedforward_layernorm", "blk.{}.post_ffw_norm", 12},
    {"model.norm", "output_norm", 0},
    {"lm_head", "output", 1},
};

// phi3: fused qkv_proj and gate_up_proj.
constexpr name_rule phi3_rules[] = {
    {"model.embed_tokens", "token_embd", 0},
    {"model.layers.{}.input_layernorm", "blk.{}.attn_norm", 0},
    {"model.layers.{}.self_attn.qkv_proj", "blk.{}.attn_qkv", 1},
    {"model.layers.{}.self_attn.o_proj", "blk.{}.attn_output", 2},
    {"model.layers.{}.post_attention_layernorm", "blk.{}.ffn_norm", 3},
    {"model.layers.{}.mlp.gate_up_proj", "blk.{}.ffn_up", 4},
    {"model.layers.{}.mlp.down_proj", "blk.{}.ffn_down", 5},
    {"model.norm", "output_norm", 0},
    {"lm_head", "output", 1},
};

constexpr name_rule qwen_rules[] = {
    {"transformer.wte", "token_embd", 0},
    {"transformer.h.{}.ln_1", "blk.{}.attn_norm", 0},
    {"transformer.h.{}.attn.c_attn", "blk.{}.attn_qkv", 1},
    {"transformer.h.{}.attn.c_proj", "blk.{}.attn_output", 2},
    {"transformer.h.{}.ln_2", "blk.{}.ffn_norm", 3},
    {"transformer.h.{}.mlp.w2", "blk.{}.ffn_gate", 4},
    {"transformer.h.{}.mlp.w1", "blk.{}.ffn_up", 5},
    {"transformer.h.{}.mlp.c_proj", "blk.{}.ffn_down", 6},
    {"transformer.ln_f", "output_norm", 0},
    {"lm_head", "output", 1},
};

// OPT names with the "model." prefix; checkpoints saved without it are normalized first.
constexpr name_rule opt_rules[] = {
    {"model.decoder.embed_tokens", "token_embd", 0},
    {"model.decoder.embed_positions", "position_embd", 1},
    {"model.decoder.project_in", "token_embd_proj", 2},
    {"model.decoder.layers.{}.self_attn_layer_norm", "blk.{}.attn_norm", 0},
    {"model.decoder.layers.{}.self_attn.q_proj", "blk.{}.attn_q", 1},
    {"model.decoder.layers.{}.self_attn.k_proj", "blk.{}.attn_k", 2},
    {"model.decoder.layers.{}.self_attn.v_proj", "blk.{}.attn_v", 3},
    {"model.decoder.layers.{}.self_attn.out_proj", "blk.{}.attn_output", 4},
    {"model.decoder.layers.{}.final_layer_norm", "blk.{}.ffn_norm", 5},
    {"model.decoder.layers.{}.fc1", "blk.{}.ffn_up", 6},
    {"model.decoder.layers.{}.fc2", "blk.{}.ffn_down", 7},
    {"model.decoder.final_layer_norm", "output_norm", 0},
    {"model.decoder.project_out", "output_proj", 1},
    {"lm_head", "output", 2},
};

struct rule_set {
    const name_rule * begin;
    const name_rule * end;
    bool permute_qk = true;  // false: the rules' q/k permutations do not apply
};

std::optional<rule_set> rules_for(std::string_view arch) {
    if (arch == "llama") return rule_set{std::begin(llama_rules), std::end(llama_rules)};
    // qwen2: llama's names (its q/k/v also carry biases), without the permutation (NEOX RoPE in GGUF too).
    if (arch == "qwen2") return rule_set{std::begin(llama_rules), std::end(llama_rules), false};
    if (arch == "qwen") return rule_set{std::begin(qwen_rules), std::end(qwen_rules)};
    if (arch == "qwen3") return rule_set{std::begin(qwen3_rules), std::end(qwen3_rules)};
    if (arch == "gemma2" || arch == "gemma3") return rule_set{std::begin(gemma_rules), std::end(gemma_rules)};
    if (arch == "phi3") return rule_set{std::begin(phi3_rules), std::end(phi3_rules)};
    if (arch == "opt") return rule_set{std::begin(opt_rules), std::end(opt_rules)};
    return std::nullopt;
}

// The result of matching one HF name.
struct match {
    const name_rule * rule = nullptr;
    hf_permutation perm = hf_permutation::none;  // the rule's, where its architecture permutes
    int64_t layer = -1;  // -1 for tensors outside the layers
    std::string suffix;  // ".weight" or ".bias"
};

std::string normalize(std::string_view arch, std::string_view hf_name) {
    if (arch == "opt" && hf_name.starts_with("decoder.")) return "model." + std::string(hf_name);
    return std::string(hf_name);
}

// `name` against a rule pattern whose "{}" stands for a layer index: the index (-1 for a pattern
// without one), or nullopt when it does not match. "01" is not a layer index.
std::optional<int64_t> match_pattern(std::string_view pat, std::string_view name) {
    const size_t hole = pat.find("{}");
    if (hole == std::string_view::npos) return name == pat ? std::optional<int64_t>(-1) : std::nullopt;
    const std::string_view head = pat.substr(0, hole), tail = pat.substr(hole + 2);
    if (!name.starts_with(head) || !name.ends_with(tail) || name.size() <= head.size() + tail.size()) return std::nullopt;
    const std::string_view digits = name.substr(head.size(), name.size() - head.size() - tail.size());
    if (digits.size() > 1 && digits[0] == '0') return std::nullopt;
    int64_t il = -1;
    const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), il);
    if (ec != std::errc() || p != digits.data() + digits.size() || il < 0) return std::nullopt;
    return il;
}

// A rule pattern with its "{}" replaced by layer il (il < 0: a pattern without one).
std::string fill_pattern(std::string_view pat, int64_t il) {
    std::string out(pat);
    const size_t hole = out.find("{}");
    if (hole != std::string::npos) out.replace(hole, 2, std::to_string(il));
    return out;
}

std::optional<match> match_name(std::string_view arch, std::string_view hf_name_in) {
    const std::optional<rule_set> rules = rules_for(arch);
    if (!rules) return std::nullopt;
    const std::string hf_name = normalize(arch, hf_name_in);
    std::string_view base = hf_name;
    std::string suffix;
    for (const char * s : {".weight", ".bias"}) {
        if (base.ends_with(s)) {
            suffix = s;
            base.remove_suffix(std::strlen(s));
            break;
        }
    }
    if (suffix.empty()) return std::nullopt;
    for (const name_rule * r = rules->begin; r != rules->end; ++r) {
        if (const std::optional<int64_t> il = match_pattern(r->hf, base)) {
            return match{r, rules->permute_qk ? r->perm : hf_permutation::none, *il, suffix};
        }
    }
    return std::nullopt;
}

std::string gguf_name_of(const match & m) {
    return fill_pattern(m.rule->gguf, m.layer) + m.suffix;
}

// Group of a rule: before the layers, a layer tensor, after the layers. The rule tables list the
// global tensors before the layers first and those after them last.
int group_of(const match & m, const rule_set & rules) {
    if (m.layer >= 0) return group_layer;
    for (const name_rule * r = rules.begin; r != rules.end; ++r) {
        if (std::string_view(r->hf).find("{}") != std::string_view::npos) return group_post;  // a layer rule came first
        if (r == m.rule) return group_pre;
    }
    return group_post;
}

}  // namespace

std::string_view hf_supported_architectures() {
    return "model_type llama, mistral, qwen2, qwen3, qwen, gemma2, gemma3_text, phi3, opt (architectures "
           "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, QWenLMHeadModel, "
           "Gemma2ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM, OPTForCausalLM)";
}

std::string hf_architecture(const hf_checkpoint & ckpt) {
    static const std::map<std::string, std::string, std::less<>> by_model_type = {
        {"llama", "llama"}, {"mistral", "llama"}, {"qwen2", "qwen2"},        {"qwen3", "qwen3"},
        {"qwen", "qwen"},   {"gemma2", "gemma2"},  {"gemma3_text", "gemma3"}, {"phi3", "phi3"},
        {"opt", "opt"},
    };
    static const std::map<std::string, std::string, std::less<>> by_class = {
        {"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "llama"}, {"Qwen2ForCausalLM", "qwen2"},
        {"QWenLMHeadModel", "qwen"},   {"OPTForCausalLM", "opt"},              {"Qwen3ForCausalLM", "qwen3"},
        {"Gemma2ForCausalLM", "gemma2"}, {"Gemma3ForCausalLM", "gemma3"},      {"Phi3ForCausalLM", "phi3"},
    };
    const std::optional<std::string> model_type = ckpt.config().optional<std::string>("/model_type");
    if (model_type) {
        const auto it = by_model_type.find(*model_type);
        if (it != by_model_type.end()) return it->second;
    }
    const std::optional<std::vector<std::string>> archs =
        ckpt.config().optional<std::vector<std::string>>("/architectures");
    // `architectures` decides only when model_type is absent: a model_type we do not know is another
    // model, whatever class name it borrows.
    if (!model_type && archs && !archs->empty()) {
        const auto it = by_class.find(archs->front());
        if (it != by_class.end()) return it->second;
    }
    fail_input("{}: unsupported architecture: model_type {}, architectures {}; supported: {}", ckpt.config_path(),
               model_type ? "\"" + *model_type + "\"" : std::string("absent"),
               archs ? fmt::format("[\"{}\"]", fmt::join(*archs, "\", \"")) : std::string("absent"),
               hf_supported_architectures());
}

std::optional<std::string> hf_tensor_name_of(std::string_view arch, std::string_view gguf_name) {
    const std::optional<rule_set> rules = rules_for(arch);
    if (!rules) return std::nullopt;
    for (const char * suffix : {".weight", ".bias"}) {
        if (!gguf_name.ends_with(suffix)) continue;
        const std::string_view base = gguf_name.substr(0, gguf_name.size() - std::strlen(suffix));
        for (const name_rule * r = rules->begin; r != rules->end; ++r) {
            if (const std::optional<int64_t> il = match_pattern(r->gguf, base)) return fill_pattern(r->hf, *il) + suffix;
        }
    }
    return std::nullopt;
}

std::optional<std::string> hf_gguf_tensor_name(std::string_view arch, std::string_view hf_name) {
    const std::optional<match> m = match_name(arch, hf_name);
    if (!m) return std::nullopt;
    return gguf_name_of(*m);
}

bool hf_tensor_ignored(std::string_view arch, std::string_view hf_name) {
    (void)arch;
    // Buffers some exporters save next to the weights: RoPE inverse frequencies (recomputed from
    // the config) and GPT-2-style causal masks.
    return hf_name.ends_with("rotary_emb.inv_freq") || hf_name.ends_with(".attn.masked_bias") ||
           hf_name.ends_with(".attn.bias") || hf_name.ends_with(".attn.inv_freq");
}

hf_permutation hf_tensor_permutation(std::string_view arch, std::string_view hf_name) {
    const std::optional<match> m = match_name(arch, hf_name);
    return m ? m->perm : hf_permutation::none;
}

std::vector<hf_tensor_mapping> hf_tensor_map(const hf_checkpoint & ckpt, const std::string & arch) {
    const std::optional<rule_set> rules = rules_for(arch);
    if (!rules) {
        fail_input("unsupported GGUF architecture '{}'; supported: llama, qwen2, qwen, qwen3, gemma2, gemma3, phi3, opt",
                   arch);
    }
    struct item {
        int group;
        int64_t layer;
        int rank;
        bool is_bias;
        hf_tensor_mapping m;
    };
    std::vector<item> items;
    std::map<std::string, std::string> seen;  // gguf name -> hf name
    for (const std::string & name : ckpt.tensor_names()) {
        const std::optional<match> m = match_name(arch, name);
        if (!m) {
            if (hf_tensor_ignored(arch, name)) continue;
            fail_input("{}: tensor '{}' is not part of architecture '{}' (unknown tensor name)", ckpt.dir(), name,
                       arch);
        }
        hf_tensor_mapping t{name, gguf_name_of(*m), m->perm};
        const auto [it, inserted] = seen.emplace(t.gguf_name, name);
        if (!inserted) {
            fail_input("{}: tensors '{}' and '{}' both map to GGUF tensor '{}'", ckpt.dir(), it->second, name,
                       t.gguf_name);
        }
        items.push_back({group_of(*m, *rules), m->layer, m->rule->rank, m->suffix == ".bias", std::move(t)});
    }
    std::sort(items.begin(), items.end(), [](const item & a, const item & b) {
        if (a.group != b.group) return a.group < b.group;
        if (a.layer != b.layer) return a.layer < b.layer;
        if (a.rank != b.rank) return a.rank < b.rank;
        return a.is_bias < b.is_bias;
    });
    std::vector<hf_tensor_mapping> out;
    out.reserve(items.size());
    for (item & i : items) out.push_back(std::move(i.m));
    return out;
}

int64_t rotate_half_source_row(int64_t row, int64_t head_dim) {
    HILL_ASSERT(head_dim > 0 && head_dim % 2 == 0 && row >= 0);
    const int64_t head = row / head_dim, i = row % head_dim;
    const int64_t j = i / 2, r = i % 2;
    return head * head_dim + r * (head_dim / 2) + j;
}

namespace {

void permute_rows(const void * src, void * dst, int64_t n_rows, size_t row_bytes, int64_t n_head, bool to_pairs) {
    HILL_ASSERT(n_head > 0 && n_rows % n_head == 0);
    const int64_t head_dim = n_rows / n_head;
    HILL_ASSERT(head_dim % 2 == 0);
    const auto * s = static_cast<const uint8_t *>(src);
    auto * d = static_cast<uint8_t *>(dst);
    const size_t total = size_t(n_rows) * row_bytes;
    HILL_ASSERT(s + total <= d || d + total <= s);
    for (int64_t r = 0; r < n_rows; ++r) {
        const int64_t other = rotate_half_source_row(r, head_dim);
        // to pairs: dst[r] = src[other]; back: dst[other] = src[r].
        const int64_t from = to_pairs ? other : r, to = to_pairs ? r : other;
        std::memcpy(d + size_t(to) * row_bytes, s + size_t(from) * row_bytes, row_bytes);
    }
}

}  // namespace

void permute_rotate_half_to_pairs(const void * src, void * dst, int64_t n_rows, size_t row_bytes, int64_t n_head) {
    permute_rows(src, dst, n_rows, row_bytes, n_head, true);
}

void permute_pairs_to_rotate_half(const void * src, void * dst, int64_t n_rows, size_t row_bytes, int64_t n_head) {
    permute_rows(src, dst, n_rows, row_bytes, n_head, false);
}

std::vector<float> llama3_rope_freq_factors(double rope_theta, int64_t head_dim, double factor, double low_freq_factor,
                                            double high_freq_factor, double original_max_position) {
    HILL_ASSERT(head_dim > 0 && head_dim % 2 == 0);
    const double low_freq_wavelen = original_max_position / low_freq_factor;
    const double high_freq_wavelen = original_max_position / high_freq_factor;
    std::vector<float> out(size_t(head_dim / 2));
    for (int64_t i = 0; i < head_dim / 2; ++i) {
        const double theta = std::pow(rope_theta, -2.0 * double(i) / double(head_dim));
        const double wavelen = 2.0 * std::numbers::pi / theta;
        double f;
        if (wavelen < high_freq_wavelen) {
            f = 1.0;
        } else if (wavelen > low_freq_wavelen) {
            f = factor;
        } else {
            const double s = (original_max_position / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            f = 1.0 / ((1.0 - s) / factor + s);
        }
        out[size_t(i)] = float(f);
    }
    return out;
}

}  // namespace hill
