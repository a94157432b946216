// safetensors reader, Hugging Face checkpoint folders and the HF -> GGUF name mapping: valid
// hand-written files, one hand-made corrupt file per validation rule (src/format/safetensors_file.h,
// src/format/hf_checkpoint.h), sharded folders, and the q/k row permutation.
#include "core/error.h"
#include "core/fp16.h"
#include "format/hf_checkpoint.h"
#include "format/safetensors_file.h"
#include "hf_test_util.h"
#include "model/hf_names.h"
#include "model/model.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <numeric>

namespace hill {
namespace {

// A safetensors image: 8-byte little-endian length `n_header` (default: the JSON's length), the
// header JSON, then `data`.
std::vector<uint8_t> st_bytes(const std::string & header, const std::vector<uint8_t> & data = {},
                              std::optional<uint64_t> n_header = std::nullopt) {
    std::vector<uint8_t> out(8 + header.size() + data.size());
    const uint64_t n = n_header.value_or(header.size());
    std::memcpy(out.data(), &n, 8);
    if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
    if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
    return out;
}

std::vector<uint8_t> iota_bytes(size_t n) {
    std::vector<uint8_t> v(n);
    std::iota(v.begin(), v.end(), uint8_t(1));
    return v;
}

void write_file(const std::string & path, const std::vector<uint8_t> & b) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char *>(b.data()), std::streamsize(b.size()));
    ASSERT_TRUE(f.good()) << path;
}

void write_text(const std::string & path, const std::string & s) {
    std::ofstream f(path, std::ios::binary);
    f << s;
    ASSERT_TRUE(f.good()) << path;
}

// Expects parse() to fail with exit_code::bad_input and a message containing every `parts`.
void expect_corrupt(const std::vector<uint8_t> & b, std::initializer_list<const char *> parts) {
    try {
        safetensors_file::parse(b.data(), b.size(), "test.safetensors");
        ADD_FAILURE() << "accepted a corrupt file; expected an error mentioning '" << *parts.begin() << "'";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::bad_input) << e.what();
        const std::string msg = e.what();
        EXPECT_NE(msg.find("test.safetensors"), std::string::npos) << "message does not name the file: " << msg;
        for (const char * p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
}

// One F32 tensor "t" of shape [2] at [0, 8) plus the given entries.
std::string one_tensor(const std::string & extra = "") {
    return R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})" + extra + "}";
}

// ---------------------------------------------------------------------------------------------
// Valid files

TEST(safetensors, serialize_then_open_round_trip) {
    test::temp_dir dir;
    const float a[6] = {1, 2, 3, 4, 5, 6};
    const f16_bits b[4] = {fp32_to_fp16(0.5f), fp32_to_fp16(-1.0f), fp32_to_fp16(2.0f), fp32_to_fp16(0.25f)};
    const uint16_t c[4] = {0x3f80, 0x4000, 0xbf80, 0x0000};  // bf16 1, 2, -1, 0
    const std::vector<uint8_t> img = safetensors_serialize(
        {
            {"a", ggml_type::f32, {2, 3}, a, sizeof(a)},
            {"b", ggml_type::f16, {4}, b, sizeof(b)},
            {"c.bf16", ggml_type::bf16, {2, 2}, c, sizeof(c)},
            {"empty", ggml_type::f32, {0, 5}, nullptr, 0},
        },
        {{"format", "pt"}});
    uint64_t n = 0;
    std::memcpy(&n, img.data(), 8);
    EXPECT_EQ((8 + n) % 8, 0u) << "the writer pads the header so that the data start is 8-aligned";
    write_file(dir.file("m.safetensors"), img);

    const auto f = safetensors_file::open(dir.file("m.safetensors"));
    EXPECT_EQ(f->path(), dir.file("m.safetensors"));
    ASSERT_EQ(f->tensors().size(), 4u);
    EXPECT_EQ(f->metadata().at("format"), "pt");
    EXPECT_EQ(f->data_bytes(), sizeof(a) + sizeof(b) + sizeof(c));

    const safetensors_tensor * ta = f->find("a");
    ASSERT_NE(ta, nullptr);
    EXPECT_EQ(ta->type, ggml_type::f32);
    EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(ta->n_elements(), 6);
    EXPECT_EQ(ta->size_bytes, sizeof(a));
    EXPECT_EQ(std::memcmp(ta->data, a, sizeof(a)), 0);

    const safetensors_tensor * tb = f->find("b");
    ASSERT_NE(tb, nullptr);
    EXPECT_EQ(tb->type, ggml_type::f16);
    EXPECT_EQ(std::memcmp(tb->data, b, sizeof(b)), 0);
    const safetensors_tensor * tc = f->find("c.bf16");
    ASSERT_NE(tc, nullptr);
    EXPECT_EQ(tc->type, ggml_type::bf16);
    EXPECT_EQ(std::memcmp(tc->data, c, sizeof(c)), 0);
    const safetensors_tensor * te = f->find("empty");
    ASSERT_NE(te, nullptr);
    EXPECT_EQ(te->size_bytes, 0u);
    EXPECT_EQ(te->n_elements(), 0);
    EXPECT_EQ(f->find("nope"), nullptr);
}

TEST(safetensors, hand_written_file_in_any_key_order) {
    // Keys out of offset order, a scalar, a zero-size tensor between two others, an extra key in an
    // entry, and trailing spaces in the header: all legal.
    const std::string h =
        R"({"z":{"dtype":"F16","shape":[2],"data_offsets":[8,12],"extra":1},)"
        R"("__metadata__":{"format":"pt","note":"x"},)"
        R"("s":{"dtype":"F32","shape":[],"data_offsets":[4,8]},)"
        R"("nothing":{"dtype":"BF16","shape":[3,0],"data_offsets":[4,4]},)"
        R"("first":{"dtype":"BF16","shape":[1,2],"data_offsets":[0,4]}}     )";
    const std::vector<uint8_t> b = st_bytes(h, iota_bytes(12));
    const auto f = safetensors_file::parse(b.data(), b.size(), "x");
    ASSERT_EQ(f->tensors().size(), 4u);
    // tensors() is in data order.
    EXPECT_EQ(f->tensors()[0].name, "first");
    EXPECT_EQ(f->tensors()[1].name, "nothing");
    EXPECT_EQ(f->tensors()[2].name, "s");
    EXPECT_EQ(f->tensors()[3].name, "z");
    EXPECT_EQ(f->find("s")->n_elements(), 1);
    EXPECT_TRUE(f->find("s")->shape.empty());
    EXPECT_EQ(static_cast<const uint8_t *>(f->find("z")->data)[0], 9);
    EXPECT_EQ(f->metadata().size(), 2u);
    EXPECT_EQ(f->header_bytes(), h.size());
}

TEST(safetensors, no_tensors_is_valid) {
    const std::vector<uint8_t> b = st_bytes("{}");
    const auto f = safetensors_file::parse(b.data(), b.size(), "x");
    EXPECT_TRUE(f->tensors().empty());
    const std::vector<uint8_t> m = st_bytes(R"({"__metadata__":{}})");
    EXPECT_TRUE(safetensors_file::parse(m.data(), m.size(), "x")->tensors().empty());
}

TEST(safetensors, dtype_names) {
    EXPECT_EQ(safetensors_file::type_from_dtype("BF16"), ggml_type::bf16);
    EXPECT_EQ(safetensors_file::type_from_dtype("bf16"), std::nullopt);  // the format is case-sensitive
    EXPECT_EQ(safetensors_file::dtype_name(ggml_type::f16), "F16");
}

// ---------------------------------------------------------------------------------------------
// Corrupt files: one per rule

TEST(safetensors_corrupt, shorter_than_the_length_field) {
    expect_corrupt({1, 2, 3}, {"3 bytes", "at least 8"});
    expect_corrupt({}, {"0 bytes"});
}

TEST(safetensors_corrupt, header_length_past_the_end) {
    expect_corrupt(st_bytes(one_tensor(), iota_bytes(8), 1000), {"header length 1000", "past the end"});
}

TEST(safetensors_corrupt, header_length_huge) {
    expect_corrupt(st_bytes(one_tensor(), iota_bytes(8), uint64_t(1) << 63), {"exceeds the limit"});
    expect_corrupt(st_bytes(one_tensor(), iota_bytes(8), (uint64_t(100) << 20) + 1), {"exceeds the limit"});
}

TEST(safetensors_corrupt, header_length_too_small) {
    expect_corrupt(st_bytes("{}", {}, 0), {"header length 0", "too small"});
    expect_corrupt(st_bytes("{", {}, 1), {"header length 1"});
}

TEST(safetensors_corrupt, header_not_an_object) {
    expect_corrupt(st_bytes(R"(["t"])"), {"must start with '{'", "0x5b"});
    expect_corrupt(st_bytes(R"(  {})"), {"must start with '{'"});
}

TEST(safetensors_corrupt, invalid_json) {
    expect_corrupt(st_bytes(R"({"t":{"dtype":"F32",)"), {"not valid JSON"});
    expect_corrupt(st_bytes(R"({"t":1} trailing)"), {"not valid JSON"});
    // Header length shorter than the JSON: the object is cut off.
    const std::string h = one_tensor();
    expect_corrupt(st_bytes(h, iota_bytes(8), h.size() - 3), {"not valid JSON"});
    // Invalid UTF-8 in a string.
    expect_corrupt(st_bytes("{\"\xff\":1}"), {"not valid JSON"});
}

TEST(safetensors_corrupt, metadata_not_strings) {
    expect_corrupt(st_bytes(R"({"__metadata__":[1]})"), {"__metadata__", "expected an object of strings"});
    expect_corrupt(st_bytes(R"({"__metadata__":{"n":3}})"), {"\"n\"", "expected a string"});
}

TEST(safetensors_corrupt, entry_not_an_object) {
    expect_corrupt(st_bytes(R"({"t":[1,2]})"), {"tensor 't'", "expected an object"});
}

TEST(safetensors_corrupt, missing_keys) {
    expect_corrupt(st_bytes(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", iota_bytes(8)),
                   {"tensor 't'", "missing \"dtype\""});
    expect_corrupt(st_bytes(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", iota_bytes(8)),
                   {"tensor 't'", "missing \"shape\""});
    expect_corrupt(st_bytes(R"({"t":{"dtype":"F32","shape":[2]}})", iota_bytes(8)),
                   {"tensor 't'", "missing \"data_offsets\""});
}

TEST(safetensors_corrupt, unsupported_dtype_named) {
    expect_corrupt(st_bytes(R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", iota_bytes(8)),
                   {"tensor 'ids'", "unsupported dtype \"I64\"", "supported: F32, F16, BF16"});
    expect_corrupt(st_bytes(R"({"w8":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", iota_bytes(8)),
                   {"tensor 'w8'", "unsupported dtype \"F8_E4M3\"", "F32, F16, BF16"});
    expect_corrupt(st_bytes(R"({"w":{"dtype":"F17","shape":[1],"data_offsets":[0,4]}})", iota_bytes(4)),
                   {"tensor 'w'", "unknown dtype \"F17\""});
    expect_corrupt(st_bytes(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", iota_bytes(4)),
                   {"tensor 'w'", "dtype is a number 7"});
}

TEST(safetensors_corrupt, bad_shape) {
    expect_corrupt(st_bytes(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", iota_bytes(8)),
                   {"shape[0]", "non-negative integer"});
    expect_corrupt(st_bytes(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", iota_bytes(8)),
                   {"shape[0]", "non-negative integer"});
    expect_corrupt(st_bytes(R"({"t":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", iota_bytes(8)),
                   {"shape is a number 2", "expected an array"});
    expect_corrupt(st_bytes(R"({"t":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,2],"data_offsets":[0,8]}})",
                            iota_bytes(8)),
                   {"9 dimensions"});
    expect_corrupt(
        st_bytes(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", iota_bytes(8)),
        {"overflows"});
    expect_corrupt(
        st_bytes(R"({"t":{"dtype":"F32","shape":[4611686018427387904,2],"data_offsets":[0,8]}})", iota_bytes(8)),
        {"overflows"});
}

TEST(safetensors_corrupt, bad_data_offsets) {
    expect_corrupt(st_bytes(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", iota_bytes(8)),
                   {"data_offsets", "[begin, end]"});
    expect_corrupt(st_bytes(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", iota_bytes(8)),
                   {"data_offsets", "non-negative"});
    expect_corrupt(st_bytes(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", iota_bytes(8)),
                   {"end is before begin"});
}

TEST(safetensors_corrupt, shape_times_dtype_size_is_not_the_byte_length) {
    expect_corrupt(st_bytes(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", iota_bytes(8)),
                   {"tensor 't'", "[3]", "F32", "is 12 bytes", "span 8 bytes"});
    expect_corrupt(st_bytes(R"({"t":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,6]}})", iota_bytes(6)),
                   {"is 8 bytes", "span 6 bytes"});
}

TEST(safetensors_corrupt, offsets_outside_the_data) {
    expect_corrupt(st_bytes(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", iota_bytes(8)),
                   {"tensor 't'", "[0, 16]", "past the end of the data section (8 bytes"});
    expect_corrupt(
        st_bytes(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]}})"),
        {"past the end of the data section"});
}

TEST(safetensors_corrupt, overlapping_tensors) {
    expect_corrupt(st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                            iota_bytes(12)),
                   {"'a'", "'b'", "overlap"});
    // Same range twice.
    expect_corrupt(st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})",
                            iota_bytes(8)),
                   {"overlap"});
    // A zero-size tensor inside another one.
    expect_corrupt(st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                            iota_bytes(8)),
                   {"overlap"});
}

TEST(safetensors_corrupt, holes_in_the_data) {
    // Not starting at 0.
    expect_corrupt(st_bytes(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", iota_bytes(12)),
                   {"tensor 't'", "starts at offset 4, expected 0"});
    // A gap between tensors.
    expect_corrupt(st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                            iota_bytes(12)),
                   {"gap of 4 bytes", "'a'", "'b'"});
    // Bytes after the last tensor, and a data section with no tensors at all.
    expect_corrupt(st_bytes(one_tensor(), iota_bytes(9)), {"1 bytes after the last tensor 't'"});
    expect_corrupt(st_bytes("{}", iota_bytes(3)), {"3 bytes after the last tensor"});
}

TEST(safetensors_corrupt, truncated_file) {
    const float a[4] = {1, 2, 3, 4};
    std::vector<uint8_t> img = safetensors_serialize({{"w", ggml_type::f32, {4}, a, sizeof(a)}});
    img.resize(img.size() - 3);
    expect_corrupt(img, {"tensor 'w'", "past the end of the data section", "truncated"});
    // Every shorter prefix fails cleanly too.
    for (size_t n = 0; n < img.size(); ++n) {
        const std::vector<uint8_t> cut(img.begin(), img.begin() + std::ptrdiff_t(n));
        EXPECT_THROW(safetensors_file::parse(cut.data(), cut.size(), "test.safetensors"), error) << n;
    }
}

TEST(safetensors_corrupt, missing_file_and_directory_are_usage_errors) {
    test::temp_dir dir;
    try {
        safetensors_file::open(dir.file("absent.safetensors"));
        ADD_FAILURE();
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::usage);
    }
    EXPECT_THROW(safetensors_file::open(dir.path.string()), error);
}

// ---------------------------------------------------------------------------------------------
// Data at an odd offset (issue 15 item 7): the format does not require aligned tensor data, and a
// header whose length is odd puts every tensor at an odd address in the mapping.

// Bytes of every matrix of a model (the views' data, row by row).
std::vector<uint8_t> matrix_bytes(const model & m) {
    std::vector<uint8_t> out;
    const auto add = [&](const weight_view & w) {
        const auto * p = static_cast<const uint8_t *>(w.data);
        out.insert(out.end(), p, p + w.row_bytes() * size_t(w.n_rows));
    };
    add(m.token_embd());
    for (const layer_weights & l : m.layers()) {
        for (const weight_view * w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) add(*w);
    }
    return out;
}

TEST(hf_checkpoint, data_at_an_odd_offset_loads_with_the_same_weights) {
    for (const ggml_type type : {ggml_type::f32, ggml_type::f16, ggml_type::bf16}) {
        SCOPED_TRACE(std::string(ggml_type_name(type)));
        test::temp_dir aligned, odd;
        test::write_tiny_llama_checkpoint(aligned.path, 300, type);
        test::write_tiny_llama_checkpoint(odd.path, 300, type, 1);
        EXPECT_EQ((8 + safetensors_file::open(aligned.file("model.safetensors"))->header_bytes()) % 8, 0u);
        EXPECT_EQ((8 + safetensors_file::open(odd.file("model.safetensors"))->header_bytes()) % 2, 1u);
        const auto ma = model::load(aligned.path.string());
        const auto mo = model::load(odd.path.string());
        // An aligned file is used in place; the odd one's matrices are copied once, at load:
        // embedding [300, 8], q/k/v/o [8, 8], gate/up [16, 8], down [8, 16].
        EXPECT_EQ(ma->copied_weight_bytes(), 0u);
        EXPECT_EQ(mo->copied_weight_bytes(), (300 * 8 + 4 * 64 + 3 * 128) * ggml_block_bytes(type));
        for (const weight_view * w : {&mo->token_embd(), &mo->layers()[0].wq, &mo->layers()[0].ffn_down}) {
            EXPECT_EQ(reinterpret_cast<uintptr_t>(w->data) % ggml_block_bytes(type), 0u);
        }
        EXPECT_EQ(matrix_bytes(*mo), matrix_bytes(*ma));
        EXPECT_EQ(mo->layers()[0].attn_norm, ma->layers()[0].attn_norm);
        EXPECT_EQ(mo->output_norm(), ma->output_norm());
    }
}

// The bug: a folder whose config.json says "tie_word_embeddings": false but that has no
// lm_head.weight loaded with the output tied to the embedding. transformers leaves such an lm_head
// randomly initialized; HillInfer refuses it. Absent (PretrainedConfig's default: true) or true: tied.
TEST(hf_checkpoint, untied_model_without_lm_head_is_refused) {
    test::temp_dir dir;
    test::write_tiny_llama_checkpoint(dir.path, 300);
    const auto config = [&](const nlohmann::json & tie) {
        nlohmann::json c = nlohmann::json::parse(std::ifstream(dir.file("config.json")));
        if (tie.is_null()) {
            c.erase("tie_word_embeddings");
        } else {
            c["tie_word_embeddings"] = tie;
        }
        write_text(dir.file("config.json"), c.dump());
    };
    for (const nlohmann::json & tie : {nlohmann::json(true), nlohmann::json()}) {
        config(tie);
        EXPECT_TRUE(model::load(dir.path.string())->output_tied()) << tie.dump();
    }
    config(false);
    try {
        model::load(dir.path.string());
        ADD_FAILURE() << "loaded an untied checkpoint without lm_head.weight";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::bad_input) << e.what();
        const std::string msg = e.what();
        for (const std::string & p : {dir.path.string(), std::string("'lm_head.weight' (output.weight) is missing"),
                                      std::string("tie_word_embeddings is false")}) {
            EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Checkpoint folders

// A tensor of `n` f32 values k + 0.5.
struct f32_tensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> v;
    f32_tensor(std::string nm, std::vector<int64_t> sh) : name(std::move(nm)), shape(std::move(sh)) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        v.resize(size_t(n));
        for (size_t k = 0; k < v.size(); ++k) v[k] = float(k) + 0.5f;
    }
    safetensors_entry entry() const { return {name, ggml_type::f32, shape, v.data(), v.size() * sizeof(float)}; }
};

void write_shard(const std::string & path, const std::vector<f32_tensor> & ts) {
    std::vector<safetensors_entry> es;
    for (const f32_tensor & t : ts) es.push_back(t.entry());
    write_file(path, safetensors_serialize(es, {{"format", "pt"}}));
}

constexpr const char * tiny_config = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
  "num_attention_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1e4, "tie_word_embeddings": false,
  "rope_scaling": {"type": "linear", "factor": 4.0}, "torch_dtype": "float32", "bos_token_id": null,
  "text_config": {"vocab_size": 32}, "max_position_embeddings": 2048.0, "bad_int": 1.5
})";

// Expects hf_checkpoint::open(dir) to fail with `code` and a message containing every `parts`.
void expect_ckpt_error(const std::string & dir, exit_code code, std::initializer_list<std::string> parts) {
    try {
        hf_checkpoint::open(dir);
        ADD_FAILURE() << "opened a broken checkpoint folder";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), code) << e.what();
        const std::string msg = e.what();
        for (const std::string & p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
}

TEST(hf_checkpoint, single_file_folder) {
    test::temp_dir dir;
    write_text(dir.file("config.json"), tiny_config);
    write_shard(dir.file("model.safetensors"), {{"model.embed_tokens.weight", {4, 8}}, {"model.norm.weight", {8}}});
    EXPECT_FALSE(hf_checkpoint::is_checkpoint_dir(dir.file("model.safetensors")));
    EXPECT_TRUE(hf_checkpoint::is_checkpoint_dir(dir.path.string()));
    EXPECT_FALSE(hf_checkpoint::is_checkpoint_dir(dir.file("absent")));

    const auto c = hf_checkpoint::open(dir.path.string());
    EXPECT_EQ(c->dir(), dir.path.string());
    EXPECT_EQ(c->shards().size(), 1u);
    EXPECT_EQ(c->tensor_names(), (std::vector<std::string>{"model.embed_tokens.weight", "model.norm.weight"}));
    const safetensors_tensor * t = c->find("model.norm.weight");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(static_cast<const float *>(t->data)[3], 3.5f);
    EXPECT_EQ(c->find("lm_head.weight"), nullptr);
    EXPECT_EQ(c->data_bytes(), (32 + 8) * 4u);
    EXPECT_EQ(c->tokenizer_json_path(), "");
    EXPECT_EQ(c->tokenizer_config_path(), "");

    // config.json through json_value (its typed getters: test_json_file.cpp).
    const json_value config = c->config();
    EXPECT_EQ(config.name(), c->config_path());
    EXPECT_EQ(config.required<int64_t>("/hidden_size"), 8);
    EXPECT_EQ(config.required<int64_t>("/max_position_embeddings"), 2048);  // integral float accepted
    EXPECT_EQ(config.required<double>("/rope_theta"), 1e4);
    EXPECT_EQ(config.required<std::string>("/rope_scaling/type"), "linear");
    EXPECT_EQ(config.required<int64_t>("/text_config/vocab_size"), 32);
    EXPECT_EQ(config.optional<std::vector<std::string>>("/architectures")->at(0), "LlamaForCausalLM");
    EXPECT_EQ(config.optional<int64_t>("/bos_token_id"), std::nullopt);  // null counts as absent
    try {
        config.required<int64_t>("/bad_int");
        ADD_FAILURE() << "no error";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::bad_input);
        EXPECT_EQ(std::string(e.what()), c->config_path() + ": /bad_int: expected an integer, got a number 1.5");
    }

    // Tokenizer files, once present.
    write_text(dir.file("tokenizer.json"), "{}");
    write_text(dir.file("tokenizer_config.json"), "{}");
    EXPECT_EQ(c->tokenizer_json_path(), dir.file("tokenizer.json"));
    EXPECT_EQ(c->tokenizer_config_path(), dir.file("tokenizer_config.json"));
}

// Writes a two-shard folder: a.safetensors {x, y}, b.safetensors {z}, and its index.
void write_sharded(const test::temp_dir & dir) {
    write_text(dir.file("config.json"), tiny_config);
    write_shard(dir.file("model-00001-of-00002.safetensors"), {{"x", {2, 2}}, {"y", {3}}});
    write_shard(dir.file("model-00002-of-00002.safetensors"), {{"z", {5}}});
    write_text(dir.file("model.safetensors.index.json"), R"({"metadata": {"total_size": 48}, "weight_map": {
        "x": "model-00001-of-00002.safetensors", "y": "model-00001-of-00002.safetensors",
        "z": "model-00002-of-00002.safetensors"}})");
}

TEST(hf_checkpoint, sharded_folder) {
    test::temp_dir dir;
    write_sharded(dir);
    EXPECT_TRUE(hf_checkpoint::is_checkpoint_dir(dir.path.string()));
    const auto c = hf_checkpoint::open(dir.path.string());
    EXPECT_EQ(c->shards().size(), 2u);
    EXPECT_EQ(c->n_tensors(), 3u);
    EXPECT_EQ(c->tensor_names(), (std::vector<std::string>{"x", "y", "z"}));
    ASSERT_NE(c->find("z"), nullptr);
    EXPECT_EQ(static_cast<const float *>(c->find("z")->data)[4], 4.5f);
    EXPECT_EQ(c->find("y")->shape, (std::vector<int64_t>{3}));
    EXPECT_EQ(c->data_bytes(), (4 + 3 + 5) * 4u);
}

TEST(hf_checkpoint, index_wins_over_model_safetensors) {
    test::temp_dir dir;
    write_sharded(dir);
    write_shard(dir.file("model.safetensors"), {{"other", {1}}});
    const auto c = hf_checkpoint::open(dir.path.string());
    EXPECT_EQ(c->find("other"), nullptr);
    EXPECT_NE(c->find("x"), nullptr);
}

TEST(hf_checkpoint, missing_shard_names_the_file) {
    test::temp_dir dir;
    write_sharded(dir);
    std::filesystem::remove(dir.file("model-00002-of-00002.safetensors"));
    expect_ckpt_error(dir.path.string(), exit_code::bad_input,
                      {"model-00002-of-00002.safetensors", "is missing", "tensor 'z'"});
}

TEST(hf_checkpoint, tensor_listed_but_not_in_its_shard) {
    test::temp_dir dir;
    write_sharded(dir);
    write_text(dir.file("model.safetensors.index.json"), R"({"weight_map": {
        "x": "model-00001-of-00002.safetensors", "y": "model-00001-of-00002.safetensors",
        "z": "model-00002-of-00002.safetensors", "w": "model-00002-of-00002.safetensors"}})");
    expect_ckpt_error(dir.path.string(), exit_code::bad_input,
                      {"tensor 'w'", "missing from its shard", "model-00002-of-00002.safetensors"});
    // Listed for the wrong shard.
    write_text(dir.file("model.safetensors.index.json"), R"({"weight_map": {
        "x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors",
        "z": "model-00002-of-00002.safetensors"}})");
    expect_ckpt_error(dir.path.string(), exit_code::bad_input, {"tensor 'y'", "found in", "00001"});
}

TEST(hf_checkpoint, tensor_in_two_shards) {
    test::temp_dir dir;
    write_sharded(dir);
    write_shard(dir.file("model-00002-of-00002.safetensors"), {{"z", {5}}, {"x", {2, 2}}});
    expect_ckpt_error(dir.path.string(), exit_code::bad_input,
                      {"tensor 'x'", "two shards", "model-00001-of-00002", "model-00002-of-00002"});
}

TEST(hf_checkpoint, tensor_not_in_the_index) {
    test::temp_dir dir;
    write_sharded(dir);
    write_shard(dir.file("model-00002-of-00002.safetensors"), {{"z", {5}}, {"extra", {1}}});
    expect_ckpt_error(dir.path.string(), exit_code::bad_input, {"tensor 'extra'", "not listed"});
}

TEST(hf_checkpoint, bad_index) {
    test::temp_dir dir;
    write_sharded(dir);
    write_text(dir.file("model.safetensors.index.json"), "{\"weight_map\": ");
    expect_ckpt_error(dir.path.string(), exit_code::bad_input, {"model.safetensors.index.json", "not valid JSON"});
    write_text(dir.file("model.safetensors.index.json"), R"({"metadata": {}})");
    expect_ckpt_error(dir.path.string(), exit_code::bad_input, {"weight_map", "missing"});
    write_text(dir.file("model.safetensors.index.json"), R"({"weight_map": {"x": 3}})");
    expect_ckpt_error(dir.path.string(), exit_code::bad_input, {"/weight_map/x", "shard file name", "number 3"});
    write_text(dir.file("model.safetensors.index.json"), R"({"weight_map": {"x": "../model.safetensors"}})");
    expect_ckpt_error(dir.path.string(), exit_code::bad_input, {"../model.safetensors", "plain file name"});
}

TEST(hf_checkpoint, corrupt_shard_names_the_shard) {
    test::temp_dir dir;
    write_sharded(dir);
    write_file(dir.file("model-00002-of-00002.safetensors"), {1, 2, 3});
    expect_ckpt_error(dir.path.string(), exit_code::bad_input, {"model-00002-of-00002.safetensors", "at least 8"});
}

TEST(hf_checkpoint, config_missing_or_invalid) {
    test::temp_dir dir;
    write_shard(dir.file("model.safetensors"), {{"x", {1}}});
    EXPECT_FALSE(hf_checkpoint::is_checkpoint_dir(dir.path.string()));
    expect_ckpt_error(dir.path.string(), exit_code::usage, {"config.json is missing"});
    write_text(dir.file("config.json"), "{\"hidden_size\": ");
    expect_ckpt_error(dir.path.string(), exit_code::bad_input, {"config.json", "not valid JSON"});
    write_text(dir.file("config.json"), "[1]");
    expect_ckpt_error(dir.path.string(), exit_code::bad_input, {"config.json", "expected an object, got an array"});
}

TEST(hf_checkpoint, no_weights_or_not_a_folder) {
    test::temp_dir dir;
    write_text(dir.file("config.json"), tiny_config);
    write_text(dir.file("pytorch_model.bin"), "x");
    expect_ckpt_error(dir.path.string(), exit_code::usage,
                      {"no weights", "model.safetensors", "pytorch_model.bin", "only safetensors"});
    expect_ckpt_error(dir.file("config.json"), exit_code::usage, {"is not a folder"});
    expect_ckpt_error(dir.file("absent"), exit_code::usage, {"no such file"});
}

// ---------------------------------------------------------------------------------------------
// HF -> GGUF names and the q/k permutation

TEST(hf_names, llama_names) {
    EXPECT_EQ(hf_gguf_tensor_name("llama", "model.embed_tokens.weight"), "token_embd.weight");
    EXPECT_EQ(hf_gguf_tensor_name("llama", "model.layers.11.self_attn.q_proj.weight"), "blk.11.attn_q.weight");
    EXPECT_EQ(hf_gguf_tensor_name("llama", "model.layers.0.self_attn.o_proj.weight"), "blk.0.attn_output.weight");
    EXPECT_EQ(hf_gguf_tensor_name("llama", "model.layers.3.post_attention_layernorm.weight"),
              "blk.3.ffn_norm.weight");
    EXPECT_EQ(hf_gguf_tensor_name("llama", "model.layers.3.mlp.gate_proj.weight"), "blk.3.ffn_gate.weight");
    EXPECT_EQ(hf_gguf_tensor_name("llama", "model.norm.weight"), "output_norm.weight");
    EXPECT_EQ(hf_gguf_tensor_name("llama", "lm_head.weight"), "output.weight");
    EXPECT_EQ(hf_gguf_tensor_name("llama", "model.layers.x.mlp.up_proj.weight"), std::nullopt);
    EXPECT_EQ(hf_gguf_tensor_name("llama", "model.layers.01.mlp.up_proj.weight"), std::nullopt);
    EXPECT_EQ(hf_gguf_tensor_name("llama", "model.layers.1.mlp.up_proj"), std::nullopt);
    EXPECT_EQ(hf_gguf_tensor_name("llama", "model.layers.0.self_attn.rotary_emb.inv_freq"), std::nullopt);
    EXPECT_TRUE(hf_tensor_ignored("llama", "model.layers.0.self_attn.rotary_emb.inv_freq"));
    EXPECT_EQ(hf_tensor_permutation("llama", "model.layers.2.self_attn.q_proj.weight"), hf_permutation::q);
    EXPECT_EQ(hf_tensor_permutation("llama", "model.layers.2.self_attn.k_proj.bias"), hf_permutation::k);
    EXPECT_EQ(hf_tensor_permutation("llama", "model.layers.2.self_attn.v_proj.weight"), hf_permutation::none);
    EXPECT_EQ(hf_gguf_tensor_name("mistral", "lm_head.weight"), std::nullopt) << "arch is the GGUF name";
}

TEST(hf_names, gguf_names_map_back_to_hugging_face_names) {
    EXPECT_EQ(hf_tensor_name_of("llama", "blk.3.attn_q.weight"), "model.layers.3.self_attn.q_proj.weight");
    EXPECT_EQ(hf_tensor_name_of("qwen2", "blk.0.attn_k.bias"), "model.layers.0.self_attn.k_proj.bias");
    EXPECT_EQ(hf_tensor_name_of("qwen2", "output_norm.weight"), "model.norm.weight");
    EXPECT_EQ(hf_tensor_name_of("qwen", "blk.12.attn_qkv.weight"), "transformer.h.12.attn.c_attn.weight");
    EXPECT_EQ(hf_tensor_name_of("llama", "rope_freqs.weight"), std::nullopt);  // GGUF only
    EXPECT_EQ(hf_tensor_name_of("falcon", "blk.0.attn_q.weight"), std::nullopt);
    for (const std::string hf : {"model.layers.7.mlp.down_proj.weight", "model.embed_tokens.weight", "lm_head.weight"}) {
        EXPECT_EQ(hf_tensor_name_of("llama", *hf_gguf_tensor_name("llama", hf)), hf);  // a round trip
    }
}

TEST(hf_names, qwen2_qwen_opt_names) {
    EXPECT_EQ(hf_gguf_tensor_name("qwen2", "model.layers.1.self_attn.k_proj.bias"), "blk.1.attn_k.bias");
    EXPECT_EQ(hf_tensor_permutation("qwen2", "model.layers.1.self_attn.k_proj.weight"), hf_permutation::none);
    EXPECT_EQ(hf_gguf_tensor_name("qwen", "transformer.wte.weight"), "token_embd.weight");
    EXPECT_EQ(hf_gguf_tensor_name("qwen", "transformer.h.5.attn.c_attn.bias"), "blk.5.attn_qkv.bias");
    EXPECT_EQ(hf_gguf_tensor_name("qwen", "transformer.h.5.mlp.w1.weight"), "blk.5.ffn_up.weight");
    EXPECT_EQ(hf_gguf_tensor_name("qwen", "transformer.h.5.mlp.w2.weight"), "blk.5.ffn_gate.weight");
    EXPECT_EQ(hf_gguf_tensor_name("qwen", "transformer.h.5.mlp.c_proj.weight"), "blk.5.ffn_down.weight");
    EXPECT_EQ(hf_gguf_tensor_name("qwen", "transformer.ln_f.weight"), "output_norm.weight");
    EXPECT_EQ(hf_gguf_tensor_name("opt", "model.decoder.embed_positions.weight"), "position_embd.weight");
    EXPECT_EQ(hf_gguf_tensor_name("opt", "decoder.embed_positions.weight"), "position_embd.weight");
    EXPECT_EQ(hf_gguf_tensor_name("opt", "model.decoder.layers.2.fc1.bias"), "blk.2.ffn_up.bias");
    EXPECT_EQ(hf_gguf_tensor_name("opt", "model.decoder.layers.2.self_attn.out_proj.weight"),
              "blk.2.attn_output.weight");
    EXPECT_EQ(hf_gguf_tensor_name("opt", "model.decoder.layers.2.final_layer_norm.bias"), "blk.2.ffn_norm.bias");
    EXPECT_EQ(hf_gguf_tensor_name("opt", "model.decoder.final_layer_norm.weight"), "output_norm.weight");
    EXPECT_EQ(hf_gguf_tensor_name("opt", "model.decoder.project_in.weight"), "token_embd_proj.weight");
    EXPECT_EQ(hf_gguf_tensor_name("opt", "model.decoder.project_out.weight"), "output_proj.weight");
    EXPECT_EQ(hf_gguf_tensor_name("gpt2", "lm_head.weight"), std::nullopt);
}

TEST(hf_names, architecture_from_config) {
    test::temp_dir dir;
    write_shard(dir.file("model.safetensors"), {{"x", {1}}});
    const auto arch_of = [&](const std::string & config) {
        write_text(dir.file("config.json"), config);
        return hf_architecture(*hf_checkpoint::open(dir.path.string()));
    };
    EXPECT_EQ(arch_of(R"({"model_type": "mistral"})"), "llama");
    EXPECT_EQ(arch_of(R"({"model_type": "qwen2"})"), "qwen2");
    EXPECT_EQ(arch_of(R"({"architectures": ["QWenLMHeadModel"], "model_type": "qwen"})"), "qwen");
    EXPECT_EQ(arch_of(R"({"architectures": ["OPTForCausalLM"]})"), "opt");
    try {
        arch_of(R"({"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"]})");
        ADD_FAILURE();
    } catch (const error & e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
        EXPECT_NE(msg.find("\"gpt_neox\""), std::string::npos) << msg;
        EXPECT_NE(msg.find("GPTNeoXForCausalLM"), std::string::npos) << msg;
        EXPECT_NE(msg.find("qwen2"), std::string::npos) << msg;
    }
}

TEST(hf_names, tensor_map_orders_and_rejects_unknown) {
    test::temp_dir dir;
    write_text(dir.file("config.json"), tiny_config);
    write_shard(dir.file("model.safetensors"),
                {{"lm_head.weight", {1}},
                 {"model.layers.10.input_layernorm.weight", {1}},
                 {"model.layers.2.mlp.down_proj.weight", {1}},
                 {"model.layers.2.self_attn.q_proj.weight", {2}},
                 {"model.layers.2.self_attn.rotary_emb.inv_freq", {1}},
                 {"model.norm.weight", {1}},
                 {"model.embed_tokens.weight", {1}}});
    const auto c = hf_checkpoint::open(dir.path.string());
    const std::vector<hf_tensor_mapping> m = hf_tensor_map(*c, "llama");
    std::vector<std::string> names;
    for (const auto & t : m) names.push_back(t.gguf_name);
    EXPECT_EQ(names, (std::vector<std::string>{"token_embd.weight", "blk.2.attn_q.weight", "blk.2.ffn_down.weight",
                                               "blk.10.attn_norm.weight", "output_norm.weight", "output.weight"}));
    EXPECT_EQ(m[1].permutation, hf_permutation::q);
    EXPECT_EQ(m[1].hf_name, "model.layers.2.self_attn.q_proj.weight");

    write_shard(dir.file("model.safetensors"), {{"model.layers.0.mlp.experts.0.weight", {1}}});
    try {
        hf_tensor_map(*hf_checkpoint::open(dir.path.string()), "llama");
        ADD_FAILURE();
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.experts.0.weight"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("'llama'"), std::string::npos) << e.what();
    }
}

TEST(hf_names, rotate_half_permutation) {
    // head_dim 4: GGUF rows (pair 0: rows 0,1; pair 1: rows 2,3) come from HF rows 0,2,1,3.
    EXPECT_EQ(rotate_half_source_row(0, 4), 0);
    EXPECT_EQ(rotate_half_source_row(1, 4), 2);
    EXPECT_EQ(rotate_half_source_row(2, 4), 1);
    EXPECT_EQ(rotate_half_source_row(3, 4), 3);
    EXPECT_EQ(rotate_half_source_row(5, 4), 6);  // second head

    // Two heads of head_dim 6, rows of 3 floats: permuting then inverting gives the input back,
    // and the permuted matrix pairs HF rows i and i + 3 of each head.
    const int64_t n_head = 2, head_dim = 6, n_rows = n_head * head_dim, n_cols = 3;
    std::vector<float> hf(size_t(n_rows * n_cols)), pairs(hf.size()), back(hf.size());
    for (size_t k = 0; k < hf.size(); ++k) hf[k] = float(k);
    permute_rotate_half_to_pairs(hf.data(), pairs.data(), n_rows, n_cols * sizeof(float), n_head);
    for (int64_t h = 0; h < n_head; ++h) {
        for (int64_t j = 0; j < head_dim / 2; ++j) {
            for (int64_t r = 0; r < 2; ++r) {
                const int64_t dst = h * head_dim + 2 * j + r, src = h * head_dim + r * head_dim / 2 + j;
                for (int64_t c = 0; c < n_cols; ++c) {
                    EXPECT_EQ(pairs[size_t(dst * n_cols + c)], hf[size_t(src * n_cols + c)]);
                }
            }
        }
    }
    permute_pairs_to_rotate_half(pairs.data(), back.data(), n_rows, n_cols * sizeof(float), n_head);
    EXPECT_EQ(back, hf);
}

TEST(hf_names, llama3_rope_factors) {
    // Llama-3.1 8B parameters: factor 8, low 1, high 4, original 8192, theta 500000, head_dim 128.
    const std::vector<float> f = llama3_rope_freq_factors(500000.0, 128, 8.0, 1.0, 4.0, 8192.0);
    ASSERT_EQ(f.size(), 64u);
    EXPECT_EQ(f[0], 1.0f);    // highest frequency: unscaled
    EXPECT_EQ(f[63], 8.0f);   // lowest frequency: divided by the factor
    for (size_t i = 1; i < f.size(); ++i) EXPECT_GE(f[i], f[i - 1]) << i;  // monotone in between
    bool smooth = false;
    for (float x : f) smooth |= (x > 1.0f && x < 8.0f);
    EXPECT_TRUE(smooth);
}

}  // namespace
}  // namespace hill
