#include "common.h"

#include "core/error.h"
#include "core/mapped_file.h"

#include <fstream>
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

void thread_opts::add(CLI::App & app) {
    opt = app.add_option("-t,--threads", n_threads, "compute threads (default: physical cores)");
}

int thread_opts::resolve() const {
    if (opt->count() == 0) return physical_core_count();
    if (n_threads < 1 || n_threads > 1024) fail_usage("-t must be between 1 and 1024, got {}", n_threads);
    return n_threads;
}

}  // namespace hill::cli
