hill_add_library(hill_core
  core/atomic_file.cpp
  core/error.cpp
  core/interrupt.cpp
  core/ggml_type.cpp
  core/log.cpp
  core/mapped_file.cpp
  core/sys_info.cpp
  core/thread_pool.cpp
  core/trace.cpp
)
# nlohmann-json escapes the strings of trace files (core/trace.cpp).
target_link_libraries(hill_core PUBLIC fmt::fmt Threads::Threads PRIVATE nlohmann_json::nlohmann_json)
