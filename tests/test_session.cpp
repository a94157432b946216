// Session behaviour on a small random model: chunked prefill equals one batch, thread counts
// agree, context overflow is refused (prefill and decode), truncate() rewinds, and decoding again
// after a truncation back to the prompt repeats the logits bit for bit, in RAM and over the tiers,
// under another policy too (set_policy); and the scoring copy's width where the heads do not pack it.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "core/error.h"
#include "core/sys_info.h"
#include "engine/context.h"
#include "engine/session.h"
#include "model/synthetic_model.h"
#include "score/quant_copy.h"
#include "test_util.h"

namespace hill {
namespace {

class session_test : public ::testing::Test {
protected:
    void SetUp() override {
        write_random_model(dir.file("m.gguf"), random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96,
                                                                   .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                                                                   .type = ggml_type::q8_0, .seed = 11});
        m = model::load(dir.file("m.gguf"));
        for (int i = 0; i < 50; ++i) tokens.push_back((i * 37 + 5) % 300);
    }
    std::vector<float> run(int n_threads, int32_t n_batch, ggml_type kv, int32_t n_segment = 8192) {
        thread_pool pool(n_threads);
        session s(*m, context_params{128, kv, n_batch, n_segment}, pool);
        s.eval(tokens, true);
        return std::vector<float>(s.logits(), s.logits() + tokens.size() * 300);
    }
    test::temp_dir dir;
    std::unique_ptr<model> m;
    std::vector<int32_t> tokens;
};

TEST_F(session_test, chunked_prefill_matches_single_batch) {
    for (ggml_type kv : {ggml_type::f32, ggml_type::f16}) {
        const auto a = run(2, 64, kv);
        const auto b = run(2, 7, kv);
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4f) << i;
    }
}

// Segments of a long prompt: every token's logits, as one pass gives them.
TEST_F(session_test, segmented_prefill_matches_one_pass) {
    const auto a = run(2, 64, ggml_type::f32);
    const auto b = run(2, 8, ggml_type::f32, 13);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4f) << i;
}

TEST_F(session_test, thread_counts_agree) {
    const auto a = run(1, 16, ggml_type::f16);
    const auto b = run(3, 16, ggml_type::f16);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4f) << i;
}

TEST_F(session_test, context_overflow_is_a_usage_error) {
    thread_pool pool(1);
    session s(*m, context_params{40, ggml_type::f16}, pool);
    try {
        s.eval(tokens);
        FAIL() << "expected an error";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::usage);
        EXPECT_NE(std::string(e.what()).find("context size of 40"), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.n_past(), 0);
}

TEST_F(session_test, decode_past_the_context_is_a_usage_error) {
    thread_pool pool(1);
    session s(*m, context_params{40, ggml_type::f16}, pool);
    s.eval(std::span<const int32_t>(tokens).subspan(0, 40));
    const int32_t tok = 3;
    try {
        s.eval(std::span<const int32_t>(&tok, 1));
        FAIL() << "expected an error";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::usage);
        EXPECT_NE(std::string(e.what()).find("context size of 40"), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.n_past(), 40);
}

TEST_F(session_test, bad_token_id_is_refused) {
    thread_pool pool(1);
    session s(*m, context_params{40, ggml_type::f16}, pool);
    const std::vector<int32_t> bad = {1, 300};
    EXPECT_THROW(s.eval(bad), error);
    EXPECT_EQ(s.n_past(), 0);
}

TEST_F(session_test, truncate_then_eval_repeats_logits) {
    thread_pool pool(2);
    session s(*m, context_params{128, ggml_type::f32, 16}, pool);
    s.eval(tokens);
    const std::vector<float> first(s.logits(), s.logits() + 300);
    s.truncate(20);
    s.eval(std::span<const int32_t>(tokens).subspan(20));
    for (int i = 0; i < 300; ++i) ASSERT_NEAR(first[size_t(i)], s.logits()[i], 1e-5f);
}

// A decode step reads only the KV of the tokens before it, in position order wherever they live: after
// truncate() back to the prompt the same tokens decode to the same bits, whatever moved between the
// tiers meanwhile, and hillinfer at α = 1 (every token selected, through the scoring path) decodes
// what full decodes.
TEST_F(session_test, truncate_to_the_prompt_repeats_decode_bit_for_bit) {
    thread_pool pool(2);
    std::vector<int32_t> prompt;  // 2 written cold pages of 64 tokens and an open tail
    for (int i = 0; i < 150; ++i) prompt.push_back((i * 37 + 5) % 300);
    for (int64_t budget_tokens : {0, 24}) {  // all in RAM; 24 of up to 158 tokens hot
        SCOPED_TRACE("budget " + std::to_string(budget_tokens));
        context_params p{256, ggml_type::f16, 16};
        if (budget_tokens > 0) {
            p.kv_host_budget = uint64_t(budget_tokens) * m->hp().kv_bytes_per_token(ggml_type::f16);
            p.kv_dir = dir.file("kv");
        }
        session s(*m, p, pool);
        s.eval(prompt);
        const int64_t n_prompt = s.n_past();
        auto decode = [&] {
            std::vector<float> all;
            for (int i = 0; i < 8; ++i) {
                const int32_t tok = (i * 71 + 3) % 300;
                s.eval(std::span<const int32_t>(&tok, 1));
                all.insert(all.end(), s.logits(), s.logits() + 300);
            }
            return all;
        };
        const std::vector<float> first = decode();
        if (budget_tokens > 0) {
            EXPECT_GT(s.ctx().decode_stats().layers[0].n_attended_disk, 0u);
        }
        s.truncate(n_prompt);
        EXPECT_EQ(s.n_past(), n_prompt);
        const std::vector<float> again = decode();
        ASSERT_EQ(first.size(), again.size());
        for (size_t i = 0; i < first.size(); ++i) ASSERT_EQ(first[i], again[i]) << "again, logit " << i;
        s.truncate(n_prompt);
        s.set_policy(policy_params{.name = "hillinfer", .alpha = 1.0});
        EXPECT_EQ(s.ctx().decode_stats().n_steps, 0u);  // fresh statistics
        const std::vector<float> hill = decode();
        for (size_t i = 0; i < first.size(); ++i) ASSERT_EQ(first[i], hill[i]) << "hillinfer, logit " << i;
        EXPECT_EQ(s.ctx().decode_stats().n_steps, 8u);
        EXPECT_EQ(s.policy().name(), "hillinfer");
    }
}

// A prompt's attention runs in parts of keys with progress() between them, so a stop (progress throwing,
// as on Ctrl-C) lands inside a layer's attention: in one segment, between parts of its own keys (1024,
// 1024, 552); in a second segment, within and after the earlier tokens' window (2048 keys). The prefill
// ends there, the session is as before, and the same prompt then gives the logits of a prefill never
// stopped. progress counts work (context::prefill_work): per token the projections, per (query, key)
// pair 2 · n_embd_q, so its values inside the attention are the pairs attended so far.
TEST_F(session_test, a_stop_inside_a_layers_attention_ends_the_prefill) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 2600; ++i) prompt.push_back((i * 37 + 5) % 300);
    thread_pool pool(2);
    const hparams & hp = m->hp();
    const double e = hp.n_embd, q = double(hp.n_embd_q()), kv = double(hp.n_embd_kv()), ff = hp.n_ff;
    // A segment of n tokens after p0, per layer: (qkv, attend, rest).
    const auto work = [&](double p0, double n) {
        return std::array<double, 3>{n * e * (q + 2 * kv), 2 * q * (n * p0 + n * (n + 1) / 2),
                                     n * (q * e + 3 * e * ff)};
    };
    const auto sum = [&](const std::array<double, 3> & w) { return w[0] + w[1] + w[2]; };
    // n_segment; where the segment stopped in starts (the work before it), its size and earlier tokens, and the
    // pairs attended at the two calls inside its layer 0's attention.
    struct stop_case {
        int n_segment;
        double before, p0, n, pairs1, pairs2;
    };
    const auto w1 = work(0, 2048);
    for (const stop_case & c :
         {stop_case{8192, 0, 0, 2600, 1024.0 * 1025 / 2 + 1576.0 * 1024, 2048.0 * 2049 / 2 + 552.0 * 2048},
          stop_case{2048, 2 * sum(w1), 2048, 552, 552.0 * 1024, 552.0 * 2048}}) {
        SCOPED_TRACE("segments of " + std::to_string(c.n_segment));
        const context_params p{4096, ggml_type::f16, 256, c.n_segment};
        const auto w = work(c.p0, c.n);
        const double total = c.n_segment == 8192 ? 2 * sum(w) : 2 * sum(w1) + 2 * sum(w);
        // Layer 0 of the segment: after its QKV, twice within its attention, after the attention.
        const std::vector<double> want_calls = {c.before + w[0], c.before + w[0] + 2 * q * c.pairs1,
                                                c.before + w[0] + 2 * q * c.pairs2, c.before + w[0] + w[1]};
        session whole(*m, p, pool);
        std::vector<double> done;
        whole.eval(prompt, false, [&](double d, double t) {
            EXPECT_NEAR(t, total, total * 1e-12);
            if (!done.empty()) {
                EXPECT_GE(d, done.back());
            }
            done.push_back(d);
        });
        ASSERT_FALSE(done.empty());
        EXPECT_EQ(done.back(), total) << "the last call reaches the total";
        const auto first = std::find_if(done.begin(), done.end(),
                                        [&](double d) { return std::abs(d - want_calls[0]) <= total * 1e-12; });
        ASSERT_NE(first, done.end()) << "no call after layer 0's QKV";
        const auto at = size_t(first - done.begin());
        ASSERT_GE(done.size(), at + want_calls.size());
        for (size_t k = 0; k < want_calls.size(); ++k) {
            EXPECT_NEAR(done[at + k], want_calls[k], total * 1e-12) << "call " << k << " of the segment's layer 0";
        }
        const std::vector<float> want(whole.logits(), whole.logits() + 300);

        struct stop {};
        session s(*m, p, pool);
        size_t n_calls = 0;
        EXPECT_THROW(s.eval(prompt, false,
                            [&](double, double) {
                                if (n_calls++ == at + 1) throw stop{};  // after a part of layer 0's attention
                            }),
                     stop);
        EXPECT_EQ(n_calls, at + 2);
        EXPECT_EQ(s.n_past(), 0);
        s.eval(prompt);
        for (int i = 0; i < 300; ++i) ASSERT_EQ(s.logits()[i], want[size_t(i)]) << i;
    }
}

// The KV cells and the scoring copy are made for the whole capacity at once: a capacity whose metadata
// exceeds the memory available (64 sequences of 2^31 - 1 tokens: 2.7 TB of cells) is a usage error naming
// the bytes, not an out-of-memory failure or the OOM killer part way.
TEST_F(session_test, a_capacity_whose_metadata_exceeds_the_memory_available_is_refused) {
    ASSERT_GT(available_memory_bytes(), 0u) << "/proc/meminfo has no MemAvailable";
    thread_pool pool(1);
    context_params p{INT32_MAX, ggml_type::f16};
    p.n_seq = 64;
    try {
        context ctx(*m, p, pool);
        FAIL() << "made";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::usage) << e.what();
        const std::string msg = e.what();
        EXPECT_NE(msg.find("a context of 2147483647 tokens for each of 64 sequences needs "), std::string::npos) << msg;
        EXPECT_NE(msg.find(" of memory for its KV metadata (10 bytes per token and layer for the KV cells"),
                  std::string::npos)
            << msg;
        EXPECT_NE(msg.find(" is available: lower the context size"), std::string::npos) << msg;
    }
}

// The scoring copy's width (context::scoring_copy_bits): the one asked for where the model's heads pack
// it (3 bits: head_dim % 8 == 0; 2 bits: % 4), else INT4, which packs every even head_dim; no copy for
// heads wider than quant_copy::max_head_dim (the step then scores the stored keys).
TEST(scoring_copy_width, the_asked_width_where_heads_pack_it_else_int4) {
    test::temp_dir dir;
    context_params p;
    p.policy.name = "hillinfer";
    constexpr int wide = quant_copy::max_head_dim + 8;
    for (const auto & [n_embd, head_dim] :
         {std::pair{64, 16}, std::pair{48, 12}, std::pair{40, 10}, std::pair{wide, wide}}) {
        const std::string path = dir.file("m" + std::to_string(head_dim) + ".gguf");
        write_random_model(path, random_model_params{.n_vocab = 300,
                                                     .n_embd = n_embd,
                                                     .n_ff = 96,
                                                     .n_layer = 1,
                                                     .n_head = head_dim == wide ? 1 : 4,
                                                     .n_head_kv = head_dim == wide ? 1 : 2,
                                                     .seed = 3});
        const auto m = model::load(path);
        ASSERT_EQ(m->hp().head_dim, head_dim);
        const bool fits = head_dim <= quant_copy::max_head_dim;
        const int want3 = !fits ? 0 : head_dim % 8 == 0 ? 3 : 4, want2 = !fits ? 0 : head_dim % 4 == 0 ? 2 : 4;
        for (const auto & [asked, want] :
             {std::pair{3, want3}, std::pair{2, want2}, std::pair{4, fits ? 4 : 0}, std::pair{0, 0}}) {
            p.score_copy_bits = asked;
            EXPECT_EQ(context::scoring_copy_bits(*m, p), want) << "head_dim " << head_dim << ", asked " << asked;
        }
    }
    EXPECT_EQ(context_params{}.score_copy_bits, 3) << "the default: INT3 (docs/storage.md \"The scoring copy\")";
}

}  // namespace
}  // namespace hill
