// Shared helpers for the test suites.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace hill::test {

// The shared data folder: $HILLINFER_DATA, else ../shared/data beside the checkout.
inline std::string data_dir() {
    const char * env = std::getenv("HILLINFER_DATA");
    return (env != nullptr && *env != '\0') ? std::string(env) : std::string(HILL_DATA_DEFAULT);
}

// Full path of `rel` inside data_dir(); empty when the file is absent.
inline std::string data_path(const std::string & rel) {
    const std::string p = data_dir() + "/" + rel;
    return std::filesystem::exists(p) ? p : std::string();
}

// A fresh scratch directory under the system temp dir, removed by the destructor.
struct temp_dir {
    std::filesystem::path path;
    temp_dir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "hill-test-XXXXXX").string();
        path = ::mkdtemp(tmpl.data());
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    std::string file(const std::string & name) const { return (path / name).string(); }
};

// Uniform floats in [lo, hi) from a fresh random seed, printed on failure via SCOPED_TRACE by callers.
inline std::vector<float> random_floats(std::mt19937 & rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto & x : v) x = dist(rng);
    return v;
}

inline uint32_t fresh_seed() { return std::random_device{}(); }

// True in the TSan build (HILL_TSAN_BUILD, tests/CMakeLists.txt), where the longest grids run a part:
// there a test's worth is in its threads' interleavings, not in the grid's breadth, and TSan's 5-15x
// slowdown would cost CI minutes.
#if defined(HILL_TSAN_BUILD)
inline constexpr bool tsan_build = true;
#else
inline constexpr bool tsan_build = false;
#endif

// True in the ASan+UBSan build (HILL_ASAN_BUILD, tests/CMakeLists.txt), which runs every unit test:
// the slowest ones repeat a part of what they repeat (fewer sizes, depths or steps), every kind of case
// still run and every assertion still checked on it, since there a test's worth is in the sanitizers
// seeing each code path, not in how often, and their slowdown would cost CI minutes. Release builds
// run every grid whole (CI runs the unit tests under the sanitizers only: a local ctest runs them whole).
#if defined(HILL_ASAN_BUILD)
inline constexpr bool asan_build = true;
#else
inline constexpr bool asan_build = false;
#endif

// Either sanitizer build (asan_build or tsan_build).
inline constexpr bool sanitizer_build = asan_build || tsan_build;

// The message of the hill::error that f throws, which must be exit_code::bad_input; "" (and a
// failure) when it throws none.
inline std::string error_of(const std::function<void()> & f) {
    try {
        f();
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::bad_input) << e.what();
        return e.what();
    }
    ADD_FAILURE() << "no hill::error thrown";
    return "";
}

}  // namespace hill::test

// A generator `rng` from a fresh seed, which every failure of the test declaring it prints.
#define HILL_FRESH_RNG(rng)                                 \
    const uint32_t rng##_seed = ::hill::test::fresh_seed(); \
    SCOPED_TRACE("seed " + std::to_string(rng##_seed));     \
    std::mt19937 rng(rng##_seed)

// Skips the current test with a clear message when the shared data file `rel` is absent.
#define HILL_REQUIRE_DATA(var, rel)                                                              \
    const std::string var = ::hill::test::data_path(rel);                                        \
    if (var.empty()) GTEST_SKIP() << "shared data file '" << (rel) << "' not found under "       \
                                  << ::hill::test::data_dir() << " (set HILLINFER_DATA)"
