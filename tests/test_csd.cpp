// The storage device (csd/): score blocks, the HLS kernel against the host scorer (bit for bit), plain
// SSD and emulator passes over a cold log built with cold_pool + cold_writer + cold_logs (the same score
// blocks bit for bit, the same KV rows, exactly the pass's positions), streaming with back-pressure,
// cancellation, device errors, stop requests, profiles, the emulator reading one log while the owner
// writes another, and decoding under both devices.
#include "compute/kernel_mode.h"
#include "core/error.h"
#include "csd/device.h"
#include "csd/hls/score_kernel.h"
#include "engine/session.h"
#include "kv/cold_gather.h"
#include "kv/cold_logs.h"
#include "kv/cold_pool.h"
#include "kv/cold_reader.h"
#include "kv/cold_writer.h"
#include "model/synthetic_model.h"
#include "score/selector.h"
#include "kernel_test_util.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
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
// aggregation (softmax with per-head normalizers that put some exponents past both clamps),
// granularity, key type and head_dim bucket, and for zero, tiny, inf and NaN keys.
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
        const attention_shape s{sc.n_head, sc.n_head_kv, sc.head_dim, 1.0f / std::sqrt(float(sc.head_dim))};
        std::vector<float> head_mass(size_t(sc.n_head));
        for (float & x : head_mass) x = nd(rng) * 20.0f;
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
                for (const score_aggregate agg :
                     {score_aggregate::sum, score_aggregate::max, score_aggregate::softmax}) {
                    for (const select_granularity g : {select_granularity::layer, select_granularity::kv_head}) {
                        for (const kernel_mode m : test::kernel_modes_tested()) {
                            kernel_mode_set(m);
                            SCOPED_TRACE(testing::Message() << "heads " << sc.n_head << "/" << sc.n_head_kv << " d "
                                                            << sc.head_dim << " " << ggml_type_name(type) << " "
                                                            << name(key) << " " << name(agg) << " " << name(g));
                            const score_params sp{key, query_precision::int8, agg, g};
                            host_scorer hs(s, sp, 1);
                            hs.prepare_query(q.data(), head_mass.data());
                            const int n_group = hs.n_group();
                            const void * keys = type == ggml_type::f16 ? static_cast<const void *>(kh.data()) : kf.data();
                            std::vector<float> host(size_t(n_group * n));
                            hs.score(kv_view{type, keys, nullptr, n, row}, nullptr, host.data(), n, pool);
                            csd::hls::kernel_config c{sc.n_head,
                                                      sc.n_head_kv,
                                                      sc.head_dim,
                                                      type == ggml_type::f32,
                                                      key == score_precision::int4,
                                                      agg == score_aggregate::max,
                                                      g == select_granularity::kv_head,
                                                      agg == score_aggregate::softmax};
                            auto qb = std::make_unique<csd::hls::query_buffer>();
                            csd::hls::load_query(c, hs.query_i8(), hs.query_scale(), hs.head_mass(), hs.log2_scale(),
                                                 *qb);
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

// Cold logs of layer 0 over a real cold pool, built as the context builds them (cold_pool, cold_writer,
// cold_logs): sequence 0 holds n random tokens, all but the open tail's rows in written pages; other
// sequences start empty and take their rows with append(). Rows of 256 bytes: 16-token pages.
struct cold_log_fixture {
    test::temp_dir dir;
    attention_shape shape{8, 2, 64, 0.125f};
    kv_layout layout{1, 2 * 64, ggml_type::f16};
    int64_t n;      // tokens of sequence 0
    int64_t n_ctx;  // rows each sequence may take
    std::unique_ptr<cold_pool> pool;
    std::unique_ptr<cold_writer> writer;
    std::unique_ptr<cold_logs> logs;
    std::vector<std::vector<f16_bits>> k, v;  // [n_seq] f16 [n_ctx, n_embd_kv]: the rows of each sequence

    cold_log_fixture(int64_t n_tokens, uint32_t seed, int n_seq = 1, int64_t ctx = 0)
        : n(n_tokens), n_ctx(std::max(n_tokens, ctx)) {
        std::mt19937 rng(seed);
        std::normal_distribution<float> nd;
        const int64_t pt = layout.page_tokens();
        cold_pool_params cp;
        cp.kv_dir = dir.file("kv");
        cp.page_bytes = layout.page_bytes();
        cp.n_pages = uint32_t(int64_t(n_seq) * layout.n_layer * 2 * ((n_ctx + pt - 1) / pt));
        pool = std::make_unique<cold_pool>(cp);
        writer = std::make_unique<cold_writer>(*pool);
        logs = std::make_unique<cold_logs>(*writer, layout, n_seq, n_ctx);
        k.resize(size_t(n_seq));
        v.resize(size_t(n_seq));
        for (int s = 0; s < n_seq; ++s) {
            k[size_t(s)].resize(size_t(n_ctx * layout.n_embd_kv));
            v[size_t(s)].resize(size_t(n_ctx * layout.n_embd_kv));
            for (auto & x : k[size_t(s)]) x = fp32_to_fp16(nd(rng));
            for (auto & x : v[size_t(s)]) x = fp32_to_fp16(nd(rng));
        }
        append(0, n);
    }
    // Appends the sequence's next n rows to its log (positions [n_tokens, n_tokens + n)).
    void append(int seq, int64_t count) {
        const int64_t t0 = log(seq).n_tokens();
        cold_append a;
        logs->prepare(seq, 0, count, k_row(seq, t0), v_row(seq, t0), a);
        logs->apply(a);
    }
    cold_log_view log(int seq = 0) const { return logs->log(seq, 0); }
    const f16_bits * k_row(int seq, int64_t t) const { return k[size_t(seq)].data() + size_t(t * layout.n_embd_kv); }
    const f16_bits * v_row(int seq, int64_t t) const { return v[size_t(seq)].data() + size_t(t * layout.n_embd_kv); }
    // Every position of the sequence in written pages: [0, n_on_disk).
    std::vector<int32_t> disk_positions(int seq = 0) const {
        std::vector<int32_t> out(size_t(log(seq).n_on_disk()));
        std::iota(out.begin(), out.end(), 0);
        return out;
    }
    // A pass over `positions` of the sequence's log, as the decode step builds it from its page table.
    csd::device_pass pass(std::span<const int32_t> positions, int seq = 0) const {
        const cold_log_view l = log(seq);
        return csd::device_pass{0, 0, l.page_tokens, l.groups, positions};
    }
    // Groups (pages of K, or of V) that hold at least one of the positions.
    int64_t n_groups_of(std::span<const int32_t> positions) const {
        std::set<int64_t> g;
        for (const int32_t t : positions) g.insert(t / layout.page_tokens());
        return int64_t(g.size());
    }
};

// One score block as it crossed the link: header fields, positions, and each score's bits (f32 of the
// f16 on the wire: fp16_to_fp32 is one-to-one, so equal bits here are equal bits there).
struct score_block_copy {
    int layer = 0;
    int n_group = 0;
    std::vector<uint32_t> positions;  // [n_tokens]
    std::vector<uint32_t> scores;     // [n_tokens, n_group]
    bool operator==(const score_block_copy &) const = default;
};

// Every block of one scoring pass of `d`, in the order they came.
std::vector<score_block_copy> score_blocks(csd::device & d, const csd::device_pass & pass, host_scorer & hs) {
    std::vector<score_block_copy> out;
    d.score_begin(pass, hs);
    while (const csd::score_block_view * b = d.score_next()) {
        score_block_copy c{b->layer(), b->n_group(), {}, {}};
        for (int64_t j = 0; j < b->n_tokens(); ++j) {
            c.positions.push_back(b->position(j));
            for (int g = 0; g < b->n_group(); ++g) c.scores.push_back(f32_to_bits(b->score(j, g)));
        }
        EXPECT_EQ(b->size_bytes(), csd::score_block_bytes(b->n_tokens(), b->n_group()));
        out.push_back(std::move(c));
    }
    return out;
}

// The positions of the blocks, in the order they came.
std::vector<int32_t> positions_of(const std::vector<score_block_copy> & blocks) {
    std::vector<int32_t> out;
    for (const score_block_copy & b : blocks) out.insert(out.end(), b.positions.begin(), b.positions.end());
    return out;
}

// Every position's score bits from one pass, by position (each scored once).
std::map<uint32_t, std::vector<uint32_t>> score_pass(csd::device & d, host_scorer & hs, const csd::device_pass & pass) {
    std::map<uint32_t, std::vector<uint32_t>> out;
    for (const score_block_copy & b : score_blocks(d, pass, hs)) {
        for (size_t j = 0; j < b.positions.size(); ++j) {
            const auto s0 = b.scores.begin() + ptrdiff_t(j * size_t(b.n_group));
            EXPECT_TRUE(out.emplace(b.positions[j], std::vector<uint32_t>(s0, s0 + b.n_group)).second)
                << "position " << b.positions[j] << " scored twice";
        }
    }
    return out;
}

// One read pass of `d` over sequence seq's positions: the positions of the rows returned, in order; each
// row's K and V are checked against the fixture's.
std::vector<int32_t> read_pass(csd::device & d, const cold_log_fixture & f, const csd::device_pass & pass,
                               int seq = 0) {
    std::vector<int32_t> got;
    const size_t rb = f.layout.row_bytes();
    int64_t wrong = 0;
    d.read_begin(pass);
    kv_batch b;
    while (d.read_next(b)) {
        EXPECT_NE(b.view.v, nullptr);
        for (int64_t j = 0; j < b.view.n_kv; ++j) {
            const int64_t r = b.rows != nullptr ? b.rows[j] : j;
            const int32_t t = b.positions[j];
            const auto * kr = static_cast<const uint8_t *>(b.view.k) + size_t(r) * rb;
            const auto * vr = static_cast<const uint8_t *>(b.view.v) + size_t(r) * rb;
            if (std::memcmp(kr, f.k_row(seq, t), rb) != 0 || std::memcmp(vr, f.v_row(seq, t), rb) != 0) ++wrong;
            got.push_back(t);
        }
    }
    EXPECT_EQ(wrong, 0) << "rows whose K or V differ from what was appended";
    return got;
}

TEST(csd_device, emulator_scores_and_reads_what_the_plain_ssd_does) {
    HILL_FRESH_RNG(rng);
    cold_log_fixture f(3000, rng_seed);
    thread_pool pool(2);
    const std::vector<float> q = test::random_floats(rng, 8 * 64);
    // The emulator and a plain SSD with blocks of 100 tokens; a plain SSD with the default blocks.
    const csd::storage_params ep{.kind = csd::storage_kind::emulator, .block_tokens = 100};
    auto emu = csd::make_device(ep, f.pool.get(), f.layout, f.shape, pool);
    auto plain100 = csd::make_device(csd::storage_params{.block_tokens = 100}, f.pool.get(), f.layout, f.shape, pool);
    auto plain = csd::make_device(csd::storage_params{}, f.pool.get(), f.layout, f.shape, pool);
    // The step's disk positions: every position in written pages but a random quarter (hot ones).
    std::vector<int32_t> disk;
    for (const int32_t t : f.disk_positions()) {
        if (rng() % 4 != 0) disk.push_back(t);
    }
    ASSERT_GT(int64_t(disk.size()), f.n / 2);
    const int64_t n_groups = f.n_groups_of(disk);
    for (const select_granularity g : {select_granularity::layer, select_granularity::kv_head}) {
        for (const score_precision key : {score_precision::int8, score_precision::int4}) {
            SCOPED_TRACE(std::string(name(g)) + " " + std::string(name(key)));
            const score_params sp{key, query_precision::int8, score_aggregate::sum, g};
            host_scorer hs(f.shape, sp, pool.n_threads());
            hs.prepare_query(q.data());
            // The same blocks, bit for bit, from devices cutting blocks of the same size; and the same
            // score per position from the plain SSD's default blocks.
            const std::vector<score_block_copy> a = score_blocks(*plain100, f.pass(disk), hs);
            const std::vector<score_block_copy> b = score_blocks(*emu, f.pass(disk), hs);
            EXPECT_EQ(positions_of(b), disk);
            EXPECT_TRUE(a == b) << "the score blocks differ";
            EXPECT_EQ(b.size(), (disk.size() + 99) / 100);
            for (const score_block_copy & blk : b) {
                EXPECT_EQ(blk.layer, 0);
                EXPECT_EQ(blk.n_group, hs.n_group());
            }
            EXPECT_EQ(score_pass(*plain, hs, f.pass(disk)), score_pass(*emu, hs, f.pass(disk)));
        }
    }
    const csd::device_counters pc = plain100->counters(), ec = emu->counters();
    EXPECT_EQ(ec.n_score_passes, 8u);
    EXPECT_EQ(ec.tokens_scored, 8 * uint64_t(disk.size()));
    EXPECT_EQ(pc.tokens_scored, 4 * uint64_t(disk.size()));
    EXPECT_EQ(ec.score_blocks, 2 * pc.score_blocks);
    // Link bytes of scoring: 6 bytes per token (8 with a score per KV head: 2 of them) plus the block
    // headers and the query (int8 [8, 64] and f32 [8] scales), against the key pages for the plain SSD.
    const uint64_t tuples = 4 * uint64_t(disk.size()) * 6 + 4 * uint64_t(disk.size()) * 8;
    const uint64_t query = 8 * uint64_t(8 * (64 + 4));
    EXPECT_EQ(ec.link_score_bytes, tuples + query + 8 * ec.score_blocks);
    EXPECT_EQ(pc.link_score_bytes, 4 * uint64_t(n_groups) * f.layout.page_bytes());
    // Both read the key pages that hold a position, and only those: the same flash bytes.
    EXPECT_EQ(ec.internal_read_bytes, 8 * uint64_t(n_groups) * f.layout.page_bytes());
    EXPECT_EQ(pc.internal_read_bytes, pc.link_score_bytes);

    // Reads: a random subset of the disk positions, K and V as appended, each once, in position order.
    std::vector<int32_t> want;
    for (const int32_t t : disk) {
        if (rng() % 3 == 0) want.push_back(t);
    }
    for (csd::device * d : {plain.get(), emu.get()}) {
        SCOPED_TRACE(std::string(name(d->kind())));
        EXPECT_EQ(read_pass(*d, f, f.pass(want)), want);
    }
    const uint64_t kv_pages = 2 * uint64_t(f.n_groups_of(want)) * f.layout.page_bytes();
    EXPECT_EQ(emu->counters().tokens_read, want.size());
    EXPECT_EQ(plain->counters().tokens_read, want.size());
    EXPECT_EQ(emu->counters().link_kv_bytes,
              want.size() * (2 * f.layout.row_bytes() + 4) + 8 * ((want.size() + 255) / 256));
    EXPECT_EQ(plain->counters().link_kv_bytes, kv_pages);
    EXPECT_EQ(emu->counters().internal_read_bytes - ec.internal_read_bytes, kv_pages);
}

// A pass covers exactly its positions: whatever subset of the written pages the step asks for (a hot
// token is simply not in it), both devices score and return those positions, each once, in ascending
// order, and read only the pages that hold them.
TEST(csd_device, a_pass_covers_exactly_its_positions) {
    HILL_FRESH_RNG(rng);
    cold_log_fixture f(1000, rng_seed);
    const int64_t pt = f.layout.page_tokens();
    const auto on_disk = int32_t(f.log().n_on_disk());
    ASSERT_EQ(on_disk, 992);
    ASSERT_EQ(f.log().n_open, 8);
    thread_pool pool(1);
    auto plain = csd::make_device(csd::storage_params{.block_tokens = 7}, f.pool.get(), f.layout, f.shape, pool);
    auto emu = csd::make_device(csd::storage_params{.kind = csd::storage_kind::emulator, .block_tokens = 7},
                                f.pool.get(), f.layout, f.shape, pool);
    host_scorer hs(f.shape, score_params{.query = query_precision::int8}, 1);
    const std::vector<float> q = test::random_floats(rng, 8 * 64);
    hs.prepare_query(q.data());
    std::vector<std::vector<int32_t>> sets = {
        {},                                    // nothing on disk wanted
        {0},                                   // the first position
        {on_disk - 1},                         // the last one in a written page
        {int32_t(pt - 1), int32_t(pt)},        // both sides of a page boundary
        {},                                    // the first and last row of every group
        {},                                    // a dense run inside one group
        {},                                    // every other group, whole
        {},                                    // a random tenth
    };
    for (int32_t g = 0; g < on_disk / pt; ++g) {
        sets[4].push_back(int32_t(g * pt));
        sets[4].push_back(int32_t(g * pt + pt - 1));
    }
    for (int32_t t = 5 * int32_t(pt) + 3; t < 5 * int32_t(pt) + 11; ++t) sets[5].push_back(t);
    for (int32_t t = 0; t < on_disk; ++t) {
        if ((t / pt) % 2 == 0) sets[6].push_back(t);
        if (rng() % 10 == 0) sets[7].push_back(t);
    }
    for (size_t i = 0; i < sets.size(); ++i) {
        const std::vector<int32_t> & want = sets[i];
        SCOPED_TRACE("set " + std::to_string(i) + " of " + std::to_string(want.size()) + " positions");
        const uint64_t pages = uint64_t(f.n_groups_of(want)) * f.layout.page_bytes();
        std::vector<score_block_copy> blocks[2];
        for (csd::device * d : {plain.get(), emu.get()}) {
            SCOPED_TRACE(std::string(name(d->kind())));
            const csd::device_counters c0 = d->counters();
            blocks[d == emu.get()] = score_blocks(*d, f.pass(want), hs);
            EXPECT_EQ(positions_of(blocks[d == emu.get()]), want);
            const csd::device_counters c1 = d->counters();
            EXPECT_EQ(c1.tokens_scored - c0.tokens_scored, want.size());
            EXPECT_EQ(c1.internal_read_bytes - c0.internal_read_bytes, pages) << "only the key pages of the positions";
            EXPECT_EQ(read_pass(*d, f, f.pass(want)), want);
            const csd::device_counters c2 = d->counters();
            EXPECT_EQ(c2.tokens_read - c1.tokens_read, want.size());
            EXPECT_EQ(c2.internal_read_bytes - c1.internal_read_bytes, 2 * pages)
                << "only the K and V pages of the positions";
        }
        EXPECT_TRUE(blocks[0] == blocks[1]) << "the score blocks differ";
    }
    EXPECT_EQ(plain->counters().n_cancelled + emu->counters().n_cancelled, 0u);
    EXPECT_EQ(plain->counters().n_errors + emu->counters().n_errors, 0u);
}

// A slow host: the device fills the packets in flight and waits (back-pressure), and every block still
// arrives once, in order of the pages.
TEST(csd_device, a_slow_host_applies_back_pressure) {
    cold_log_fixture f(6000, 5);
    thread_pool pool(1);
    auto emu = csd::make_device(csd::storage_params{.kind = csd::storage_kind::emulator, .block_tokens = 32},
                                f.pool.get(), f.layout, f.shape, pool);
    host_scorer hs(f.shape, score_params{.query = query_precision::int8}, 1);
    std::vector<float> q(8 * 64, 0.5f);
    hs.prepare_query(q.data());
    const std::vector<int32_t> disk = f.disk_positions();
    int64_t n_blocks = 0;
    std::vector<int32_t> got;
    emu->score_begin(f.pass(disk), hs);
    while (const csd::score_block_view * b = emu->score_next()) {
        if (n_blocks++ < 12) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        for (int64_t j = 0; j < b->n_tokens(); ++j) got.push_back(int32_t(b->position(j)));
    }
    const csd::device_counters c = emu->counters();
    EXPECT_EQ(got, disk);
    EXPECT_EQ(uint64_t(got.size()), c.tokens_scored);
    EXPECT_EQ(uint64_t(n_blocks), c.score_blocks);
    EXPECT_GT(n_blocks, 100);
    EXPECT_GT(c.t_backpressure_us, 20000u);  // 12 sleeps of 5 ms, minus what 8 packets absorb
}

// Passes abandoned at once, after a while, or by the host throwing between blocks (a device_pass_guard
// cancels), on either device: the next pass gives the full, right result.
TEST(csd_device, cancellation_leaves_the_device_ready) {
    HILL_FRESH_RNG(rng);
    cold_log_fixture f(4000, rng_seed);
    thread_pool pool(1);
    auto plain = csd::make_device(csd::storage_params{.block_tokens = 16}, f.pool.get(), f.layout, f.shape, pool);
    auto emu = csd::make_device(csd::storage_params{.kind = csd::storage_kind::emulator, .block_tokens = 16},
                                f.pool.get(), f.layout, f.shape, pool);
    host_scorer hs(f.shape, score_params{.query = query_precision::int8}, 1);
    const std::vector<float> q = test::random_floats(rng, 8 * 64);
    hs.prepare_query(q.data());
    const std::vector<int32_t> disk = f.disk_positions();
    const auto want = score_blocks(*plain, f.pass(disk), hs);
    ASSERT_GT(want.size(), 200u);
    for (csd::device * d : {emu.get(), plain.get()}) {
        SCOPED_TRACE(std::string(name(d->kind())));
        const uint64_t cancelled0 = d->counters().n_cancelled;
        for (int rep = 0; rep < 20; ++rep) {
            d->score_begin(f.pass(disk), hs);
            if (rep % 3 == 1) std::this_thread::sleep_for(std::chrono::microseconds(200 * rep));
            if (rep % 3 == 2) {
                // The host pulls `rep` blocks, then throws out of the step; the guard cancels the pass.
                EXPECT_THROW(
                    {
                        csd::device_pass_guard guard(*d);
                        int seen = 0;
                        while (d->score_next() != nullptr) {
                            if (++seen == rep) throw error(exit_code::interrupted, "host gave up");
                        }
                        guard.done();
                    },
                    error);
            } else {
                d->cancel();
            }
            EXPECT_TRUE(score_blocks(*d, f.pass(disk), hs) == want) << "rep " << rep;
            const std::vector<int32_t> some = {int32_t(f.n / 2)};
            ASSERT_LT(some[0], f.log().n_on_disk());
            d->read_begin(f.pass(some));
            d->cancel();
        }
        // 20 reads; 20 scoring passes cancelled or thrown out of.
        EXPECT_EQ(d->counters().n_cancelled - cancelled0, 40u);
        d->cancel();  // idle: nothing to do
        EXPECT_EQ(d->counters().n_cancelled - cancelled0, 40u);
        EXPECT_EQ(read_pass(*d, f, f.pass(disk)), disk);
    }
}

// A read error on the emulator's own reads (its io_faults) fails that pass with a message naming the
// layer, the page's file and the cause; a page changed on disk behind the pool's back fails its
// checksum; the next pass works.
TEST(csd_device, a_failed_read_is_an_error_of_that_pass) {
    std::atomic<bool> fail{false};
    cold_log_fixture f(3000, 3);
    thread_pool pool(1);
    csd::storage_params ep{.kind = csd::storage_kind::emulator};
    ep.io_faults = [&fail](const io_issue &, int64_t r) { return fail ? int64_t(-EIO) : r; };
    auto emu = csd::make_device(ep, f.pool.get(), f.layout, f.shape, pool);
    host_scorer hs(f.shape, score_params{.query = query_precision::int8}, 1);
    std::vector<float> q(8 * 64, 0.25f);
    hs.prepare_query(q.data());
    const std::vector<int32_t> disk = f.disk_positions();
    fail = true;
    try {
        score_pass(*emu, hs, f.pass(disk));
        FAIL() << "no error";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("layer 0"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("hillinfer-cold-"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("Input/output error"), std::string::npos) << e.what();
    }
    fail = false;
    EXPECT_EQ(score_pass(*emu, hs, f.pass(disk)).size(), disk.size());
    EXPECT_EQ(emu->counters().n_errors, 1u);
    fail = true;
    EXPECT_THROW(read_pass(*emu, f, f.pass(disk)), error);
    fail = false;
    EXPECT_EQ(read_pass(*emu, f, f.pass(disk)), disk);
    EXPECT_EQ(emu->counters().n_errors, 2u);

    // A page changed on disk behind the pool's back: the checksum catches it.
    const uint32_t page = f.log().groups[1].first;
    const int fd = ::open(f.pool->file_path(page).c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const char junk[8] = "garbage";
    ASSERT_EQ(::pwrite(fd, junk, 8, off_t(f.pool->file_offset(page) + 100)), 8);
    ::close(fd);
    try {
        score_pass(*emu, hs, f.pass(disk));
        FAIL() << "no error";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("page " + std::to_string(page)), std::string::npos) << e.what();
    }
    // Passes that do not touch the page still work.
    const std::vector<int32_t> past = {int32_t(3 * f.layout.page_tokens()), int32_t(f.log().n_on_disk() - 1)};
    EXPECT_EQ(score_pass(*emu, hs, f.pass(past)).size(), 2u);
}

// The plain SSD under the same contract (csd/device.h): a failed page read fails the pass with an error
// naming the layer, the page's file and the cause, is counted, and leaves the device ready for the next
// pass without the caller cancelling.
TEST(csd_device, a_failed_read_on_the_plain_ssd_is_an_error_of_that_pass) {
    std::atomic<bool> fail{false};
    cold_log_fixture f(3000, 3);
    thread_pool pool(1);
    csd::storage_params pp;
    pp.io_faults = [&fail](const io_issue &, int64_t r) { return fail ? int64_t(-EIO) : r; };
    auto plain = csd::make_device(pp, f.pool.get(), f.layout, f.shape, pool);
    host_scorer hs(f.shape, score_params{.query = query_precision::int8}, 1);
    std::vector<float> q(8 * 64, 0.25f);
    hs.prepare_query(q.data());
    const std::vector<int32_t> disk = f.disk_positions();
    fail = true;
    try {
        score_pass(*plain, hs, f.pass(disk));
        FAIL() << "no error";
    } catch (const error & e) {
        EXPECT_NE(std::string(e.what()).find("hillinfer-cold-"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("Input/output error"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("layer 0"), std::string::npos) << e.what();
    }
    EXPECT_EQ(plain->counters().n_errors, 1u);
    fail = false;
    // The device is ready again, with no cancel() in between: a full pass, run in a child process so that
    // a failed assertion of the device (an abort) fails this expectation and not the whole suite. The
    // child (this test run again) leaves through _Exit, past the destructors: it removes its own fixture's
    // directory first.
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            const size_t n = score_pass(*plain, hs, f.pass(disk)).size();
            std::error_code ec;
            std::filesystem::remove_all(f.dir.path, ec);
            std::_Exit(n == disk.size() ? 0 : 1);
        },
        testing::ExitedWithCode(0), "")
        << "the plain SSD is not ready for a pass after a failed one";
}

// A pass stopped while the plain SSD's reads still run in the background (a cancel, Ctrl-C): the
// reads end with the pass, so the log's pages can be freed at once (as a failed or interrupted
// request's release does) and the next pass, or the device's end, never checks the freed pages
// (which aborted on cold_pool's written-page assertion before cancel() ended the gather's batch).
TEST(csd_device, a_stopped_pass_leaves_no_read_behind_it) {
    cold_log_fixture f(4000, 1, 2);
    f.append(1, 4000);
    thread_pool pool(1);
    std::atomic<bool> stop{false};
    csd::storage_params sp{.block_tokens = 16};
    sp.stop_requested = [&stop] { return stop.load(); };
    auto plain = csd::make_device(sp, f.pool.get(), f.layout, f.shape, pool);
    host_scorer hs(f.shape, score_params{.query = query_precision::int8}, 1);
    std::vector<float> q(size_t(f.shape.n_head * f.shape.head_dim), 0.5f);
    hs.prepare_query(q.data());
    const std::vector<int32_t> disk = f.disk_positions();
    // Cancelled after its first block, then sequence 0 freed, then a read pass over sequence 1.
    plain->score_begin(f.pass(disk), hs);
    ASSERT_NE(plain->score_next(), nullptr);
    plain->cancel();
    cold_reader rd(*f.pool);
    f.logs->truncate(0, 0, rd);
    const std::vector<int32_t> d1 = f.disk_positions(1);
    EXPECT_EQ(read_pass(*plain, f, f.pass(d1, 1), 1), d1);
    // Interrupted mid-pass (stop_requested), sequence 1 freed, the device destroyed.
    EXPECT_THROW(
        {
            csd::device_pass_guard guard(*plain);
            plain->score_begin(f.pass(d1, 1), hs);
            ASSERT_NE(plain->score_next(), nullptr);
            stop = true;
            while (plain->score_next() != nullptr) {
            }
            guard.done();
        },
        error);
    f.logs->truncate(1, 0, rd);
    plain.reset();
}

// The pipeline's prefetch (csd/device.h prefetch): a read pass returns the same rows whether or not
// its tokens were hinted, takes the hinted ones from the prefetch and reads only the misses; a hint
// whose reads fail only costs the reads.
TEST(csd_device, a_read_pass_over_a_prefetch_returns_the_same_rows_and_reads_only_the_misses) {
    HILL_FRESH_RNG(rng);
    std::function<bool()> fail_off_thread;  // set: reads fail on the threads it names
    cold_log_fixture f(3000, rng_seed);
    thread_pool pool(2);
    csd::storage_params pp;
    pp.io_faults = [&fail_off_thread](const io_issue &, int64_t r) {
        return fail_off_thread && fail_off_thread() ? int64_t(-EIO) : r;
    };
    auto plain = csd::make_device(pp, f.pool.get(), f.layout, f.shape, pool);
    std::vector<int32_t> want, hint, misses;
    for (const int32_t t : f.disk_positions()) {
        const bool w = rng() % 3 == 0, h = w ? rng() % 10 != 0 : rng() % 20 == 0;  // 90% of want hinted, and a few more
        if (w) want.push_back(t);
        if (h) hint.push_back(t);
        if (w && !h) misses.push_back(t);
    }
    std::vector<int32_t> hits;
    std::set_intersection(want.begin(), want.end(), hint.begin(), hint.end(), std::back_inserter(hits));
    plain->prefetch(f.pass(hint), false);
    EXPECT_EQ(read_pass(*plain, f, f.pass(want)), want);
    plain->end_step();
    csd::device_counters c = plain->counters();
    EXPECT_EQ(c.tokens_prefetched, hint.size());
    EXPECT_EQ(c.prefetch_hits, hits.size());
    EXPECT_EQ(c.tokens_read, want.size());
    const uint64_t group_bytes = 2 * f.layout.page_bytes();  // a K page and a V page
    EXPECT_EQ(c.internal_read_bytes, uint64_t(f.n_groups_of(hint) + f.n_groups_of(misses)) * group_bytes);
    EXPECT_EQ(c.link_kv_bytes, c.internal_read_bytes);

    // A hint never read (the step ended first) and a hint for another layer change nothing.
    plain->prefetch(csd::device_pass{1, 0, f.log().page_tokens, f.log().groups, hint}, false);
    EXPECT_EQ(read_pass(*plain, f, f.pass(want)), want);
    plain->end_step();
    EXPECT_EQ(plain->counters().prefetch_hits, hits.size());

    // Misses beyond the fetcher's slot (here 7 rows) are read on this thread, as they are reached: the
    // same rows, the same bytes.
    {
        csd::storage_params small = pp;
        small.fetch_bytes = 7 * f.layout.token_layer_bytes();
        auto plain7 = csd::make_device(small, f.pool.get(), f.layout, f.shape, pool);
        ASSERT_GT(misses.size(), 7u);
        plain7->prefetch(f.pass(hint), false);
        EXPECT_EQ(read_pass(*plain7, f, f.pass(want)), want);
        plain7->end_step();
        const csd::device_counters c7 = plain7->counters();
        EXPECT_EQ(c7.prefetch_hits, hits.size());
        const std::vector<int32_t> first7(misses.begin(), misses.begin() + 7), rest(misses.begin() + 7, misses.end());
        EXPECT_EQ(c7.internal_read_bytes,
                  uint64_t(f.n_groups_of(hint) + f.n_groups_of(first7) + f.n_groups_of(rest)) * group_bytes);
    }

    // Jobs whose reads fail (every read off this thread fails: the prefetch thread's hint and the
    // fetcher thread's misses): the read pass reads every token itself, once a job has failed.
    const std::thread::id self = std::this_thread::get_id();
    fail_off_thread = [self] { return std::this_thread::get_id() != self; };
    const uint64_t bytes0 = plain->counters().internal_read_bytes;
    plain->prefetch(f.pass(hint), false);
    EXPECT_EQ(read_pass(*plain, f, f.pass(want)), want);
    plain->end_step();
    EXPECT_EQ(plain->counters().prefetch_hits, hits.size()) << "nothing was taken from the failed prefetch";
    EXPECT_EQ(plain->counters().internal_read_bytes - bytes0, uint64_t(f.n_groups_of(want)) * group_bytes);
    fail_off_thread = nullptr;
}

// A hint for the next step (the pipeline wrapping around from the last layer) outlives end_step and
// serves the next step's read pass; drop_prefetches (what the context calls before a page leaves a
// cold log) forgets it, and its reads count as read.
TEST(csd_device, a_hint_for_the_next_step_serves_it_until_dropped) {
    HILL_FRESH_RNG(rng);
    cold_log_fixture f(3000, rng_seed);
    thread_pool pool(2);
    auto plain = csd::make_device(csd::storage_params{}, f.pool.get(), f.layout, f.shape, pool);
    std::vector<int32_t> want;
    for (const int32_t t : f.disk_positions()) {
        if (rng() % 3 == 0) want.push_back(t);
    }
    const uint64_t group_bytes = 2 * f.layout.page_bytes();  // a K page and a V page
    const uint64_t want_bytes = uint64_t(f.n_groups_of(want)) * group_bytes;
    plain->prefetch(f.pass(want), true);
    plain->end_step();
    EXPECT_EQ(read_pass(*plain, f, f.pass(want)), want);
    plain->end_step();
    EXPECT_EQ(plain->counters().prefetch_hits, want.size()) << "the next step took every row from the hint";
    EXPECT_EQ(plain->counters().internal_read_bytes, want_bytes) << "and read nothing itself";

    // A hint for the next step, then another for this step, a pass over which waits for it (jobs run in
    // order: the first is read by then); a step that does not take the first, then a drop.
    plain->prefetch(f.pass(want), true);
    csd::device_pass other = f.pass(want);
    other.il = 1;
    plain->prefetch(other, false);
    EXPECT_EQ(read_pass(*plain, f, other), want);
    plain->end_step();
    plain->drop_prefetches();
    const csd::device_counters c = plain->counters();
    EXPECT_EQ(c.prefetch_hits, 2 * want.size());
    EXPECT_EQ(c.internal_read_bytes, 3 * want_bytes) << "the dropped hint's reads count as read";
    EXPECT_EQ(read_pass(*plain, f, f.pass(want)), want);
    plain->end_step();
    EXPECT_EQ(plain->counters().prefetch_hits, c.prefetch_hits) << "the dropped hint is gone";
    EXPECT_EQ(plain->counters().internal_read_bytes, 4 * want_bytes);
}

// The same over a pass of several 8 MiB chunks (the first chunk's misses are read before the pass
// waits for the hint, the others chunk by chunk): the right rows in order, with the hint and with a
// hint whose reads fail.
TEST(csd_device, a_read_pass_of_several_chunks_over_a_prefetch_returns_the_same_rows) {
    HILL_FRESH_RNG(rng);
    cold_log_fixture f(40000, rng_seed);
    ASSERT_GT(f.n, 2 * int64_t(size_t(8 << 20) / f.layout.token_layer_bytes())) << "three chunks or more";
    bool fail_prefetch = false;
    const std::thread::id self = std::this_thread::get_id();
    thread_pool pool(2);
    csd::storage_params pp;
    pp.io_faults = [&](const io_issue &, int64_t r) {
        return fail_prefetch && std::this_thread::get_id() != self ? int64_t(-EIO) : r;
    };
    auto plain = csd::make_device(pp, f.pool.get(), f.layout, f.shape, pool);
    std::vector<int32_t> want, hint;
    for (const int32_t t : f.disk_positions()) {
        const bool w = rng() % 2 == 0, h = w ? rng() % 5 != 0 : rng() % 10 == 0;
        if (w) want.push_back(t);
        if (h) hint.push_back(t);
    }
    for (const bool fail : {false, true}) {
        fail_prefetch = fail;
        plain->prefetch(f.pass(hint), false);
        EXPECT_EQ(read_pass(*plain, f, f.pass(want)), want) << (fail ? "failed hint" : "hint");
        plain->end_step();
    }
    EXPECT_EQ(plain->counters().tokens_read, 2 * want.size());
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
    cold_log_fixture f(20000, 13);  // 4.9 MiB of cold keys: about 2 s at 2 MB/s
    thread_pool pool(1);
    std::atomic<bool> stop{false};
    const std::vector<int32_t> disk = f.disk_positions();
    for (const csd::storage_kind kind : {csd::storage_kind::emulator, csd::storage_kind::plain}) {
        SCOPED_TRACE(std::string(name(kind)));
        csd::storage_params sp{.kind = kind, .block_tokens = 16};
        sp.profile.internal_read_bps = 2e6;  // 2 MB/s (after the bucket's 1 MiB burst)
        sp.stop_requested = [&stop] { return stop.load(); };
        auto d = csd::make_device(sp, f.pool.get(), f.layout, f.shape, pool);
        host_scorer hs(f.shape, score_params{.query = query_precision::int8}, 1);
        std::vector<float> q(8 * 64, 0.5f);
        hs.prepare_query(q.data());
        stop = false;
        std::thread ctrl_c([&stop] {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            stop = true;
        });
        const auto t0 = std::chrono::steady_clock::now();
        try {
            score_pass(*d, hs, f.pass(disk));
            ADD_FAILURE() << "not interrupted";
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::interrupted) << e.what();
        }
        ctrl_c.join();
        EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
        EXPECT_EQ(d->counters().n_cancelled, 1u);
        stop = false;
        const std::vector<int32_t> one = {int32_t(f.n / 2)};
        EXPECT_EQ(read_pass(*d, f, f.pass(one)), one);  // the device is ready again
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

// The emulator's reader thread reads the pages of one cold log while the owner thread writes new pages
// of another log through cold_logs (cold_pool.h "Thread-safety": the owner does not free or rewrite the
// pages a pass references; it may allocate, write and commit others). Under TSan: no data race; and
// both sides' data is intact — the pass gives what the plain SSD gave before any write, and the new
// log reads back as appended.
TEST(csd_device, the_emulator_reads_one_log_while_the_owner_writes_another) {
    HILL_FRESH_RNG(rng);
    cold_log_fixture f(8000, rng_seed, 2, 8000);  // sequence 1: an empty log, written during the passes
    thread_pool pool(1);
    host_scorer hs(f.shape, score_params{.query = query_precision::int8}, 1);
    const std::vector<float> q = test::random_floats(rng, 8 * 64);
    hs.prepare_query(q.data());
    const std::vector<int32_t> disk = f.disk_positions();
    auto plain = csd::make_device(csd::storage_params{.block_tokens = 64}, f.pool.get(), f.layout, f.shape, pool);
    const auto want = score_blocks(*plain, f.pass(disk), hs);
    csd::storage_params ep{.kind = csd::storage_kind::emulator, .block_tokens = 64};
    // 2 MB of keys at 8 MB/s past the 1 MiB burst: the reads last about 0.13 s, during the writes.
    ep.profile.internal_read_bps = 8e6;
    auto emu = csd::make_device(ep, f.pool.get(), f.layout, f.shape, pool);
    const uint64_t key_pages = uint64_t(f.n_groups_of(disk)) * f.layout.page_bytes();
    const int64_t step = 40;  // rows per append: 2.5 pages of K and as many of V, written as groups fill
    int64_t written = 0, written_while_reading = 0;
    const auto write_some = [&](uint64_t read_target) {
        if (written + step > f.n_ctx) return;
        f.append(1, step);
        written += step;
        if (emu->counters().internal_read_bytes < read_target) ++written_while_reading;
    };

    // Scoring: a write before the first block and after every block.
    std::vector<score_block_copy> got;
    emu->score_begin(f.pass(disk), hs);
    write_some(key_pages);
    while (const csd::score_block_view * b = emu->score_next()) {
        score_block_copy c{b->layer(), b->n_group(), {}, {}};
        for (int64_t j = 0; j < b->n_tokens(); ++j) {
            c.positions.push_back(b->position(j));
            for (int g = 0; g < b->n_group(); ++g) c.scores.push_back(f32_to_bits(b->score(j, g)));
        }
        got.push_back(std::move(c));
        write_some(key_pages);
    }
    EXPECT_TRUE(got == want) << "the score blocks differ from the plain SSD's before the writes";

    // Reading K and V of a random half of the log, with writes between the batches.
    std::vector<int32_t> some;
    for (const int32_t t : disk) {
        if (rng() % 2 == 0) some.push_back(t);
    }
    const uint64_t read0 = emu->counters().internal_read_bytes;
    const uint64_t kv_pages = 2 * uint64_t(f.n_groups_of(some)) * f.layout.page_bytes();
    std::vector<int32_t> rows_seen;
    int64_t wrong = 0;
    const size_t rb = f.layout.row_bytes();
    emu->read_begin(f.pass(some));
    write_some(read0 + kv_pages);
    kv_batch b;
    while (emu->read_next(b)) {
        for (int64_t j = 0; j < b.view.n_kv; ++j) {
            const int32_t t = b.positions[j];
            const size_t r = b.rows != nullptr ? size_t(b.rows[j]) : size_t(j);
            const auto * kr = static_cast<const uint8_t *>(b.view.k) + r * rb;
            const auto * vr = static_cast<const uint8_t *>(b.view.v) + r * rb;
            if (std::memcmp(kr, f.k_row(0, t), rb) != 0 || std::memcmp(vr, f.v_row(0, t), rb) != 0) ++wrong;
            rows_seen.push_back(t);
        }
        write_some(read0 + kv_pages);
    }
    EXPECT_EQ(rows_seen, some);
    EXPECT_EQ(wrong, 0);
    EXPECT_GT(written_while_reading, 0) << "no page was written while the device was reading";

    // The log written meanwhile reads back as appended, through the host's reader and the emulator's.
    while (written + step <= f.n_ctx) {
        f.append(1, step);
        written += step;
    }
    ASSERT_EQ(f.log(1).n_tokens(), written);
    const std::vector<int32_t> disk1 = f.disk_positions(1);
    cold_reader host(*f.pool);
    cold_gather g(host, f.layout);
    g.begin(f.log(1).groups, disk1, true);
    std::vector<int32_t> host_seen;
    while (g.next(b)) {
        for (int64_t j = 0; j < b.view.n_kv; ++j) {
            const int32_t t = b.positions[j];
            const auto * kr = static_cast<const uint8_t *>(b.view.k) + size_t(b.rows[j]) * rb;
            const auto * vr = static_cast<const uint8_t *>(b.view.v) + size_t(b.rows[j]) * rb;
            if (std::memcmp(kr, f.k_row(1, t), rb) != 0 || std::memcmp(vr, f.v_row(1, t), rb) != 0) ++wrong;
            host_seen.push_back(t);
        }
    }
    EXPECT_EQ(host_seen, disk1);
    EXPECT_EQ(wrong, 0);
    EXPECT_EQ(read_pass(*emu, f, f.pass(disk1, 1), 1), disk1);
    EXPECT_EQ(emu->counters().n_errors, 0u);
}

// Decoding under the emulator equals decoding under the plain SSD, token for token and logit for logit,
// for every policy (hillinfer at α = 0.1 — heads' scores summed, and their per-head softmax weights —
// and at α = 1, which scores the middle all the same), with 200 hot slots per layer for a 700-token
// prompt (at least 500 tokens per layer cold): the same selection at the same scoring precision, the
// same KV, the same attention order — so the same step statistics too. The plain SSD scores the stored
// keys here (no scoring copy), as the emulator does.
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
    struct run_case {
        std::string policy;
        double alpha;
        select_granularity g;
        score_aggregate agg = score_aggregate::sum;
    };
    for (const run_case & rc : {run_case{"full", 0.2, select_granularity::layer},
                                run_case{"hillinfer", 0.1, select_granularity::layer},
                                run_case{"hillinfer", 0.1, select_granularity::kv_head},
                                run_case{"hillinfer", 0.1, select_granularity::layer, score_aggregate::softmax},
                                run_case{"hillinfer", 1.0, select_granularity::layer},
                                run_case{"streaming", 0.2, select_granularity::layer}}) {
        SCOPED_TRACE(rc.policy + " alpha " + std::to_string(rc.alpha) + " " + std::string(name(rc.g)) + " " +
                     std::string(name(rc.agg)));
        policy_params pp{.name = rc.policy, .alpha = rc.alpha};
        pp.score = score_params{score_precision::int4, query_precision::int8, rc.agg, rc.g};
        std::vector<std::vector<float>> logits[2];
        std::vector<int32_t> ids[2];
        csd::device_counters c[2];
        step_stats st[2];
        for (int e = 0; e < 2; ++e) {
            context_params sp{.n_ctx = 1024, .kv_host_budget = budget, .kv_dir = dir.file("kv"), .policy = pp,
                              .score_copy_bits = 0};
            sp.storage.kind = e == 0 ? csd::storage_kind::plain : csd::storage_kind::emulator;
            sp.device_cache_share = 0.0;  // the same tiers on both devices (the emulator has no device cache)
            sp.storage.block_tokens = 50;
            session s(*m, sp, pool);
            s.eval(prompt);
            const kv_cells & cells = s.ctx().cells();
            for (int il = 0; il < cells.n_layer(); ++il) {
                EXPECT_GE(cells.n_tokens(0) - cells.n_hot(il), 500) << "cold tokens of layer " << il;
            }
            int32_t tok = 5;
            for (int i = 0; i < 12; ++i) {
                s.eval(std::span<const int32_t>(&tok, 1));
                const float * l = s.logits();
                logits[e].emplace_back(l, l + 300);
                tok = int32_t(std::max_element(l, l + 300) - l);
                ids[e].push_back(tok);
            }
            c[e] = s.ctx().storage().counters();
            st[e] = s.ctx().decode_stats();
        }
        EXPECT_EQ(ids[0], ids[1]);
        EXPECT_EQ(logits[0], logits[1]);  // bit for bit: same selection, same KV, same attention order
        ASSERT_EQ(st[0].layers.size(), st[1].layers.size());
        for (size_t il = 0; il < st[0].layers.size(); ++il) {
            EXPECT_EQ(st[0].layers[il].n_attended, st[1].layers[il].n_attended) << "layer " << il;
            EXPECT_EQ(st[0].layers[il].n_attended_hot, st[1].layers[il].n_attended_hot) << "layer " << il;
            EXPECT_EQ(st[0].layers[il].n_attended_open, st[1].layers[il].n_attended_open) << "layer " << il;
            EXPECT_EQ(st[0].layers[il].n_attended_disk, st[1].layers[il].n_attended_disk) << "layer " << il;
        }
        EXPECT_EQ(st[0].promotions, st[1].promotions);
        EXPECT_EQ(st[0].evictions, st[1].evictions);
        EXPECT_EQ(st[0].n_failed + st[1].n_failed, 0u);
        if (rc.policy == "hillinfer") {  // scored by the devices
            EXPECT_EQ(c[0].tokens_scored, c[1].tokens_scored);
            EXPECT_GT(c[1].tokens_scored, 12u * 2u * 400u);
            // 6 (8 per KV head) bytes per token against a 64-byte key row.
            EXPECT_LT(c[1].link_score_bytes, c[0].link_score_bytes / 4);
        } else {
            EXPECT_EQ(c[0].tokens_scored + c[1].tokens_scored, 0u);
        }
        EXPECT_EQ(c[0].tokens_read, c[1].tokens_read);
        if (rc.policy == "full" || rc.alpha == 1.0) {
            EXPECT_GT(c[1].tokens_read, 12u * 2u * 400u);
        }
        EXPECT_EQ(c[0].n_errors + c[1].n_errors + c[0].n_cancelled + c[1].n_cancelled, 0u);
    }
}

}  // namespace
}  // namespace hill
