// Pieces shared by the CLI subcommands: option groups and their validation.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "model/model.h"
#include "policy/policy.h"

namespace hill::cli {

// -m MODEL [--tokenizer FILE]
struct model_opts {
    std::string path;
    std::string tokenizer;
    void add(CLI::App & app);
    std::unique_ptr<model> load() const;
};

// (-p TEXT | -f FILE)
struct prompt_opts {
    const char * what = "prompt";  // what the text is, in help and errors: "prompt", or "text" (perplexity)
    std::string text;
    std::string file;
    CLI::Option * text_opt = nullptr;
    CLI::Option * file_opt = nullptr;
    void add(CLI::App & app);
    std::string read() const;  // errors: unreadable file, neither or both given (exit_code::usage)
};

// -t N (default: physical cores) and --exact-matmul (the compute options of every command that
// runs the model)
struct thread_opts {
    int n_threads = 0;
    bool exact_matmul = false;  // f32 activations for quantized weights (compute/kernel_mode.h, matmul_mode)
    CLI::Option * opt = nullptr;
    void add(CLI::App & app);
    // not given -> physical_core_count(); outside [1, 1024] -> usage error. Sets the matmul mode.
    int resolve() const;
};

// A text file's bytes (`what` names it in errors: "prompt file"). Errors: hill::error(usage) for a
// missing or unreadable path or one that is no regular file (a directory, a FIFO, /dev/zero);
// hill::error(bad_input) when a read fails ("cannot read prompt file 'X': Input/output error").
std::string read_text_file(const std::string & path, const char * what);

// An output file named on the command line (`flag`: "--trace", "-o", ...), checked before any long
// work: refused when it is one of `inputs` (the same file — device and inode, so links and ../ are
// seen through; for an input that is a folder, any file directly in it; for one not made yet, such as
// a prompt cache or another output, the same path) or cannot be written
// (atomic_file's probe: a missing or unwritable directory, a directory as the file; an existing
// file is kept). Errors: hill::error(usage) "FLAG 'PATH': ...".
void check_output_file(const char * flag, const std::string & path, const std::vector<std::string> & inputs);

// --cache-type f16|f32 --kv-host-budget BYTES [--kv-dir DIR]: the KV element type, the hot pool's
// capacity and the cold pool's directory.
struct kv_opts {
    std::string cache_type = "f16";
    std::string host_budget;  // bytes with an optional K/M/G/T suffix (powers of 1024)
    std::string dir;
    std::string storage = "plain";     // --storage plain|emulator
    std::string csd_profile = "none";  // --csd-profile none|smartssd|FILE.json
    int32_t score_block = 1024;        // --score-block: tokens per score block
    std::string score_copy = "int3";   // --score-copy int4|int3|int2|off (context_params::score_copy_bits)
    bool no_prefetch = false;          // --no-prefetch (csd::storage_params::prefetch)
    double device_cache = context_params{}.device_cache_share;  // --device-cache: share of the hot slots
    CLI::Option * budget_opt = nullptr;
    CLI::Option * dir_opt = nullptr;
    CLI::Option * score_copy_opt = nullptr;
    void add(CLI::App & app);
    ggml_type type() const;             // f16 or f32; anything else is a usage error
    uint64_t budget_bytes() const;      // default: a quarter of physical memory
    bool budget_given() const { return budget_opt->count() > 0; }
    std::string resolved_dir() const;   // default: cache_dir() + "/kv"
    csd::storage_kind storage_kind() const;  // parse_storage (exit_code::usage on a bad name)
    // The context's parameters for n_seq sequences of n_ctx tokens under policy p.
    context_params context(int32_t n_ctx, const policy_params & p, int32_t n_seq = 1) const;
};

// --policy NAME --alpha A --sinks S --window W --score-precision P --query-precision P --select G
// --aggregate A --placement fifo|hkm --migrate-budget BYTES --diag
struct policy_opts {
    policy_params p;
    std::string key_precision, query_precision, select, aggregate;  // defaults: score_params{}
    std::string placement;                                          // "": the policy's own
    std::string migrate_budget;                                     // not given: a sixteenth of the hot pool
    CLI::Option * migrate_opt = nullptr;
    CLI::Option * key_opt = nullptr;
    CLI::Option * query_opt = nullptr;
    CLI::Option * placement_opt = nullptr;
    CLI::Option * aggregate_opt = nullptr;
    CLI::Option * page_size_opt = nullptr;
    std::vector<CLI::Option *> scoring_opts;  // --alpha, --score-precision, --query-precision, --select, --aggregate
    void add(CLI::App & app);
    // Parses and validates (exit_code::usage on bad values). With the emulator as storage, the query
    // precision defaults to int8 for a policy the device scores for (its integer kernel needs it). A
    // scoring flag given to a policy that scores nothing is a warning (it is not used), and so are the
    // precision flags where neither the decode steps nor the prefill's importance scores use them (the
    // scoring copy scores, or the policy scores no keys — quest, leoam, infinigen — and placement is
    // fifo), --page-size outside quest and leoam, and --score-copy for a policy that does not score the keys.
    policy_params resolve(const kv_opts & kv) const;
};

// --temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n --seed: how tokens are sampled.
struct sampling_opts {
    sampler_params sp;
    std::string seed = "-1";  // parse_seed: [0, seed_max] or -1 (random)
    bool ignore_eos = false;  // --ignore-eos
    void add(CLI::App & app);
    // The parameters with the seed resolved (-1: a random one). Errors: a bad seed or value (usage).
    sampler_params resolve() const;
    // sp with the model's end tokens (EOS, and a chat template's end of turn) banned under --ignore-eos.
    sampler_params ban_ends(sampler_params sp, const std::vector<int32_t> & end_tokens) const;
};

// --trace FILE.json: a Chrome trace of the run (core/trace.h; docs/architecture.md "Tracing").
struct trace_opts {
    std::string path;
    CLI::Option * opt = nullptr;
    void add(CLI::App & app);
    // With --trace: refuses a file that could not be written or is one of `inputs`
    // (check_output_file), then starts recording and names this thread's track "main (owner)". Call
    // before any long work. Without --trace: nothing.
    void start(const std::vector<std::string> & inputs) const;
    // With --trace: stops recording and writes the file (atomically), and says so on stderr with the
    // number of events and threads. Errors: the file cannot be written (bad_input, naming it).
    void finish(const std::string & process) const;
};

// Prints the prefill progress to stderr (at most once a second) once the prompt has taken 2 s;
// throws exit_code::interrupted after Ctrl-C. Pass as session::eval's progress callback.
struct prefill_progress {
    int64_t t0_us;
    int64_t last_us = 0;
    int last_percent = -1;  // of the last line printed
    prefill_progress();
    void operator()(double done, double total);
};

// The cache directory of HillInfer: $XDG_CACHE_HOME/hillinfer (an absolute path; a relative one is
// ignored, as the XDG base directory spec says), ~/.cache/hillinfer, or /var/tmp/hillinfer without
// either.
std::string cache_dir();
// The calibration cache (sched/calibration.h): cache_dir() + "/calibration.json".
std::string calibration_path();

// SIGINT / SIGTERM / SIGHUP: the first one sets the stop flag (core/interrupt.h) that long work polls,
// so that it stops cleanly (destructors remove the cold-pool files, the summary is printed); a second
// one kills the process. A signal ignored at start (nohup, a shell's background job) stays ignored.
// SIGPIPE is ignored: a closed pipe is a failed write.
void install_interrupt_handler();
bool interrupted();
// Forgets a Ctrl-C that has been handled (chat: a reply stopped, the conversation goes on), so the
// next one again stops cleanly instead of killing the process.
void clear_interrupt();
// The pending stop came from SIGTERM or SIGHUP (a service manager, kill, a closed terminal): end the
// command, not just the reply.
bool terminate_requested();

// "512", "64K", "1.5G", ... in bytes (fractions rounded down); usage error naming `flag` otherwise, and
// for a size below 1 byte ("0.5").
uint64_t parse_bytes(const std::string & text, const char * flag);

// Why `v` is not a decimal number of the kind a number flag takes — whole: digits with an optional
// sign ('-' only where `sign`); else also a point and an exponent ("1.5", "2e-3") — as "expected ...,
// got 'v'"; "" when it is one. CLI11's and strtod's conversions take more (an empty value as 0, 0x10,
// ' 5', 0x1p-3, inf, nan), which no flag means.
std::string decimal_number_error(const std::string & v, bool whole, bool sign);

// A comma-separated list option (--ctx 32768,131072; repeating the flag adds items). Every item must
// be a decimal number (decimal_number_error) where T is a number, convert to T, and none may be empty: CLI11's own
// delimiter drops the empty items of "32768,,131072" silently, this one refuses them (a usage error naming the flag).
// The help shows out's values, when there are any, as the default.
template <class T>
CLI::Option * add_list_option(CLI::App & app, const std::string & names, std::vector<T> & out, const std::string & desc) {
    std::string shown;
    for (const T & v : out) shown += (shown.empty() ? "" : ",") + CLI::detail::to_string(v);
    const std::string flag = names.substr(0, names.find(','));
    CLI::Option * opt = app.add_option_function<std::vector<std::string>>(
        names,
        [&out, flag](const std::vector<std::string> & args) {
            out.clear();
            for (const std::string & arg : args) {
                for (size_t b = 0;;) {
                    const size_t e = arg.find(',', b);
                    const std::string item = arg.substr(b, e == std::string::npos ? std::string::npos : e - b);
                    if (item.empty()) {
                        throw CLI::ValidationError(flag, "an empty item in '" + arg + "' (comma-separated values, none empty)");
                    }
                    T v{};
                    if constexpr (std::is_arithmetic_v<T>) {
                        const std::string why = decimal_number_error(item, std::is_integral_v<T>, std::is_signed_v<T>);
                        if (!why.empty()) throw CLI::ValidationError(flag, why);
                        // from_chars refuses what does not fit T (CLI11's conversion saturated it).
                        const char * end = item.data() + item.size();
                        const auto [p, ec] = std::from_chars(item.data() + (item[0] == '+' ? 1 : 0), end, v);
                        if (ec != std::errc() || p != end) {
                            throw CLI::ValidationError(flag, "'" + item + "' is out of range for this flag");
                        }
                    } else if (!CLI::detail::lexical_cast(item, v)) {
                        throw CLI::ValidationError(flag, "cannot read '" + item + "' as " + CLI::detail::type_name<T>());
                    }
                    out.push_back(v);
                    if (e == std::string::npos) break;
                    b = e + 1;
                }
            }
        },
        desc);
    opt->type_name(CLI::detail::type_name<T>());
    if (!out.empty()) opt->default_str("[" + shown + "]");
    return opt;
}

// The largest seed: seeds are 64-bit (the sampler's and the generators' std::mt19937_64 / splitmix64).
inline constexpr uint64_t seed_max = UINT64_MAX;  // 18446744073709551615

// A --seed value: a decimal integer in [0, seed_max], or with allow_random "-1" (nullopt: pick one
// at random). Anything else (out of range, negative, hexadecimal, a sign, spaces) is a usage error
// naming `flag`, the accepted range and the value: a seed is never clamped or wrapped.
std::optional<uint64_t> parse_seed(const std::string & text, const char * flag, bool allow_random);

}  // namespace hill::cli
