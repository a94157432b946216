// io_queue: both backends (io_uring, forced pread/pwrite) on a directory of the real disk
// (/var/tmp: O_DIRECT) and on tmpfs (/dev/shm): round trips, coalescing, short transfers, EOF,
// injected errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>

#include "core/aligned_buffer.h"
#include "kv/io_queue.h"
#include "kv_test_util.h"
#include "test_util.h"

namespace hill {
namespace {

constexpr uint64_t blk = 4096;

// A scratch directory under `base`, removed by the destructor; empty path when base is unusable.
struct scratch_dir {
    std::filesystem::path path;
    explicit scratch_dir(const std::string & base) {
        std::string tmpl = base + "/hill-ioq-XXXXXX";
        if (::mkdtemp(tmpl.data()) != nullptr) path = tmpl;
    }
    ~scratch_dir() {
        std::error_code ec;
        if (!path.empty()) std::filesystem::remove_all(path, ec);
    }
};

using config = test::backend_config;

class io_queue_test : public testing::TestWithParam<config> {
protected:
    void SetUp() override {
        const std::string base = GetParam().tmpfs ? "/dev/shm" : "/var/tmp";
        struct statfs sf {};
        if (::statfs(base.c_str(), &sf) != 0) GTEST_SKIP() << base << " is not available";
        if (GetParam().tmpfs && sf.f_type != TMPFS_MAGIC) GTEST_SKIP() << base << " is not a tmpfs";
        dir_ = std::make_unique<scratch_dir>(base);
        ASSERT_FALSE(dir_->path.empty()) << "cannot create a scratch directory under " << base;
        seed_ = test::fresh_seed();
        rng_.seed(seed_);
    }

    // A file of n_blocks zeroed 4096-byte blocks, opened with O_DIRECT where the file system allows.
    int make_file(const std::string & name, uint64_t n_blocks, bool want_direct = true) {
        const std::string path = (dir_->path / name).string();
        const io_open_result o = io_open_file(path, O_RDWR | O_CREAT | O_TRUNC, 0600, want_direct);
        EXPECT_GE(o.fd, 0) << path << ": " << std::strerror(int(-o.fd));
        if (!GetParam().tmpfs) {
            EXPECT_TRUE(o.direct || !want_direct) << "the disk file system under /var/tmp should take O_DIRECT";
        }
        EXPECT_EQ(::ftruncate(o.fd, off_t(n_blocks * blk)), 0);
        fds_.push_back(o.fd);
        return o.fd;
    }

    void TearDown() override {
        for (int fd : fds_) ::close(fd);
    }

    io_queue_params params() const {
        io_queue_params p;
        p.force_sync = GetParam().force_sync;
        return p;
    }

    void fill_random(aligned_buffer & b) {
        for (size_t i = 0; i < b.size(); i += 8) {
            const uint64_t v = rng_();
            std::memcpy(b.data() + i, &v, std::min<size_t>(8, b.size() - i));
        }
    }

    // Writes random content to every block of fd (one batch) and returns it: [n_blocks * 4096] bytes.
    aligned_buffer write_all(io_queue & q, int fd, uint64_t n_blocks) {
        aligned_buffer content(n_blocks * blk);
        fill_random(content);
        std::vector<io_request> reqs;
        for (uint64_t b = 0; b < n_blocks; ++b)
            reqs.push_back({io_op::write, fd, b * blk, blk, content.data() + b * blk, b});
        std::vector<io_completion> done(reqs.size());
        EXPECT_EQ(q.run(reqs, done), 0u);
        return content;
    }

    // A fault hook that fails every read covering block `bad_block` with EIO (counting its calls in
    // *n_calls when given).
    static io_fault_hook fail_reads_of(uint64_t bad_block, int * n_calls = nullptr) {
        return [bad_block, n_calls](const io_issue & is, int64_t r) -> int64_t {
            if (n_calls != nullptr) ++*n_calls;
            const uint64_t bad = bad_block * blk;
            return is.op == io_op::read && is.offset <= bad && bad < is.offset + is.size_bytes ? -EIO : r;
        };
    }

    std::unique_ptr<scratch_dir> dir_;
    std::vector<int> fds_;
    uint32_t seed_ = 0;
    std::mt19937_64 rng_;
};

TEST_P(io_queue_test, backend_is_the_one_asked_for) {
    io_queue q(params());
    if (GetParam().force_sync) {
        EXPECT_EQ(q.backend(), io_backend::sync);
    } else if (q.backend() != io_backend::uring) {
        GTEST_SKIP() << "io_uring is unavailable here: only the fallback was tested";
    }
}

// Random writes of random block sets, then reads of random block sets (various sizes, duplicates),
// compared byte for byte with what was written. Queue depth 4 so that batches exceed it.
TEST_P(io_queue_test, random_writes_then_reads_round_trip) {
    SCOPED_TRACE("seed " + std::to_string(seed_));
    constexpr uint64_t n_blocks = 256;
    const int fd = make_file("data", n_blocks);
    io_queue_params p = params();
    p.queue_depth = 4;
    io_queue q(p);
    aligned_buffer truth = write_all(q, fd, n_blocks);

    for (int round = 0; round < 8; ++round) {
        // Writes: a random set of distinct blocks gets new random bytes.
        std::vector<uint64_t> ids(n_blocks);
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), rng_);
        ids.resize(1 + rng_() % 100);
        aligned_buffer wbuf(ids.size() * blk);
        fill_random(wbuf);
        std::vector<io_request> wr;
        for (size_t i = 0; i < ids.size(); ++i) {
            wr.push_back({io_op::write, fd, ids[i] * blk, blk, wbuf.data() + i * blk, i});
            std::memcpy(truth.data() + ids[i] * blk, wbuf.data() + i * blk, blk);
        }
        std::vector<io_completion> wdone(wr.size());
        ASSERT_EQ(q.run(wr, wdone), 0u);
        for (size_t i = 0; i < wr.size(); ++i) {
            EXPECT_EQ(wdone[i].user_data, i);
            EXPECT_EQ(wdone[i].result, int64_t(blk));
        }

        // Reads: random ranges of 1..4 blocks, possibly overlapping each other.
        const size_t n_reads = 1 + rng_() % 120;
        std::vector<io_request> rd;
        std::vector<aligned_buffer> bufs;
        for (size_t i = 0; i < n_reads; ++i) {
            const uint64_t len = 1 + rng_() % 4;
            const uint64_t b0 = rng_() % (n_blocks - len + 1);
            bufs.emplace_back(len * blk);
            rd.push_back({io_op::read, fd, b0 * blk, len * blk, bufs.back().data(), 1000 + i});
        }
        std::vector<io_completion> rdone(rd.size());
        ASSERT_EQ(q.run(rd, rdone), 0u);
        for (size_t i = 0; i < rd.size(); ++i) {
            ASSERT_EQ(rdone[i].user_data, 1000 + i);
            ASSERT_EQ(rdone[i].result, int64_t(rd[i].size_bytes));
            ASSERT_EQ(std::memcmp(bufs[i].data(), truth.data() + rd[i].offset, rd[i].size_bytes), 0)
                << "read " << i << " at offset " << rd[i].offset;
        }
    }
}

// Contiguous requests given in shuffled order become one op; results are split per request.
TEST_P(io_queue_test, adjacent_requests_are_coalesced_and_split_back) {
    constexpr uint64_t n_blocks = 64;
    const int fd = make_file("data", n_blocks);
    io_queue q(params());
    aligned_buffer truth = write_all(q, fd, n_blocks);
    EXPECT_EQ(q.stats().n_ops, 1u) << "64 adjacent 4 KiB writes fit one 1 MiB op";
    EXPECT_EQ(q.stats().n_coalesced, n_blocks - 1);

    std::vector<uint64_t> ids(n_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng_);
    std::vector<aligned_buffer> bufs;
    std::vector<io_request> rd;
    for (size_t i = 0; i < n_blocks; ++i) {
        bufs.emplace_back(blk);
        rd.push_back({io_op::read, fd, ids[i] * blk, blk, bufs.back().data(), i});
    }
    std::vector<io_completion> done(rd.size());
    q.reset_stats();
    ASSERT_EQ(q.run(rd, done), 0u);
    EXPECT_EQ(q.stats().n_requests, n_blocks);
    EXPECT_EQ(q.stats().n_ops, 1u);
    for (size_t i = 0; i < n_blocks; ++i) {
        EXPECT_EQ(done[i].user_data, i);
        EXPECT_EQ(done[i].result, int64_t(blk));
        ASSERT_EQ(std::memcmp(bufs[i].data(), truth.data() + ids[i] * blk, blk), 0) << "block " << ids[i];
    }

    // A smaller cap: ops of at most 16 KiB; a gap breaks a run; another op kind never merges.
    io_queue_params p = params();
    p.max_coalesce_bytes = 4 * blk;
    io_queue q2(p);
    std::vector<io_request> rd2;
    for (uint64_t b = 0; b < 32; ++b) {
        if (b == 10) continue;  // gap
        rd2.push_back({io_op::read, fd, b * blk, blk, bufs[b].data(), b});
    }
    std::vector<io_completion> done2(rd2.size());
    ASSERT_EQ(q2.run(rd2, done2), 0u);
    // blocks 0-9: 4+4+2, 11-31: 4*5+1 -> 3 + 6 = 9 ops
    EXPECT_EQ(q2.stats().n_ops, 9u);
    for (size_t i = 0; i < rd2.size(); ++i) {
        ASSERT_EQ(std::memcmp(rd2[i].buffer, truth.data() + rd2[i].offset, blk), 0);
    }

    // Coalescing off: one op per request.
    p.max_coalesce_bytes = 0;
    io_queue q3(p);
    ASSERT_EQ(q3.run(rd2, done2), 0u);
    EXPECT_EQ(q3.stats().n_ops, rd2.size());
}

// EIO on the range of one block inside a coalesced read: that request fails, the others of the
// batch (same op before the split) succeed with the right bytes.
TEST_P(io_queue_test, injected_eio_fails_only_its_request) {
    constexpr uint64_t n_blocks = 32;
    const int fd = make_file("data", n_blocks);
    aligned_buffer truth;
    {
        io_queue w(params());
        truth = write_all(w, fd, n_blocks);
    }
    constexpr uint64_t bad_block = 13;
    io_queue_params p = params();
    int n_hook = 0;
    p.fault_hook = fail_reads_of(bad_block, &n_hook);
    io_queue q(p);
    std::vector<aligned_buffer> bufs;
    std::vector<io_request> rd;
    for (uint64_t b = 0; b < n_blocks; ++b) {
        bufs.emplace_back(blk);
        rd.push_back({io_op::read, fd, b * blk, blk, bufs.back().data(), b});
    }
    std::vector<io_completion> done(rd.size());
    EXPECT_EQ(q.run(rd, done), 1u);
    EXPECT_EQ(q.stats().n_splits, 1u);
    EXPECT_EQ(q.stats().n_failed, 1u);
    for (uint64_t b = 0; b < n_blocks; ++b) {
        if (b == bad_block) {
            EXPECT_EQ(done[b].result, -EIO);
        } else {
            ASSERT_EQ(done[b].result, int64_t(blk)) << "block " << b;
            ASSERT_EQ(std::memcmp(bufs[b].data(), truth.data() + b * blk, blk), 0) << "block " << b;
        }
    }
    EXPECT_GT(n_hook, 1);
}

// A batch in the background (start / wait / result / finish): random reads at depth 4, in the order
// given (shuffled offsets: not coalesced across that order); wait(k) returns a prefix of at least k
// whose results and bytes are final while later requests may still run; one injected EIO fails only
// its request; finish() gives every completion and the queue takes a new batch.
TEST_P(io_queue_test, a_background_batch_hands_over_its_first_requests_first) {
    SCOPED_TRACE("seed " + std::to_string(seed_));
    constexpr uint64_t n_blocks = 200;
    const int fd = make_file("data", n_blocks);
    aligned_buffer truth;
    {
        io_queue w(params());
        truth = write_all(w, fd, n_blocks);
    }
    constexpr uint64_t bad_block = 77;
    io_queue_params p = params();
    p.queue_depth = 4;
    p.fault_hook = fail_reads_of(bad_block);
    io_queue q(p);
    std::vector<uint64_t> ids(n_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng_);
    aligned_buffer buf(n_blocks * blk);
    std::vector<io_request> rd;
    for (uint64_t i = 0; i < n_blocks; ++i) rd.push_back({io_op::read, fd, ids[i] * blk, blk, buf.data() + i * blk, i});
    q.start(rd, false);
    EXPECT_TRUE(q.busy());
    size_t done = 0;
    for (size_t want = 1; want <= n_blocks; want += 1 + rng_() % 17) {
        const size_t got = q.wait(want);
        ASSERT_GE(got, want);
        ASSERT_GE(got, done) << "the prefix never shrinks";
        for (size_t i = done; i < got; ++i) {
            if (ids[i] == bad_block) {
                EXPECT_EQ(q.result(i), -EIO);
            } else {
                ASSERT_EQ(q.result(i), int64_t(blk)) << "request " << i;
                ASSERT_EQ(std::memcmp(buf.data() + i * blk, truth.data() + ids[i] * blk, blk), 0) << "request " << i;
            }
        }
        done = got;
    }
    std::vector<io_completion> out(n_blocks);
    EXPECT_EQ(q.finish(out), 1u);
    EXPECT_FALSE(q.busy());
    for (uint64_t i = 0; i < n_blocks; ++i) {
        EXPECT_EQ(out[i].user_data, i);
        EXPECT_EQ(out[i].result, ids[i] == bad_block ? -EIO : int64_t(blk));
    }
    // Coalesced: only neighbours in the order given that are neighbours in the file (the EIO split
    // adds an op per request of its op).
    uint64_t n_merged = 0, bad_op_parts = 1;
    for (uint64_t i = 0; i + 1 < n_blocks; ++i) n_merged += ids[i + 1] == ids[i] + 1 ? 1 : 0;
    for (uint64_t i = 0; i < n_blocks; ++i) {
        if (ids[i] != bad_block) continue;
        for (uint64_t j = i; j > 0 && ids[j - 1] + 1 == ids[j]; --j) ++bad_op_parts;
        for (uint64_t j = i; j + 1 < n_blocks && ids[j] + 1 == ids[j + 1]; ++j) ++bad_op_parts;
    }
    EXPECT_EQ(q.stats().n_coalesced, n_merged);
    EXPECT_EQ(q.stats().n_ops, n_blocks - n_merged + (bad_op_parts > 1 ? bad_op_parts : 0));
    EXPECT_EQ(q.finish(), 0u) << "no batch: nothing to finish";

    // In-order neighbours still coalesce; a queue destroyed with a batch in flight waits for it.
    std::vector<io_request> seq;
    for (uint64_t b = 0; b < 64; ++b) seq.push_back({io_op::read, fd, b * blk, blk, buf.data() + b * blk, b});
    {
        io_queue q2(params());
        q2.start(seq, false);
        EXPECT_EQ(q2.wait(1), q2.stats().n_requests) << "one op carries all 64";
        EXPECT_EQ(q2.stats().n_ops, 1u);
        io_queue q3(params());
        q3.start(seq, false);
    }
    EXPECT_EQ(std::memcmp(buf.data(), truth.data(), 64 * blk), 0);
}

// ENOSPC on one write of a batch: that request reports -ENOSPC, the others are written.
TEST_P(io_queue_test, injected_enospc_on_write) {
    const int fd = make_file("data", 8);
    io_queue_params p = params();
    p.fault_hook = [](const io_issue & is, int64_t r) -> int64_t {
        if (is.op == io_op::write && is.offset <= 5 * blk && 5 * blk < is.offset + is.size_bytes) return -ENOSPC;
        return r;
    };
    io_queue q(p);
    aligned_buffer data(8 * blk);
    fill_random(data);
    std::vector<io_request> wr;
    for (uint64_t b = 0; b < 8; ++b) wr.push_back({io_op::write, fd, b * blk, blk, data.data() + b * blk, b});
    std::vector<io_completion> done(wr.size());
    EXPECT_EQ(q.run(wr, done), 1u);
    for (uint64_t b = 0; b < 8; ++b) EXPECT_EQ(done[b].result, b == 5 ? -ENOSPC : int64_t(blk)) << b;
}

// Short transfers of whole blocks (what O_DIRECT can return): the remainder is resubmitted at the
// right offset into the right buffer position. The hook scribbles over the bytes it claims were not
// transferred, so stale bytes would show.
TEST_P(io_queue_test, short_transfers_are_finished) {
    SCOPED_TRACE("seed " + std::to_string(seed_));
    constexpr uint64_t n_blocks = 64;
    const int fd = make_file("data", n_blocks);
    io_queue_params p = params();
    p.fault_hook = test::short_transfers(blk, true);
    io_queue q(p);
    aligned_buffer truth = write_all(q, fd, n_blocks);  // short writes too
    EXPECT_GT(q.stats().n_remainders, 0u);

    // Reads: one request of 8 blocks, and a coalesced run of 3-block requests.
    q.reset_stats();
    aligned_buffer big(8 * blk);
    std::vector<aligned_buffer> bufs;
    std::vector<io_request> rd{{io_op::read, fd, 40 * blk, 8 * blk, big.data(), 99}};
    for (uint64_t b = 0; b + 3 <= 36; b += 3) {
        bufs.emplace_back(3 * blk);
        rd.push_back({io_op::read, fd, b * blk, 3 * blk, bufs.back().data(), b});
    }
    std::vector<io_completion> done(rd.size());
    ASSERT_EQ(q.run(rd, done), 0u);
    EXPECT_GT(q.stats().n_remainders, 0u);
    for (size_t i = 0; i < rd.size(); ++i) {
        ASSERT_EQ(done[i].result, int64_t(rd[i].size_bytes));
        ASSERT_EQ(std::memcmp(rd[i].buffer, truth.data() + rd[i].offset, rd[i].size_bytes), 0) << "read " << i;
    }
}

// Short reads at byte counts that are not block multiples (page-cache files only: O_DIRECT would
// refuse an unaligned remainder, and direct reads are never short by a partial block before EOF).
TEST_P(io_queue_test, unaligned_short_reads_are_finished) {
    constexpr uint64_t n_blocks = 16;
    const int fd = make_file("data", n_blocks, /*want_direct=*/false);
    io_queue_params p = params();
    p.fault_hook = [](const io_issue & is, int64_t r) -> int64_t {
        if (is.op != io_op::read || r <= 1000) return r;
        const int64_t shortened = r / 3 + 7;
        int64_t pos = 0;
        for (int i = 0; i < is.n_iov; ++i) {
            const int64_t len = int64_t(is.iov[i].iov_len);
            if (pos + len > shortened) {
                const int64_t skip = std::max<int64_t>(0, shortened - pos);
                std::memset(static_cast<uint8_t *>(is.iov[i].iov_base) + skip, 0x55, size_t(len - skip));
            }
            pos += len;
        }
        return shortened;
    };
    io_queue q(p);
    aligned_buffer truth = write_all(q, fd, n_blocks);
    std::vector<aligned_buffer> bufs;
    std::vector<io_request> rd;
    for (uint64_t b = 0; b < n_blocks; b += 2) {
        bufs.emplace_back(2 * blk);
        rd.push_back({io_op::read, fd, b * blk, 2 * blk, bufs.back().data(), b});
    }
    std::vector<io_completion> done(rd.size());
    ASSERT_EQ(q.run(rd, done), 0u);
    EXPECT_GT(q.stats().n_remainders, 3u);
    for (size_t i = 0; i < rd.size(); ++i) {
        ASSERT_EQ(done[i].result, int64_t(rd[i].size_bytes));
        ASSERT_EQ(std::memcmp(rd[i].buffer, truth.data() + rd[i].offset, rd[i].size_bytes), 0) << "read " << i;
    }
}

// Reads past the end of the file: -ENODATA, not a hang; requests before the end are unaffected.
TEST_P(io_queue_test, end_of_file_is_an_error_not_a_loop) {
    const int fd = make_file("data", 4);
    io_queue q(params());
    aligned_buffer truth = write_all(q, fd, 4);
    aligned_buffer a(blk), b(blk), c(blk), d(2 * blk);
    std::vector<io_request> rd{
        {io_op::read, fd, 2 * blk, blk, a.data(), 0},      // inside
        {io_op::read, fd, 3 * blk, blk, b.data(), 1},      // last block
        {io_op::read, fd, 4 * blk, blk, c.data(), 2},      // past the end (coalesced with the two above)
        {io_op::read, fd, 3 * blk, 2 * blk, d.data(), 3},  // straddles the end
    };
    std::vector<io_completion> done(rd.size());
    EXPECT_EQ(q.run(rd, done), 2u);
    EXPECT_EQ(done[0].result, int64_t(blk));
    EXPECT_EQ(done[1].result, int64_t(blk));
    EXPECT_EQ(done[2].result, -ENODATA);
    EXPECT_EQ(done[3].result, -ENODATA);
    EXPECT_EQ(std::memcmp(a.data(), truth.data() + 2 * blk, blk), 0);
    EXPECT_EQ(std::memcmp(b.data(), truth.data() + 3 * blk, blk), 0);
}

TEST_P(io_queue_test, bad_fd_and_empty_requests) {
    io_queue q(params());
    aligned_buffer a(blk);
    std::vector<io_request> rd{{io_op::read, -1, 0, blk, a.data(), 7}, {io_op::read, -1, 0, 0, a.data(), 8}};
    std::vector<io_completion> done(rd.size());
    EXPECT_EQ(q.run(rd, done), 1u);
    EXPECT_EQ(done[0].user_data, 7u);
    EXPECT_EQ(done[0].result, -EBADF);
    EXPECT_EQ(done[1].result, 0);
    EXPECT_EQ(q.run({}, {}), 0u);
}

INSTANTIATE_TEST_SUITE_P(backends, io_queue_test,
                         test::all_backends(), test::backend_name);

// A file system that refuses O_DIRECT (EINVAL) gets the file opened without it; other errors are
// returned as they are.
TEST(io_open_file, falls_back_when_o_direct_is_refused) {
    test::temp_dir dir;
    std::vector<int> flags_seen;
    const io_open_hook refuse_direct = [&](const char * path, int flags, mode_t mode) -> int {
        flags_seen.push_back(flags);
        if (flags & O_DIRECT) return -EINVAL;
        const int fd = ::open(path, flags, mode);
        return fd < 0 ? -errno : fd;
    };
    const io_open_result o = io_open_file(dir.file("f"), O_RDWR | O_CREAT, 0600, true, refuse_direct);
    ASSERT_GE(o.fd, 0);
    EXPECT_FALSE(o.direct);
    ASSERT_EQ(flags_seen.size(), 2u);
    EXPECT_TRUE(flags_seen[0] & O_DIRECT);
    EXPECT_FALSE(flags_seen[1] & O_DIRECT);
    ::close(o.fd);

    const io_open_result missing = io_open_file(dir.file("no/such/file"), O_RDONLY);
    EXPECT_EQ(missing.fd, -ENOENT);
}

}  // namespace
}  // namespace hill
