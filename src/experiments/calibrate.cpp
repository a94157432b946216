#include "experiments/calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/interrupt.h"
#include "core/sys_info.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "score/host_scorer.h"

namespace hill {

std::unique_ptr<context> make_random_context(const model & m, int64_t n, double cold, const std::string & kv_dir,
                                             csd::storage_kind storage, const csd::device_profile & profile,
                                             double alpha, thread_pool & pool, std::vector<std::vector<uint16_t>> * k,
                                             std::vector<std::vector<uint16_t>> * v) {
    const hparams & hp = m.hp();
    context_params cp;
    cp.n_ctx = int32_t(n + 64);
    cp.kv_host_budget = uint64_t(double(n) * (1.0 - cold)) * hp.kv_bytes_per_token(ggml_type::f16);
    cp.kv_dir = kv_dir;
    cp.policy.name = "hillinfer";
    cp.policy.alpha = alpha;
    cp.policy.score = score_params{score_precision::int8, query_precision::int8};
    cp.storage = csd::storage_params{.kind = storage, .profile = profile};
    cp.score_copy_bits = 0;  // the stored keys: what the device scores
    auto ctx = std::make_unique<context>(m, cp, pool);
    std::vector<std::vector<uint16_t>> ks(size_t(hp.n_layer)), vs(size_t(hp.n_layer));
    std::vector<const void *> kp, vp;
    const size_t rows = size_t(n) * size_t(hp.n_embd_kv());
    for (int il = 0; il < hp.n_layer; ++il) {
        std::mt19937 rng(uint32_t(1 + il));
        std::normal_distribution<float> nd;
        ks[size_t(il)].resize(rows);
        vs[size_t(il)].resize(rows);
        for (auto & x : ks[size_t(il)]) x = fp32_to_fp16(nd(rng));
        for (auto & x : vs[size_t(il)]) x = fp32_to_fp16(nd(rng));
        kp.push_back(ks[size_t(il)].data());
        vp.push_back(vs[size_t(il)].data());
    }
    ctx->import_kv(0, n, kp, vp);
    if (k != nullptr) *k = std::move(ks);
    if (v != nullptr) *v = std::move(vs);
    return ctx;
}

namespace {

// Runs pass() until `seconds` have passed (at least once); pass() returns the bytes it moved.
template <class F>
rate_measurement timed(double seconds, F && pass) {
    rate_measurement r;
    const int64_t t0 = time_us();
    do {
        throw_if_stopped("calibration");
        r.bytes += double(pass());
        ++r.passes;
        r.seconds = double(time_us() - t0) / 1e6;
    } while (r.seconds < seconds);
    return r;
}

// A fresh random α share of [0, n), ascending.
std::vector<int32_t> sample(int64_t n, double alpha, std::mt19937 & rng) {
    std::vector<int32_t> all(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) all[size_t(t)] = int32_t(t);
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(size_t(std::max<int64_t>(1, int64_t(alpha * double(n)))));
    std::sort(all.begin(), all.end());
    return all;
}

}  // namespace

void check(const calibrate_params & p) {
    if (p.n_tokens < 1024 || p.n_tokens > (int64_t(1) << 22)) {
        fail_usage("calibrate: --tokens must be in [1024, 2^22], got {}", p.n_tokens);
    }
    if (!(p.alpha > 0.0 && p.alpha <= 1.0)) fail_usage("calibrate: --alpha must be in (0, 1], got {}", p.alpha);
    if (!(p.seconds > 0.0 && p.seconds <= 60.0)) {
        fail_usage("calibrate: --seconds must be in (0, 60], got {}", p.seconds);
    }
    if (p.kv_dir.empty()) fail_usage("calibrate: --kv-dir needs a directory");
}

calibrate_result run_calibration(const calibrate_params & p, thread_pool & pool) {
    check(p);
    std::error_code ec;
    std::filesystem::create_directories(p.kv_dir, ec);
    if (ec) fail_input("calibrate: cannot create the kv-dir '{}': {}", p.kv_dir, ec.message());
    // A one-layer model of the attention shape (its weights are never used: the KV is imported).
    const std::string model_path =
        (std::filesystem::path(p.kv_dir) / fmt::format("hillinfer-calibrate-{}.gguf", ::getpid())).string();
    const remove_on_exit cleanup{model_path};
    write_random_model(model_path, random_model_params{.n_vocab = 260,
                                                       .n_embd = p.n_head * p.head_dim,
                                                       .n_ff = 32,
                                                       .n_layer = 1,
                                                       .n_head = p.n_head,
                                                       .n_head_kv = p.n_head_kv,
                                                       .n_ctx = int32_t(p.n_tokens + 64),
                                                       .type = ggml_type::q4_0});
    const auto m = model::load(model_path);
    const hparams & hp = m->hp();
    // Nearly all of it cold: the device's passes cover 15/16 of the tokens.
    std::vector<std::vector<uint16_t>> k, v;
    const auto ctx =
        make_random_context(*m, p.n_tokens, 15.0 / 16.0, p.kv_dir, p.storage, p.profile, p.alpha, pool, &k, &v);
    const attention_shape shape{hp.n_head, hp.n_head_kv, hp.head_dim, 1.0f};
    const score_params sp{score_precision::int8, query_precision::int8};
    auto dev = csd::make_device(csd::storage_params{.kind = p.storage, .profile = p.profile}, ctx->cold(),
                                ctx->layout(), shape, pool);
    host_scorer hs(shape, sp, pool.n_threads());
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    std::vector<float> q(size_t(hp.n_head) * size_t(hp.head_dim));
    for (float & x : q) x = nd(rng);
    hs.prepare_query(q.data());
    const uint64_t key_row = ctx->layout().row_bytes(), kv_row = ctx->layout().token_layer_bytes();
    const int64_t n = p.n_tokens, n_embd_kv = hp.n_embd_kv();
    calibrate_result r;

    // f_c: the host scorer over every key in DRAM.
    std::vector<float> scores(size_t(n) * size_t(hs.n_group()));
    const kv_view keys{ggml_type::f16, k[0].data(), nullptr, n, n_embd_kv};
    r.f_c = timed(p.seconds, [&] {
        hs.score(keys, nullptr, scores.data(), n, pool);
        return double(n) * double(key_row);
    });

    // B_c: a random α share of the K and V rows gathered into staging rows, on the host threads.
    const std::vector<int32_t> picked = sample(n, p.alpha, rng);
    std::vector<uint8_t> stage_k(picked.size() * key_row), stage_v(picked.size() * key_row);
    const auto * kb = reinterpret_cast<const uint8_t *>(k[0].data());
    const auto * vb = reinterpret_cast<const uint8_t *>(v[0].data());
    r.b_c = timed(p.seconds, [&] {
        pool.parallel_for(
            int64_t(picked.size()),
            [&](int64_t i0, int64_t i1) {
                for (int64_t i = i0; i < i1; ++i) {
                    const size_t src = size_t(picked[size_t(i)]) * key_row;
                    std::memcpy(stage_k.data() + size_t(i) * key_row, kb + src, key_row);
                    std::memcpy(stage_v.data() + size_t(i) * key_row, vb + src, key_row);
                }
            },
            64);
        return double(picked.size()) * double(kv_row);
    });

    // f_s: score passes of the device over every token in written cold pages.
    const cold_log_view log = ctx->logs()->log(0, 0);
    std::vector<int32_t> on_disk(size_t(log.n_on_disk()));
    for (size_t t = 0; t < on_disk.size(); ++t) on_disk[t] = int32_t(t);
    r.f_s = timed(p.seconds, [&] {
        const uint64_t scored0 = dev->counters().tokens_scored;
        dev->score_begin(csd::device_pass{0, 0, log.page_tokens, log.groups, on_disk}, hs);
        while (dev->score_next() != nullptr) {
        }
        return double(dev->counters().tokens_scored - scored0) * double(key_row);
    });

    // B_s: read passes of a fresh random α share of those tokens each.
    r.b_s = timed(p.seconds, [&] {
        const std::vector<int32_t> want = sample(int64_t(on_disk.size()), p.alpha, rng);
        dev->read_begin(csd::device_pass{0, 0, log.page_tokens, log.groups, want});
        kv_batch b;
        int64_t got = 0;
        while (dev->read_next(b)) got += b.view.n_kv;
        return double(got) * double(kv_row);
    });
    r.cal = calibration{r.f_c.bps(), r.f_s.bps(), r.b_c.bps(), r.b_s.bps(), "measured"};
    return r;
}

}  // namespace hill
