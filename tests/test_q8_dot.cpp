// The int8 weight products (compute/q8_dot.h, matmul_mode::int8): the AVX2 kernels against the
// scalar reference bit for bit on random blocks, both against a double-precision product of the
// same quantized activations, both against the exact f32 path within the activation's rounding,
// and the batch invariance of matmul.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "compute/kernel_mode.h"
#include "compute/matmul.h"
#include "compute/q8_dot.h"
#include "core/fp16.h"
#include "core/ggml_type.h"
#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "test_util.h"

namespace hill {
namespace {

using test::fresh_seed;
using test::avx2_builds;
using test::isa_guard;
using test::mode_guard;
using test::random_floats;

const ggml_type int8_types[] = {ggml_type::q8_0,   ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1,
                                ggml_type::iq4_nl, ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k};

// Restores the matmul mode a test started with.
struct matmul_mode_guard {
    matmul_mode saved = matmul_mode_get();
    ~matmul_mode_guard() { matmul_mode_set(saved); }
};

inline size_t sz(int64_t v) {
    return static_cast<size_t>(v);
}

// A block's bytes that are scales (f16 d / m / dmin, the k-quants' sub-block scales), not quants.
std::vector<std::pair<size_t, size_t>> scale_fields(ggml_type t) {
    switch (t) {
        case ggml_type::q4_1:
        case ggml_type::q5_1:
            return {{0, 4}};
        case ggml_type::q4_k:
        case ggml_type::q5_k:
            return {{0, 16}};
        case ggml_type::q6_k:
            return {{offsetof(block_q6_k, scales), 18}};
        default:
            return {{0, 2}};
    }
}

// f16 fields among them.
std::vector<size_t> f16_fields(ggml_type t) {
    switch (t) {
        case ggml_type::q4_1:
        case ggml_type::q5_1:
        case ggml_type::q4_k:
        case ggml_type::q5_k:
            return {0, 2};
        case ggml_type::q6_k:
            return {offsetof(block_q6_k, d)};
        default:
            return {0};
    }
}

struct weights {
    ggml_type type;
    int64_t n_rows, n_cols;
    std::vector<uint8_t> bytes;
    std::vector<float> deq;   // f32 [n_rows, n_cols]: the weights the bytes encode
    std::vector<float> deq0;  // the same with every quant zeroed: each weight's offset part (m, -dmin·mn, -32·d·sc)
    weight_view view() const { return {type, n_rows, n_cols, bytes.data()}; }
};

// Random bytes (every quant and scale pattern, Q8_0's -128 included) with finite f16 scales.
weights make_weights(ggml_type type, int64_t n_rows, int64_t n_cols, std::mt19937 & rng) {
    weights w{type, n_rows, n_cols, {}, {}, {}};
    const size_t rb = *ggml_row_bytes(type, n_cols), bb = ggml_block_bytes(type);
    w.bytes.resize(rb * sz(n_rows));
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t & b : w.bytes) b = uint8_t(byte(rng));
    std::uniform_real_distribution<float> scale(-1.0f / 64, 1.0f / 64);
    std::vector<uint8_t> zeroed(w.bytes.size(), 0);
    for (size_t o = 0; o < w.bytes.size(); o += bb) {
        for (size_t f : f16_fields(type)) {
            const f16_bits h = fp32_to_fp16(scale(rng));
            std::memcpy(w.bytes.data() + o + f, &h, 2);
        }
        for (auto [off, n] : scale_fields(type)) std::memcpy(zeroed.data() + o + off, w.bytes.data() + o + off, n);
    }
    w.deq.resize(sz(n_rows * n_cols));
    w.deq0.resize(sz(n_rows * n_cols));
    for (int64_t r = 0; r < n_rows; ++r) {
        dequantize_row(type, w.bytes.data() + sz(r) * rb, w.deq.data() + r * n_cols, n_cols);
        dequantize_row(type, zeroed.data() + sz(r) * rb, w.deq0.data() + r * n_cols, n_cols);
    }
    return w;
}

// The activation row as the int8 product sees it: dx · q8 per block, and dx per value.
void dequantized_activation(ggml_type t, const float * x, int64_t n, std::vector<double> & xq,
                            std::vector<double> & dx) {
    std::vector<uint8_t> q(int8_act_row_bytes(t, n));
    quantize_activation_row(t, x, n, q.data());
    xq.resize(sz(n));
    dx.resize(sz(n));
    const int64_t bs = int8_act_block_size(t);
    for (int64_t ib = 0; ib < n / bs; ++ib) {
        float d;
        const int8_t * qs;
        if (bs == 256) {
            const auto & b = reinterpret_cast<const act_q8k *>(q.data())[ib];
            d = b.d, qs = b.q;
        } else {
            const auto & b = reinterpret_cast<const act_q8 *>(q.data())[ib];
            d = b.d, qs = b.q;
        }
        for (int64_t j = 0; j < bs; ++j) {
            xq[sz(ib * bs + j)] = double(d) * qs[j];
            dx[sz(ib * bs + j)] = d;
        }
    }
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

std::string case_name(ggml_type t, int64_t n_rows, int64_t n_cols, int64_t n_tok) {
    return std::string(ggml_type_name(t)) + " " + std::to_string(n_rows) + "x" + std::to_string(n_cols) + " n_tok " +
           std::to_string(n_tok);
}

TEST(int8_dot, quantize_activation_known_block) {
    // max|x| = 127: d = 1, and q = x rounded to nearest, ties to even.
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f, x[1] = 2.5f, x[2] = -3.5f, x[3] = 0.49f, x[4] = -126.6f;
    act_q8 b;
    quantize_activation_row(ggml_type::q8_0, x.data(), 32, &b);
    EXPECT_EQ(b.d, 1.0f);
    EXPECT_EQ(b.q[0], 127);
    EXPECT_EQ(b.q[1], 2);
    EXPECT_EQ(b.q[2], -4);
    EXPECT_EQ(b.q[3], 0);
    EXPECT_EQ(b.q[4], -127);
    EXPECT_EQ(b.sum, 127 + 2 - 4 - 127);
    // A block of zeros: d = 0, q = 0.
    std::vector<float> z(256, 0.0f);
    z[17] = -254.0f, z[18] = 3.0f;  // group 1: d = 2, q = -127 and 2 (1.5 ties to even)
    act_q8k k;
    quantize_activation_row(ggml_type::q6_k, z.data(), 256, &k);
    EXPECT_EQ(k.d, 2.0f);
    EXPECT_EQ(k.q[17], -127);
    EXPECT_EQ(k.q[18], 2);
    EXPECT_EQ(k.bsum[0], 0);
    EXPECT_EQ(k.bsum[1], -125);
    EXPECT_EQ(int8_act_row_bytes(ggml_type::q4_k, 512), 2 * sizeof(act_q8k));
    EXPECT_EQ(int8_act_row_bytes(ggml_type::q4_0, 64), 2 * sizeof(act_q8));
    EXPECT_FALSE(int8_dot_supported(ggml_type::f16));
    EXPECT_FALSE(int8_dot_supported(ggml_type::iq4_xs));
}

TEST(int8_dot, quantize_activation_avx2_bitwise_scalar) {
    if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU has no AVX2+FMA+F16C: only the scalar kernels run here";
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    for (ggml_type t : {ggml_type::q8_0, ggml_type::q4_k}) {
        const int64_t n = 256 * 5;
        std::vector<float> x = random_floats(rng, sz(n), -3.0f, 3.0f);
        // A block with max 127 and halves (ties), a block of zeros, a block with one value.
        for (int64_t j = 0; j < 256; ++j) x[sz(j)] = float(j % 255 - 127) + (j % 3 == 0 ? 0.5f : 0.0f);
        x[0] = 127.0f;
        std::fill(x.begin() + 256, x.begin() + 512, 0.0f);
        std::fill(x.begin() + 512, x.begin() + 768, 0.0f);
        x[600] = -1e-30f;
        std::vector<uint8_t> qs(int8_act_row_bytes(t, n)), qa(qs.size());
        kernel_mode_set(kernel_mode::scalar);
        quantize_activation_row(t, x.data(), n, qs.data());
        kernel_mode_set(kernel_mode::avx2);
        quantize_activation_row(t, x.data(), n, qa.data());
        EXPECT_EQ(std::memcmp(qs.data(), qa.data(), qs.size()), 0) << ggml_type_name(t);
    }
}

// Scalar and AVX2 against a double product of the same quantized activations (the integer part is
// exact, so only f32 rounding remains: 1e-5 of Σ(|w| + |offset part|)·|x8|), AVX2 bit for bit
// against scalar, and both against the exact f32 path within the activation rounding:
// |int8 − exact| <= Σ_j |w_j| · dx_j / 2 (+ the f32 slack).
TEST(int8_dot, avx2_bitwise_scalar_and_within_bounds) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    matmul_mode_guard mg;
    isa_guard ig;
    thread_pool pool(1);
    for (ggml_type t : int8_types) {
        const int64_t bs = ggml_block_size(t);
        for (int64_t n_cols : {bs, bs * 3, bs * (bs == 256 ? 5 : 29)}) {
            for (int64_t n_rows : {1, 4, 7, 37}) {
                const weights w = make_weights(t, n_rows, n_cols, rng);
                for (int64_t n_tok : {1, 2, 5, 9}) {
                    const std::string what = case_name(t, n_rows, n_cols, n_tok);
                    std::vector<float> x = random_floats(rng, sz(n_tok * n_cols), -2.0f, 2.0f);
                    for (size_t i = 0; i < x.size(); i += 97) x[i] *= 50.0f;  // outliers, as real activations have
                    std::vector<float> ys(sz(n_tok * n_rows)), ya(ys.size()), ye(ys.size());
                    matmul_mode_set(matmul_mode::int8);
                    kernel_mode_set(kernel_mode::scalar);
                    gemv_batch(w.view(), x.data(), n_tok, ys.data(), pool);
                    for (const auto & [isa, name] : avx2_builds()) {
                        kernel_mode_set(kernel_mode::avx2);
                        int8_isa_set(isa);
                        gemv_batch(w.view(), x.data(), n_tok, ya.data(), pool);
                        expect_bitwise_equal(ya, ys, what + name + " vs scalar");
                    }
                    matmul_mode_set(matmul_mode::exact);
                    kernel_mode_set(kernel_mode::scalar);
                    gemv_batch(w.view(), x.data(), n_tok, ye.data(), pool);
                    int bad = 0;
                    for (int64_t tk = 0; tk < n_tok; ++tk) {
                        std::vector<double> xq, dx;
                        dequantized_activation(t, x.data() + tk * n_cols, n_cols, xq, dx);
                        for (int64_t r = 0; r < n_rows; ++r) {
                            const float * wr = w.deq.data() + r * n_cols;
                            const float * w0 = w.deq0.data() + r * n_cols;
                            const float * xr = x.data() + tk * n_cols;
                            double ref = 0.0, mag = 0.0, step = 0.0, magx = 0.0;
                            for (int64_t j = 0; j < n_cols; ++j) {
                                ref += double(wr[j]) * xq[sz(j)];
                                mag += (std::fabs(double(wr[j])) + std::fabs(double(w0[j]))) * std::fabs(xq[sz(j)]);
                                step += std::fabs(double(wr[j])) * dx[sz(j)] / 2;
                                magx += std::fabs(double(wr[j]) * double(xr[j]));
                            }
                            const float got = ys[sz(tk * n_rows + r)], exact = ye[sz(tk * n_rows + r)];
                            const double tol_ref = 1e-5 * mag + 1e-6;
                            const double tol_exact = step * (1 + 1e-5) + tol_ref + 1e-5 * magx;
                            if (!(std::fabs(got - ref) <= tol_ref) && ++bad <= 5) {
                                ADD_FAILURE() << what << " token " << tk << " row " << r << ": " << got << " vs double "
                                              << ref << " (tolerance " << tol_ref << ")";
                            }
                            if (!(std::fabs(double(got) - exact) <= tol_exact) && ++bad <= 5) {
                                ADD_FAILURE() << what << " token " << tk << " row " << r << ": " << got << " vs exact "
                                              << exact << " (bound " << tol_exact << ")";
                            }
                        }
                    }
                    EXPECT_EQ(bad, 0) << what;
                }
            }
        }
    }
}

// matmul.h's batch invariance in the int8 mode: each row of a batch (gemv_batch, gemm up to
// gemm_batch_max_tok, gemv_batch_rows on a sub-range) bit for bit what gemv gives it alone, for 1
// and 3 threads, in both kernel modes (and every AVX2 build). The second shape: a prefill-sized
// product (150 rows, over gemm_batch_max_tok) whose activation rows span several of the kernels'
// token chunks; its gemm is the same too, except through a VNNI build's prefill kernel
// (int8_gemm_supported types), which gives int8_gemm_rows_scalar's bits, within f32 rounding of
// gemv's.
TEST(int8_dot, batch_invariant) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    matmul_mode_guard mg;
    isa_guard ig;
    matmul_mode_set(matmul_mode::int8);
    thread_pool p1(1), p3(3);
    static_assert(gemm_batch_max_tok < 150);
    std::vector<std::tuple<kernel_mode, int8_isa, std::string>> builds = {
        {kernel_mode::scalar, int8_isa::avx2, " scalar"}};
    for (const auto & [isa, name] : avx2_builds()) builds.emplace_back(kernel_mode::avx2, isa, name);
    for (const auto & [m, isa, name] : builds) {
        kernel_mode_set(m);
        if (m == kernel_mode::avx2) int8_isa_set(isa);
        for (ggml_type t : int8_types) {
            const int64_t bs = ggml_block_size(t);
            for (const auto & [n_blocks, n_tok] : {std::pair<int64_t, int64_t>{3, 11}, {bs == 256 ? 5 : 29, 150}}) {
                const int64_t n_cols = bs * n_blocks, n_rows = 45;
                const weights w = make_weights(t, n_rows, n_cols, rng);
                const std::vector<float> x = random_floats(rng, sz(n_tok * n_cols));
                const std::string what = case_name(t, n_rows, n_cols, n_tok) + name;
                std::vector<float> alone(sz(n_tok * n_rows));
                for (int64_t tk = 0; tk < n_tok; ++tk)
                    gemv(w.view(), x.data() + tk * n_cols, alone.data() + tk * n_rows, p1);
                std::vector<float> batch(alone.size()), batch3(alone.size()), viagemm(alone.size());
                gemv_batch(w.view(), x.data(), n_tok, batch.data(), p1);
                gemv_batch(w.view(), x.data(), n_tok, batch3.data(), p3);
                gemm(w.view(), x.data(), n_tok, viagemm.data(), p3);
                expect_bitwise_equal(batch, alone, what + " gemv_batch");
                expect_bitwise_equal(batch3, alone, what + " gemv_batch 3 threads");
                if (n_tok > gemm_batch_max_tok && m == kernel_mode::avx2 && isa != int8_isa::avx2 &&
                    int8_gemm_supported(t)) {
                    // The prefill path: int8_gemm_rows_scalar's bits on the same quantized rows.
                    const size_t ldq = int8_act_row_bytes(t, n_cols);
                    std::vector<uint8_t> xq(ldq * sz(n_tok));
                    for (int64_t tk = 0; tk < n_tok; ++tk)
                        quantize_activation_row(t, x.data() + tk * n_cols, n_cols, xq.data() + sz(tk) * ldq);
                    std::vector<float> want(alone.size());
                    int8_gemm_rows_scalar(t, w.bytes.data(), w.view().row_bytes(), n_cols, xq.data(), ldq, n_tok,
                                          want.data(), n_rows, n_rows);
                    expect_bitwise_equal(viagemm, want, what + " gemm (prefill kernel)");
                    // and within f32 rounding (1e-5 of Σ |w · x|) of the decode order's result
                    for (int64_t tk = 0; tk < n_tok; ++tk) {
                        for (int64_t r = 0; r < n_rows; ++r) {
                            double mag = 0.0;
                            for (int64_t j = 0; j < n_cols; ++j)
                                mag += std::fabs(double(w.deq[sz(r * n_cols + j)]) * x[sz(tk * n_cols + j)]);
                            EXPECT_NEAR(want[sz(tk * n_rows + r)], alone[sz(tk * n_rows + r)], 1e-5 * mag + 1e-6)
                                << what << " token " << tk << " row " << r;
                        }
                    }
                } else {
                    expect_bitwise_equal(viagemm, alone, what + " gemm");
                }
                std::vector<float> part(alone.size(), -1.0f);
                gemv_batch_rows(w.view(), x.data(), n_tok, part.data(), 3, n_rows - 2);
                for (int64_t tk = 0; tk < n_tok; ++tk) {
                    for (int64_t r = 0; r < n_rows; ++r) {
                        const float want = r >= 3 && r < n_rows - 2 ? alone[sz(tk * n_rows + r)] : -1.0f;
                        EXPECT_EQ(std::memcmp(&part[sz(tk * n_rows + r)], &want, 4), 0)
                            << what << " gemv_batch_rows [3, n-2) token " << tk << " row " << r;
                    }
                }
            }
        }
    }
}

// The prefill kernels over more weight rows than one pass of prepared rows holds (about 128 KiB:
// 112 rows of 29 blocks in either VNNI build) and, for the k-quants, more activation rows than one
// chunk (89 of 5 super-blocks): int8_gemm_rows_scalar's bits, the last group of rows partial.
TEST(int8_dot, prefill_kernel_passes_and_chunks) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mode_guard g;
    matmul_mode_guard mg;
    isa_guard ig;
    matmul_mode_set(matmul_mode::int8);
    thread_pool pool(1);
    const int64_t n_rows = 130, n_tok = 100;
    static_assert(gemm_batch_max_tok < n_tok);
    for (const auto & [isa, name] : avx2_builds()) {
        if (isa == int8_isa::avx2) continue;  // no prefill kernel: gemv_batch's tiles
        kernel_mode_set(kernel_mode::avx2);
        int8_isa_set(isa);
        for (ggml_type t : int8_types) {
            if (!int8_gemm_supported(t)) continue;
            const int64_t n_cols = ggml_block_size(t) == 256 ? 5 * 256 : 29 * 32;
            const weights w = make_weights(t, n_rows, n_cols, rng);
            const std::vector<float> x = random_floats(rng, sz(n_tok * n_cols));
            const size_t ldq = int8_act_row_bytes(t, n_cols);
            std::vector<uint8_t> xq(ldq * sz(n_tok));
            for (int64_t tk = 0; tk < n_tok; ++tk)
                quantize_activation_row(t, x.data() + tk * n_cols, n_cols, xq.data() + sz(tk) * ldq);
            std::vector<float> want(sz(n_tok * n_rows)), got(want.size());
            int8_gemm_rows_scalar(t, w.bytes.data(), w.view().row_bytes(), n_cols, xq.data(), ldq, n_tok, want.data(),
                                  n_rows, n_rows);
            gemm(w.view(), x.data(), n_tok, got.data(), pool);
            expect_bitwise_equal(got, want, case_name(t, n_rows, n_cols, n_tok) + name + " gemm (prefill kernel)");
        }
    }
}

// The exact mode keeps the f32 product: a Q8_0 row whose activations are not 8-bit values differs
// between the modes, and the exact one is the f32 product of the decoded weights.
TEST(int8_dot, exact_mode_is_the_f32_product) {
    matmul_mode_guard mg;
    thread_pool pool(1);
    std::vector<float> wf(32, 0.0f), x(32, 0.0f);
    wf[0] = 1.0f, wf[1] = 1.0f;
    x[0] = 1.0f, x[1] = 0.003f;  // 0.003 is 0.381 steps of 1/127: 0 as an int8 activation
    std::vector<uint8_t> wq(sizeof(block_q8_0));
    quantize_row(ggml_type::q8_0, wf.data(), wq.data(), 32);
    std::vector<float> wd(32);
    dequantize_row(ggml_type::q8_0, wq.data(), wd.data(), 32);
    const weight_view w{ggml_type::q8_0, 1, 32, wq.data()};
    float y = 0.0f;
    matmul_mode_set(matmul_mode::exact);
    gemv(w, x.data(), &y, pool);
    EXPECT_NEAR(y, wd[0] * 1.003, 1e-6);
    matmul_mode_set(matmul_mode::int8);
    gemv(w, x.data(), &y, pool);
    EXPECT_NEAR(y, wd[0], 1e-6);
}

}  // namespace
}  // namespace hill
