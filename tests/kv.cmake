# tests of the KV tiers
hill_add_test(test_io_queue unit LIBS hill_kv SOURCES test_io_queue.cpp)
hill_add_test(test_cold_pool unit LIBS hill_kv SOURCES test_cold_pool.cpp)
hill_add_test(test_kv_cells unit LIBS hill_kv SOURCES test_kv_cells.cpp)
hill_add_test(test_kv_faults unit LIBS hill_engine SOURCES test_kv_faults.cpp)
