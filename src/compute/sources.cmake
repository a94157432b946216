hill_add_library(hill_compute
  compute/attention.cpp
  compute/kernel_mode.cpp
  compute/matmul.cpp
  compute/ops.cpp
  compute/q8_dot.cpp
  compute/q8_dot_avx2.cpp
  compute/q8_dot_vnni.cpp
  compute/q8_dot_avx512.cpp
  compute/kernels_avx2.cpp
)
# Only these files are compiled for AVX2/FMA/F16C; they run only when cpu_has_avx2() says so.
set_source_files_properties(compute/kernels_avx2.cpp compute/q8_dot_avx2.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
# q8_dot_avx2.cpp again with AVX-VNNI (q8_dot_vnni.cpp includes it); it runs only when
# cpu_has_avx_vnni() says so.
set_source_files_properties(compute/q8_dot_vnni.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mavxvnni")
# And with AVX-512 (q8_dot_avx512.cpp); it runs only when cpu_has_avx512_vnni() says so.
set_source_files_properties(compute/q8_dot_avx512.cpp PROPERTIES COMPILE_OPTIONS
                            "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni")
target_include_directories(hill_compute PRIVATE ${CBLAS_INCLUDE_DIR})
target_link_libraries(hill_compute PUBLIC hill_core PRIVATE ${BLAS_LIBRARIES})
