#include "model/synthetic_model.h"

#include "compute/matmul.h"
#include "core/error.h"
#include "model/gguf_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

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

    spm_vocab() {
        add("<unk>", 0.0f, 2);
        add("<s>", 0.0f, 3);
        add("</s>", 0.0f, 3);
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

void check_dims(const dims & d, ggml_type type) {
    if (d.n_vocab < 259) fail_usage("vocabulary size must be >= 259 (3 control + 256 byte tokens), got {}", d.n_vocab);
    for (auto [name, v] : {std::pair{"n_embd", d.n_embd}, {"n_ff", d.n_ff}, {"n_layer", d.n_layer},
                           {"n_head", d.n_head}, {"n_head_kv", d.n_head_kv}, {"n_ctx", d.n_ctx}}) {
        if (v <= 0) fail_usage("{} must be > 0, got {}", name, v);
    }
    if (d.n_embd % d.n_head != 0 || (d.n_embd / d.n_head) % 2 != 0) {
        fail_usage("n_embd {} must be n_head {} times an even head dimension", d.n_embd, d.n_head);
    }
    if (d.n_head % d.n_head_kv != 0) fail_usage("n_head {} must be a multiple of n_head_kv {}", d.n_head, d.n_head_kv);
    const int64_t bs = ggml_block_size(type);
    if (d.n_embd % bs != 0 || d.n_ff % bs != 0) {
        fail_usage("{} needs n_embd ({}) and n_ff ({}) to be multiples of {}", ggml_type_name(type), d.n_embd, d.n_ff,
                   bs);
    }
}

void write_header(gguf_writer & w, const dims & d, const std::string & name, float freq_base, float scaling) {
    w.set_string("general.architecture", "llama");
    w.set_string("general.name", name);
    w.set_u32("llama.context_length", uint32_t(d.n_ctx));
    w.set_u32("llama.embedding_length", uint32_t(d.n_embd));
    w.set_u32("llama.feed_forward_length", uint32_t(d.n_ff));
    w.set_u32("llama.block_count", uint32_t(d.n_layer));
    w.set_u32("llama.attention.head_count", uint32_t(d.n_head));
    w.set_u32("llama.attention.head_count_kv", uint32_t(d.n_head_kv));
    w.set_u32("llama.rope.dimension_count", uint32_t(d.n_embd / d.n_head));
    w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    w.set_f32("llama.rope.freq_base", freq_base);
    if (scaling != 1.0f) {
        w.set_string("llama.rope.scaling.type", "linear");
        w.set_f32("llama.rope.scaling.factor", scaling);
    }
}

// Adds an f32 matrix [rows, cols] stored as `type`.
void add_matrix(gguf_writer & w, const std::string & name, ggml_type type, int64_t rows, int64_t cols,
                const std::vector<float> & v) {
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

// Every matrix of the model: random unless `fixed` supplies it by tensor name.
void add_weights(gguf_writer & w, const dims & d, ggml_type type, bool tied, rng64 & rng,
                 const std::map<std::string, std::vector<float>> & fixed) {
    const int64_t hd = d.n_embd / d.n_head;
    auto mat = [&](const std::string & name, int64_t rows, int64_t cols) {
        auto it = fixed.find(name);
        add_matrix(w, name, type, rows, cols,
                   it != fixed.end() ? it->second : random_values(rng, size_t(rows * cols), 1.0f / std::sqrt(float(cols))));
    };
    auto norm = [&](const std::string & name) {
        std::vector<float> v = random_values(rng, size_t(d.n_embd), 0.1f);
        for (auto & x : v) x += 1.0f;
        if (auto it = fixed.find(name); it != fixed.end()) v = it->second;
        w.add_tensor(name, ggml_type::f32, {d.n_embd}, v.data());
    };
    mat("token_embd.weight", d.n_vocab, d.n_embd);
    norm("output_norm.weight");
    if (!tied) mat("output.weight", d.n_vocab, d.n_embd);
    for (int il = 0; il < d.n_layer; ++il) {
        const std::string p = fmt::format("blk.{}.", il);
        norm(p + "attn_norm.weight");
        mat(p + "attn_q.weight", d.n_head * hd, d.n_embd);
        mat(p + "attn_k.weight", d.n_head_kv * hd, d.n_embd);
        mat(p + "attn_v.weight", d.n_head_kv * hd, d.n_embd);
        mat(p + "attn_output.weight", d.n_embd, d.n_head * hd);
        norm(p + "ffn_norm.weight");
        mat(p + "ffn_gate.weight", d.n_ff, d.n_embd);
        mat(p + "ffn_up.weight", d.n_ff, d.n_embd);
        mat(p + "ffn_down.weight", d.n_embd, d.n_ff);
    }
}

}  // namespace

void write_random_model(const std::string & path, const random_model_params & p) {
    const dims d{p.n_vocab, p.n_embd, p.n_ff, p.n_layer, p.n_head, p.n_head_kv, p.n_ctx};
    check_dims(d, p.type);
    if (!(p.rope_freq_base > 0.0f)) fail_usage("RoPE frequency base must be > 0, got {}", p.rope_freq_base);
    if (!(p.rope_scaling_factor > 0.0f)) fail_usage("RoPE scaling factor must be > 0, got {}", p.rope_scaling_factor);

    spm_vocab vocab;
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
    write_header(w, d, "hillinfer-random", p.rope_freq_base, p.rope_scaling_factor);
    w.set_u64("general.seed", p.seed);
    vocab.write(w);
    rng64 rng{p.seed};
    add_weights(w, d, p.type, p.tied_output, rng, {});
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
    check_dims(d, ggml_type::f16);

    // Bigram counts; the last word is followed by EOS.
    std::map<std::pair<int32_t, int32_t>, double> count;
    std::map<int32_t, double> total;
    for (size_t i = 0; i < ids.size(); ++i) {
        const int32_t next = i + 1 < ids.size() ? ids[i + 1] : 2;
        count[{ids[i], next}] += 1.0;
        total[ids[i]] += 1.0;
    }
    const double k = 0.01;                          // add-k smoothing over word targets and EOS
    const double n_targets = double(word_ids.size() + 1);
    const float inv = 1.0f / std::sqrt(float(n_embd));
    std::vector<float> out(size_t(n_vocab) * size_t(n_embd), 0.0f);  // [n_vocab (next), n_embd (current)]
    for (int32_t cur : word_ids) {
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

}  // namespace hill
