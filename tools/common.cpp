#include "common.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include "compute/kernel_mode.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/mapped_file.h"
#include "core/sys_info.h"
#include "core/trace.h"
#include "score/quant_copy.h"

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
    text_opt = app.add_option("-p,--prompt", text, fmt::format("the {}", what));
    file_opt = app.add_option("-f,--file", file, fmt::format("read the {} from a file", what));
    text_opt->excludes(file_opt);
}

std::string read_text_file(const std::string & path, const char * what) {
    require_regular_file(path, what);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_usage("cannot read {} '{}': {}", what, path, std::strerror(errno));
    std::string text;
    char buf[1 << 16];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(fd);
            fail_input("cannot read {} '{}': {}", what, path, std::strerror(err));
        }
        text.append(buf, size_t(n));
    }
    ::close(fd);
    return text;
}

void check_output_file(const char * flag, const std::string & path, const std::vector<std::string> & inputs) {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (const std::string & in : inputs) {
        if (in.empty()) continue;
        std::vector<fs::path> files;
        if (fs::is_directory(in, ec)) {
            for (fs::directory_iterator it(in, ec), end; !ec && it != end; it.increment(ec))
                files.push_back(it->path());
        } else {
            files.push_back(in);
        }
        for (const fs::path & f : files) {
            // An input that does not exist yet (a prompt cache to be made) is the same file by its path.
            if (fs::exists(f, ec) ? fs::equivalent(f, path, ec)
                                  : fs::weakly_canonical(fs::absolute(f, ec), ec) ==
                                        fs::weakly_canonical(fs::absolute(path, ec), ec)) {
                fail_usage("{} '{}' is the input file '{}': writing it would destroy what is read; choose another file",
                           flag, path, f.string());
            }
        }
    }
    try {
        atomic_file probe(path);  // creates and removes its temporary file: the directory is writable
    } catch (const error & e) {
        fail_usage("{} '{}': {}", flag, path, e.what());
    }
}

std::string prompt_opts::read() const {
    if (text_opt->count() == 0 && file_opt->count() == 0) fail_usage("give the {} with -p TEXT or -f FILE", what);
    if (file_opt->count() != 0) return read_text_file(file, fmt::format("{} file", what).c_str());
    return text;
}

namespace {
extern "C" void on_interrupt(int sig) {
    if (stop_requested()) {
        std::signal(sig, SIG_DFL);
        std::raise(sig);
        return;
    }
    record_stop_signal(sig);
}
}  // namespace

void install_interrupt_handler() {
    // A signal ignored at start stays ignored: SIGHUP under nohup, SIGINT in a shell's background job.
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {  // SIGHUP: the terminal went away, stop as for SIGTERM
        struct sigaction old {};
        if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        std::signal(sig, on_interrupt);
    }
    // A closed pipe (`| head`) is a failed write (EPIPE), reported and cleaned up as a full disk is,
    // not a death by signal that leaves the trace unwritten and the cold-pool files behind.
    std::signal(SIGPIPE, SIG_IGN);
}

bool interrupted() {
    return stop_requested();
}

void clear_interrupt() {
    clear_stop();
}

bool terminate_requested() {
    return stop_signal() == SIGTERM || stop_signal() == SIGHUP;
}

namespace {

// Digits with an optional sign ('-' only where `sign`), and where not `whole` a point and an exponent:
// [+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?
bool is_decimal(const std::string & v, bool whole, bool sign) {
    size_t i = 0;
    if (i < v.size() && (v[i] == '+' || (sign && v[i] == '-'))) ++i;
    const auto digits = [&] {
        const size_t from = i;
        while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
        return i - from;
    };
    size_t n = digits();
    if (!whole) {
        if (i < v.size() && v[i] == '.') {
            ++i;
            n += digits();
        }
        if (n > 0 && i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
            ++i;
            if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
            if (digits() == 0) return false;
        }
    }
    return n > 0 && i == v.size();
}

}  // namespace

std::string decimal_number_error(const std::string & v, bool whole, bool sign) {
    const std::string expected = whole ? (sign ? "a whole number" : "a whole number >= 0") : "a number";
    if (v.empty()) return "empty, expected " + expected;
    if (!is_decimal(v, whole, sign)) return "expected " + expected + ", got '" + v + "'";
    if (!whole) {
        // Past a double's range, either way (strtod: ERANGE), or past a float's: the conversion would give
        // inf or 0 (--temp 1e999 became inf).
        errno = 0;
        const double d = std::strtod(v.c_str(), nullptr);
        if (errno == ERANGE || std::fabs(d) > double(std::numeric_limits<float>::max())) {
            return "'" + v + "' is out of range for this flag";
        }
    }
    return std::string();
}

uint64_t parse_bytes(const std::string & text, const char * flag) {
    // The number, then the letters of a suffix; the number decimal (decimal_number_error: no 0x10M, ' 1M').
    size_t used = text.size();
    while (used > 0 && std::isalpha(static_cast<unsigned char>(text[used - 1]))) --used;
    double v = -1.0;
    if (is_decimal(text.substr(0, used), false, true)) {
        v = std::strtod(text.substr(0, used).c_str(), nullptr);  // inf past a double: "at most 1e18" below
    } else {
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
    if (used != 0 && mult != 0.0 && v * mult > 1e18) {
        fail_usage("{} expects a size of at most 1e18 bytes (about 888 PiB), got '{}'", flag, text);
    }
    if (used == 0 || mult == 0.0 || !(v > 0.0)) {
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
                   "KV cache in DRAM (the hot pool and the scoring copy), bytes with K/M/G/T suffix (default: a quarter "
                   "of physical memory)");
    dir_opt = app.add_option("--kv-dir", dir, "cold KV pool directory (default: $XDG_CACHE_HOME/hillinfer/kv or "
                             "~/.cache/hillinfer/kv)");
    app.add_option("--storage", storage, "device holding the cold pool: plain (the host reads and scores its keys) or "
                   "emulator (a software SmartSSD scores them near the data)")->capture_default_str();
    app.add_option("--csd-profile", csd_profile, "storage device speed caps: none, smartssd (the paper's device) or a "
                   "JSON file")->capture_default_str();
    app.add_option("--score-block", score_block, "tokens per score block the storage device streams back")
        ->capture_default_str();
    score_copy_opt =
        app.add_option("--score-copy", score_copy,
                       "plain storage: score from an INT4, INT3 or INT2 copy of the keys in DRAM "
                       "(int4, int3, int2; counted in --kv-host-budget) or from the stored keys, reading the cold ones "
                       "every step (off)")
            ->check(CLI::IsMember({"int4", "int3", "int2", "off"}))
            ->capture_default_str();
    app.add_flag("--no-prefetch", no_prefetch, "plain storage: do not read the previous step's selection ahead while the "
                 "host computes (the pipeline; for comparisons)");
    app.add_option("--device-cache", device_cache, "plain storage: share of the hot slots (in [0, 1)) given to a cache of "
                   "the cold tokens the last steps read (the highest-scored when they are more than its rows), "
                   "instead of the hot pool; 0: none")
        ->check(CLI::Validator([](std::string & text) -> std::string {
            char * end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            if (text.empty() || end != text.c_str() + text.size()) return "expects a number, got '" + text + "'";
            if (!(v >= 0.0 && v < 1.0)) return "expects a share in [0, 1), got " + text;
            return {};
        }, "SHARE in [0, 1)"))
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

context_params kv_opts::context(int32_t n_ctx, const policy_params & p, int32_t n_seq) const {
    context_params sp{.n_ctx = n_ctx, .kv_type = type(), .kv_host_budget = budget_bytes(), .kv_dir = resolved_dir(),
                      .policy = p, .n_seq = n_seq};
    sp.storage.kind = storage_kind();
    sp.storage.profile = csd::load_device_profile(csd_profile);
    sp.storage.block_tokens = score_block;
    sp.storage.prefetch = !no_prefetch;
    sp.score_copy_bits = parse_score_copy(score_copy);
    if (score_copy_opt->count() > 0 && sp.storage.kind == csd::storage_kind::emulator) {
        log_warn(
            "--score-copy applies to --storage plain; the emulator scores the cold keys where they live, so it is "
            "not used");
    }
    sp.device_cache_share = device_cache;
    sp.storage.stop_requested = interrupted;  // Ctrl-C abandons a device pass in progress
    if (sp.storage.kind == csd::storage_kind::emulator) {  // the planner balances host and device scoring
        sp.planner.cal = calibration_for(calibration_path(), sp.kv_dir, sp.storage.kind, sp.storage.profile);
    }
    return sp;
}

uint64_t kv_opts::budget_bytes() const {
    if (budget_opt->count() > 0) return parse_bytes(host_budget, "--kv-host-budget");
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) / 4 : uint64_t(1) << 30;
}

std::string cache_dir() {
    // The XDG base directory spec: a relative XDG_CACHE_HOME is invalid and ignored.
    if (const char * x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x == '/') return std::string(x) + "/hillinfer";
    if (const char * h = std::getenv("HOME"); h != nullptr && *h != '\0') return std::string(h) + "/.cache/hillinfer";
    return "/var/tmp/hillinfer";
}

std::string calibration_path() {
    return cache_dir() + "/calibration.json";
}

std::string kv_opts::resolved_dir() const {
    if (dir_opt->count() > 0) {
        if (dir.empty()) fail_usage("--kv-dir needs a directory");
        return dir;
    }
    return cache_dir() + "/kv";
}

prefill_progress::prefill_progress() : t0_us(time_us()) {}

void prefill_progress::operator()(double done, double total) {
    throw_if_stopped("prefill");
    const int64_t now = time_us();
    // A line at most once a second; at the end (whose calls all report the total) one more, unless the
    // last line already read 100%.
    const int percent = int(std::lround(100.0 * done / total));
    if (now - t0_us < 2'000'000 || (done < total ? now - last_us < 1'000'000 : last_percent == 100)) return;
    last_us = now;
    last_percent = percent;
    // done/total count work (context::prefill_work: attention grows with the context), so the time left
    // is the rate so far over what is left.
    const std::string left =
        done > 0 ? fmt::format(", {:.0f} s left", (total - done) * double(now - t0_us) / (done * 1e6)) : std::string();
    fmt::print(stderr, "prefill: {}%{}\n", percent, left);
}

void policy_opts::add(CLI::App & app) {
    const score_params d = policy_params{}.score;
    key_precision = std::string(name(d.key));
    query_precision = std::string(name(d.query));
    select = std::string(name(d.granularity));
    aggregate = std::string(name(d.aggregate));
    app.add_option("--policy", p.name, "decode attention: " + policy_names() + " (full: dense; streaming: sinks + "
                   "window; hillinfer: those and the top alpha by score; quest: those and the top pages by key bounds; leoam: "
                   "the same through adaptive chunks; h2o: those and the heavy hitters by accumulated attention; infinigen: those and "
                   "the top alpha by a key sketch, speculated one layer ahead and prefetched)")
        ->capture_default_str();
    scoring_opts.push_back(app.add_option("--alpha", p.alpha,
                                          "scoring policies: share of the cached tokens attended "
                                          "besides sinks and window, in (0, 1]")
                               ->capture_default_str());
    page_size_opt = app.add_option("--page-size", p.page_size, "quest, leoam: tokens per page of key bounds")
                        ->capture_default_str();
    app.add_option("--sinks", p.n_sinks, "first tokens always attended and kept in the hot pool")->capture_default_str();
    app.add_option("--window", p.n_window, "last tokens always attended and kept in the hot pool")->capture_default_str();
    key_opt =
        app.add_option("--score-precision", key_precision, "hillinfer: keys cast to fp16, int8 or int4 for scoring")
            ->capture_default_str();
    scoring_opts.push_back(key_opt);
    query_opt = app.add_option("--query-precision", query_precision, "hillinfer: query in fp32 or int8 for scoring "
                               "(default with --storage emulator: int8, for the policies the device scores for)")
                    ->capture_default_str();
    scoring_opts.push_back(query_opt);
    scoring_opts.push_back(app.add_option("--select", select,
                                          "hillinfer, quest, leoam, infinigen: one token set per "
                                          "layer, or per kv_head")
                               ->capture_default_str());
    aggregate_opt = app.add_option("--aggregate", aggregate,
                                   "hillinfer, quest, leoam, infinigen: how the query heads' scores make a token's: "
                                   "sum or max of the raw q.k, or softmax (each head's attention weight, normalized "
                                   "per head, summed)")
                        ->capture_default_str();
    scoring_opts.push_back(aggregate_opt);
    placement_opt = app.add_option("--placement", placement, "hot pool placement: fifo (recent tokens stay hot) or hkm (hit rates "
                   "drive promotions and demotions; prefill importance places the prompt); default: hkm for hillinfer, "
                   "h2o, leoam and infinigen, fifo for the others");
    migrate_opt = app.add_option("--migrate-budget", migrate_budget,
                                 "hkm: K and V bytes promoted per decode step at most, all layers "
                                 "(K/M/G suffixes; default: a sixteenth of the hot pool)");
    app.add_flag("--diag", p.diag, "measure attention recall and selection overlap per layer (slower)");
}

policy_params policy_opts::resolve(const kv_opts & kv) const {
    const csd::storage_kind storage = kv.storage_kind();
    policy_params r = p;
    r.score.key = parse_score_precision(key_precision);
    r.score.query = parse_query_precision(query_precision);
    // The device's integer kernel needs an int8 query: the default on the emulator, for the policies it scores for.
    if (storage == csd::storage_kind::emulator && query_opt->count() == 0 && make_policy(r, 1)->scores_from() == copy_kind::tier) {
        r.score.query = query_precision::int8;
    }
    r.score.granularity = parse_select_granularity(select);
    r.score.aggregate = parse_score_aggregate(aggregate);
    if (placement_opt->count() > 0) r.placement = parse_placement(placement);  // "" too: given, it must name one
    if (migrate_opt->count() > 0) r.migrate_bytes = parse_bytes(migrate_budget, "--migrate-budget");  // "" too
    validate(r, 1);  // the flags alone, before a model is loaded (the KV head count is checked with the model)
    const std::unique_ptr<policy> pol = make_policy(r, 1);
    const auto not_used = [&](const CLI::Option * o, std::string_view applies_to, std::string_view here) {
        if (o->count() > 0) log_warn("{} applies to {}; {}, so it is not used", o->get_name(), applies_to, here);
    };
    const std::string pol_name = "--policy " + r.name;
    const copy_kind from = pol->scores_from();
    const bool plain = storage == csd::storage_kind::plain;
    // The prefill's importance scores (hkm placement; h2o's accumulated attention starts from them) use the
    // precision and aggregate flags whatever scores the decode steps.
    const bool importance = pol->wants_prefill_importance();
    const auto for_importance = [&](const CLI::Option * o) {
        return importance && (o == key_opt || o == query_opt || o == aggregate_opt);
    };
    if (!pol->uses_scores()) {
        for (const CLI::Option * o : scoring_opts) {
            if (!for_importance(o)) not_used(o, "the policies that score tokens", pol_name + " scores none");
        }
    } else if (!importance && from != copy_kind::tier) {
        // The precision flags set how keys are scored (the host scorer, the device's kernel): hillinfer's.
        const std::string by = from == copy_kind::page_bounds    ? "scores pages by their key bounds"
                               : from == copy_kind::chunk_bounds ? "scores chunks and pages by their key bounds"
                                                                 : "scores tokens by a key sketch";
        for (const CLI::Option * o : {key_opt, query_opt}) {
            not_used(o, "hillinfer's scoring of the keys and to hkm placement's prefill importance",
                     pol_name + " " + by + " and places fifo");
        }
    } else if (!importance && plain && parse_score_copy(kv.score_copy) > 0) {
        for (const CLI::Option * o : {key_opt, query_opt}) {
            not_used(o, "--score-copy off, to the emulator and to hkm placement's prefill importance",
                     fmt::format("here the {} scoring copy scores, against an int8 query, and placement is fifo",
                                 kv.score_copy));
        }
    }
    if (from != copy_kind::page_bounds && from != copy_kind::chunk_bounds) {
        not_used(page_size_opt, "quest and leoam", pol_name + " has no pages");
    }
    if (plain && !(pol->uses_scores() && from == copy_kind::tier)) {
        not_used(kv.score_copy_opt, "hillinfer, which scores the keys themselves", pol_name + " does not");
    }
    return r;
}

void sampling_opts::add(CLI::App & app) {
    app.add_option("--temp", sp.temperature, "temperature; 0: greedy")->capture_default_str();
    app.add_option("--top-k", sp.top_k, "keep the k most likely tokens; 0: off")->capture_default_str();
    app.add_option("--top-p", sp.top_p, "nucleus sampling mass in (0, 1]; 1: off")->capture_default_str();
    app.add_option("--min-p", sp.min_p, "drop tokens below min-p times the top probability; 0: off")
        ->capture_default_str();
    app.add_option("--repeat-penalty", sp.repeat_penalty, "penalty for recent tokens; 1: off")->capture_default_str();
    app.add_option("--repeat-last-n", sp.repeat_last_n, "how many recent tokens the penalty sees")->capture_default_str();
    app.add_option("--seed", seed, "random seed, an integer in [0, 18446744073709551615] (2^64 - 1); -1: random "
                   "(printed at the end)")->capture_default_str();
    app.add_flag("--ignore-eos", ignore_eos, "never sample the end-of-sequence (or a chat's end-of-turn) token: "
                 "generate until -n or the end of the context (for benchmarks)");
}

sampler_params sampling_opts::ban_ends(sampler_params sp, const std::vector<int32_t> & end_tokens) const {
    if (!ignore_eos) return sp;
    for (const int32_t t : end_tokens) {
        if (t >= 0) sp.banned.push_back(t);
    }
    return sp;
}

sampler_params sampling_opts::resolve() const {
    sampler_params r = sp;
    r.seed = parse_seed(seed, "--seed", true).value_or(std::random_device{}());
    validate(r);
    return r;
}

void trace_opts::add(CLI::App & app) {
    opt = app.add_option("--trace", path, "write a Chrome trace (JSON: open in ui.perfetto.dev or chrome://tracing) of "
                         "every stage per layer and thread");
}

void trace_opts::start(const std::vector<std::string> & inputs) const {
    if (opt->count() == 0) return;
    if (path.empty()) fail_usage("--trace needs a file name");
    check_output_file("--trace", path, inputs);
    trace_start();
    trace_set_thread_name("main (owner)");
}

void trace_opts::finish(const std::string & process) const {
    if (opt->count() == 0) return;
    trace_stop();
    const trace_totals t = trace_write(path, process);
    fmt::print(stderr, "trace: {} events on {} threads written to {}{}\n", t.n_events, t.n_threads, path,
               t.n_dropped > 0 ? fmt::format(" ({} events over the limit of {} per thread were dropped)", t.n_dropped,
                                             trace_default_max_events)
                               : std::string());
}

void thread_opts::add(CLI::App & app) {
    opt = app.add_option("-t,--threads", n_threads, "compute threads (default: physical cores)");
    app.add_flag("--exact-matmul", exact_matmul,
                 "multiply quantized weights by f32 activations (the reference; default: activations quantized to "
                 "8 bits per block and integer dot products, as llama.cpp, for Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL/Q4_K/"
                 "Q5_K/Q6_K)");
}

int thread_opts::resolve() const {
    matmul_mode_set(exact_matmul ? matmul_mode::exact : matmul_mode::int8);
    if (opt->count() == 0) return physical_core_count();
    if (n_threads < 1 || n_threads > 1024) fail_usage("-t must be between 1 and 1024, got {}", n_threads);
    return n_threads;
}

}  // namespace hill::cli
