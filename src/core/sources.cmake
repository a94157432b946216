hill_add_library(hill_core
  core/atomic_file.cpp
  core/error.cpp
  core/ggml_type.cpp
  core/log.cpp
  core/mapped_file.cpp
  core/sys_info.cpp
  core/thread_pool.cpp
)
target_link_libraries(hill_core PUBLIC fmt::fmt Threads::Threads)
