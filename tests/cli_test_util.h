// Running the `hillinfer` CLI from a test (the suites get its path as HILL_CLI_PATH).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

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
    // Appended to a named string: GCC 12 at -O2 warns (-Warray-bounds, falsely) on std::string(literal) + " ".
    std::string cmd = HILL_CLI_PATH;
    cmd.append(" ").append(args).append(redirect);
    return run_shell(cmd);
}

inline std::string read_whole_file(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

struct cli_signal_result {
    int code;             // as run_cli's
    std::string out;      // stdout
    std::string err;      // stderr
    bool signalled;       // the marker appeared and the signal was sent
    double seconds;       // from the start to the end of the process
};

// Starts the CLI with `args` (through the shell, which execs it, so that the pid is the CLI's), its
// stdout and stderr to files; delay_s seconds after `marker` appeared in its stderr, sends it `sig`.
// Waits for it to end, at most timeout_s seconds from the start (then kills it: code 128 + SIGKILL).
inline cli_signal_result run_cli_and_signal(const std::string & args, const std::string & marker, double delay_s,
                                            int sig, double timeout_s) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "hill-cli-XXXXXX").string();
    const std::filesystem::path dir = ::mkdtemp(tmpl.data());
    const std::string out = (dir / "out").string(), err = (dir / "err").string();
    const std::string cmd = "exec " + std::string(HILL_CLI_PATH) + " " + args + " >" + out + " 2>" + err;
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char *>(nullptr));
        ::_exit(127);
    }
    const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    cli_signal_result r{-1, "", "", false, 0.0};
    int st = 0;
    double seen_at = -1.0;  // when the marker appeared
    for (;;) {
        const pid_t w = ::waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (seen_at < 0.0 && read_whole_file(err).find(marker) != std::string::npos) seen_at = elapsed();
        if (!r.signalled && seen_at >= 0.0 && elapsed() >= seen_at + delay_s) {
            ::kill(pid, sig);
            r.signalled = true;
        }
        if (elapsed() > timeout_s) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &st, 0);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    r.seconds = elapsed();
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.out = read_whole_file(out);
    r.err = read_whole_file(err);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    return r;
}

}  // namespace hill::test
