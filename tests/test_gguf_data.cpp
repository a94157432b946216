// GGUF reader on real files from the shared data folder (label `model`; each test skips when its
// file is absent). Expected values: /work/shared/data/PROVENANCE.md.
#include "core/error.h"
#include "format/gguf_file.h"
#include "format/gguf_writer.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <set>

namespace hill {
namespace {

std::vector<uint8_t> read_all(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Every tensor lies inside the file, aligned, and the data of different tensors does not overlap.
void expect_sane_layout(const gguf_file & f, size_t file_size) {
    if (f.tensors().empty()) return;
    const uint8_t * base = nullptr;
    for (const gguf_tensor_info & t : f.tensors()) {
        EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % f.alignment(), 0u) << t.name;
        const uint8_t * b = t.data - t.offset;  // data section start
        if (base == nullptr) base = b;
        EXPECT_EQ(b, base) << t.name;
        EXPECT_GT(t.size_bytes, 0u);
        EXPECT_EQ(t.size_bytes, *ggml_row_bytes(t.type, t.ne[0]) * size_t(t.ne[1] * t.ne[2] * t.ne[3])) << t.name;
    }
    const gguf_tensor_info & last = f.tensors().back();
    EXPECT_LE(last.data + last.size_bytes, base + file_size);
}

TEST(gguf_data, stories260k) {
    HILL_REQUIRE_DATA(path, "models/gguf/stories260K.gguf");
    const auto f = gguf_file::open(path);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_EQ(f->metadata().size(), 19u);
    ASSERT_EQ(f->tensors().size(), 48u);
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->get_uint("llama.block_count"), 5u);
    EXPECT_EQ(f->get_uint("llama.embedding_length"), 64u);
    EXPECT_EQ(f->get_uint("llama.attention.head_count"), 8u);
    EXPECT_EQ(f->get_uint("llama.attention.head_count_kv"), 4u);
    EXPECT_EQ(f->get_uint("llama.context_length"), 2048u);  // converter default; trained at 512
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
    const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.has_value());
    EXPECT_EQ(tokens->size(), 512u);
    for (const gguf_tensor_info & t : f->tensors()) EXPECT_EQ(t.type, ggml_type::f32) << t.name;

    const gguf_tensor_info * emb = f->find_tensor("token_embd.weight");
    ASSERT_NE(emb, nullptr);
    EXPECT_EQ(emb->n_dims, 2);
    EXPECT_EQ(emb->ne[0], 64);
    EXPECT_EQ(emb->ne[1], 512);
    expect_sane_layout(*f, read_all(path).size());

    // Bit-identical to the llama2.c checkpoint: token_embedding[512, 64] follows its 28-byte header.
    const std::string bin = test::data_path("models/llama2c/stories260K.bin");
    if (!bin.empty()) {
        const std::vector<uint8_t> b = read_all(bin);
        ASSERT_GE(b.size(), 28 + emb->size_bytes);
        EXPECT_EQ(0, std::memcmp(b.data() + 28, emb->data, emb->size_bytes));
    }
}

TEST(gguf_data, llama_spm_vocab_only) {
    HILL_REQUIRE_DATA(path, "tokenizers/llamacpp-vocab/ggml-vocab-llama-spm.gguf");
    const auto f = gguf_file::open(path);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_EQ(f->metadata().size(), 22u);
    EXPECT_EQ(f->get_uint("llama.context_length"), 4096u);
    EXPECT_EQ(f->get_uint("llama.embedding_length"), 4096u);
    EXPECT_EQ(f->get_uint("llama.block_count"), 32u);
    EXPECT_EQ(f->get_uint("llama.attention.head_count"), 32u);
    EXPECT_EQ(f->get_uint("llama.attention.head_count_kv"), 32u);
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "default");
    const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.has_value());
    ASSERT_EQ(tokens->size(), 32000u);
    EXPECT_EQ((*tokens)[0], "<unk>");
    EXPECT_EQ((*tokens)[1], "<s>");
    EXPECT_EQ((*tokens)[2], "</s>");
    const auto scores = f->get_float_array("tokenizer.ggml.scores");
    ASSERT_TRUE(scores.has_value());
    EXPECT_EQ(scores->size(), 32000u);
    const auto types = f->get_int_array("tokenizer.ggml.token_type");
    ASSERT_TRUE(types.has_value());
    EXPECT_EQ(types->size(), 32000u);
}

TEST(gguf_data, llama2_tiny_random_fixture) {
    HILL_REQUIRE_DATA(path, "models/gguf-random-fixture/llama-2-tiny-random.gguf");
    const auto f = gguf_file::open(path);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->metadata().size(), 18u);
    ASSERT_EQ(f->tensors().size(), 12u);
    EXPECT_EQ(f->get_uint("llama.context_length"), 4096u);
    EXPECT_EQ(f->get_uint("llama.embedding_length"), 8u);
    EXPECT_EQ(f->get_uint("llama.block_count"), 1u);
    EXPECT_EQ(f->get_uint("llama.attention.head_count"), 2u);
    EXPECT_EQ(f->get_uint("llama.attention.head_count_kv"), 2u);
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens")->size(), 32000u);
    std::set<ggml_type> types;
    for (const gguf_tensor_info & t : f->tensors()) types.insert(t.type);
    EXPECT_EQ(types, (std::set<ggml_type>{ggml_type::f32, ggml_type::f16}));
    expect_sane_layout(*f, read_all(path).size());
}

// Copying a real file through the writer keeps every key, value, tensor and byte.
TEST(gguf_data, writer_copies_a_real_file) {
    HILL_REQUIRE_DATA(path, "models/gguf-random-fixture/llama-2-tiny-random.gguf");
    const auto f = gguf_file::open(path);
    gguf_writer w;
    for (const auto & [k, v] : f->metadata()) w.set_value(k, v);
    for (const gguf_tensor_info & t : f->tensors()) {
        w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data);
    }
    test::temp_dir dir;
    w.write(dir.file("copy.gguf"));
    const auto g = gguf_file::open(dir.file("copy.gguf"));
    ASSERT_EQ(g->metadata().size(), f->metadata().size());
    for (size_t k = 0; k < f->metadata().size(); ++k) {
        EXPECT_EQ(g->metadata()[k].first, f->metadata()[k].first);
        EXPECT_EQ(g->metadata()[k].second.type, f->metadata()[k].second.type);
        EXPECT_EQ(g->metadata()[k].second.array.size(), f->metadata()[k].second.array.size());
    }
    EXPECT_EQ(g->get_string_array("tokenizer.ggml.tokens"), f->get_string_array("tokenizer.ggml.tokens"));
    EXPECT_EQ(g->get_float_array("tokenizer.ggml.scores"), f->get_float_array("tokenizer.ggml.scores"));
    ASSERT_EQ(g->tensors().size(), f->tensors().size());
    for (size_t k = 0; k < f->tensors().size(); ++k) {
        const gguf_tensor_info & a = f->tensors()[k];
        const gguf_tensor_info & b = g->tensors()[k];
        EXPECT_EQ(a.name, b.name);
        EXPECT_EQ(a.type, b.type);
        EXPECT_EQ(a.n_dims, b.n_dims);
        EXPECT_EQ(a.size_bytes, b.size_bytes);
        EXPECT_EQ(0, std::memcmp(a.data, b.data, a.size_bytes)) << a.name;
    }
}

}  // namespace
}  // namespace hill
