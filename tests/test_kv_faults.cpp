// Faults under a running sequence: EIO on a cold read, ENOSPC on a cold write, a corrupted page,
// a short read. Each gives a clear error; the failing sequence keeps its state (the step is undone),
// other sequences and the process keep working; short reads are finished transparently.
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
    context_params params(io_fault_hook hook = {}) {
        // 32 hot tokens per layer (F16 rows of 64 bytes: 64-token pages): most of the prompt goes cold.
        return context_params{.n_ctx = 400, .kv_host_budget = m->hp().kv_bytes_per_token(ggml_type::f16) * 32,
                              .kv_dir = dir.file("kv"), .io_faults = std::move(hook)};
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
    test::temp_dir dir;
    std::unique_ptr<model> m;
    std::vector<int32_t> prompt;
    thread_pool pool{2};
};

TEST_F(kv_faults, eio_on_read_fails_the_step_and_leaves_the_sequence_as_it_was) {
    std::atomic<bool> fail_reads{false};
    session bad(*m, params([&](const io_issue & is, int64_t r) { return fail_reads && is.op == io_op::read ? -EIO : r; }), pool);
    session good(*m, params(), pool);
    bad.eval(prompt);
    good.eval(prompt);
    fail_reads = true;
    const std::string msg = step(bad, 5);
    std::printf("error message: %s\n", msg.c_str());
    EXPECT_NE(msg.find("cold pool"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Input/output error"), std::string::npos) << msg;
    EXPECT_EQ(bad.n_past(), 300);
    for (int il = 0; il < 2; ++il) EXPECT_EQ(bad.kv().n_tokens(il), 300);
    EXPECT_EQ(step(good, 5), "");  // the other sequence goes on
    fail_reads = false;            // the fault clears: the failed sequence can go on too
    EXPECT_EQ(step(bad, 5), "");
    for (int32_t i = 0; i < 300; ++i) ASSERT_FLOAT_EQ(bad.logits()[i], good.logits()[i]);
}

TEST_F(kv_faults, enospc_on_write_is_a_clear_error) {
    std::atomic<bool> full{false};
    session s(*m, params([&](const io_issue & is, int64_t r) { return full && is.op == io_op::write ? -ENOSPC : r; }), pool);
    s.eval(std::span<const int32_t>(prompt).subspan(0, 100));
    full = true;
    std::string msg;
    for (int i = 0; i < 200 && msg.empty(); ++i) msg = step(s, 7);  // until a page of cold rows is written
    EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
    const int64_t n = s.n_past();
    for (int il = 0; il < 2; ++il) EXPECT_EQ(s.kv().n_tokens(il), n);
}

TEST_F(kv_faults, corrupted_page_is_detected) {
    session s(*m, params(), pool);
    s.eval(prompt);
    const cold_pool * cp = s.kv().cold();
    ASSERT_NE(cp, nullptr);
    // Flip a byte of the first page, behind the pool's back.
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
    for (int32_t i = 0; i < 300; ++i) ASSERT_FLOAT_EQ(s.logits()[i], ref.logits()[i]);
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
