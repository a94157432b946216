// Pieces shared by the CLI subcommands: option groups and their validation.
#pragma once

#include "core/thread_pool.h"
#include "model/model.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

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
    std::string text;
    std::string file;
    CLI::Option * text_opt = nullptr;
    CLI::Option * file_opt = nullptr;
    void add(CLI::App & app);
    std::string read() const;  // errors: unreadable file, neither or both given (exit_code::usage)
};

// -t N (default: physical cores)
struct thread_opts {
    int n_threads = 0;
    CLI::Option * opt = nullptr;
    void add(CLI::App & app);
    int resolve() const;  // not given -> physical_core_count(); outside [1, 1024] -> usage error
};

std::string read_text_file(const std::string & path, const char * what);

}  // namespace hill::cli
