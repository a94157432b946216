// Faults under a running sequence: EIO on a cold read, ENOSPC on a cold-log page write, a corrupted
// page, a short read, a truncation inside a written page, a budget too small for the pinned tokens,
// an unusable kv_dir. Each gives a clear error; a failed decode step changes nothing (the sequence,
// its hot set and hit counts, the cold pool's pages are as they were), other sequences and the process
// keep working, and once the fault is gone the sequence decodes what a twin that never saw the fault
// decodes, bit for bit; short reads are finished transparently.
#include "core/error.h"
#include "engine/session.h"
#include "kv/cold_pool.h"
#include "model/synthetic_model.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <fcntl.h>
#include <fstream>
#include <unistd.h>

namespace hill {
namespace {

class kv_faults : public ::testing::Test {
protected:
    void SetUp() override {
        write_random_model(dir.file("m.gguf"), random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96,
                                                                   .n_layer = 2, .n_head = 4, .n_head_kv = 2,
                                                                   .n_ctx = 512, .seed = 3});
        m = model::load(dir.file("m.gguf"));
        for (int i = 0; i < 300; ++i) prompt.push_back(1 + (i * 41) % 299);
    }
    // hook: the host's reads and writes (context_params::io_faults) and the storage device's reads
    // (storage_params::io_faults: a decode step reads its cold pages through the device).
    context_params params(const io_fault_hook & hook = {}, policy_params pol = {}) {
        // 32 hot tokens per layer (F16 rows of 64 bytes: 64-token pages): most of the prompt goes cold.
        context_params p{.n_ctx = 400,
                         .kv_dir = dir.file("kv" + std::to_string(n_dirs++)),
                         .policy = std::move(pol),
                         .storage = csd::storage_params{.io_faults = hook},
                         .io_faults = hook};
        p.kv_host_budget = context::host_budget_for(*m, p, 32);
        return p;
    }
    // One decode step; the error message, or "" when it succeeded.
    static std::string step(session & s, int32_t tok) {
        try {
            s.eval(std::span<const int32_t>(&tok, 1));
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::bad_input);
            return e.what();
        }
        return "";
    }
    static void expect_same_logits(const session & a, const session & b, const std::string & what) {
        for (int32_t i = 0; i < 300; ++i) ASSERT_EQ(a.logits()[i], b.logits()[i]) << what << " logit " << i;
    }
    // What a failed step must leave as it was: length, every layer's hot slots and hit counts, the
    // cold pool's free pages.
    struct seq_state {
        int64_t n_past = 0;
        std::vector<std::vector<uint32_t>> slots;
        std::vector<std::vector<uint16_t>> hits;
        uint32_t n_free_pages = 0;
    };
    static void expect_unchanged(const seq_state & before, const seq_state & after) {
        EXPECT_EQ(after.n_past, before.n_past);
        EXPECT_EQ(after.n_free_pages, before.n_free_pages) << "cold pages";
        ASSERT_EQ(after.slots.size(), before.slots.size());
        for (size_t il = 0; il < after.slots.size(); ++il) {
            ASSERT_EQ(after.slots[il].size(), before.slots[il].size());
            for (size_t t = 0; t < after.slots[il].size(); ++t) {
                EXPECT_EQ(after.slots[il][t], before.slots[il][t]) << "hot slot of layer " << il << " token " << t;
                EXPECT_EQ(after.hits[il][t], before.hits[il][t]) << "hit count of layer " << il << " token " << t;
            }
        }
    }
    static seq_state state_of(const session & s) {
        seq_state st{.n_past = s.n_past()};
        const kv_cells & c = s.ctx().cells();
        for (int il = 0; il < c.n_layer(); ++il) {
            st.slots.emplace_back(c.hot_slots(0, il).begin(), c.hot_slots(0, il).end());
            st.hits.emplace_back(c.hit_counts(0, il).begin(), c.hit_counts(0, il).end());
        }
        st.n_free_pages = s.ctx().cold() != nullptr ? s.ctx().cold()->n_free() : 0;
        return st;
    }
    static int64_t n_cold(const session & s, int il) { return s.ctx().cells().n_tokens(0) - s.ctx().cells().n_hot(il); }
    test::temp_dir dir;
    std::unique_ptr<model> m;
    std::vector<int32_t> prompt;
    thread_pool pool{2};
    int n_dirs = 0;
};

TEST_F(kv_faults, eio_on_read_fails_the_step_and_leaves_the_sequence_as_it_was) {
    // Under full the step's reads fail; under hillinfer its scoring pass reads the cold keys first.
    for (const char * pol : {"full", "hillinfer"}) {
        SCOPED_TRACE(pol);
        const policy_params pp{.name = pol, .alpha = 0.2};
        std::atomic<bool> fail_reads{false};
        session bad(
            *m,
            params([&](const io_issue & is, int64_t r) { return fail_reads && is.op == io_op::read ? -EIO : r; }, pp),
            pool);
        session good(*m, params({}, pp), pool);
        bad.eval(prompt);
        good.eval(prompt);
        for (int i = 0; i < 3; ++i) {  // the fault comes in the middle of decoding
            const int32_t tok = 1 + (i * 43) % 299;
            ASSERT_EQ(step(bad, tok), "");
            ASSERT_EQ(step(good, tok), "");
        }
        const seq_state before = state_of(bad);
        fail_reads = true;
        const std::string msg = step(bad, 5);
        std::printf("error message: %s\n", msg.c_str());
        EXPECT_NE(msg.find("cold page"), std::string::npos) << msg;
        EXPECT_NE(msg.find("Input/output error"), std::string::npos) << msg;
        EXPECT_EQ(bad.n_past(), 303);
        expect_unchanged(before, state_of(bad));
        EXPECT_EQ(bad.ctx().decode_stats().n_failed, 1u);
        EXPECT_EQ(bad.ctx().decode_stats().n_steps, 3u);
        EXPECT_EQ(step(good, 5), "");  // the other sequence goes on
        fail_reads = false;            // the fault clears: the failed sequence can go on too
        EXPECT_EQ(step(bad, 5), "");
        expect_same_logits(bad, good, "after the fault");
        for (int i = 0; i < 5; ++i) {
            const int32_t tok = 1 + (i * 29) % 299;
            ASSERT_EQ(step(bad, tok), "");
            ASSERT_EQ(step(good, tok), "");
            expect_same_logits(bad, good, "step " + std::to_string(i));
        }
    }
}

// A full disk during decode: the step whose token fills a cold log's open tail writes its pages
// (every page_tokens steps) and fails with the device's reason, naming the page and its file; nothing
// changes. Once there is space again the sequence decodes what a twin without the fault decodes.
TEST_F(kv_faults, enospc_on_a_decode_page_write_fails_the_step_and_the_sequence_goes_on) {
    for (const char * pol : {"full", "hillinfer"}) {
        SCOPED_TRACE(pol);
        const policy_params pp{.name = pol, .alpha = 0.2};
        std::atomic<bool> full{false};
        session s(
            *m, params([&](const io_issue & is, int64_t r) { return full && is.op == io_op::write ? -ENOSPC : r; }, pp),
            pool);
        session twin(*m, params({}, pp), pool);
        const std::span<const int32_t> p250 = std::span<const int32_t>(prompt).subspan(0, 250);
        s.eval(p250);
        twin.eval(p250);
        for (int il = 0; il < 2; ++il) EXPECT_GE(n_cold(s, il) * 4, s.n_past() * 3) << "75% of the KV cold";
        const int64_t pt = s.ctx().layout().page_tokens();
        ASSERT_EQ(pt, s.ctx().layout().cold == cold_records::token ? 32 : 64);  // K and V pages, or token records
        ASSERT_NE(s.ctx().cold(), nullptr);
        ASSERT_EQ(s.ctx().cold()->n_files(), 1u);
        full = true;
        std::string msg;
        int32_t tok = 0;
        seq_state before;
        for (int i = 0; i < 2 * pt && msg.empty(); ++i) {
            tok = 1 + (i * 17) % 299;
            before = state_of(s);
            msg = step(s, tok);
            if (msg.empty()) {
                ASSERT_EQ(step(twin, tok), "");
                expect_same_logits(s, twin, "before the fault, step " + std::to_string(i));
            }
        }
        std::printf("error message: %s\n", msg.c_str());
        // The step that failed is the one whose token completes a group: position k·page_tokens − 1.
        EXPECT_EQ((before.n_past + 1) % pt, 0) << before.n_past;
        EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
        EXPECT_NE(msg.find("cold page"), std::string::npos) << msg;
        EXPECT_NE(msg.find(s.ctx().cold()->file_path(0)), std::string::npos) << msg;
        expect_unchanged(before, state_of(s));
        EXPECT_EQ(s.ctx().decode_stats().n_failed, 1u);

        full = false;
        for (int i = 0; i < 10; ++i) {
            ASSERT_EQ(step(s, tok), "") << "step " << i << " after the fault";
            ASSERT_EQ(step(twin, tok), "");
            expect_same_logits(s, twin, "after the fault, step " + std::to_string(i));
            tok = 1 + (tok * 31) % 299;
        }
        EXPECT_EQ(s.n_past(), twin.n_past());
        EXPECT_EQ(s.ctx().io_stats().cold_write_bytes, twin.ctx().io_stats().cold_write_bytes);
        EXPECT_EQ(s.ctx().cold()->n_free(), twin.ctx().cold()->n_free());
    }
}

TEST_F(kv_faults, enospc_on_prefill_is_a_clear_error_and_changes_nothing) {
    std::atomic<bool> full{false};
    session s(*m, params([&](const io_issue & is, int64_t r) { return full && is.op == io_op::write ? -ENOSPC : r; }), pool);
    s.eval(std::span<const int32_t>(prompt).subspan(0, 100));
    const seq_state before = state_of(s);
    full = true;
    std::string msg;
    try {
        s.eval(std::span<const int32_t>(prompt).subspan(100, 100));  // fills groups: page writes
        ADD_FAILURE() << "no error";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::bad_input);
        msg = e.what();
    }
    EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
    EXPECT_EQ(s.n_past(), 100);
    EXPECT_EQ(state_of(s).n_free_pages, before.n_free_pages);
    full = false;  // space again: the same prompt goes in
    s.eval(std::span<const int32_t>(prompt).subspan(100, 100));
    EXPECT_EQ(s.n_past(), 200);
    EXPECT_EQ(step(s, 3), "");
}

TEST_F(kv_faults, corrupted_page_is_detected) {
    session s(*m, params(), pool);
    s.eval(prompt);
    const cold_pool * cp = s.ctx().cold();
    ASSERT_NE(cp, nullptr);
    const seq_state before = state_of(s);
    // Flip a byte of the first page (layer 0's first K page), behind the pool's back.
    const int fd = ::open(cp->file_path(0).c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, off_t(cp->file_offset(0)) + 100), 1);
    b ^= 0x10;
    ASSERT_EQ(::pwrite(fd, &b, 1, off_t(cp->file_offset(0)) + 100), 1);
    ::close(fd);
    const std::string msg = step(s, 9);
    EXPECT_NE(msg.find("checksum"), std::string::npos) << msg;
    EXPECT_EQ(s.n_past(), 300);
    expect_unchanged(before, state_of(s));
}

TEST_F(kv_faults, short_reads_are_finished) {
    session ref(*m, params(), pool);
    session s(*m, params([](const io_issue & is, int64_t r) {
                  return is.op == io_op::read && r > 4096 ? int64_t(4096) : r;  // every read stops after 4 KiB
              }),
              pool);
    ref.eval(prompt);
    s.eval(prompt);
    EXPECT_EQ(step(ref, 11), "");
    EXPECT_EQ(step(s, 11), "");
    EXPECT_GT(s.ctx().decode_stats().layers[0].n_attended_disk, 0u);  // the step did read pages
    expect_same_logits(s, ref, "short reads");
}

// truncate(n) inside the last written cold page reads that page back into the open tail; decoding on
// refills and rewrites it. The twin prefills only the first n tokens in the same chunks (n_batch
// divides n), so the KV of [0, n) has the same bits in both — each row is computed from the same chunk
// of the same tokens — and decode attends in position order wherever tokens live: the logits are
// equal bit for bit, not within a tolerance (a prefill continued over the tiers would differ by
// rounding; neither session continues one here). Under full (fifo) and hillinfer (hkm, promotions),
// on the plain SSD and the emulator (its own reader of the rewritten pages), after a few decode steps.
TEST_F(kv_faults, truncate_inside_a_written_page_then_decode_equals_a_shorter_prefill) {
    for (const csd::storage_kind storage : {csd::storage_kind::plain, csd::storage_kind::emulator}) {
        for (const char * pol : {"full", "hillinfer"}) {
            SCOPED_TRACE(std::string(name(storage)) + " " + pol);
            policy_params pp{.name = pol, .alpha = 0.2};
            pp.score.query = query_precision::int8;  // what the emulator's kernel scores with
            context_params cp = params({}, pp), cp_twin = params({}, pp);
            cp.n_batch = cp_twin.n_batch = 50;
            cp.storage.kind = cp_twin.storage.kind = storage;
            session s(*m, cp, pool);
            session twin(*m, cp_twin, pool);
            // Groups of 64 tokens (K and V pages), or 32 (token records: hillinfer with the scoring copy).
            const int64_t pt = s.ctx().layout().page_tokens();
            ASSERT_EQ(pt, s.ctx().layout().cold == cold_records::token ? 32 : 64);
            s.eval(prompt);  // whole groups written, the rest of the 300 tokens open
            for (int i = 0; i < 6; ++i) ASSERT_EQ(step(s, 2 + i), "");
            const int64_t n = 250;  // inside the group [192, 256) (or [224, 256))
            ASSERT_EQ(s.ctx().logs()->log(0, 0).n_on_disk(), 306 / pt * pt);
            const uint64_t read0 = s.ctx().io_stats().cold_read_bytes;
            s.truncate(n);
            EXPECT_EQ(s.n_past(), n);
            EXPECT_GT(s.ctx().io_stats().cold_read_bytes, read0);  // the group of n read back, every layer
            for (int il = 0; il < 2; ++il) {
                const cold_log_view log = s.ctx().logs()->log(0, il);
                EXPECT_EQ(log.n_on_disk(), n / pt * pt);
                EXPECT_EQ(log.n_open, n % pt);
            }
            twin.eval(std::span<const int32_t>(prompt).subspan(0, size_t(n)));
            for (int i = 0; i < 20; ++i) {
                const int32_t tok = 1 + (i * 23) % 299;
                ASSERT_EQ(step(s, tok), "") << "step " << i;
                ASSERT_EQ(step(twin, tok), "");
                expect_same_logits(s, twin, "step " + std::to_string(i));
            }
            EXPECT_EQ(s.n_past(), n + 20);
            EXPECT_EQ(s.ctx().logs()->log(0, 0).n_on_disk(), 256);  // the group refilled and written again
            EXPECT_EQ(s.ctx().cold()->n_free(), twin.ctx().cold()->n_free());
        }
    }
}

// The budget must hold the sinks, the window and the new token of every sequence in every layer.
TEST_F(kv_faults, budget_below_sinks_window_and_one_token_is_a_usage_error) {
    const uint64_t per_token = m->hp().kv_bytes_per_token(ggml_type::f16);
    const auto message = [&](int64_t tokens, int n_seq) -> std::string {
        context_params p = params();
        p.kv_host_budget = uint64_t(tokens) * per_token;
        p.n_seq = n_seq;
        try {
            context c(*m, p, pool);
            ADD_FAILURE() << "accepted a budget of " << tokens << " tokens for " << n_seq << " sequences";
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::usage) << e.what();
            return e.what();
        }
        return "";
    };
    // Default policy: 4 sinks, a 16-token window: 21 tokens per sequence.
    std::string msg = message(20, 1);
    std::printf("error message: %s\n", msg.c_str());
    for (const char * part : {"holds 20 tokens per layer", "at least 21 are needed", "4 sinks", "16-token window"}) {
        EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
    }
    msg = message(41, 2);
    for (const char * part : {"holds 41 tokens per layer", "at least 42 are needed for 2 sequences"}) {
        EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
    }
    context_params p = params();
    p.kv_host_budget = 21 * per_token;
    session s(*m, p, pool);  // exactly enough: it runs
    s.eval(std::span<const int32_t>(prompt).subspan(0, 100));
    EXPECT_EQ(step(s, 3), "");
    EXPECT_LE(s.ctx().cells().n_hot(0), 21);
}

TEST_F(kv_faults, unusable_kv_dir_is_a_clear_error) {
    const std::string file = dir.file("a-file");
    { std::ofstream(file) << "x"; }
    context_params p = params();
    p.kv_dir = file + "/kv";  // under a regular file: fails even for root
    try {
        session s(*m, p, pool);
        FAIL();
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace hill
