// The KV cache's parts apart from a model: the KV cells (metadata: hot slots, free lists, capacity,
// hit table), the cold logs over a real cold pool (prepare / apply / discard, page-write faults,
// truncation inside a written group, snapshots), the page table's classification and the ordered
// gather (position order, windows, staging rows).
#include "core/aligned_buffer.h"
#include "core/error.h"
#include "kv/cold_gather.h"
#include "kv/cold_logs.h"
#include "kv/cold_prefetch.h"
#include "kv/cold_reader.h"
#include "kv/cold_writer.h"
#include "kv/hot_arena.h"
#include "kv/kv_cells.h"
#include "kv/ordered_gather.h"
#include "kv/page_table.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <set>

namespace hill {
namespace {

TEST(kv_cells, hot_slots_free_lists_and_capacity) {
    kv_cells c(kv_cells_params{2, 2, 16, 5});
    EXPECT_EQ(c.hot_capacity(), 5);
    c.grow(0, 4);
    c.grow(1, 3);
    EXPECT_EQ(c.n_tokens(0), 4);
    EXPECT_FALSE(c.is_hot(0, 0, 2));
    // Reservations name the slots take_hot hands out, in order, without changing anything.
    const uint32_t r0 = c.peek_free(1, 0), r1 = c.peek_free(1, 1);
    EXPECT_EQ(c.n_hot_free(1), 5);
    EXPECT_EQ(c.take_hot(0, 1, 3), r0);
    EXPECT_EQ(c.take_hot(1, 1, 0), r1);
    EXPECT_EQ(c.n_hot(1), 2);
    EXPECT_EQ(c.n_hot(0), 0);  // layers are apart
    EXPECT_EQ(c.hot_slot(0, 1, 3), r0);
    // A lower capacity limits what can be taken; slots in use stay.
    c.set_hot_capacity(2);
    EXPECT_EQ(c.n_hot_free(1), 0);
    EXPECT_EQ(c.n_hot_free(0), 2);
    c.drop_hot(1, 1, 0);
    EXPECT_EQ(c.n_hot_free(1), 1);
    EXPECT_EQ(c.peek_free(1, 0), r1) << "the slot freed last is handed out first";
    c.set_hot_capacity(5);
    // Truncation frees the slots of the forgotten tokens.
    c.take_hot(0, 0, 0);
    c.take_hot(0, 0, 3);
    c.truncate(0, 2);
    EXPECT_EQ(c.n_tokens(0), 2);
    EXPECT_EQ(c.n_hot(0), 1);
    EXPECT_EQ(c.n_hot(1), 0);
    c.grow(0, 2);
    EXPECT_FALSE(c.is_hot(0, 0, 3)) << "a regrown token starts without a hot copy";
    EXPECT_EQ(c.last_move(0, 0, 3), kv_cells::never_moved);
}

TEST(kv_cells, hit_table_is_a_moving_average_of_selections) {
    EXPECT_EQ(kv_cells::hit_next(0, true), kv_cells::hit_increment);
    EXPECT_EQ(kv_cells::hit_next(8, false), 7);
    uint16_t h = 0;
    for (int i = 0; i < 200; ++i) h = kv_cells::hit_next(h, true);
    EXPECT_GE(h, 8 * kv_cells::hit_increment - 8);  // converges to 8 · increment, saturating below 65536
    kv_cells c(kv_cells_params{1, 1, 8, 8});
    c.grow(0, 6);
    c.set_hits(0, 0, 1, 800);
    const int32_t sel[] = {2, 4};
    c.update_hits(0, 0, sel);
    EXPECT_EQ(c.hits(0, 0, 1), 700);
    EXPECT_EQ(c.hits(0, 0, 2), kv_cells::hit_increment);
    EXPECT_EQ(c.hits(0, 0, 3), 0);
    EXPECT_EQ(c.hits(0, 0, 4), kv_cells::hit_increment);
}

// A cold pool of f16 rows of 64 values (128 bytes: 32-token K and V pages, or 16-token pages of
// token records) under a temp dir, with its writer, logs and reader; `fail_writes` turns every write
// into ENOSPC.
struct cold_fixture {
    test::temp_dir dir;
    kv_layout layout;
    std::atomic<bool> fail_writes{false};
    std::unique_ptr<cold_pool> pool;
    std::unique_ptr<cold_writer> writer;
    std::unique_ptr<cold_logs> logs;
    std::unique_ptr<cold_reader> reader;
    int64_t n_ctx = 200;

    // window: [n_layer] sliding windows (kv/cold_logs.h); the pool holds what the logs need at most.
    explicit cold_fixture(cold_records records = cold_records::split, int64_t open_groups = 1,
                          std::vector<int32_t> window = {})
        : layout{2, 64, ggml_type::f16, records} {
        window.resize(size_t(layout.n_layer), 0);
        int64_t groups = 0;
        for (const int32_t w : window) groups += cold_logs::groups_held(layout, n_ctx, w);
        cold_pool_params cp;
        cp.kv_dir = dir.file("kv");
        cp.page_bytes = layout.page_bytes();
        cp.n_pages = uint32_t(2 * layout.pages_per_group() * groups);
        pool = std::make_unique<cold_pool>(cp);
        io_queue_params io;
        io.fault_hook = [this](const io_issue & is, int64_t r) { return fail_writes && is.op == io_op::write ? -ENOSPC : r; };
        writer = std::make_unique<cold_writer>(*pool, io);
        logs = std::make_unique<cold_logs>(*writer, layout, 2, n_ctx, open_groups, window);
        reader = std::make_unique<cold_reader>(*pool);
    }
    // Row bytes of token t of (seq, il), K (v = 0) or V (v = 1): a pattern that names them.
    std::vector<uint8_t> rows(int seq, int il, int64_t t0, int64_t n, int v) const {
        std::vector<uint8_t> out(size_t(n) * layout.row_bytes());
        for (int64_t t = 0; t < n; ++t) {
            for (size_t i = 0; i < layout.row_bytes(); ++i) {
                out[size_t(t) * layout.row_bytes() + i] = uint8_t((t0 + t) * 7 + i * 3 + seq * 31 + il * 17 + v * 101);
            }
        }
        return out;
    }
    void append(int seq, int il, int64_t n) {
        const int64_t t0 = logs->log(seq, il).n_tokens();
        const auto k = rows(seq, il, t0, n, 0), v = rows(seq, il, t0, n, 1);
        cold_append a;
        logs->prepare(seq, il, n, k.data(), v.data(), a);
        logs->apply(a);
    }
    // Every row of (seq, il) from position t0 on read back (open tail from RAM, the rest through a
    // cold_gather) equals the pattern.
    void check(int seq, int il, int64_t t0 = 0) const {
        const cold_log_view log = logs->log(seq, il);
        const size_t rb = layout.row_bytes();
        const auto k = rows(seq, il, 0, log.n_tokens(), 0), v = rows(seq, il, 0, log.n_tokens(), 1);
        std::vector<int32_t> disk(size_t(std::max<int64_t>(0, log.n_on_disk() - t0)));
        std::iota(disk.begin(), disk.end(), int32_t(t0));
        for (const bool stream : {false, true}) {  // whole batches, and pages as they arrive
            cold_gather g(*reader, layout, stream);
            g.begin(log.groups, disk, true);
            kv_batch b;
            int64_t seen = 0;
            while (g.next(b)) {
                for (int64_t j = 0; j < b.view.n_kv; ++j, ++seen) {
                    const int32_t t = b.positions[j];
                    ASSERT_EQ(t, disk[size_t(seen)]) << "in position order";
                    ASSERT_EQ(std::memcmp(static_cast<const uint8_t *>(b.view.k) + size_t(b.rows[j]) * rb, k.data() + size_t(t) * rb, rb), 0) << t;
                    ASSERT_EQ(std::memcmp(static_cast<const uint8_t *>(b.view.v) + size_t(b.rows[j]) * rb, v.data() + size_t(t) * rb, rb), 0) << t;
                }
            }
            EXPECT_EQ(seen, int64_t(disk.size()));
        }
        for (int64_t r = std::max<int64_t>(0, t0 - log.n_on_disk()); r < log.n_open; ++r) {
            const int64_t t = log.n_on_disk() + r;
            ASSERT_EQ(std::memcmp(log.open_k + size_t(r) * rb, k.data() + size_t(t) * rb, rb), 0) << t;
            ASSERT_EQ(std::memcmp(log.open_v + size_t(r) * rb, v.data() + size_t(t) * rb, rb), 0) << t;
        }
    }
};

// Every cold_logs test runs with both record layouts (kv_layout.h).
class cold_logs_test : public testing::TestWithParam<cold_records> {};
INSTANTIATE_TEST_SUITE_P(records, cold_logs_test, testing::Values(cold_records::split, cold_records::token),
                         [](const testing::TestParamInfo<cold_records> & i) {
                             return std::string(i.param == cold_records::split ? "split" : "token");
                         });

TEST_P(cold_logs_test, appends_of_any_size_round_trip) {
    cold_fixture f(GetParam());
    EXPECT_EQ(f.layout.page_tokens(), GetParam() == cold_records::split ? 32 : 16);
    EXPECT_EQ(f.layout.page_bytes(), 4096u);
    for (const int64_t n : {1, 5, 26, 1, 64, 31, 40}) {  // inside the open tail, filling it, spanning groups
        f.append(0, 0, n);
        f.append(1, 1, n + 1);
        f.check(0, 0);
        f.check(1, 1);
    }
    EXPECT_EQ(f.logs->log(0, 0).n_tokens(), 168);
    EXPECT_EQ(f.logs->log(0, 0).n_on_disk(), 160);
    EXPECT_EQ(f.logs->log(0, 1).n_tokens(), 0) << "logs of other layers are apart";
    // Log (1, 1) holds 175 tokens: 160 on disk in either layout; every page byte is a row byte.
    EXPECT_EQ(f.writer->write_bytes(), uint64_t(160 + 160) * f.layout.token_layer_bytes());
    EXPECT_EQ(f.pool->n_pages() - f.pool->n_free(), uint32_t(2 * 160 / f.layout.page_tokens() * f.layout.pages_per_group()));
}

TEST_P(cold_logs_test, an_open_tail_of_several_groups_is_written_when_full) {
    cold_fixture f(GetParam(), 3);
    const int64_t pt = f.layout.page_tokens(), tail = 3 * pt;
    for (int64_t n = 1; n <= 2 * tail + 5; ++n) {  // one token per step, as decoding appends
        f.append(0, 1, 1);
        const cold_log_view log = f.logs->log(0, 1);
        ASSERT_EQ(log.n_tokens(), n);
        ASSERT_EQ(log.n_on_disk(), n / tail * tail) << "written only when the tail fills, all of it at once";
        ASSERT_EQ(f.writer->write_bytes(), uint64_t(n / tail * tail) * f.layout.token_layer_bytes());
    }
    f.check(0, 1);
    f.append(0, 1, 2 * tail + 3);  // a prompt: fills the tail, whole groups written, the last partial group staged
    EXPECT_EQ(f.logs->log(0, 1).n_open, (4 * tail + 8) % pt);
    f.check(0, 1);
    for (const int64_t n : {4 * tail + 1, 2 * tail + 1, tail - 1}) {  // in the tail, in a written group
        f.logs->truncate(0, n, *f.reader);
        ASSERT_EQ(f.logs->log(0, 1).n_tokens(), n);
        f.check(0, 1);
        f.append(0, 1, 5);
        f.check(0, 1);
        f.logs->truncate(0, n, *f.reader);
    }
}

TEST_P(cold_logs_test, prefetch_reads_ahead_and_a_failed_read_only_loses_the_hint) {
    cold_fixture f(GetParam());
    f.append(0, 0, 150);
    f.append(1, 1, 150);
    const cold_log_view l0 = f.logs->log(0, 0), l1 = f.logs->log(1, 1);
    const size_t rb = f.layout.row_bytes();
    std::atomic<bool> fail_reads{false};
    std::atomic<uint64_t> bad_offset{~uint64_t(0)};  // a read of the byte at this file offset fails
    io_queue_params io;
    io.fault_hook = [&](const io_issue & is, int64_t r) {
        const bool bad = is.offset <= bad_offset && bad_offset < is.offset + is.size_bytes;
        return (fail_reads || bad) && is.op == io_op::read ? -EIO : r;
    };
    // Two slots of 40 rows: a longer job reads its first 40 positions.
    cold_prefetch p(*f.pool, f.layout, 2, 40 * f.layout.token_layer_bytes(), io);
    std::vector<int32_t> want0, want1 = {0, 5, 31, 32, 100};
    for (int32_t t = 1; t < 128; t += 2) want0.push_back(t);
    EXPECT_EQ(p.start({7}, l0.groups, want0), 40);
    EXPECT_EQ(p.start({7}, l0.groups, want1), 0) << "one job per key";
    EXPECT_EQ(p.start({9}, l1.groups, want1), 5);
    EXPECT_EQ(p.start({11}, l1.groups, want1), 0) << "every slot taken";
    EXPECT_EQ(p.wait({12}), nullptr) << "no such job";
    // Rows [0, n) of r equal the pattern at their positions.
    const auto expect_first_rows = [&](const prefetched * r, int seq, int il, const std::vector<int32_t> & want, size_t n) {
        ASSERT_NE(r, nullptr);
        ASSERT_EQ(r->positions, want);
        const auto k = f.rows(seq, il, 0, 150, 0), v = f.rows(seq, il, 0, 150, 1);
        for (size_t j = 0; j < n; ++j) {
            ASSERT_EQ(std::memcmp(static_cast<const uint8_t *>(r->view.k) + j * rb, k.data() + size_t(want[j]) * rb, rb), 0);
            ASSERT_EQ(std::memcmp(static_cast<const uint8_t *>(r->view.v) + j * rb, v.data() + size_t(want[j]) * rb, rb), 0);
        }
    };
    const auto expect_rows = [&](const prefetched * r, int seq, int il, const std::vector<int32_t> & want) {
        expect_first_rows(r, seq, il, want, want.size());
        EXPECT_GT(r->bytes_read, 0u);
    };
    expect_rows(p.wait({9}), 1, 1, want1);
    expect_rows(p.wait({7}), 0, 0, std::vector<int32_t>(want0.begin(), want0.begin() + 40));
    p.release({7});
    EXPECT_EQ(p.wait({7}), nullptr) << "released";
    fail_reads = true;
    EXPECT_EQ(p.start({13}, l0.groups, want1), 5);
    EXPECT_EQ(p.wait({13}), nullptr) << "a failed read: no rows, the read pass reads them itself";
    p.drop_all();
    EXPECT_EQ(p.wait({9}), nullptr);
    fail_reads = false;
    EXPECT_EQ(p.start({9}, l0.groups, want1), 5) << "slots are free again";
    expect_rows(p.wait({9}), 0, 0, want1);
    // end_step forgets the step's jobs (counting the bytes nobody took), and keeps a job for the next
    // step once.
    EXPECT_EQ(p.start({21}, l1.groups, want1, true), 5);
    const uint64_t bytes9 = p.wait({9})->bytes_read;
    EXPECT_EQ(p.end_step(), bytes9);
    EXPECT_EQ(p.wait({9}), nullptr);
    expect_rows(p.wait({21}), 1, 1, want1);
    const uint64_t bytes21 = p.wait({21})->bytes_read;
    EXPECT_EQ(p.end_step(), bytes21) << "kept once: now a job like the others";
    EXPECT_EQ(p.wait({21}), nullptr);
    EXPECT_EQ(p.start({21}, l1.groups, want1, true), 5);
    EXPECT_EQ(p.start({7}, l0.groups, want1), 5);
    p.drop_all();
    EXPECT_EQ(p.wait({21}), nullptr) << "drop_all forgets a job for the next step too";

    // Rows as they arrive (wait_rows): at least the first n, all of them in the end; release returns
    // the bytes the job read.
    EXPECT_EQ(p.start({31}, l0.groups, want1), 5);
    int64_t ready = -1;
    ASSERT_NE(p.wait_rows({31}, 1, ready), nullptr);
    EXPECT_GE(ready, 1);
    const prefetched * r = p.wait_rows({31}, 5, ready);
    EXPECT_EQ(ready, 5);
    expect_first_rows(r, 0, 0, want1, 5);
    std::set<int32_t> groups31;
    for (const int32_t t : want1) groups31.insert(int32_t(t / f.layout.page_tokens()));
    EXPECT_EQ(p.release({31}), groups31.size() * f.layout.pages_per_group() * f.layout.page_bytes());
    EXPECT_EQ(p.release({31}), 0u) << "no job";
    // A read failing in the middle of a job: the rows before it stay usable, a wait for more fails.
    const int32_t bad_t = want0[20];
    bad_offset = f.pool->file_offset(l0.groups[size_t(bad_t / f.layout.page_tokens())].first);
    EXPECT_EQ(p.start({33}, l0.groups, want0), 40);
    EXPECT_EQ(p.wait_rows({33}, 40, ready), nullptr);
    EXPECT_LE(ready, 20) << "no row at or past the failed read";
    if (ready > 0) {
        int64_t again = 0;
        r = p.wait_rows({33}, ready, again);
        EXPECT_EQ(again, ready);
        expect_first_rows(r, 0, 0, std::vector<int32_t>(want0.begin(), want0.begin() + 40), size_t(ready));
    }
    p.release({33});
    bad_offset = ~uint64_t(0);
}

TEST_P(cold_logs_test, a_failed_write_changes_nothing_and_the_log_goes_on_once_space_returns) {
    cold_fixture f(GetParam());
    f.append(0, 0, 20);
    const uint32_t free_before = f.pool->n_free();
    f.fail_writes = true;
    const auto k = f.rows(0, 0, 20, 50, 0), v = f.rows(0, 0, 20, 50, 1);
    cold_append a;
    try {
        f.logs->prepare(0, 0, 50, k.data(), v.data(), a);
        FAIL() << "no error";
    } catch (const error & e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
        EXPECT_NE(msg.find("cold page"), std::string::npos) << msg;
        EXPECT_NE(msg.find(f.pool->kv_dir()), std::string::npos) << msg;
    }
    EXPECT_EQ(f.pool->n_free(), free_before) << "the fresh pages went back";
    EXPECT_EQ(f.logs->log(0, 0).n_tokens(), 20);
    f.check(0, 0);
    f.fail_writes = false;
    f.append(0, 0, 50);
    f.check(0, 0);
    EXPECT_EQ(f.logs->log(0, 0).n_tokens(), 70);
}

TEST_P(cold_logs_test, discard_frees_what_prepare_wrote) {
    cold_fixture f(GetParam());
    const uint32_t free_before = f.pool->n_free();
    const auto k = f.rows(0, 0, 0, 70, 0), v = f.rows(0, 0, 0, 70, 1);
    cold_append a;
    f.logs->prepare(0, 0, 70, k.data(), v.data(), a);
    EXPECT_EQ(f.logs->log(0, 0).n_tokens(), 0) << "nothing is visible before apply";
    EXPECT_EQ(f.pool->n_free(), free_before - uint32_t(70 / f.layout.page_tokens() * f.layout.pages_per_group()));
    f.logs->discard(a);
    EXPECT_EQ(f.pool->n_free(), free_before);
    f.append(0, 0, 70);
    f.check(0, 0);
}

TEST_P(cold_logs_test, truncate_inside_a_written_group_then_regrow) {
    cold_fixture f(GetParam());
    f.append(0, 0, 100);
    f.append(0, 1, 100);
    // Inside the open tail, inside a written group, at a boundary (32- and 16-token groups alike).
    for (const int64_t n : {99, 70, 64, 40, 0}) {
        f.logs->truncate(0, n, *f.reader);
        EXPECT_EQ(f.logs->log(0, 0).n_tokens(), n);
        f.check(0, 0);
        f.check(0, 1);
        f.append(0, 0, 100 - n);  // the same positions again: the same pattern
        f.append(0, 1, 100 - n);
        f.check(0, 0);
        f.check(0, 1);
    }
    // Pages of forgotten groups went back: a full regrow fits the pool again and again.
    EXPECT_EQ(f.pool->n_free(), f.pool->n_pages() - uint32_t(2 * (100 / f.layout.page_tokens()) * f.layout.pages_per_group()));
}

TEST_P(cold_logs_test, a_failed_read_back_leaves_the_log_as_it_was) {
    cold_fixture f(GetParam());
    f.append(0, 0, 100);
    f.append(0, 1, 100);
    std::atomic<bool> fail_reads{true};
    io_queue_params io;
    io.fault_hook = [&](const io_issue & is, int64_t r) { return fail_reads && is.op == io_op::read ? -EIO : r; };
    cold_reader bad(*f.pool, io);
    EXPECT_THROW(f.logs->truncate(0, 50, bad), error);
    EXPECT_EQ(f.logs->log(0, 0).n_tokens(), 100);
    f.check(0, 0);
    f.check(0, 1);
}

TEST_P(cold_logs_test, restore_goes_back_to_the_snapshot) {
    cold_fixture f(GetParam());
    f.append(0, 0, 45);
    f.append(0, 1, 45);
    cold_logs::snapshot s;
    f.logs->take_snapshot(0, s);
    const uint32_t free_before = f.pool->n_free();
    const auto k = f.rows(9, 0, 45, 60, 0);  // other bytes than the pattern
    for (int il = 0; il < 2; ++il) {
        cold_append a;
        f.logs->prepare(0, il, 60, k.data(), k.data(), a);
        f.logs->apply(a);
    }
    f.logs->restore(s);
    EXPECT_EQ(f.pool->n_free(), free_before);
    EXPECT_EQ(f.logs->log(0, 0).n_tokens(), 45);
    f.check(0, 0);
    f.check(0, 1);
    f.append(0, 0, 60);
    f.check(0, 0);
}

// A sliding layer's log (window 20, layer 0) holds pages only for the groups that reach into the
// window: a long append does not write the groups it leaves behind, and each later append frees the
// groups the window passes; the other layer keeps everything. Truncation to 0 frees it all.
TEST_P(cold_logs_test, a_sliding_layer_keeps_only_the_groups_of_its_window) {
    constexpr int32_t w = 20;
    cold_fixture f(GetParam(), 1, {w, 0});
    const int64_t pt = f.layout.page_tokens(), ppg = f.layout.pages_per_group();
    const uint32_t free0 = f.pool->n_free();
    const auto expect_window_only = [&](int64_t n) {
        const cold_log_view log = f.logs->log(0, 0);
        ASSERT_EQ(log.n_tokens(), n);
        int64_t with_pages = 0;
        for (size_t g = 0; g < log.groups.size(); ++g) {
            const bool kept = int64_t(g + 1) * pt > n - w;
            EXPECT_EQ(log.groups[g].first != cold_pool::no_page, kept) << "group " << g << " of " << n << " tokens";
            with_pages += kept ? 1 : 0;
        }
        EXPECT_LE(with_pages, (w + pt - 1) / pt + 1);
        EXPECT_EQ(int64_t(free0 - f.pool->n_free()), ppg * with_pages + ppg * int64_t(f.logs->log(0, 1).groups.size()));
        f.check(0, 0, std::max<int64_t>(0, n - w));
    };
    f.append(0, 0, 150);
    expect_window_only(150);
    f.append(0, 1, 150);
    f.check(0, 1);
    // One token at a time, the window's start crossing group boundaries (7 at a time under TSan,
    // test::tsan_build: the same threads, a seventh of the reads). Under ASan (test::asan_build) one
    // token at a time only from a token before to a token after each group boundary that the window's
    // start or the log's end crosses, else up to 7 at a time: every crossing one-token append as
    // before, checked, in about a third of the reads.
    const auto near_boundary = [&](int64_t n) { return (n - w + 1) % pt <= 2 || (n + 1) % pt <= 2; };
    const auto next_step = [&](int64_t n) -> int64_t {
        if (!test::asan_build) return test::tsan_build ? 7 : 1;
        int64_t step = 1;
        while (step < 7 && n + step < 190 && !near_boundary(n + step)) ++step;
        return step;
    };
    for (int64_t n = 150, step = next_step(n); n + step <= 190; step = next_step(n)) {
        f.append(0, 0, step);
        n += step;
        expect_window_only(n);
    }
    f.logs->truncate(0, 0, *f.reader);
    EXPECT_EQ(f.pool->n_free(), free0);
}

// The before-free hook (cold_logs::set_before_free) runs before each group's pages leave a log — a
// truncation, a restore, a sliding window's drop — and never otherwise, so that the owner can stop
// reads of those pages in flight first.
TEST_P(cold_logs_test, the_before_free_hook_runs_before_pages_leave_a_log) {
    cold_fixture f(GetParam(), 1, {20, 0});
    const int64_t pt = f.layout.page_tokens();
    std::vector<uint32_t> free_at_call;  // the pool's free pages at each call
    f.logs->set_before_free([&] { free_at_call.push_back(f.pool->n_free()); });
    const auto calls_during = [&](const std::function<void()> & op, const char * what) {
        free_at_call.clear();
        const uint32_t free0 = f.pool->n_free();
        op();
        if (!free_at_call.empty()) {
            EXPECT_EQ(free_at_call.front(), free0) << what << ": before the first page left";
        }
        return free_at_call.size();
    };
    EXPECT_EQ(calls_during([&] { f.append(0, 1, 3 * pt + 1); }, "append"), 0u);
    EXPECT_EQ(calls_during([&] { f.logs->truncate(0, 3 * pt + 1, *f.reader); }, "truncate past the end"), 0u);
    EXPECT_EQ(calls_during([&] { f.logs->truncate(0, 3 * pt, *f.reader); }, "truncate of the open tail"), 0u);
    EXPECT_EQ(calls_during([&] { f.logs->truncate(0, 2 * pt + 1, *f.reader); }, "truncate inside a group"), 1u);
    cold_logs::snapshot s;
    f.logs->take_snapshot(0, s);
    EXPECT_EQ(calls_during([&] { f.logs->restore(s); }, "restore, nothing written since"), 0u);
    f.append(0, 1, 2 * pt);
    EXPECT_EQ(calls_during([&] { f.logs->restore(s); }, "restore"), 2u);
    f.check(0, 1);
    // The sliding layer: nothing while the window holds every group, then one call per group it drops
    // (an append writes its new group first: the pool's count is not the test there).
    const auto dropped = [&] {
        const cold_log_view l = f.logs->log(0, 0);
        return size_t(std::count_if(l.groups.begin(), l.groups.end(), [](const auto & g) { return g.first == cold_pool::no_page; }));
    };
    free_at_call.clear();
    f.append(0, 0, 19);
    EXPECT_TRUE(free_at_call.empty()) << "an append within the window";
    size_t slides = 0;
    for (int i = 0; i < 4 * int(pt) + 4; ++i) {
        const size_t d0 = dropped();
        free_at_call.clear();
        f.append(0, 0, 1);
        EXPECT_EQ(free_at_call.size(), dropped() - d0) << "after " << 20 + i << " tokens";
        slides += free_at_call.size();
    }
    EXPECT_GT(slides, 0u);
}

TEST(kv_cells, a_sliding_layer_drops_the_tokens_its_window_leaves) {
    // Layer 0 slides with a window of 4 (5 slots: the window and a new token), layer 1 keeps all.
    kv_cells c(kv_cells_params{2, 1, 32, 8, {4, 0}, {5, 8}});
    EXPECT_EQ(c.hot_slots(0), 5);
    EXPECT_EQ(c.hot_slots(1), 8);
    c.grow(0, 5);
    for (int64_t t = 0; t < 5; ++t) {
        c.take_hot(0, 0, t);
        c.take_hot(0, 1, t);
    }
    EXPECT_EQ(c.n_hot_free(0), 0);
    EXPECT_EQ(c.kept_from(0, 0), 1);
    EXPECT_EQ(c.kept_from(0, 1), 0);
    EXPECT_TRUE(c.can_truncate(0, 3)) << "nothing dropped yet";
    c.drop_outside_windows(0);
    EXPECT_EQ(c.n_dropped(0, 0), 1);
    EXPECT_EQ(c.n_dropped(0, 1), 0);
    EXPECT_FALSE(c.is_hot(0, 0, 0));
    EXPECT_EQ(c.n_hot(0), 4);
    EXPECT_EQ(c.n_hot(1), 5);
    c.grow(0, 3);  // 8 tokens: positions [4, 8) kept
    c.drop_outside_windows(0);
    EXPECT_EQ(c.n_dropped(0, 0), 4);
    EXPECT_EQ(c.n_hot(0), 1);  // position 4; 5..7 have no slot yet
    for (int64_t t = 5; t < 8; ++t) c.take_hot(0, 0, t);
    // The page table's "every token" starts at the first kept one.
    kv_page_table t;
    t.add(c, nullptr, 0, 0, {}, true);
    EXPECT_EQ(std::vector<int32_t>(t.hot_pos.begin(), t.hot_pos.end()), (std::vector<int32_t>{4, 5, 6, 7}));
    // Cut back only to 0 or the length once a token is dropped.
    EXPECT_FALSE(c.can_truncate(0, 6));
    EXPECT_TRUE(c.can_truncate(0, 8));
    EXPECT_TRUE(c.can_truncate(0, 0));
    c.truncate(0, 0);
    EXPECT_EQ(c.n_dropped(0, 0), 0);
    EXPECT_EQ(c.n_hot(0), 0);
    EXPECT_EQ(c.n_hot(1), 0);
}

TEST(page_table, splits_tokens_into_hot_open_and_disk) {
    cold_fixture f;
    kv_cells c(kv_cells_params{2, 2, int32_t(f.n_ctx), 8});
    c.grow(1, 70);
    f.append(1, 0, 70);  // positions [0, 64) on disk, [64, 70) in the open tail
    for (const int32_t t : {3, 40, 66, 69}) c.take_hot(1, 0, t);
    const cold_log_view log = f.logs->log(1, 0);
    kv_page_table t;
    t.add(c, &log, 1, 0, {}, true);
    const int32_t some[] = {2, 3, 64, 65, 66};
    t.add(c, &log, 1, 0, some, false);
    t.add_hot(70, 7);
    ASSERT_EQ(t.n_batch(), 2);
    EXPECT_EQ(std::vector<int32_t>(t.hot_pos_of(0).begin(), t.hot_pos_of(0).end()), (std::vector<int32_t>{3, 40, 66, 69}));
    EXPECT_EQ(std::vector<int32_t>(t.open_pos_of(0).begin(), t.open_pos_of(0).end()), (std::vector<int32_t>{64, 65, 67, 68}));
    EXPECT_EQ(t.open_row_of(0)[2], 3);  // position 67 is row 3 of the open tail
    EXPECT_EQ(t.disk_pos_of(0).size(), 62u);
    EXPECT_EQ(std::vector<int32_t>(t.hot_pos_of(1).begin(), t.hot_pos_of(1).end()), (std::vector<int32_t>{3, 66, 70}));
    EXPECT_EQ(t.hot_slot_of(1)[2], 7);
    EXPECT_EQ(std::vector<int32_t>(t.open_pos_of(1).begin(), t.open_pos_of(1).end()), (std::vector<int32_t>{64, 65}));
    EXPECT_EQ(std::vector<int32_t>(t.disk_pos_of(1).begin(), t.disk_pos_of(1).end()), (std::vector<int32_t>{2}));
}

TEST(ordered_gather, hands_out_every_token_in_position_order_from_one_view) {
    const int64_t n = 9000;  // three windows
    test::temp_dir dir;
    const kv_layout layout{1, 64, ggml_type::f16};
    const int64_t pt = layout.page_tokens();
    cold_pool_params cp;
    cp.kv_dir = dir.file("kv");
    cp.page_bytes = layout.page_bytes();
    cp.n_pages = uint32_t(2 * ((n + pt - 1) / pt));
    cold_pool pool(cp);
    cold_writer writer(pool);
    cold_logs logs(writer, layout, 1, n);
    cold_reader reader(pool);
    std::mt19937 rng(5);
    const size_t rb = layout.row_bytes();
    std::vector<uint8_t> k(size_t(n) * rb), v(size_t(n) * rb);
    for (auto & x : k) x = uint8_t(rng());
    for (auto & x : v) x = uint8_t(rng());
    cold_append a;
    logs.prepare(0, 0, n, k.data(), v.data(), a);
    logs.apply(a);
    kv_cells c(kv_cells_params{1, 1, int32_t(n), 3000});
    c.grow(0, n);
    hot_arena arena(layout, std::vector<int64_t>{3000}, ordered_gather::window_tokens);
    for (int64_t t = 0; t < n; t += 3) {  // a third hot
        const uint32_t s = c.take_hot(0, 0, t);
        std::memcpy(arena.k(0, s), k.data() + size_t(t) * rb, rb);
        std::memcpy(arena.v(0, s), v.data() + size_t(t) * rb, rb);
    }
    std::vector<int32_t> sel;
    for (int64_t t = 0; t < n; ++t) {
        if (rng() % 4 != 0) sel.push_back(int32_t(t));
    }
    const cold_log_view log = logs.log(0, 0);
    kv_page_table table;
    table.add(c, &log, 0, 0, sel, false);
    cold_gather disk(reader, layout);
    disk.begin(log.groups, table.disk_pos, true);
    ordered_gather g(arena);
    g.begin(0, table, 0, kv_view{layout.type, log.open_k, log.open_v, log.n_open, layout.n_embd_kv},
            [&](kv_batch & out) { return disk.next(out); });
    kv_batch w;
    size_t i = 0;
    int n_windows = 0;
    while (g.next(w)) {
        ++n_windows;
        EXPECT_LE(w.view.n_kv, ordered_gather::window_tokens);
        for (int64_t j = 0; j < w.view.n_kv; ++j, ++i) {
            ASSERT_EQ(w.positions[j], sel[i]);
            const auto * kr = static_cast<const uint8_t *>(w.view.k) + size_t(w.rows[j]) * rb;
            const auto * vr = static_cast<const uint8_t *>(w.view.v) + size_t(w.rows[j]) * rb;
            ASSERT_EQ(std::memcmp(kr, k.data() + size_t(sel[i]) * rb, rb), 0) << sel[i];
            ASSERT_EQ(std::memcmp(vr, v.data() + size_t(sel[i]) * rb, rb), 0) << sel[i];
        }
    }
    EXPECT_EQ(i, sel.size());
    EXPECT_EQ(n_windows, int((sel.size() + 4095) / 4096));
}

}  // namespace
}  // namespace hill
