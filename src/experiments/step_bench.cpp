#include "experiments/step_bench.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/interrupt.h"
#include "core/sys_info.h"
#include "core/trace.h"
#include "csd/device_profile.h"
#include "engine/context.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "policy/policy.h"
#include "score/quant_copy.h"

namespace hill {

namespace {

// Counter-based generator: the same (seed, stream, index) always gives the same numbers.
struct counter_rng {
    uint64_t state;
    explicit counter_rng(uint64_t seed) : state(seed) {}
    uint64_t next() {  // splitmix64
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return (double(next() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
    // Two standard normals (Box-Muller).
    void normal2(float & a, float & b) {
        const double r = std::sqrt(-2.0 * std::log(uniform())), t = 2.0 * M_PI * uniform();
        a = float(r * std::cos(t));
        b = float(r * std::sin(t));
    }
    void normals(float * x, int64_t n) {
        for (int64_t i = 0; i + 1 < n; i += 2) normal2(x[i], x[i + 1]);
        if (n % 2 != 0) {
            float spare;
            normal2(x[n - 1], spare);
        }
    }
};

uint64_t mix(uint64_t seed, uint64_t a, uint64_t b) {
    counter_rng r(seed ^ (a * 0xd1b54a32d192ed03ull) ^ (b * 0x8cb92ba72f3d8dd7ull));
    return r.next();
}

// The query processes of one layer: s [head_dim] shared by every head, e [n_head, head_dim] per head.
struct query_state {
    std::vector<float> s, e;
};

// Advances x ← ρ·x + √(1−ρ²)·ξ.
void advance(std::vector<float> & x, double rho, counter_rng & rng, std::vector<float> & xi) {
    xi.resize(x.size());
    rng.normals(xi.data(), int64_t(xi.size()));
    const auto a = float(rho), b = float(std::sqrt(1.0 - rho * rho));
    for (size_t i = 0; i < x.size(); ++i) x[i] = a * x[i] + b * xi[i];
}

// q f32 [n_head, head_dim] of a layer's state, with logit scale lambda (see synthetic_workload).
void make_query(const workload_params & p, const std::vector<float> & chan, const query_state & st, double lambda,
                float * q) {
    const int group = p.n_head / p.n_head_kv;
    const auto ws = float(std::sqrt(p.agreement)), we = float(std::sqrt(1.0 - p.agreement));
    for (int h = 0; h < p.n_head; ++h) {
        const float * c = chan.data() + size_t(h / group) * size_t(p.head_dim);
        for (int d = 0; d < p.head_dim; ++d) {
            const float u = ws * st.s[size_t(d)] + we * st.e[size_t(h) * size_t(p.head_dim) + size_t(d)];
            q[size_t(h) * size_t(p.head_dim) + size_t(d)] = float(lambda) * u / c[d];
        }
    }
}

void init_state(const workload_params & p, counter_rng & rng, query_state & st) {
    st.s.resize(size_t(p.head_dim));
    st.e.resize(size_t(p.n_head) * size_t(p.head_dim));
    rng.normals(st.s.data(), int64_t(st.s.size()));
    rng.normals(st.e.data(), int64_t(st.e.size()));
}

// The indices of the top ⌈α·n⌉ of score[n], ascending.
std::vector<int32_t> top_set(const std::vector<float> & score, double alpha) {
    const auto n = int64_t(score.size());
    const int64_t k = std::clamp<int64_t>(int64_t(std::ceil(alpha * double(n))), 1, n);
    std::vector<int32_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(),
                     [&](int32_t a, int32_t b) { return score[size_t(a)] > score[size_t(b)]; });
    idx.resize(size_t(k));
    std::sort(idx.begin(), idx.end());
    return idx;
}

class workload_forward final : public arch_forward {
public:
    bool keys_from_model() const override { return false; }  // unrotated synthetic keys
    workload_forward(const synthetic_workload & w, int32_t n_vocab) : w_(w), n_vocab_(n_vocab) {
        const workload_params & p = w.params();
        counter_rng rng(mix(p.seed, 0x51, 0));
        states_.resize(size_t(p.n_layer));
        for (query_state & st : states_) init_state(p, rng, st);
        rng_ = counter_rng(mix(p.seed, 0x52, 0));
        spec_rng_ = counter_rng(mix(p.seed, 0x54, 0));
        q_.resize(size_t(p.n_head) * size_t(p.head_dim));
    }
    void embed(const int32_t *, const int32_t *, int64_t n, float * x) override {
        const workload_params & p = w_.params();
        std::fill(x, x + n * int64_t(p.n_head) * p.head_dim, 0.0f);
        for (query_state & st : states_) {
            advance(st.s, w_.calibration().rho, rng_, xi_);
            advance(st.e, w_.calibration().rho, rng_, xi_);
        }
    }
    void attention_input(int il, const float *, const int32_t * pos, int64_t n, float * q, float * k,
                         float * v) override {
        const workload_params & p = w_.params();
        const int64_t nq = int64_t(p.n_head) * p.head_dim, nkv = int64_t(p.n_head_kv) * p.head_dim;
        make_query(p, chan(), states_[size_t(il)], w_.calibration().logit_scale, q_.data());
        std::vector<uint16_t> kb(static_cast<size_t>(nkv)), vb(static_cast<size_t>(nkv));
        for (int64_t i = 0; i < n; ++i) {
            std::copy(q_.begin(), q_.end(), q + i * nq);
            w_.kv(il, pos[i], 1, kb.data(), vb.data());
            for (int64_t j = 0; j < nkv; ++j) {
                k[i * nkv + j] = fp16_to_fp32(kb[size_t(j)]);
                v[i * nkv + j] = fp16_to_fp32(vb[size_t(j)]);
            }
        }
    }
    // The stand-in for InfiniGen's speculated query (no weights to compute it from): the layer's
    // actual query processes, each blended with fresh noise at correlation spec_rho, made into a query.
    void speculative_query(int il, const float *, const int32_t *, int64_t n, float * q) override {
        const workload_params & p = w_.params();
        const int64_t nq = int64_t(p.n_head) * p.head_dim;
        spec_ = states_[size_t(il)];
        advance(spec_.s, synthetic_workload::spec_rho, spec_rng_, xi_);
        advance(spec_.e, synthetic_workload::spec_rho, spec_rng_, xi_);
        make_query(p, chan(), spec_, w_.calibration().logit_scale, q_.data());
        for (int64_t i = 0; i < n; ++i) std::copy(q_.begin(), q_.end(), q + i * nq);
    }
    void attention_output(int, float *, const float *, int64_t) override {}
    void logits(const float *, int64_t n, float * out) override {
        std::fill(out, out + n * int64_t(n_vocab_), 0.0f);
    }

private:
    const std::vector<float> & chan() const { return w_.channel_scales(); }
    const synthetic_workload & w_;
    int32_t n_vocab_;
    std::vector<query_state> states_;
    counter_rng rng_{0};
    counter_rng spec_rng_{0};  // the speculation's noise: its own stream, so that the queries do not depend on it
    query_state spec_;         // scratch: the speculated query's processes
    std::vector<float> q_, xi_;
};

}  // namespace

// ---- synthetic_workload -----------------------------------------------------------------------------

void check(const workload_params & p) {
    if (p.n_layer < 1 || p.n_head < 1 || p.n_head_kv < 1 || p.head_dim < 2 || p.head_dim % 2 != 0 ||
        p.n_head % p.n_head_kv != 0) {
        fail_usage("attention shape: need layers, heads, KV heads >= 1, an even head dimension and heads a multiple of "
                   "KV heads; got {} layers, {} heads, {} KV heads of {}", p.n_layer, p.n_head, p.n_head_kv, p.head_dim);
    }
    if (!(p.alpha > 0.0 && p.alpha <= 1.0)) fail_usage("--alpha must be in (0, 1], got {}", p.alpha);
    if (!(p.agreement >= 0.0 && p.agreement < 1.0)) fail_usage("head agreement must be in [0, 1), got {}", p.agreement);
}

synthetic_workload::synthetic_workload(const workload_params & p) : p_(p) {
    check(p);
    // Channel scales: 1, with two outlier channels per KV head (×10 and ×20), at head-dependent places.
    chan_.assign(size_t(p.n_head_kv) * size_t(p.head_dim), 1.0f);
    for (int g = 0; g < p.n_head_kv; ++g) {
        float * c = chan_.data() + size_t(g) * size_t(p.head_dim);
        c[(7 + 13 * g) % p.head_dim] = 10.0f;
        c[(3 + 29 * g + p.head_dim / 2) % p.head_dim] = 20.0f;
    }

    // Calibration sample: keys of layer 0, T steps of queries with fixed innovations.
    const int n = 4096, T = 8;
    const int64_t nkv = int64_t(p.n_head_kv) * p.head_dim;
    std::vector<float> keys(size_t(n) * size_t(nkv));
    for (int t = 0; t < n; ++t) key_row(0, t, keys.data() + size_t(t) * size_t(nkv));
    cal_.sample_tokens = n;
    const int group = p.n_head / p.n_head_kv;
    // base[step][h][j] = unit-scale logit of head h on token j; summed[step][j] = Σ_h of it.
    // A dot product with 8 partial sums (vectorizes without reassociation flags).
    const auto dot = [&](const float * a, const float * b) {
        float acc[8] = {};
        for (int d = 0; d + 8 <= p.head_dim; d += 8) {
            for (int i = 0; i < 8; ++i) acc[i] += a[d + i] * b[d + i];
        }
        for (int d = p.head_dim / 8 * 8; d < p.head_dim; ++d) acc[d % 8] += a[d] * b[d];
        return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    };
    // summed[step][j] = Σ_h q_h·k_j (by KV head: the group's queries summed first); with_base also
    // base[step][h][j] = q_h·k_j/√d at unit logit scale.
    const auto run = [&](double rho, bool with_base, std::vector<std::vector<float>> & base,
                         std::vector<std::vector<float>> & summed) {
        counter_rng rng(mix(p.seed, 0x53, 0));
        query_state st;
        init_state(p, rng, st);
        std::vector<float> q(size_t(p.n_head) * size_t(p.head_dim)), qg(size_t(p.head_dim)), xi;
        if (with_base) base.assign(size_t(T), std::vector<float>(size_t(p.n_head) * size_t(n)));
        summed.assign(size_t(T), std::vector<float>(size_t(n)));
        const auto inv_sqrt_d = float(1.0 / std::sqrt(double(p.head_dim)));
        for (int s = 0; s < T; ++s) {
            if (s > 0) {
                advance(st.s, rho, rng, xi);
                advance(st.e, rho, rng, xi);
            }
            make_query(p, chan_, st, 1.0, q.data());
            for (int g = 0; g < p.n_head_kv; ++g) {
                std::fill(qg.begin(), qg.end(), 0.0f);
                for (int h = g * group; h < (g + 1) * group; ++h) {
                    for (int d = 0; d < p.head_dim; ++d) qg[size_t(d)] += q[size_t(h) * size_t(p.head_dim) + size_t(d)];
                }
                for (int j = 0; j < n; ++j) {
                    const float * kj = keys.data() + size_t(j) * size_t(nkv) + size_t(g) * size_t(p.head_dim);
                    summed[size_t(s)][size_t(j)] += dot(qg.data(), kj);
                    if (!with_base) continue;
                    for (int h = g * group; h < (g + 1) * group; ++h) {
                        base[size_t(s)][size_t(h) * size_t(n) + size_t(j)] =
                            dot(q.data() + size_t(h) * size_t(p.head_dim), kj) * inv_sqrt_d;
                    }
                }
            }
        }
    };
    std::vector<std::vector<float>> base, summed;
    const auto overlap_of = [&](double rho, bool with_base) {
        run(rho, with_base, base, summed);
        double sum = 0;
        std::vector<int32_t> prev = top_set(summed[0], p.alpha);
        for (int s = 1; s < T; ++s) {
            std::vector<int32_t> now = top_set(summed[size_t(s)], p.alpha), common;
            std::set_intersection(prev.begin(), prev.end(), now.begin(), now.end(), std::back_inserter(common));
            sum += double(common.size()) / double(now.size());
            prev = std::move(now);
        }
        return sum / (T - 1);
    };
    double lo = 0.0, hi = 0.9999;
    for (int it = 0; it < 14; ++it) {
        const double mid = 0.5 * (lo + hi);
        (overlap_of(mid, false) < p.target_overlap ? lo : hi) = mid;
    }
    cal_.rho = 0.5 * (lo + hi);
    cal_.overlap = overlap_of(cal_.rho, true);
    // The mass of the top-α set under logit scale lambda (base and summed of rho).
    std::vector<std::vector<int32_t>> sets(static_cast<size_t>(T));
    for (int s = 0; s < T; ++s) sets[size_t(s)] = top_set(summed[size_t(s)], p.alpha);
    const auto mass_of = [&](double lambda) {
        double sum = 0;
        std::vector<char> in(static_cast<size_t>(n));
        for (int s = 0; s < T; ++s) {
            std::fill(in.begin(), in.end(), 0);
            for (const int32_t j : sets[size_t(s)]) in[size_t(j)] = 1;
            for (int h = 0; h < p.n_head; ++h) {
                const float * b = base[size_t(s)].data() + size_t(h) * size_t(n);
                const float mx = *std::max_element(b, b + n);
                double all = 0, top = 0;
                for (int j = 0; j < n; ++j) {
                    const double e = std::exp(lambda * double(b[j] - mx));
                    all += e;
                    top += in[size_t(j)] ? e : 0.0;
                }
                sum += top / all;
            }
        }
        return sum / double(T * p.n_head);
    };
    lo = 0.01;
    hi = 50.0;
    for (int it = 0; it < 24; ++it) {
        const double mid = std::sqrt(lo * hi);
        (mass_of(mid) < p.target_mass ? lo : hi) = mid;
    }
    cal_.logit_scale = std::sqrt(lo * hi);
    cal_.mass = mass_of(cal_.logit_scale);
}

void synthetic_workload::key_row(int il, int64_t t, float * out) const {
    const int64_t hd = p_.head_dim;
    counter_rng rng(mix(p_.seed, 0x1000 + uint64_t(il), uint64_t(t)));
    float shared[1024], own[1024];
    HILL_ASSERT(hd <= 1024);
    rng.normals(shared, hd);
    const auto ws = float(std::sqrt(p_.agreement)), we = float(std::sqrt(1.0 - p_.agreement));
    for (int g = 0; g < p_.n_head_kv; ++g) {
        rng.normals(own, hd);
        const float * c = chan_.data() + size_t(g) * size_t(hd);
        for (int64_t d = 0; d < hd; ++d) out[g * hd + d] = c[d] * (ws * shared[d] + we * own[d]);
    }
}

void synthetic_workload::kv(int il, int64_t p0, int64_t n, uint16_t * k, uint16_t * v) const {
    const int64_t nkv = int64_t(p_.n_head_kv) * p_.head_dim;
    std::vector<float> row(static_cast<size_t>(nkv));
    for (int64_t i = 0; i < n; ++i) {
        key_row(il, p0 + i, row.data());
        fp32_to_fp16_row(row.data(), k + i * nkv, nkv);
        counter_rng rng(mix(p_.seed, 0x2000 + uint64_t(il), uint64_t(p0 + i)));
        rng.normals(row.data(), nkv);
        fp32_to_fp16_row(row.data(), v + i * nkv, nkv);
    }
}

std::unique_ptr<arch_forward> synthetic_workload::make_forward(int32_t n_vocab) const {
    return std::make_unique<workload_forward>(*this, n_vocab);
}

// ---- the grid ---------------------------------------------------------------------------------------

namespace {

struct snapshot {
    step_stats st;
    csd::device_counters dev;
    uint64_t host_read = 0;
};

snapshot take(const context & ctx) {
    return {ctx.decode_stats(), ctx.storage().counters(), ctx.io_stats().cold_read_bytes};
}

step_result measure(context & ctx, const step_config & cfg, int n_warmup, int n_steps) {
    std::vector<float> logits(size_t(ctx.model().hp().n_vocab));
    const int seq = 0;
    const int32_t tok = 0;
    const auto step = [&] {
        throw_if_stopped("bench step");
        ctx.decode(std::span<const int>(&seq, 1), std::span<const int32_t>(&tok, 1), logits.data());
    };
    for (int i = 0; i < n_warmup; ++i) step();
    const snapshot a = take(ctx);
    std::vector<double> ms;
    for (int i = 0; i < n_steps; ++i) {
        const int64_t t0 = time_us();
        step();
        ms.push_back(double(time_us() - t0) / 1e3);
    }
    const snapshot b = take(ctx);
    std::sort(ms.begin(), ms.end());
    step_result r;
    r.config = cfg;
    r.step_ms = (ms[(ms.size() - 1) / 2] + ms[ms.size() / 2]) / 2;  // the median (of an even count: the mean of the middle two)
    r.step_ms_min = ms.front();
    r.step_ms_max = ms.back();
    const double per = 1.0 / double(n_steps), per_ms = per / 1e3;
    r.forward_ms = double(b.st.t_forward_us - a.st.t_forward_us) * per_ms;
    r.score_host_ms = double(b.st.t_score_host_us - a.st.t_score_host_us) * per_ms;
    r.score_device_ms = double(b.st.t_score_device_us - a.st.t_score_device_us) * per_ms;
    r.select_ms = double(b.st.t_select_us - a.st.t_select_us) * per_ms;
    r.attend_ms = double(b.st.t_attend_us - a.st.t_attend_us) * per_ms;
    r.write_ms = double(b.st.t_write_us - a.st.t_write_us) * per_ms;
    uint64_t att = 0, hot = 0, cached = 0, open = 0, disk = 0, reread = 0;
    for (size_t il = 0; il < b.st.layers.size(); ++il) {
        att += b.st.layers[il].n_attended - a.st.layers[il].n_attended;
        hot += b.st.layers[il].n_attended_hot - a.st.layers[il].n_attended_hot;
        cached += b.st.layers[il].n_attended_cached - a.st.layers[il].n_attended_cached;
        open += b.st.layers[il].n_attended_open - a.st.layers[il].n_attended_open;
        disk += b.st.layers[il].n_attended_disk - a.st.layers[il].n_attended_disk;
        reread += b.st.layers[il].n_disk_reread - a.st.layers[il].n_disk_reread;
    }
    const double tlb = double(ctx.layout().token_layer_bytes());
    r.hot_bytes = double(hot) * tlb * per;
    r.cached_bytes = double(cached) * tlb * per;
    r.open_bytes = double(open) * tlb * per;
    r.disk_kv_bytes = double(b.dev.link_kv_bytes - a.dev.link_kv_bytes) * per;
    r.flash_read_bytes = double(b.dev.internal_read_bytes - a.dev.internal_read_bytes) * per;
    r.link_bytes = double((b.dev.link_kv_bytes + b.dev.link_score_bytes) - (a.dev.link_kv_bytes + a.dev.link_score_bytes)) * per;
    r.host_read_bytes = double(b.host_read - a.host_read) * per;
    const double attd = double(std::max<uint64_t>(att, 1));
    r.hot_share = double(hot) / attd;
    r.cache_share = double(cached) / attd;
    r.cache_fills = double(b.st.cache_fills - a.st.cache_fills) * per;
    r.cache_swaps = double(b.st.cache_swaps - a.st.cache_swaps) * per;
    r.open_share = double(open) / attd;
    r.disk_share = double(disk) / attd;
    r.reread_share = disk > 0 ? double(reread) / double(disk) : 0.0;
    r.attended_per_layer = double(att) * per / double(b.st.layers.size());
    r.promotions = double(b.st.promotions - a.st.promotions) * per;
    const double read = double(b.dev.tokens_read - a.dev.tokens_read), ahead = double(b.dev.tokens_prefetched - a.dev.tokens_prefetched);
    const double hits = double(b.dev.prefetch_hits - a.dev.prefetch_hits);
    r.prefetch_hit_share = read > 0 ? hits / read : 0.0;
    r.prefetch_waste_share = ahead > 0 ? 1.0 - hits / ahead : 0.0;
    const uint64_t hint_steps = b.st.hint_steps - a.st.hint_steps;
    r.hints_off_share = hint_steps > 0 ? double((b.st.hint_steps_off_probing + b.st.hint_steps_off_chosen) -
                                                (a.st.hint_steps_off_probing + a.st.hint_steps_off_chosen)) /
                                             double(hint_steps)
                                       : NAN;
    r.host_budget = ctx.params().kv_host_budget;
    r.copy_bytes = context::scoring_copy_bytes(ctx.model(), ctx.params());
    r.hot_slots = ctx.cells().hot_capacity();
    r.cache_rows = ctx.device_cache_rows();
    if (const planner * pl = ctx.planner(); pl != nullptr) {
        const path_times pr = pl->predicted(), me = pl->measured();
        r.beta = pl->beta_applied();
        r.beta_planned = pl->beta();
        r.beta_eq4 = pl->beta_eq4();
        r.m0_bound = pl->m0_bound();
        r.alpha_hot = pl->alpha_hot();
        r.alpha_cold = pl->alpha_cold();
        r.t_cpu_pred_ms = pr.t_cpu_s * 1e3;
        r.t_csd_pred_ms = pr.t_csd_s * 1e3;
        r.t_cpu_ms = me.t_cpu_s * 1e3;
        r.t_csd_ms = me.t_csd_s * 1e3;
        r.replans = pl->n_replans();
    }
    return r;
}

}  // namespace

double parse_beta(const std::string & s) {
    if (s == "planner") return 0.0;
    size_t used = 0;
    double b = NAN;
    try {
        b = std::stod(s, &used);
    } catch (const std::exception &) {
        used = 0;
    }
    if (used == 0 || used != s.size() || !std::isfinite(b) || b <= 0.0) {
        fail_usage("--beta values must be 'planner' or a hot/cold capacity ratio above 0, got '{}'", s);
    }
    return b;
}

void check(const step_bench_params & p) {
    check(p.workload);
    if (p.ctxs.empty() || p.colds.empty() || p.policies.empty() || p.storages.empty() || p.profiles.empty() ||
        p.score_copies.empty() || p.betas.empty()) {
        fail_usage("bench step: --ctx, --cold, --policies, --storage, --profile, --score-copy and --beta need at least "
                   "one value each");
    }
    for (const std::string & b : p.betas) (void)parse_beta(b);
    for (const int64_t n : p.ctxs) {
        if (n < 1024 || n > (int64_t(1) << 28)) fail_usage("--ctx values must be in [1024, 2^28] tokens, got {}", n);
    }
    for (const double c : p.colds) {
        if (!(c >= 0.0 && c < 1.0)) fail_usage("--cold values must be in [0, 1), got {}", c);
    }
    for (const std::string & s : p.storages) (void)csd::parse_storage(s);
    for (const std::string & s : p.profiles) (void)csd::load_device_profile(s);
    for (const std::string & s : p.score_copies) (void)parse_score_copy(s);
    if (p.device_caches.empty()) fail_usage("bench step: --device-cache needs at least one share");
    for (const double d : p.device_caches) {
        if (!(d >= 0.0 && d < 1.0)) fail_usage("--device-cache shares must be in [0, 1), got {}", d);
    }
    if (!p.placement.empty()) (void)parse_placement(p.placement);
    for (const std::string & s : p.policies) (void)make_policy(policy_params{.name = s}, p.workload.n_head_kv);
    if (p.n_steps < 1) fail_usage("--steps must be at least 1, got {}", p.n_steps);
    if (p.n_warmup < 0) fail_usage("--warmup must be at least 0, got {}", p.n_warmup);
    const bool any_cold = std::any_of(p.colds.begin(), p.colds.end(), [](double c) { return c > 0.0; });
    if (any_cold && p.kv_dir.empty()) fail_usage("bench step: a cold share above 0 needs --kv-dir");
}

std::vector<step_result> run_step_bench(const step_bench_params & p, const synthetic_workload & w, thread_pool & pool,
                                        const std::function<void(const step_result &)> & on_result) {
    check(p);
    const workload_params & wp = w.params();
    std::vector<csd::device_profile> profiles;
    for (const std::string & s : p.profiles) profiles.push_back(csd::load_device_profile(s));
    // A model of the attention shape: its weights are never read (the workload is the forward pass),
    // so they are small Q4_0 matrices with a tiny FFN and vocabulary.
    const int64_t extra = p.n_warmup + p.n_steps + 1;
    const int64_t ctx_max = *std::max_element(p.ctxs.begin(), p.ctxs.end()) + extra;
    const std::filesystem::path dir = p.kv_dir.empty() ? std::filesystem::temp_directory_path() : std::filesystem::path(p.kv_dir);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string model_path = (dir / fmt::format("hillinfer-bench-step-{}.gguf", ::getpid())).string();
    write_random_model(model_path, random_model_params{.n_vocab = 260, .n_embd = wp.n_head * wp.head_dim, .n_ff = 32,
                                                       .n_layer = wp.n_layer, .n_head = wp.n_head,
                                                       .n_head_kv = wp.n_head_kv, .n_ctx = int32_t(ctx_max),
                                                       .type = ggml_type::q4_0});
    const remove_on_exit cleanup{model_path};
    const auto m = model::load(model_path);
    const hparams & hp = m->hp();
    const uint64_t per_token = hp.kv_bytes_per_token(ggml_type::f16);

    std::vector<step_result> out;
    for (const int64_t n : p.ctxs) {
        // The context's KV, generated once for every configuration (tokens split over the pool).
        const int64_t nkv = hp.n_embd_kv();
        std::vector<std::vector<uint16_t>> k(size_t(hp.n_layer)), v(size_t(hp.n_layer));
        std::vector<const void *> kp, vp;
        for (int il = 0; il < hp.n_layer; ++il) {
            k[size_t(il)].resize(size_t(n) * size_t(nkv));
            v[size_t(il)].resize(size_t(n) * size_t(nkv));
            pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
                w.kv(il, t0, t1 - t0, k[size_t(il)].data() + t0 * nkv, v[size_t(il)].data() + t0 * nkv);
            }, 4096);
            kp.push_back(k[size_t(il)].data());
            vp.push_back(v[size_t(il)].data());
        }
        for (const double cold : p.colds) {
            for (const std::string & pol : p.policies) {
                const auto made = make_policy(policy_params{.name = pol}, hp.n_head_kv);
                const bool scores = made->uses_scores();
                // The scoring copy variants: for a policy that scores from the tiers (quest has its page bounds).
                const bool copies = scores && made->scores_from() == copy_kind::tier;
                const std::vector<std::string> ram = {"ram"}, none = {"-"};
                for (const std::string & storage : cold > 0.0 ? p.storages : ram) {
                    const bool emulator = storage == "emulator";
                    // Its variants: on the emulator a device profile, and a β when the policy scores.
                    std::vector<std::pair<size_t, std::string>> variants;
                    for (size_t pi = 0; pi < (emulator ? profiles.size() : 1); ++pi) {
                        for (const std::string & beta : emulator && scores ? p.betas : none) variants.emplace_back(pi, beta);
                    }
                    const std::vector<double> no_cache = {-1.0};
                    const bool plain = cold > 0.0 && !emulator;
                    for (const auto & [pi, beta] : variants) {
                        for (const std::string & copy : copies && !emulator ? p.score_copies : none) {
                        for (const double dc : plain ? p.device_caches : no_cache) {
                            step_config cfg{n, cold, pol, storage, emulator ? profiles[pi].name : "none", copy, beta, dc};
                            // Tracing: the configuration's index in the printed order, its context and cold share.
                            trace_scope span("bench configuration", "bench",
                                             {{"index", int64_t(out.size())}, {"ctx", n},
                                              {"cold_permille", int64_t(cold * 1000.0 + 0.5)}});
                            context_params cp;
                            cp.n_ctx = int32_t(n + extra);
                            cp.kv_type = ggml_type::f16;
                            cp.kv_host_budget = cold > 0.0 ? uint64_t(double(n) * (1.0 - cold)) * per_token : 0;
                            cp.kv_dir = cold > 0.0 ? p.kv_dir : std::string();
                            cp.policy.name = pol;
                            cp.policy.alpha = wp.alpha;
                            cp.storage.stop_requested = stop_requested;  // Ctrl-C abandons a device pass
                            if (!p.placement.empty()) cp.policy.placement = parse_placement(p.placement);
                            cp.policy.score.query = query_precision::int8;  // the device's integer kernel
                            if (cold > 0.0) {
                                cp.storage.kind = csd::parse_storage(storage);
                                if (emulator) {
                                    cp.storage.profile = profiles[pi];
                                    cp.planner.cal = p.calibrate ? p.calibrate(profiles[pi])
                                                                 : default_calibration(profiles[pi]);
                                    if (beta != "-") cp.planner.beta = parse_beta(beta);
                                }
                                cp.storage.prefetch = !p.no_prefetch;
                            }
                            if (copy != "-") cp.score_copy_bits = parse_score_copy(copy);
                            if (dc >= 0.0) cp.device_cache_share = dc;
                            cp.forward = [&w](const model & mm, thread_pool &, int64_t) {
                                return w.make_forward(mm.hp().n_vocab);
                            };
                            context ctx(*m, cp, pool);
                            cfg.placement = std::string(name(ctx.policy().placement()));
                            cfg.placement_set = !p.placement.empty();
                            ctx.import_kv(0, n, kp, vp);
                            step_result r = measure(ctx, cfg, p.n_warmup, p.n_steps);
                            if (on_result) on_result(r);
                            out.push_back(std::move(r));
                        }
                        }
                    }
                }
            }
        }
    }
    return out;
}

}  // namespace hill
