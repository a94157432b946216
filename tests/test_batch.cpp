// Batches of sequences through the decode step (sched/decode_step.h, engine/batch_generator.h):
// greedy decoding of 1, 2, 3, 5 and 8 different prompts of different lengths gives every sequence
// exactly the ids it gets alone — with all of the KV hot and with most of it cold, under policies full
// and hillinfer — and each sequence writes only its own KV; tiered decode is bit-identical to all-in-RAM
// decode; continuous batching lets finished sequences leave and waiting ones join.
#include "core/error.h"
#include "engine/batch_generator.h"
#include "engine/context.h"
#include "model/synthetic_model.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

namespace hill {
namespace {

class batch_test : public ::testing::Test {
protected:
    void SetUp() override {
        write_random_model(dir.file("m.gguf"), random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96,
                                                                   .n_layer = 2, .n_head = 8, .n_head_kv = 2,
                                                                   .n_ctx = 512, .seed = 11});
        m = model::load(dir.file("m.gguf"));
        // Eight prompts of different lengths (and contents).
        for (int i = 0; i < 8; ++i) {
            std::vector<int32_t> p;
            const int len = 5 + 23 * i % 97;
            for (int j = 0; j < len; ++j) p.push_back(3 + (j * 37 + i * 101) % 290);
            prompts.push_back(p);
        }
    }
    // Context parameters for n_seq sequences of n_ctx tokens; cold: a hot pool of 24 tokens per sequence
    // (sinks, window and 4 more), so that most of every sequence's KV (its prompt and 24 to 38 new
    // tokens) is read from the cold tier.
    context_params params(int n_seq, bool cold, const std::string & policy) {
        context_params p{.n_ctx = n_ctx, .n_batch = 16};
        p.n_seq = n_seq;
        p.policy.name = policy;
        p.policy.alpha = 0.3;
        if (cold) {
            p.kv_host_budget = context::host_budget_for(*m, p, 24 * int64_t(n_seq));
            p.kv_dir = dir.file("kv" + std::to_string(n_dirs++));
        }
        return p;
    }
    std::vector<generation_request> requests(size_t n) const {
        std::vector<generation_request> r(n);
        for (size_t i = 0; i < n; ++i) {
            r[i].prompt = prompts[i];
            r[i].n_predict = 24 + int32_t(i % 3) * 7;  // different lengths: sequences leave at different steps
            r[i].sampling.temperature = 0.0f;
        }
        return r;
    }
    test::temp_dir dir;
    std::unique_ptr<model> m;
    std::vector<std::vector<int32_t>> prompts;
    thread_pool pool{2};
    int32_t n_ctx = 160;
    int n_dirs = 0;
};

TEST_F(batch_test, every_sequence_decodes_what_it_decodes_alone) {
    for (const std::string policy : {"full", "hillinfer"}) {
        for (const bool cold : {false, true}) {
            SCOPED_TRACE(policy + (cold ? ", most of the KV cold" : ", all hot"));
            // Alone: each prompt in its own context of one sequence.
            // Under TSan (test::tsan_build) one batch size: the same threads, a fraction of the time.
            // Under ASan (test::asan_build) batches of 2 and 5: even and odd, and 5 holds the longest
            // prompt (97 tokens) and every decode length, in half the sequences decoded.
            const std::vector<int> sizes = test::tsan_build   ? std::vector<int>{3}
                                           : test::asan_build ? std::vector<int>{2, 5}
                                                              : std::vector<int>{2, 3, 5, 8};
            std::vector<std::vector<int32_t>> alone;
            for (size_t i = 0; i < size_t(sizes.back()); ++i) {
                context ctx(*m, params(1, cold, policy), pool);
                batch_generator gen(ctx, 1, -1);
                const std::vector<generation_request> all = requests(8);
                const std::vector<generation_request> one(all.begin() + ptrdiff_t(i), all.begin() + ptrdiff_t(i) + 1);
                alone.push_back(gen.run(one)[0].ids);
                ASSERT_EQ(alone.back().size(), size_t(one[0].n_predict));
            }
            for (const int n : sizes) {
                SCOPED_TRACE("batch of " + std::to_string(n));
                context ctx(*m, params(n, cold, policy), pool);
                batch_generator gen(ctx, n, -1);
                const std::vector<generation_result> res = gen.run(requests(size_t(n)));
                EXPECT_EQ(gen.last_totals().max_batch, n);
                for (int i = 0; i < n; ++i) {
                    EXPECT_EQ(res[size_t(i)].stop, "length");
                    EXPECT_EQ(res[size_t(i)].ids, alone[size_t(i)]) << "sequence " << i;
                }
                if (cold) {
                    // A good share of the attended KV came from the cold tier.
                    uint64_t cold_att = 0, att = 0;
                    for (const step_layer_stats & L : ctx.decode_stats().layers) {
                        cold_att += L.n_attended_open + L.n_attended_disk;
                        att += L.n_attended;
                    }
                    EXPECT_GT(cold_att * 10, att) << "over a tenth of the attended tokens from the cold tier";
                }
            }
        }
    }
}

// Eight prompts through three sequences: finished ones leave at step boundaries, waiting ones join,
// and the results still equal the prompts decoded alone.
TEST_F(batch_test, continuous_batching_joins_and_leaves) {
    // Under the sanitizers (test::sanitizer_build) five prompts: two still wait for a finished one's
    // sequence and join, with every decode length and the longest prompt, in five eighths of the time.
    const size_t n_req = test::sanitizer_build ? 5 : 8;
    std::vector<std::vector<int32_t>> alone;
    for (size_t i = 0; i < n_req; ++i) {
        context ctx(*m, params(1, true, "hillinfer"), pool);
        batch_generator gen(ctx, 1, -1);
        const std::vector<generation_request> all = requests(n_req);
        const std::vector<generation_request> one(all.begin() + ptrdiff_t(i), all.begin() + ptrdiff_t(i) + 1);
        alone.push_back(gen.run(one)[0].ids);
    }
    context ctx(*m, params(3, true, "hillinfer"), pool);
    batch_generator gen(ctx, 3, -1);
    std::vector<size_t> done_order;
    batch_progress cb;
    cb.on_done = [&](size_t i, const generation_result &) { done_order.push_back(i); };
    const std::vector<generation_result> res = gen.run(requests(n_req), cb);
    ASSERT_EQ(res.size(), n_req);
    for (size_t i = 0; i < n_req; ++i) EXPECT_EQ(res[i].ids, alone[i]) << i;
    EXPECT_EQ(done_order.size(), n_req);
    EXPECT_EQ(gen.last_totals().max_batch, 3);
    for (int s = 0; s < 3; ++s) EXPECT_EQ(ctx.n_past(s), 0) << "finished sequences free their KV";
}

// A prompt longer than the context fails alone; the others go on.
TEST_F(batch_test, a_prompt_longer_than_the_context_fails_alone) {
    std::vector<generation_request> r = requests(3);
    r[1].prompt.assign(size_t(n_ctx) + 5, 7);
    context ctx(*m, params(2, false, "full"), pool);
    batch_generator gen(ctx, 2, -1);
    const std::vector<generation_result> res = gen.run(r);
    EXPECT_EQ(res[0].stop, "length");
    EXPECT_EQ(res[1].stop, "error");
    EXPECT_NE(res[1].error.find("longer than the context"), std::string::npos) << res[1].error;
    EXPECT_EQ(res[2].stop, "length");
}

// The step-wise owner (what the server drives): a request submitted while others run joins at a step
// boundary and decodes what it decodes alone; a cancelled one ends at the next boundary with its KV
// freed; a cancel from on_token (a stop string) ends the request at once; a waiting one ends at once.
TEST_F(batch_test, requests_join_while_others_run_and_cancel_frees_their_kv) {
    const std::vector<generation_request> all = requests(4);
    std::vector<std::vector<int32_t>> alone;
    for (size_t i = 0; i < 4; ++i) {
        context ctx(*m, params(1, true, "hillinfer"), pool);
        batch_generator gen(ctx, 1, -1);
        alone.push_back(gen.run(std::span(all).subspan(i, 1))[0].ids);
    }
    context ctx(*m, params(2, true, "hillinfer"), pool);
    batch_generator gen(ctx, 2, -1);
    std::map<size_t, generation_result> done;
    std::map<size_t, int> n_tokens;
    batch_progress cb;
    cb.on_done = [&](size_t id, const generation_result & r) { done[id] = r; };
    cb.on_token = [&](size_t id, int32_t) {
        if (++n_tokens[id] == 5 && id == 2) gen.cancel(id, "stop", cb);  // as a stop string does
    };
    const size_t a = gen.submit(all[0]);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(gen.step(cb));
    const size_t b = gen.submit(all[1]);  // joins the running one
    ASSERT_TRUE(gen.step(cb));
    EXPECT_EQ(gen.n_running(), 2u);
    const size_t c = gen.submit(all[2]);  // waits: the batch is full
    const size_t d = gen.submit(all[3]);
    EXPECT_EQ(gen.n_waiting(), 2u);
    gen.cancel(d, "cancelled", cb);  // a waiting request ends at once
    ASSERT_EQ(done.count(d), 1u);
    EXPECT_EQ(done[d].stop, "cancelled");
    EXPECT_EQ(gen.n_waiting(), 1u);
    ASSERT_TRUE(gen.step(cb));
    gen.cancel(a, "cancelled", cb);  // a running one ends at the next boundary
    EXPECT_EQ(done.count(a), 0u);
    ASSERT_TRUE(gen.step(cb));
    ASSERT_EQ(done.count(a), 1u);
    EXPECT_EQ(done[a].stop, "cancelled");
    EXPECT_EQ(done[a].ids, std::vector<int32_t>(alone[0].begin(), alone[0].begin() + ptrdiff_t(done[a].ids.size())));
    while (gen.step(cb)) {
    }
    EXPECT_TRUE(gen.idle());
    EXPECT_EQ(done[b].stop, "length");
    EXPECT_EQ(done[b].ids, alone[1]);
    EXPECT_EQ(done[c].stop, "stop");
    EXPECT_EQ(done[c].ids.size(), 5u) << "ended right after the token that cancelled it";
    EXPECT_EQ(done[c].ids, std::vector<int32_t>(alone[2].begin(), alone[2].begin() + 5));
    for (int s = 0; s < 2; ++s) EXPECT_EQ(ctx.n_past(s), 0) << "every sequence's KV freed";
    EXPECT_EQ(ctx.n_cold_cells(), 0);
    EXPECT_FALSE(gen.step(cb)) << "idle: nothing to do";
}

// Chunked prefill: a long prompt goes in chunks, one per step, while the running sequence decodes one
// token per step; the result keeps its length, and the chunked prompt's tokens match a whole prefill's
// up to the last bits of the logits (greedy ids compared on the first tokens only where they agree).
TEST_F(batch_test, chunked_prefill_interleaves_with_decode_steps) {
    std::vector<generation_request> r = requests(2);
    r[1].prompt.clear();
    for (int j = 0; j < 100; ++j) r[1].prompt.push_back(3 + (j * 53) % 290);
    context ctx(*m, params(2, false, "full"), pool);
    batch_generator gen(ctx, 2, -1, 16);
    std::vector<int> tokens_of_0_per_step;
    int n0 = 0;
    batch_progress cb;
    cb.on_token = [&](size_t id, int32_t) { n0 += id == 0 ? 1 : 0; };
    std::map<size_t, generation_result> done;
    cb.on_done = [&](size_t id, const generation_result & res) { done[id] = res; };
    gen.submit(r[0]);
    // r[0]'s prompt (5 tokens) is in after one step; then r[1] joins.
    ASSERT_TRUE(gen.step(cb));
    gen.submit(r[1]);
    int steps_to_prefill = 0;
    while (done.count(1) == 0 && ctx.n_past(1) < int64_t(r[1].prompt.size())) {
        const int before = n0;
        ASSERT_TRUE(gen.step(cb));
        ++steps_to_prefill;
        if (done.count(0) == 0) {
            EXPECT_EQ(n0, before + 1) << "the running sequence decodes at every step";
        }
    }
    EXPECT_EQ(steps_to_prefill, 7) << "100 prompt tokens in chunks of 16";
    while (gen.step(cb)) {
    }
    EXPECT_EQ(done[0].stop, "length");
    EXPECT_EQ(done[1].stop, "length");
    EXPECT_EQ(int64_t(done[1].ids.size()), r[1].n_predict);
    EXPECT_EQ(done[1].prompt_tokens, 100);
    EXPECT_GT(gen.last_totals().max_step_s, 0.0);
}

// Decoding over the tiers reads the same bytes in the same order as decoding in RAM: the logits of
// every step are bit-identical (attention in position order, kv/ordered_gather.h), for every policy.
TEST_F(batch_test, tiered_decode_is_bit_identical_to_all_in_ram) {
    for (const std::string policy : {"full", "hillinfer", "streaming"}) {
        SCOPED_TRACE(policy);
        context ram(*m, params(1, false, policy), pool);
        context tiered(*m, params(1, true, policy), pool);
        std::vector<float> a(static_cast<size_t>(m->hp().n_vocab)), b(a.size());
        ram.prefill(0, prompts[7], false, a.data());
        tiered.prefill(0, prompts[7], false, b.data());
        const int seq = 0;
        for (int step = 0; step < 60; ++step) {
            const int32_t tok = 3 + (step * 13) % 290;
            ram.decode(std::span<const int>(&seq, 1), std::span<const int32_t>(&tok, 1), a.data());
            tiered.decode(std::span<const int>(&seq, 1), std::span<const int32_t>(&tok, 1), b.data());
            ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "step " << step;
        }
        EXPECT_GT(tiered.n_cold_cells(), 0);
    }
}

// Without a cold tier the hot pool holds every token of every sequence (kv/kv_cells.h): prefills in
// segments, steps of batches and sequences filled to the last position of the context evict nothing,
// so no token loses its only copy of the KV.
TEST_F(batch_test, in_ram_every_token_stays_hot_up_to_a_full_context) {
    for (const std::string policy : {"full", "hillinfer"}) {
        SCOPED_TRACE(policy);
        context ctx(*m, params(2, false, policy), pool);
        std::vector<float> logits(size_t(2 * m->hp().n_vocab));
        // Sequence 0 in three prompt segments (a chat's turns), sequence 1 in one.
        for (int turn = 0; turn < 3; ++turn) ctx.prefill(0, std::span(prompts[3]).first(10), false, logits.data());
        ctx.prefill(1, prompts[5], false, logits.data());
        while (ctx.n_past(0) < n_ctx || ctx.n_past(1) < n_ctx) {
            std::vector<int> seqs;
            for (const int s : {0, 1}) {
                if (ctx.n_past(s) < n_ctx) seqs.push_back(s);
            }
            const std::vector<int32_t> tokens(seqs.size(), 7);
            ctx.decode(seqs, tokens, logits.data());
            ASSERT_EQ(ctx.n_cold_cells(), 0) << "at " << ctx.n_past(0) << " and " << ctx.n_past(1) << " tokens";
        }
        EXPECT_EQ(ctx.io_stats().room_evicted, 0u);
        EXPECT_EQ(ctx.io_stats().prefill_evicted, 0u);
        EXPECT_EQ(ctx.decode_stats().evictions, 0u);
    }
}

}  // namespace
}  // namespace hill
