#include "core/trace.h"

#include "core/atomic_file.h"
#include "core/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace hill {

namespace detail {
std::atomic<bool> trace_on{false};
}

namespace {

constexpr size_t max_name_bytes = 48;

struct thread_buffer {
    std::mutex m;
    int tid = 0;
    std::string name;
    std::vector<trace_event> events;
    uint64_t n_dropped = 0;
    bool ended = false;  // its thread has ended: dropped at the next trace_start()
};

struct recorder {
    std::mutex m;  // guards buffers, next_tid (each buffer's content has its own mutex)
    std::vector<std::unique_ptr<thread_buffer>> buffers;
    int next_tid = 1;
    std::atomic<int64_t> origin_ns{0};
    std::atomic<size_t> max_events{trace_default_max_events};
};

// Never destroyed: threads may end (and mark their buffer) during static destruction.
recorder & rec() {
    static recorder * r = new recorder;
    return *r;
}

// The calling thread's buffer (created on its first event) and name; the destructor, at thread exit,
// marks the buffer as ended.
struct thread_state {
    thread_buffer * buf = nullptr;
    ~thread_state() {
        if (buf == nullptr) return;
        std::lock_guard lock(buf->m);
        buf->ended = true;
    }
};
thread_local thread_state t_state;
thread_local char t_name[max_name_bytes] = {};  // trivial: naming never allocates
thread_local const char * t_current = nullptr;

thread_buffer & my_buffer() {
    thread_state & s = t_state;
    if (s.buf != nullptr) return *s.buf;
    recorder & r = rec();
    auto b = std::make_unique<thread_buffer>();
    std::lock_guard lock(r.m);
    b->tid = r.next_tid++;
    b->name = t_name[0] != '\0' ? std::string(t_name) : fmt::format("thread {}", b->tid);
    s.buf = b.get();
    r.buffers.push_back(std::move(b));
    return *s.buf;
}

void push(const trace_event & e) {
    thread_buffer & b = my_buffer();
    const size_t cap = rec().max_events.load(std::memory_order_relaxed);
    std::lock_guard lock(b.m);
    if (b.events.size() >= cap) {
        ++b.n_dropped;
        return;
    }
    b.events.push_back(e);
}

// A JSON string literal of s (quotes and escapes).
std::string quoted(const char * s) {
    return nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Nanoseconds as microseconds with 3 decimals, exactly (no floating point).
void append_us(std::string & out, int64_t ns) {
    fmt::format_to(std::back_inserter(out), "{}.{:03}", ns / 1000, ns % 1000);
}

}  // namespace

void trace_start(size_t max_events_per_thread) {
    HILL_ASSERT(max_events_per_thread > 0);
    recorder & r = rec();
    {
        std::lock_guard lock(r.m);
        std::erase_if(r.buffers, [](const std::unique_ptr<thread_buffer> & b) {
            std::lock_guard bl(b->m);
            return b->ended;
        });
        for (auto & b : r.buffers) {
            std::lock_guard bl(b->m);
            b->events.clear();
            b->n_dropped = 0;
        }
        r.max_events.store(max_events_per_thread, std::memory_order_relaxed);
        r.origin_ns.store(trace_clock_ns(), std::memory_order_relaxed);
    }
    detail::trace_on.store(true, std::memory_order_release);
}

void trace_stop() { detail::trace_on.store(false, std::memory_order_release); }

void trace_set_thread_name(const char * name) {
    std::strncpy(t_name, name, max_name_bytes - 1);
    t_name[max_name_bytes - 1] = '\0';
    thread_buffer * b = t_state.buf;
    if (b != nullptr) {
        std::lock_guard lock(b->m);
        b->name = t_name;
    }
}

int64_t trace_clock_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

const char * trace_current_name() { return t_current; }

void trace_record(const char * name, const char * cat, int64_t t0_ns, int64_t t1_ns,
                  std::initializer_list<trace_arg> args) {
    trace_event e;
    e.name = name;
    e.cat = cat;
    e.t0_ns = t0_ns;
    e.dur_ns = std::max<int64_t>(0, t1_ns - t0_ns);
    for (const trace_arg & a : args) {
        if (e.n_args == trace_max_args) break;
        e.args[e.n_args++] = a;
    }
    push(e);
}

void trace_scope::begin(const char * name, const char * cat, std::initializer_list<trace_arg> args) {
    name_ = name;
    cat_ = cat;
    for (const trace_arg & a : args) {
        if (n_args_ == trace_max_args) break;
        args_[n_args_++] = a;
    }
    outer_ = t_current;
    t_current = name;
    t0_ns_ = trace_clock_ns();
}

void trace_scope::end() {
    const int64_t t1 = trace_clock_ns();
    t_current = outer_;
    trace_event e;
    e.name = name_;
    e.cat = cat_;
    e.t0_ns = t0_ns_;
    e.dur_ns = t1 - t0_ns_;
    std::copy(args_, args_ + n_args_, e.args);
    e.n_args = n_args_;
    push(e);
}

void trace_scope::set_arg(const char * key, int64_t value) {
    for (int i = 0; i < n_args_; ++i) {
        if (std::strcmp(args_[i].key, key) == 0) {
            args_[i].value = value;
            return;
        }
    }
    if (n_args_ < trace_max_args) args_[n_args_++] = trace_arg{key, value};
}

std::vector<trace_thread> trace_snapshot() {
    recorder & r = rec();
    std::lock_guard lock(r.m);
    std::vector<trace_thread> out;
    for (auto & b : r.buffers) {
        std::lock_guard bl(b->m);
        out.push_back(trace_thread{b->tid, b->name, b->events, b->n_dropped});
    }
    return out;
}

trace_totals trace_write(const std::string & path, const std::string & process_name) {
    recorder & r = rec();
    const int64_t origin = r.origin_ns.load(std::memory_order_relaxed);
    const long pid = long(::getpid());
    atomic_file f(path);
    std::string out;
    const auto flush = [&](size_t above) {
        if (out.size() < above) return;
        f.write(out.data(), out.size());
        out.clear();
    };
    // Escaped names and categories by pointer: each literal is escaped once.
    std::unordered_map<const char *, std::string> lit;
    const auto q = [&](const char * s) -> const std::string & {
        auto it = lit.find(s);
        if (it == lit.end()) it = lit.emplace(s, quoted(s)).first;
        return it->second;
    };
    trace_totals t;
    out += "{\"traceEvents\":[\n";
    fmt::format_to(std::back_inserter(out),
                   "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":{}}}}}", pid,
                   quoted(process_name.c_str()));
    std::lock_guard lock(r.m);
    std::vector<const trace_event *> order;
    for (auto & b : r.buffers) {
        std::lock_guard bl(b->m);
        t.n_dropped += b->n_dropped;
        order.clear();
        for (const trace_event & e : b->events) {
            if (e.t0_ns >= origin) order.push_back(&e);  // spans begun before trace_start() are not this trace's
        }
        if (order.empty()) continue;
        // By start; a parent (longer) before the children that start with it.
        std::stable_sort(order.begin(), order.end(), [](const trace_event * a, const trace_event * b) {
            return a->t0_ns != b->t0_ns ? a->t0_ns < b->t0_ns : a->dur_ns > b->dur_ns;
        });
        ++t.n_threads;
        fmt::format_to(std::back_inserter(out),
                       ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{0},\"tid\":{1},\"args\":{{\"name\":{2}}}}}"
                       ",\n{{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":{0},\"tid\":{1},"
                       "\"args\":{{\"sort_index\":{1}}}}}",
                       pid, b->tid, quoted(b->name.c_str()));
        for (const trace_event * e : order) {
            out += ",\n{\"name\":";
            out += q(e->name);
            out += ",\"cat\":";
            out += q(e->cat);
            out += ",\"ph\":\"X\",\"ts\":";
            append_us(out, e->t0_ns - origin);
            out += ",\"dur\":";
            append_us(out, e->dur_ns);
            fmt::format_to(std::back_inserter(out), ",\"pid\":{},\"tid\":{},\"args\":{{", pid, b->tid);
            for (int i = 0; i < e->n_args; ++i) {
                if (i > 0) out += ',';
                out += q(e->args[i].key);
                fmt::format_to(std::back_inserter(out), ":{}", e->args[i].value);
            }
            out += "}}";
            ++t.n_events;
            flush(size_t(1) << 20);
        }
    }
    fmt::format_to(std::back_inserter(out),
                   "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{{\"process\":{},\"clock\":\"steady, microseconds "
                   "since the trace started\",\"dropped_events\":{}}}}}\n",
                   quoted(process_name.c_str()), t.n_dropped);
    flush(0);
    f.commit();
    return t;
}

}  // namespace hill
