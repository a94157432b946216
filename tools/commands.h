// The `hillinfer` subcommands. Each registers its options on the app and returns the function
// that runs it once parsing succeeded; that function returns the process exit code and throws
// hill::error for bad input (the caller prints it and exits with its code).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace hill::cli {

using command_fn = std::function<int()>;

command_fn add_generate(CLI::App & app);
command_fn add_chat(CLI::App & app);
command_fn add_info(CLI::App & app);
command_fn add_tokenize(CLI::App & app);
command_fn add_make_model(CLI::App & app);
command_fn add_perplexity(CLI::App & app);
command_fn add_demo(CLI::App & app);
command_fn add_convert(CLI::App & app);
command_fn add_bench(CLI::App & app);
command_fn add_calibrate(CLI::App & app);
command_fn add_serve(CLI::App & app);

}  // namespace hill::cli
