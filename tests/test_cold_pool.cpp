// cold_pool with its cold_writer and cold_reader: both io backends, on the real disk (/var/tmp, O_DIRECT)
// and on tmpfs (/dev/shm): round trips of random page sets, coalescing, injected faults (EIO, short reads,
// ENOSPC), corrupted pages, bad kv directories, stale files of dead processes, free-space and
// preallocation failures.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <thread>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "kv/cold_pool.h"
#include "kv/cold_reader.h"
#include "kv/cold_writer.h"
#include "kv_test_util.h"
#include "test_util.h"

namespace hill {
namespace {

namespace fs = std::filesystem;

struct scratch_dir {
    fs::path path;
    explicit scratch_dir(const std::string & base) {
        std::string tmpl = base + "/hill-cold-XXXXXX";
        if (::mkdtemp(tmpl.data()) != nullptr) path = tmpl;
    }
    ~scratch_dir() {
        std::error_code ec;
        if (!path.empty()) fs::remove_all(path, ec);
    }
    std::string str() const { return path.string(); }
};

size_t count_cold_files(const fs::path & dir) {
    size_t n = 0;
    for (const auto & e : fs::directory_iterator(dir)) {
        if (e.path().filename().string().rfind(cold_pool::file_prefix, 0) == 0) ++n;
    }
    return n;
}

// A pid that is not running: a child that has exited and been reaped.
pid_t dead_pid() {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return pid;
}

std::string error_message(const std::function<void()> & fn) {
    try {
        fn();
    } catch (const hill::error & e) {
        return e.what();
    }
    return "(no error)";
}

using config = test::backend_config;

class cold_pool_test : public testing::TestWithParam<config> {
protected:
    static constexpr uint64_t page_bytes = 8192;

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

    cold_pool_params params(uint32_t n_pages = 64) const {
        cold_pool_params p;
        p.kv_dir = (dir_->path / "kv").string();
        p.page_bytes = page_bytes;
        p.n_pages = n_pages;
        p.max_file_bytes = 16 * page_bytes;  // several files even for small pools
        return p;
    }
    io_queue_params io(io_fault_hook hook = {}) const {
        io_queue_params q;
        q.force_sync = GetParam().force_sync;
        q.fault_hook = std::move(hook);
        return q;
    }

    void fill_random(uint8_t * p, size_t n) {
        for (size_t i = 0; i < n; i += 8) {
            const uint64_t v = rng_();
            std::memcpy(p + i, &v, std::min<size_t>(8, n - i));
        }
    }

    // Allocates every page and writes random bytes to all of them; returns [n_pages * page_bytes].
    aligned_buffer fill_pool(cold_pool & pool) {
        cold_writer w(pool, io());
        aligned_buffer truth(size_t(pool.n_pages()) * page_bytes);
        fill_random(truth.data(), truth.size());
        std::vector<page_write> wr;
        for (uint32_t i = 0; i < pool.n_pages(); ++i) {
            const uint32_t p = pool.alloc();
            EXPECT_EQ(p, i);
            wr.push_back({p, truth.data() + size_t(p) * page_bytes});
        }
        std::vector<page_result> res(wr.size());
        EXPECT_EQ(w.write_pages(wr, res), 0u);
        return truth;
    }

    // Flips bit 4 of byte `at` of `page` in its file, behind the pool's back; returns the byte read
    // there before.
    static uint8_t corrupt(const cold_pool & pool, uint32_t page, uint64_t at) {
        const int fd = ::open(pool.file_path(page).c_str(), O_RDWR | O_CLOEXEC);
        EXPECT_GE(fd, 0);
        uint8_t byte = 0;
        const off_t off = off_t(pool.file_offset(page) + at);
        EXPECT_EQ(::pread(fd, &byte, 1, off), 1);
        const uint8_t flipped = byte ^ 0x10;
        EXPECT_EQ(::pwrite(fd, &flipped, 1, off), 1);
        EXPECT_EQ(::fsync(fd), 0);
        ::close(fd);
        return byte;
    }

    std::unique_ptr<scratch_dir> dir_;
    uint32_t seed_ = 0;
    std::mt19937_64 rng_;
};

// Random page sets written (in random order, random contents) then read back in random sets,
// compared byte for byte; the files are spread over several files and removed by the destructor.
TEST_P(cold_pool_test, random_writes_then_reads_round_trip) {
    SCOPED_TRACE("seed " + std::to_string(seed_));
    std::string kv_dir;
    std::vector<std::string> paths;
    {
        cold_pool pool(params(64));
        kv_dir = pool.kv_dir();
        EXPECT_EQ(pool.n_files(), 4u);
        EXPECT_EQ(count_cold_files(kv_dir), 4u);
        if (!GetParam().tmpfs) {
            EXPECT_TRUE(pool.direct());
        }
        aligned_buffer truth = fill_pool(pool);
        cold_writer writer(pool, io());
        cold_reader reader(pool, io());
        for (int round = 0; round < 10; ++round) {
            std::vector<uint32_t> ids(pool.n_pages());
            std::iota(ids.begin(), ids.end(), 0u);
            std::shuffle(ids.begin(), ids.end(), rng_);
            ids.resize(1 + rng_() % ids.size());
            aligned_buffer wbuf(ids.size() * page_bytes);
            fill_random(wbuf.data(), wbuf.size());
            std::vector<page_write> wr;
            for (size_t i = 0; i < ids.size(); ++i) {
                wr.push_back({ids[i], wbuf.data() + i * page_bytes});
                std::memcpy(truth.data() + size_t(ids[i]) * page_bytes, wbuf.data() + i * page_bytes, page_bytes);
            }
            std::vector<page_result> wres(wr.size());
            ASSERT_EQ(writer.write_pages(wr, wres), 0u);

            const size_t n_read = 1 + rng_() % 80;  // duplicates allowed
            aligned_buffer rbuf(n_read * page_bytes);
            std::vector<page_read> rd;
            for (size_t i = 0; i < n_read; ++i)
                rd.push_back({uint32_t(rng_() % pool.n_pages()), rbuf.data() + i * page_bytes});
            std::vector<page_result> rres(rd.size());
            ASSERT_EQ(reader.read_pages(rd, rres), 0u);
            for (size_t i = 0; i < rd.size(); ++i) {
                ASSERT_EQ(rres[i].status, page_status::ok);
                ASSERT_EQ(std::memcmp(rd[i].buffer, truth.data() + size_t(rd[i].page) * page_bytes, page_bytes), 0)
                    << "page " << rd[i].page;
            }
        }
    }
    EXPECT_EQ(count_cold_files(kv_dir), 0u) << "the destructor removes the pool's files";
}

TEST_P(cold_pool_test, sequential_pages_are_read_in_few_ops) {
    cold_pool pool(params(64));
    aligned_buffer truth = fill_pool(pool);
    aligned_buffer rbuf(16 * page_bytes);
    std::vector<page_read> rd;
    for (uint32_t p = 16; p < 32; ++p) rd.push_back({p, rbuf.data() + (p - 16) * page_bytes});  // one file
    std::vector<page_result> res(rd.size());
    cold_reader reader(pool, io());
    ASSERT_EQ(reader.read_pages(rd, res), 0u);
    EXPECT_EQ(reader.io().stats().n_requests, 16u);
    EXPECT_EQ(reader.io().stats().n_ops, 1u);
    EXPECT_EQ(std::memcmp(rbuf.data(), truth.data() + 16 * page_bytes, 16 * page_bytes), 0);
}

TEST_P(cold_pool_test, alloc_free_and_unwritten_pages) {
    cold_pool pool(params(4));
    for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(pool.alloc(), i);
    EXPECT_EQ(pool.alloc(), cold_pool::no_page);
    EXPECT_EQ(pool.n_free(), 0u);
    pool.free(2);
    EXPECT_EQ(pool.alloc(), 2u);
    aligned_buffer b(page_bytes);
    b.data()[0] = 1;
    page_read rd{1, b.data()};
    page_result r;
    cold_reader reader(pool, io());
    EXPECT_EQ(reader.read_pages({&rd, 1}, {&r, 1}), 1u);
    EXPECT_EQ(r.status, page_status::unwritten);
    EXPECT_EQ(b.data()[0], 0) << "a page that is not ok has its buffer zeroed";
}

// EIO on one page's read: that page reports io_error (buffer zeroed); the others are correct.
TEST_P(cold_pool_test, injected_eio_on_read) {
    uint64_t bad_offset = ~uint64_t(0);
    cold_pool pool(params(32));
    cold_reader reader(pool, io([&](const io_issue & is, int64_t r) -> int64_t {
        if (is.op == io_op::read && is.offset <= bad_offset && bad_offset < is.offset + is.size_bytes) return -EIO;
        return r;
    }));
    aligned_buffer truth = fill_pool(pool);
    const uint32_t bad_page = 5;
    bad_offset = pool.file_offset(bad_page);  // file 0: pages 0..15
    aligned_buffer rbuf(16 * page_bytes);
    std::memset(rbuf.data(), 0x77, rbuf.size());
    std::vector<page_read> rd;
    for (uint32_t q = 0; q < 16; ++q) rd.push_back({q, rbuf.data() + q * page_bytes});
    std::vector<page_result> res(rd.size());
    EXPECT_EQ(reader.read_pages(rd, res), 1u);
    for (uint32_t q = 0; q < 16; ++q) {
        if (q == bad_page) {
            EXPECT_EQ(res[q].status, page_status::io_error);
            EXPECT_EQ(res[q].io_result, -EIO);
            EXPECT_TRUE(std::all_of(rbuf.data() + q * page_bytes, rbuf.data() + (q + 1) * page_bytes,
                                    [](uint8_t x) { return x == 0; }));
            const std::string msg = pool.describe(res[q]);
            EXPECT_NE(msg.find("cold page 5"), std::string::npos) << msg;
            EXPECT_NE(msg.find(pool.file_path(bad_page)), std::string::npos) << msg;
            EXPECT_NE(msg.find(std::strerror(EIO)), std::string::npos) << msg;
        } else {
            ASSERT_EQ(res[q].status, page_status::ok) << q;
            ASSERT_EQ(std::memcmp(rbuf.data() + q * page_bytes, truth.data() + q * page_bytes, page_bytes), 0) << q;
        }
    }
}

// Short reads (half of what was asked, whole 4 KiB blocks, tail scribbled): correct data.
TEST_P(cold_pool_test, injected_short_reads_give_correct_data) {
    cold_pool pool(params(32));
    cold_reader reader(pool, io(test::short_transfers(4096, false)));
    aligned_buffer truth = fill_pool(pool);
    std::vector<uint32_t> ids(32);
    std::iota(ids.begin(), ids.end(), 0u);
    std::shuffle(ids.begin(), ids.end(), rng_);
    aligned_buffer rbuf(32 * page_bytes);
    std::vector<page_read> rd;
    for (size_t i = 0; i < 32; ++i) rd.push_back({ids[i], rbuf.data() + i * page_bytes});
    std::vector<page_result> res(rd.size());
    ASSERT_EQ(reader.read_pages(rd, res), 0u);
    EXPECT_GT(reader.io().stats().n_remainders, 0u);
    for (size_t i = 0; i < 32; ++i) {
        ASSERT_EQ(std::memcmp(rd[i].buffer, truth.data() + size_t(ids[i]) * page_bytes, page_bytes), 0) << ids[i];
    }
}

// ENOSPC on one page of a write batch: the whole batch fails cleanly (every page unwritten), the
// pages written before are intact, and the pool keeps working.
TEST_P(cold_pool_test, injected_enospc_fails_the_whole_write_batch) {
    bool inject = false;
    cold_pool pool(params(32));
    cold_writer writer(pool, io([&](const io_issue & is, int64_t r) -> int64_t {
        if (inject && is.op == io_op::write && is.offset <= 3 * page_bytes &&
            3 * page_bytes < is.offset + is.size_bytes) {
            return -ENOSPC;
        }
        return r;
    }));
    cold_reader reader(pool, io());
    aligned_buffer truth = fill_pool(pool);
    pool.free(20);
    pool.free(21);
    ASSERT_EQ(pool.alloc(), 21u);
    ASSERT_EQ(pool.alloc(), 20u);
    aligned_buffer fresh(3 * page_bytes);
    fill_random(fresh.data(), fresh.size());
    std::vector<page_write> wr{{3, fresh.data()}, {20, fresh.data() + page_bytes}, {21, fresh.data() + 2 * page_bytes}};
    std::vector<page_result> wres(wr.size());
    inject = true;
    EXPECT_EQ(writer.write_pages(wr, wres), 3u);
    EXPECT_EQ(wres[0].status, page_status::io_error);
    EXPECT_EQ(wres[0].io_result, -ENOSPC);
    EXPECT_EQ(wres[1].status, page_status::batch_failed);
    EXPECT_EQ(wres[2].status, page_status::batch_failed);
    EXPECT_NE(pool.describe(wres[0]).find(std::strerror(ENOSPC)), std::string::npos);

    aligned_buffer rbuf(4 * page_bytes);
    std::vector<page_read> rd{{3, rbuf.data()},
                              {20, rbuf.data() + page_bytes},
                              {21, rbuf.data() + 2 * page_bytes},
                              {4, rbuf.data() + 3 * page_bytes}};
    std::vector<page_result> rres(rd.size());
    EXPECT_EQ(reader.read_pages(rd, rres), 3u);
    EXPECT_EQ(rres[0].status, page_status::unwritten);
    EXPECT_EQ(rres[1].status, page_status::unwritten);
    EXPECT_EQ(rres[2].status, page_status::unwritten);
    EXPECT_EQ(rres[3].status, page_status::ok);
    EXPECT_EQ(std::memcmp(rbuf.data() + 3 * page_bytes, truth.data() + 4 * page_bytes, page_bytes), 0);

    inject = false;
    ASSERT_EQ(writer.write_pages(wr, wres), 0u);
    ASSERT_EQ(reader.read_pages(rd, rres), 0u);
    EXPECT_EQ(std::memcmp(rbuf.data(), fresh.data(), 3 * page_bytes), 0);
}

// A byte flipped in the file behind the pool's back: checksum_mismatch with expected vs actual,
// the buffer zeroed, the other pages fine.
TEST_P(cold_pool_test, corrupted_page_is_a_checksum_mismatch) {
    cold_pool pool(params(32));
    aligned_buffer truth = fill_pool(pool);
    const uint32_t victim = 19;
    EXPECT_EQ(corrupt(pool, victim, 1234), truth.data()[size_t(victim) * page_bytes + 1234]);

    aligned_buffer rbuf(3 * page_bytes);
    std::vector<page_read> rd{
        {18, rbuf.data()}, {victim, rbuf.data() + page_bytes}, {20, rbuf.data() + 2 * page_bytes}};
    std::vector<page_result> res(rd.size());
    cold_reader reader(pool, io());
    EXPECT_EQ(reader.read_pages(rd, res), 1u);
    EXPECT_EQ(res[0].status, page_status::ok);
    EXPECT_EQ(res[2].status, page_status::ok);
    ASSERT_EQ(res[1].status, page_status::checksum_mismatch);
    EXPECT_NE(res[1].checksum_expected, res[1].checksum_actual);
    EXPECT_TRUE(std::all_of(rbuf.data() + page_bytes, rbuf.data() + 2 * page_bytes, [](uint8_t x) { return x == 0; }));
    const std::string msg = pool.describe(res[1]);
    EXPECT_NE(msg.find("checksum mismatch"), std::string::npos) << msg;
    EXPECT_NE(msg.find(pool.file_path(victim)), std::string::npos) << msg;
    EXPECT_NE(msg.find("offset " + std::to_string(pool.file_offset(victim))), std::string::npos) << msg;
    EXPECT_NE(msg.find(fmt::format("{:016x}", res[1].checksum_expected)), std::string::npos) << msg;
    EXPECT_EQ(std::memcmp(rbuf.data(), truth.data() + 18 * page_bytes, page_bytes), 0);
}

// Pages read in the background (start_pages / pages_done / finish_pages): the same results as
// read_pages — a corrupt page is a checksum mismatch with its buffer zeroed, an unwritten page is
// reported without a read — handed over as a prefix that grows, across the pool's files.
TEST_P(cold_pool_test, pages_read_in_the_background_are_checked_as_they_arrive) {
    cold_pool pool(params(32));
    aligned_buffer truth = fill_pool(pool);
    const uint32_t victim = 21;
    corrupt(pool, victim, 99);
    pool.free(9);  // its content is gone: unwritten
    std::vector<uint32_t> pages{30, 3, 9, 17, 4, 5, victim, 16, 31, 0, 1, 2};  // both files, any order
    aligned_buffer rbuf(pages.size() * page_bytes);
    std::memset(rbuf.data(), 0x55, rbuf.size());
    std::vector<page_read> rd;
    for (size_t i = 0; i < pages.size(); ++i) rd.push_back({pages[i], rbuf.data() + i * page_bytes});
    std::vector<page_result> res(rd.size());
    io_queue_params q = io();
    q.queue_depth = 2;
    cold_reader reader(pool, q);
    reader.start_pages(rd, res);
    size_t done = 0;
    for (size_t want = 1; want <= pages.size(); ++want) {
        const size_t got = reader.pages_done(want);
        ASSERT_GE(got, want);
        for (; done < got; ++done) {
            const uint8_t * b = rbuf.data() + done * page_bytes;
            SCOPED_TRACE("page " + std::to_string(pages[done]));
            if (pages[done] == victim) {
                EXPECT_EQ(res[done].status, page_status::checksum_mismatch);
            } else if (pages[done] == 9) {
                EXPECT_EQ(res[done].status, page_status::unwritten);
            } else {
                ASSERT_EQ(res[done].status, page_status::ok);
                ASSERT_EQ(std::memcmp(b, truth.data() + size_t(pages[done]) * page_bytes, page_bytes), 0);
                continue;
            }
            EXPECT_TRUE(std::all_of(b, b + page_bytes, [](uint8_t x) { return x == 0; }));
        }
    }
    EXPECT_EQ(reader.finish_pages(), 2u);
    EXPECT_EQ(reader.finish_pages(), 0u) << "nothing in flight";
    // The reader is free for a blocking read again.
    ASSERT_EQ(reader.read_pages({rd.data(), 2}, {res.data(), 2}), 0u);
    EXPECT_EQ(std::memcmp(rbuf.data(), truth.data() + 30 * page_bytes, page_bytes), 0);
}

// Stale files: an unlocked file of a dead pid is removed at start; a file whose lock is held (here
// by this process through another fd) is kept; so is an unlocked file of a live pid and a file of
// another name.
TEST_P(cold_pool_test, stale_files_of_dead_processes_are_removed) {
    const fs::path kv = dir_->path / "kv";
    fs::create_directories(kv);
    const pid_t dead = dead_pid();
    const fs::path stale = kv / fmt::format("{}{}-0-0{}", cold_pool::file_prefix, dead, cold_pool::file_suffix);
    const fs::path locked = kv / fmt::format("{}{}-1-0{}", cold_pool::file_prefix, dead, cold_pool::file_suffix);
    const fs::path live = kv / fmt::format("{}{}-7-0{}", cold_pool::file_prefix, ::getppid(), cold_pool::file_suffix);
    const fs::path other = kv / "notes.txt";
    for (const fs::path & f : {stale, locked, live, other}) std::ofstream(f) << "x";
    const int lock_fd = ::open(locked.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(lock_fd, 0);
    ASSERT_EQ(::flock(lock_fd, LOCK_EX | LOCK_NB), 0);

    {
        cold_pool pool(params(8));
        EXPECT_FALSE(fs::exists(stale));
        EXPECT_TRUE(fs::exists(locked));
        EXPECT_TRUE(fs::exists(live));
        EXPECT_TRUE(fs::exists(other));
        // Our own files are locked: another scan leaves them alone.
        EXPECT_EQ(cold_pool::remove_stale_files(kv.string()), 0u);
        EXPECT_EQ(count_cold_files(kv), 2u + pool.n_files());
    }
    ::close(lock_fd);  // the lock holder is gone: now it is stale
    EXPECT_EQ(cold_pool::remove_stale_files(kv.string()), 1u);
    EXPECT_FALSE(fs::exists(locked));
    EXPECT_TRUE(fs::exists(live));
}

TEST_P(cold_pool_test, not_enough_free_space_is_refused_before_preallocating) {
    cold_pool_params p = params();
    p.page_bytes = uint64_t(1) << 30;
    p.n_pages = 4u << 20;  // 4 PiB
    const std::string msg = error_message([&] { cold_pool pool(p); });
    EXPECT_NE(msg.find("needs " + std::to_string(p.page_bytes * p.n_pages) + " bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bytes are free"), std::string::npos) << msg;
    EXPECT_NE(msg.find(p.kv_dir), std::string::npos) << msg;
    EXPECT_EQ(count_cold_files(p.kv_dir), 0u);
}

// A preallocation failure (here EFBIG from a file-size limit, the same path as ENOSPC) is a clear
// error and leaves no file behind.
TEST_P(cold_pool_test, preallocation_failure_removes_the_files) {
    cold_pool_params p = params(64);  // 4 files of 128 KiB
    rlimit old{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = 64 * 1024;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    const std::string msg = error_message([&] { cold_pool pool(p); });
    ::setrlimit(RLIMIT_FSIZE, &old);
    ::signal(SIGXFSZ, old_handler);
    EXPECT_NE(msg.find("cannot preallocate"), std::string::npos) << msg;
    EXPECT_NE(msg.find(p.kv_dir), std::string::npos) << msg;
    EXPECT_EQ(count_cold_files(p.kv_dir), 0u);
}

INSTANTIATE_TEST_SUITE_P(backends, cold_pool_test,
                         test::all_backends(), test::backend_name);

// A kv-dir under a regular file cannot be created, even by root: the error names it.
TEST(cold_pool_dir, impossible_kv_dir_is_a_clear_error) {
    test::temp_dir dir;
    std::ofstream(dir.file("plain")) << "x";
    cold_pool_params p;
    p.page_bytes = 4096;
    p.n_pages = 4;
    p.kv_dir = dir.file("plain") + "/kv";
    std::string msg = error_message([&] { cold_pool pool(p); });
    EXPECT_NE(msg.find("cannot create the kv directory '" + p.kv_dir + "'"), std::string::npos) << msg;

    p.kv_dir = dir.file("plain");
    msg = error_message([&] { cold_pool pool(p); });
    EXPECT_NE(msg.find("'" + p.kv_dir + "'"), std::string::npos) << msg;

    // A missing kv-dir (and its missing parent) is created.
    p.kv_dir = dir.file("a/b/kv");
    cold_pool pool(p);
    EXPECT_TRUE(fs::is_directory(p.kv_dir));
}

TEST(cold_pool_dir, unwritable_kv_dir_is_a_clear_error) {
    // Root writes into any directory: the pool is opened in a child process, as user nobody (65534)
    // when the test runs as root. The death test's child (this test run again) forks that process, waits
    // for it and removes its own directory before it leaves through _Exit, past the destructors.
    test::temp_dir dir;
    fs::permissions(dir.path, fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
    const std::string ro = dir.file("ro");
    fs::create_directories(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::others_read | fs::perms::others_exec);
    cold_pool_params p;
    p.page_bytes = 4096;
    p.n_pages = 4;
    p.kv_dir = ro;
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            const pid_t pid = ::fork();
            if (pid == 0) {
                if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) std::_Exit(2);
                const std::string msg = error_message([&] { cold_pool pool(p); });
                std::fprintf(stderr, "%s\n", msg.c_str());
                std::_Exit(msg.find("'" + ro + "' is not writable") != std::string::npos ? 0 : 1);
            }
            int status = 0;
            const bool reaped = pid > 0 && ::waitpid(pid, &status, 0) == pid;
            std::error_code ec;
            fs::permissions(ro, fs::perms::owner_all, ec);
            fs::remove_all(dir.path, ec);
            std::_Exit(reaped && WIFEXITED(status) ? WEXITSTATUS(status) : 3);
        },
        testing::ExitedWithCode(0), "")
        << "exit 1: another message; exit 2: cannot switch to user nobody; exit 3: the fork failed or it did not exit";
    fs::permissions(ro, fs::perms::owner_all);
}

TEST(cold_pool_dir, page_size_must_be_a_multiple_of_4096) {
    test::temp_dir dir;
    cold_pool_params p;
    p.kv_dir = dir.file("kv");
    p.page_bytes = 6000;
    p.n_pages = 4;
    try {
        cold_pool pool(p);
        FAIL() << "no error";
    } catch (const hill::error & e) {
        EXPECT_EQ(e.code(), exit_code::usage);
        EXPECT_NE(std::string(e.what()).find("6000"), std::string::npos) << e.what();
    }
}

// A file system that refuses O_DIRECT: the pool opens its files without it and works.
TEST(cold_pool_dir, works_where_o_direct_is_refused) {
    test::temp_dir dir;
    cold_pool_params p;
    p.kv_dir = dir.file("kv");
    p.page_bytes = 4096;
    p.n_pages = 8;
    p.open_hook = [](const char * path, int flags, mode_t mode) -> int {
        if (flags & O_DIRECT) return -EINVAL;
        const int fd = ::open(path, flags, mode);
        return fd < 0 ? -errno : fd;
    };
    cold_pool pool(p);
    EXPECT_FALSE(pool.direct());
    aligned_buffer w(4096), r(4096);
    std::memset(w.data(), 0x3c, w.size());
    const uint32_t id = pool.alloc();
    page_write pw{id, w.data()};
    page_read pr{id, r.data()};
    page_result res;
    cold_writer writer(pool);
    cold_reader reader(pool);
    ASSERT_EQ(writer.write_pages({&pw, 1}, {&res, 1}), 0u);
    ASSERT_EQ(reader.read_pages({&pr, 1}, {&res, 1}), 0u);
    EXPECT_EQ(std::memcmp(w.data(), r.data(), 4096), 0);
}

// Pools on different threads share nothing (run under TSan).
TEST(cold_pool_threads, one_pool_per_thread) {
    test::temp_dir dir;
    std::vector<std::thread> threads;
    std::atomic<int> n_ok{0};
    for (int t = 0; t < 3; ++t) {
        threads.emplace_back([&, t] {
            cold_pool_params p;
            p.kv_dir = dir.file("kv");
            p.page_bytes = 4096;
            p.n_pages = 32;
            cold_pool pool(p);
            io_queue_params q;
            q.force_sync = t == 2;
            cold_writer writer(pool, q);
            cold_reader reader(pool, q);
            aligned_buffer w(32 * 4096), r(32 * 4096);
            for (size_t i = 0; i < w.size(); ++i) w.data()[i] = uint8_t(i * 7 + t);
            std::vector<page_write> wr;
            std::vector<page_read> rd;
            for (uint32_t i = 0; i < 32; ++i) {
                const uint32_t id = pool.alloc();
                wr.push_back({id, w.data() + i * 4096});
                rd.push_back({id, r.data() + i * 4096});
            }
            std::vector<page_result> res(32);
            if (writer.write_pages(wr, res) == 0 && reader.read_pages(rd, res) == 0 &&
                std::memcmp(w.data(), r.data(), w.size()) == 0) {
                ++n_ok;
            }
        });
    }
    for (auto & th : threads) th.join();
    EXPECT_EQ(n_ok.load(), 3);
}

}  // namespace
}  // namespace hill
