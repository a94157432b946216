// A stop the user asked for: SIGINT, SIGTERM or SIGHUP, recorded by the CLI's signal handler
// (tools/common.h, install_interrupt_handler). The engine itself takes stop hooks
// (csd::storage_params::stop_requested, batch_progress::stop_requested) so that its owner decides what
// a signal ends — a server lets running streams finish; the long loops that only the CLI runs (the
// experiments, writing a model) poll this flag between units of work and end with
// exit_code::interrupted, so that destructors remove cold-pool and temporary files.
#pragma once

namespace hill {

// Records signal `sig` (> 0); async-signal-safe.
void record_stop_signal(int sig);
// The recorded signal, 0 for none.
int stop_signal();
bool stop_requested();
// Forgets a stop that has been handled (chat: a reply stopped, the conversation goes on).
void clear_stop();
// Throws hill::error(exit_code::interrupted, "interrupted during <what>") when a stop is recorded.
void throw_if_stopped(const char * what);

}  // namespace hill
