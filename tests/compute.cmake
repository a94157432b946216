# tests of compute
hill_add_test(test_kernels unit LIBS hill_compute SOURCES test_kernels.cpp)
hill_add_test(test_q8_dot unit LIBS hill_compute SOURCES test_q8_dot.cpp)
