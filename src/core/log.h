// Logging to stderr. One line per message, prefixed with the level; `verbosity` filters.
#pragma once

#include <fmt/format.h>

namespace hill {

enum class log_level { debug = 0, info = 1, warn = 2, error = 3 };

// Messages below this level are dropped. Default: info.
void log_set_level(log_level lvl);
log_level log_get_level();
void log_write(log_level lvl, const std::string & msg);

template <class... A> void log_debug(fmt::format_string<A...> f, A &&... a) {
    if (log_get_level() <= log_level::debug) log_write(log_level::debug, fmt::format(f, std::forward<A>(a)...));
}
template <class... A> void log_info(fmt::format_string<A...> f, A &&... a) {
    if (log_get_level() <= log_level::info) log_write(log_level::info, fmt::format(f, std::forward<A>(a)...));
}
template <class... A> void log_warn(fmt::format_string<A...> f, A &&... a) {
    if (log_get_level() <= log_level::warn) log_write(log_level::warn, fmt::format(f, std::forward<A>(a)...));
}

}  // namespace hill
