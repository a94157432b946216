// Policies on the trained stories260K model (issue 4's acceptance, as tests): greedy decoding with
// hillinfer at α = 1 equals policy full token for token and logit for logit, bit for bit (with most
// of the KV cold), and on TinyStories in 512-token windows hillinfer at α = 0.2, S = 4, W = 16 stays
// within 2% of full's perplexity, covers ≥ 0.9 of the attention mass, and the scoring copies (INT4, INT3
// and INT2 keys in DRAM) stay within 1% of full's perplexity and the INT4 and INT3 ones recall within 0.01
// of FP16 scoring of the stored keys (issue 13's accuracy targets; under the softmax aggregate the INT2
// copy recalls 0.015 below FP16, 0.008 under sum: docs/storage.md "The scoring copy"). On a copy of stories260K whose
// heads disagree (query head 0 of every layer with 8x the logits, bench/heads_model.py --loud 8), the
// default softmax aggregate stays within 2% of full and recalls more than summed scores (issue 13 item 9).
#include "engine/perplexity.h"
#include "engine/session.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <tuple>

namespace hill {
namespace {

// Greedy decoding of n tokens after BOS: the tokens, and every step's logits f32 [n, n_vocab].
struct greedy_run {
    std::vector<int32_t> ids;
    std::vector<float> logits;
    step_layer_stats layer0;     // decode statistics of layer 0
    uint64_t tokens_scored = 0;  // cold tokens the storage device scored
};

greedy_run greedy(const model & m, const context_params & p, int n) {
    thread_pool pool(2);
    session s(m, p, pool);
    greedy_run r;
    r.ids = {m.tokenizer().vocab().bos};
    s.eval(r.ids);
    const int32_t n_vocab = m.hp().n_vocab;
    for (int i = 0; i < n; ++i) {
        const float * l = s.logits();
        r.logits.insert(r.logits.end(), l, l + n_vocab);
        r.ids.push_back(int32_t(std::max_element(l, l + n_vocab) - l));
        s.eval(std::span<const int32_t>(&r.ids.back(), 1));
    }
    r.layer0 = s.ctx().decode_stats().layers[0];
    r.tokens_scored = s.ctx().storage().counters().tokens_scored;
    return r;
}

// α = 1 selects every token through the scoring path (the scoring copy in DRAM, over the plain SSD);
// attention in position order makes the tiers invisible: the logits are equal bit for bit.
TEST(policy_data, greedy_hillinfer_at_alpha_1_equals_full) {
    HILL_REQUIRE_DATA(path, "models/gguf/stories260K.gguf");
    auto m = model::load(path);
    test::temp_dir dir;
    const greedy_run full = greedy(*m, context_params{.n_ctx = 512}, 300);
    policy_params all{.name = "hillinfer", .alpha = 1.0};
    all.score.key = score_precision::int4;
    context_params cp{.n_ctx = 512, .kv_dir = dir.file("kv"), .policy = all};
    cp.kv_host_budget = context::host_budget_for(*m, cp, 128);  // 75% of 512 tokens cold
    const greedy_run sparse = greedy(*m, cp, 300);
    EXPECT_EQ(full.ids, sparse.ids);
    ASSERT_EQ(full.logits.size(), sparse.logits.size());
    for (size_t i = 0; i < full.logits.size(); ++i) {
        ASSERT_EQ(full.logits[i], sparse.logits[i]) << "step " << i / size_t(m->hp().n_vocab);
    }
    EXPECT_EQ(sparse.layer0.n_attended, sparse.layer0.n_context);
    EXPECT_GT(sparse.layer0.n_attended_disk, 0u);
    EXPECT_EQ(sparse.tokens_scored, 0u);  // scored from the copy in DRAM: the SSD only read the selected KV
}

struct ppl_run {
    double perplexity = 0.0;
    double recall = 0.0;
};

// copy_bits: context_params::score_copy_bits (0: scoring the stored keys at p.score's precision);
// n_windows of 512 tokens.
ppl_run run(const model & m, const std::vector<int32_t> & ids, const policy_params & p, int copy_bits,
            int n_windows = 6) {
    thread_pool pool(2);
    context_params cp{.n_ctx = 512, .policy = p};
    cp.score_copy_bits = copy_bits;
    session s(m, cp, pool);
    EXPECT_EQ(s.ctx().scoring_copy() != nullptr, copy_bits > 0 && p.name == "hillinfer");
    const perplexity_result r = evaluate_perplexity(s, ids, m.tokenizer().vocab().bos, n_windows);
    EXPECT_EQ(r.n_tokens, n_windows * 511);
    double recall = 0.0;
    uint64_t steps = 0;
    for (const step_layer_stats & L : s.ctx().decode_stats().layers) {
        recall += L.recall_sum;
        steps += L.n_steps;
    }
    return {r.perplexity, steps > 0 ? recall / double(steps) : 0.0};
}

TEST(policy_data, hillinfer_keeps_perplexity_and_recall_on_tinystories) {
    HILL_REQUIRE_DATA(path, "models/gguf/stories260K.gguf");
    HILL_REQUIRE_DATA(text_path, "text/tinystories/tinystories_validation_first1000.txt");
    auto m = model::load(path);
    std::ifstream in(text_path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::vector<int32_t> ids = m->tokenizer().encode(ss.str(), false);
    const ppl_run full = run(*m, ids, policy_params{}, 0);
    policy_params hp{.name = "hillinfer", .alpha = 0.2, .n_sinks = 4, .n_window = 16, .diag = true};
    hp.score.key = score_precision::fp16;
    const ppl_run fp16 = run(*m, ids, hp, 0);
    hp.score.key = score_precision::int4;
    const ppl_run int4 = run(*m, ids, hp, 0);
    const ppl_run copy4 = run(*m, ids, hp, 4), copy3 = run(*m, ids, hp, 3), copy2 = run(*m, ids, hp, 2);
    hp.name = "streaming";
    const ppl_run streaming = run(*m, ids, hp, 0);
    EXPECT_LE(std::abs(fp16.perplexity / full.perplexity - 1.0), 0.02) << fp16.perplexity << " vs " << full.perplexity;
    EXPECT_LE(std::abs(int4.perplexity / full.perplexity - 1.0), 0.02) << int4.perplexity << " vs " << full.perplexity;
    EXPECT_GE(fp16.recall, 0.9);
    EXPECT_LE(std::abs(int4.recall - fp16.recall), 0.02);
    // Recall below FP16 scoring of the stored keys at most: INT4 and INT3 copies 0.01 (the target); INT2 copy 0.02 —
    // the softmax aggregate (the default) ranks by each head's few top tokens, which the INT2 copy's
    // dots find less exactly than FP16 (on these windows 0.014 below it, 0.9529 against 0.9672; on
    // docs/policies.md's 10 windows 0.015, where summed scores lose 0.006; its recall stays above FP16's
    // under sum).
    for (const auto & [name, c, tol] : {std::tuple{"copy int4", copy4, 0.01}, std::tuple{"copy int3", copy3, 0.01},
                                        std::tuple{"copy int2", copy2, 0.02}}) {
        EXPECT_LE(c.perplexity / full.perplexity - 1.0, 0.01) << name << ": " << c.perplexity << " vs " << full.perplexity;
        EXPECT_GE(c.recall, fp16.recall - tol) << name << ": " << c.recall << " vs fp16 " << fp16.recall;
    }
    RecordProperty("recall_fp16", std::to_string(fp16.recall));
    RecordProperty("recall_copy_int4", std::to_string(copy4.recall));
    RecordProperty("recall_copy_int3", std::to_string(copy3.recall));
    RecordProperty("recall_copy_int2", std::to_string(copy2.recall));
    RecordProperty("ppl_full", std::to_string(full.perplexity));
    RecordProperty("ppl_copy_int4", std::to_string(copy4.perplexity));
    RecordProperty("ppl_copy_int3", std::to_string(copy3.perplexity));
    RecordProperty("ppl_copy_int2", std::to_string(copy2.perplexity));
    // Sinks and window alone miss much of the attention mass: scoring is what finds it.
    EXPECT_LT(streaming.recall, fp16.recall - 0.1);
}

// The llama2.c checkpoint src with query head 0 of every layer multiplied by factor (its rows of wq),
// written to dst: bench/heads_model.py --loud factor.
void write_loud_head_model(const std::string & src, const std::string & dst, float factor) {
    std::ifstream in(src, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    int32_t h[7];  // dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
    ASSERT_GE(bytes.size(), sizeof(h));
    std::memcpy(h, bytes.data(), sizeof(h));
    const int64_t dim = h[0], n_layer = h[2], head_dim = dim / h[3];
    const int64_t wq = std::abs(int64_t(h[5])) * dim + n_layer * dim;  // floats before wq: embeddings, rms_att
    ASSERT_GE(bytes.size(), sizeof(h) + size_t(wq + n_layer * dim * dim) * 4);
    for (int64_t il = 0; il < n_layer; ++il) {
        for (int64_t i = 0; i < head_dim * dim; ++i) {
            char * p = bytes.data() + sizeof(h) + size_t(wq + il * dim * dim + i) * 4;
            float x;
            std::memcpy(&x, p, 4);
            x *= factor;
            std::memcpy(p, &x, 4);
        }
    }
    std::ofstream(dst, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

TEST(policy_data, softmax_aggregate_holds_when_heads_disagree) {
    HILL_REQUIRE_DATA(bin, "models/llama2c/stories260K.bin");
    HILL_REQUIRE_DATA(tok, "tokenizers/tok512/tok512.bin");
    HILL_REQUIRE_DATA(text_path, "text/tinystories/tinystories_validation_first1000.txt");
    test::temp_dir dir;
    write_loud_head_model(bin, dir.file("loud8.bin"), 8.0f);
    auto m = model::load(dir.file("loud8.bin"), tok);
    std::ifstream in(text_path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::vector<int32_t> ids = m->tokenizer().encode(ss.str(), false);
    const int n_windows = 2;
    const ppl_run full = run(*m, ids, policy_params{}, 0, n_windows);
    policy_params hp{.name = "hillinfer", .alpha = 0.2, .n_sinks = 4, .n_window = 16, .diag = true};
    EXPECT_EQ(hp.score.aggregate, score_aggregate::softmax);  // the default
    const ppl_run softmax = run(*m, ids, hp, 2, n_windows);
    hp.score.aggregate = score_aggregate::sum;
    const ppl_run sum = run(*m, ids, hp, 2, n_windows);
    RecordProperty("ppl_full", std::to_string(full.perplexity));
    RecordProperty("ppl_softmax", std::to_string(softmax.perplexity));
    RecordProperty("ppl_sum", std::to_string(sum.perplexity));
    RecordProperty("recall_softmax", std::to_string(softmax.recall));
    RecordProperty("recall_sum", std::to_string(sum.recall));
    EXPECT_LE(softmax.perplexity / full.perplexity - 1.0, 0.02) << softmax.perplexity << " vs " << full.perplexity;
    EXPECT_GT(softmax.recall, sum.recall + 0.01) << softmax.recall << " vs sum " << sum.recall;
}

}  // namespace
}  // namespace hill
