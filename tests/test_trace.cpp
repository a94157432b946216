// The trace recorder (core/trace.h): nothing when off, spans from several threads with their names,
// nesting, the pool's spans under the caller's stage, the per-thread limit, and the Chrome trace file
// parsed back.
#include "core/thread_pool.h"
#include "core/trace.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace hill {
namespace {

using json = nlohmann::json;

size_t count_events(const std::vector<trace_thread> & ts) {
    size_t n = 0;
    for (const trace_thread & t : ts) n += t.events.size();
    return n;
}

const trace_thread * find_thread(const std::vector<trace_thread> & ts, const std::string & name) {
    for (const trace_thread & t : ts) {
        if (t.name == name) return &t;
    }
    return nullptr;
}

json read_json(const std::string & path) {
    std::ifstream in(path);
    return json::parse(in);
}

// Spins for about us microseconds (a span of measurable length).
void busy_us(int us) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
    while (std::chrono::steady_clock::now() < end) {
    }
}

TEST(trace, off_records_nothing) {
    trace_start();
    trace_stop();
    EXPECT_FALSE(trace_enabled());
    const size_t before = count_events(trace_snapshot());
    {
        trace_scope s("off", "test", {{"layer", 1}});
        EXPECT_FALSE(s.recording());
        s.arg("bytes", 5);
        EXPECT_EQ(trace_current_name(), nullptr);
    }
    thread_pool pool(3);
    pool.run([](int, int) { busy_us(10); });
    std::thread([] {
        trace_set_thread_name("named while off");
        trace_scope s("off", "test");
    }).join();
    const std::vector<trace_thread> ts = trace_snapshot();
    EXPECT_EQ(count_events(ts), before);
    EXPECT_EQ(find_thread(ts, "named while off"), nullptr) << "a thread that recorded nothing has no buffer";
}

TEST(trace, nested_scopes_on_one_thread) {
    trace_set_thread_name("test main");
    trace_start();
    {
        trace_scope outer("step", "decode", {{"step", 7}});
        EXPECT_TRUE(outer.recording());
        EXPECT_STREQ(trace_current_name(), "step");
        for (int il = 0; il < 3; ++il) {
            trace_scope inner("attend", "attend", {{"layer", il}});
            EXPECT_STREQ(trace_current_name(), "attend");
            busy_us(20);
            inner.arg("tokens", 100 + il);
            inner.arg("layer", il);  // replaces, does not add
        }
        EXPECT_STREQ(trace_current_name(), "step");
    }
    EXPECT_EQ(trace_current_name(), nullptr);
    trace_stop();
    const std::vector<trace_thread> ts = trace_snapshot();
    const trace_thread * t = find_thread(ts, "test main");
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->events.size(), 4u);
    const trace_event & step = t->events.back();  // ends last
    EXPECT_STREQ(step.name, "step");
    EXPECT_STREQ(step.cat, "decode");
    ASSERT_EQ(step.n_args, 1);
    EXPECT_STREQ(step.args[0].key, "step");
    EXPECT_EQ(step.args[0].value, 7);
    for (int il = 0; il < 3; ++il) {
        const trace_event & e = t->events[size_t(il)];
        EXPECT_STREQ(e.name, "attend");
        ASSERT_EQ(e.n_args, 2);
        EXPECT_EQ(e.args[0].value, il);
        EXPECT_STREQ(e.args[1].key, "tokens");
        EXPECT_EQ(e.args[1].value, 100 + il);
        EXPECT_GE(e.dur_ns, 20000);
        // Inside the step, after the layer before.
        EXPECT_GE(e.t0_ns, step.t0_ns);
        EXPECT_LE(e.t0_ns + e.dur_ns, step.t0_ns + step.dur_ns);
        if (il > 0) {
            const trace_event & prev = t->events[size_t(il - 1)];
            EXPECT_GE(e.t0_ns, prev.t0_ns + prev.dur_ns);
        }
    }
}

TEST(trace, threads_and_the_pool_record_on_their_own_tracks) {
    trace_start();
    constexpr int n_threads = 4, n_spans = 200;
    std::vector<std::thread> threads;
    for (int i = 0; i < n_threads; ++i) {
        threads.emplace_back([i] {
            const std::string name = "worker " + std::to_string(i);
            trace_set_thread_name(name.c_str());
            for (int j = 0; j < n_spans; ++j) trace_scope s("work", "test", {{"thread", i}, {"j", j}});
        });
    }
    for (auto & t : threads) t.join();  // ended threads keep their events
    thread_pool pool(3);
    {
        trace_scope s("score host", "score");
        pool.run([](int, int) { busy_us(50); });
    }
    pool.run([](int, int) {});  // outside any scope
    trace_stop();
    const std::vector<trace_thread> ts = trace_snapshot();
    std::set<int> tids;
    for (int i = 0; i < n_threads; ++i) {
        const trace_thread * t = find_thread(ts, "worker " + std::to_string(i));
        ASSERT_NE(t, nullptr) << i;
        EXPECT_TRUE(tids.insert(t->tid).second);
        ASSERT_EQ(t->events.size(), size_t(n_spans));
        for (int j = 0; j < n_spans; ++j) {
            EXPECT_EQ(t->events[size_t(j)].args[0].value, i);
            EXPECT_EQ(t->events[size_t(j)].args[1].value, j);
        }
    }
    // Workers 1 and 2 (the caller is worker 0): their share of the job under the caller's scope.
    for (int ith = 1; ith < 3; ++ith) {
        const trace_thread * t = find_thread(ts, "pool worker " + std::to_string(ith));
        ASSERT_NE(t, nullptr) << ith;
        EXPECT_TRUE(tids.insert(t->tid).second);
        ASSERT_EQ(t->events.size(), 2u);
        EXPECT_STREQ(t->events[0].name, "score host");
        EXPECT_STREQ(t->events[0].cat, "pool");
        EXPECT_GE(t->events[0].dur_ns, 50000);
        EXPECT_STREQ(t->events[1].name, "pool job");
    }
}

TEST(trace, the_limit_per_thread_drops_and_counts) {
    trace_start(10);
    std::thread([] {
        trace_set_thread_name("busy");
        for (int j = 0; j < 25; ++j) trace_scope s("e", "test");
    }).join();
    trace_stop();
    const std::vector<trace_thread> ts = trace_snapshot();
    const trace_thread * t = find_thread(ts, "busy");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->events.size(), 10u);
    EXPECT_EQ(t->n_dropped, 15u);
    test::temp_dir dir;
    const trace_totals tot = trace_write(dir.file("t.json"), "test");
    EXPECT_EQ(tot.n_dropped, 15u);
    EXPECT_EQ(tot.n_events, 10u);
    EXPECT_EQ(read_json(dir.file("t.json")).at("otherData").at("dropped_events"), 15);
    // trace_start() forgets it all, and the ended thread's buffer.
    trace_start();
    trace_stop();
    EXPECT_EQ(find_thread(trace_snapshot(), "busy"), nullptr);
}

TEST(trace, writes_a_chrome_trace_file) {
    trace_set_thread_name("decode (owner)");
    trace_start();
    {
        trace_scope step("decode step", "decode", {{"step", 0}});
        for (int il = 0; il < 2; ++il) {
            trace_scope s("attend", "attend", {{"layer", il}});
            busy_us(5);
        }
        std::thread([] {
            trace_set_thread_name("emulator \"reader\"");  // quoted in the file
            trace_scope s("flash read", "csd", {{"bytes", 1 << 20}});
            busy_us(5);
        }).join();
    }
    const int64_t t0 = trace_clock_ns();
    trace_record("manual", "test", t0, t0 + 1500, {{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}, {"e", 5}});
    trace_stop();
    test::temp_dir dir;
    const std::string path = dir.file("trace.json");
    const trace_totals tot = trace_write(path, "hillinfer test");
    EXPECT_EQ(tot.n_events, 5u);
    EXPECT_EQ(tot.n_threads, 2u);
    EXPECT_EQ(tot.n_dropped, 0u);
    const json j = read_json(path);
    EXPECT_EQ(j.at("displayTimeUnit"), "ms");
    const json & ev = j.at("traceEvents");
    ASSERT_TRUE(ev.is_array());
    std::map<int, std::string> names;   // tid -> thread_name
    std::map<std::string, int> count;   // X events by name
    std::map<int, double> last_ts;      // tid -> ts of the previous X event
    std::string process;
    for (const json & e : ev) {
        ASSERT_TRUE(e.at("pid").is_number_integer()) << e;
        ASSERT_TRUE(e.at("tid").is_number_integer()) << e;
        const std::string ph = e.at("ph");
        if (ph == "M") {
            if (e.at("name") == "thread_name") names[e.at("tid").get<int>()] = e.at("args").at("name");
            if (e.at("name") == "process_name") process = e.at("args").at("name");
            continue;
        }
        ASSERT_EQ(ph, "X") << e;
        const int tid = e.at("tid");
        ASSERT_TRUE(names.count(tid)) << "thread_name comes before the thread's events: " << e;
        const double ts = e.at("ts"), dur = e.at("dur");
        EXPECT_GE(ts, 0.0) << e;
        EXPECT_GE(dur, 0.0) << e;
        EXPECT_GE(ts, last_ts[tid]) << "a thread's events by start time: " << e;
        last_ts[tid] = ts;
        EXPECT_TRUE(e.at("cat").is_string()) << e;
        EXPECT_TRUE(e.at("args").is_object()) << e;
        ++count[e.at("name").get<std::string>()];
        if (e.at("name") == "attend") {
            EXPECT_TRUE(e.at("args").at("layer").is_number_integer()) << e;
        }
        if (e.at("name") == "manual") {
            EXPECT_NEAR(dur, 1.5, 1e-9) << e;
            EXPECT_EQ(e.at("args").size(), size_t(trace_max_args)) << e;
            EXPECT_EQ(e.at("args").at("d"), 4) << e;
        }
        if (e.at("name") == "flash read") {
            EXPECT_EQ(names[tid], "emulator \"reader\"");
            EXPECT_EQ(e.at("args").at("bytes"), 1 << 20);
        }
    }
    EXPECT_EQ(process, "hillinfer test");
    EXPECT_EQ(count["attend"], 2);
    EXPECT_EQ(count["decode step"], 1);
    EXPECT_EQ(count["flash read"], 1);
    EXPECT_EQ(count["manual"], 1);
    std::set<std::string> thread_names;
    for (const auto & [tid, n] : names) thread_names.insert(n);
    EXPECT_TRUE(thread_names.count("decode (owner)"));
    // The decode step holds its layers: [ts, ts + dur] of each attend inside it.
    double step_ts = -1, step_end = -1;
    for (const json & e : ev) {
        if (e.at("name") == "decode step") {
            step_ts = e.at("ts");
            step_end = step_ts + e.at("dur").get<double>();
        }
    }
    for (const json & e : ev) {
        if (e.at("name") != "attend") continue;
        EXPECT_GE(e.at("ts").get<double>(), step_ts);
        EXPECT_LE(e.at("ts").get<double>() + e.at("dur").get<double>(), step_end + 1e-6);
    }
}

TEST(trace, an_unwritable_file_is_an_error_naming_it) {
    trace_start();
    { trace_scope s("x", "test"); }
    trace_stop();
    const std::string path = "/nonexistent-dir/trace.json";
    const std::string msg = test::error_of([&] { trace_write(path, "test"); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

}  // namespace
}  // namespace hill
