#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace hill {

namespace {
std::atomic<int> g_level{static_cast<int>(log_level::info)};
std::mutex g_mutex;  // keeps lines from different threads whole
}  // namespace

void log_set_level(log_level lvl) { g_level.store(static_cast<int>(lvl)); }
log_level log_get_level() { return static_cast<log_level>(g_level.load()); }

void log_write(log_level lvl, const std::string & msg) {
    static const char * const names[] = {"debug", "info", "warning", "error"};
    std::lock_guard<std::mutex> lock(g_mutex);
    std::fprintf(stderr, "hillinfer: %s: %s\n", names[static_cast<int>(lvl)], msg.c_str());
}

}  // namespace hill
