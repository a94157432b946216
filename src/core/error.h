// Errors and assertions (STYLE.md "Errors").
//
// - Programmer errors: HILL_ASSERT, which stays on in release builds and aborts with file:line.
// - Bad input and environment failures: throw hill::error with an exit code and an actionable
//   message that names the thing, the expected and the actual value.
// - Expected outcomes (pool full, short read, ...) are return values, never exceptions.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace hill {

// Process exit codes used by the CLI.
enum class exit_code : int {
    ok = 0,
    bad_input = 1,  // corrupt or unsupported file, failed I/O, environment failure
    usage = 2,      // bad flag or flag value, missing file named on the command line
    check_failed = 3,  // the run completed but what it checks did not hold (demo: a wrong passkey)
    interrupted = 130,  // SIGINT or SIGTERM: stopped cleanly (128 + SIGINT, as shells report it)
};

class error : public std::runtime_error {
public:
    error(exit_code code, const std::string & msg) : std::runtime_error(msg), code_(code) {}
    exit_code code() const { return code_; }

private:
    exit_code code_;
};

// Throws hill::error(exit_code::bad_input, formatted message).
template <class... A>
[[noreturn]] void fail_input(fmt::format_string<A...> f, A &&... args) {
    throw error(exit_code::bad_input, fmt::format(f, std::forward<A>(args)...));
}

// Throws hill::error(exit_code::usage, formatted message).
template <class... A>
[[noreturn]] void fail_usage(fmt::format_string<A...> f, A &&... args) {
    throw error(exit_code::usage, fmt::format(f, std::forward<A>(args)...));
}

[[noreturn]] void assert_failed(const char * expr, const char * file, int line);

}  // namespace hill

// Always on, also in Release builds.
#define HILL_ASSERT(cond) ((cond) ? (void)0 : ::hill::assert_failed(#cond, __FILE__, __LINE__))
