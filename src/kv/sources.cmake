# KV cache tiers (DESIGN.md §3): the asynchronous I/O queue and the cold pool on SSD.
find_package(PkgConfig REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)

hill_add_library(hill_kv
  kv/cold_pool.cpp
  kv/device_tier.cpp
  kv/io_queue.cpp
  kv/kv_store.cpp
)
target_link_libraries(hill_kv PUBLIC hill_compute hill_core PRIVATE PkgConfig::URING PkgConfig::XXHASH)
