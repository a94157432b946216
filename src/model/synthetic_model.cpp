#include "model/synthetic_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "compute/matmul.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "format/gguf_writer.h"
#include "model/weight_scheme.h"

namespace hill {

namespace {

// splitmix64: a fixed generator, so a model file is the same on every platform and library.
struct rng64 {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    float uniform(float lo, float hi) { return lo + (hi - lo) * float(double(next() >> 11) * 0x1.0p-53); }
};

const std::string space_mark = "\xE2\x96\x81";  // U+2581, SentencePiece's space

struct spm_vocab {
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
    std::map<std::string, int32_t> index;

    explicit spm_vocab(const std::vector<std::string> & control = {}) {
        add("<unk>", 0.0f, 2);
        add("<s>", 0.0f, 3);
        add("</s>", 0.0f, 3);
        for (const std::string & c : control) add(c, 0.0f, 3);
        for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 0.0f, 6);
    }
    int32_t add(const std::string & piece, float score, int32_t type = 1) {
        auto it = index.find(piece);
        if (it != index.end()) return it->second;
        const auto id = int32_t(tokens.size());
        tokens.push_back(piece);
        scores.push_back(score);
        types.push_back(type);
        index.emplace(piece, id);
        return id;
    }
    void write(gguf_writer & w) const {
        w.set_string("tokenizer.ggml.model", "llama");
        w.set_string_array("tokenizer.ggml.tokens", tokens);
        w.set_f32_array("tokenizer.ggml.scores", scores);
        w.set_i32_array("tokenizer.ggml.token_type", types);
        w.set_u32("tokenizer.ggml.bos_token_id", 1);
        w.set_u32("tokenizer.ggml.eos_token_id", 2);
        w.set_u32("tokenizer.ggml.unknown_token_id", 0);
        w.set_bool("tokenizer.ggml.add_bos_token", true);
    }
};

struct dims {
    int32_t n_vocab, n_embd, n_ff, n_layer, n_head, n_head_kv, n_ctx;
};

void check_dims(const dims & d, ggml_type type, int32_t n_control = 3) {
    if (d.n_vocab < n_control + 256) {
        fail_usage("vocabulary size must be >= {} ({} control + 256 byte tokens), got {}", n_control + 256, n_control,
                   d.n_vocab);
    }
    for (auto [name, v] : {std::pair{"n_embd", d.n_embd},
                           {"n_ff", d.n_ff},
                           {"n_layer", d.n_layer},
                           {"n_head", d.n_head},
                           {"n_head_kv", d.n_head_kv},
                           {"n_ctx", d.n_ctx}}) {
        if (v <= 0) fail_usage("{} must be > 0, got {}", name, v);
    }
    if (d.n_embd % d.n_head != 0 || (d.n_embd / d.n_head) % 2 != 0) {
        fail_usage("n_embd {} must be n_head {} times an even head dimension", d.n_embd, d.n_head);
    }
    if (d.n_head % d.n_head_kv != 0) fail_usage("n_head {} must be a multiple of n_head_kv {}", d.n_head, d.n_head_kv);
    // Super-block types need rows of 32 only: other rows fall back (weight_scheme.h).
    const int64_t bs = std::min<int64_t>(ggml_block_size(type), 32);
    if (d.n_embd % bs != 0 || d.n_ff % bs != 0) {
        fail_usage("{} needs n_embd ({}) and n_ff ({}) to be multiples of {}", ggml_type_name(type), d.n_embd, d.n_ff,
                   bs);
    }
}

void write_header(gguf_writer & w, const dims & d, const std::string & name, float freq_base, float scaling,
                  const std::string & arch = "llama", int32_t n_swa = 0) {
    const std::string a = arch + ".";
    w.set_string("general.architecture", arch);
    w.set_string("general.name", name);
    w.set_u32(a + "context_length", uint32_t(d.n_ctx));
    w.set_u32(a + "embedding_length", uint32_t(d.n_embd));
    w.set_u32(a + "feed_forward_length", uint32_t(d.n_ff));
    w.set_u32(a + "block_count", uint32_t(d.n_layer));
    w.set_u32(a + "attention.head_count", uint32_t(d.n_head));
    w.set_u32(a + "attention.head_count_kv", uint32_t(d.n_head_kv));
    w.set_u32(a + "rope.dimension_count", uint32_t(d.n_embd / d.n_head));
    w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
    w.set_f32(a + "rope.freq_base", freq_base);
    if (scaling != 1.0f) {
        w.set_string(a + "rope.scaling.type", "linear");
        w.set_f32(a + "rope.scaling.factor", scaling);
    }
    if (n_swa > 0) w.set_u32(a + "attention.sliding_window", uint32_t(n_swa));
    if (arch == "gemma2") {  // Gemma 2's values
        w.set_f32(a + "attn_logit_softcapping", 50.0f);
        w.set_f32(a + "final_logit_softcapping", 30.0f);
    }
}

// Adds an f32 matrix [rows, cols] stored as `scheme` says for it.
void add_matrix(gguf_writer & w, const std::string & name, const weight_scheme & scheme, int32_t n_layer, bool tied,
                int64_t rows, int64_t cols, const std::vector<float> & v) {
    throw_if_stopped("the writing of a model");
    const ggml_type type = weight_scheme_type(scheme, name, cols, n_layer, !tied).type;
    const size_t rb = *ggml_row_bytes(type, cols);
    std::vector<uint8_t> data(rb * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) quantize_row(type, v.data() + r * cols, data.data() + size_t(r) * rb, cols);
    w.add_tensor(name, type, {cols, rows}, data.data());
}

std::vector<float> random_values(rng64 & rng, size_t n, float scale) {
    std::vector<float> v(n);
    for (auto & x : v) x = rng.uniform(-scale, scale);
    return v;
}

// Every matrix of the model: random unless `fixed` supplies it by tensor name. arch: the tensors of
// that llama-family architecture (write_random_model).
void add_weights(gguf_writer & w, const dims & d, const weight_scheme & scheme, bool tied, rng64 & rng,
                 const std::map<std::string, std::vector<float>> & fixed, const std::string & arch = "llama") {
    const int64_t hd = d.n_embd / d.n_head;
    auto mat = [&](const std::string & name, int64_t rows, int64_t cols) {
        auto it = fixed.find(name);
        add_matrix(
            w, name, scheme, d.n_layer, tied, rows, cols,
            it != fixed.end() ? it->second : random_values(rng, size_t(rows * cols), 1.0f / std::sqrt(float(cols))));
    };
    auto norm = [&](const std::string & name, int64_t n) {
        std::vector<float> v = random_values(rng, size_t(n), 0.1f);
        for (auto & x : v) x += 1.0f;
        if (auto it = fixed.find(name); it != fixed.end()) v = it->second;
        w.add_tensor(name, ggml_type::f32, {n}, v.data());
    };
    auto bias = [&](const std::string & name, int64_t n) {
        const std::vector<float> v = random_values(rng, size_t(n), 0.2f);
        w.add_tensor(name, ggml_type::f32, {n}, v.data());
    };
    const bool gemma = arch == "gemma2" || arch == "gemma3";
    const bool qk_norm = arch == "qwen3" || arch == "gemma3";
    mat("token_embd.weight", d.n_vocab, d.n_embd);
    norm("output_norm.weight", d.n_embd);
    if (!tied && !gemma) mat("output.weight", d.n_vocab, d.n_embd);
    for (int il = 0; il < d.n_layer; ++il) {
        const std::string p = fmt::format("blk.{}.", il);
        norm(p + "attn_norm.weight", d.n_embd);
        if (arch == "phi3") {
            mat(p + "attn_qkv.weight", (d.n_head + 2 * d.n_head_kv) * hd, d.n_embd);
        } else {
            mat(p + "attn_q.weight", d.n_head * hd, d.n_embd);
            mat(p + "attn_k.weight", d.n_head_kv * hd, d.n_embd);
            mat(p + "attn_v.weight", d.n_head_kv * hd, d.n_embd);
        }
        if (arch == "qwen2") {
            bias(p + "attn_q.bias", d.n_head * hd);
            bias(p + "attn_k.bias", d.n_head_kv * hd);
            bias(p + "attn_v.bias", d.n_head_kv * hd);
        }
        if (qk_norm) {
            norm(p + "attn_q_norm.weight", hd);
            norm(p + "attn_k_norm.weight", hd);
        }
        mat(p + "attn_output.weight", d.n_embd, d.n_head * hd);
        if (gemma) norm(p + "post_attention_norm.weight", d.n_embd);
        norm(p + "ffn_norm.weight", d.n_embd);
        if (arch == "phi3") {
            mat(p + "ffn_up.weight", 2 * int64_t(d.n_ff), d.n_embd);  // gate rows, then up rows
        } else {
            mat(p + "ffn_gate.weight", d.n_ff, d.n_embd);
            mat(p + "ffn_up.weight", d.n_ff, d.n_embd);
        }
        mat(p + "ffn_down.weight", d.n_embd, d.n_ff);
        if (gemma) norm(p + "post_ffw_norm.weight", d.n_embd);
    }
}

}  // namespace

void write_random_model(const std::string & path, const random_model_params & p) {
    const dims d{p.n_vocab, p.n_embd, p.n_ff, p.n_layer, p.n_head, p.n_head_kv, p.n_ctx};
    check_dims(d, p.type.type, 3 + int32_t(p.control_tokens.size()));
    // The loader's bounds (model_loader.cpp): a file this writes loads.
    if (!(p.rope_freq_base > 0.0f) || !std::isfinite(p.rope_freq_base)) {
        fail_usage("RoPE frequency base must be finite and > 0, got {}", p.rope_freq_base);
    }
    if (!(p.rope_scaling_factor > 0.0f) || !std::isfinite(p.rope_scaling_factor) ||
        !std::isfinite(1.0f / p.rope_scaling_factor)) {
        fail_usage("RoPE scaling factor must be finite and > 0, got {}", p.rope_scaling_factor);
    }
    const std::vector<std::string> archs = {"llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"};
    if (std::find(archs.begin(), archs.end(), p.arch) == archs.end()) {
        fail_usage("architecture '{}' is not one make-model writes; supported: {}", p.arch, random_model_archs);
    }
    if (p.n_swa < 0) fail_usage("sliding window must be >= 0, got {}", p.n_swa);
    if (p.arch == "gemma2" && p.n_swa == 0) fail_usage("gemma2 needs a sliding window (--n-swa N, e.g. 4096)");

    spm_vocab vocab(p.control_tokens);
    // Fill the vocabulary with letters, then space-prefixed letters, then letter pairs.
    std::vector<std::string> extra = {space_mark};
    for (char c = 'a'; c <= 'z'; ++c) extra.emplace_back(1, c);
    for (char c = 'a'; c <= 'z'; ++c) extra.push_back(space_mark + c);
    for (char a = 'a'; a <= 'z'; ++a)
        for (char b = 'a'; b <= 'z'; ++b) extra.push_back(std::string{a, b});
    for (size_t i = 0; vocab.tokens.size() < size_t(p.n_vocab); ++i) {
        const std::string piece = i < extra.size() ? extra[i] : fmt::format("{}t{}", space_mark, i);
        vocab.add(piece, -float(i));
    }

    gguf_writer w;
    write_header(w, d, "hillinfer-random", p.rope_freq_base, p.rope_scaling_factor, p.arch, p.n_swa);
    w.set_u64("general.seed", p.seed);
    w.set_u32("general.file_type", weight_scheme_file_type(p.type));
    vocab.write(w);
    if (!p.chat_template.empty()) w.set_string("tokenizer.chat_template", p.chat_template);
    rng64 rng{p.seed};
    std::map<std::string, std::vector<float>> fixed;
    if (!p.chat_end_token.empty()) {
        const auto it = vocab.index.find(p.chat_end_token);
        HILL_ASSERT(it != vocab.index.end());
        // The output matrix, random as add_weights draws it (from a stream of its own), one row scaled.
        rng64 out_rng{p.seed ^ 0x0c4a7ull};
        std::vector<float> out = random_values(out_rng, size_t(d.n_vocab) * size_t(d.n_embd),
                                               1.0f / std::sqrt(float(d.n_embd)));
        for (int64_t c = 0; c < d.n_embd; ++c) out[size_t(it->second) * size_t(d.n_embd) + size_t(c)] *= chat_end_scale;
        fixed[p.tied_output ? "token_embd.weight" : "output.weight"] = std::move(out);
    }
    add_weights(w, d, p.type, p.tied_output, rng, fixed, p.arch);
    w.write(path);
}

void write_bigram_model(const std::string & path, std::string_view text, int32_t n_ctx) {
    std::vector<std::string> words;
    for (size_t i = 0; i < text.size();) {
        while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
        size_t j = i;
        while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
        if (j > i) words.emplace_back(text.substr(i, j - i));
        i = j;
    }
    if (words.size() < 2) fail_usage("the bigram model needs a text of at least 2 words, got {}", words.size());

    // Vocabulary: each word as "▁word", and every prefix "▁w", "▁wo", ... so merges reach it.
    spm_vocab vocab;
    std::vector<int32_t> ids;
    std::set<int32_t> word_ids;
    for (const std::string & word : words) {
        const std::string piece = space_mark + word;
        for (size_t n = space_mark.size() + 1; n < piece.size(); ++n) vocab.add(piece.substr(0, n), -float(n));
        const int32_t id = vocab.add(piece, -float(piece.size()));
        ids.push_back(id);
        word_ids.insert(id);
    }
    const auto n_vocab = int32_t(vocab.tokens.size());
    const int32_t n_embd = (n_vocab + 63) / 64 * 64;
    const dims d{n_vocab, n_embd, 64, 2, 4, 2, n_ctx};
    if (n_vocab > bigram_max_vocab) {
        // Embedding and output [n_vocab, n_embd], and per layer Q and O [n_embd, n_embd], K and V
        // [n_embd * n_head_kv / n_head, n_embd] (n_embd ~ n_vocab): built in f32 and written in f16,
        // about 6 bytes per element in memory (1,000 words, 8,760 tokens: 3.5 GB peak, 1.2 GiB file).
        const double e = double(n_embd);
        const double elements =
            2.0 * double(n_vocab) * e + double(d.n_layer) * (2.0 * e * e + 2.0 * e * e * d.n_head_kv / d.n_head);
        fail_usage(
            "the bigram model of this text would have {} tokens (its {} distinct words and their prefixes), "
            "its matrices {} x {}: about {:.1f} GB in memory and {:.1f} GB on disk; make-model bigram takes "
            "texts of at most {} tokens: give a shorter text",
            n_vocab, word_ids.size(), n_vocab, n_embd, elements * 6 / 1e9, elements * 2 / 1e9, bigram_max_vocab);
    }
    check_dims(d, ggml_type::f16);

    // Bigram counts; the last word is followed by EOS.
    std::map<std::pair<int32_t, int32_t>, double> count;
    std::map<int32_t, double> total;
    for (size_t i = 0; i < ids.size(); ++i) {
        const int32_t next = i + 1 < ids.size() ? ids[i + 1] : 2;
        count[{ids[i], next}] += 1.0;
        total[ids[i]] += 1.0;
    }
    const double k = 0.01;  // add-k smoothing over word targets and EOS
    const double n_targets = double(word_ids.size() + 1);
    const float inv = 1.0f / std::sqrt(float(n_embd));
    std::vector<float> out(size_t(n_vocab) * size_t(n_embd), 0.0f);  // [n_vocab (next), n_embd (current)]
    for (int32_t cur : word_ids) {
        throw_if_stopped("the writing of a model");
        for (int32_t next = 0; next < n_vocab; ++next) {
            const bool target = next == 2 || word_ids.count(next) != 0;
            const auto it = count.find({cur, next});
            const double c = it != count.end() ? it->second : 0.0;
            const double lp = target ? std::log((c + k) / (total[cur] + k * n_targets)) : -30.0;
            out[size_t(next) * size_t(n_embd) + size_t(cur)] = float(lp) * inv;
        }
    }
    std::vector<float> embd(size_t(n_vocab) * size_t(n_embd), 0.0f);  // one-hot rows
    for (int32_t i = 0; i < n_vocab; ++i) embd[size_t(i) * size_t(n_embd) + size_t(i)] = 1.0f;
    std::map<std::string, std::vector<float>> fixed = {
        {"token_embd.weight", embd},
        {"output.weight", out},
        {"output_norm.weight", std::vector<float>(size_t(n_embd), 1.0f)},
    };
    for (int il = 0; il < d.n_layer; ++il) {
        fixed[fmt::format("blk.{}.attn_output.weight", il)] = std::vector<float>(size_t(n_embd) * size_t(n_embd), 0.0f);
        fixed[fmt::format("blk.{}.ffn_down.weight", il)] = std::vector<float>(size_t(n_embd) * size_t(d.n_ff), 0.0f);
    }

    gguf_writer w;
    write_header(w, d, "hillinfer-bigram", 10000.0f, 1.0f);
    vocab.write(w);
    rng64 rng{1};
    add_weights(w, d, ggml_type::f16, false, rng, fixed);
    w.write(path);
}

// ---- passkey model (docs/passkey.md). Constants and names follow the prototype (build.py). ----
namespace {
namespace pk {

constexpr int32_t n_layer = 2;
constexpr int32_t n_head = 5;     // layer 0: head h looks back δ = h+1 tokens; layer 1: head 0 copies
constexpr int32_t n_head_kv = 1;  // every head of a layer shares one K/V head
constexpr int32_t head_dim = 128;
constexpr int32_t n_embd = n_head * head_dim;
constexpr int32_t n_ff = 64;        // the FFN weights are all zero
constexpr float freq_base = 1e14f;  // layer-1 pairs 31..63 (θ <= 1.7e-7) turn < 0.18 rad over 1M tokens
constexpr double rms_eps = 1e-5;
constexpr int32_t n_slot = n_head;  // induction n-gram: query tokens t..t-4, key tokens j-1..j-5

constexpr double c0 = 16.0;           // the constant residual dim; the residual norm is the same at every position
constexpr int32_t pos_pairs = 16;     // layer 0 uses RoPE pairs 0..15
constexpr double pos_a0 = 0.4;        // share of Σ q_i·k_i on pair 0 (θ = 1 rad); pairs 1..15 share the rest
constexpr double pos_sum = 1600.0;    // raw Σ q_i·k_i at the peak: margin 27.6 after the 1/sqrt(head_dim) scale
constexpr double ind_w = 20.0;        // layer 1: score per matching slot after the 1/sqrt(head_dim) scale
constexpr double logit = 20.0;        // logit of the copied token per unit of attention mass
constexpr double logit_other = -5.0;  // logit of every token outside the copy set

// Match classes (the n-gram identity): 0..9 digits with or without the space mark, then these.
constexpr int32_t m_is = 10, m_key = 11, m_pass = 12, m_other = 13, n_match = 14;
constexpr int32_t n_match_used = 13;  // "other" never matches: its q/k weights are 0
// Copy classes (what layer 1 copies): 0..9 "0".."9", 10..19 "▁0".."▁9", 20 ".", 21 none.
constexpr int32_t c_dot = 20, c_none = 21;

// Residual stream layout (f32 [n_embd]).
constexpr int32_t d_const = 0;  // c0
constexpr int32_t d_match = 1;  // one-hot match class of token t   [n_match]
constexpr int32_t d_copy = 16;  // one-hot copy class of token t    [c_none + 1]
// Slot δ = 1..n_slot: one-hot match class of token t-δ [n_match], written by layer 0.
constexpr int32_t d_slot(int32_t delta) {
    return 40 + 16 * (delta - 1);
}
constexpr int32_t d_out = 40 + 16 * n_slot;  // copy class of the copied token [c_none], written by layer 1
// Layer-1 match dims: the highest (lowest-frequency) pairs, pair-aligned.
constexpr int32_t ind_dim0 = head_dim - 2 * ((n_slot * n_match_used + 1) / 2);
static_assert(d_out + c_none <= n_embd && ind_dim0 >= 2 * pos_pairs);

// The words of the needle and the question ("The pass key is 40582. Remember it.", "What is the
// pass key?"): whole-word tokens, so the phrase tokenizes the same wherever it stands.
constexpr std::string_view phrase_words[] = {"The", "pass", "key", "is", "Remember", "it", "What", "the"};

// <unk> <s> </s>, byte tokens, "0".."9", "▁0".."▁9", "▁", then every prefix of "▁word" for the
// phrase words. Score: -(length in characters); every merge is unambiguous, so any decreasing
// score works.
spm_vocab vocab() {
    spm_vocab v;
    for (char c = '0'; c <= '9'; ++c) v.add(std::string(1, c), -1.0f);
    for (char c = '0'; c <= '9'; ++c) v.add(space_mark + c, -2.0f);
    v.add(space_mark, -1.0f);
    for (std::string_view word : phrase_words) {
        for (size_t n = 1; n <= word.size(); ++n) v.add(space_mark + std::string(word.substr(0, n)), -float(n + 1));
    }
    return v;
}

struct token_class {
    int32_t match = m_other;
    int32_t copy = c_none;
};

token_class classify(const std::string & piece) {
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    if (piece.size() == 1 && digit(piece[0])) return {piece[0] - '0', piece[0] - '0'};
    if (piece.size() == space_mark.size() + 1 && piece.starts_with(space_mark) && digit(piece.back())) {
        return {piece.back() - '0', 10 + (piece.back() - '0')};
    }
    if (piece == space_mark + "is") return {m_is, c_none};
    if (piece == space_mark + "key") return {m_key, c_none};
    if (piece == space_mark + "pass") return {m_pass, c_none};
    if (piece == "<0x2E>") return {m_other, c_dot};
    return {};
}

// RMS of the residual entering a norm with n_onehot one-hot features beside the constant.
double residual_rms(int32_t n_onehot) {
    return std::sqrt((c0 * c0 + n_onehot) / n_embd + rms_eps);
}
const double rms0 = residual_rms(2);               // layer 0 input: match + copy
const double rms1 = residual_rms(2 + n_slot);      // layer 1 input: + the slots
const double rmsf = residual_rms(2 + n_slot + 1);  // output: + the copied token

// Row-major f32 matrix [rows, cols], zero-initialized, filled in double.
struct matrix {
    int64_t cols;
    std::vector<float> v;
    matrix(int64_t rows, int64_t n_cols) : cols(n_cols), v(size_t(rows * n_cols), 0.0f) {}
    void set(int64_t r, int64_t c, double x) { v[size_t(r * cols + c)] = float(x); }
};

// Layer 0: head h puts the match class of token t-(h+1) into slot h+1, by position only.
// k_j = (sqrt(a_i) cos jθ_i, sqrt(a_i) sin jθ_i) for pairs i < pos_pairs; q is k pre-rotated by
// -δθ_i, so q_t·k_j = Σ_i a_i cos((t-j-δ)θ_i), which peaks at j = t-δ.
void add_layer0(std::map<std::string, std::vector<float>> & fixed) {
    const double nu = c0 / rms0;  // the normalized constant dim
    std::vector<double> amp(pos_pairs), theta(pos_pairs);
    for (int32_t i = 0; i < pos_pairs; ++i) {
        const double a = i == 0 ? pos_a0 : (1.0 - pos_a0) / (pos_pairs - 1);
        amp[size_t(i)] = std::sqrt(a * pos_sum);
        theta[size_t(i)] = std::pow(double(freq_base), -2.0 * i / head_dim);
    }
    matrix wq(n_embd, n_embd), wk(head_dim, n_embd), wv(head_dim, n_embd), wo(n_embd, n_embd);
    for (int32_t i = 0; i < pos_pairs; ++i) wk.set(2 * i, d_const, amp[size_t(i)] / nu);
    for (int32_t h = 0; h < n_head; ++h) {
        const int32_t delta = h + 1;
        for (int32_t i = 0; i < pos_pairs; ++i) {
            wq.set(h * head_dim + 2 * i, d_const, amp[size_t(i)] * std::cos(delta * theta[size_t(i)]) / nu);
            wq.set(h * head_dim + 2 * i + 1, d_const, -amp[size_t(i)] * std::sin(delta * theta[size_t(i)]) / nu);
        }
        for (int32_t m = 0; m < n_match; ++m) wo.set(d_slot(delta) + m, h * head_dim + m, 1.0);
    }
    for (int32_t m = 0; m < n_match; ++m) wv.set(m, d_match + m, rms0);  // v_j = match class of j
    fixed["blk.0.attn_q.weight"] = std::move(wq.v);
    fixed["blk.0.attn_k.weight"] = std::move(wk.v);
    fixed["blk.0.attn_v.weight"] = std::move(wv.v);
    fixed["blk.0.attn_output.weight"] = std::move(wo.v);
}

// Layer 1: induction. The query is the classes of tokens t..t-4, the key the classes of tokens
// j-1..j-5, one dim per (slot, class); the value is the copy class of j. Every head gets the same
// query (so per-head attention recall stays meaningful); only head 0's output is used.
void add_layer1(std::map<std::string, std::vector<float>> & fixed) {
    const double qval = ind_w * std::sqrt(double(head_dim));  // raw score per matching slot
    matrix wq(n_embd, n_embd), wk(head_dim, n_embd), wv(head_dim, n_embd), wo(n_embd, n_embd);
    int32_t d = ind_dim0;
    for (int32_t s = 0; s < n_slot; ++s) {
        const int32_t q_src = s == 0 ? d_match : d_slot(s);
        for (int32_t m = 0; m < n_match_used; ++m, ++d) {
            for (int32_t h = 0; h < n_head; ++h) wq.set(h * head_dim + d, q_src + m, qval * rms1);
            wk.set(d, d_slot(s + 1) + m, rms1);
        }
    }
    for (int32_t c = 0; c < c_none; ++c) {
        wv.set(c, d_copy + c, rms1);
        wo.set(d_out + c, c, 1.0);
    }
    fixed["blk.1.attn_q.weight"] = std::move(wq.v);
    fixed["blk.1.attn_k.weight"] = std::move(wk.v);
    fixed["blk.1.attn_v.weight"] = std::move(wv.v);
    fixed["blk.1.attn_output.weight"] = std::move(wo.v);
}

// Embedding (constant, match class, copy class) and output (the copied token's logit is
// logit·mass; every token outside the copy set gets logit_other).
void add_embedding_and_output(std::map<std::string, std::vector<float>> & fixed, const spm_vocab & v) {
    const auto n_vocab = int64_t(v.tokens.size());
    matrix embd(n_vocab, n_embd), out(n_vocab, n_embd);
    for (int64_t t = 0; t < n_vocab; ++t) {
        const token_class tc = classify(v.tokens[size_t(t)]);
        embd.set(t, d_const, c0);
        embd.set(t, d_match + tc.match, 1.0);
        embd.set(t, d_copy + tc.copy, 1.0);
        if (tc.copy != c_none) {
            out.set(t, d_out + tc.copy, logit * rmsf);
        } else {
            out.set(t, d_const, logit_other * rmsf / c0);
        }
    }
    fixed["token_embd.weight"] = std::move(embd.v);
    fixed["output.weight"] = std::move(out.v);
}

// Unit norms and zero FFNs.
void add_norms_and_ffn(std::map<std::string, std::vector<float>> & fixed) {
    const std::vector<float> ones(size_t(n_embd), 1.0f);
    fixed["output_norm.weight"] = ones;
    for (int il = 0; il < n_layer; ++il) {
        const std::string p = fmt::format("blk.{}.", il);
        fixed[p + "attn_norm.weight"] = ones;
        fixed[p + "ffn_norm.weight"] = ones;
        for (const char * name : {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}) {
            fixed[p + name] = std::vector<float>(size_t(n_ff) * size_t(n_embd), 0.0f);
        }
    }
}

}  // namespace pk
}  // namespace

void write_passkey_model(const std::string & path, const passkey_model_params & p) {
    if (p.n_ctx <= 0 || p.n_ctx > passkey_n_ctx_max) {
        fail_usage("passkey model context must be in [1, {}] (where its margins hold), got {}", passkey_n_ctx_max,
                   p.n_ctx);
    }
    const spm_vocab v = pk::vocab();
    const dims d{int32_t(v.tokens.size()), pk::n_embd, pk::n_ff, pk::n_layer, pk::n_head, pk::n_head_kv, p.n_ctx};
    check_dims(d, ggml_type::f32);
    std::map<std::string, std::vector<float>> fixed;
    pk::add_embedding_and_output(fixed, v);
    pk::add_layer0(fixed);
    pk::add_layer1(fixed);
    pk::add_norms_and_ffn(fixed);

    gguf_writer w;
    write_header(w, d, "hillinfer-passkey", pk::freq_base, 1.0f);
    v.write(w);
    rng64 rng{1};  // `fixed` supplies every tensor: no random value reaches the file
    add_weights(w, d, ggml_type::f32, false, rng, fixed);
    w.write(path);
}

}  // namespace hill
