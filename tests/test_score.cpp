// Host scorer and token selector (src/score): the AVX2 kernels against the scalar references on fresh
// random inputs, the scalar path against double-precision references, the documented quantization
// error bounds, and the selector against a full-sort reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "compute/kernel_mode.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "score/host_scorer.h"
#include "score/score_config.h"
#include "score/selector.h"
#include "kernel_test_util.h"
#include "test_util.h"

namespace hill {
namespace {

using test::mode_guard;

using test::fresh_seed;
using test::random_floats;

inline size_t sz(int64_t v) {
    return static_cast<size_t>(v);
}

constexpr double f32_eps = 0x1p-24;  // unit roundoff of f32

// Elements where |got - want| > tol (NaN never within), reported for the first few.
template <class A, class B>
void expect_within(const std::vector<A> & got, const std::vector<B> & want, const std::vector<double> & tol,
                   const std::string & what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    ASSERT_EQ(got.size(), tol.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double diff = std::fabs(double(got[i]) - double(want[i]));
        if (!(diff <= tol[i]) && ++bad <= 5) {
            ADD_FAILURE() << what << ": element " << i << ": " << got[i] << " vs " << want[i] << " (diff " << diff
                          << ", bound " << tol[i] << ")";
        }
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements beyond the bound";
}

// ---------------------------------------------------------------------------------------------
// inputs

// Keys of n_rows tokens, [n_rows, n_head_kv, head_dim] rows `stride` elements apart (3 of padding,
// so that the row stride is not the row width), stored as f16 or f32.
struct key_set {
    ggml_type type;
    int64_t stride;
    std::vector<f16_bits> f16;
    std::vector<float> f32;  // f32 [n_rows, stride]: the exact values (what the f16 bits encode)
    const void * data() const { return type == ggml_type::f16 ? static_cast<const void *>(f16.data()) : f32.data(); }
    kv_view view(int64_t n) const { return {type, data(), nullptr, n, stride}; }
    // Token row `row`, KV head g: its values, and its stored elements.
    const float * head(int64_t row, int g, int head_dim) const { return f32.data() + row * stride + g * head_dim; }
    const void * head_stored(int64_t row, int g, int head_dim) const {
        const int64_t i = row * stride + g * head_dim;
        return type == ggml_type::f16 ? static_cast<const void *>(f16.data() + i) : f32.data() + i;
    }
};

// Each (token, KV head) vector gets its own magnitude 2^[-3, 3) · `magnitude`, so that scales differ.
key_set make_keys(ggml_type type, int64_t n_rows, int n_head_kv, int head_dim, std::mt19937 & rng,
                  float magnitude = 1.0f) {
    key_set k{type, int64_t(n_head_kv) * head_dim + 3, {}, {}};
    k.f32 = random_floats(rng, sz(n_rows * k.stride));
    std::uniform_real_distribution<float> expo(-3.0f, 3.0f);
    for (int64_t r = 0; r < n_rows; ++r) {
        for (int g = 0; g < n_head_kv; ++g) {
            const float m = magnitude * std::exp2(expo(rng));
            float * x = k.f32.data() + r * k.stride + g * head_dim;
            for (int i = 0; i < head_dim; ++i) x[i] *= m;
        }
    }
    if (type == ggml_type::f16) {
        k.f16.resize(k.f32.size());
        for (size_t i = 0; i < k.f32.size(); ++i) {
            k.f16[i] = fp32_to_fp16(k.f32[i]);
            k.f32[i] = fp16_to_fp32(k.f16[i]);
        }
    }
    return k;
}

// A decode query f32 [n_head, head_dim] uniform in [-q_range, q_range) and the keys of n_rows tokens
// (make_keys) of shape s.
struct inputs {
    std::vector<float> q;
    key_set keys;
};

inputs make_inputs(const attention_shape & s, ggml_type type, int64_t n_rows, std::mt19937 & rng, float q_range = 1.0f,
                   float key_magnitude = 1.0f) {
    std::vector<float> q = random_floats(rng, sz(s.n_head * s.head_dim), -q_range, q_range);
    return {std::move(q), make_keys(type, n_rows, s.n_head_kv, s.head_dim, rng, key_magnitude)};
}

double q_max_of(score_precision p) {
    return p == score_precision::int8 ? 127.0 : 7.0;
}

// The vectors a path multiplies, in double: q_h (f32, or q̂_h · s_q) and k (as stored, or k̂ · s_k),
// from quantize_symmetric (tested on its own below).
std::vector<double> effective_query(const attention_shape & s, const score_params & p, const std::vector<float> & q) {
    std::vector<double> e(q.begin(), q.end());
    if (p.key == score_precision::fp16 || p.query == query_precision::fp32) return e;
    std::vector<int8_t> v(sz(s.head_dim));
    for (int h = 0; h < s.n_head; ++h) {
        const float sc =
            quantize_symmetric(ggml_type::f32, q.data() + h * s.head_dim, s.head_dim, score_precision::int8, v.data());
        for (int i = 0; i < s.head_dim; ++i) e[sz(h * s.head_dim + i)] = double(v[sz(i)]) * sc;
    }
    return e;
}

std::vector<double> effective_key(const score_params & p, const key_set & keys, int64_t row, int g, int head_dim) {
    const float * x = keys.head(row, g, head_dim);
    std::vector<double> e(x, x + head_dim);
    if (p.key == score_precision::fp16) return e;
    std::vector<int8_t> v(sz(head_dim));
    const float sc = quantize_symmetric(keys.type, keys.head_stored(row, g, head_dim), head_dim, p.key, v.data());
    for (int i = 0; i < head_dim; ++i) e[sz(i)] = double(v[sz(i)]) * sc;
    return e;
}

// Aggregation of per-head values over the query heads of each group: [n_group, n] from
// per_head(h, j) for h in [0, n_head).
template <class F>
std::vector<double> aggregate(const attention_shape & s, const score_params & p, int64_t n, F per_head) {
    const bool layer = p.granularity == select_granularity::layer;
    const int n_group = layer ? 1 : s.n_head_kv, heads = layer ? s.n_head : s.n_head / s.n_head_kv;
    std::vector<double> out(sz(n_group * n));
    for (int g = 0; g < n_group; ++g) {
        for (int64_t j = 0; j < n; ++j) {
            double a = per_head(g * heads, j);
            for (int h = g * heads + 1; h < (g + 1) * heads; ++h) {
                const double v = per_head(h, j);
                a = p.aggregate == score_aggregate::sum ? a + v : std::max(a, v);
            }
            out[sz(g * n + j)] = a;
        }
    }
    return out;
}

struct reference {
    std::vector<double> score;  // [n_group, n]: aggregate of Σ q·k over the effective vectors, in double
    std::vector<double> tol;    // [n_group, n]: f32 rounding bound of the scorer against score
};

// row_of(j): the key row of token j.
template <class R>
reference score_reference(const attention_shape & s, const score_params & p, const std::vector<float> & q,
                          const key_set & keys, int64_t n, R row_of) {
    const std::vector<double> qe = effective_query(s, p, q);
    const int group = s.n_head / s.n_head_kv, hd = s.head_dim;
    std::vector<double> dot(sz(n * s.n_head)), mag(sz(n * s.n_head));  // [n, n_head]
    for (int64_t j = 0; j < n; ++j) {
        for (int g = 0; g < s.n_head_kv; ++g) {
            const std::vector<double> ke = effective_key(p, keys, row_of(j), g, hd);
            for (int h = g * group; h < (g + 1) * group; ++h) {
                double d = 0.0, m = 0.0;
                for (int i = 0; i < hd; ++i) {
                    d += qe[sz(h * hd + i)] * ke[sz(i)];
                    m += std::fabs(qe[sz(h * hd + i)] * ke[sz(i)]);
                }
                dot[sz(j * s.n_head + h)] = d;
                mag[sz(j * s.n_head + h)] = m;
            }
        }
    }
    reference r;
    r.score = aggregate(s, p, n, [&](int h, int64_t j) { return dot[sz(j * s.n_head + h)]; });
    // Each f32 dot of hd products errs by at most hd·u·Σ|q·k| (u the unit roundoff), each scaling by
    // the scales by 3u, and summing n_head of them adds n_head·u·Σ; max aggregation adds nothing. With
    // a summed magnitude for both aggregates (an upper bound of the max's).
    score_params sum = p;
    sum.aggregate = score_aggregate::sum;
    const std::vector<double> m = aggregate(s, sum, n, [&](int h, int64_t j) { return mag[sz(j * s.n_head + h)]; });
    r.tol.resize(m.size());
    for (size_t i = 0; i < m.size(); ++i) r.tol[i] = double(hd + s.n_head + 4) * f32_eps * m[i] + 1e-30;
    return r;
}

// The scorer's scores [n_group, n] for q against tokens [0, n) (rows: their key rows, or null).
std::vector<float> run_scorer(const attention_shape & s, const score_params & p, const std::vector<float> & q,
                              const key_set & keys, const int32_t * rows, int64_t n, thread_pool & pool) {
    host_scorer sc(s, p, pool.n_threads());
    sc.prepare_query(q.data());
    std::vector<float> out(sz(sc.n_group() * n));
    sc.score(keys.view(n), rows, out.data(), n, pool);
    return out;
}

std::vector<score_params> all_params() {
    std::vector<score_params> v;
    for (score_precision k : {score_precision::fp16, score_precision::int8, score_precision::int4}) {
        for (query_precision q : {query_precision::fp32, query_precision::int8}) {
            for (score_aggregate a : {score_aggregate::sum, score_aggregate::max}) {
                for (select_granularity g : {select_granularity::layer, select_granularity::kv_head}) {
                    v.push_back({k, q, a, g});
                }
            }
        }
    }
    return v;
}

std::string case_name(const attention_shape & s, const score_params & p, ggml_type t, bool with_rows) {
    return std::string(name(p.key)) + " keys, " + std::string(name(p.query)) + " query, " +
           std::string(name(p.aggregate)) + ", " + std::string(name(p.granularity)) + ", " +
           std::string(ggml_type_name(t)) + ", heads " + std::to_string(s.n_head) + "/" + std::to_string(s.n_head_kv) +
           ", head_dim " + std::to_string(s.head_dim) + (with_rows ? ", rows" : "");
}

// A shuffled index list of n rows out of n_rows (n <= n_rows).
std::vector<int32_t> random_rows(int64_t n, int64_t n_rows, std::mt19937 & rng) {
    std::vector<int32_t> r(sz(n_rows));
    std::iota(r.begin(), r.end(), 0);
    std::shuffle(r.begin(), r.end(), rng);
    r.resize(sz(n));
    return r;
}

// GQA groups of 4 (the usual case), 7 (every tile size of the kernels: 4 + 2 + 1) and 1 (MHA).
const attention_shape head_layouts[] = {{8, 2, 0, 0.0f}, {14, 2, 0, 0.0f}, {4, 4, 0, 0.0f}};
const int head_dims[] = {8, 64, 80, 128};

// ---------------------------------------------------------------------------------------------
// score_config

TEST(score_config, names_parse_back) {
    for (score_precision v : {score_precision::fp16, score_precision::int8, score_precision::int4})
        EXPECT_EQ(parse_score_precision(name(v)), v);
    for (query_precision v : {query_precision::fp32, query_precision::int8})
        EXPECT_EQ(parse_query_precision(name(v)), v);
    for (score_aggregate v : {score_aggregate::sum, score_aggregate::max}) EXPECT_EQ(parse_score_aggregate(name(v)), v);
    for (select_granularity v : {select_granularity::layer, select_granularity::kv_head})
        EXPECT_EQ(parse_select_granularity(name(v)), v);
    EXPECT_EQ(name(score_precision::int4), "int4");
    EXPECT_EQ(name(select_granularity::kv_head), "kv_head");
}

TEST(score_config, unknown_name_lists_the_valid_ones) {
    try {
        parse_score_precision("int2");
        FAIL() << "no error";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::usage);
        EXPECT_NE(std::string(e.what()).find("'int2'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("fp16, int8, int4"), std::string::npos) << e.what();
    }
    EXPECT_THROW(parse_query_precision("fp16"), error);
    EXPECT_THROW(parse_score_aggregate("mean"), error);
    EXPECT_THROW(parse_select_granularity("Layer"), error);
}

// ---------------------------------------------------------------------------------------------
// quantize_symmetric

// Quantizes x (as f32 and as f16) in the current mode; returns {values, scale} of the f32 input.
struct quantized {
    std::vector<int8_t> v;
    float scale;
};

quantized quantize(const std::vector<float> & x, ggml_type t, score_precision p) {
    quantized r{std::vector<int8_t>(x.size()), 0.0f};
    if (t == ggml_type::f32) {
        r.scale = quantize_symmetric(t, x.data(), int(x.size()), p, r.v.data());
    } else {
        std::vector<f16_bits> h(x.size());
        for (size_t i = 0; i < x.size(); ++i) h[i] = fp32_to_fp16(x[i]);
        r.scale = quantize_symmetric(t, h.data(), int(x.size()), p, r.v.data());
    }
    return r;
}

TEST(quantize_symmetric, rounds_to_nearest_within_range_and_avx2_is_bit_identical) {
    HILL_FRESH_RNG(rng);
    mode_guard mg;
    for (ggml_type t : {ggml_type::f32, ggml_type::f16}) {
        for (score_precision p : {score_precision::int8, score_precision::int4}) {
            for (int n : {1, 7, 8, 31, 32, 33, 64, 80, 128, 257}) {
                const std::string what =
                    std::string(ggml_type_name(t)) + " " + std::string(name(p)) + " n " + std::to_string(n);
                std::vector<float> x = random_floats(rng, sz(n), -3.0f, 3.0f);
                if (t == ggml_type::f16) {
                    for (float & e : x) e = fp16_to_fp32(fp32_to_fp16(e));
                }
                kernel_mode_set(kernel_mode::scalar);
                const quantized qs = quantize(x, t, p);
                double amax = 0.0;
                for (float e : x) amax = std::max(amax, double(std::fabs(e)));
                const double q_max = q_max_of(p);
                EXPECT_NEAR(qs.scale, amax / q_max, amax / q_max * 1e-7) << what;
                for (int i = 0; i < n; ++i) {
                    ASSERT_LE(std::abs(int(qs.v[sz(i)])), int(q_max)) << what << " element " << i;
                    // Nearest: within half a step of x / s (up to the f32 rounding of x · q_max / max|x|).
                    ASSERT_LE(std::fabs(double(qs.v[sz(i)]) - double(x[sz(i)]) * q_max / amax), 0.5 + 1e-5)
                        << what << " element " << i << " x " << x[sz(i)];
                }
                // The element of largest magnitude maps to ±q_max.
                const size_t i_max = size_t(
                    std::max_element(x.begin(), x.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); }) -
                    x.begin());
                EXPECT_EQ(std::abs(int(qs.v[i_max])), int(q_max)) << what;
                if (!cpu_has_avx2()) continue;
                kernel_mode_set(kernel_mode::avx2);
                const quantized qa = quantize(x, t, p);
                EXPECT_EQ(std::memcmp(&qa.scale, &qs.scale, 4), 0) << what;
                EXPECT_EQ(qa.v, qs.v) << what;
            }
        }
    }
}

TEST(quantize_symmetric, known_values_ties_to_even_and_special_inputs) {
    mode_guard mg;
    std::vector<kernel_mode> modes{kernel_mode::scalar};
    if (cpu_has_avx2()) modes.push_back(kernel_mode::avx2);
    for (kernel_mode m : modes) {
        kernel_mode_set(m);
        // max|x| = 127: inv = 1, so the values are x rounded, ties to even. 40 elements reach the
        // AVX2 main loop (32) and its scalar tail.
        std::vector<float> x(40, 0.0f);
        const float in[] = {127.0f, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.5f, -126.6f, 0.49f};
        const int8_t want[] = {127, 2, 4, -2, 0, 0, 2, -127, 0};
        for (size_t i = 0; i < std::size(in); ++i) {
            x[i] = in[i];
            x[35 + i % 5] = in[i % 5];
        }
        quantized r = quantize(x, ggml_type::f32, score_precision::int8);
        EXPECT_EQ(r.scale, 1.0f);
        for (size_t i = 0; i < std::size(in); ++i) EXPECT_EQ(r.v[i], want[i]) << "element " << i;
        for (size_t i = 0; i < 5; ++i) EXPECT_EQ(r.v[35 + i], want[i]) << "tail element " << 35 + i;
        // int4 of [7, -3.5, 1.75]: scale 1, values 7, -4 (tie to even), 2.
        r = quantize({7.0f, -3.5f, 1.75f}, ggml_type::f16, score_precision::int4);
        EXPECT_EQ(r.scale, 1.0f);
        EXPECT_EQ(r.v, (std::vector<int8_t>{7, -4, 2}));
        // All zeros, and values too small to invert: zeros, scale 0.
        r = quantize(std::vector<float>(33, 0.0f), ggml_type::f32, score_precision::int8);
        EXPECT_EQ(r.scale, 0.0f);
        EXPECT_EQ(r.v, std::vector<int8_t>(33, 0));
        r = quantize(std::vector<float>(9, 1e-38f), ggml_type::f32, score_precision::int8);
        EXPECT_EQ(r.scale, 0.0f);
        EXPECT_EQ(r.v, std::vector<int8_t>(9, 0));
        // An inf or NaN element anywhere (main loop or tail): zeros, scale NaN.
        for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()}) {
            for (size_t at : {size_t(3), size_t(37)}) {
                std::vector<float> y(40, 1.0f);
                y[at] = bad;
                for (ggml_type t : {ggml_type::f32, ggml_type::f16}) {
                    r = quantize(y, t, score_precision::int8);
                    EXPECT_TRUE(std::isnan(r.scale)) << bad << " at " << at;
                    EXPECT_EQ(r.v, std::vector<int8_t>(40, 0)) << bad << " at " << at;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// host_scorer

TEST(host_scorer, scalar_matches_double_and_avx2_matches_scalar) {
    HILL_FRESH_RNG(rng);
    mode_guard mg;
    thread_pool pool(2);
    for (attention_shape s : head_layouts) {
        for (int hd : head_dims) {
            s.head_dim = hd;
            const int64_t n_rows = 61, n = 37;
            const std::vector<float> q = random_floats(rng, sz(s.n_head * hd));
            for (ggml_type t : {ggml_type::f16, ggml_type::f32}) {
                const key_set keys = make_keys(t, n_rows, s.n_head_kv, hd, rng);
                for (bool with_rows : {false, true}) {
                    const std::vector<int32_t> rows = random_rows(with_rows ? n : n_rows, n_rows, rng);
                    const int64_t n_tok = with_rows ? n : n_rows;
                    const int32_t * rp = with_rows ? rows.data() : nullptr;
                    for (const score_params & p : all_params()) {
                        const std::string what = case_name(s, p, t, with_rows);
                        kernel_mode_set(kernel_mode::scalar);
                        const std::vector<float> got_s = run_scorer(s, p, q, keys, rp, n_tok, pool);
                        const reference ref =
                            score_reference(s, p, q, keys, n_tok, [&](int64_t j) { return rp ? rp[j] : j; });
                        expect_within(got_s, ref.score, ref.tol, what + ", scalar vs double");
                        if (!cpu_has_avx2()) continue;
                        kernel_mode_set(kernel_mode::avx2);
                        const std::vector<float> got_a = run_scorer(s, p, q, keys, rp, n_tok, pool);
                        if (p.key != score_precision::fp16 && p.query == query_precision::int8) {
                            // Same int8 values and exact int32 sums: the same bits.
                            EXPECT_EQ(std::memcmp(got_a.data(), got_s.data(), got_a.size() * 4), 0)
                                << what << ", avx2 vs scalar";
                        } else {
                            std::vector<double> tol2(ref.tol);
                            for (double & e : tol2) e *= 2.0;  // both err against the reference
                            expect_within(got_a, got_s, tol2, what + ", avx2 vs scalar");
                        }
                    }
                }
            }
        }
    }
}

// Documented bounds (host_scorer.h) against the exact q·k in double, for keys of magnitude m:
//   int keys, fp32 query: per head Σ|q| · s_k · (1/2 + 1e-4), s_k = max|k| / q_max (the 1e-4 covers
//                         the f32 rounding of x · q_max / max|x| and of s_k: |x/s| <= 127 · 2^-23 < 1e-4);
//   int8 query on top:    per head s_q · (1/2 + 1e-4) · Σ(|k| + s_k · (1/2 + 1e-4)) more;
// aggregated as the scores are (sum: summed, max: the max of the bounds); plus the f32 rounding of
// score_reference.
void check_quantization_bounds(float magnitude, const std::vector<int> & dims, std::mt19937 & rng) {
    thread_pool pool(2);
    const attention_shape s0{8, 2, 0, 0.0f};
    for (int hd : dims) {
        attention_shape s = s0;
        s.head_dim = hd;
        const int64_t n = 101;
        const int group = s.n_head / s.n_head_kv;
        const auto [q, keys] = make_inputs(s, ggml_type::f16, n, rng, magnitude / 100, magnitude);
        double err_sum[2] = {0.0, 0.0};  // Σ |error| of int8 and int4 keys (fp32 query)
        for (const score_params & p : all_params()) {
            if (p.key == score_precision::fp16) continue;
            const std::string what =
                case_name(s, p, ggml_type::f16, false) + ", magnitude " + std::to_string(magnitude);
            const std::vector<float> got = run_scorer(s, p, q, keys, nullptr, n, pool);
            score_params exact = p;
            exact.key = score_precision::fp16;  // the stored keys and the f32 query: the exact scores
            const reference ref = score_reference(s, exact, q, keys, n, [](int64_t j) { return j; });
            const double c = 0.5 + 1e-4, q_max = q_max_of(p.key);
            std::vector<double> head_bound(sz(n * s.n_head));
            for (int64_t j = 0; j < n; ++j) {
                for (int h = 0; h < s.n_head; ++h) {
                    const float * k = keys.head(j, h / group, hd);
                    const float * qh = q.data() + h * hd;
                    double k_max = 0.0, q_abs = 0.0, k_abs = 0.0, qh_max = 0.0;
                    for (int i = 0; i < hd; ++i) {
                        k_max = std::max(k_max, double(std::fabs(k[i])));
                        qh_max = std::max(qh_max, double(std::fabs(qh[i])));
                        q_abs += std::fabs(qh[i]);
                        k_abs += std::fabs(k[i]);
                    }
                    const double s_k = k_max / q_max, s_q = qh_max / 127.0;
                    double b = q_abs * s_k * c;
                    if (p.query == query_precision::int8) b += s_q * c * (k_abs + hd * s_k * c);
                    head_bound[sz(j * s.n_head + h)] = b;
                }
            }
            const std::vector<double> bound =
                aggregate(s, p, n, [&](int h, int64_t j) { return head_bound[sz(j * s.n_head + h)]; });
            std::vector<double> tol(bound.size());
            for (size_t i = 0; i < tol.size(); ++i) tol[i] = bound[i] + ref.tol[i];
            expect_within(got, ref.score, tol, what + ", against exact");
            if (p.query == query_precision::fp32) {
                for (size_t i = 0; i < got.size(); ++i) {
                    err_sum[p.key == score_precision::int4] += std::fabs(got[i] - ref.score[i]);
                }
            }
        }
        // The keys are really quantized, and int4 steps are 127/7 ≈ 18 times coarser than int8's: its
        // error must be clearly larger (the factor 4 leaves room for the randomness of 404 sums).
        EXPECT_GT(err_sum[0], 0.0) << "int8 scoring shows no quantization error at all";
        EXPECT_GT(err_sum[1], 4.0 * err_sum[0]) << "int4 error not clearly above int8 error";
    }
}

TEST(host_scorer, quantized_scores_within_documented_bound) {
    HILL_FRESH_RNG(rng);
    check_quantization_bounds(1.0f, {8, 64, 80, 128}, rng);
}

// |k| ~ 1e4 (up to 7e3 · 2^3 = 5.6e4, still finite in f16) and |q| up to 70 over 128 elements: q·k
// ~ 1e7, far beyond f16's 65504. The f32 (and int32) accumulators keep the scores finite and within
// the same bounds.
TEST(host_scorer, large_keys_do_not_overflow) {
    HILL_FRESH_RNG(rng);
    check_quantization_bounds(7e3f, {128}, rng);
    mode_guard mg;
    thread_pool pool(1);
    const attention_shape s{8, 2, 128, 0.0f};
    const auto [q, keys] = make_inputs(s, ggml_type::f16, 9, rng, 100.0f, 8e3f);
    for (const score_params & p : all_params()) {
        const std::vector<float> got = run_scorer(s, p, q, keys, nullptr, 9, pool);
        double max_abs = 0.0;
        for (float v : got) {
            ASSERT_TRUE(std::isfinite(v)) << case_name(s, p, ggml_type::f16, false);
            max_abs = std::max(max_abs, double(std::fabs(v)));
        }
        EXPECT_GT(max_abs, 65504.0) << "the inputs should produce scores beyond the f16 range";
    }
}

TEST(host_scorer, int8_query_close_to_fp32_query) {
    HILL_FRESH_RNG(rng);
    thread_pool pool(1);
    const attention_shape s{8, 2, 128, 0.0f};
    const int64_t n = 53;
    const auto [q, keys] = make_inputs(s, ggml_type::f16, n, rng);
    for (score_precision kp : {score_precision::int8, score_precision::int4}) {
        const score_params pf{kp, query_precision::fp32, score_aggregate::sum, select_granularity::kv_head};
        score_params pi = pf;
        pi.query = query_precision::int8;
        const std::vector<float> a = run_scorer(s, pf, q, keys, nullptr, n, pool);
        const std::vector<float> b = run_scorer(s, pi, q, keys, nullptr, n, pool);
        // |Σ (q - q̂·s_q) · k̂·s_k| <= s_q/2 · Σ|k̂·s_k| per head, summed over the group's 4 heads.
        const reference ref = score_reference(s, pf, q, keys, n, [](int64_t j) { return j; });
        std::vector<double> tol(a.size());
        for (int g = 0; g < 2; ++g) {
            for (int64_t j = 0; j < n; ++j) {
                const std::vector<double> ke = effective_key(pf, keys, j, g, 128);
                double k_abs = 0.0;
                for (double e : ke) k_abs += std::fabs(e);
                double b_sum = 0.0;
                for (int h = g * 4; h < g * 4 + 4; ++h) {
                    float qh_max = 0.0f;
                    for (int i = 0; i < 128; ++i) qh_max = std::max(qh_max, std::fabs(q[sz(h * 128 + i)]));
                    b_sum += qh_max / 127.0 * (0.5 + 1e-4) * k_abs;
                }
                tol[sz(g * n + j)] = b_sum + 2.0 * ref.tol[sz(g * n + j)];
            }
        }
        expect_within(b, a, tol, std::string(name(kp)) + " keys: int8 query vs fp32 query");
        EXPECT_NE(a, b) << "the int8 query should differ somewhere";
    }
}

TEST(host_scorer, same_scores_for_1_2_3_threads_and_rows_equal_gathered_keys) {
    HILL_FRESH_RNG(rng);
    thread_pool p1(1), p2(2), p3(3);
    const attention_shape s{8, 2, 80, 0.0f};
    const int64_t n_rows = 300, n = 211;
    const auto [q, keys] = make_inputs(s, ggml_type::f16, n_rows, rng);
    const std::vector<int32_t> rows = random_rows(n, n_rows, rng);
    key_set gathered = keys;
    for (int64_t j = 0; j < n; ++j) {
        std::copy_n(keys.f16.begin() + rows[sz(j)] * keys.stride, keys.stride, gathered.f16.begin() + j * keys.stride);
    }
    for (const score_params & p : all_params()) {
        const std::string what = case_name(s, p, ggml_type::f16, true);
        const std::vector<float> ref = run_scorer(s, p, q, keys, rows.data(), n, p1);
        EXPECT_EQ(run_scorer(s, p, q, keys, rows.data(), n, p2), ref) << what << ", 2 threads";
        EXPECT_EQ(run_scorer(s, p, q, keys, rows.data(), n, p3), ref) << what << ", 3 threads";
        EXPECT_EQ(run_scorer(s, p, q, gathered, nullptr, n, p3), ref) << what << ", gathered keys";
    }
}

TEST(host_scorer, scores_stride_places_each_group_row) {
    HILL_FRESH_RNG(rng);
    thread_pool pool(2);
    const attention_shape s{8, 2, 64, 0.0f};
    const int64_t n = 17, stride = 40, offset = 5;
    const auto [q, keys] = make_inputs(s, ggml_type::f32, n, rng);
    const score_params p{score_precision::int8, query_precision::fp32, score_aggregate::max,
                         select_granularity::kv_head};
    const std::vector<float> dense = run_scorer(s, p, q, keys, nullptr, n, pool);  // [2, n]
    host_scorer sc(s, p, 2);
    ASSERT_EQ(sc.n_group(), 2);
    sc.prepare_query(q.data());
    std::vector<float> wide(2 * stride, -7.0f);  // [2, stride]: this segment's scores at columns [offset, offset + n)
    sc.score(keys.view(n), nullptr, wide.data() + offset, stride, pool);
    for (int g = 0; g < 2; ++g) {
        for (int64_t c = 0; c < stride; ++c) {
            const float want = c >= offset && c < offset + n ? dense[sz(g * n + c - offset)] : -7.0f;
            EXPECT_EQ(wide[sz(g * stride + c)], want) << "group " << g << " column " << c;
        }
    }
}

TEST(host_scorer, non_finite_key_scores_nan_only_where_it_is) {
    HILL_FRESH_RNG(rng);
    thread_pool pool(1);
    const attention_shape s{8, 2, 64, 0.0f};
    const int64_t n = 6;
    auto [q, keys] = make_inputs(s, ggml_type::f16, n, rng);
    keys.f16[sz(3 * keys.stride + 64 + 10)] = 0x7c00;  // +inf in token 3, KV head 1
    for (query_precision qp : {query_precision::fp32, query_precision::int8}) {
        for (select_granularity gr : {select_granularity::layer, select_granularity::kv_head}) {
            for (score_aggregate ag : {score_aggregate::sum, score_aggregate::max}) {
                const score_params p{score_precision::int8, qp, ag, gr};
                const std::vector<float> got = run_scorer(s, p, q, keys, nullptr, n, pool);
                const int64_t bad = gr == select_granularity::layer ? 3 : n + 3;  // row g = 1 for kv_head
                for (size_t i = 0; i < got.size(); ++i) {
                    EXPECT_EQ(std::isnan(got[i]), int64_t(i) == bad)
                        << case_name(s, p, ggml_type::f16, false) << " at " << i;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// selector

std::vector<int32_t> select(const std::vector<float> & scores, int64_t n_top, int64_t n_sinks, int64_t n_window) {
    token_selector sel(int64_t(scores.size()));
    std::vector<int32_t> out;
    sel.select(scores.data(), int64_t(scores.size()), n_top, n_sinks, n_window, out);
    return out;
}

// The definition, with a full sort: middle tokens by score descending (NaN lowest, -0 == +0), then index.
std::vector<int32_t> select_by_sort(const std::vector<float> & scores, int64_t n_top, int64_t n_sinks,
                                    int64_t n_window) {
    const auto n = int64_t(scores.size());
    const int64_t s_end = std::min(n_sinks, n), w_begin = std::max(s_end, n - n_window);
    std::vector<int32_t> mid(sz(w_begin - s_end));
    std::iota(mid.begin(), mid.end(), int32_t(s_end));
    auto better = [&](int32_t a, int32_t b) {
        const float x = scores[sz(a)], y = scores[sz(b)];
        if (std::isnan(x) || std::isnan(y)) return std::isnan(x) == std::isnan(y) ? a < b : std::isnan(y);
        return x != y ? x > y : a < b;
    };
    std::sort(mid.begin(), mid.end(), better);
    mid.resize(sz(std::min<int64_t>(n_top, int64_t(mid.size()))));
    std::vector<int32_t> out(mid);
    for (int64_t i = 0; i < s_end; ++i) out.push_back(int32_t(i));
    for (int64_t i = w_begin; i < n; ++i) out.push_back(int32_t(i));
    std::sort(out.begin(), out.end());
    return out;
}

TEST(selector, n_top_for_rounds_up) {
    EXPECT_EQ(n_top_for(0.2, 10), 2);
    EXPECT_EQ(n_top_for(0.7, 10), 7);  // 0.7 · 10 = 7.000000000000001 in binary
    EXPECT_EQ(n_top_for(0.2, 11), 3);
    EXPECT_EQ(n_top_for(0.1, 1000), 100);
    EXPECT_EQ(n_top_for(0.3, 1000), 300);
    EXPECT_EQ(n_top_for(1.0, 12345), 12345);
    EXPECT_EQ(n_top_for(0.5, 0), 0);
    EXPECT_EQ(n_top_for(1e-9, 5), 1);
    EXPECT_EQ(n_top_for(0.2000001, 10), 3);
}

TEST(selector, hand_made_scores) {
    //                               0     1     2     3     4     5     6     7     8     9
    const std::vector<float> sc = {9.0f, 0.1f, 5.0f, -1.0f, 7.0f, 5.0f, 0.0f, 8.0f, 2.0f, -9.0f};
    // 1 sink, window 2: middle 1..7; the 3 best there are 7 (8), 4 (7), then 2 and 5 tie at 5: 2 wins.
    EXPECT_EQ(select(sc, 3, 1, 2), (std::vector<int32_t>{0, 2, 4, 7, 8, 9}));
    // No sinks, no window: the 4 best overall.
    EXPECT_EQ(select(sc, 4, 0, 0), (std::vector<int32_t>{0, 2, 4, 7}));
    // n_top 0: sinks and window only.
    EXPECT_EQ(select(sc, 0, 2, 3), (std::vector<int32_t>{0, 1, 7, 8, 9}));
    // Negative scores rank below zero; -0 equals +0 (lower index first).
    std::vector<float> neg = {-3.0f, -0.0f, -1.0f, 0.0f, -2.0f};
    EXPECT_EQ(select(neg, 1, 0, 0), (std::vector<int32_t>{1}));
    EXPECT_EQ(select(neg, 3, 0, 0), (std::vector<int32_t>{1, 2, 3}));
    neg[1] = -1e-30f;
    EXPECT_EQ(select(neg, 1, 0, 0), (std::vector<int32_t>{3}));
}

TEST(selector, ties_pick_the_lowest_indices) {
    const std::vector<float> sc(50, 1.5f);
    EXPECT_EQ(select(sc, 3, 0, 0), (std::vector<int32_t>{0, 1, 2}));
    EXPECT_EQ(select(sc, 3, 4, 10),
              (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49}));
}

TEST(selector, sinks_and_window_overlap_or_exceed_n) {
    const std::vector<float> sc = {1, 2, 3, 4, 5, 6};
    const std::vector<int32_t> all = {0, 1, 2, 3, 4, 5};
    EXPECT_EQ(select(sc, 0, 4, 4), all);   // overlap covers everything
    EXPECT_EQ(select(sc, 0, 10, 0), all);  // sinks beyond n
    EXPECT_EQ(select(sc, 0, 0, 10), all);  // window beyond n
    EXPECT_EQ(select(sc, 1, 3, 2), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(select(sc, 0, 3, 2), (std::vector<int32_t>{0, 1, 2, 4, 5}));
    EXPECT_EQ(select({}, 5, 4, 64), std::vector<int32_t>{});
    EXPECT_EQ(select({3.0f}, 0, 0, 0), std::vector<int32_t>{});
}

TEST(selector, n_top_at_least_the_middle_selects_everything) {
    const std::vector<float> sc = {4, 3, 2, 1, 0, -1, -2};
    const std::vector<int32_t> all = {0, 1, 2, 3, 4, 5, 6};
    EXPECT_EQ(select(sc, 3, 2, 2), all);  // middle 2..4 has 3 tokens
    EXPECT_EQ(select(sc, 100, 2, 2), all);
    EXPECT_EQ(select(sc, 7, 0, 0), all);
    EXPECT_EQ(select(sc, 2, 2, 2), (std::vector<int32_t>{0, 1, 2, 3, 5, 6}));
}

TEST(selector, nan_ranks_lowest) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const std::vector<float> sc = {nan, -inf, nan, 1.0f, nan, -5.0f, nan};
    EXPECT_EQ(select(sc, 2, 0, 0), (std::vector<int32_t>{3, 5}));
    EXPECT_EQ(select(sc, 3, 0, 0), (std::vector<int32_t>{1, 3, 5}));
    EXPECT_EQ(select(sc, 5, 0, 0), (std::vector<int32_t>{0, 1, 2, 3, 5}));  // NaNs by index
    const std::vector<float> all_nan(9, nan);
    EXPECT_EQ(select(all_nan, 2, 1, 1), (std::vector<int32_t>{0, 1, 2, 8}));
}

TEST(selector, equals_full_sort_on_random_scores) {
    HILL_FRESH_RNG(rng);
    token_selector sel;
    std::vector<int32_t> out;
    for (int it = 0; it < 400; ++it) {
        const int64_t n = std::uniform_int_distribution<int64_t>(0, 3000)(rng);
        // Few distinct values (many ties), some NaN, -0 and ±inf, or continuous values.
        const int n_distinct = std::uniform_int_distribution<int>(1, 3)(rng) == 1 ? 4 : 1 << 30;
        std::vector<float> sc(sz(n));
        std::uniform_int_distribution<int> val(-n_distinct / 2, n_distinct / 2), special(0, 49);
        for (float & x : sc) {
            x = float(val(rng)) / 8.0f;
            switch (special(rng)) {
                case 0:
                    x = std::numeric_limits<float>::quiet_NaN();
                    break;
                case 1:
                    x = -0.0f;
                    break;
                case 2:
                    x = std::numeric_limits<float>::infinity();
                    break;
                case 3:
                    x = -std::numeric_limits<float>::infinity();
                    break;
                default:
                    break;
            }
        }
        const int64_t n_top = std::uniform_int_distribution<int64_t>(0, n)(rng);
        const int64_t n_sinks = std::uniform_int_distribution<int64_t>(0, 8)(rng);
        const int64_t n_window = std::uniform_int_distribution<int64_t>(0, 100)(rng);
        sel.select(sc.data(), n, n_top, n_sinks, n_window, out);
        ASSERT_EQ(out, select_by_sort(sc, n_top, n_sinks, n_window))
            << "n " << n << " n_top " << n_top << " sinks " << n_sinks << " window " << n_window;
    }
}

// ---------------------------------------------------------------------------------------------
// softmax aggregate (score/head_softmax.h)

TEST(head_softmax, exp2_and_log2_within_documented_error) {
    for (float x = softmax_x_min; x <= softmax_x_max; x += 0.0137f) {
        EXPECT_LE(std::fabs(double(exp2_approx(x)) / std::exp2(double(x)) - 1.0), 1.6e-4) << x;
    }
    HILL_FRESH_RNG(rng);
    std::uniform_real_distribution<float> e(-125.0f, 107.0f);
    float prev_y = 0.0f, prev_l = -1e9f;
    std::vector<float> ys(20000);
    for (float & y : ys) y = std::exp2(e(rng));
    std::sort(ys.begin(), ys.end());
    for (const float y : ys) {
        const double want = std::log2(double(y));
        const float got = log2_approx(y);
        EXPECT_LE(std::fabs(double(got) - want), 2e-5 + std::fabs(want) * 0x1p-22) << y;
        if (y > prev_y) {
            EXPECT_GE(got, prev_l - 2e-5f) << y;  // increasing up to the error bound
        }
        prev_y = y;
        prev_l = got;
    }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(softmax_weight(nan, 1.0f, 0.0f)));
    EXPECT_TRUE(std::isnan(softmax_score(nan)));
    EXPECT_EQ(softmax_weight(1e30f, 1.0f, 0.0f), exp2_approx(softmax_x_max));  // clamped, finite
    EXPECT_EQ(softmax_weight(-1e30f, 1.0f, 0.0f), exp2_approx(softmax_x_min));
    EXPECT_EQ(softmax_weight(3.0f, 2.0f, 1.0f), exp2_approx(5.0f));
}

// A scorer shape with the attention's scale (the softmax aggregate needs it).
attention_shape scaled(attention_shape s) {
    s.scale = 1.0f / std::sqrt(float(s.head_dim));
    return s;
}

TEST(host_scorer, softmax_aggregate_matches_double_reference) {
    HILL_FRESH_RNG(rng);
    mode_guard mg;
    thread_pool pool(2);
    for (attention_shape s0 : head_layouts) {
        for (int hd : {8, 64}) {
            s0.head_dim = hd;
            const attention_shape s = scaled(s0);
            const int64_t n = 29;
            const double c = std::log2(std::exp(1.0)) * double(s.scale);
            // Queries large enough that some exponents reach both clamps.
            const std::vector<float> q = random_floats(rng, sz(s.n_head * hd), -6.0f, 6.0f);
            const std::vector<float> b = random_floats(rng, sz(s.n_head), -4.0f, 12.0f);
            for (ggml_type t : {ggml_type::f16, ggml_type::f32}) {
                const key_set keys = make_keys(t, n, s.n_head_kv, hd, rng, 4.0f);
                for (score_params p : all_params()) {
                    if (p.aggregate == score_aggregate::max) continue;
                    p.aggregate = score_aggregate::softmax;
                    const std::string what = case_name(s, p, t, false);
                    const std::vector<double> qe = effective_query(s, p, q);
                    const bool layer = p.granularity == select_granularity::layer;
                    const int group = s.n_head / s.n_head_kv, n_group = layer ? 1 : s.n_head_kv;
                    const int heads = layer ? s.n_head : group;
                    std::vector<double> want(sz(n_group * n)), tol(sz(n_group * n));
                    for (int64_t j = 0; j < n; ++j) {
                        for (int gi = 0; gi < n_group; ++gi) {
                            double w = 0.0, x_err = 0.0;
                            for (int h = gi * heads; h < (gi + 1) * heads; ++h) {
                                const std::vector<double> ke = effective_key(p, keys, j, h / group, hd);
                                double d = 0.0, m = 0.0;
                                for (int i = 0; i < hd; ++i) {
                                    d += qe[sz(h * hd + i)] * ke[sz(i)];
                                    m += std::fabs(qe[sz(h * hd + i)] * ke[sz(i)]);
                                }
                                const double x =
                                    std::clamp(d * c - double(b[sz(h)]), double(softmax_x_min), double(softmax_x_max));
                                w += std::exp2(x);
                                // f32 dot and scaling (as score_reference), times c, and the rounding of x.
                                x_err = std::max(x_err, double(hd + s.n_head + 4) * f32_eps * m * c +
                                                            4.0 * f32_eps * (std::fabs(d * c) + std::fabs(b[sz(h)])));
                            }
                            want[sz(gi * n + j)] = std::log2(w);
                            // A relative error e of every weight moves the log2 of their sum by at most e / ln 2.
                            tol[sz(gi * n + j)] = x_err + (1.6e-4 + double(heads) * f32_eps) / std::log(2.0) + 2e-5 +
                                                  std::fabs(std::log2(w)) * 0x1p-22;
                        }
                    }
                    for (kernel_mode m : test::kernel_modes_tested()) {
                        kernel_mode_set(m);
                        host_scorer sc(s, p, pool.n_threads());
                        sc.prepare_query(q.data(), b.data());
                        std::vector<float> got(sz(n_group * n));
                        sc.score(keys.view(n), nullptr, got.data(), n, pool);
                        expect_within(got, want, tol, what + (m == kernel_mode::avx2 ? ", avx2" : ", scalar"));
                    }
                }
            }
        }
    }
}

TEST(host_scorer, softmax_is_the_weights_of_the_per_head_dots_bit_for_bit) {
    // MHA (one query head per KV head): kv_head granularity with sum gives each head's dot alone.
    HILL_FRESH_RNG(rng);
    thread_pool pool(1);
    const attention_shape s = scaled({6, 6, 32, 0.0f});
    const int64_t n = 41;
    const inputs in = make_inputs(s, ggml_type::f16, n, rng, 3.0f, 2.0f);
    const std::vector<float> b = random_floats(rng, sz(s.n_head), -2.0f, 6.0f);
    for (score_precision key : {score_precision::fp16, score_precision::int8, score_precision::int4}) {
        const score_params per_head{key, query_precision::int8, score_aggregate::sum, select_granularity::kv_head};
        const std::vector<float> d = run_scorer(s, per_head, in.q, in.keys, nullptr, n, pool);  // [n_head, n]
        for (select_granularity g : {select_granularity::layer, select_granularity::kv_head}) {
            host_scorer sc(s, {key, query_precision::int8, score_aggregate::softmax, g}, 1);
            sc.prepare_query(in.q.data(), b.data());
            std::vector<float> got(sz(sc.n_group() * n));
            sc.score(in.keys.view(n), nullptr, got.data(), n, pool);
            const float c = log2_e * s.scale;
            for (int64_t j = 0; j < n; ++j) {
                float w = 0.0f;
                for (int h = 0; h < s.n_head; ++h) {
                    const float wh = softmax_weight(d[sz(h * n + j)], c, b[sz(h)]);
                    if (g == select_granularity::kv_head) {
                        EXPECT_EQ(f32_to_bits(got[sz(h * n + j)]), f32_to_bits(softmax_score(wh))) << j << " " << h;
                    }
                    w = h == 0 ? wh : w + wh;
                }
                if (g == select_granularity::layer) {
                    EXPECT_EQ(f32_to_bits(got[sz(j)]), f32_to_bits(softmax_score(w))) << j;
                }
            }
        }
    }
}

TEST(head_log2_mass, matches_double_and_accumulates_over_regions) {
    HILL_FRESH_RNG(rng);
    const attention_shape s = scaled({8, 2, 16, 0.0f});
    const int64_t n = 20;
    const inputs in = make_inputs(s, ggml_type::f16, n, rng, 4.0f, 2.0f);
    const std::vector<int32_t> rows = random_rows(n, n, rng);
    std::vector<float> got(sz(s.n_head), -INFINITY);
    head_log2_mass(s, in.q.data(), in.keys.view(12), rows.data(), got.data());      // 12 tokens, then
    head_log2_mass(s, in.q.data(), in.keys.view(8), rows.data() + 12, got.data());  // the other 8
    const double c = std::log2(std::exp(1.0)) * double(s.scale);
    for (int h = 0; h < s.n_head; ++h) {
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j) {
            const float * k = in.keys.head(j, h / (s.n_head / s.n_head_kv), s.head_dim);
            double d = 0.0;
            for (int i = 0; i < s.head_dim; ++i) d += double(in.q[sz(h * s.head_dim + i)]) * double(k[i]);
            sum += std::exp2(d * c);
        }
        EXPECT_NEAR(got[sz(h)], std::log2(sum), 1e-4 * std::max(1.0, std::fabs(std::log2(sum)))) << h;
    }
    std::vector<float> none(1, -INFINITY);
    head_log2_mass(scaled({1, 1, 16, 0.0f}), in.q.data(), in.keys.view(0), nullptr, none.data());
    EXPECT_EQ(none[0], -INFINITY);  // no token: no mass
}

// A layer whose heads disagree (issue 13 item 9): query head 0 has dots 14x the others' over 24 tokens
// of its own (its attention on the top 3 of them); heads 1-7 attend to 4 other tokens (98% of their
// mass). Summed raw dots rank head 0's tokens first and select none of the 4; the softmax aggregate
// selects all of them and covers nearly all the attention of every head, with the same number of tokens.
struct disagreeing_heads {
    attention_shape s = scaled({8, 2, 16, 0.0f});
    int64_t n = 96;
    int64_t n_sinks = 4, n_window = 4, n_top = 8;
    std::vector<float> q;              // f32 [n_head, head_dim]
    key_set keys;                      // f16 [n, n_head_kv, head_dim]
    std::vector<int32_t> loud, quiet;  // head 0's tokens, the others' tokens
};

disagreeing_heads make_disagreeing_heads(std::mt19937 & rng) {
    disagreeing_heads d;
    const int hd = d.s.head_dim;
    std::normal_distribution<float> noise(0.0f, 0.05f);
    d.q.assign(sz(d.s.n_head * hd), 0.0f);
    for (int h = 0; h < d.s.n_head; ++h) d.q[sz(h * hd + (h == 0 ? 0 : 1))] = h == 0 ? 400.0f : 28.0f;
    for (int64_t t = 10; t < 82; t += 3) d.loud.push_back(int32_t(t));  // 24 tokens
    d.quiet = {20, 47, 65, 86};
    std::vector<float> f32(sz(d.n * d.s.n_head_kv * hd));
    for (float & x : f32) x = noise(rng);
    for (int g = 0; g < d.s.n_head_kv; ++g) {
        for (size_t i = 0; i < d.loud.size(); ++i)
            f32[sz((d.loud[i] * d.s.n_head_kv + g) * hd)] = 0.3f + 0.03f * float(i);
        for (const int32_t t : d.quiet) f32[sz((t * d.s.n_head_kv + g) * hd + 1)] = 1.0f;
    }
    d.keys.type = ggml_type::f16;
    d.keys.stride = int64_t(d.s.n_head_kv) * hd;
    d.keys.f16.resize(f32.size());
    d.keys.f32.resize(f32.size());
    for (size_t i = 0; i < f32.size(); ++i) {
        d.keys.f16[i] = fp32_to_fp16(f32[i]);
        d.keys.f32[i] = fp16_to_fp32(d.keys.f16[i]);
    }
    return d;
}

// Mean over query heads of the softmax mass (scale · q·k, exact in double) of `set`.
double recall_of(const disagreeing_heads & d, const std::vector<int32_t> & set) {
    const int hd = d.s.head_dim, group = d.s.n_head / d.s.n_head_kv;
    double total = 0.0;
    for (int h = 0; h < d.s.n_head; ++h) {
        std::vector<double> logit(sz(d.n));
        for (int64_t t = 0; t < d.n; ++t) {
            const float * k = d.keys.head(t, h / group, hd);
            double x = 0.0;
            for (int i = 0; i < hd; ++i) x += double(d.q[sz(h * hd + i)]) * double(k[i]);
            logit[sz(t)] = x * double(d.s.scale);
        }
        const double m = *std::max_element(logit.begin(), logit.end());
        double all = 0.0, in = 0.0;
        for (int64_t t = 0; t < d.n; ++t) all += std::exp(logit[sz(t)] - m);
        for (const int32_t t : set) in += std::exp(logit[sz(t)] - m);
        total += in / all;
    }
    return total / d.s.n_head;
}

TEST(host_scorer, softmax_selects_what_each_head_attends_where_sum_does_not) {
    HILL_FRESH_RNG(rng);
    thread_pool pool(1);
    const disagreeing_heads d = make_disagreeing_heads(rng);
    // The exact normalizers (over every token): the ranking by Σ_h p_h,t that the aggregate stands for
    // (the decode step normalizes by the sinks' and window's mass instead: head_softmax.h).
    std::vector<float> b(sz(d.s.n_head), -INFINITY);
    head_log2_mass(d.s, d.q.data(), d.keys.view(d.n), nullptr, b.data());
    token_selector sel;
    for (score_precision key : {score_precision::fp16, score_precision::int8, score_precision::int4}) {
        std::vector<int32_t> set[2];
        for (score_aggregate agg : {score_aggregate::sum, score_aggregate::softmax}) {
            host_scorer sc(d.s, {key, query_precision::fp32, agg, select_granularity::layer}, 1);
            sc.prepare_query(d.q.data(), b.data());
            std::vector<float> scores(sz(d.n));
            sc.score(d.keys.view(d.n), nullptr, scores.data(), d.n, pool);
            for (float & x : scores) x = round_score_f16(x);  // as a score block carries it
            sel.select(scores.data(), d.n, d.n_top, d.n_sinks, d.n_window, set[agg == score_aggregate::softmax]);
        }
        SCOPED_TRACE(name(key));
        ASSERT_EQ(set[0].size(), set[1].size());  // the same attended share
        for (const int32_t t : d.quiet) {
            EXPECT_FALSE(std::binary_search(set[0].begin(), set[0].end(), t)) << "sum selected " << t;
            EXPECT_TRUE(std::binary_search(set[1].begin(), set[1].end(), t)) << "softmax missed " << t;
        }
        const double r_sum = recall_of(d, set[0]), r_softmax = recall_of(d, set[1]);
        EXPECT_LT(r_sum, 0.5) << "sum";
        EXPECT_GT(r_softmax, 0.95) << "softmax";
    }
}

}  // namespace
}  // namespace hill
