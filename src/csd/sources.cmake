# The computational storage device (DESIGN.md §5): interface, plain SSD, emulator, HLS kernel, profiles.
hill_add_library(hill_csd
  csd/device.cpp
  csd/device_profile.cpp
  csd/emulator.cpp
  csd/hls/score_kernel.cpp
  csd/hls/score_top.cpp
  csd/plain_ssd.cpp
)
target_link_libraries(hill_csd PUBLIC hill_score hill_kv hill_core Threads::Threads PRIVATE hill_format nlohmann_json::nlohmann_json)
# The HLS kernel's fixed-bound loops (adder tree, casts) vectorize at -O3 without target flags.
set_source_files_properties(csd/hls/score_kernel.cpp PROPERTIES COMPILE_OPTIONS "-O3")

# The kernel for a real SmartSSD (src/csd/hls/README.md): off by default; needs AMD Vitis (v++) and a
# platform (HILL_CSD_PLATFORM, e.g. the SmartSSD's xilinx_u2_gen3x4_xdma_gc_2_202110_1).
option(HILL_CSD_XRT "Build the CSD scoring kernel for a SmartSSD with Vitis HLS (v++)" OFF)
if(HILL_CSD_XRT)
  find_program(VPP v++ REQUIRED)
  set(HILL_CSD_PLATFORM "" CACHE STRING "Vitis platform of the SmartSSD")
  if(NOT HILL_CSD_PLATFORM)
    message(FATAL_ERROR "HILL_CSD_XRT needs -DHILL_CSD_PLATFORM=<the SmartSSD's Vitis platform>")
  endif()
  set(hls_dir ${CMAKE_CURRENT_SOURCE_DIR}/csd/hls)
  add_custom_command(OUTPUT hill_csd_score.xo
    COMMAND ${VPP} -c -t hw --platform ${HILL_CSD_PLATFORM} -k hill_csd_score -I ${CMAKE_CURRENT_SOURCE_DIR}
            -o hill_csd_score.xo ${hls_dir}/score_top.cpp ${hls_dir}/score_kernel.cpp
    DEPENDS ${hls_dir}/score_top.cpp ${hls_dir}/score_kernel.cpp ${hls_dir}/score_kernel.h ${hls_dir}/score_top.h)
  add_custom_command(OUTPUT hill_csd_score.xclbin
    COMMAND ${VPP} -l -t hw --platform ${HILL_CSD_PLATFORM} -o hill_csd_score.xclbin hill_csd_score.xo
    DEPENDS hill_csd_score.xo)
  add_custom_target(csd_xclbin ALL DEPENDS hill_csd_score.xclbin)
endif()
