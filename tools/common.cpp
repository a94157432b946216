#include "common.h"

#include "core/error.h"
#include "core/mapped_file.h"

#include <cctype>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <unistd.h>
#include <sstream>

namespace hill::cli {

void model_opts::add(CLI::App & app) {
    app.add_option("-m,--model", path, "model file: GGUF, or a llama2.c checkpoint (.bin) with --tokenizer")->required();
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
    return uint64_t(v * mult);
}

void kv_opts::add(CLI::App & app) {
    budget_opt = app.add_option("--kv-host-budget", host_budget,
                   "hot KV pool in DRAM, bytes with K/M/G/T suffix (default: a quarter of physical memory)");
    dir_opt = app.add_option("--kv-dir", dir, "cold KV pool directory (default: ~/.cache/hillinfer/kv)");
}

uint64_t kv_opts::budget_bytes() const {
    if (budget_opt->count() > 0) return parse_bytes(host_budget, "--kv-host-budget");
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) / 4 : uint64_t(1) << 30;
}

std::string kv_opts::resolved_dir() const {
    if (dir_opt->count() > 0) {
        if (dir.empty()) fail_usage("--kv-dir needs a directory");
        return dir;
    }
    if (const char * x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') return std::string(x) + "/hillinfer/kv";
    if (const char * h = std::getenv("HOME"); h != nullptr && *h != '\0') return std::string(h) + "/.cache/hillinfer/kv";
    return "/var/tmp/hillinfer-kv";
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
