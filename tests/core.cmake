hill_add_test(test_core unit LIBS hill_core SOURCES test_core.cpp)
hill_add_test(test_trace unit LIBS hill_core nlohmann_json::nlohmann_json SOURCES test_trace.cpp)
