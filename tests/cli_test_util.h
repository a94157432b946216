// Running the `hillinfer` CLI from a test (the suites get its path as HILL_CLI_PATH).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace hill::test {

struct cli_result {
    int code;
    std::string out;  // stdout, then stderr when captured
};

// Runs `cmd` through the shell and captures its stdout. code: the exit status, or 128 + the signal
// that ended it.
inline cli_result run_shell(const std::string & cmd) {
    FILE * p = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    const int st = ::pclose(p);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

// Runs the CLI with `args` through the shell; `redirect` says where its output goes (default: both
// streams captured). code: the exit status, or 128 + the signal that ended it.
inline cli_result run_cli(const std::string & args, const std::string & redirect = " 2>&1") {
    return run_shell(std::string(HILL_CLI_PATH) + " " + args + redirect);
}

}  // namespace hill::test
