#include "common.h"

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/sys_info.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <unistd.h>
#include <sstream>

namespace hill::cli {

void model_opts::add(CLI::App & app) {
    app.add_option("-m,--model", path,
                   "model: GGUF file, Hugging Face checkpoint folder, or llama2.c checkpoint (.bin) with --tokenizer")
        ->required();
    app.add_option("--tokenizer", tokenizer, "llama2.c tokenizer.bin (for llama2.c checkpoints)");
}

std::unique_ptr<model> model_opts::load() const {
    if (!tokenizer.empty()) require_regular_file(tokenizer, "tokenizer file");
    return model::load(path, tokenizer);
}

void prompt_opts::add(CLI::App & app) {
    text_opt = app.add_option("-p,--prompt", text, "prompt text");
    file_opt = app.add_option("-f,--file", file, "read the prompt from a file");
    text_opt->excludes(file_opt);
}

std::string read_text_file(const std::string & path, const char * what) {
    require_regular_file(path, what);
    std::ifstream in(path, std::ios::binary);
    if (!in) fail_usage("cannot read {} '{}'", what, path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string prompt_opts::read() const {
    if (text_opt->count() == 0 && file_opt->count() == 0) fail_usage("give the prompt with -p TEXT or -f FILE");
    if (file_opt->count() != 0) return read_text_file(file, "prompt file");
    return text;
}

namespace {
volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_interrupt(int sig) {
    if (g_interrupted != 0) {
        std::signal(sig, SIG_DFL);
        std::raise(sig);
        return;
    }
    g_interrupted = 1;
}
}  // namespace

void install_interrupt_handler() {
    std::signal(SIGINT, on_interrupt);
    std::signal(SIGTERM, on_interrupt);
}

bool interrupted() { return g_interrupted != 0; }

uint64_t parse_bytes(const std::string & text, const char * flag) {
    size_t used = 0;
    double v = -1.0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception &) {
        used = 0;
    }
    std::string suffix = text.substr(used);
    if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
    if (!suffix.empty() && (suffix.back() == 'i')) suffix.pop_back();
    double mult = 1.0;
    if (suffix.size() == 1) {
        switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
            case 'K': mult = 1024.0; break;
            case 'M': mult = 1024.0 * 1024.0; break;
            case 'G': mult = 1024.0 * 1024.0 * 1024.0; break;
            case 'T': mult = 1024.0 * 1024.0 * 1024.0 * 1024.0; break;
            default: mult = 0.0;
        }
    } else if (!suffix.empty()) {
        mult = 0.0;
    }
    if (used == 0 || mult == 0.0 || !(v > 0.0) || v * mult > 1e18) {
        fail_usage("{} expects a positive size in bytes with an optional K, M, G or T suffix (e.g. 512M), got '{}'",
                   flag, text);
    }
    // A fraction of a byte would become 0 bytes, which the flags do not mean; fractions above one
    // byte are rounded down (1.5K is 1536 bytes).
    if (v * mult < 1.0) fail_usage("{} expects a size of at least 1 byte, got '{}' ({} bytes)", flag, text, v * mult);
    return uint64_t(v * mult);
}

std::optional<uint64_t> parse_seed(const std::string & text, const char * flag, bool allow_random) {
    if (allow_random && text == "-1") return std::nullopt;
    uint64_t v = 0;
    const char * end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, v, 10);
    if (text.empty() || ptr != end || ec != std::errc()) {
        fail_usage("{} expects a decimal integer in [0, {}]{}, got '{}'{}", flag, seed_max,
                   allow_random ? " or -1 (random)" : "", text,
                   ec == std::errc::result_out_of_range ? " (out of range)" : "");
    }
    return v;
}

void kv_opts::add(CLI::App & app) {
    app.add_option("--cache-type", cache_type, "KV cache element type: f16 or f32")->capture_default_str();
    budget_opt = app.add_option("--kv-host-budget", host_budget,
                   "hot KV pool in DRAM, bytes with K/M/G/T suffix (default: a quarter of physical memory)");
    dir_opt = app.add_option("--kv-dir", dir, "cold KV pool directory (default: $XDG_CACHE_HOME/hillinfer/kv or "
                             "~/.cache/hillinfer/kv)");
    app.add_option("--storage", storage, "device holding the cold pool: plain (the host reads and scores its keys) or "
                   "emulator (a software SmartSSD scores them near the data)")->capture_default_str();
    app.add_option("--csd-profile", csd_profile, "storage device speed caps: none, smartssd (the paper's device) or a "
                   "JSON file")->capture_default_str();
    app.add_option("--score-block", score_block, "tokens per score block the storage device streams back")
        ->capture_default_str();
}

csd::storage_kind kv_opts::storage_kind() const {
    return csd::parse_storage(storage);
}

ggml_type kv_opts::type() const {
    const auto t = ggml_type_from_name(cache_type);
    if (!t || (*t != ggml_type::f16 && *t != ggml_type::f32)) fail_usage("--cache-type must be f16 or f32, got '{}'", cache_type);
    return *t;
}

session_params kv_opts::session(int32_t n_ctx, const policy_params & p) const {
    session_params sp{.n_ctx = n_ctx, .kv_type = type(), .kv_host_budget = budget_bytes(), .kv_dir = resolved_dir(),
                      .policy = p};
    sp.storage.kind = storage_kind();
    sp.storage.profile = csd::load_device_profile(csd_profile);
    sp.storage.block_tokens = score_block;
    sp.storage.stop_requested = interrupted;  // Ctrl-C abandons a device pass in progress
    return sp;
}

uint64_t kv_opts::budget_bytes() const {
    if (budget_opt->count() > 0) return parse_bytes(host_budget, "--kv-host-budget");
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) / 4 : uint64_t(1) << 30;
}

std::string cache_dir() {
    if (const char * x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') return std::string(x) + "/hillinfer";
    if (const char * h = std::getenv("HOME"); h != nullptr && *h != '\0') return std::string(h) + "/.cache/hillinfer";
    return "/var/tmp/hillinfer";
}

std::string kv_opts::resolved_dir() const {
    if (dir_opt->count() > 0) {
        if (dir.empty()) fail_usage("--kv-dir needs a directory");
        return dir;
    }
    return cache_dir() + "/kv";
}

prefill_progress::prefill_progress() : t0_us(time_us()) {}

void prefill_progress::operator()(int64_t done, int64_t total) {
    if (interrupted()) throw error(exit_code::interrupted, "interrupted during prefill");
    const int64_t now = time_us();
    if (now - t0_us < 2'000'000 || (now - last_us < 1'000'000 && done < total)) return;
    last_us = now;
    const double rate = double(done) / (double(now - t0_us) / 1e6);
    // Layer-major prefill: done/total count (token, layer) pairs.
    fmt::print(stderr, "prefill: {:.0f}% ({} of {} token-layers), {:.0f} s left\n", 100.0 * double(done) / double(total),
               done, total, double(total - done) / rate);
}

void policy_opts::add(CLI::App & app) {
    const score_params d;
    key_precision = std::string(name(d.key));
    query_precision = std::string(name(d.query));
    select = std::string(name(d.granularity));
    aggregate = std::string(name(d.aggregate));
    app.add_option("--policy", policy, "decode attention: full (dense), hillinfer (top-alpha by score), streaming "
                   "(sinks + window)")->capture_default_str();
    app.add_option("--alpha", p.alpha, "hillinfer: share of the cached tokens attended besides sinks and window, in "
                   "(0, 1]")->capture_default_str();
    app.add_option("--sinks", p.n_sinks, "first tokens always attended and kept in the hot pool")->capture_default_str();
    app.add_option("--window", p.n_window, "last tokens always attended (hillinfer, streaming)")->capture_default_str();
    app.add_option("--score-precision", key_precision, "hillinfer: keys cast to fp16, int8 or int4 for scoring")
        ->capture_default_str();
    query_opt = app.add_option("--query-precision", query_precision, "hillinfer: query in fp32 or int8 for scoring "
                               "(default with --storage emulator: int8)")->capture_default_str();
    app.add_option("--select", select, "hillinfer: one token set per layer, or per kv_head")->capture_default_str();
    app.add_option("--aggregate", aggregate, "hillinfer: sum or max of the query heads' scores")->capture_default_str();
    app.add_flag("--diag", p.diag, "measure attention recall and selection overlap per layer (slower)");
}

policy_params policy_opts::resolve(csd::storage_kind storage) const {
    policy_params r = p;
    r.kind = parse_policy(policy);
    r.score.key = parse_score_precision(key_precision);
    r.score.query = parse_query_precision(query_precision);
    if (storage == csd::storage_kind::emulator && query_opt->count() == 0) r.score.query = query_precision::int8;
    r.score.granularity = parse_select_granularity(select);
    r.score.aggregate = parse_score_aggregate(aggregate);
    validate(r);
    // Streaming attends to the sinks and the window only: with neither, a decode step would attend to
    // nothing. (hillinfer still attends to the top ⌈α·N⌉ >= 1 tokens by score.)
    if (r.kind == policy_kind::streaming && r.n_sinks == 0 && r.n_window == 0) {
        fail_usage("--policy streaming with --sinks 0 and --window 0 attends to no token; give --sinks or --window at "
                   "least 1");
    }
    return r;
}

namespace {

struct policy_totals {
    uint64_t steps = 0, context = 0, attended = 0, attended_hot = 0, n_overlap = 0;
    double recall = 0.0, overlap = 0.0;
};

policy_totals totals(const attention_policy & pol) {
    policy_totals t;
    for (const policy_layer_stats & L : pol.stats().layers) {
        t.steps += L.n_steps;
        t.context += L.n_context;
        t.attended += L.n_attended;
        t.attended_hot += L.n_attended_hot;
        t.recall += L.recall_sum;
        t.overlap += L.overlap_sum;
        t.n_overlap += L.n_overlap;
    }
    return t;
}

double ratio(double a, double b) { return b > 0.0 ? a / b : 0.0; }

std::string describe(const policy_params & p) {
    switch (p.kind) {
        case policy_kind::full: return "full";
        case policy_kind::streaming: return fmt::format("streaming (sinks {}, window {})", p.n_sinks, p.n_window);
        case policy_kind::hillinfer:
            return fmt::format("hillinfer (alpha {}, sinks {}, window {}, scores {} keys / {} query, {} of heads, "
                               "per {})", p.alpha, p.n_sinks, p.n_window, name(p.score.key), name(p.score.query),
                               name(p.score.aggregate), name(p.score.granularity));
    }
    return "?";
}

}  // namespace

std::string policy_summary(const attention_policy & pol, const policy_params & p) {
    const policy_totals t = totals(pol);
    const policy_stats & st = pol.stats();
    std::string out = fmt::format("policy: {}", describe(p));
    if (t.steps == 0) return out + "\n";
    out += fmt::format("; attended {:.1f}% of the cached tokens, {:.1f}% of them hot; time: ",
                       100.0 * ratio(double(t.attended), double(t.context)),
                       100.0 * ratio(double(t.attended_hot), double(t.attended)));
    if (p.kind == policy_kind::hillinfer) {
        out += fmt::format("score {:.2f} s on the host + {:.2f} s for the storage device's scores, select {:.2f} s, ",
                           double(st.t_score_us) / 1e6, double(st.t_drain_us) / 1e6, double(st.t_select_us) / 1e6);
    }
    out += fmt::format("gather+attend {:.2f} s\n", double(st.t_attend_us) / 1e6);
    if (p.diag && p.kind == policy_kind::full) {
        out += "diag: policy full attends to every token (recall 1)\n";
    } else if (p.diag) {
        out += fmt::format("diag: attention recall {:.4f}, overlap between steps {:.4f} (mean over layers and steps)\n",
                           ratio(t.recall, double(t.steps)), ratio(t.overlap, double(t.n_overlap)));
        for (size_t il = 0; il < st.layers.size(); ++il) {
            const policy_layer_stats & L = st.layers[il];
            out += fmt::format("  layer {:2}: recall {:.4f}, overlap {:.4f}\n", il, ratio(L.recall_sum, double(L.n_steps)),
                               ratio(L.overlap_sum, double(L.n_overlap)));
        }
    }
    return out;
}

nlohmann::json policy_json(const attention_policy & pol, const policy_params & p) {
    const policy_totals t = totals(pol);
    const policy_stats & st = pol.stats();
    nlohmann::json j = {
        {"policy", std::string(name(p.kind))},
        {"attended_share", ratio(double(t.attended), double(t.context))},
        {"attended_hot_share", ratio(double(t.attended_hot), double(t.attended))},
        {"attend_s", double(st.t_attend_us) / 1e6},
    };
    if (p.kind != policy_kind::full) {
        j["sinks"] = p.n_sinks;
        j["window"] = p.n_window;
    }
    if (p.kind == policy_kind::hillinfer) {
        j["alpha"] = p.alpha;
        j["score_precision"] = name(p.score.key);
        j["query_precision"] = name(p.score.query);
        j["aggregate"] = name(p.score.aggregate);
        j["select"] = name(p.score.granularity);
        j["score_s"] = double(st.t_score_us) / 1e6;
        j["drain_s"] = double(st.t_drain_us) / 1e6;
        j["select_s"] = double(st.t_select_us) / 1e6;
    }
    if (p.diag && p.kind == policy_kind::full) j["recall"] = 1.0;
    if (p.diag && p.kind != policy_kind::full) {
        j["recall"] = ratio(t.recall, double(t.steps));
        j["overlap"] = ratio(t.overlap, double(t.n_overlap));
        nlohmann::json layers = nlohmann::json::array();
        for (const policy_layer_stats & L : st.layers) {
            layers.push_back({{"recall", ratio(L.recall_sum, double(L.n_steps))},
                              {"overlap", ratio(L.overlap_sum, double(L.n_overlap))}});
        }
        j["layers"] = layers;
    }
    return j;
}

namespace {

struct kv_totals {
    int64_t n_tokens = 0, n_cold = 0;
    double cold_share() const { return n_tokens > 0 ? double(n_cold) / double(n_tokens) : 0.0; }
};

kv_totals kv_count(const kv_store & kv) {
    kv_totals t;
    for (int il = 0; il < kv.layout().n_layer; ++il) {
        t.n_tokens += kv.n_tokens(il);
        t.n_cold += kv.n_cold(il);
    }
    return t;
}

}  // namespace

std::string kv_summary(const kv_store & kv) {
    const kv_totals t = kv_count(kv);
    if (t.n_cold == 0) return "";
    return fmt::format("KV cache: {:.0f}% in the cold pool ({} hot slots per layer; the last, unfilled page of each "
                       "layer stays in RAM); {} read from and {} written to the cold pool\n", 100.0 * t.cold_share(),
                       kv.hot_capacity(), format_bytes(kv.stats().cold_read_bytes), format_bytes(kv.stats().cold_write_bytes));
}

nlohmann::json kv_json(const kv_store & kv) {
    return {{"hot_slots_per_layer", kv.hot_capacity()}, {"cold_share", kv_count(kv).cold_share()},
            {"cold_read_bytes", kv.stats().cold_read_bytes}, {"cold_write_bytes", kv.stats().cold_write_bytes}};
}

std::string storage_summary(const csd::device & d, const kv_store & kv) {
    const csd::device_counters c = d.counters();
    if (c.n_score_passes + c.n_read_passes == 0) return "";
    std::string out = fmt::format("storage: {}, profile {}\n", name(d.kind()), csd::describe(d.profile()));
    if (c.tokens_scored > 0) {
        out += fmt::format("  scoring: {} cold tokens in {} passes, {} over the link = {:.2f} B per token (a plain SSD "
                           "moves the key row: {} B per token), {} blocks\n", c.tokens_scored, c.n_score_passes,
                           format_bytes(c.link_score_bytes), double(c.link_score_bytes) / double(c.tokens_scored),
                           kv.layout().row_bytes(), c.score_blocks);
    }
    out += fmt::format("  selected KV: {} cold tokens, {} over the link; flash read {}, written {}; device time read "
                       "{:.2f} s, kernel {:.2f} s, throttled {:.2f} s, back-pressure {:.2f} s; host waited {:.2f} s\n",
                       c.tokens_read, format_bytes(c.link_kv_bytes), format_bytes(c.internal_read_bytes),
                       format_bytes(c.internal_write_bytes),
                       double(c.t_read_us) / 1e6, double(c.t_kernel_us) / 1e6, double(c.t_throttle_us) / 1e6,
                       double(c.t_backpressure_us) / 1e6, double(c.t_host_wait_us) / 1e6);
    if (c.n_cancelled + c.n_errors > 0) out += fmt::format("  {} passes cancelled, {} failed\n", c.n_cancelled, c.n_errors);
    return out;
}

nlohmann::json storage_json(const csd::device & d, const kv_store & kv) {
    const csd::device_counters c = d.counters();
    return {{"storage", std::string(name(d.kind()))},
            {"profile", d.profile().name},
            {"score_passes", c.n_score_passes},
            {"read_passes", c.n_read_passes},
            {"tokens_scored", c.tokens_scored},
            {"tokens_read", c.tokens_read},
            {"score_blocks", c.score_blocks},
            {"link_score_bytes", c.link_score_bytes},
            {"link_score_bytes_per_token", c.tokens_scored > 0 ? double(c.link_score_bytes) / double(c.tokens_scored) : 0.0},
            {"key_row_bytes", kv.layout().row_bytes()},
            {"link_kv_bytes", c.link_kv_bytes},
            {"internal_read_bytes", c.internal_read_bytes},
            {"internal_write_bytes", c.internal_write_bytes},
            {"link_write_bytes", c.link_write_bytes},
            {"read_s", double(c.t_read_us) / 1e6},
            {"kernel_s", double(c.t_kernel_us) / 1e6},
            {"throttle_s", double(c.t_throttle_us) / 1e6},
            {"backpressure_s", double(c.t_backpressure_us) / 1e6},
            {"host_wait_s", double(c.t_host_wait_us) / 1e6},
            {"cancelled", c.n_cancelled},
            {"errors", c.n_errors}};
}

void thread_opts::add(CLI::App & app) {
    opt = app.add_option("-t,--threads", n_threads, "compute threads (default: physical cores)");
}

int thread_opts::resolve() const {
    if (opt->count() == 0) return physical_core_count();
    if (n_threads < 1 || n_threads > 1024) fail_usage("-t must be between 1 and 1024, got {}", n_threads);
    return n_threads;
}

}  // namespace hill::cli
