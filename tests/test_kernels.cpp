// CPU kernels: every AVX2 path against its scalar reference on fresh random inputs of odd sizes,
// and every scalar reference against a plain double-precision computation.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "compute/attention.h"
#include "compute/kernel_mode.h"
#include "compute/kernels_avx2.h"
#include "compute/matmul.h"
#include "compute/ops.h"
#include "core/fp16.h"
#include "core/ggml_type.h"
#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "test_util.h"

namespace hill {
namespace {

using test::mode_guard;

using test::fresh_seed;
using test::random_floats;

const ggml_type all_types[] = {ggml_type::f32,  ggml_type::f16,  ggml_type::bf16, ggml_type::q8_0,   ggml_type::q4_0,
                               ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1, ggml_type::iq4_nl, ggml_type::q2_k,
                               ggml_type::q3_k, ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k,   ggml_type::iq4_xs};

// The types decoded to f32 weights by the products (all quantized types but Q8_0 and Q4_0).
const ggml_type decoded_types[] = {ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1, ggml_type::iq4_nl,
                                   ggml_type::q2_k, ggml_type::q3_k, ggml_type::q4_k, ggml_type::q5_k,
                                   ggml_type::q6_k, ggml_type::iq4_xs};

// size_t of a count (avoids `T v(size_t(n))` parsing as a function declaration).
inline size_t sz(int64_t v) {
    return static_cast<size_t>(v);
}

bool is_quant(ggml_type t) {
    return ggml_block_size(t) > 1;
}

bool is_decoded(ggml_type t) {
    return std::find(std::begin(decoded_types), std::end(decoded_types), t) != std::end(decoded_types);
}

// A column count for type t: n_float for the float types, n_quant (a multiple of 32) for the types
// with blocks of 32, and as many blocks of 256, rounded up, for the super-block types.
int64_t cols_of(ggml_type t, int64_t n_float, int64_t n_quant) {
    const int64_t bs = ggml_block_size(t);
    if (bs == 1) return n_float;
    return (n_quant + bs - 1) / bs * bs;
}

// The byte offsets of a block's f16 scales (d, m, dmin), for random blocks.
std::vector<size_t> f16_fields(ggml_type t) {
    switch (t) {
        case ggml_type::q4_1:
        case ggml_type::q5_1:
        case ggml_type::q4_k:
        case ggml_type::q5_k: return {0, 2};
        case ggml_type::q2_k: return {offsetof(block_q2_k, d), offsetof(block_q2_k, dmin)};
        case ggml_type::q3_k: return {offsetof(block_q3_k, d)};
        case ggml_type::q6_k: return {offsetof(block_q6_k, d)};
        default: return {0};
    }
}

// These tests check the exact f32 products (matmul_mode::exact); test_q8_dot checks the int8 ones.
struct exact_matmul_env : ::testing::Environment {
    void SetUp() override { matmul_mode_set(matmul_mode::exact); }
};
[[maybe_unused]] ::testing::Environment * const exact_env = ::testing::AddGlobalTestEnvironment(new exact_matmul_env);

#define HILL_REQUIRE_AVX2() \
    if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU has no AVX2+FMA+F16C: only the scalar kernels run here"

// Counts |a[i] - b[i]| > tol[i] and reports the first few, instead of one failure per element.
void expect_close(const std::vector<float> & a, const std::vector<float> & b, const std::vector<double> & tol,
                  const std::string & what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double diff = std::fabs(double(a[i]) - double(b[i]));
        if (!(diff <= tol[i])) {
            if (++bad <= 5)
                ADD_FAILURE() << what << ": element " << i << ": " << a[i] << " vs " << b[i] << " (diff " << diff
                              << ", tolerance " << tol[i] << ")";
        }
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << a.size() << " elements out of tolerance";
}

void expect_close(const std::vector<float> & a, const std::vector<double> & b, const std::vector<double> & tol,
                  const std::string & what) {
    // Against the double values themselves, not their f32 rounding.
    ASSERT_EQ(a.size(), b.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double diff = std::fabs(double(a[i]) - b[i]);
        if (!(diff <= tol[i])) {
            if (++bad <= 5)
                ADD_FAILURE() << what << ": element " << i << ": " << a[i] << " vs " << b[i] << " (diff " << diff
                              << ", tolerance " << tol[i] << ")";
        }
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << a.size() << " elements out of tolerance";
}

void expect_bitwise_equal(const std::vector<float> & a, const std::vector<float> & b, const std::string & what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::memcmp(&a[i], &b[i], 4) != 0 && ++bad <= 5)
            ADD_FAILURE() << what << ": element " << i << ": " << a[i] << " vs " << b[i];
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << a.size() << " elements differ";
}

// ---------------------------------------------------------------------------------------------
// weights

struct weights {
    ggml_type type;
    int64_t n_rows, n_cols;
    std::vector<uint8_t> bytes;
    std::vector<float> deq;  // f32 [n_rows, n_cols]: the exact values the bytes encode
    weight_view view() const { return {type, n_rows, n_cols, bytes.data()}; }
};

weights make_weights(ggml_type type, int64_t n_rows, int64_t n_cols, std::mt19937 & rng) {
    weights w{type, n_rows, n_cols, {}, {}};
    const size_t rb = *ggml_row_bytes(type, n_cols);
    w.bytes.resize(rb * sz(n_rows));
    w.deq.resize(sz(n_rows * n_cols));
    if (is_decoded(type)) {
        // Random bytes (every bit pattern of quants and sub-block scales) with finite f16 scales.
        std::uniform_int_distribution<int> byte(0, 255);
        for (uint8_t & b : w.bytes) b = uint8_t(byte(rng));
        std::uniform_real_distribution<float> scale(-1.0f / 64, 1.0f / 64);
        const size_t bb = ggml_block_bytes(type);
        for (size_t o = 0; o < w.bytes.size(); o += bb) {
            for (size_t f : f16_fields(type)) {
                const f16_bits h = fp32_to_fp16(scale(rng));
                std::memcpy(w.bytes.data() + o + f, &h, 2);
            }
        }
    } else {
        const std::vector<float> src = random_floats(rng, sz(n_rows * n_cols));
        for (int64_t r = 0; r < n_rows; ++r) {
            quantize_row(type, src.data() + r * n_cols, w.bytes.data() + sz(r) * rb, n_cols);
        }
    }
    mode_guard g;
    kernel_mode_set(kernel_mode::scalar);
    for (int64_t r = 0; r < n_rows; ++r)
        dequantize_row(type, w.bytes.data() + sz(r) * rb, w.deq.data() + r * n_cols, n_cols);
    return w;
}

// y = W·x in double, and per row Σ|w·x| (the scale of rounding errors).
void gemv_double(const weights & w, const float * x, std::vector<double> & y, std::vector<double> & mag) {
    y.assign(sz(w.n_rows), 0.0);
    mag.assign(sz(w.n_rows), 0.0);
    for (int64_t r = 0; r < w.n_rows; ++r) {
        // Four partial sums only to make this reference fast enough for the sanitizer builds.
        double s[4] = {}, m[4] = {};
        const float * wr = w.deq.data() + r * w.n_cols;
        for (int64_t j = 0; j < w.n_cols; ++j) {
            const double t = double(wr[j]) * double(x[j]);
            s[j % 4] += t;
            m[j % 4] += std::fabs(t);
        }
        y[sz(r)] = (s[0] + s[1]) + (s[2] + s[3]);
        mag[sz(r)] = (m[0] + m[1]) + (m[2] + m[3]);
    }
}

std::vector<double> rel_tol(const std::vector<double> & mag, double rel, double abs = 1e-6) {
    std::vector<double> t(mag.size());
    for (size_t i = 0; i < mag.size(); ++i) t[i] = rel * mag[i] + abs;
    return t;
}

std::vector<int64_t> col_sizes(ggml_type t) {
    if (ggml_block_size(t) == qk_k) return {256, 256 * 3};
    if (is_quant(t)) return {32, 32 * 7, 32 * 33};
    return {1, 7, 16, 33, 257};
}

std::string case_name(ggml_type t, int64_t n_rows, int64_t n_cols) {
    return std::string(ggml_type_name(t)) + " " + std::to_string(n_rows) + "x" + std::to_string(n_cols);
}

TEST(kernel_mode, set_and_get) {
    mode_guard g;
    kernel_mode_set(kernel_mode::scalar);
    EXPECT_EQ(kernel_mode_get(), kernel_mode::scalar);
    if (cpu_has_avx2()) {
        kernel_mode_set(kernel_mode::avx2);
        EXPECT_EQ(kernel_mode_get(), kernel_mode::avx2);
    }
}

TEST(matmul, row_bytes) {
    EXPECT_EQ((weight_view{ggml_type::f32, 3, 7, nullptr}.row_bytes()), 28u);
    EXPECT_EQ((weight_view{ggml_type::f16, 3, 7, nullptr}.row_bytes()), 14u);
    EXPECT_EQ((weight_view{ggml_type::bf16, 3, 7, nullptr}.row_bytes()), 14u);
    EXPECT_EQ((weight_view{ggml_type::q8_0, 3, 64, nullptr}.row_bytes()), 68u);
    EXPECT_EQ((weight_view{ggml_type::q4_0, 3, 64, nullptr}.row_bytes()), 36u);
}

TEST(matmul, gemv_scalar_matches_double) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    kernel_mode_set(kernel_mode::scalar);
    thread_pool pool(1);
    for (ggml_type t : all_types) {
        for (int64_t n_cols : col_sizes(t)) {
            for (int64_t n_rows : {1, 3, 37}) {
                const weights w = make_weights(t, n_rows, n_cols, rng);
                const std::vector<float> x = random_floats(rng, sz(n_cols));
                std::vector<float> y(sz(n_rows));
                gemv(w.view(), x.data(), y.data(), pool);
                std::vector<double> ref, mag;
                gemv_double(w, x.data(), ref, mag);
                expect_close(y, ref, rel_tol(mag, 1e-5), case_name(t, n_rows, n_cols));
            }
        }
    }
}

TEST(matmul, gemv_avx2_matches_scalar) {
    HILL_REQUIRE_AVX2();
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    thread_pool pool(1);
    for (ggml_type t : all_types) {
        for (int64_t n_cols : col_sizes(t)) {
            for (int64_t n_rows : {1, 3, 4, 37, 301}) {
                const weights w = make_weights(t, n_rows, n_cols, rng);
                const std::vector<float> x = random_floats(rng, sz(n_cols));
                std::vector<float> ys(sz(n_rows)), ya(sz(n_rows));
                kernel_mode_set(kernel_mode::scalar);
                gemv(w.view(), x.data(), ys.data(), pool);
                kernel_mode_set(kernel_mode::avx2);
                gemv(w.view(), x.data(), ya.data(), pool);
                std::vector<double> ref, mag;
                gemv_double(w, x.data(), ref, mag);
                expect_close(ya, ys, rel_tol(mag, 1e-5), case_name(t, n_rows, n_cols));
                // Sub-ranges start at any row, not only at a multiple of the kernel's row group.
                if (n_rows > 5) {
                    std::vector<float> yr(sz(n_rows), -1.0f);
                    gemv_rows(w.view(), x.data(), yr.data(), 3, n_rows - 1);
                    std::vector<float> got(yr.begin() + 3, yr.end() - 1), want(ys.begin() + 3, ys.end() - 1);
                    std::vector<double> m(mag.begin() + 3, mag.end() - 1);
                    expect_close(got, want, rel_tol(m, 1e-5), case_name(t, n_rows, n_cols) + " rows [3, n-1)");
                    EXPECT_EQ(yr[0], -1.0f);
                    EXPECT_EQ(yr.back(), -1.0f);
                }
            }
        }
    }
}

TEST(matmul, gemv_same_result_for_1_2_3_threads) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    thread_pool p1(1), p2(2), p3(3);
    for (kernel_mode m : test::kernel_modes_tested()) {
        kernel_mode_set(m);
        for (ggml_type t : all_types) {
            const int64_t n_cols = cols_of(t, 33, 32 * 7);
            const weights w = make_weights(t, 301, n_cols, rng);
            const std::vector<float> x = random_floats(rng, sz(n_cols));
            std::vector<float> y1(301), y2(301), y3(301);
            gemv(w.view(), x.data(), y1.data(), p1);
            gemv(w.view(), x.data(), y2.data(), p2);
            gemv(w.view(), x.data(), y3.data(), p3);
            expect_bitwise_equal(y2, y1, case_name(t, 301, n_cols) + " 2 threads");
            expect_bitwise_equal(y3, y1, case_name(t, 301, n_cols) + " 3 threads");
        }
    }
}

// The OpenBLAS path (gemm above gemm_batch_max_tok, and gemm_blas at any n_tok) against gemv per
// token, within f32 rounding: it sums in another order; and bit for bit the same with 1, 2 or 3
// threads (F32 weights went to sgemm in one call per thread's rows, whose sums depend on the call).
TEST(matmul, gemm_blas_matches_gemv_per_token) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    thread_pool p1(1), p2(2), p3(3);
    struct shape {
        int64_t n_rows, n_cols_float, n_cols_quant;
        std::vector<int64_t> n_toks;
    };
    // 301 rows of 224 or 257 columns: a 256-row tile and a partial one; 600 rows of 4128 columns:
    // two 240-row tiles and a partial one. Under the sanitizers (test::sanitizer_build) the large shape
    // multiplies 3 tokens, not 17 (the tiles do not depend on the token count, which the small shape
    // varies), for the types below only: a fifth of the reference products, 3 of 7 weight matrices.
    const shape shapes[] = {{301, 257, 32 * 7, {1, 4, 17, 65}}, {600, 4128, 4128, {test::sanitizer_build ? 3 : 17}}};
    for (kernel_mode m : test::kernel_modes_tested()) {
        kernel_mode_set(m);
        for (const shape & sh : shapes) {
            for (ggml_type t : all_types) {
                // The large shape for one type of each decoder family only (time, not coverage:
                // the tiles do not depend on the type).
                if (sh.n_rows == 600 && is_decoded(t) && t != ggml_type::q4_k && t != ggml_type::q5_0) continue;
                // Under the sanitizers f32 (row chunks straight to sgemm) and the tiles of a type stored as
                // is (Q8_0) and of a decoded one (Q4_K): each path of gemm_blas over several tiles.
                if (sh.n_rows == 600 && test::sanitizer_build && t != ggml_type::f32 && t != ggml_type::q8_0 &&
                    t != ggml_type::q4_k)
                    continue;
                const int64_t n_cols = cols_of(t, sh.n_cols_float, sh.n_cols_quant);
                const weights w = make_weights(t, sh.n_rows, n_cols, rng);
                for (int64_t n_tok : sh.n_toks) {
                    const std::string what = case_name(t, sh.n_rows, n_cols) + " n_tok " + std::to_string(n_tok) +
                                             (m == kernel_mode::avx2 ? " avx2" : " scalar");
                    const std::vector<float> x = random_floats(rng, sz(n_tok * n_cols));
                    std::vector<float> want(sz(n_tok * sh.n_rows));
                    for (int64_t tk = 0; tk < n_tok; ++tk)
                        gemv(w.view(), x.data() + tk * n_cols, want.data() + tk * sh.n_rows, p1);
                    std::vector<double> tol;
                    for (int64_t tk = 0; tk < n_tok; ++tk) {
                        std::vector<double> ref, mag;
                        gemv_double(w, x.data() + tk * n_cols, ref, mag);
                        const std::vector<double> tt = rel_tol(mag, 1e-5);
                        tol.insert(tol.end(), tt.begin(), tt.end());
                    }
                    std::vector<float> one_thread;
                    for (thread_pool * p : {&p1, &p2, &p3}) {
                        const std::string wt = what + " threads " + std::to_string(p->n_threads());
                        std::vector<float> y(sz(n_tok * sh.n_rows), std::nanf(""));
                        gemm_blas(w.view(), x.data(), n_tok, y.data(), *p);
                        expect_close(y, want, tol, wt + " gemm_blas");
                        if (p == &p1) one_thread = y;
                        for (size_t i = 0; i < y.size(); ++i) {
                            ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(one_thread[i]))
                                << wt << " gemm_blas: element " << i << " differs from one thread's";
                        }
                        if (n_tok > gemm_batch_max_tok) {
                            std::fill(y.begin(), y.end(), std::nanf(""));
                            gemm(w.view(), x.data(), n_tok, y.data(), *p);
                            expect_close(y, want, tol, wt + " gemm");
                        }
                    }
                }
            }
        }
    }
}

// Batch invariance (matmul.h): every row of gemv_batch — and of gemm up to gemm_batch_max_tok rows —
// is bit for bit gemv of that row alone, for any number of rows, in both kernel modes, with 1, 2
// and 3 threads. Shapes: ragged row counts (not multiples of the 16-row grain or of the AVX2
// kernel's 4-row groups), the smallest legal n_cols (1 column; one Q8_0/Q4_0 block), column counts
// with 8- and 1-column tails, and 4128+ columns (more than one chunk of columns for a single row).
TEST(matmul, gemv_batch_rows_bitwise_equal_gemv_alone) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    thread_pool p1(1), p2(2), p3(3);
    struct shape {
        int64_t n_rows, n_cols_float, n_cols_quant;
        std::vector<int64_t> ns;
    };
    const std::vector<int64_t> all_ns = {1, 2, 3, 5, 8, 13, 25, 64};
    const shape shapes[] = {{1, 1, 32, all_ns},       {3, 7, 32, all_ns},          {5, 16, 64, all_ns},
                            {37, 33, 32 * 7, all_ns}, {301, 257, 32 * 33, all_ns}, {21, 4135, 32 * 129, {1, 2, 8, 64}}};
    for (kernel_mode m : test::kernel_modes_tested()) {
        kernel_mode_set(m);
        for (const shape & sh : shapes) {
            for (ggml_type t : all_types) {
                // The two largest shapes for one decoded type per block size only (time: the decoded
                // types share one kernel template and differ only in their decoders).
                if (sh.n_rows >= 21 && sh.n_cols_float >= 257 && is_decoded(t) && t != ggml_type::q4_k &&
                    t != ggml_type::q5_0)
                    continue;
                const int64_t n_cols = cols_of(t, sh.n_cols_float, sh.n_cols_quant);
                const weights w = make_weights(t, sh.n_rows, n_cols, rng);
                const int64_t n_max = sh.ns.back();
                const std::vector<float> x = random_floats(rng, sz(n_max * n_cols));
                // Each row alone, through gemv (one thread).
                std::vector<float> alone(sz(n_max * sh.n_rows));
                for (int64_t tk = 0; tk < n_max; ++tk)
                    gemv(w.view(), x.data() + tk * n_cols, alone.data() + tk * sh.n_rows, p1);
                for (int64_t n : sh.ns) {
                    const std::vector<float> want(alone.begin(), alone.begin() + n * sh.n_rows);
                    for (thread_pool * p : {&p1, &p2, &p3}) {
                        const std::string what = case_name(t, sh.n_rows, n_cols) + " n " + std::to_string(n) +
                                                 (m == kernel_mode::avx2 ? " avx2" : " scalar") + " threads " +
                                                 std::to_string(p->n_threads());
                        std::vector<float> y(sz(n * sh.n_rows), std::nanf(""));
                        gemv_batch(w.view(), x.data(), n, y.data(), *p);
                        expect_bitwise_equal(y, want, what + " gemv_batch");
                        if (p == &p3) {  // gemm routes n <= gemm_batch_max_tok to gemv_batch: one pool is enough
                            std::fill(y.begin(), y.end(), std::nanf(""));
                            gemm(w.view(), x.data(), n, y.data(), *p);
                            expect_bitwise_equal(y, want, what + " gemm");
                        }
                    }
                    // On the calling thread, with x as it lies (gemv_batch may first copy it to aligned
                    // rows): rows 1..n of x, one row further in memory.
                    if (n < n_max) {
                        std::vector<float> y(sz(n * sh.n_rows), std::nanf(""));
                        gemv_batch_rows(w.view(), x.data() + n_cols, n, y.data(), 0, sh.n_rows);
                        const std::vector<float> want1(alone.begin() + sh.n_rows, alone.begin() + (n + 1) * sh.n_rows);
                        expect_bitwise_equal(y, want1,
                                             case_name(t, sh.n_rows, n_cols) + " n " + std::to_string(n) +
                                                 (m == kernel_mode::avx2 ? " avx2" : " scalar") + " gemv_batch_rows");
                    }
                    // A sub-range [4, 20): its groups of four fall where gemv_batch's do (matmul.h).
                    if (sh.n_rows >= 20) {
                        std::vector<float> y(sz(n * sh.n_rows), -1.0f), want4(sz(n * sh.n_rows), -1.0f);
                        gemv_batch_rows(w.view(), x.data(), n, y.data(), 4, 20);
                        for (int64_t tk = 0; tk < n; ++tk) {
                            std::copy(want.begin() + tk * sh.n_rows + 4, want.begin() + tk * sh.n_rows + 20,
                                      want4.begin() + tk * sh.n_rows + 4);
                        }
                        expect_bitwise_equal(y, want4,
                                             case_name(t, sh.n_rows, n_cols) + " n " + std::to_string(n) +
                                                 (m == kernel_mode::avx2 ? " avx2" : " scalar") + " rows [4, 20)");
                    }
                }
            }
        }
    }
}

// A row's result does not depend on what the other rows of its batch hold (even NaN and ±inf), on
// its place in the batch, or on the batch size.
TEST(matmul, gemv_batch_row_independent_of_its_neighbours) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    thread_pool pool(2);
    const float inf = std::numeric_limits<float>::infinity();
    for (kernel_mode m : test::kernel_modes_tested()) {
        kernel_mode_set(m);
        for (ggml_type t : all_types) {
            const int64_t n_rows = 45, n_cols = cols_of(t, 300, 32 * 9);
            const weights w = make_weights(t, n_rows, n_cols, rng);
            const std::vector<float> x0 = random_floats(rng, sz(n_cols));
            std::vector<float> want(sz(n_rows));
            gemv(w.view(), x0.data(), want.data(), pool);
            for (int64_t n : {2, 7, 25, 64}) {
                for (int64_t at : {int64_t(0), n / 2, n - 1}) {
                    std::vector<float> x = random_floats(rng, sz(n * n_cols), -100.0f, 100.0f);
                    if (n > 2) {
                        x[sz(((at + 1) % n) * n_cols)] = std::nanf("");
                        x[sz(((at + 2) % n) * n_cols + 1)] = inf;
                        x[sz(((at + 2) % n) * n_cols + 2)] = -inf;
                    }
                    std::copy(x0.begin(), x0.end(), x.begin() + at * n_cols);
                    std::vector<float> y(sz(n * n_rows));
                    gemv_batch(w.view(), x.data(), n, y.data(), pool);
                    const std::vector<float> got(y.begin() + at * n_rows, y.begin() + (at + 1) * n_rows);
                    expect_bitwise_equal(got, want,
                                         case_name(t, n_rows, n_cols) + " row " + std::to_string(at) + " of " +
                                             std::to_string(n) + (m == kernel_mode::avx2 ? " avx2" : " scalar"));
                }
            }
        }
    }
}

// The batched AVX2 kernel against the batched scalar reference (within f32 rounding: they sum in
// different orders), the scalar one against double, and a sub-range [3, n_rows - 1) of rows: the
// same bits as gemv_rows on that range per activation row, the other outputs untouched.
TEST(matmul, gemv_batch_avx2_matches_scalar_and_double) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    thread_pool pool(1);
    for (ggml_type t : all_types) {
        for (int64_t n_cols : col_sizes(t)) {
            for (int64_t n_rows : {1, 4, 37}) {
                const weights w = make_weights(t, n_rows, n_cols, rng);
                for (int64_t n : {2, 5, 13, 64}) {
                    const std::string what = case_name(t, n_rows, n_cols) + " n " + std::to_string(n);
                    const std::vector<float> x = random_floats(rng, sz(n * n_cols));
                    std::vector<double> ref, tol;
                    for (int64_t tk = 0; tk < n; ++tk) {
                        std::vector<double> r1, mag;
                        gemv_double(w, x.data() + tk * n_cols, r1, mag);
                        ref.insert(ref.end(), r1.begin(), r1.end());
                        const std::vector<double> tt = rel_tol(mag, 1e-5);
                        tol.insert(tol.end(), tt.begin(), tt.end());
                    }
                    std::vector<float> ys(sz(n * n_rows)), ya(sz(n * n_rows));
                    kernel_mode_set(kernel_mode::scalar);
                    gemv_batch(w.view(), x.data(), n, ys.data(), pool);
                    expect_close(ys, ref, tol, what + " scalar vs double");
                    if (!cpu_has_avx2()) continue;
                    kernel_mode_set(kernel_mode::avx2);
                    gemv_batch(w.view(), x.data(), n, ya.data(), pool);
                    expect_close(ya, ys, tol, what + " avx2 vs scalar");
                    if (n_rows > 5) {
                        std::vector<float> yr(sz(n * n_rows), -1.0f);
                        gemv_batch_rows(w.view(), x.data(), n, yr.data(), 3, n_rows - 1);
                        for (int64_t tk = 0; tk < n; ++tk) {
                            std::vector<float> one(sz(n_rows), -1.0f);
                            gemv_rows(w.view(), x.data() + tk * n_cols, one.data(), 3, n_rows - 1);
                            const std::vector<float> got(yr.begin() + tk * n_rows, yr.begin() + (tk + 1) * n_rows);
                            expect_bitwise_equal(got, one, what + " rows [3, n-1) token " + std::to_string(tk));
                        }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// quantization

TEST(quantize, q8_0_error_within_half_step) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const int64_t n = 32 * 33;
    for (float range : {1e-3f, 1.0f, 300.0f}) {
        const std::vector<float> x = random_floats(rng, sz(n), -range, range);
        std::vector<block_q8_0> q(sz(n / 32));
        std::vector<float> y(sz(n));
        quantize_row(ggml_type::q8_0, x.data(), q.data(), n);
        dequantize_row(ggml_type::q8_0, q.data(), y.data(), n);
        for (int64_t ib = 0; ib < n / 32; ++ib) {
            float amax = 0.0f;
            for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[sz(ib * 32 + j)]));
            const double d = double(amax / 127.0f);
            const double d16 = fp16_to_fp32(q[sz(ib)].d);
            // q = round(x / d) is within d/2 of x / d; storing d as f16 moves each weight by |q|·|d - d16|.
            const double bound = d / 2 + 127.0 * std::fabs(d - d16) + 1e-6 * d;
            for (int j = 0; j < 32; ++j) {
                const size_t i = sz(ib * 32 + j);
                EXPECT_LE(std::fabs(double(x[i]) - double(y[i])), bound) << "range " << range << " element " << i;
                // round(x · (1/d)) in f32, as ggml: the nearest integer to x / d, up to f32 rounding at ties.
                EXPECT_LE(std::fabs(double(q[sz(ib)].qs[j]) - double(x[i]) / d), 0.5 + 1e-4) << "element " << i;
            }
        }
    }
}

TEST(quantize, q4_0_error_within_half_step) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const int64_t n = 32 * 33;
    for (float range : {1e-3f, 1.0f, 300.0f}) {
        const std::vector<float> x = random_floats(rng, sz(n), -range, range);
        std::vector<block_q4_0> q(sz(n / 32));
        std::vector<float> y(sz(n));
        quantize_row(ggml_type::q4_0, x.data(), q.data(), n);
        dequantize_row(ggml_type::q4_0, q.data(), y.data(), n);
        for (int64_t ib = 0; ib < n / 32; ++ib) {
            float amax = 0.0f, max = 0.0f;
            for (int j = 0; j < 32; ++j) {
                const float v = x[sz(ib * 32 + j)];
                if (std::fabs(v) > amax) amax = std::fabs(v), max = v;
            }
            const double d = std::fabs(double(max / -8.0f));
            const double d16 = std::fabs(double(fp16_to_fp32(q[sz(ib)].d)));
            for (int j = 0; j < 32; ++j) {
                const size_t i = sz(ib * 32 + j);
                // x / d lies in [-8, 8]; the top value 8 (the opposite sign of max) is clamped to
                // nibble 15, one step off. Everything else rounds to within d/2.
                const double steps = double(x[i]) / double(max / -8.0f);
                const double bound = (steps > 7.5 ? d : d / 2) + 8.0 * std::fabs(d - d16) + 1e-6 * d;
                EXPECT_LE(std::fabs(double(x[i]) - double(y[i])), bound) << "range " << range << " element " << i;
            }
        }
    }
}

TEST(quantize, q8_0_and_q4_0_known_block) {
    // x_j = j - 16: the largest magnitude is x_0 = -16.
    float x[32];
    for (int j = 0; j < 32; ++j) x[j] = float(j - 16);

    block_q4_0 b4;
    quantize_row(ggml_type::q4_0, x, &b4, 32);
    EXPECT_EQ(fp16_to_fp32(b4.d), 2.0f);  // d = max / -8 = -16 / -8
    for (int j = 0; j < 16; ++j) {
        // nibble = min(15, trunc(x / 2 + 8.5)); weight j in the low nibble of qs[j], j + 16 in the high one.
        const int lo = std::min(15, int(float(j - 16) / 2.0f + 8.5f));
        const int hi = std::min(15, int(float(j) / 2.0f + 8.5f));
        EXPECT_EQ(b4.qs[j] & 0x0f, lo) << j;
        EXPECT_EQ(b4.qs[j] >> 4, hi) << j;
    }
    float y[32];
    dequantize_row(ggml_type::q4_0, &b4, y, 32);
    EXPECT_EQ(y[0], -16.0f);
    EXPECT_EQ(y[31], 14.0f);  // 15 / 2 + 8.5 = 16, clamped to nibble 15: 2 * (15 - 8)

    block_q8_0 b8;
    quantize_row(ggml_type::q8_0, x, &b8, 32);
    EXPECT_EQ(b8.d, fp32_to_fp16(16.0f / 127.0f));
    EXPECT_EQ(b8.qs[0], -127);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(b8.qs[j], int(std::lround(double(j - 16) * 127.0 / 16.0))) << j;

    // An all-zero block has d = 0 and decodes to zeros.
    float z[32] = {};
    quantize_row(ggml_type::q8_0, z, &b8, 32);
    quantize_row(ggml_type::q4_0, z, &b4, 32);
    dequantize_row(ggml_type::q8_0, &b8, y, 32);
    for (float v : y) EXPECT_EQ(v, 0.0f);
    dequantize_row(ggml_type::q4_0, &b4, y, 32);
    for (float v : y) EXPECT_EQ(v, 0.0f);
}

// The decoded types' AVX2 dequantize_row (gemm's tiles) gives the scalar reference's bits, on random
// blocks (every bit pattern of quants and sub-block scales, finite f16 scales).
TEST(quantize, decoded_types_avx2_dequantize_bitwise_equal_scalar) {
    HILL_REQUIRE_AVX2();
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    for (ggml_type t : decoded_types) {
        const int64_t n = cols_of(t, 0, 32 * 40);
        const weights w = make_weights(t, 3, n, rng);
        std::vector<float> ya(sz(3 * n));
        kernel_mode_set(kernel_mode::avx2);
        for (int64_t r = 0; r < 3; ++r)
            dequantize_row(t, w.bytes.data() + sz(r) * w.view().row_bytes(), ya.data() + r * n, n);
        expect_bitwise_equal(ya, w.deq, std::string(ggml_type_name(t)) + " avx2 dequantize_row");
    }
}

// One hand-built block per decoded type, its weights computed from the layout of ggml_type.h by
// hand: a wrong nibble, bit or scale position changes some of them. Each block is checked
// element by element against the construction and at a few places against literal values, in
// both kernel modes.
struct known_block {
    ggml_type type;
    std::vector<uint8_t> bytes;
    std::vector<float> want;                    // every weight, from the construction
    std::vector<std::pair<int, float>> spots;  // (weight, value) worked out by hand
};

void put_f16(std::vector<uint8_t> & b, size_t at, float v) {
    const f16_bits h = fp32_to_fp16(v);
    std::memcpy(b.data() + at, &h, 2);
}

std::vector<known_block> known_blocks() {
    std::vector<known_block> out;
    // Blocks of 32: qs[j] = j | (15 - j) << 4, so weight j < 16 has nibble j and weight 16 + j
    // nibble 15 - j.
    auto nib32 = [](int p) { return p < 16 ? p : 31 - p; };
    {
        known_block k{ggml_type::q4_1, std::vector<uint8_t>(20), {}, {}};
        put_f16(k.bytes, 0, 0.5f);
        put_f16(k.bytes, 2, -1.0f);
        for (int j = 0; j < 16; ++j) k.bytes[4 + sz(j)] = uint8_t(j | (15 - j) << 4);
        for (int p = 0; p < 32; ++p) k.want.push_back(0.5f * float(nib32(p)) - 1.0f);
        k.spots = {{3, 0.5f}, {19, 5.0f}, {31, -1.0f}};
        out.push_back(k);
    }
    // Q5_0 / Q5_1: fifth bits qh = 0x80000001 (weights 0 and 31).
    auto q5 = [&](int p) { return nib32(p) + (p == 0 || p == 31 ? 16 : 0); };
    {
        known_block k{ggml_type::q5_0, std::vector<uint8_t>(22), {}, {}};
        put_f16(k.bytes, 0, 0.25f);
        const uint32_t qh = 0x80000001u;
        std::memcpy(k.bytes.data() + 2, &qh, 4);
        for (int j = 0; j < 16; ++j) k.bytes[6 + sz(j)] = uint8_t(j | (15 - j) << 4);
        for (int p = 0; p < 32; ++p) k.want.push_back(0.25f * float(q5(p) - 16));
        k.spots = {{0, 0.0f}, {1, -3.75f}, {15, -0.25f}, {16, -0.25f}, {30, -3.75f}, {31, 0.0f}};
        out.push_back(k);
    }
    {
        known_block k{ggml_type::q5_1, std::vector<uint8_t>(24), {}, {}};
        put_f16(k.bytes, 0, 0.5f);
        put_f16(k.bytes, 2, 2.0f);
        const uint32_t qh = 0x80000001u;
        std::memcpy(k.bytes.data() + 4, &qh, 4);
        for (int j = 0; j < 16; ++j) k.bytes[8 + sz(j)] = uint8_t(j | (15 - j) << 4);
        for (int p = 0; p < 32; ++p) k.want.push_back(0.5f * float(q5(p)) + 2.0f);
        k.spots = {{0, 10.0f}, {1, 2.5f}, {16, 9.5f}, {31, 10.0f}};
        out.push_back(k);
    }
    {
        known_block k{ggml_type::iq4_nl, std::vector<uint8_t>(18), {}, {}};
        put_f16(k.bytes, 0, 2.0f);
        for (int j = 0; j < 16; ++j) k.bytes[2 + sz(j)] = uint8_t(j | (15 - j) << 4);
        for (int p = 0; p < 32; ++p) k.want.push_back(2.0f * float(kvalues_iq4nl[nib32(p)]));
        k.spots = {{0, -254.0f}, {8, 2.0f}, {16, 226.0f}, {31, -254.0f}};
        out.push_back(k);
    }
    // Super-blocks: weight p = 32u + l, 16-weight sub-block s = p / 16.
    {
        // Q2_K: scales[s] = s | (15 - s) << 4; qs bytes 0..31 = 0xE4 (2-bit field f holds f),
        // 32..63 = 0x1B (field f holds 3 - f); d = 1, dmin = 0.5.
        known_block k{ggml_type::q2_k, std::vector<uint8_t>(84), {}, {}};
        for (int s = 0; s < 16; ++s) k.bytes[sz(s)] = uint8_t(s | (15 - s) << 4);
        for (int i = 0; i < 64; ++i) k.bytes[16 + sz(i)] = i < 32 ? 0xE4 : 0x1B;
        put_f16(k.bytes, 80, 1.0f);
        put_f16(k.bytes, 82, 0.5f);
        for (int p = 0; p < 256; ++p) {
            const int u = p / 32, s = p / 16, q = u < 4 ? u % 4 : 3 - u % 4;
            k.want.push_back(float(s * q) - 0.5f * float(15 - s));
        }
        k.spots = {{0, -7.5f}, {40, -4.5f}, {150, 24.0f}, {255, 0.0f}};
        out.push_back(k);
    }
    {
        // Q3_K: 6-bit scale of sub-block s = s + 24 (so w = d · (s - 8) · q), packed: low nibbles
        // in scales[0..7] (s < 8: low half, s >= 8: high half of scales[s - 8]), the two high
        // bits in scales[8 + s % 4] at bit 2 · (s / 4); hmask bytes 0xAA (high bit set for odd u);
        // qs bytes 0xE4; d = 1. q = (u % 4) - 4 + 4 · (u odd).
        known_block k{ggml_type::q3_k, std::vector<uint8_t>(110), {}, {}};
        for (int l = 0; l < 32; ++l) k.bytes[sz(l)] = 0xAA;
        for (int i = 0; i < 64; ++i) k.bytes[32 + sz(i)] = 0xE4;
        uint8_t * sc = k.bytes.data() + 96;
        for (int s = 0; s < 16; ++s) {
            const int v = s + 24;
            sc[s % 8] |= uint8_t((v & 15) << (s < 8 ? 0 : 4));
            sc[8 + s % 4] |= uint8_t((v >> 4) << (2 * (s / 4)));
        }
        put_f16(k.bytes, 108, 1.0f);
        for (int p = 0; p < 256; ++p) {
            const int u = p / 32, s = p / 16, q = u % 4 - 4 + (u % 2 ? 4 : 0);
            k.want.push_back(float(s - 8) * float(q));  // -0 where the scale is 0 and q < 0, as d · sc · q
        }
        k.spots = {{0, 32.0f}, {40, -6.0f}, {100, -6.0f}, {255, 21.0f}};
        out.push_back(k);
    }
    // Q4_K / Q5_K: scale 9u and min 63 - 9u of sub-block u (6 bits: u < 4 in the low 6 bits of
    // scales[u] and scales[u + 4]; u >= 4: low nibbles of scales[u + 4], high bits in the top two
    // bits of scales[u - 4] and scales[u]); qs[i] = i % 16 | (15 - i % 16) << 4, so weight 32u + l
    // has nibble l % 16 (u even) or 15 - l % 16 (u odd); d = dmin = 1. Q5_K: qh bytes 0x55 (the
    // fifth bit set for even u).
    for (bool five : {false, true}) {
        const size_t bytes = five ? 176 : 144, qs_at = five ? 48 : 16;
        known_block k{five ? ggml_type::q5_k : ggml_type::q4_k, std::vector<uint8_t>(bytes), {}, {}};
        put_f16(k.bytes, 0, 1.0f);
        put_f16(k.bytes, 2, 1.0f);
        uint8_t * s = k.bytes.data() + 4;
        for (int u = 0; u < 8; ++u) {
            const int sc = 9 * u, mn = 63 - 9 * u;
            if (u < 4) {
                s[u] |= uint8_t(sc);
                s[u + 4] |= uint8_t(mn);
            } else {
                s[u + 4] = uint8_t((sc & 15) | (mn & 15) << 4);
                s[u - 4] |= uint8_t((sc >> 4) << 6);
                s[u] |= uint8_t((mn >> 4) << 6);
            }
        }
        if (five) {
            for (int l = 0; l < 32; ++l) k.bytes[16 + sz(l)] = 0x55;
        }
        for (int i = 0; i < 128; ++i) k.bytes[qs_at + sz(i)] = uint8_t(i % 16 | (15 - i % 16) << 4);
        for (int p = 0; p < 256; ++p) {
            const int u = p / 32, l = p % 32;
            const int q = (u % 2 ? 15 - l % 16 : l % 16) + (five && u % 2 == 0 ? 16 : 0);
            k.want.push_back(float(9 * u * q - (63 - 9 * u)));
        }
        if (five) k.spots = {{0, -63.0f}, {33, 72.0f}, {64, 243.0f}, {200, 1287.0f}};
        else k.spots = {{0, -63.0f}, {33, 72.0f}, {200, 423.0f}, {255, 0.0f}};
        out.push_back(k);
    }
    {
        // Q6_K: ql[i] = i % 16 | (15 - i % 16) << 4; qh bytes 0xE4 (2-bit field f holds f);
        // scales[s] = s - 8; d = 0.5. Weight p = 128n + 32f + l: low 4 bits from ql[64n + 32(f % 2) + l]
        // (low nibble for f < 2), high 2 bits f; q - 32.
        known_block k{ggml_type::q6_k, std::vector<uint8_t>(210), {}, {}};
        for (int i = 0; i < 128; ++i) k.bytes[sz(i)] = uint8_t(i % 16 | (15 - i % 16) << 4);
        for (int i = 0; i < 64; ++i) k.bytes[128 + sz(i)] = 0xE4;
        for (int s = 0; s < 16; ++s) k.bytes[192 + sz(s)] = uint8_t(int8_t(s - 8));
        put_f16(k.bytes, 208, 0.5f);
        for (int p = 0; p < 256; ++p) {
            const int f = (p % 128) / 32, l = p % 32;
            const int lo = f < 2 ? l % 16 : 15 - l % 16;
            k.want.push_back(0.5f * float(p / 16 - 8) * float(lo + 16 * f - 32));
        }
        k.spots = {{0, 128.0f}, {70, -18.0f}, {161, -15.0f}, {255, 56.0f}};
        out.push_back(k);
    }
    {
        // IQ4_XS: 6-bit scale of sub-block u = 8u + 5 (low nibble in scales_l[u / 2] at 4 · (u % 2),
        // high 2 bits in scales_h at 2u), w = d · (8u + 5 - 32) · kvalues[nibble]; qs[16u + j] =
        // j | (15 - j) << 4; d = 1.
        known_block k{ggml_type::iq4_xs, std::vector<uint8_t>(136), {}, {}};
        put_f16(k.bytes, 0, 1.0f);
        uint16_t scales_h = 0;
        for (int u = 0; u < 8; ++u) {
            const int ls = 8 * u + 5;
            k.bytes[4 + sz(u / 2)] |= uint8_t((ls & 15) << (4 * (u % 2)));
            scales_h = uint16_t(scales_h | (ls >> 4) << (2 * u));
        }
        std::memcpy(k.bytes.data() + 2, &scales_h, 2);
        for (int i = 0; i < 128; ++i) k.bytes[8 + sz(i)] = uint8_t(i % 16 | (15 - i % 16) << 4);
        for (int p = 0; p < 256; ++p) {
            const int u = p / 32;
            k.want.push_back(float((8 * u - 27) * kvalues_iq4nl[nib32(p % 32)]));
        }
        k.spots = {{0, 3429.0f}, {60, 1235.0f}, {100, 147.0f}, {255, -3683.0f}};
        out.push_back(k);
    }
    return out;
}

TEST(quantize, decoded_types_known_block) {
    mode_guard g;
    thread_pool pool(1);
    for (const known_block & k : known_blocks()) {
        ASSERT_EQ(k.bytes.size(), ggml_block_bytes(k.type)) << ggml_type_name(k.type);
        const int64_t n = ggml_block_size(k.type);
        ASSERT_EQ(int64_t(k.want.size()), n);
        for (kernel_mode m : test::kernel_modes_tested()) {
            kernel_mode_set(m);
            const std::string what = std::string(ggml_type_name(k.type)) + (m == kernel_mode::avx2 ? " avx2" : " scalar");
            std::vector<float> y(sz(n));
            dequantize_row(k.type, k.bytes.data(), y.data(), n);
            expect_bitwise_equal(y, k.want, what);
            for (auto [p, v] : k.spots) EXPECT_EQ(y[sz(p)], v) << what << " weight " << p;
            // The product reads the same weights: W · e_p = w_p.
            for (auto [p, v] : k.spots) {
                std::vector<float> x(sz(n), 0.0f);
                x[sz(p)] = 1.0f;
                float out = 0.0f;
                gemv({k.type, 1, n, k.bytes.data()}, x.data(), &out, pool);
                EXPECT_EQ(out, v) << what << " gemv picks weight " << p;
            }
        }
    }
}

// Round trips through the encoders of matmul.h: every weight within its bound.
TEST(quantize, q4_1_q5_1_error_within_half_step) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const int64_t n = 32 * 33;
    for (ggml_type t : {ggml_type::q4_1, ggml_type::q5_1}) {
        for (auto [lo, hi] : {std::pair{-1e-3f, 1e-3f}, std::pair{-1.0f, 1.0f}, std::pair{2.0f, 300.0f}}) {
            const std::vector<float> x = random_floats(rng, sz(n), lo, hi);
            std::vector<uint8_t> q(*ggml_row_bytes(t, n));
            std::vector<float> y(sz(n));
            quantize_row(t, x.data(), q.data(), n);
            dequantize_row(t, q.data(), y.data(), n);
            for (int64_t ib = 0; ib < n / 32; ++ib) {
                f16_bits dh;
                std::memcpy(&dh, q.data() + sz(ib) * ggml_block_bytes(t), 2);
                const double d = fp16_to_fp32(dh);
                for (int j = 0; j < 32; ++j) {
                    const size_t i = sz(ib * 32 + j);
                    EXPECT_LE(std::fabs(double(x[i]) - double(y[i])), d / 2 + 1e-5 * (d + std::fabs(x[i])))
                        << ggml_type_name(t) << " range " << hi << " element " << i;
                }
            }
        }
    }
}

TEST(quantize, q5_0_error_within_half_step) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const int64_t n = 32 * 33;
    for (float range : {1e-3f, 1.0f, 300.0f}) {
        const std::vector<float> x = random_floats(rng, sz(n), -range, range);
        std::vector<block_q5_0> q(sz(n / 32));
        std::vector<float> y(sz(n));
        quantize_row(ggml_type::q5_0, x.data(), q.data(), n);
        dequantize_row(ggml_type::q5_0, q.data(), y.data(), n);
        for (int64_t ib = 0; ib < n / 32; ++ib) {
            float amax = 0.0f, max = 0.0f;
            for (int j = 0; j < 32; ++j) {
                const float v = x[sz(ib * 32 + j)];
                if (std::fabs(v) > amax) amax = std::fabs(v), max = v;
            }
            const double d = std::fabs(double(max / -16.0f));
            const double d16 = std::fabs(double(fp16_to_fp32(q[sz(ib)].d)));
            for (int j = 0; j < 32; ++j) {
                const size_t i = sz(ib * 32 + j);
                // x / d in [-16, 16]; values in (15.5, 16] (the opposite sign of max) clamp to 31.
                const double steps = double(x[i]) / double(max / -16.0f);
                const double bound = (steps > 15.5 ? d : d / 2) + 16.0 * std::fabs(d - d16) + 1e-6 * d;
                EXPECT_LE(std::fabs(double(x[i]) - double(y[i])), bound) << "range " << range << " element " << i;
            }
        }
    }
}

// Q4_K/Q5_K: within half the sub-block's step, at most (max x - min(0, min x) + dmin) / qmax + d;
// Q6_K: within half of max|x| / 31 + d per 16 weights (matmul.h). d and dmin are read from the
// block's f16 fields; the bounds do not depend on how the 6-bit scales are packed.
TEST(quantize, k_quants_error_within_half_step) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const int64_t n = 256 * 9;
    for (ggml_type t : {ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k}) {
        for (auto [lo, hi] : {std::pair{-1e-3f, 1e-3f}, std::pair{-1.0f, 1.0f}, std::pair{-300.0f, 2.0f},
                              std::pair{1.0f, 5.0f}}) {
            std::vector<float> x = random_floats(rng, sz(n), lo, hi);
            // Sub-blocks of very different spreads, and an all-zero one.
            for (int64_t i = 0; i < n; ++i) x[sz(i)] *= float(1 + (i / 32) % 5) / 5.0f;
            std::fill(x.begin() + 256 * 3, x.begin() + 256 * 3 + 32, 0.0f);
            std::vector<uint8_t> q(*ggml_row_bytes(t, n));
            std::vector<float> y(sz(n));
            quantize_row(t, x.data(), q.data(), n);
            dequantize_row(t, q.data(), y.data(), n);
            const size_t bb = ggml_block_bytes(t);
            for (int64_t ib = 0; ib < n / 256; ++ib) {
                const uint8_t * b = q.data() + sz(ib) * bb;
                f16_bits dh, dminh = 0;
                std::memcpy(&dh, b + (t == ggml_type::q6_k ? offsetof(block_q6_k, d) : 0), 2);
                if (t != ggml_type::q6_k) std::memcpy(&dminh, b + 2, 2);
                const double d = fp16_to_fp32(dh), dmin = fp16_to_fp32(dminh);
                const int group = t == ggml_type::q6_k ? 16 : 32;
                const double qmax = t == ggml_type::q4_k ? 15 : 31;
                for (int g0 = 0; g0 < 256; g0 += group) {
                    const float * xg = x.data() + ib * 256 + g0;
                    double mn = 0, mx = xg[0], amax = 0;
                    for (int j = 0; j < group; ++j) {
                        mn = std::min(mn, double(xg[j]));
                        mx = std::max(mx, double(xg[j]));
                        amax = std::max(amax, std::fabs(double(xg[j])));
                    }
                    const double step = t == ggml_type::q6_k ? amax / 31 + d : (mx - mn + dmin) / qmax + d;
                    for (int j = 0; j < group; ++j) {
                        const size_t i = sz(ib * 256 + g0 + j);
                        EXPECT_LE(std::fabs(double(x[i]) - double(y[i])), step / 2 + 1e-5 * (step + std::fabs(x[i])))
                            << ggml_type_name(t) << " range [" << lo << ", " << hi << ") element " << i;
                    }
                }
            }
        }
    }
}

// Every finite f16 (resp. bf16) value survives quantize -> dequantize bit for bit, in both modes.
TEST(quantize, f16_bf16_exact_round_trip) {
    mode_guard g;
    for (kernel_mode m : test::kernel_modes_tested()) {
        kernel_mode_set(m);
        for (ggml_type t : {ggml_type::f16, ggml_type::bf16}) {
            std::vector<float> x;
            for (uint32_t h = 0; h < 65536; ++h) {
                const float v = t == ggml_type::f16 ? fp16_to_fp32(uint16_t(h)) : bf16_to_fp32(uint16_t(h));
                if (std::isfinite(v)) x.push_back(v);
            }
            const int64_t n = int64_t(x.size());
            std::vector<uint16_t> enc(x.size());
            std::vector<float> y(x.size());
            quantize_row(t, x.data(), enc.data(), n);
            dequantize_row(t, enc.data(), y.data(), n);
            expect_bitwise_equal(y, x, std::string(ggml_type_name(t)) + (m == kernel_mode::avx2 ? " avx2" : " scalar"));
        }
    }
    // F32 is a copy.
    std::vector<float> x = {1.5f, -0.0f, 3e-40f, 7.0f};
    std::vector<float> enc(4), y(4);
    quantize_row(ggml_type::f32, x.data(), enc.data(), 4);
    dequantize_row(ggml_type::f32, enc.data(), y.data(), 4);
    expect_bitwise_equal(y, x, "F32");
}

// ---------------------------------------------------------------------------------------------
// ops

TEST(ops, fp16_rows_avx2_match_scalar) {
    HILL_REQUIRE_AVX2();
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    // f16 -> f32: all 65536 patterns (NaNs only need to stay NaN).
    std::vector<uint16_t> all(65536);
    for (uint32_t h = 0; h < 65536; ++h) all[h] = uint16_t(h);
    std::vector<float> fs(all.size()), fa(all.size());
    kernel_mode_set(kernel_mode::scalar);
    fp16_to_fp32_row(all.data(), fs.data(), int64_t(all.size()));
    kernel_mode_set(kernel_mode::avx2);
    fp16_to_fp32_row(all.data(), fa.data(), int64_t(all.size()));
    int bad = 0;
    for (size_t i = 0; i < all.size(); ++i) {
        const bool ok = std::isnan(fs[i]) ? std::isnan(fa[i]) : std::memcmp(&fs[i], &fa[i], 4) == 0;
        if (!ok && ++bad <= 5)
            ADD_FAILURE() << "f16 0x" << std::hex << i << std::dec << ": " << fa[i] << " vs " << fs[i];
    }
    EXPECT_EQ(bad, 0);
    // f32 -> f16 on odd lengths and ranges that reach subnormals, overflow and ties.
    for (int64_t n : {1, 7, 8, 33, 257, 4099}) {
        for (float range : {1e-6f, 1.0f, 7e4f}) {
            std::vector<float> x = random_floats(rng, sz(n), -range, range);
            if (n > 3) x[1] = 1.0f + 1.0f / 2048.0f;  // tie between two f16 values: rounds to even
            std::vector<uint16_t> hs(sz(n)), ha(sz(n));
            kernel_mode_set(kernel_mode::scalar);
            fp32_to_fp16_row(x.data(), hs.data(), n);
            kernel_mode_set(kernel_mode::avx2);
            fp32_to_fp16_row(x.data(), ha.data(), n);
            EXPECT_EQ(ha, hs) << "n " << n << " range " << range;
        }
    }
}

TEST(ops, rmsnorm_matches_double) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    for (kernel_mode m : test::kernel_modes_tested()) {
        kernel_mode_set(m);
        for (int64_t n : {1, 7, 33, 257, 4096}) {
            const std::vector<float> x = random_floats(rng, sz(n), -3.0f, 3.0f);
            const std::vector<float> w = random_floats(rng, sz(n), 0.5f, 1.5f);
            std::vector<float> y(sz(n));
            rmsnorm(x.data(), w.data(), y.data(), n, 1e-5f);
            double ss = 0.0;
            for (float v : x) ss += double(v) * v;
            const double inv = 1.0 / std::sqrt(ss / double(n) + 1e-5);
            std::vector<double> ref(sz(n)), tol(sz(n));
            for (size_t i = 0; i < sz(n); ++i) {
                ref[i] = double(x[i]) * inv * double(w[i]);
                tol[i] = 1e-6 * std::fabs(ref[i]) + 1e-7;
            }
            expect_close(y, ref, tol, "n " + std::to_string(n));
            // In place.
            std::vector<float> xi = x;
            rmsnorm(xi.data(), w.data(), xi.data(), n, 1e-5f);
            expect_bitwise_equal(xi, y, "in place, n " + std::to_string(n));
        }
    }
}

TEST(ops, rope_matches_double_rotation) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const int n_head = 3;
    for (int head_dim : {2, 64, 128}) {
        for (float base : {10000.0f, 500000.0f}) {
            for (float fscale : {1.0f, 0.25f}) {
                for (int64_t pos :
                     {int64_t(0), int64_t(1), int64_t(7), int64_t(4095), int64_t(131071), int64_t(131072)}) {
                    const std::vector<float> x = random_floats(rng, sz(n_head * head_dim));
                    std::vector<float> y = x;
                    rope(y.data(), n_head, head_dim, pos, base, fscale);
                    std::vector<double> ref(x.size()), tol(x.size(), 1e-6);
                    for (int h = 0; h < n_head; ++h) {
                        for (int i = 0; i < head_dim / 2; ++i) {
                            const long double theta = (long double)pos * fscale *
                                                      std::pow((long double)base, -2.0L * i / (long double)head_dim);
                            const long double c = std::cos(theta), s = std::sin(theta);
                            const size_t k = sz(h * head_dim + 2 * i);
                            ref[k] = double(x[k] * c - x[k + 1] * s);
                            ref[k + 1] = double(x[k] * s + x[k + 1] * c);
                        }
                    }
                    expect_close(y, ref, tol,
                                 "head_dim " + std::to_string(head_dim) + " base " + std::to_string(base) + " scale " +
                                     std::to_string(fscale) + " pos " + std::to_string(pos));
                }
            }
        }
    }
}

// HF checkpoints keep Q/K rows for rotate-half RoPE; GGUF permutes them into adjacent pairs (in
// each head, pair row 2i + r is rotate-half row r * head_dim/2 + i). Both layouts must rotate the
// same values by the same angles, so permuting the rotate-half result gives the adjacent-pair
// result bit for bit, also with per-pair frequency factors (Llama 3).
TEST(ops, rope_rotate_half_equals_adjacent_pairs_on_permuted_rows) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const int n_head = 3;
    for (int head_dim : {2, 16, 128}) {
        const std::vector<float> factors = random_floats(rng, sz(head_dim / 2), 1.0f, 8.0f);
        std::vector<double> inv(sz(head_dim / 2));
        rope_inv_freq(head_dim, 500000.0f, 0.5f, factors.data(), inv.data());
        for (int i = 0; i < head_dim / 2; ++i) {
            const double want = 0.5 * std::pow(500000.0, -2.0 * i / head_dim) / double(factors[sz(i)]);
            EXPECT_NEAR(inv[sz(i)], want, 1e-15 * want);
        }
        const auto to_pairs = [&](const std::vector<float> & half) {
            std::vector<float> pairs(half.size());
            for (int h = 0; h < n_head; ++h) {
                for (int i = 0; i < head_dim / 2; ++i) {
                    for (int r = 0; r < 2; ++r) {
                        pairs[sz(h * head_dim + 2 * i + r)] = half[sz(h * head_dim + r * head_dim / 2 + i)];
                    }
                }
            }
            return pairs;
        };
        for (int64_t pos : {int64_t(0), int64_t(5), int64_t(100000)}) {
            const std::vector<float> x = random_floats(rng, sz(n_head * head_dim));
            std::vector<float> half = x, pairs = to_pairs(x);
            rope(half.data(), n_head, head_dim, pos, inv.data(), rope_layout::rotate_half);
            rope(pairs.data(), n_head, head_dim, pos, inv.data(), rope_layout::adjacent_pairs);
            expect_bitwise_equal(to_pairs(half), pairs, "head_dim " + std::to_string(head_dim) + " pos " + std::to_string(pos));
        }
    }
}

TEST(ops, layernorm_relu_bias_match_double) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (int64_t n : {1, 7, 80, 1024}) {
        const std::vector<float> x = random_floats(rng, sz(n), -3.0f, 5.0f);
        const std::vector<float> w = random_floats(rng, sz(n), 0.5f, 1.5f);
        const std::vector<float> b = random_floats(rng, sz(n));
        std::vector<float> y(sz(n));
        layernorm(x.data(), w.data(), b.data(), y.data(), n, 1e-5f);
        double mean = 0.0, var = 0.0;
        for (float v : x) mean += v;
        mean /= double(n);
        for (float v : x) var += (v - mean) * (v - mean);
        var /= double(n);
        std::vector<double> ref(sz(n)), tol(sz(n));
        for (size_t i = 0; i < sz(n); ++i) {
            ref[i] = (x[i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i];
            tol[i] = 1e-6 * (1.0 + std::abs(ref[i]));
        }
        expect_close(y, ref, tol, "layernorm n " + std::to_string(n));
        std::vector<float> xi = x;
        layernorm(xi.data(), w.data(), b.data(), xi.data(), n, 1e-5f);
        expect_bitwise_equal(xi, y, "layernorm in place, n " + std::to_string(n));

        std::vector<float> r = x;
        relu(r.data(), n);
        for (size_t i = 0; i < sz(n); ++i) EXPECT_EQ(r[i], x[i] > 0.0f ? x[i] : 0.0f);
    }
    std::vector<float> y = {1, 2, 3, 4, 5, 6};
    const std::vector<float> bias = {10, 20, 30};
    add_bias_rows(y.data(), bias.data(), 2, 3);
    EXPECT_EQ(y, (std::vector<float>{11, 22, 33, 14, 25, 36}));
}

TEST(ops, swiglu_softmax_add_match_double) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (int64_t n : {1, 7, 33, 257}) {
        const std::vector<float> g = random_floats(rng, sz(n), -8.0f, 8.0f);
        const std::vector<float> u = random_floats(rng, sz(n), -2.0f, 2.0f);
        std::vector<float> y = g;
        swiglu(y.data(), u.data(), n);
        std::vector<double> ref(sz(n)), tol(sz(n));
        for (size_t i = 0; i < sz(n); ++i) {
            ref[i] = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * double(u[i]);
            tol[i] = 1e-6 * std::fabs(ref[i]) + 1e-7;
        }
        expect_close(y, ref, tol, "swiglu n " + std::to_string(n));

        std::vector<float> s = g;
        softmax(s.data(), n);
        const double mx = *std::max_element(g.begin(), g.end());
        double sum = 0.0;
        for (float v : g) sum += std::exp(double(v) - mx);
        for (size_t i = 0; i < sz(n); ++i) {
            ref[i] = std::exp(double(g[i]) - mx) / sum;
            tol[i] = 1e-6 * ref[i] + 1e-9;
        }
        expect_close(s, ref, tol, "softmax n " + std::to_string(n));

        std::vector<float> a = g;
        add_inplace(a.data(), u.data(), n);
        for (size_t i = 0; i < sz(n); ++i) EXPECT_EQ(a[i], g[i] + u[i]);
    }
}

// ---------------------------------------------------------------------------------------------
// attention

// K/V of n_kv tokens, n_head_kv heads, with `pad` extra elements per token row (row_stride >
// n_head_kv * head_dim), stored as f32 or f16; `kf`/`vf` hold the exact f32 values.
struct kv_data {
    ggml_type type;
    int64_t n_kv, row_stride;
    std::vector<float> kf, vf;
    std::vector<uint16_t> kh, vh;
    kv_view view(int64_t n) const {
        kv_view v;
        v.type = type;
        v.k = type == ggml_type::f16 ? static_cast<const void *>(kh.data()) : kf.data();
        v.v = type == ggml_type::f16 ? static_cast<const void *>(vh.data()) : vf.data();
        v.n_kv = n;
        v.row_stride = row_stride;
        return v;
    }
};

kv_data make_kv(ggml_type type, int64_t n_kv, int n_head_kv, int head_dim, int pad, std::mt19937 & rng) {
    kv_data d{type, n_kv, int64_t(n_head_kv) * head_dim + pad, {}, {}, {}, {}};
    d.kf = random_floats(rng, sz(n_kv * d.row_stride));
    d.vf = random_floats(rng, sz(n_kv * d.row_stride));
    if (type == ggml_type::f16) {
        d.kh.resize(d.kf.size());
        d.vh.resize(d.vf.size());
        for (size_t i = 0; i < d.kf.size(); ++i) {
            d.kh[i] = fp32_to_fp16(d.kf[i]);
            d.kf[i] = fp16_to_fp32(d.kh[i]);
            d.vh[i] = fp32_to_fp16(d.vf[i]);
            d.vf[i] = fp16_to_fp32(d.vh[i]);
        }
    }
    return d;
}

// Explicit softmax in double: out[head_dim] of query head q against tokens [0, n) of KV head kvh.
std::vector<double> attention_double(const float * q, const kv_data & kv, int kvh, int64_t n, int head_dim,
                                     double scale) {
    std::vector<double> s(sz(n));
    for (int64_t j = 0; j < n; ++j) {
        double dot = 0.0;
        for (int i = 0; i < head_dim; ++i) dot += double(q[i]) * kv.kf[sz(j * kv.row_stride + kvh * head_dim + i)];
        s[sz(j)] = dot * scale;
    }
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0.0;
    for (double & v : s) sum += (v = std::exp(v - mx));
    std::vector<double> out(sz(head_dim), 0.0);
    for (int64_t j = 0; j < n; ++j) {
        for (int i = 0; i < head_dim; ++i)
            out[sz(i)] += s[sz(j)] / sum * kv.vf[sz(j * kv.row_stride + kvh * head_dim + i)];
    }
    return out;
}

TEST(attention, head_scalar_matches_double_and_avx2_matches_scalar) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    for (ggml_type t : {ggml_type::f32, ggml_type::f16}) {
        for (int head_dim : {1, 7, 33, 64, 128}) {
            for (int64_t n : {1, 7, 33, 100}) {
                const std::string what = std::string(ggml_type_name(t)) + " head_dim " + std::to_string(head_dim) +
                                         " n " + std::to_string(n);
                const kv_data kv = make_kv(t, n, 2, head_dim, 3, rng);
                // Queries large enough that the softmax is peaked and the running max moves.
                const std::vector<float> q = random_floats(rng, sz(head_dim), -4.0f, 4.0f);
                const float scale = 1.0f / std::sqrt(float(head_dim));
                const kv_view v = kv.view(n);
                const size_t eb = t == ggml_type::f16 ? 2 : 4;
                const auto * k1 = static_cast<const uint8_t *>(v.k) + sz(head_dim) * eb;  // KV head 1
                const auto * v1 = static_cast<const uint8_t *>(v.v) + sz(head_dim) * eb;
                std::vector<float> os(sz(head_dim)), oa(sz(head_dim));
                kernel_mode_set(kernel_mode::scalar);
                attention_head(q.data(), t, k1, v1, n, kv.row_stride, head_dim, scale, os.data());
                const std::vector<double> ref = attention_double(q.data(), kv, 1, n, head_dim, scale);
                expect_close(os, ref, std::vector<double>(sz(head_dim), 1e-5), what + " scalar vs double");
                if (cpu_has_avx2()) {
                    kernel_mode_set(kernel_mode::avx2);
                    attention_head(q.data(), t, k1, v1, n, kv.row_stride, head_dim, scale, oa.data());
                    expect_close(oa, os, std::vector<double>(sz(head_dim), 1e-5), what + " avx2 vs scalar");
                }
            }
        }
    }
}

TEST(attention, decode_matches_double_gqa_and_threads) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    thread_pool p1(1), p2(2), p3(3);
    const attention_shape s{8, 2, 64, 0.125f};
    for (kernel_mode m : test::kernel_modes_tested()) {
        kernel_mode_set(m);
        for (ggml_type t : {ggml_type::f32, ggml_type::f16}) {
            const int64_t n_kv = 77;
            const kv_data kv = make_kv(t, n_kv, s.n_head_kv, s.head_dim, 5, rng);
            const std::vector<float> q = random_floats(rng, sz(s.n_head * s.head_dim), -3.0f, 3.0f);
            std::vector<float> o1(q.size()), o2(q.size()), o3(q.size());
            attention_decode(s, q.data(), kv.view(n_kv), o1.data(), p1);
            attention_decode(s, q.data(), kv.view(n_kv), o2.data(), p2);
            attention_decode(s, q.data(), kv.view(n_kv), o3.data(), p3);
            const std::string what = std::string(ggml_type_name(t)) + (m == kernel_mode::avx2 ? " avx2" : " scalar");
            expect_bitwise_equal(o2, o1, what + " 2 threads");
            expect_bitwise_equal(o3, o1, what + " 3 threads");
            std::vector<double> ref;
            for (int h = 0; h < s.n_head; ++h) {
                const std::vector<double> r =
                    attention_double(q.data() + h * s.head_dim, kv, h / 4, n_kv, s.head_dim, s.scale);
                ref.insert(ref.end(), r.begin(), r.end());
            }
            expect_close(o1, ref, std::vector<double>(ref.size(), 1e-5), what + " vs double");
        }
    }
}

TEST(attention, prefill_equals_decode_per_token) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    thread_pool p1(1), p2(2), p3(3);
    // head_dim 32: the group kernel's p·V per head (one slice of 4 column blocks); 64: in tiles of
    // heads (a group of 6: tiles of 4 and 2 heads).
    for (const attention_shape s :
         {attention_shape{8, 2, 32, 1.0f / std::sqrt(32.0f)}, attention_shape{12, 2, 64, 0.125f}}) {
        const int64_t qs = int64_t(s.n_head) * s.head_dim;
        for (kernel_mode m : test::kernel_modes_tested()) {
            kernel_mode_set(m);
            for (ggml_type t : {ggml_type::f32, ggml_type::f16}) {
                for (int64_t p0 : {0, 5, 40, 1100}) {       // 1100: keys in several blocks of 512
                    for (int64_t n_tok : {1, 7, 19, 40}) {  // 40: several tiles of 16
                        // Under the sanitizers (test::sanitizer_build) keys in several blocks with 1 and 19
                        // queries (one; a whole tile and a part), the other counts at the shorter p0s: a
                        // third of the time, which the 1100-key cases take most of.
                        if (test::sanitizer_build && p0 == 1100 && (n_tok == 7 || n_tok == 40)) continue;
                        const std::string what = std::string(ggml_type_name(t)) +
                                                 (m == kernel_mode::avx2 ? " avx2" : " scalar") + " head_dim " +
                                                 std::to_string(s.head_dim) + " p0 " + std::to_string(p0) + " n_tok " +
                                                 std::to_string(n_tok);
                        const int64_t n_kv = p0 + n_tok + 2;  // more KV than the causal mask lets in
                        const kv_data kv = make_kv(t, n_kv, s.n_head_kv, s.head_dim, 1, rng);
                        const std::vector<float> q = random_floats(rng, sz(n_tok * qs), -3.0f, 3.0f);
                        std::vector<float> want(q.size());
                        for (int64_t tk = 0; tk < n_tok; ++tk) {
                            attention_decode(s, q.data() + tk * qs, kv.view(p0 + tk + 1), want.data() + tk * qs, p1);
                        }
                        for (thread_pool * p : {&p1, &p2, &p3}) {
                            std::vector<float> out(q.size(), std::nanf(""));
                            attention_prefill(s, q.data(), n_tok, p0, kv.view(n_kv), out.data(), *p);
                            expect_bitwise_equal(out, want, what + " threads " + std::to_string(p->n_threads()));
                        }
                    }
                }
            }
        }
    }
}

// A prompt's own keys passed in parts split at multiples of attention_key_split (as a prefill segment's
// are, so that a stop lands between parts) give the result of one call bit for bit: with and without a
// sliding window whose rows start inside a part, the fused and the scalar kernels, f32 and f16.
TEST(attention, prefill_keys_split_at_the_key_split_equal_one_call) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    thread_pool pool(2);
    const int64_t n_tok = 2 * attention_key_split + 77, split = attention_key_split;
    for (const int64_t window : {int64_t(0), int64_t(300)}) {
        attention_shape s{8, 2, 16, 0.25f};
        s.window = window;
        const int64_t qs = int64_t(s.n_head) * s.head_dim;
        for (kernel_mode m : test::kernel_modes_tested()) {
            kernel_mode_set(m);
            for (ggml_type t : {ggml_type::f32, ggml_type::f16}) {
                const std::string what = std::string(ggml_type_name(t)) +
                                         (m == kernel_mode::avx2 ? " avx2" : " scalar") + " window " +
                                         std::to_string(window);
                const kv_data kv = make_kv(t, n_tok, s.n_head_kv, s.head_dim, 0, rng);
                const std::vector<float> q = random_floats(rng, sz(n_tok * qs), -3.0f, 3.0f);
                const auto run = [&](int64_t part) {
                    std::vector<float> acc(q.size(), 0.0f);
                    std::vector<softmax_state> st(sz(n_tok * s.n_head));
                    const size_t eb = t == ggml_type::f16 ? 2 : 4;
                    for (int64_t j0 = 0; j0 < n_tok; j0 += part) {
                        kv_view v = kv.view(std::min(part, n_tok - j0));
                        v.k = static_cast<const uint8_t *>(v.k) + sz(j0 * kv.row_stride) * eb;
                        v.v = static_cast<const uint8_t *>(v.v) + sz(j0 * kv.row_stride) * eb;
                        attention_prefill_accumulate(s, q.data(), n_tok, v, nullptr, -j0, acc.data(), st.data(), pool);
                    }
                    for (int64_t i = 0; i < n_tok * s.n_head; ++i) {
                        attention_head_finish(acc.data() + i * s.head_dim, st[sz(i)], s.head_dim,
                                              acc.data() + i * s.head_dim);
                    }
                    return acc;
                };
                const std::vector<float> whole = run(n_tok);
                for (int i = 0; i < 4; ++i) ASSERT_TRUE(std::isfinite(whole[sz(i)])) << what;
                expect_bitwise_equal(run(split), whole, what + " in parts of " + std::to_string(split));
                expect_bitwise_equal(run(2 * split), whole, what + " in parts of " + std::to_string(2 * split));
            }
        }
    }
}

// The GQA decode path (each KV head's K and V read once, block by block, for all its query heads —
// with the AVX2 group kernel where head_dim % 8 == 0 —, in slices when there are fewer KV heads than
// threads) equals the per-head path bit for bit: MHA, GQA (groups of 4 and 8) and MQA, head dims of
// one, one and a part, and two slices of 64 columns, keys in one and in several blocks, through a
// row list and contiguous, any thread count.
TEST(attention, decode_accumulate_by_kv_head_equals_per_head) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    thread_pool p1(1), p2(2), p3(3);
    for (kernel_mode m : test::kernel_modes_tested()) {
        kernel_mode_set(m);
        for (const attention_shape s :
             {attention_shape{8, 8, 32, 0.17f}, attention_shape{8, 2, 32, 0.17f}, attention_shape{5, 1, 64, 0.125f},
              attention_shape{32, 8, 128, 0.088f}, attention_shape{16, 2, 80, 0.11f}}) {
            for (ggml_type t : {ggml_type::f32, ggml_type::f16}) {
                for (const int64_t n_kv : {int64_t(77), int64_t(1300)}) {
                    const std::string what = std::string(ggml_type_name(t)) + (m == kernel_mode::avx2 ? " avx2" : " scalar") +
                                             " heads " + std::to_string(s.n_head) + "/" + std::to_string(s.n_head_kv) +
                                             " n_kv " + std::to_string(n_kv);
                    const kv_data kv = make_kv(t, n_kv, s.n_head_kv, s.head_dim, 3, rng);
                    const std::vector<float> q = random_floats(rng, sz(s.n_head * s.head_dim), -3.0f, 3.0f);
                    std::vector<float> want(q.size());
                    attention_decode(s, q.data(), kv.view(n_kv), want.data(), p1);
                    std::vector<int32_t> rows(static_cast<size_t>(n_kv));
                    for (int32_t i = 0; i < int32_t(n_kv); ++i) rows[size_t(i)] = i;
                    for (const bool listed : {false, true}) {
                        for (thread_pool * p : {&p1, &p2, &p3}) {
                            std::vector<float> out(q.size(), 0.0f);
                            std::vector<softmax_state> st(size_t(s.n_head));
                            attention_decode_accumulate(s, q.data(), kv.view(n_kv), listed ? rows.data() : nullptr,
                                                        out.data(), st.data(), *p);
                            for (int h = 0; h < s.n_head; ++h) {
                                attention_head_finish(out.data() + h * s.head_dim, st[size_t(h)], s.head_dim,
                                                      out.data() + h * s.head_dim);
                            }
                            expect_bitwise_equal(out, want, what + (listed ? " rows" : " contiguous") + " threads " +
                                                                std::to_string(p->n_threads()));
                        }
                    }
                }
            }
        }
    }
}


// Attention over the keys fed in segments, in any order and through index lists, equals attention
// over all keys at once: how attention runs over KV spread across tiers.
TEST(attention, segments_in_any_order_equal_one_pass) {
    const uint32_t seed = test::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    // head_dim 12: the chunks of the scalar reference and the AVX2 dot/axpy path; 16: the fused
    // AVX2 kernel (where this CPU has AVX2).
    for (int head_dim : {12, 16}) {
        for (ggml_type type : {ggml_type::f32, ggml_type::f16}) {
            SCOPED_TRACE(std::string(ggml_type_name(type)) + " head_dim " + std::to_string(head_dim));
            const attention_shape s{8, 2, head_dim, 1.0f / std::sqrt(float(head_dim))};
            const int64_t n = 301, stride = int64_t(s.n_head_kv) * s.head_dim;
            const auto kf = test::random_floats(rng, size_t(n * stride), -2.0f, 2.0f);
            const auto vf = test::random_floats(rng, size_t(n * stride));
            std::vector<uint16_t> kh(kf.size()), vh(vf.size());
            fp32_to_fp16_row(kf.data(), kh.data(), int64_t(kf.size()));
            fp32_to_fp16_row(vf.data(), vh.data(), int64_t(vf.size()));
            const void * k = type == ggml_type::f16 ? static_cast<const void *>(kh.data()) : kf.data();
            const void * v = type == ggml_type::f16 ? static_cast<const void *>(vh.data()) : vf.data();
            const auto q = test::random_floats(rng, size_t(s.n_head * s.head_dim));
            thread_pool pool(2);
            std::vector<float> ref(q.size());
            attention_decode(s, q.data(), kv_view{type, k, v, n, stride}, ref.data(), pool);

            // Tokens in a random order, split into three segments: an index list over the whole
            // buffer, a contiguous block, and another index list.
            std::vector<int32_t> order(static_cast<size_t>(n));
            for (int32_t i = 0; i < int32_t(n); ++i) order[size_t(i)] = i;
            std::shuffle(order.begin(), order.end(), rng);
            std::vector<float> acc(q.size(), 0.0f);
            std::vector<softmax_state> st(size_t(s.n_head));
            attention_decode_accumulate(s, q.data(), kv_view{type, k, v, 100, stride}, order.data(), acc.data(),
                                        st.data(), pool);
            // A contiguous block: copy the rows order[100..150) into their own buffer.
            const size_t eb = type == ggml_type::f16 ? 2 : 4;
            std::vector<uint8_t> kb(50 * size_t(stride) * eb), vb(kb.size());
            for (size_t j = 0; j < 50; ++j) {
                std::memcpy(kb.data() + j * stride * eb,
                            static_cast<const uint8_t *>(k) + size_t(order[100 + j]) * stride * eb, stride * eb);
                std::memcpy(vb.data() + j * stride * eb,
                            static_cast<const uint8_t *>(v) + size_t(order[100 + j]) * stride * eb, stride * eb);
            }
            attention_decode_accumulate(s, q.data(), kv_view{type, kb.data(), vb.data(), 50, stride}, nullptr,
                                        acc.data(), st.data(), pool);
            attention_decode_accumulate(s, q.data(), kv_view{type, k, v, n - 150, stride}, order.data() + 150,
                                        acc.data(), st.data(), pool);
            for (int h = 0; h < s.n_head; ++h) {
                std::vector<float> out(size_t(s.head_dim));
                attention_head_finish(acc.data() + h * s.head_dim, st[size_t(h)], s.head_dim, out.data());
                for (int i = 0; i < s.head_dim; ++i)
                    ASSERT_NEAR(out[size_t(i)], ref[size_t(h * s.head_dim + i)], 2e-6f) << h << " " << i;
            }
        }
    }
}

// The polynomial e^x of the fused AVX2 attention kernel against std::exp in double, over a dense
// grid of its range (x <= 0), the points where its range reduction switches n, and the underflow.
TEST(attention, avx2_exp_matches_std_exp) {
    HILL_REQUIRE_AVX2();
    std::vector<float> x;
    const int n_grid = 1 << 22;
    for (int i = 0; i <= n_grid; ++i) x.push_back(-87.33654f * float(i) / float(n_grid));
    for (int k = 0; k < 126; ++k) {  // x = -(k + 1/2)·ln2 and its neighbours
        const float b = -(float(k) + 0.5f) * 0.69314718f;
        x.insert(x.end(), {std::nextafter(b, 0.0f), b, std::nextafter(b, -1.0f)});
    }
    x.insert(x.end(), {0.0f, -0.0f, -1e-30f, -1e-7f, -87.33654f});
    std::vector<float> y(x.size());
    avx2::exp_nonpositive_row(x.data(), y.data(), int64_t(x.size()));
    double worst = 0.0;
    float worst_x = 0.0f;
    for (size_t i = 0; i < x.size(); ++i) {
        const double want = std::exp(double(x[i]));
        const double rel = std::fabs(double(y[i]) - want) / want;
        if (!(rel <= worst)) {
            worst = rel;
            worst_x = x[i];
        }
    }
    EXPECT_LE(worst, 2e-7) << "at x = " << worst_x;
    EXPECT_EQ(y[0], 1.0f) << "e^0 (the key at the running max weighs exactly 1)";

    // Below ln(FLT_MIN) = -87.3365 the result is 0 (also for -inf); n not a multiple of 8 takes the tail.
    const std::vector<float> under = {std::nextafter(-87.33654f, -100.0f), -88.0f, -100.0f, -1e30f,
                                      -std::numeric_limits<float>::infinity()};
    std::vector<float> yu(under.size(), 1.0f);
    avx2::exp_nonpositive_row(under.data(), yu.data(), int64_t(under.size()));
    for (size_t i = 0; i < under.size(); ++i) EXPECT_EQ(yu[i], 0.0f) << "x = " << under[i];
}

// attention_head_accumulate with the AVX2 kernels (the fused kernel for head_dim % 8 == 0, the
// dot/axpy path otherwise) against the scalar reference, on fresh random K/V with spikes: keys
// whose score jumps to a new maximum at random places (mid-chunk, and growing over the keys, so
// that the running max and the rescale move many times) and keys far below the maximum (their
// e^(s - m) underflows to 0). Keys in order or through a shuffled row list over a larger buffer,
// fed in two segments of random length.
TEST(attention, accumulate_avx2_matches_scalar_with_moving_max) {
    HILL_REQUIRE_AVX2();
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    for (ggml_type t : {ggml_type::f32, ggml_type::f16}) {
        for (int head_dim : {5, 8, 16, 64, 80, 128}) {
            for (int64_t n : {1, 7, 8, 63, 64, 65, 129, 777, 3000}) {
                for (bool use_rows : {false, true}) {
                    const std::string what = std::string(ggml_type_name(t)) + " head_dim " + std::to_string(head_dim) +
                                             " n " + std::to_string(n) + (use_rows ? " rows" : "");
                    SCOPED_TRACE(what);
                    const int64_t n_buf = use_rows ? n + 17 : n;
                    kv_data kv = make_kv(t, n_buf, 2, head_dim, 3, rng);
                    std::vector<int32_t> rows(sz(n_buf));
                    for (int64_t j = 0; j < n_buf; ++j) rows[sz(j)] = int32_t(j);
                    if (use_rows) std::shuffle(rows.begin(), rows.end(), rng);
                    const std::vector<float> q = random_floats(rng, sz(head_dim));
                    const float scale = 1.0f / std::sqrt(float(head_dim));
                    double qq = 0.0;
                    for (float x : q) qq += double(x) * x;

                    // K row of key j (KV head 1) := c·q, so that its score is c·|q|²·scale = target.
                    auto set_score = [&](int64_t j, double target) {
                        const double c = target / (qq * scale);
                        const size_t o = sz(int64_t(rows[sz(j)]) * kv.row_stride + head_dim);
                        for (int i = 0; i < head_dim; ++i) {
                            const float x = float(c * q[sz(i)]);
                            if (t == ggml_type::f16) {
                                kv.kh[o + sz(i)] = fp32_to_fp16(x);
                                kv.kf[o + sz(i)] = fp16_to_fp32(kv.kh[o + sz(i)]);
                            } else {
                                kv.kf[o + sz(i)] = x;
                            }
                        }
                    };
                    std::uniform_int_distribution<int64_t> pick(0, n - 1);
                    // Spikes up to a score of 30 (e^30 times the weight of an ordinary key, whose
                    // score is about ±1), each a new maximum if it comes after the earlier ones.
                    const int64_t n_spike = std::max<int64_t>(1, n / 40);
                    for (int64_t i = 0; i < n_spike; ++i) {
                        set_score(pick(rng), 3.0 + 27.0 * double(i + 1) / double(n_spike));
                        set_score(pick(rng), -120.0);
                    }

                    const int64_t split = std::uniform_int_distribution<int64_t>(0, n)(rng);
                    const kv_view v = kv.view(n_buf);
                    const size_t eb = t == ggml_type::f16 ? 2 : 4;
                    const auto * k1 = static_cast<const uint8_t *>(v.k) + sz(head_dim) * eb;  // KV head 1
                    const auto * v1 = static_cast<const uint8_t *>(v.v) + sz(head_dim) * eb;
                    // The second segment: keys [split, n), as rows + split or rows from k1 + split rows on.
                    const size_t skip = use_rows ? 0 : sz(split * kv.row_stride) * eb;
                    const int32_t * r1 = use_rows ? rows.data() : nullptr;
                    const int32_t * r2 = use_rows ? rows.data() + split : nullptr;
                    auto run = [&](kernel_mode m, softmax_state & st) {
                        kernel_mode_set(m);
                        std::vector<float> acc(sz(head_dim), 0.0f);
                        attention_head_accumulate(q.data(), t, k1, v1, r1, split, kv.row_stride, head_dim, scale,
                                                  acc.data(), st);
                        attention_head_accumulate(q.data(), t, k1 + skip, v1 + skip, r2, n - split, kv.row_stride,
                                                  head_dim, scale, acc.data(), st);
                        attention_head_finish(acc.data(), st, head_dim, acc.data());
                        return acc;
                    };
                    softmax_state ss, sa;
                    const std::vector<float> os = run(kernel_mode::scalar, ss);
                    const std::vector<float> oa = run(kernel_mode::avx2, sa);
                    expect_close(oa, os, std::vector<double>(sz(head_dim), 1e-5), what + " avx2 vs scalar");
                    // m and l: l is relative to m (a sum of e^(s - m)), so l·e^m is compared. Scores of
                    // 30 carry rounding errors near 1e-5 (f32 dots summed in another order), which
                    // move l by as much relative: 1e-4 leaves room.
                    EXPECT_NEAR(sa.m, ss.m, 1e-5 * (1.0 + std::fabs(ss.m)));
                    EXPECT_NEAR(sa.l * std::exp(double(sa.m) - double(ss.m)), ss.l, 1e-4 * ss.l);
                }
            }
        }
    }
}

// The group kernel (avx2::attention_group_accumulate: the query heads of one KV head together, each
// K and V row loaded and widened once for all of them) on fresh random q, K and V: every head's
// accumulator and softmax state equal, bit for bit, those of the kernel run for that head alone
// (n_q = 1: attention_head_accumulate's AVX2 path), and once finished are within 1e-5 of the scalar
// reference. Group sizes 1 to 8 (register tiles of 4, 2 and 1 heads, and their mixes); head dims of
// one slice of up to 64 columns (8, 16, 40: an odd number of 8-column blocks, 64), of two (128) and
// of one and a part (80: the last slice's 2 blocks in accumulator sets); keys in order and through a
// shuffled row list over a larger buffer, fed in two segments of random length (so that chunks of
// 64 keys start at random places), queries large enough that the running maxima move.
TEST(attention, group_kernel_equals_per_head_and_matches_scalar) {
    HILL_REQUIRE_AVX2();
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    for (ggml_type t : {ggml_type::f32, ggml_type::f16}) {
        for (int head_dim : {8, 16, 40, 64, 80, 128}) {
            for (int n_q : {1, 2, 3, 4, 5, 8}) {
                for (bool use_rows : {false, true}) {
                    const int64_t n = std::uniform_int_distribution<int64_t>(1, 300)(rng);
                    const std::string what = std::string(ggml_type_name(t)) + " head_dim " + std::to_string(head_dim) +
                                             " n_q " + std::to_string(n_q) + " n " + std::to_string(n) +
                                             (use_rows ? " rows" : "");
                    SCOPED_TRACE(what);
                    const int64_t n_buf = use_rows ? n + 17 : n;
                    const kv_data kv = make_kv(t, n_buf, 2, head_dim, 3, rng);
                    std::vector<int32_t> rows(sz(n_buf));
                    for (int64_t j = 0; j < n_buf; ++j) rows[sz(j)] = int32_t(j);
                    if (use_rows) std::shuffle(rows.begin(), rows.end(), rng);
                    const std::vector<float> q = random_floats(rng, sz(n_q * head_dim), -4.0f, 4.0f);
                    const float scale = 1.0f / std::sqrt(float(head_dim));
                    const int64_t split = std::uniform_int_distribution<int64_t>(0, n)(rng);
                    const kv_view v = kv.view(n_buf);
                    const size_t eb = t == ggml_type::f16 ? 2 : 4;
                    const size_t row_bytes = sz(kv.row_stride) * eb;
                    const auto * k1 = static_cast<const uint8_t *>(v.k) + sz(head_dim) * eb;  // KV head 1
                    const auto * v1 = static_cast<const uint8_t *>(v.v) + sz(head_dim) * eb;
                    // The second segment: keys [split, n), as rows + split or rows from k1 + split rows on.
                    const size_t skip = use_rows ? 0 : sz(split) * row_bytes;
                    const int32_t * r1 = use_rows ? rows.data() : nullptr;
                    const int32_t * r2 = use_rows ? rows.data() + split : nullptr;
                    // Heads [i0, i0 + nq) of q in one kernel call per segment.
                    auto run = [&](int i0, int nq, float * acc, float * m, double * l) {
                        const float * qi = q.data() + i0 * head_dim;
                        // The first segment may prefetch the second's keys.
                        avx2::attention_group_accumulate(qi, nq, t, k1, v1, r1, split, n - split, row_bytes, head_dim,
                                                         scale, acc, m, l);
                        avx2::attention_group_accumulate(qi, nq, t, k1 + skip, v1 + skip, r2, n - split, 0, row_bytes,
                                                         head_dim, scale, acc, m, l);
                    };
                    std::vector<float> acc(q.size(), 0.0f);
                    std::vector<float> m(sz(n_q), -std::numeric_limits<float>::infinity());
                    std::vector<double> l(sz(n_q), 0.0);
                    run(0, n_q, acc.data(), m.data(), l.data());
                    for (int i = 0; i < n_q; ++i) {
                        const std::string head = what + " head " + std::to_string(i);
                        const auto slice = [&](const std::vector<float> & x) {
                            return std::vector<float>(x.begin() + i * head_dim, x.begin() + (i + 1) * head_dim);
                        };
                        std::vector<float> acc1(sz(head_dim), 0.0f);
                        float m1 = -std::numeric_limits<float>::infinity();
                        double l1 = 0.0;
                        run(i, 1, acc1.data(), &m1, &l1);
                        expect_bitwise_equal(slice(acc), acc1, head + " group vs alone");
                        EXPECT_EQ(std::memcmp(&m[sz(i)], &m1, sizeof m1), 0)
                            << head << ": m " << m[sz(i)] << " vs " << m1;
                        EXPECT_EQ(std::memcmp(&l[sz(i)], &l1, sizeof l1), 0)
                            << head << ": l " << l[sz(i)] << " vs " << l1;

                        kernel_mode_set(kernel_mode::scalar);
                        std::vector<float> ref(sz(head_dim), 0.0f);
                        softmax_state st;
                        attention_head_accumulate(q.data() + i * head_dim, t, k1, v1, r1, split, kv.row_stride,
                                                  head_dim, scale, ref.data(), st);
                        attention_head_accumulate(q.data() + i * head_dim, t, k1 + skip, v1 + skip, r2, n - split,
                                                  kv.row_stride, head_dim, scale, ref.data(), st);
                        attention_head_finish(ref.data(), st, head_dim, ref.data());
                        std::vector<float> out = slice(acc);
                        attention_head_finish(out.data(), softmax_state{m[sz(i)], l[sz(i)]}, head_dim, out.data());
                        expect_close(out, ref, std::vector<double>(sz(head_dim), 1e-5), head + " group vs scalar");
                    }
                }
            }
        }
    }
}

}  // namespace
}  // namespace hill
