// --prompt-cache: save after prefill, load for a prompt that starts with the saved tokens, refuse
// files of another model, KV type or a corrupt one; the same for Hugging Face checkpoint folders.
#include "core/error.h"
#include "engine/prompt_cache.h"
#include "format/safetensors_file.h"
#include "model/synthetic_model.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

namespace hill {
namespace {

class prompt_cache_test : public ::testing::Test {
protected:
    void SetUp() override {
        for (uint64_t seed : {1, 2}) {
            write_random_model(dir.file("m" + std::to_string(seed) + ".gguf"),
                               random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96, .n_layer = 3, .n_head = 4,
                                                   .n_head_kv = 2, .n_ctx = 256, .seed = seed});
        }
        m = model::load(dir.file("m1.gguf"));
        for (int i = 0; i < 120; ++i) prompt.push_back(1 + (i * 37) % 299);
    }
    context_params params(ggml_type type = ggml_type::f32) const {
        // 40 hot tokens per layer: most of the KV is in the cold pool when saved and loaded.
        return context_params{.n_ctx = 256, .kv_type = type, .n_batch = 32,
                              .kv_host_budget = m->hp().kv_bytes_per_token(type) * 40, .kv_dir = dir.file("kv")};
    }
    test::temp_dir dir;
    std::unique_ptr<model> m;
    std::vector<int32_t> prompt;
    thread_pool pool{2};
};

TEST_F(prompt_cache_test, load_then_continue_equals_full_prefill) {
    const std::string path = dir.file("p.cache");
    std::vector<int32_t> first(prompt.begin(), prompt.begin() + 100);
    session saver(*m, params(), pool);
    saver.eval(first);
    save_prompt_cache(path, saver, first);
    // Most of the KV was only in the cold tier: saving read its pages back.
    EXPECT_GT(saver.ctx().io_stats().cold_read_bytes, 0u);
    session full(*m, params(), pool);
    full.eval(prompt);
    session cached(*m, params(), pool);
    EXPECT_EQ(load_prompt_cache(path, cached, prompt), 100);
    EXPECT_EQ(cached.n_past(), 100);
    // The loaded KV is the saved KV bit for bit, every layer; it went to the cold logs (written pages)
    // and at most the hot pool's 40 tokens per layer have a hot copy.
    const hparams & hp = m->hp();
    const size_t layer_bytes = size_t(100 * hp.n_embd_kv()) * 4;
    std::vector<uint8_t> k0(layer_bytes), v0(layer_bytes), k1(layer_bytes), v1(layer_bytes);
    for (int il = 0; il < hp.n_layer; ++il) {
        saver.ctx().export_layer(0, il, k0.data(), v0.data());
        cached.ctx().export_layer(0, il, k1.data(), v1.data());
        EXPECT_TRUE(k0 == k1 && v0 == v1) << "layer " << il;
        EXPECT_LE(cached.ctx().cells().n_hot(il), 40) << "layer " << il;
    }
    EXPECT_GT(cached.ctx().io_stats().cold_write_bytes, 0u);
    cached.eval(std::span<const int32_t>(prompt).subspan(100));
    double max_ref = 0.0, max_err = 0.0;
    for (int32_t i = 0; i < m->hp().n_vocab; ++i) {
        max_ref = std::max(max_ref, std::abs(double(full.logits()[i])));
        max_err = std::max(max_err, std::abs(double(cached.logits()[i]) - double(full.logits()[i])));
    }
    EXPECT_LE(max_err / max_ref, 1e-5);

    // The same prompt as saved: all but its last token load (its logits are not saved).
    session same(*m, params(), pool);
    EXPECT_EQ(load_prompt_cache(path, same, first), 99);
    // A prompt sharing only a prefix loads that prefix; one sharing nothing loads nothing.
    std::vector<int32_t> other = first;
    other[50] = other[50] == 5 ? 6 : 5;
    session part(*m, params(), pool);
    EXPECT_EQ(load_prompt_cache(path, part, other), 50);
    std::vector<int32_t> none = {7, 8, 9};
    session empty(*m, params(), pool);
    EXPECT_EQ(load_prompt_cache(path, empty, none), 0);
    EXPECT_EQ(empty.n_past(), 0);
    // Written atomically: nothing but the cache and the cold pool directory in the folder.
    for (const auto & e : std::filesystem::directory_iterator(dir.path)) {
        EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
    }
}

std::string refusal(const std::string & path, session & s, const std::vector<int32_t> & prompt) {
    try {
        load_prompt_cache(path, s, prompt);
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::bad_input);
        EXPECT_EQ(s.n_past(), 0);
        return e.what();
    }
    return "no error";
}

// A model of the same shapes and file size whose weights differ only far from the file's start and
// end (a fine-tune that leaves the embedding and output alone) is another model: the fingerprint
// hashes every byte, not the first and last MiB it once did.
TEST_F(prompt_cache_test, refuses_a_model_that_differs_only_in_the_middle) {
    const random_model_params big{.n_vocab = 300,
                                  .n_embd = 64,
                                  .n_ff = 4096,
                                  .n_layer = 3,
                                  .n_head = 4,
                                  .n_head_kv = 2,
                                  .n_ctx = 256,
                                  .type = ggml_type::f32,
                                  .seed = 1};
    write_random_model(dir.file("big.gguf"), big);
    std::string bytes;
    {
        std::ifstream in(dir.file("big.gguf"), std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    ASSERT_GT(bytes.size(), size_t(6) << 20);
    bytes[bytes.size() / 2] ^= 0x40;  // one bit of one weight
    std::ofstream(dir.file("tuned.gguf"), std::ios::binary) << bytes;
    const std::string path = dir.file("p.cache");
    const auto a = model::load(dir.file("big.gguf"));
    {
        session s(*a, params(), pool);
        s.eval(prompt);
        save_prompt_cache(path, s, prompt);
    }
    const auto tuned = model::load(dir.file("tuned.gguf"));
    session s_tuned(*tuned, params(), pool);
    EXPECT_NE(refusal(path, s_tuned, prompt).find("another model"), std::string::npos);
    session s_same(*a, params(), pool);  // the model it was made with still loads it
    EXPECT_EQ(load_prompt_cache(path, s_same, prompt), int64_t(prompt.size()) - 1);
}

TEST_F(prompt_cache_test, refuses_other_model_type_and_corrupt_files) {
    const std::string path = dir.file("p.cache");
    {
        session s(*m, params(), pool);
        s.eval(prompt);
        save_prompt_cache(path, s, prompt);
    }
    auto other = model::load(dir.file("m2.gguf"));
    session s_other(*other, params(), pool);
    EXPECT_NE(refusal(path, s_other, prompt).find("another model"), std::string::npos);
    session s_f16(*m, params(ggml_type::f16), pool);
    EXPECT_NE(refusal(path, s_f16, prompt).find("F32 KV cache, this run uses F16"), std::string::npos);

    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    auto write = [&](const std::string & b) { std::ofstream(dir.file("bad.cache"), std::ios::binary) << b; };
    session s(*m, params(), pool);
    write(bytes.substr(0, bytes.size() - 100));
    EXPECT_NE(refusal(dir.file("bad.cache"), s, prompt).find("truncated or corrupt"), std::string::npos);
    std::string flipped = bytes;
    flipped[flipped.size() / 2] ^= 0x40;  // inside some layer's KV
    write(flipped);
    EXPECT_NE(refusal(dir.file("bad.cache"), s, prompt).find("corrupt (checksum)"), std::string::npos);
    flipped = bytes;
    flipped[60] ^= 0x01;  // a token id
    write(flipped);
    EXPECT_NE(refusal(dir.file("bad.cache"), s, prompt).find("token ids corrupt"), std::string::npos);
    write("not a cache at all, but long enough to hold a header of forty-eight bytes");
    EXPECT_NE(refusal(dir.file("bad.cache"), s, prompt).find("bad magic"), std::string::npos);
}

TEST_F(prompt_cache_test, cache_longer_than_the_context_loads_the_prefix_that_fits) {
    // Saved with 120 tokens; loaded into a context of 64 (it used to be refused).
    const std::string path = dir.file("p.cache");
    {
        session s(*m, params(), pool);
        s.eval(prompt);
        save_prompt_cache(path, s, prompt);
    }
    context_params small = params();
    small.n_ctx = 64;
    const std::vector<int32_t> head(prompt.begin(), prompt.begin() + 50);
    session cached(*m, small, pool);
    ASSERT_EQ(load_prompt_cache(path, cached, head), 49);
    cached.eval(std::span<const int32_t>(head).subspan(49));
    session full(*m, small, pool);
    full.eval(head);
    for (int32_t i = 0; i < m->hp().n_vocab; ++i) ASSERT_NEAR(cached.logits()[i], full.logits()[i], 1e-4f) << i;
    // A prompt as long as the context: all but its last token.
    const std::vector<int32_t> fill(prompt.begin(), prompt.begin() + 64);
    session whole(*m, small, pool);
    EXPECT_EQ(load_prompt_cache(path, whole, fill), 63);
}

TEST_F(prompt_cache_test, save_removes_the_temporary_files_of_killed_saves) {
    // A writer killed before it renamed its file leaves `<cache>.tmp.<pid>`; the next save removes
    // those of processes that no longer run, and nothing else.
    const std::string path = dir.file("p.cache");
    const std::string stale = path + ".tmp.999999999", live = path + ".tmp.1";
    const std::string other = dir.file("q.cache.tmp.999999999");
    for (const std::string & f : {stale, live, other}) std::ofstream(f) << "partial";
    session s(*m, params(), pool);
    s.eval(prompt);
    save_prompt_cache(path, s, prompt);
    EXPECT_FALSE(std::filesystem::exists(stale));
    EXPECT_TRUE(std::filesystem::exists(live));
    EXPECT_TRUE(std::filesystem::exists(other));
    session again(*m, params(), pool);
    EXPECT_EQ(load_prompt_cache(path, again, prompt), 119);
}

TEST_F(prompt_cache_test, load_failing_half_way_leaves_the_session_empty) {
    // The cold-pool write of the loaded KV fails in the last layer (ENOSPC), the layers before it
    // filled already: the load must undo them before the error goes on, so that the caller sees an
    // empty session (what --prompt-cache-fallback then prefills). Layers 0 and 1 used to keep their
    // 100 tokens with n_past() == 0.
    // (A prefill on top is not run here: after a failed cold-page write, kv_store's truncate does not
    // restore the failing layer's cold slots, and its next append asserts — a kv_store matter.)
    const std::string path = dir.file("p.cache");
    std::vector<int32_t> first(prompt.begin(), prompt.begin() + 100);
    {
        session s(*m, params(), pool);
        s.eval(first);
        save_prompt_cache(path, s, first);
    }
    // How many cold-pool writes a load does (not counting the session's construction).
    int n_writes = 0;
    bool counting_on = false;
    {
        context_params counting = params();
        counting.io_faults = [&](const io_issue & is, int64_t r) {
            if (counting_on && is.op == io_op::write) ++n_writes;
            return r;
        };
        session s(*m, counting, pool);
        counting_on = true;
        ASSERT_EQ(load_prompt_cache(path, s, prompt), 100);
    }
    ASSERT_GE(n_writes, 3) << "the loaded KV should go to the cold pool in every layer";
    // Once armed, every write from the load's last on fails (the retries of a split op too).
    std::atomic<bool> armed{false};
    std::atomic<int> writes_ok{0};
    context_params p = params();
    p.io_faults = [&](const io_issue & is, int64_t r) -> int64_t {
        if (is.op != io_op::write || !armed.load()) return r;
        return writes_ok.fetch_sub(1) <= 0 ? -ENOSPC : r;
    };
    session s(*m, p, pool);
    writes_ok = n_writes - 1;
    armed = true;
    try {
        load_prompt_cache(path, s, prompt);
        FAIL() << "no error";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::bad_input) << e.what();
        EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.n_past(), 0);
    EXPECT_EQ(s.ctx().cells().n_tokens(0), 0);
    EXPECT_EQ(s.ctx().logs()->log(0, 0).n_tokens(), 0) << "nothing of the failed load stays in the cold log";
}

// A random llama checkpoint folder: config.json and model.safetensors (f32), weights from `seed`.
void write_llama_folder(const std::filesystem::path & dir, uint32_t seed) {
    constexpr int64_t n_vocab = 300, n_embd = 64, n_ff = 96, n_layer = 2, n_head = 4, n_head_kv = 2;
    constexpr int64_t head_dim = n_embd / n_head;
    std::filesystem::create_directories(dir);
    std::mt19937 rng(seed);
    std::vector<std::vector<float>> store;
    std::vector<safetensors_entry> es;
    const auto add = [&](const std::string & name, std::vector<int64_t> shape, float offset = 0.0f) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        store.push_back(test::random_floats(rng, size_t(n), offset - 0.3f, offset + 0.3f));
        es.push_back({name, ggml_type::f32, std::move(shape), store.back().data(), uint64_t(n) * 4});
    };
    add("model.embed_tokens.weight", {n_vocab, n_embd});
    for (int64_t il = 0; il < n_layer; ++il) {
        const std::string p = "model.layers." + std::to_string(il) + ".";
        add(p + "input_layernorm.weight", {n_embd}, 1.0f);
        add(p + "self_attn.q_proj.weight", {n_head * head_dim, n_embd});
        add(p + "self_attn.k_proj.weight", {n_head_kv * head_dim, n_embd});
        add(p + "self_attn.v_proj.weight", {n_head_kv * head_dim, n_embd});
        add(p + "self_attn.o_proj.weight", {n_embd, n_head * head_dim});
        add(p + "post_attention_layernorm.weight", {n_embd}, 1.0f);
        add(p + "mlp.gate_proj.weight", {n_ff, n_embd});
        add(p + "mlp.up_proj.weight", {n_ff, n_embd});
        add(p + "mlp.down_proj.weight", {n_embd, n_ff});
    }
    add("model.norm.weight", {n_embd}, 1.0f);
    add("lm_head.weight", {n_vocab, n_embd});
    const std::vector<uint8_t> img = safetensors_serialize(es);
    std::ofstream(dir / "model.safetensors", std::ios::binary)
        .write(reinterpret_cast<const char *>(img.data()), std::streamsize(img.size()));
    std::ofstream(dir / "config.json")
        << R"({"model_type": "llama", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96, )"
           R"("num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, )"
           R"("max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0})";
}

TEST_F(prompt_cache_test, checkpoint_folder_saves_reloads_and_refuses_another_folder) {
    const std::filesystem::path a = dir.path / "ckpt-a", b = dir.path / "ckpt-b", copy = dir.path / "ckpt-copy";
    write_llama_folder(a, 1);
    write_llama_folder(b, 2);  // the same config and shapes, other weights
    std::filesystem::copy(a, copy);
    const auto ma = model::load(a.string());
    ASSERT_EQ(ma->format(), "hf");
    const auto params_for = [&](const model & mod) {
        return context_params{.n_ctx = 256, .kv_type = ggml_type::f32, .n_batch = 32,
                              .kv_host_budget = mod.hp().kv_bytes_per_token(ggml_type::f32) * 40,
                              .kv_dir = dir.file("kv")};
    };
    const std::string path = dir.file("folder.cache");
    std::vector<int32_t> first(prompt.begin(), prompt.begin() + 100);
    {
        session s(*ma, params_for(*ma), pool);
        s.eval(first);
        save_prompt_cache(path, s, first);
    }
    // The same folder loaded again, and a copy of it elsewhere (the path is not part of the
    // fingerprint): the cache loads, and continuing equals a full prefill.
    session full(*ma, params_for(*ma), pool);
    full.eval(prompt);
    for (const std::filesystem::path & p : {a, copy}) {
        SCOPED_TRACE(p.string());
        const auto m2 = model::load(p.string());
        session cached(*m2, params_for(*m2), pool);
        ASSERT_EQ(load_prompt_cache(path, cached, prompt), 100);
        cached.eval(std::span<const int32_t>(prompt).subspan(100));
        double max_ref = 0.0, max_err = 0.0;
        for (int32_t i = 0; i < m2->hp().n_vocab; ++i) {
            max_ref = std::max(max_ref, std::abs(double(full.logits()[i])));
            max_err = std::max(max_err, std::abs(double(cached.logits()[i]) - double(full.logits()[i])));
        }
        EXPECT_LE(max_err / max_ref, 1e-5);
    }
    // Another folder of the same shapes is refused, and so is the GGUF model of the fixture.
    const auto mb = model::load(b.string());
    session sb(*mb, params_for(*mb), pool);
    EXPECT_NE(refusal(path, sb, prompt).find("another model"), std::string::npos);
    session sg(*m, params(), pool);
    EXPECT_NE(refusal(path, sg, prompt).find("another model"), std::string::npos);
}

}  // namespace
}  // namespace hill
