// hillinfer tokenize -m MODEL (-p TEXT | -f FILE) [--ids] [--no-bos]
#include "commands.h"
#include "common.h"

#include <fmt/format.h>

namespace hill::cli {

command_fn add_tokenize(CLI::App & app) {
    struct opts_t {
        model_opts model;
        prompt_opts prompt;
        bool ids_only = false;
        bool no_bos = false;
    };
    auto o = std::make_shared<opts_t>();
    auto * sub = app.add_subcommand("tokenize", "print the token ids (and pieces) of a text");
    o->model.add(*sub);
    o->prompt.add(*sub);
    sub->add_flag("--ids", o->ids_only, "print only the ids, space-separated on one line");
    sub->add_flag("--no-bos", o->no_bos, "do not prepend BOS");
    return [o]() {
        const std::string text = o->prompt.read();
        auto m = o->model.load();
        const tokenizer & tok = m->tokenizer();
        const std::vector<int32_t> ids = tok.encode(text, !o->no_bos);
        if (o->ids_only) {
            std::string line;
            for (size_t i = 0; i < ids.size(); ++i) line += fmt::format("{}{}", i ? " " : "", ids[i]);
            fmt::print("{}\n", line);
        } else {
            for (int32_t id : ids) {
                fmt::print("{:>7} '{}'\n", id, tok.vocab().pieces[size_t(id)]);
            }
            fmt::print(stderr, "{} tokens\n", ids.size());
        }
        return 0;
    };
}

}  // namespace hill::cli
