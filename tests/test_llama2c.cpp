// llama2.c checkpoints: a checkpoint written here (shared or separate classifier) gives the same
// logits as the same weights written as GGUF; sizes that disagree with the header are refused.
#include "core/error.h"
#include "engine/session.h"
#include "format/gguf_writer.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>

namespace hill {
namespace {

constexpr int32_t dim = 48, hidden = 72, n_layers = 2, n_heads = 6, n_kv_heads = 2, vocab = 260, seq_len = 32;
constexpr int32_t hs = dim / n_heads, kv_dim = n_kv_heads * hs;

struct weights {
    std::vector<float> emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq, wcls;
};

weights random_weights(uint32_t seed) {
    std::mt19937 rng(seed);
    auto r = [&](size_t n, float s) { return test::random_floats(rng, n, -s, s); };
    auto norm = [&](size_t n) {
        auto v = r(n, 0.1f);
        for (auto & x : v) x += 1.0f;
        return v;
    };
    const float s = 0.15f;
    weights w;
    w.emb = r(size_t(vocab) * dim, 1.0f);
    w.rms_att = norm(size_t(n_layers) * dim);
    w.wq = r(size_t(n_layers) * dim * dim, s);
    w.wk = r(size_t(n_layers) * kv_dim * dim, s);
    w.wv = r(size_t(n_layers) * kv_dim * dim, s);
    w.wo = r(size_t(n_layers) * dim * dim, s);
    w.rms_ffn = norm(size_t(n_layers) * dim);
    w.w1 = r(size_t(n_layers) * hidden * dim, s);
    w.w2 = r(size_t(n_layers) * dim * hidden, s);
    w.w3 = r(size_t(n_layers) * hidden * dim, s);
    w.rms_final = norm(dim);
    w.freq = r(size_t(seq_len) * hs, 1.0f);
    w.wcls = r(size_t(vocab) * dim, s);
    return w;
}

void write_checkpoint(const std::string & path, const weights & w, bool shared, size_t drop_bytes = 0) {
    std::string bytes;
    const int32_t h[7] = {dim, hidden, n_layers, n_heads, n_kv_heads, shared ? vocab : -vocab, seq_len};
    bytes.append(reinterpret_cast<const char *>(h), sizeof(h));
    for (const auto * v : {&w.emb, &w.rms_att, &w.wq, &w.wk, &w.wv, &w.wo, &w.rms_ffn, &w.w1, &w.w2, &w.w3,
                           &w.rms_final, &w.freq}) {
        bytes.append(reinterpret_cast<const char *>(v->data()), v->size() * 4);
    }
    if (!shared) bytes.append(reinterpret_cast<const char *>(w.wcls.data()), w.wcls.size() * 4);
    bytes.resize(bytes.size() - drop_bytes);
    std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// llama2.c tokenizer.bin: <unk>, <s>, </s>, 256 byte pieces, then one more piece.
void write_tokenizer(const std::string & path) {
    std::ofstream f(path, std::ios::binary);
    const int32_t max_len = 8;
    f.write(reinterpret_cast<const char *>(&max_len), 4);
    for (int32_t i = 0; i < vocab; ++i) {
        const std::string piece = i == 0 ? "<unk>" : i == 1 ? "\n<s>\n" : i == 2 ? "\n</s>\n"
                                : i < 259 ? fmt::format("<0x{:02X}>", i - 3) : " a";
        const float score = 0.0f;
        const auto len = int32_t(piece.size());
        f.write(reinterpret_cast<const char *>(&score), 4);
        f.write(reinterpret_cast<const char *>(&len), 4);
        f.write(piece.data(), len);
    }
}

void write_gguf(const std::string & path, const weights & w, bool shared) {
    gguf_writer g;
    g.set_string("general.architecture", "llama");
    g.set_u32("llama.context_length", seq_len);
    g.set_u32("llama.embedding_length", dim);
    g.set_u32("llama.feed_forward_length", hidden);
    g.set_u32("llama.block_count", n_layers);
    g.set_u32("llama.attention.head_count", n_heads);
    g.set_u32("llama.attention.head_count_kv", n_kv_heads);
    g.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<int32_t> types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(fmt::format("<0x{:02X}>", b));
        types.push_back(6);
    }
    tokens.push_back("\xE2\x96\x81" "a");
    types.push_back(1);
    g.set_string("tokenizer.ggml.model", "llama");
    g.set_string_array("tokenizer.ggml.tokens", tokens);
    g.set_i32_array("tokenizer.ggml.token_type", types);
    auto add = [&](const std::string & name, const float * p, std::vector<int64_t> ne) {
        g.add_tensor(name, ggml_type::f32, ne, p);
    };
    add("token_embd.weight", w.emb.data(), {dim, vocab});
    add("output_norm.weight", w.rms_final.data(), {dim});
    if (!shared) add("output.weight", w.wcls.data(), {dim, vocab});
    for (int il = 0; il < n_layers; ++il) {
        const std::string p = fmt::format("blk.{}.", il);
        add(p + "attn_norm.weight", w.rms_att.data() + il * dim, {dim});
        add(p + "attn_q.weight", w.wq.data() + il * dim * dim, {dim, dim});
        add(p + "attn_k.weight", w.wk.data() + il * kv_dim * dim, {dim, kv_dim});
        add(p + "attn_v.weight", w.wv.data() + il * kv_dim * dim, {dim, kv_dim});
        add(p + "attn_output.weight", w.wo.data() + il * dim * dim, {dim, dim});
        add(p + "ffn_norm.weight", w.rms_ffn.data() + il * dim, {dim});
        add(p + "ffn_gate.weight", w.w1.data() + il * hidden * dim, {dim, hidden});
        add(p + "ffn_down.weight", w.w2.data() + il * dim * hidden, {hidden, dim});
        add(p + "ffn_up.weight", w.w3.data() + il * hidden * dim, {dim, hidden});
    }
    g.write(path);
}

std::vector<float> logits_of(const model & m) {
    thread_pool pool(2);
    session s(m, context_params{seq_len, ggml_type::f32}, pool);
    const std::vector<int32_t> tokens = {1, 259, 70, 3, 200, 259};
    s.eval(tokens, true);
    return std::vector<float>(s.logits(), s.logits() + tokens.size() * vocab);
}

TEST(llama2c, checkpoint_equals_gguf_with_shared_and_separate_classifier) {
    test::temp_dir dir;
    write_tokenizer(dir.file("tok.bin"));
    for (bool shared : {true, false}) {
        const weights w = random_weights(test::fresh_seed());
        write_checkpoint(dir.file("m.bin"), w, shared);
        write_gguf(dir.file("m.gguf"), w, shared);
        auto a = model::load(dir.file("m.bin"), dir.file("tok.bin"));
        auto b = model::load(dir.file("m.gguf"));
        EXPECT_EQ(a->output_tied(), shared);
        EXPECT_EQ(b->output_tied(), shared);
        EXPECT_EQ(a->n_params(), b->n_params());
        EXPECT_EQ(a->tokenizer().encode(" a a", true), b->tokenizer().encode(" a a", true));
        const auto la = logits_of(*a), lb = logits_of(*b);
        for (size_t i = 0; i < la.size(); ++i) ASSERT_FLOAT_EQ(la[i], lb[i]) << "shared " << shared << " i " << i;
    }
}

TEST(llama2c, size_not_matching_header_is_refused) {
    test::temp_dir dir;
    write_tokenizer(dir.file("tok.bin"));
    const weights w = random_weights(1);
    for (size_t drop : {size_t(4), size_t(1000)}) {
        write_checkpoint(dir.file("m.bin"), w, false, drop);
        try {
            model::load(dir.file("m.bin"), dir.file("tok.bin"));
            FAIL() << "expected an error";
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::bad_input);
            EXPECT_NE(std::string(e.what()).find("implies"), std::string::npos) << e.what();
        }
    }
}

TEST(llama2c, header_with_bad_fields_is_refused) {
    test::temp_dir dir;
    write_tokenizer(dir.file("tok.bin"));
    for (auto h : {std::array<int32_t, 7>{48, 72, 2, 5, 2, 260, 32},    // dim not a multiple of n_heads
                   std::array<int32_t, 7>{48, 72, 2, 6, 4, 260, 32},    // n_heads not a multiple of n_kv_heads
                   std::array<int32_t, 7>{48, 72, 0, 6, 2, 260, 32},    // no layers
                   std::array<int32_t, 7>{48, -72, 2, 6, 2, 260, 32}}) {
        std::ofstream(dir.file("h.bin"), std::ios::binary).write(reinterpret_cast<const char *>(h.data()), 28);
        EXPECT_THROW(model::load(dir.file("h.bin"), dir.file("tok.bin")), error);
    }
    std::ofstream(dir.file("short.bin"), std::ios::binary) << "abc";
    EXPECT_THROW(model::load(dir.file("short.bin"), dir.file("tok.bin")), error);
    // A vocab_size too large (or too negative) says what is expected: not "a nonzero value".
    for (const int32_t vocab : {INT32_MAX, -INT32_MAX, 0}) {
        const std::array<int32_t, 7> h{48, 72, 2, 6, 2, vocab, 32};
        std::ofstream(dir.file("v.bin"), std::ios::binary).write(reinterpret_cast<const char *>(h.data()), 28);
        try {
            model::load(dir.file("v.bin"), dir.file("tok.bin"));
            ADD_FAILURE() << vocab;
        } catch (const error & e) {
            EXPECT_NE(
                std::string(e.what()).find("vocab_size is " + std::to_string(vocab) +
                                           ", expected 1..16777216 in magnitude (negative: a separate classifier)"),
                std::string::npos)
                << e.what();
        }
    }
}

}  // namespace
}  // namespace hill
