#include "engine/run_report.h"

#include "core/sys_info.h"
#include "format/json_file.h"
#include "policy/placement.h"

#include <fmt/format.h>

#include <cmath>

namespace hill {

namespace {

double ratio(double a, double b) { return b > 0.0 ? a / b : 0.0; }

// What a scoring policy scores: the stored keys at --score-precision / --query-precision, or the
// scoring copy (always against an INT8 query; the precision flags do not apply).
std::string scored_keys(const context & ctx) {
    const score_params & sp = ctx.policy().params().score;
    const scoring_copy * copy = ctx.scoring_copy();
    return copy != nullptr ? copy->describe() : fmt::format("{} keys / {} query", name(sp.key), name(sp.query));
}

// The policy and what it scores.
std::string describe(const context & ctx) {
    const policy & pol = ctx.policy();
    const policy_params & p = pol.params();
    std::string s = fmt::format("{} (", pol.name());
    if (pol.uses_scores()) {
        s += fmt::format("alpha {}, sinks {}, window {}, scores {}, {} of heads, per {}, ", p.alpha, p.n_sinks,
                         p.n_window, scored_keys(ctx), name(p.score.aggregate), name(p.score.granularity));
    } else if (pol.name() != "full") {
        s += fmt::format("sinks {}, window {}, ", p.n_sinks, p.n_window);
    }
    return s + fmt::format("placement {})", name(pol.placement()));
}

}  // namespace

attended_totals totals(const step_stats & s) {
    attended_totals t;
    for (const step_layer_stats & L : s.layers) {
        t.steps += L.n_steps;
        t.context += L.n_context;
        t.attended += L.n_attended;
        t.hot += L.n_attended_hot;
        t.cached += L.n_attended_cached;
        t.open += L.n_attended_open;
        t.disk += L.n_attended_disk;
        t.disk_reread += L.n_disk_reread;
        t.recall += L.recall_sum;
        t.overlap += L.overlap_sum;
        t.n_overlap += L.n_overlap;
    }
    return t;
}

std::string policy_summary(const context & ctx) {
    const policy & pol = ctx.policy();
    const step_stats & st = ctx.decode_stats();
    const attended_totals t = totals(st);
    std::string out = fmt::format("policy: {}", describe(ctx));
    if (t.steps == 0) return out + "\n";
    const std::string cached = ctx.device_cache_rows() > 0
                                   ? fmt::format("{:.1f}% from the device cache, ", 100.0 * ratio(double(t.cached), double(t.attended)))
                                   : std::string();
    const std::string reread = t.disk > 0 ? fmt::format(", {:.0f}% of it attended at the step before too",
                                                        100.0 * ratio(double(t.disk_reread), double(t.disk)))
                                          : std::string();
    out += fmt::format("; attended {:.1f}% of the cached tokens: {:.1f}% hot, {}{:.1f}% from the cold tier ({:.1f}% its "
                       "open tails in RAM, {:.1f}% SSD{}); time: forward {:.2f} s, ",
                       100.0 * ratio(double(t.attended), double(t.context)), 100.0 * ratio(double(t.hot), double(t.attended)),
                       cached, 100.0 * t.cold_share(), 100.0 * ratio(double(t.open), double(t.attended)),
                       100.0 * ratio(double(t.disk), double(t.attended)), reread, double(st.t_forward_us) / 1e6);
    if (pol.uses_scores()) {
        out += fmt::format("score {:.2f} s on the host + {:.2f} s for the storage device's scores, ",
                           double(st.t_score_host_us) / 1e6, double(st.t_score_device_us) / 1e6);
    }
    out += fmt::format("select+place {:.2f} s, gather+attend {:.2f} s, cold writes {:.2f} s\n", double(st.t_select_us) / 1e6,
                       double(st.t_attend_us) / 1e6, double(st.t_write_us) / 1e6);
    if (pol.params().diag && !pol.uses_scores()) {
        out += fmt::format("diag: policy {} attends by rule (recall over its set {:.4f})\n", pol.name(),
                           ratio(t.recall, double(t.steps)));
    } else if (pol.params().diag) {
        out += fmt::format("diag: attention recall {:.4f}, overlap between steps {:.4f} (mean over layers and steps)\n",
                           ratio(t.recall, double(t.steps)), ratio(t.overlap, double(t.n_overlap)));
        for (size_t il = 0; il < st.layers.size(); ++il) {
            const step_layer_stats & L = st.layers[il];
            out += fmt::format("  layer {:2}: recall {:.4f}, overlap {:.4f}\n", il, ratio(L.recall_sum, double(L.n_steps)),
                               ratio(L.overlap_sum, double(L.n_overlap)));
        }
    }
    return out;
}

nlohmann::json policy_json(const context & ctx) {
    const policy & pol = ctx.policy();
    const policy_params & p = pol.params();
    const step_stats & st = ctx.decode_stats();
    const attended_totals t = totals(st);
    nlohmann::json j = {
        {"policy", std::string(pol.name())},
        {"placement", std::string(name(pol.placement()))},
        {"steps", st.n_steps},
        {"failed_steps", st.n_failed},
        {"hints_gated", st.hints_gated},
        {"hint_steps", st.hint_steps},
        {"hint_steps_off_probing", st.hint_steps_off_probing},
        {"hint_steps_off_chosen", st.hint_steps_off_chosen},
        {"hint_tokens_next_step", st.hint_tokens_next_step},
        {"attended_share", ratio(double(t.attended), double(t.context))},
        {"attended_hot_share", ratio(double(t.hot), double(t.attended))},
        {"attended_cached_share", ratio(double(t.cached), double(t.attended))},
        {"device_cache_rows", ctx.device_cache_rows()},
        {"device_cache_fills", st.cache_fills},
        {"device_cache_swaps", st.cache_swaps},
        {"attended_cold_share", t.cold_share()},
        {"attended_open_share", ratio(double(t.open), double(t.attended))},
        {"attended_disk_share", ratio(double(t.disk), double(t.attended))},
        {"disk_reread_share", ratio(double(t.disk_reread), double(t.disk))},
        {"forward_s", double(st.t_forward_us) / 1e6},
        {"select_s", double(st.t_select_us) / 1e6},
        {"attend_s", double(st.t_attend_us) / 1e6},
        {"write_s", double(st.t_write_us) / 1e6},
    };
    if (pol.name() != "full") {
        j["sinks"] = p.n_sinks;
        j["window"] = p.n_window;
    }
    if (pol.uses_scores()) {
        j["alpha"] = p.alpha;
        j["scores"] = scored_keys(ctx);
        // The precision flags' values where they apply (the stored keys are scored), else null.
        const bool stored = ctx.scoring_copy() == nullptr;
        j["score_precision"] = stored ? nlohmann::json(name(p.score.key)) : nlohmann::json();
        j["query_precision"] = stored ? nlohmann::json(name(p.score.query)) : nlohmann::json();
        j["aggregate"] = name(p.score.aggregate);
        j["select"] = name(p.score.granularity);
        j["score_s"] = double(st.t_score_host_us) / 1e6;
        j["score_device_s"] = double(st.t_score_device_us) / 1e6;
    }
    if (p.diag) {
        j["recall"] = ratio(t.recall, double(t.steps));
        j["overlap"] = ratio(t.overlap, double(t.n_overlap));
        nlohmann::json layers = nlohmann::json::array();
        for (const step_layer_stats & L : st.layers) {
            layers.push_back({{"recall", ratio(L.recall_sum, double(L.n_steps))},
                              {"overlap", ratio(L.overlap_sum, double(L.n_overlap))}});
        }
        j["layers"] = layers;
    }
    return j;
}

namespace {

// The KV numbers of a run, for kv_summary and kv_json.
struct kv_totals {
    // Of the cells (token, layer) a sliding window keeps, of every sequence (released ones as they ended):
    // those without a hot copy.
    double cold_share = 0.0;
    uint64_t moves = 0;       // promotions + demotions
    double pingpong_rate = 0.0;
};

kv_totals kv_count(const context & ctx) {
    const kv_cells & c = ctx.cells();
    const step_stats & st = ctx.decode_stats();
    // The sequences still in the context, and those released (a batch's finished ones) as they ended.
    const kv_io_stats & io = ctx.io_stats();
    int64_t n_cells = int64_t(io.released_cells);
    for (int s = 0; s < c.n_seq(); ++s) n_cells += c.n_tokens(s) * c.n_layer();
    n_cells -= ctx.n_dropped_cells();  // held in no tier
    kv_totals t;
    t.cold_share = ratio(double(ctx.n_cold_cells() + int64_t(io.released_cold_cells)), double(n_cells));
    t.moves = st.promotions + st.evictions;
    t.pingpong_rate = ratio(double(st.pingpong), double(t.moves));
    return t;
}

uint64_t hot_bytes(const context & ctx) {
    uint64_t n = 0;
    for (int il = 0; il < ctx.cells().n_layer(); ++il) n += uint64_t(ctx.cells().n_hot(il));
    return n * ctx.layout().token_layer_bytes();
}

}  // namespace

std::string kv_summary(const context & ctx) {
    if (ctx.cold() == nullptr) return "";
    const kv_io_stats & io = ctx.io_stats();
    const step_stats & st = ctx.decode_stats();
    const kv_totals t = kv_count(ctx);
    return fmt::format("KV cache: {:.0f}% of the tokens only in the cold tier ({} hot slots per layer; the cold pool "
                       "holds every token — a sliding-window layer's only its window — the last, unfilled page of "
                       "each layer in RAM); {} read by the host from the "
                       "cold pool outside the storage device's passes (prefill, truncation, prompt cache, --diag; decode reads "
                       "are under storage:) and {} written to it\n"
                       "migration: {} promotions, {} demotions, {} into the hot pool (copied from the step's gathers: no "
                       "extra reads; a demotion writes nothing), ping-pong {:.1f}% ({} of {} moves undone within {} steps); "
                       "prefill placed {} token-layers hot\n",
                       100.0 * t.cold_share, ctx.cells().hot_capacity(), format_bytes(io.cold_read_bytes),
                       format_bytes(io.cold_write_bytes), st.promotions, st.evictions, format_bytes(st.promoted_bytes),
                       100.0 * t.pingpong_rate, st.pingpong, t.moves, pingpong_steps, io.prefill_placed_hot);
}

nlohmann::json kv_json(const context & ctx) {
    const kv_io_stats & io = ctx.io_stats();
    const step_stats & st = ctx.decode_stats();
    const kv_totals t = kv_count(ctx);
    return {{"hot_slots_per_layer", ctx.cells().hot_capacity()},
            {"cold_pool", ctx.cold() != nullptr},
            {"scoring_copy_bytes", context::scoring_copy_bytes(ctx.model(), ctx.params())},
            {"scoring_copy_bits", context::scoring_copy_bits(ctx.model(), ctx.params())},
            {"cold_share", t.cold_share},
            // KV bytes held now per tier (the hot pool's slots in use; the cold pool's pages in use), and the
            // token-layers sliding-window layers dropped (held in no tier).
            {"hot_bytes", hot_bytes(ctx)},
            {"cold_bytes", ctx.cold_bytes()},
            {"dropped_cells", ctx.n_dropped_cells()},
            {"cold_read_bytes", io.cold_read_bytes},
            {"cold_write_bytes", io.cold_write_bytes},
            {"promotions", st.promotions},
            {"demotions", st.evictions},
            {"migrated_bytes", st.promoted_bytes},
            {"pingpong", st.pingpong},
            {"pingpong_rate", t.pingpong_rate},
            {"prefill_placed_hot", io.prefill_placed_hot},
            {"prefill_evicted", io.prefill_evicted},
            {"room_evicted", io.room_evicted}};
}

std::string storage_summary(const context & ctx) {
    const csd::device & d = ctx.storage();
    const csd::device_counters c = d.counters();
    if (c.n_score_passes + c.n_read_passes == 0) return "";
    std::string out = fmt::format("storage: {}, profile {}\n", name(d.kind()), csd::describe(d.profile()));
    if (const scoring_copy * copy = ctx.scoring_copy(); copy != nullptr) {
        out += fmt::format("  scoring: every token from {} in DRAM ({}, {:.0f} B per token and layer); the storage "
                           "device reads only the selected KV\n",
                           copy->describe(), format_bytes(context::scoring_copy_bytes(ctx.model(), ctx.params())),
                           copy->bytes_per_token_layer());
    }
    if (c.tokens_scored > 0) {
        const bool plain = d.kind() == csd::storage_kind::plain;
        out += fmt::format("  scoring: {} cold tokens in {} passes, {} over the link = {:.2f} B per token ({}: {} B per "
                           "token), {} blocks\n", c.tokens_scored, c.n_score_passes, format_bytes(c.link_score_bytes),
                           double(c.link_score_bytes) / double(c.tokens_scored),
                           plain ? "the host reads whole key pages, hot tokens' rows and page padding included; a key row"
                                 : "a plain SSD moves at least the key row",
                           ctx.layout().row_bytes(), c.score_blocks);
    }
    out += fmt::format("  selected KV: {} cold tokens, {} over the link; flash read {}; device time read {:.2f} s, kernel "
                       "{:.2f} s, throttled {:.2f} s, back-pressure {:.2f} s; host waited {:.2f} s\n",
                       c.tokens_read, format_bytes(c.link_kv_bytes), format_bytes(c.internal_read_bytes),
                       double(c.t_read_us) / 1e6, double(c.t_kernel_us) / 1e6, double(c.t_throttle_us) / 1e6,
                       double(c.t_backpressure_us) / 1e6, double(c.t_host_wait_us) / 1e6);
    if (c.tokens_prefetched > 0) {
        const bool speculated = ctx.policy().scores_from() == copy_kind::sketch;
        out += fmt::format("  pipeline: {} tokens read ahead of their layer ({}); {:.1f}% of the "
                           "cold tokens read came from them, {:.1f}% of them were not selected\n", c.tokens_prefetched,
                           speculated ? "the first layer: the previous step's selection, hinted from the step before's last "
                                        "layer; the others: their selection speculated one layer ahead"
                                      : "the previous step's selection; the first layer's hinted from the step before's last layer",
                           100.0 * double(c.prefetch_hits) / double(std::max<uint64_t>(c.tokens_read, 1)),
                           100.0 * (1.0 - double(c.prefetch_hits) / double(c.tokens_prefetched)));
    }
    if (const uint64_t gated = ctx.decode_stats().hints_gated; gated > 0) {
        out += fmt::format("  pipeline: {} layer hints not sent: fewer than half of their layer's hinted tokens were "
                           "selected (sched/hint_gate.h)\n", gated);
    }
    if (const step_stats & st = ctx.decode_stats(); st.hint_steps_off_probing + st.hint_steps_off_chosen > 0) {
        out += fmt::format(
            "  pipeline: hints off in {} of {} steps: {} probing whether they pay, {} because the steps "
            "without them were faster on this machine (sched/hint_gate.h)\n",
            st.hint_steps_off_probing + st.hint_steps_off_chosen, st.hint_steps, st.hint_steps_off_probing,
            st.hint_steps_off_chosen);
    }
    if (c.n_cancelled + c.n_errors > 0) out += fmt::format("  {} passes cancelled, {} failed\n", c.n_cancelled, c.n_errors);
    return out;
}

nlohmann::json storage_json(const context & ctx) {
    const csd::device & d = ctx.storage();
    const csd::device_counters c = d.counters();
    return {{"storage", std::string(name(d.kind()))},
            {"profile", d.profile().name},
            {"score_passes", c.n_score_passes},
            {"read_passes", c.n_read_passes},
            {"tokens_scored", c.tokens_scored},
            {"tokens_read", c.tokens_read},
            {"tokens_prefetched", c.tokens_prefetched},
            {"prefetch_hits", c.prefetch_hits},
            {"score_blocks", c.score_blocks},
            {"link_score_bytes", c.link_score_bytes},
            {"link_score_bytes_per_token", c.tokens_scored > 0 ? double(c.link_score_bytes) / double(c.tokens_scored) : 0.0},
            {"key_row_bytes", ctx.layout().row_bytes()},
            {"link_kv_bytes", c.link_kv_bytes},
            {"internal_read_bytes", c.internal_read_bytes},
            {"read_s", double(c.t_read_us) / 1e6},
            {"kernel_s", double(c.t_kernel_us) / 1e6},
            {"throttle_s", double(c.t_throttle_us) / 1e6},
            {"backpressure_s", double(c.t_backpressure_us) / 1e6},
            {"host_wait_s", double(c.t_host_wait_us) / 1e6},
            {"cancelled", c.n_cancelled},
            {"errors", c.n_errors}};
}

namespace {

// β of the hot pool when it holds `hot` of `n` token-layers (infinite when nothing is cold).
double beta_of(int64_t hot, int64_t n) {
    return n > hot ? double(hot) / double(n - hot) : INFINITY;
}

int64_t tokens_per_layer(const context & ctx) {
    int64_t n = 0;
    for (int s = 0; s < ctx.n_seq(); ++s) n += ctx.n_past(s);
    return n;
}

}  // namespace

std::string planner_summary(const context & ctx) {
    if (ctx.cold() == nullptr) return "";
    const int64_t n = tokens_per_layer(ctx), hot_max = ctx.hot_slots_max();
    const planner * pl = ctx.planner();
    if (!ctx.policy().uses_scores()) {
        return fmt::format("planner: policy {} scores nothing, so the hot pool takes the whole host budget ({} slots per "
                           "layer)\n", ctx.policy().name(), hot_max);
    }
    if (pl == nullptr) {
        const std::string now = n == 0 ? std::string("no tokens in the context (a prefill stopped, or none yet)")
                                       : fmt::format("{} of {} tokens per layer hot, beta {:.3f}", std::min(hot_max, n),
                                                     n, beta_of(std::min(hot_max, n), n));
        return fmt::format(
            "planner: {} storage: the host scores every token, so the hot pool is a cache of the whole "
            "host budget and beta is M0-bound: {}\n",
            name(ctx.storage().kind()), now);
    }
    const path_times pr = pl->predicted(), me = pl->measured();
    const int64_t cap = ctx.cells().hot_capacity();
    return fmt::format(
        "planner: beta {:.3f} ({}{}; Eq. 4 gives {:.3f} at alpha {}, {:.3f} at the measured skew: {:.1f}% of the hot and "
        "{:.1f}% of the cold tokens selected), hot capacity {} of {} slots per layer for {} tokens; per step T_cpu "
        "predicted {:.2f} ms, measured {:.2f} ms, T_csd predicted {:.2f} ms, measured {:.2f} ms (mean of {} steps); "
        "{} re-plans\n  calibration: {}\n",
        pl->beta_applied(), pl->fixed() ? fmt::format("fixed at {:.3f}", pl->beta()) : fmt::format("planned {:.3f}", pl->beta()),
        pl->m0_bound() ? ", M0-bound: the host budget holds no more" : "", pl->beta_eq4(),
        pl->alpha(), pl->beta_skewed(), 100.0 * pl->alpha_hot(), 100.0 * pl->alpha_cold(), cap, hot_max, n,
        pr.t_cpu_s * 1e3, me.t_cpu_s * 1e3, pr.t_csd_s * 1e3, me.t_csd_s * 1e3, pl->n_observed(), pl->n_replans(),
        pl->params().cal.source);
}

nlohmann::json planner_json(const context & ctx) {
    const int64_t n = tokens_per_layer(ctx), hot_max = ctx.hot_slots_max();
    const planner * pl = ctx.planner();
    nlohmann::json j = {{"active", pl != nullptr && ctx.policy().uses_scores()}, {"tokens_per_layer", n},
                        {"hot_slots_max", hot_max}, {"hot_capacity", ctx.cells().hot_capacity()}};
    if (pl == nullptr || !ctx.policy().uses_scores()) {
        j["beta"] = number_or_null(beta_of(std::min(hot_max, n), n));
        j["m0_bound"] = ctx.cold() != nullptr;
        return j;
    }
    const path_times pr = pl->predicted(), me = pl->measured();
    const calibration & c = pl->params().cal;
    j["beta"] = number_or_null(pl->beta_applied());
    j["beta_planned"] = pl->beta();
    j["beta_fixed"] = pl->fixed();
    j["m0_bound"] = pl->m0_bound();
    j["beta_eq4"] = pl->beta_eq4();
    j["beta_eq4_measured_skew"] = pl->beta_skewed();
    j["alpha"] = pl->alpha();
    j["alpha_hot"] = pl->alpha_hot();
    j["alpha_cold"] = pl->alpha_cold();
    j["t_cpu_predicted_s"] = pr.t_cpu_s;
    j["t_csd_predicted_s"] = pr.t_csd_s;
    j["t_cpu_measured_s"] = me.t_cpu_s;
    j["t_csd_measured_s"] = me.t_csd_s;
    j["measured_steps"] = pl->n_observed();
    j["replans"] = pl->n_replans();
    j["calibration"] = {{"f_c_gbps", c.f_c_bps / 1e9}, {"f_s_gbps", c.f_s_bps / 1e9}, {"b_c_gbps", c.b_c_bps / 1e9},
                        {"b_s_gbps", c.b_s_bps / 1e9}, {"source", c.source}};
    return j;
}

std::string run_summary(const context & ctx) {
    return policy_summary(ctx) + kv_summary(ctx) + storage_summary(ctx) + planner_summary(ctx);
}

nlohmann::json run_json(const context & ctx) {
    return {{"policy", policy_json(ctx)}, {"kv", kv_json(ctx)}, {"storage", storage_json(ctx)},
            {"planner", planner_json(ctx)}};
}

}  // namespace hill
