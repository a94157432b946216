// The storage device (csd/): score blocks, the HLS kernel against the host scorer (bit for bit), the
// running top-k against the selector, plain SSD and emulator passes (same scores, same KV), streaming
// with back-pressure, cancellation, device errors, profiles, and decoding under both devices.
#include "compute/kernel_mode.h"
#include "core/error.h"
#include "csd/device.h"
#include "csd/hls/score_kernel.h"
#include "engine/session.h"
#include "kv/cold_pool.h"
#include "model/synthetic_model.h"
#include "score/selector.h"
#include "kernel_test_util.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <thread>

namespace hill {
namespace {

using test::mode_guard;

using test::fresh_seed;

TEST(score_block, writes_and_reads_tuples_of_6_bytes_per_token) {
    std::vector<uint8_t> bytes(csd::score_block_bytes(3, 1));
    csd::score_block_writer w(bytes.data(), 7, 1);
    const float scores[3] = {1.5f, -2.25f, 70000.0f};
    for (int j = 0; j < 3; ++j) {
        const f16_bits h = score_to_f16(scores[j]);
        w.add(uint32_t(100 + j), &h);
    }
    EXPECT_EQ(w.seal(), 8u + 3u * 6u);
    const csd::score_block_view v(bytes.data());
    EXPECT_EQ(v.n_tokens(), 3);
    EXPECT_EQ(v.layer(), 7);
    EXPECT_EQ(v.n_group(), 1);
    EXPECT_EQ(v.position(2), 102u);
    EXPECT_EQ(v.score(0, 0), 1.5f);
    EXPECT_EQ(v.score(1, 0), -2.25f);
    EXPECT_EQ(v.score(2, 0), 65504.0f);  // saturated, not inf
    EXPECT_TRUE(std::isnan(round_score_f16(std::numeric_limits<float>::quiet_NaN())));
    EXPECT_EQ(csd::score_block_bytes(10, 4), 8u + 10u * 12u);
}

// The kernel's scores equal the host scorer's INT8-query scores bit for bit, for every precision,
// aggregation, granularity, key type and head_dim bucket, and for zero, tiny, inf and NaN keys.
TEST(hls_kernel, scores_equal_the_host_scorer_bit_for_bit) {
    HILL_FRESH_RNG(rng);
    std::normal_distribution<float> nd;
    mode_guard mg;
    thread_pool pool(1);
    struct shape_case {
        int n_head, n_head_kv, head_dim;
    };
    for (const shape_case sc : {shape_case{4, 2, 16}, shape_case{8, 8, 64}, shape_case{6, 2, 100}, shape_case{32, 8, 128},
                                shape_case{2, 1, 256}}) {
        const attention_shape s{sc.n_head, sc.n_head_kv, sc.head_dim, 1.0f};
        const int64_t n = 67, row = int64_t(sc.n_head_kv) * sc.head_dim;
        std::vector<float> kf(size_t(n * row)), q(size_t(sc.n_head * sc.head_dim));
        for (float & x : kf) x = nd(rng) * 3.0f;
        for (float & x : q) x = nd(rng);
        // Special head vectors: all zero, tiny, one inf, one NaN.
        std::fill_n(kf.begin() + 0 * row, sc.head_dim, 0.0f);
        std::fill_n(kf.begin() + 1 * row, sc.head_dim, 1e-38f);
        kf[size_t(2 * row + 3)] = std::numeric_limits<float>::infinity();
        kf[size_t(3 * row + 1)] = std::numeric_limits<float>::quiet_NaN();
        std::vector<f16_bits> kh(kf.size());
        for (size_t i = 0; i < kf.size(); ++i) kh[i] = fp32_to_fp16(kf[i]);
        for (const ggml_type type : {ggml_type::f16, ggml_type::f32}) {
            for (const score_precision key : {score_precision::int8, score_precision::int4}) {
                for (const score_aggregate agg : {score_aggregate::sum, score_aggregate::max}) {
                    for (const select_granularity g : {select_granularity::layer, select_granularity::kv_head}) {
                        for (const kernel_mode m : {kernel_mode::scalar, kernel_mode::avx2}) {
                            if (m == kernel_mode::avx2 && !cpu_has_avx2()) continue;
                            kernel_mode_set(m);
                            SCOPED_TRACE(testing::Message() << "heads " << sc.n_head << "/" << sc.n_head_kv << " d "
                                                            << sc.head_dim << " " << ggml_type_name(type) << " "
                                                            << name(key) << " " << name(agg) << " " << name(g));
                            const score_params sp{key, query_precision::int8, agg, g};
                            host_scorer hs(s, sp, 1);
                            hs.prepare_query(q.data());
                            const int n_group = hs.n_group();
                            const void * keys = type == ggml_type::f16 ? static_cast<const void *>(kh.data()) : kf.data();
                            std::vector<float> host(size_t(n_group * n));
                            hs.score(kv_view{type, keys, nullptr, n, row}, nullptr, host.data(), n, pool);
                            csd::hls::kernel_config c{sc.n_head, sc.n_head_kv, sc.head_dim, type == ggml_type::f32,
                                                      key == score_precision::int4, agg == score_aggregate::max,
                                                      g == select_granularity::kv_head};
                            auto qb = std::make_unique<csd::hls::query_buffer>();
                            csd::hls::load_query(c, hs.query_i8(), hs.query_scale(), *qb);
                            std::vector<float> dev(size_t(n * n_group));  // [n, n_group]
                            csd::hls::score_tokens(c, *qb, keys, row, n, dev.data());
                            for (int64_t t = 0; t < n; ++t) {
                                for (int gi = 0; gi < n_group; ++gi) {
                                    const float a = host[size_t(gi * n + t)], b = dev[size_t(t * n_group + gi)];
                                    ASSERT_EQ(f32_to_bits(a), f32_to_bits(b)) << "token " << t << " group " << gi
                                                                              << ": host " << a << " device " << b;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

TEST(running_topk, selects_what_the_selector_selects) {
    HILL_FRESH_RNG(rng);
    token_selector sel;
    for (int rep = 0; rep < 200; ++rep) {
        const int64_t n = std::uniform_int_distribution<int64_t>(0, 3000)(rng);
        const int64_t n_top = std::uniform_int_distribution<int64_t>(0, n)(rng);
        std::vector<float> scores(static_cast<size_t>(n));
        // Few distinct values: many ties; some NaN and infinities.
        for (float & x : scores) x = float(std::uniform_int_distribution<int>(-20, 20)(rng)) * 0.5f;
        for (int i = 0; i < 5 && n > 0; ++i) {
            const auto j = size_t(std::uniform_int_distribution<int64_t>(0, n - 1)(rng));
            scores[j] = i == 0 ? std::numeric_limits<float>::quiet_NaN() : (i == 1 ? -INFINITY : INFINITY);
        }
        std::vector<int32_t> want;
        sel.select(scores.data(), n, n_top, 4, 8, want);
        // The same through running_topk, offered in a shuffled order.
        const auto [s_end, w_begin] = middle_of(n, 4, 8);
        std::vector<int32_t> order;
        for (int64_t i = s_end; i < w_begin; ++i) order.push_back(int32_t(i));
        std::shuffle(order.begin(), order.end(), rng);
        running_topk top(n_top);
        top.begin(n_top);
        for (const int32_t t : order) top.push(scores[size_t(t)], t);
        std::vector<int32_t> got;
        for (int64_t i = 0; i < s_end; ++i) got.push_back(int32_t(i));
        top.finish(got);
        for (int64_t i = w_begin; i < n; ++i) got.push_back(int32_t(i));
        ASSERT_EQ(got, want) << "n " << n << " n_top " << n_top;
    }
}

// A store of n random tokens, a quarter hot, the rest in cold pages (all but the open group written).
struct cold_store {
    test::temp_dir dir;
    attention_shape shape{8, 2, 64, 0.125f};
    kv_layout layout{1, 2 * 64, ggml_type::f16};
    int64_t n;
    std::unique_ptr<kv_store> kv;
    std::vector<f16_bits> k, v;

    explicit cold_store(int64_t n_tokens, uint32_t seed, io_fault_hook faults = {}) : n(n_tokens) {
        std::mt19937 rng(seed);
        std::normal_distribution<float> nd;
        k.resize(size_t(n * layout.n_embd_kv));
        v.resize(k.size());
        for (auto & x : k) x = fp32_to_fp16(nd(rng));
        for (auto & x : v) x = fp32_to_fp16(nd(rng));
        kv = std::make_unique<kv_store>(layout, kv_store_params{int32_t(n), uint64_t(n / 4) * layout.token_layer_bytes(),
                                                                4, dir.file("kv"), std::move(faults)});
        kv->append(0, n, k.data(), v.data());
    }
};

// Every on-disk token's score from one pass of `d`, by position: f16 bits [n_group] each.
std::map<uint32_t, std::vector<uint16_t>> score_pass(csd::device & d, host_scorer & hs, int il) {
    std::map<uint32_t, std::vector<uint16_t>> out;
    d.score_begin(il, hs);
    d.score_drain([&](const csd::score_block_view & b) {
        for (int64_t j = 0; j < b.n_tokens(); ++j) {
            std::vector<uint16_t> s;
            for (int g = 0; g < b.n_group(); ++g) s.push_back(score_to_f16(b.score(j, g)));
            EXPECT_TRUE(out.emplace(b.position(j), s).second) << "token " << b.position(j) << " scored twice";
        }
    });
    return out;
}

TEST(csd_device, emulator_scores_and_reads_what_the_plain_ssd_does) {
    HILL_FRESH_RNG(rng);
    cold_store st(3000, rng_seed);
    thread_pool pool(2);
    const std::vector<float> q = test::random_floats(rng, 8 * 64);
    csd::storage_params pp;
    csd::storage_params ep{.kind = csd::storage_kind::emulator, .block_tokens = 100};
    auto plain = csd::make_device(pp, *st.kv, st.shape, pool);
    auto emu = csd::make_device(ep, *st.kv, st.shape, pool);
    int64_t on_disk = 0;
    for (int64_t t = 0; t < st.n; ++t) on_disk += st.kv->on_disk(0, t) ? 1 : 0;
    ASSERT_GT(on_disk, st.n / 2);
    for (const select_granularity g : {select_granularity::layer, select_granularity::kv_head}) {
        for (const score_precision key : {score_precision::int8, score_precision::int4}) {
            host_scorer hs(st.shape, score_params{key, query_precision::int8, score_aggregate::sum, g}, pool.n_threads());
            hs.prepare_query(q.data());
            const auto a = score_pass(*plain, hs, 0);
            const auto b = score_pass(*emu, hs, 0);
            EXPECT_EQ(int64_t(a.size()), on_disk);
            EXPECT_EQ(a, b);
        }
    }
    const csd::device_counters pc = plain->counters(), ec = emu->counters();
    EXPECT_EQ(ec.tokens_scored, 4 * uint64_t(on_disk));
    EXPECT_EQ(pc.tokens_scored, ec.tokens_scored);
    // Link bytes of scoring: 6 bytes per token (10 with a score per KV head) plus the block headers and
    // the query, against the key pages for the plain SSD.
    const uint64_t tuples = 2 * uint64_t(on_disk) * 6 + 2 * uint64_t(on_disk) * 8;
    const uint64_t query = 4 * uint64_t(8 * (64 + 4));
    EXPECT_EQ(ec.link_score_bytes, tuples + query + 8 * ec.score_blocks);
    EXPECT_GE(pc.link_score_bytes, 4 * uint64_t(on_disk) * st.layout.row_bytes());

    // Reads: a random subset of the on-disk tokens, K and V as appended.
    std::vector<int32_t> want;
    for (int64_t t = 0; t < st.n; ++t) {
        if (st.kv->on_disk(0, t) && rng() % 3 == 0) want.push_back(int32_t(t));
    }
    for (csd::device * d : {plain.get(), emu.get()}) {
        std::vector<int> seen(size_t(st.n), 0);
        d->read_begin(0, want);
        d->read_drain([&](const kv_view & view, const int32_t * rows, const int32_t * tokens) {
            const size_t rb = st.layout.row_bytes();
            for (int64_t j = 0; j < view.n_kv; ++j) {
                const int64_t r = rows != nullptr ? rows[j] : j;
                const auto * kr = static_cast<const uint8_t *>(view.k) + size_t(r) * rb;
                const auto * vr = static_cast<const uint8_t *>(view.v) + size_t(r) * rb;
                ASSERT_EQ(std::memcmp(kr, st.k.data() + size_t(tokens[j]) * size_t(st.layout.n_embd_kv), rb), 0);
                ASSERT_EQ(std::memcmp(vr, st.v.data() + size_t(tokens[j]) * size_t(st.layout.n_embd_kv), rb), 0);
                ++seen[size_t(tokens[j])];
            }
        });
        for (const int32_t t : want) EXPECT_EQ(seen[size_t(t)], 1) << "token " << t;
        EXPECT_EQ(std::accumulate(seen.begin(), seen.end(), 0), int(want.size()));
    }
    EXPECT_EQ(emu->counters().tokens_read, want.size());
    EXPECT_EQ(emu->counters().link_kv_bytes, want.size() * (2 * st.layout.row_bytes() + 4) +
                                                 8 * ((want.size() + 255) / 256));
}

// Moves through the device: a promoted token leaves a hole in its cold page, which neither device
// scores any more; the page read back and the demoted pages written are counted.
TEST(csd_device, moves_leave_holes_that_are_not_scored) {
    cold_store st(3000, 11);
    thread_pool pool(1);
    auto plain = csd::make_device(csd::storage_params{}, *st.kv, st.shape, pool);
    auto emu = csd::make_device(csd::storage_params{.kind = csd::storage_kind::emulator}, *st.kv, st.shape, pool);
    host_scorer hs(st.shape, score_params{.query = query_precision::int8}, 1);
    std::vector<float> q(8 * 64, 0.5f);
    hs.prepare_query(q.data());
    const int32_t t = 100;
    ASSERT_TRUE(st.kv->on_disk(0, t));
    EXPECT_EQ(score_pass(*emu, hs, 0).count(t), 1u);
    // Make room in the hot pool, then promote t through the emulator.
    const int32_t hot_victim = int32_t(st.n - 1);
    ASSERT_EQ(st.kv->where(0, hot_victim).tier, kv_tier::hot);
    const uint64_t written0 = emu->counters().internal_write_bytes;
    ASSERT_TRUE(emu->move(0, hot_victim, kv_tier::cold));
    ASSERT_TRUE(emu->move(0, t, kv_tier::hot));
    EXPECT_FALSE(st.kv->on_disk(0, t));
    EXPECT_EQ(emu->counters().link_kv_bytes, 2 * st.layout.page_bytes());  // t's K and V pages read back
    EXPECT_GE(emu->counters().internal_write_bytes, written0);
    const auto a = score_pass(*plain, hs, 0), b = score_pass(*emu, hs, 0);
    EXPECT_EQ(a, b);
    EXPECT_EQ(b.count(t), 0u);
}

// A slow host: the device fills the packets in flight and waits (back-pressure), and every block still
// arrives once, in order of the pages.
TEST(csd_device, a_slow_host_applies_back_pressure) {
    cold_store st(6000, 5);
    thread_pool pool(1);
    auto emu = csd::make_device(csd::storage_params{.kind = csd::storage_kind::emulator, .block_tokens = 32}, *st.kv,
                                st.shape, pool);
    host_scorer hs(st.shape, score_params{.query = query_precision::int8}, 1);
    std::vector<float> q(8 * 64, 0.5f);
    hs.prepare_query(q.data());
    int64_t n_blocks = 0, n_tokens = 0;
    emu->score_begin(0, hs);
    emu->score_drain([&](const csd::score_block_view & b) {
        if (n_blocks++ < 12) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        n_tokens += b.n_tokens();
    });
    const csd::device_counters c = emu->counters();
    EXPECT_EQ(uint64_t(n_tokens), c.tokens_scored);
    EXPECT_EQ(uint64_t(n_blocks), c.score_blocks);
    EXPECT_GT(n_blocks, 100);
    EXPECT_GT(c.t_backpressure_us, 20000u);  // 12 sleeps of 5 ms, minus what 8 packets absorb
}

TEST(csd_device, cancellation_leaves_the_device_ready) {
    HILL_FRESH_RNG(rng);
    cold_store st(4000, rng_seed);
    thread_pool pool(1);
    auto emu = csd::make_device(csd::storage_params{.kind = csd::storage_kind::emulator, .block_tokens = 16}, *st.kv,
                                st.shape, pool);
    auto plain = csd::make_device(csd::storage_params{}, *st.kv, st.shape, pool);
    host_scorer hs(st.shape, score_params{.query = query_precision::int8}, 1);
    const std::vector<float> q = test::random_floats(rng, 8 * 64);
    hs.prepare_query(q.data());
    const auto want = score_pass(*plain, hs, 0);
    for (int rep = 0; rep < 20; ++rep) {
        // Abandoned at once, after a while, or by the host throwing from a block.
        emu->score_begin(0, hs);
        if (rep % 3 == 1) std::this_thread::sleep_for(std::chrono::microseconds(200 * rep));
        if (rep % 3 == 2) {
            int seen = 0;
            EXPECT_THROW(emu->score_drain([&](const csd::score_block_view &) {
                if (++seen == rep) throw error(exit_code::interrupted, "host gave up");
            }), error);
        } else {
            emu->cancel();
        }
        EXPECT_EQ(score_pass(*emu, hs, 0), want);
        std::vector<int32_t> some = {int32_t(st.n / 2)};
        ASSERT_TRUE(st.kv->on_disk(0, some[0]));
        emu->read_begin(0, some);
        emu->cancel();
    }
    EXPECT_EQ(emu->counters().n_cancelled, 40u);  // 20 reads; 20 scoring passes cancelled or thrown out of
    emu->cancel();  // idle: nothing to do
}

TEST(csd_device, a_failed_read_is_an_error_of_that_pass) {
    std::atomic<bool> fail{false};
    cold_store st(3000, 3, [&fail](const io_issue & is, int64_t r) { return fail && is.op == io_op::read ? -EIO : r; });
    thread_pool pool(1);
    csd::storage_params ep{.kind = csd::storage_kind::emulator};
    ep.io_faults = [&fail](const io_issue &, int64_t r) { return fail ? int64_t(-EIO) : r; };
    auto emu = csd::make_device(ep, *st.kv, st.shape, pool);
    host_scorer hs(st.shape, score_params{.query = query_precision::int8}, 1);
    std::vector<float> q(8 * 64, 0.25f);
    hs.prepare_query(q.data());
    fail = true;
    try {
        score_pass(*emu, hs, 0);
        FAIL() << "no error";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("layer 0"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("hillinfer-cold-"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("Input/output error"), std::string::npos) << e.what();
    }
    fail = false;
    EXPECT_FALSE(score_pass(*emu, hs, 0).empty());
    EXPECT_EQ(emu->counters().n_errors, 1u);

    // A page changed on disk behind the store's back: the checksum catches it.
    const cold_pool & cp = *st.kv->cold();
    const uint32_t page = st.kv->cold_layer(0).groups[1].first;
    const int fd = ::open(cp.file_path(page).c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const char junk[8] = "garbage";
    ASSERT_EQ(::pwrite(fd, junk, 8, off_t(cp.file_offset(page) + 100)), 8);
    ::close(fd);
    try {
        score_pass(*emu, hs, 0);
        FAIL() << "no error";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("page " + std::to_string(page)), std::string::npos) << e.what();
    }
}

TEST(csd_device, emulator_needs_integer_keys_and_an_int8_query) {
    EXPECT_NO_THROW(csd::check_scoring(csd::storage_kind::plain, score_params{.key = score_precision::fp16}));
    for (const score_params p : {score_params{.key = score_precision::fp16, .query = query_precision::int8},
                                 score_params{.key = score_precision::int8, .query = query_precision::fp32}}) {
        try {
            csd::check_scoring(csd::storage_kind::emulator, p);
            FAIL() << "accepted";
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::usage);
            EXPECT_NE(std::string(e.what()).find("--storage emulator"), std::string::npos);
        }
    }
    EXPECT_EQ(csd::parse_storage("emulator"), csd::storage_kind::emulator);
    EXPECT_THROW(csd::parse_storage("smart"), error);
}

TEST(device_profile, names_and_files) {
    EXPECT_EQ(csd::load_device_profile("none").link_bps, 0.0);
    const csd::device_profile s = csd::load_device_profile("smartssd");
    EXPECT_EQ(s.internal_read_bps, 3.2e9);
    EXPECT_EQ(s.link_bps, 3.5e9);
    test::temp_dir dir;
    auto write = [&](const std::string & text) {
        const std::string p = dir.file("p.json");
        std::ofstream(p) << text;
        return p;
    };
    const csd::device_profile f = csd::load_device_profile(write(R"({"name": "slow", "link_gbps": 0.5})"));
    EXPECT_EQ(f.name, "slow");
    EXPECT_EQ(f.link_bps, 0.5e9);
    EXPECT_EQ(f.internal_read_bps, 0.0);
    for (const char * bad : {"[1]", "{\"link_gbps\": -1}", "{\"link_gbs\": 1}", "{\"score_gbps\": \"fast\"}", "{"}) {
        try {
            csd::load_device_profile(write(bad));
            FAIL() << bad;
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::bad_input) << bad;
            EXPECT_NE(std::string(e.what()).find("p.json"), std::string::npos) << e.what();
        }
    }
    for (const std::string & p : {std::string("/nonexistent/profile.json"), dir.path.string()}) {
        try {
            csd::load_device_profile(p);
            FAIL() << p;
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::usage) << e.what();
            EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
        }
    }
}

// A stop request (Ctrl-C) abandons a slow pass within a few of the drain's 20 ms polls, on either
// device, and the device serves the next pass.
TEST(csd_device, a_stop_request_abandons_the_pass) {
    cold_store st(20000, 13);  // 3.7 MiB of cold keys: about 2 s at 2 MB/s
    thread_pool pool(1);
    std::atomic<bool> stop{false};
    for (const csd::storage_kind kind : {csd::storage_kind::emulator, csd::storage_kind::plain}) {
        SCOPED_TRACE(std::string(name(kind)));
        csd::storage_params sp{.kind = kind, .block_tokens = 16};
        sp.profile.internal_read_bps = 2e6;  // 2 MB/s (after the bucket's 1 MiB burst)
        sp.stop_requested = [&stop] { return stop.load(); };
        auto d = csd::make_device(sp, *st.kv, st.shape, pool);
        host_scorer hs(st.shape, score_params{.query = query_precision::int8}, 1);
        std::vector<float> q(8 * 64, 0.5f);
        hs.prepare_query(q.data());
        stop = false;
        std::thread ctrl_c([&stop] {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            stop = true;
        });
        const auto t0 = std::chrono::steady_clock::now();
        try {
            score_pass(*d, hs, 0);
            ADD_FAILURE() << "not interrupted";
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::interrupted) << e.what();
        }
        ctrl_c.join();
        EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
        stop = false;
        d->read_begin(0, std::vector<int32_t>{int32_t(st.n / 2)});  // the device is ready again
        int64_t rows = 0;
        d->read_drain([&](const kv_view & v, const int32_t *, const int32_t *) { rows += v.n_kv; });
        EXPECT_EQ(rows, 1);
    }
}

TEST(token_bucket, holds_its_rate) {
    csd::token_bucket b(100e6, 64 << 10);  // 100 MB/s
    const auto never = [] { return false; };
    uint64_t waited = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 50; ++i) b.take(200000, never, &waited);  // 10 MB: about 0.1 s
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(s, (10e6 - (64 << 10)) / 100e6);  // never faster than the rate allows
    EXPECT_GT(waited, 0u);
    EXPECT_FALSE(b.take(100000000, [] { return true; }, &waited));  // a cancelled wait gives up at once
}

// Decoding under the emulator equals decoding under the plain SSD, token for token and logit for logit,
// for every policy, with 75% of the KV cold.
TEST(csd_session, decoding_under_the_emulator_equals_the_plain_ssd) {
    test::temp_dir dir;
    const std::string path = dir.file("m.gguf");
    write_random_model(path, random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96, .n_layer = 2, .n_head = 4,
                                                 .n_head_kv = 2, .n_ctx = 1024, .seed = 4});
    auto m = model::load(path);
    thread_pool pool(2);
    std::vector<int32_t> prompt(700);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(3 + (i * 37 + 11) % 290);
    const uint64_t budget = 200 * m->hp().kv_bytes_per_token(ggml_type::f16);
    for (const policy_kind kind : {policy_kind::full, policy_kind::hillinfer, policy_kind::streaming}) {
        for (const select_granularity g : {select_granularity::layer, select_granularity::kv_head}) {
            if (kind != policy_kind::hillinfer && g == select_granularity::kv_head) continue;
            SCOPED_TRACE(std::string(name(kind)) + " " + std::string(name(g)));
            policy_params pp{.kind = kind, .alpha = 0.1};
            pp.score = score_params{score_precision::int4, query_precision::int8, score_aggregate::sum, g};
            std::vector<std::vector<float>> logits[2];
            std::vector<int32_t> ids[2];
            csd::device_counters c[2];
            for (int e = 0; e < 2; ++e) {
                context_params sp{.n_ctx = 1024, .kv_host_budget = budget, .kv_dir = dir.file("kv"), .policy = pp};
                sp.storage.kind = e == 0 ? csd::storage_kind::plain : csd::storage_kind::emulator;
                sp.storage.block_tokens = 50;
                session s(*m, sp, pool);
                s.eval(prompt);
                int32_t tok = 5;
                for (int i = 0; i < 12; ++i) {
                    s.eval(std::span<const int32_t>(&tok, 1));
                    const float * l = s.logits();
                    logits[e].emplace_back(l, l + 300);
                    tok = int32_t(std::max_element(l, l + 300) - l);
                    ids[e].push_back(tok);
                }
                c[e] = s.storage().counters();
            }
            EXPECT_EQ(ids[0], ids[1]);
            EXPECT_EQ(logits[0], logits[1]);  // bit for bit: same selection, same KV, same attention order
            if (kind == policy_kind::hillinfer) {  // scored by the devices
                EXPECT_EQ(c[0].tokens_scored, c[1].tokens_scored);
                EXPECT_GT(c[1].tokens_scored, 12u * 2u * 400u);
                // 6 (10 per KV head) bytes per token against a 64-byte key row.
                EXPECT_LT(c[1].link_score_bytes, c[0].link_score_bytes / 4);
            }
            EXPECT_EQ(c[0].tokens_read, c[1].tokens_read);
            if (kind == policy_kind::full) {
                EXPECT_GT(c[1].tokens_read, 12u * 2u * 400u);
            }
        }
    }
}

}  // namespace
}  // namespace hill
