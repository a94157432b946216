// hillinfer chat: a conversation in the terminal (or one user turn per line of standard input) over
// one session whose KV stays in the tiers: each turn prefills only the text the chat template adds
// for it (tokenizer/chat_template.h), then samples the reply until the template's end-of-turn token.
#include <fmt/format.h>
#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "core/sys_info.h"
#include "engine/run_report.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "tokenizer/chat_template.h"

namespace hill::cli {

namespace {

struct chat_opts {
    model_opts model;
    thread_opts threads;
    kv_opts kv;
    policy_opts policy;
    trace_opts trace;
    sampling_opts sampling;
    int32_t n_predict = -1;  // tokens per reply at most; -1: until the end of the turn or the context
    int32_t n_ctx = 0;
    std::string system;
    CLI::Option * system_opt = nullptr;
    std::string template_name;
    bool json = false;
};

// Lines of standard input, stopped by Ctrl-C (poll returns on the signal; read() alone would be
// restarted). On a terminal the line is read in non-canonical mode with our own echo and erase, so
// that a line may be longer than the terminal's canonical limit (4095 bytes: a 100 KB paste), and a
// newline followed at once by more input (a paste, not a typed Enter) stays inside the message.
class line_reader {
public:
    // too_long: a line of more than max_line bytes (not a terminal), read to its end and dropped.
    enum class status { line, eof, interrupted, too_long };

    // tty: standard input is a terminal; the typed text is echoed to echo_fd (the terminal: stdout, or
    // stderr when stdout is redirected). max_line: the longest line kept in memory from a file or pipe.
    line_reader(bool tty, int echo_fd, size_t max_line) : tty_(tty), echo_fd_(echo_fd), max_line_(max_line) {}

    status read(std::string & line) {
        line.clear();
        if (!tty_) return read_plain(line);
        termios saved{};
        if (::tcgetattr(0, &saved) != 0) return read_plain(line);
        termios raw = saved;
        raw.c_lflag &= ~tcflag_t(ICANON | ECHO);  // ISIG stays: Ctrl-C still raises SIGINT
        raw.c_cc[VMIN] = 1;
        raw.c_cc[VTIME] = 0;
        ::tcsetattr(0, TCSANOW, &raw);
        const status st = read_tty(line);
        ::tcsetattr(0, TCSANOW, &saved);
        return st;
    }

private:
    // Waits up to timeout_ms for input (-1: until input, EOF or Ctrl-C). 1: readable, 0: timeout,
    // -1: interrupted.
    static int wait_input(int timeout_ms) {
        for (;;) {
            if (interrupted()) return -1;
            pollfd p{0, POLLIN, 0};
            // A bounded wait, so that a signal arriving just before poll() is seen within 100 ms.
            const int r = ::poll(&p, 1, timeout_ms < 0 ? 100 : timeout_ms);
            if (r > 0) return 1;
            if (r == 0 && timeout_ms >= 0) return 0;
            if (r < 0 && errno != EINTR) return 1;  // let read() report the error
        }
    }

    // Fills buf_ with what is available. false: end of input. Errors: hill::error(bad_input) when
    // the read fails (standard input closed, a directory).
    bool fill() {
        char tmp[65536];
        const ssize_t n = ::read(0, tmp, sizeof tmp);
        if (n < 0 && errno == EINTR) return true;
        if (n < 0) fail_input("cannot read standard input: {}", std::strerror(errno));
        if (n == 0) return false;
        buf_.append(tmp, size_t(n));
        return true;
    }

    status read_plain(std::string & line) {
        for (;;) {
            // Only what arrived since the last look is searched: a long line is scanned once.
            if (const size_t nl = buf_.find('\n', scanned_); nl != std::string::npos) {
                scanned_ = 0;
                if (dropping_) {
                    dropping_ = false;
                    buf_.erase(0, nl + 1);
                    return status::too_long;
                }
                line = buf_.substr(0, nl);
                buf_.erase(0, nl + 1);
                if (!line.empty() && line.back() == '\r') line.pop_back();
                return status::line;
            }
            scanned_ = buf_.size();
            if (buf_.size() > max_line_) {  // one line so far, too long to keep: dropped up to its end
                dropping_ = true;
                buf_.clear();
                scanned_ = 0;
            }
            if (eof_) {
                if (dropping_) {
                    dropping_ = false;
                    buf_.clear();
                    return status::too_long;
                }
                if (buf_.empty()) return status::eof;
                line.swap(buf_);  // a last line without a newline
                return status::line;
            }
            if (wait_input(-1) < 0) return status::interrupted;
            if (!fill()) eof_ = true;
        }
    }

    void echo(std::string_view s) const { (void)!::write(echo_fd_, s.data(), s.size()); }

    status read_tty(std::string & line) {
        size_t pos = 0;  // bytes of buf_ consumed
        int esc = 0;     // inside an escape sequence: 1 after ESC, 2 after ESC [
        for (;;) {
            if (pos == buf_.size()) {
                buf_.clear();
                pos = 0;
                if (wait_input(-1) < 0) return status::interrupted;
                if (!fill()) return line.empty() ? status::eof : status::line;
                continue;
            }
            const unsigned char c = uint8_t(buf_[pos++]);
            if (esc == 1) {
                esc = c == '[' || c == 'O' ? 2 : 0;
                continue;
            }
            if (esc == 2) {
                if (c >= 0x40 && c <= 0x7e) esc = 0;  // the final byte of a CSI sequence (arrow keys)
                continue;
            }
            if (c == '\r' || c == '\n') {
                // More input already there, or within 30 ms: a pasted newline, part of the message.
                if (pos < buf_.size() || wait_input(30) > 0) {
                    if (c == '\r' && pos < buf_.size() && buf_[pos] == '\n') ++pos;
                    line += '\n';
                    echo("\r\n");
                    continue;
                }
                echo("\n");
                buf_.erase(0, pos);
                return status::line;
            }
            if (c == 0x7f || c == 0x08) {  // erase one character (a UTF-8 sequence)
                if (line.empty() || line.back() == '\n') continue;
                while (!line.empty() && (uint8_t(line.back()) & 0xC0) == 0x80) line.pop_back();
                line.pop_back();
                echo("\b \b");
            } else if (c == 0x15) {  // Ctrl-U: erase the line being typed
                while (!line.empty() && line.back() != '\n') {
                    if ((uint8_t(line.back()) & 0xC0) != 0x80) echo("\b \b");
                    line.pop_back();
                }
            } else if (c == 0x04) {  // Ctrl-D: end of input on an empty line
                if (line.empty()) {
                    echo("\n");
                    buf_.erase(0, pos);
                    return status::eof;
                }
            } else if (c == 0x1b) {
                esc = 1;
            } else if (c >= 0x20 || c == '\t') {
                line += char(c);
                echo(std::string_view(reinterpret_cast<const char *>(&c), 1));
            }
        }
    }

    bool tty_;
    int echo_fd_;
    size_t max_line_;
    bool eof_ = false;
    bool dropping_ = false;  // reading past the end of a line too long to keep
    size_t scanned_ = 0;     // bytes of buf_ already searched for a newline
    std::string buf_;        // input read but not yet returned
};

// What the KV holds, as text: each prefilled piece of template text and each reply, with its token
// count. A new turn keeps the longest run of segments that is still a prefix of the conversation's
// text (all of them, unless the template rewrites an earlier reply: trimmed, reasoning dropped).
struct kv_segment {
    std::string text;
    int64_t n_tokens;
};

struct turn_record {
    std::string user;
    std::string prompt_text;    // the template text prefilled for this turn
    int64_t reused_tokens = 0;  // tokens of the conversation kept in the KV
    int64_t prompt_tokens = 0;  // tokens prefilled this turn
    std::vector<int32_t> ids;   // the reply's tokens
    std::string text;           // the reply
    std::string stop;           // end_of_turn, length, context, interrupted, refused
    std::string error;          // refused: why
    int64_t n_past = 0;         // tokens in the KV after the turn
    double prefill_s = 0.0, decode_s = 0.0;
    int64_t decode_steps = 0;
};

int run_chat(const chat_opts & o) {
    if (o.n_predict < -1)
        fail_usage("-n must be >= 0, or -1 for replies until the end of the turn, got {}", o.n_predict);
    if (o.n_ctx < 0) fail_usage("-c must be >= 0 (0: the model's trained context), got {}", o.n_ctx);
    o.kv.type();  // a bad --cache-type fails before the model is loaded
    const sampler_params sp = o.sampling.resolve();
    const int n_threads = o.threads.resolve();
    const policy_params pol = o.policy.resolve(o.kv);
    std::optional<chat_template> named;
    if (!o.template_name.empty()) named = chat_template::named(o.template_name);

    auto m = o.model.load();
    const hparams & hp = m->hp();
    const tokenizer & tok = m->tokenizer();
    const vocab & voc = tok.vocab();
    const chat_template tmpl = [&] {
        if (named) return *named;
        const std::string jinja = read_chat_template(m->path());
        if (jinja.empty()) {
            fail_usage("'{}' has no chat template (tokenizer.chat_template); pass --chat-template NAME ({})", m->path(),
                       chat_template::family_names());
        }
        return chat_template::recognize(jinja);
    }();
    const std::vector<int32_t> stop_ids = tmpl.end_of_turn_tokens(voc);
    const std::string bos_text = voc.bos >= 0 ? voc.pieces[size_t(voc.bos)] : std::string();
    const std::string eos_text = voc.eos >= 0 ? voc.pieces[size_t(voc.eos)] : std::string();
    const int32_t n_ctx = o.n_ctx > 0 ? o.n_ctx : hp.n_ctx_train;

    thread_pool pool(n_threads);
    session s(*m, o.kv.context(n_ctx, pol), pool);
    std::vector<int32_t> ends = stop_ids;
    ends.push_back(voc.eos);
    sampler smp(o.sampling.ban_ends(sp, ends), hp.n_vocab);
    std::vector<float> logits(size_t(hp.n_vocab));

    const bool tty = ::isatty(0) == 1;
    FILE * term = ::isatty(1) == 1 ? stdout : stderr;  // where the prompt and the typed text go
    // A message of more bytes than this cannot fit the context whatever it says: no token of the
    // vocabulary stands for more bytes than its longest piece (+ 2 tokens for the template's cuts).
    size_t max_piece = 1;
    for (const std::string & piece : voc.pieces) max_piece = std::max(max_piece, piece.size());
    const size_t max_line = (size_t(n_ctx) + 2) * max_piece;
    line_reader in(tty, ::fileno(term), max_line);
    std::vector<chat_message> history;
    if (o.system_opt->count() > 0) history.push_back({"system", o.system});
    std::vector<kv_segment> segments;
    std::vector<turn_record> turns;
    if (tty) {
        fmt::print(stderr,
                   "chat with {} (template {}, context {} tokens). Enter sends a message; Ctrl-C stops a reply; "
                   "Ctrl-D or Ctrl-C here ends the chat.\n",
                   m->path(), tmpl.name(), n_ctx);
    }

    for (;;) {
        if (tty) {
            fmt::print(term, "> ");
            std::fflush(term);
        }
        std::string line;
        const line_reader::status st = in.read(line);
        if (st == line_reader::status::too_long) {
            turn_record t;
            t.stop = "refused";
            t.error = fmt::format(
                "the message is more than {} bytes and the context holds {} tokens, none of which stands "
                "for more than {} bytes: not sent (a shorter message, or a new chat with a larger -c)",
                max_line, n_ctx, max_piece);
            fmt::print(stderr, "{}\n", t.error);
            t.n_past = s.n_past();
            turns.push_back(std::move(t));
            continue;
        }
        if (st != line_reader::status::line) {
            if (tty && st == line_reader::status::interrupted) fmt::print(term, "\n");
            break;
        }
        if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;  // an empty line: nothing to send

        turn_record t;
        t.user = line;
        history.push_back({"user", line});
        const std::string full = tmpl.format(history, true, bos_text, eos_text);
        // The segments still a prefix of the conversation's text stay in the KV; the rest is prefilled.
        size_t pos = 0, n_keep_seg = 0;
        int64_t n_keep = 0;
        for (; n_keep_seg < segments.size(); ++n_keep_seg) {
            const kv_segment & seg = segments[n_keep_seg];
            if (full.compare(pos, seg.text.size(), seg.text) != 0) break;
            pos += seg.text.size();
            n_keep += seg.n_tokens;
        }
        if (n_keep < s.n_past() && !s.ctx().can_truncate(0, n_keep)) {
            // Sliding-window layers dropped what the cut needs (engine/context.h): the whole text again.
            n_keep = 0;
            n_keep_seg = 0;
            pos = 0;
        }
        t.prompt_text = full.substr(pos);
        const bool start = n_keep == 0;  // the conversation's first tokens: BOS by the model's rule
        const std::vector<int32_t> ids = tok.encode_with_special(t.prompt_text, start && voc.add_bos);
        t.reused_tokens = n_keep;
        // The message must fit with room for at least one token of the reply.
        if (n_keep + int64_t(ids.size()) + 1 > n_ctx) {
            t.stop = "refused";
            t.error = fmt::format(
                "the message is {} tokens and the context holds {} tokens, {} of them used by the "
                "conversation: not sent (a shorter message, or a new chat with a larger -c)",
                ids.size(), n_ctx, n_keep);
            fmt::print(stderr, "{}\n", t.error);
            history.pop_back();
            t.n_past = s.n_past();
            turns.push_back(std::move(t));
            continue;
        }
        if (n_keep < s.n_past()) {
            s.truncate(n_keep);
            segments.resize(n_keep_seg);
        }
        const int64_t t0 = time_us();
        try {
            prefill_progress progress;
            s.eval(ids, false, std::ref(progress));
        } catch (const error & e) {
            if (e.code() != exit_code::interrupted) throw;
            // Ctrl-C during the prefill: the session is as it was; the message is dropped. (SIGTERM stays
            // pending: the next read ends the chat.)
            if (!terminate_requested()) clear_interrupt();
            fmt::print(stderr, "\n[message not sent: interrupted during its prefill]\n");
            history.pop_back();
            t.stop = "interrupted";
            t.n_past = s.n_past();
            turns.push_back(std::move(t));
            continue;
        }
        t.prefill_s = double(time_us() - t0) / 1e6;
        t.prompt_tokens = int64_t(ids.size());
        segments.push_back({t.prompt_text, t.prompt_tokens});
        for (const int32_t id : ids) smp.accept(id);

        // The reply: every token shown is in the KV (evaluated) before the next is sampled, so that
        // the conversation's text and the KV agree whatever stops the reply.
        const int64_t t1 = time_us();
        t.stop = "length";
        while (o.n_predict < 0 || int64_t(t.ids.size()) < o.n_predict) {
            if (interrupted()) {
                t.stop = "interrupted";
                break;
            }
            std::copy(s.logits(), s.logits() + hp.n_vocab, logits.begin());
            const int32_t id = smp.sample(logits.data());
            if (std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end()) {
                t.stop = "end_of_turn";
                break;
            }
            if (s.n_past() >= n_ctx) {
                t.stop = "context";
                break;
            }
            try {
                s.eval(std::span<const int32_t>(&id, 1));
            } catch (const error & e) {
                if (e.code() != exit_code::interrupted) throw;
                t.stop = "interrupted";  // the step was rolled back: the token is not in the KV
                break;
            }
            ++t.decode_steps;
            smp.accept(id);
            t.ids.push_back(id);
            const std::string piece = tok.token_to_piece(id);
            t.text += piece;
            if (!o.json) {
                std::fwrite(piece.data(), 1, piece.size(), stdout);
                std::fflush(stdout);
            }
        }
        t.decode_s = double(time_us() - t1) / 1e6;
        if (!o.json) {
            fmt::print("\n");
            std::fflush(stdout);
        }
        if (t.stop == "interrupted") {
            if (!terminate_requested()) clear_interrupt();
            fmt::print(stderr, "[reply stopped]\n");
        } else if (t.stop == "context") {
            fmt::print(stderr,
                       "[the context is full ({} tokens): the reply ends here; end the chat (Ctrl-D) and start a "
                       "new one, with a larger -c to talk longer]\n",
                       n_ctx);
        }
        segments.push_back({t.text, int64_t(t.ids.size())});
        history.push_back({"assistant", t.text});
        t.n_past = s.n_past();
        turns.push_back(std::move(t));
    }

    // The run summary.
    int64_t n_prefill = 0, n_gen = 0, n_steps = 0, n_answered = 0;
    double prefill_s = 0.0, decode_s = 0.0;
    std::string per_turn;
    for (const turn_record & t : turns) {
        if (t.stop == "refused" || t.prompt_tokens == 0) continue;
        ++n_answered;
        n_prefill += t.prompt_tokens;
        n_gen += int64_t(t.ids.size());
        n_steps += t.decode_steps;
        prefill_s += t.prefill_s;
        decode_s += t.decode_s;
        per_turn += (per_turn.empty() ? "" : ", ") + std::to_string(t.prompt_tokens);
    }
    const uint64_t rss = peak_rss_bytes();
    if (o.json) {
        nlohmann::json jt = nlohmann::json::array();
        for (const turn_record & t : turns) {
            nlohmann::json j = {{"user", t.user},
                                {"prompt_text", t.prompt_text},
                                {"reused_tokens", t.reused_tokens},
                                {"prompt_tokens", t.prompt_tokens},
                                {"generated_tokens", t.ids.size()},
                                {"ids", t.ids},
                                {"text", t.text},
                                {"stop", t.stop},
                                {"n_past", t.n_past},
                                {"prefill_s", t.prefill_s},
                                {"decode_s", t.decode_s},
                                {"decode_steps", t.decode_steps}};
            if (!t.error.empty()) j["error"] = t.error;
            jt.push_back(std::move(j));
        }
        nlohmann::json j = {
            {"model", m->path()},        {"template", tmpl.name()}, {"turns", jt},    {"prefill_tokens", n_prefill},
            {"generated_tokens", n_gen}, {"n_past", s.n_past()},    {"n_ctx", n_ctx}, {"n_threads", n_threads},
            {"seed", sp.seed},           {"peak_rss_bytes", rss}};
        j.update(run_json(s.ctx()));
        fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    fmt::print(stderr,
               "chat: {} turn{} answered, template {}; prefilled {} tokens ({}), prefill {:.1f} tokens/s; "
               "generated {} tokens, decode {}; {} tokens in the KV of {} | peak RSS {} | threads {}, seed {}\n",
               n_answered, n_answered == 1 ? "" : "s", tmpl.name(), n_prefill,
               per_turn.empty() ? "none" : "per turn: " + per_turn, prefill_s > 0 ? double(n_prefill) / prefill_s : 0.0,
               n_gen,
               n_steps > 0 && decode_s > 0 ? fmt::format("{:.1f} tokens/s", double(n_steps) / decode_s)
                                           : std::string("n/a (no decode step)"),
               s.n_past(), n_ctx, format_bytes(rss), n_threads, sp.seed);
    fmt::print(stderr, "{}", run_summary(s.ctx()));
    return terminate_requested() ? int(exit_code::interrupted) : 0;
}

}  // namespace

command_fn add_chat(CLI::App & app) {
    auto o = std::make_shared<chat_opts>();
    auto * sub = app.add_subcommand("chat",
                                    "talk with a chat model: one user turn per line, the conversation's KV kept "
                                    "in the tiers");
    o->model.add(*sub);
    o->threads.add(*sub);
    o->kv.add(*sub);
    o->policy.add(*sub);
    o->system_opt = sub->add_option("--system", o->system, "system message at the start of the conversation");
    sub->add_option("--chat-template", o->template_name,
                    "chat template family instead of the model's own: " + chat_template::family_names());
    sub->add_option("-n,--n-predict", o->n_predict,
                    "tokens per reply at most; -1: until the end of the turn or the "
                    "context")
        ->capture_default_str();
    sub->add_option("-c,--ctx-size", o->n_ctx,
                    "context size in tokens, the whole conversation; 0 (default): the "
                    "model's trained context");
    o->sampling.add(*sub);
    sub->add_flag("--json", o->json,
                  "write one JSON object to stdout at the end (every turn: the user's message, the "
                  "prefilled text and tokens, the reply and why it stopped) instead of streaming the replies");
    o->trace.add(*sub);
    return [o]() {
        o->trace.start({o->model.path, o->model.tokenizer, o->kv.csd_profile});
        const int rc = run_chat(*o);
        o->trace.finish("hillinfer chat");
        return rc;
    };
}

}  // namespace hill::cli
