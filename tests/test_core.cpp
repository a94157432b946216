#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/ggml_type.h"
#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "test_util.h"

namespace hill {
namespace {

// Every f16 value converts to f32 and back to itself (NaNs stay NaN).
TEST(fp16, all_values_round_trip) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = fp16_to_fp32(f16_bits(h));
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
            continue;
        }
        ASSERT_EQ(fp32_to_fp16(f), h) << "h=" << h;
    }
}

// f32 -> f16 rounds to the nearest representable value, ties to even.
TEST(fp16, rounding_to_nearest_even) {
    EXPECT_EQ(fp32_to_fp16(1.0f + 0.5f / 1024.0f), fp32_to_fp16(1.0f));                      // tie -> even (1.0)
    EXPECT_EQ(fp32_to_fp16(1.0f + 1.5f / 1024.0f), fp32_to_fp16(1.0f + 2.0f / 1024.0f));      // tie -> even
    EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bffu);
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00u);   // rounds up to infinity
    EXPECT_EQ(fp32_to_fp16(-1e10f), 0xfc00u);
    EXPECT_EQ(fp32_to_fp16(5.96046448e-08f), 0x0001u);  // smallest subnormal
    EXPECT_EQ(fp32_to_fp16(2.98023224e-08f), 0x0000u);  // half of it: tie -> even (0)
    EXPECT_EQ(fp32_to_fp16(6.103515625e-05f), 0x0400u); // smallest normal
    std::mt19937 rng(test::fresh_seed());
    std::uniform_real_distribution<float> d(-70000.0f, 70000.0f);
    for (int i = 0; i < 100000; ++i) {
        const float f = d(rng);
        const float r = fp16_to_fp32(fp32_to_fp16(f));
        if (std::isinf(r)) {
            ASSERT_GE(std::abs(f), 65504.0f);
            continue;
        }
        // No other f16 is closer.
        const f16_bits h = fp32_to_fp16(f);
        for (int delta : {-1, 1}) {
            const float o = fp16_to_fp32(f16_bits(h + delta));
            if (!std::isinf(o) && !std::isnan(o)) {
                ASSERT_LE(std::abs(r - f), std::abs(o - f)) << f;
            }
        }
    }
}

TEST(bf16, rounds_to_nearest_even) {
    EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80u);
    EXPECT_EQ(bf16_to_fp32(fp32_to_bf16(3.140625f)), 3.140625f);
    EXPECT_EQ(fp32_to_bf16(bits_to_f32(0x3f808000u)), 0x3f80u);  // tie -> even
    EXPECT_EQ(fp32_to_bf16(bits_to_f32(0x3f818000u)), 0x3f82u);  // tie -> even (up)
    EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::nanf("")))));
}

TEST(thread_pool, parallel_for_covers_each_index_once) {
    for (int nt : {1, 2, 3, 5}) {
        thread_pool pool(nt);
        for (int64_t n : {0, 1, 7, 1000}) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            pool.parallel_for(n, [&](int64_t i0, int64_t i1) {
                for (int64_t i = i0; i < i1; ++i) hits[size_t(i)]++;
            }, 3);
            for (auto & h : hits) ASSERT_EQ(h.load(), 1);
        }
    }
}

TEST(thread_pool, run_many_times) {
    thread_pool pool(3);
    std::atomic<int64_t> sum{0};
    for (int k = 0; k < 2000; ++k) pool.run([&](int ith, int nth) { sum += ith + nth; });
    EXPECT_EQ(sum.load(), 2000 * (0 + 1 + 2 + 3 * 3));
}

// A job below min_parallel_work runs on the calling thread alone, as one call over everything; from
// min_parallel_work on it is split over the pool as before.
TEST(thread_pool, small_jobs_run_on_the_calling_thread) {
    thread_pool pool(3);
    const auto caller = std::this_thread::get_id();
    const int64_t m = thread_pool::min_parallel_work;
    std::mutex mu;
    std::vector<std::pair<int, int>> runs;            // (ith, nth) of each call
    std::vector<std::pair<int64_t, int64_t>> ranges;  // [i0, i1) of each call
    bool off_caller = false;
    const auto record_run = [&](int ith, int nth) {
        const std::lock_guard<std::mutex> lock(mu);
        runs.emplace_back(ith, nth);
        off_caller = off_caller || std::this_thread::get_id() != caller;
    };
    const auto record_range = [&](int64_t i0, int64_t i1) {
        const std::lock_guard<std::mutex> lock(mu);
        ranges.emplace_back(i0, i1);
        off_caller = off_caller || std::this_thread::get_id() != caller;
    };

    pool.run(record_run, m - 1);
    EXPECT_EQ(runs, (std::vector<std::pair<int, int>>{{0, 1}}));
    EXPECT_FALSE(off_caller);
    runs.clear();
    pool.run(record_run, m);
    std::sort(runs.begin(), runs.end());
    EXPECT_EQ(runs, (std::vector<std::pair<int, int>>{{0, 3}, {1, 3}, {2, 3}}));

    // parallel_for: n · work_per_item against m, exactly at the edge (m = 2^k: items of 8 units).
    off_caller = false;
    pool.parallel_for(m / 8 - 1, record_range, 1, 8);
    EXPECT_EQ(ranges, (std::vector<std::pair<int64_t, int64_t>>{{0, m / 8 - 1}}));
    EXPECT_FALSE(off_caller);
    ranges.clear();
    pool.parallel_for(m / 8, record_range, 1, 8);
    std::sort(ranges.begin(), ranges.end());
    EXPECT_EQ(ranges, (std::vector<std::pair<int64_t, int64_t>>{{0, m / 24}, {m / 24, m / 12}, {m / 12, m / 8}}));
    ranges.clear();
    // One grain cannot be split: it runs on the caller whatever its work.
    off_caller = false;
    pool.parallel_for(16, record_range, 16, m);
    EXPECT_EQ(ranges, (std::vector<std::pair<int64_t, int64_t>>{{0, 16}}));
    EXPECT_FALSE(off_caller);
    ranges.clear();
    // Items too large to multiply (no overflow) and the default (every job large) are split.
    pool.parallel_for(3, record_range, 1, std::numeric_limits<int64_t>::max() / 2);
    pool.parallel_for(3, record_range);
    EXPECT_EQ(ranges.size(), 6u);
}

// Idle gaps longer than the spin put the workers to sleep on the condition variable, and a slow
// worker puts the caller to sleep waiting for it: both blocking paths must wake, and plain (non-atomic)
// writes made inside a job must be visible to the caller after run() (TSan checks the ordering).
TEST(thread_pool, wakes_after_idle_and_waits_for_slow_workers) {
    thread_pool pool(3);
    std::vector<int> out(3, 0);
    for (int k = 1; k <= 20; ++k) {
        if (k % 4 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // workers block
        pool.run([&](int ith, int) {
            if (ith == 2 && k % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // caller blocks
            out[size_t(ith)] = k * 10 + ith;
        });
        for (int i = 0; i < 3; ++i) ASSERT_EQ(out[size_t(i)], k * 10 + i);
    }
}

// Destroying the pool stops workers whether they are spinning (right after a job) or asleep.
TEST(thread_pool, destructor_stops_spinning_and_sleeping_workers) {
    for (int sleep_ms : {0, 2}) {
        thread_pool pool(4);
        std::atomic<int> calls{0};
        pool.run([&](int, int) { ++calls; });
        std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
        EXPECT_EQ(calls.load(), 4);
    }
}

TEST(thread_pool, refused_thread_stops_the_started_ones_and_names_the_count) {
    // The system refuses the 7th thread (worker 6), as under RLIMIT_NPROC: the 5 workers already
    // started are stopped and joined (they used to be left waiting on a condition variable being
    // destroyed: a hang), and the error names the thread, the count asked and how many started.
    std::vector<int> started;
    const auto refuse_7th = [&](int ith) {
        if (ith == 6) throw std::system_error(EAGAIN, std::generic_category(), "thread");
        started.push_back(ith);
    };
    try {
        thread_pool pool(64, refuse_7th);
        FAIL() << "no error";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::bad_input);
        EXPECT_NE(std::string(e.what()).find(
                      "cannot start compute thread 7 of 64 (-t 64): Resource temporarily unavailable; only 6 started"),
                  std::string::npos) << e.what();
    }
    EXPECT_EQ(started, (std::vector<int>{1, 2, 3, 4, 5}));
    // The first worker refused: only the caller ran.
    try {
        thread_pool pool(2, [](int) { throw std::system_error(ENOMEM, std::generic_category()); });
        FAIL() << "no error";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("thread 2 of 2 (-t 2): Cannot allocate memory; only 1 started"),
                  std::string::npos) << e.what();
    }
    // A hook that lets every thread start changes nothing.
    thread_pool pool(3, [](int) {});
    std::atomic<int> calls{0};
    pool.run([&](int, int) { ++calls; });
    EXPECT_EQ(calls.load(), 3);
}

TEST(atomic_file, commit_replaces_and_abandon_leaves_nothing) {
    test::temp_dir dir;
    const std::string path = dir.file("f.bin");
    {
        atomic_file f(path);
        f.write("old", 3);
        f.commit();
    }
    {
        atomic_file f(path);
        f.write("new content", 11);
        // destroyed without commit: the old file stays, no temp file remains
    }
    std::ifstream in(path);
    std::string s;
    in >> s;
    EXPECT_EQ(s, "old");
    size_t n_files = 0;
    for ([[maybe_unused]] const auto & e : std::filesystem::directory_iterator(dir.path)) ++n_files;
    EXPECT_EQ(n_files, 1u);
}

TEST(atomic_file, remove_stale_temps_removes_only_files_of_dead_writers_of_that_path) {
    test::temp_dir dir;
    const std::string path = dir.file("p.cache");
    // pid_max is at most 2^22: no process has pid 999999999. Process 1 always runs.
    const std::string dead = atomic_file::temp_path(path, 999999999);
    EXPECT_EQ(dead, path + ".tmp.999999999");
    const std::vector<std::string> keep = {
        atomic_file::temp_path(path, 1),                          // a live writer
        atomic_file::temp_path(path, long(::getpid())),           // this process's own
        path + ".tmp.999999999.x", path + ".tmp.abc", path + ".tmp.", path + ".tmp.-5",  // not the pattern
        dir.file("other.cache.tmp.999999999"),                    // another file's
        dir.file("xp.cache.tmp.999999999"), path};
    for (const std::string & f : keep) std::ofstream(f) << "x";
    std::ofstream(dead) << "left by a killed writer";
    std::filesystem::create_directory(atomic_file::temp_path(path, 999999998));  // not a file
    EXPECT_EQ(atomic_file::remove_stale_temps(path), std::vector<std::string>{dead});
    EXPECT_FALSE(std::filesystem::exists(dead));
    for (const std::string & f : keep) EXPECT_TRUE(std::filesystem::exists(f)) << f;
    EXPECT_TRUE(std::filesystem::is_directory(atomic_file::temp_path(path, 999999998)));
    // A directory that cannot be listed: nothing removed, no error.
    EXPECT_TRUE(atomic_file::remove_stale_temps("/nonexistent-dir/p.cache").empty());
}

TEST(atomic_file, refuses_to_replace_anything_but_a_regular_file) {
    test::temp_dir dir;
    const std::string fifo = dir.file("fifo"), link = dir.file("link"), target = dir.file("target");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
    { std::ofstream(target) << "keep"; }
    std::filesystem::create_symlink(target, link);
    for (const std::string & p : {fifo, link, dir.path.string(), std::string("/dev/null")}) {
        try {
            atomic_file f(p);
            FAIL() << p;
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::bad_input);
            EXPECT_NE(std::string(e.what()).find("cannot write '" + p + "'"), std::string::npos) << e.what();
        }
    }
    EXPECT_TRUE(std::filesystem::is_fifo(fifo));
    EXPECT_TRUE(std::filesystem::is_symlink(link));
    EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
}

TEST(atomic_file, unwritable_directory_is_a_clear_error) {
    try {
        atomic_file f("/nonexistent-dir/x.gguf");
        FAIL();
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::bad_input);
        EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.gguf"), std::string::npos);
    }
}

TEST(mapped_file, missing_and_directory_are_usage_errors) {
    test::temp_dir dir;
    for (const std::string & p : {dir.file("absent"), dir.path.string()}) {
        try {
            mapped_file m(p);
            FAIL();
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::usage);
            EXPECT_NE(std::string(e.what()).find(p), std::string::npos);
        }
    }
}

// Both ways of holding a file give its bytes: a file of an odd size beyond one huge page (the
// `read` path's pread loop and its last partial page), an empty file (no bytes, no memory), and a
// holder that moves; the usage errors are the same for both.
TEST(mapped_file, map_and_read_give_the_same_bytes) {
    test::temp_dir dir;
    std::vector<char> bytes((size_t(3) << 20) + 4099);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char((i * 2654435761u) >> 13);
    std::ofstream(dir.file("w.bin"), std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    std::ofstream(dir.file("empty.bin"), std::ios::binary).flush();
    for (file_access access : {file_access::map, file_access::read}) {
        mapped_file m(dir.file("w.bin"), access);
        ASSERT_EQ(m.size(), bytes.size());
        EXPECT_EQ(std::memcmp(m.data(), bytes.data(), bytes.size()), 0);
        const mapped_file moved(std::move(m));
        EXPECT_EQ(moved.size(), bytes.size());
        EXPECT_EQ(moved.data()[bytes.size() - 1], uint8_t(bytes.back()));
        const mapped_file empty(dir.file("empty.bin"), access);
        EXPECT_EQ(empty.size(), 0u);
        EXPECT_EQ(empty.data(), nullptr);
        try {
            mapped_file d(dir.path.string(), access);
            FAIL();
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::usage);
        }
    }
}

}  // namespace
}  // namespace hill

namespace hill {
namespace {

TEST(ggml_type, row_bytes_checks_blocks_and_overflow) {
    EXPECT_EQ(ggml_row_bytes(ggml_type::f32, 7), 28u);
    EXPECT_EQ(ggml_row_bytes(ggml_type::q8_0, 64), 68u);
    EXPECT_EQ(ggml_row_bytes(ggml_type::q4_0, 96), 54u);
    EXPECT_FALSE(ggml_row_bytes(ggml_type::q8_0, 33));
    EXPECT_FALSE(ggml_row_bytes(ggml_type::f32, -1));
    EXPECT_FALSE(ggml_row_bytes(ggml_type::f32, int64_t(1) << 62));
}

}  // namespace
}  // namespace hill
