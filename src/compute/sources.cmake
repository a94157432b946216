hill_add_library(hill_compute
  compute/attention.cpp
  compute/kernel_mode.cpp
  compute/matmul.cpp
  compute/ops.cpp
  compute/kernels_avx2.cpp
)
# Only this file is compiled for AVX2/FMA/F16C; it runs only when cpu_has_avx2() says so.
set_source_files_properties(compute/kernels_avx2.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
target_include_directories(hill_compute PRIVATE ${CBLAS_INCLUDE_DIR})
target_link_libraries(hill_compute PUBLIC hill_core PRIVATE ${BLAS_LIBRARIES})
