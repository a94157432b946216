// hillinfer: the command-line front end. See README.md for every subcommand.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "commands.h"
#include "common.h"
#include "compute/matmul.h"
#include "core/error.h"

int main(int argc, char ** argv) {
    using namespace hill;
    cli::install_interrupt_handler();  // first: --help into a closed pipe is a failed write too
    static constexpr const char * usage_hint = "Run 'hillinfer --help' (or 'hillinfer COMMAND --help') for usage.\n";
    CLI::App app{"HillInfer: long-context LLM inference with a KV cache in DRAM and on SSD", "hillinfer"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "hillinfer 0.1.0");
    std::vector<std::pair<CLI::App *, cli::command_fn>> cmds;
    for (auto add : {cli::add_generate, cli::add_chat, cli::add_info, cli::add_tokenize, cli::add_make_model, cli::add_perplexity, cli::add_demo, cli::add_convert, cli::add_bench, cli::add_calibrate, cli::add_serve}) {
        const size_t before = app.get_subcommands({}).size();
        cli::command_fn fn = add(app);
        cmds.emplace_back(app.get_subcommands({})[before], std::move(fn));
    }
    // A number flag takes a decimal number, and says so: CLI11 took an empty value ('') as 0, 0x10 as 16,
    // ' 5' as 5 and inf as a temperature, and said only "Could not convert" for 12x.
    const auto number = [](bool whole, bool sign) {
        return CLI::Validator([whole, sign](std::string & v) { return cli::decimal_number_error(v, whole, sign); }, "");
    };
    const std::function<void(CLI::App *)> check_numbers = [&](CLI::App * a) {
        for (CLI::Option * o : a->get_options()) {
            if (o->get_items_expected_max() > 1) continue;  // lists (add_list_option) check their items themselves
            const std::string t = o->get_type_name();
            if (t.starts_with("INT")) o->check(number(true, true));
            if (t.starts_with("UINT")) o->check(number(true, false));
            if (t.starts_with("FLOAT")) o->check(number(false, true));
        }
        for (CLI::App * s : a->get_subcommands({})) check_numbers(s);
    };
    check_numbers(&app);
    std::string names;
    for (const auto & [sub, fn] : cmds) names += (names.empty() ? "" : ", ") + sub->get_name();
    if (argc > 1 && argv[1][0] != '-' && (", " + names + ", ").find(", " + std::string(argv[1]) + ", ") == std::string::npos) {
        std::fprintf(stderr, "hillinfer: error: unknown command '%s'; commands: %s\n%s", argv[1], names.c_str(),
                     usage_hint);
        return int(exit_code::usage);
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp & e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp & e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion & e) {
        return app.exit(e);
    } catch (const CLI::ConversionError & e) {
        // A well-formed number (checked above) that does not fit the flag's type: "Could not convert: --n = 9...9".
        const std::string what = e.what(), head = "Could not convert: ";
        const size_t eq = what.find(" = ");
        if (what.starts_with(head) && eq != std::string::npos) {
            std::fprintf(stderr, "hillinfer: error: %s: '%s' is out of range for this flag\n%s",
                         what.substr(head.size(), eq - head.size()).c_str(), what.substr(eq + 3).c_str(), usage_hint);
        } else {
            std::fprintf(stderr, "hillinfer: error: %s\n%s", e.what(), usage_hint);
        }
        return int(exit_code::usage);
    } catch (const CLI::ParseError & e) {
        std::fprintf(stderr, "hillinfer: error: %s\n%s", e.what(), usage_hint);
        return int(exit_code::usage);
    }
    try {
        blas_init_single_threaded();
        for (auto & [sub, fn] : cmds) {
            if (!sub->parsed()) continue;
            const int rc = fn();
            // Output that could not be written (a full disk, a closed pipe) is a failure too.
            errno = 0;
            if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
                const int err = errno;  // set when the flush failed; a failed earlier write leaves only the flag
                std::fprintf(stderr, "hillinfer: error: cannot write to standard output%s%s\n", err != 0 ? ": " : "",
                             err != 0 ? std::strerror(err) : "");
                return int(exit_code::bad_input);
            }
            return rc;
        }
        return int(exit_code::usage);
    } catch (const hill::error & e) {
        // A stop the user asked for is no error ("hillinfer: interrupted during ..."). A value out of range
        // is a usage error too (exit 2): it gets the same pointer to --help.
        std::fprintf(stderr, "hillinfer: %s%s\n%s", e.code() == exit_code::interrupted ? "" : "error: ", e.what(),
                     e.code() == exit_code::usage ? usage_hint : "");
        return int(e.code());
    } catch (const std::bad_alloc &) {
        std::fprintf(stderr, "hillinfer: error: out of memory\n");
        return int(exit_code::bad_input);
    } catch (const std::system_error & e) {
        // fmt::print reports a failed write (a full disk, a closed pipe) this way; its what() repeats "cannot
        // write to file", the code says why.
        std::fprintf(stderr, "hillinfer: error: cannot write to standard output: %s\n", e.code().message().c_str());
        return int(exit_code::bad_input);
    }
}
