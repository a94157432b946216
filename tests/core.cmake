hill_add_test(test_core unit LIBS hill_core SOURCES test_core.cpp)
