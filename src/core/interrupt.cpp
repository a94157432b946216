#include "core/interrupt.h"

#include <csignal>

#include "core/error.h"

namespace hill {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;
}  // namespace

void record_stop_signal(int sig) {
    g_stop_signal = sig;
}

int stop_signal() {
    return g_stop_signal;
}

bool stop_requested() {
    return g_stop_signal != 0;
}

void clear_stop() {
    g_stop_signal = 0;
}

void throw_if_stopped(const char * what) {
    if (stop_requested()) throw error(exit_code::interrupted, fmt::format("interrupted during {}", what));
}

}  // namespace hill
