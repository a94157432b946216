// A process-wide recorder of timed spans, written as a Chrome trace (the Trace Event Format that
// Perfetto, ui.perfetto.dev, and chrome://tracing open): `hillinfer generate|demo|bench step --trace
// FILE.json`. Where the run report sums the time of each stage, a trace shows every stage of every
// layer on the thread that ran it, so that overlap, stalls and stragglers can be seen.
//
//   trace_start();                                  // the CLI, once the flags are checked
//   trace_set_thread_name("emulator reader");       // any thread, any time (tracing on or off)
//   { trace_scope s("attend", "attend", {{"layer", il}, {"seq", seq}});
//     ...; s.arg("disk", n_disk); }                 // one complete event ("ph": "X") when s ends
//   trace_stop();
//   trace_write("run.json", "hillinfer generate");
//
// What is recorded: one event per trace_scope that began while tracing was on (a span that began
// before trace_start() is dropped when written), with its name and category (string literals: only
// the pointers are kept), its start and duration in nanoseconds of the steady clock, the recording
// thread, and at most trace_max_args integer arguments (string-literal keys). Nesting is by time on
// one thread (a scope inside another ends first), as the format's complete events nest. The pool
// (core/thread_pool.h) records each job on each worker under the name of the caller's innermost
// open scope (trace_current_name()), so that a kernel's share on every worker shows under its stage.
//
// Cost: off (the default), a scope is one relaxed atomic load and nothing else — no clock read, no
// allocation, no lock: about 1 ns (a decode step of a 32-layer model opens some 400 scopes). On, a
// scope reads the steady clock twice and appends the event to its thread's buffer under that buffer's
// own mutex (only the writer ever contends for it): about 100 ns.
//
// Memory: events are kept until the next trace_start(), at most max_events_per_thread per thread
// (an event is 104 bytes); later ones are counted as dropped, and trace_write() reports them. The
// buffers of threads that ended stay until then (the storage device's threads end with their context,
// before the trace is written).
//
// Thread-safety: every function may be called from any thread. trace_start() and trace_write() are
// meant for one controlling thread (the CLI's main thread); spans that end while trace_write() runs
// wait for their thread's buffer to be written.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace hill {

// One integer argument of an event ("layer" = il); the key is a string literal. No default member
// initializers: a scope's array of them is not zeroed when tracing is off.
struct trace_arg {
    const char * key;
    int64_t value;
};

inline constexpr int trace_max_args = 4;
inline constexpr size_t trace_default_max_events = size_t(1) << 20;  // per thread: about 100 MiB at most

// One recorded span.
struct trace_event {
    const char * name = nullptr;     // string literal
    const char * cat = nullptr;      // string literal: the category ("decode", "score", "csd", ...)
    int64_t t0_ns = 0;               // start, trace_clock_ns()
    int64_t dur_ns = 0;              // >= 0
    trace_arg args[trace_max_args] = {};  // [n_args]
    int n_args = 0;
};

namespace detail {
extern std::atomic<bool> trace_on;
}

// Whether spans are being recorded (one relaxed load).
inline bool trace_enabled() { return detail::trace_on.load(std::memory_order_relaxed); }

// Forgets every event recorded so far (and the buffers of threads that ended), sets the trace's time
// origin to now and starts recording, at most max_events_per_thread events per thread (> 0).
void trace_start(size_t max_events_per_thread = trace_default_max_events);
// Stops recording; what was recorded stays for trace_write() / trace_snapshot().
void trace_stop();

// Names the calling thread's track ("pool worker 3"); kept for the thread's life (the last name
// given wins) and shown as its thread_name metadata. Truncated to 47 bytes. No allocation.
void trace_set_thread_name(const char * name);

// The steady clock in nanoseconds (the clock of trace_event::t0_ns).
int64_t trace_clock_ns();

// The name of the calling thread's innermost open scope, nullptr when none (or tracing is off).
const char * trace_current_name();

// Records one span [t0_ns, t1_ns) (trace_clock_ns()) on the calling thread, whether tracing is on or
// not (callers check trace_enabled()). At most trace_max_args arguments are kept.
void trace_record(const char * name, const char * cat, int64_t t0_ns, int64_t t1_ns,
                  std::initializer_list<trace_arg> args = {});

// A span from construction to destruction on this thread (see the file comment). Not copyable.
class trace_scope {
public:
    trace_scope(const char * name, const char * cat, std::initializer_list<trace_arg> args = {}) {
        if (trace_enabled()) begin(name, cat, args);
    }
    ~trace_scope() {
        if (name_ != nullptr) end();
    }
    // Ends the span now (a stage that ends before the block does); the destructor then records nothing.
    void close() {
        if (name_ != nullptr) end();
        name_ = nullptr;
    }
    trace_scope(const trace_scope &) = delete;
    trace_scope & operator=(const trace_scope &) = delete;

    // Sets an argument known only later (bytes read, tokens selected): replaces one of the same key,
    // else is added when there is room. Nothing when the scope is not recording.
    void arg(const char * key, int64_t value) {
        if (name_ != nullptr) set_arg(key, value);
    }
    bool recording() const { return name_ != nullptr; }

private:
    void begin(const char * name, const char * cat, std::initializer_list<trace_arg> args);
    void end();
    void set_arg(const char * key, int64_t value);

    const char * name_ = nullptr;  // nullptr: not recording
    const char * cat_ = nullptr;
    const char * outer_ = nullptr;  // the thread's current name before this scope
    int64_t t0_ns_ = 0;
    trace_arg args_[trace_max_args];
    int n_args_ = 0;
};

// One thread's events, as trace_snapshot() copies them.
struct trace_thread {
    int tid = 0;                      // 1, 2, ... in the order threads first recorded
    std::string name;                 // trace_set_thread_name, or "thread <tid>"
    std::vector<trace_event> events;  // in the order they ended (children before their parent)
    uint64_t n_dropped = 0;           // events over the per-thread limit
};

// A copy of every thread's events (tests, summaries), threads by tid.
std::vector<trace_thread> trace_snapshot();

struct trace_totals {
    uint64_t n_events = 0;   // written
    uint64_t n_threads = 0;  // with a written event
    uint64_t n_dropped = 0;  // over the per-thread limit, not written
};

// Writes what was recorded since trace_start() as a Chrome trace JSON file, atomically
// (core/atomic_file.h):
//   {"traceEvents": [
//      {"name": "process_name", "ph": "M", "pid": P, "tid": 0, "args": {"name": process_name}},
//      {"name": "thread_name", "ph": "M", "pid": P, "tid": T, "args": {"name": "pool worker 1"}},
//      {"name": "thread_sort_index", "ph": "M", "pid": P, "tid": T, "args": {"sort_index": T}},
//      {"name": "attend", "cat": "attend", "ph": "X", "ts": 1234.567, "dur": 89.012, "pid": P, "tid": T,
//       "args": {"layer": 3, "seq": 0}}, ...],
//    "displayTimeUnit": "ms", "otherData": {"process": ..., "dropped_events": N}}
// ts and dur in microseconds (ns precision, 3 decimals) since trace_start(); events of a thread by
// start time. P is the process id. Errors (hill::error, bad_input): the file cannot be created or
// written (atomic_file's messages, naming the file).
trace_totals trace_write(const std::string & path, const std::string & process_name);

}  // namespace hill
