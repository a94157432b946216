# KV cache tiers (DESIGN.md §1, §3): the KV cells (metadata) apart from the pools (hot arena, cold pool
# with its writer and readers), the page table, the asynchronous I/O queue and the device tier.
find_package(PkgConfig REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)

hill_add_library(hill_kv
  kv/cold_gather.cpp
  kv/cold_logs.cpp
  kv/cold_pool.cpp
  kv/cold_prefetch.cpp
  kv/cold_reader.cpp
  kv/cold_writer.cpp
  kv/device_cache.cpp
  kv/device_tier.cpp
  kv/hot_arena.cpp
  kv/io_queue.cpp
  kv/kv_cells.cpp
  kv/ordered_gather.cpp
  kv/page_table.cpp
)
target_link_libraries(hill_kv PUBLIC hill_compute hill_core PRIVATE PkgConfig::URING PkgConfig::XXHASH)
