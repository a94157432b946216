# Importance scoring and token selection (DESIGN.md §3 steps 2-3): the host scorer, the
# scoring copy and the selector.
hill_add_library(hill_score
  score/attention_recall.cpp
  score/attention_totals.cpp
  score/copy_fields_avx2.cpp
  score/host_scorer.cpp
  score/key_sketch.cpp
  score/page_bounds.cpp
  score/score_avx2.cpp
  score/score_packed.cpp
  score/score_packed_avx512.cpp
  score/score_packed_vnni.cpp
  score/score_config.cpp
  score/quant_copy.cpp
  score/softmax_avx2.cpp
  score/selector.cpp
)
# These files are compiled for AVX2/FMA/F16C; they run only when cpu_has_avx2() says so.
set_source_files_properties(score/score_avx2.cpp score/score_packed.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
# score_packed.cpp again with AVX-VNNI and with AVX-512 VNNI (they include it); each runs only when
# int8_isa_supported() says so.
set_source_files_properties(score/score_packed_vnni.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mavxvnni")
set_source_files_properties(score/score_packed_avx512.cpp PROPERTIES COMPILE_OPTIONS
                            "-mavx2;-mfma;-mf16c;-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni")
# The softmax weights must equal the scalar code's bits: AVX2 without FMA, no contraction.
set_source_files_properties(score/softmax_avx2.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-ffp-contract=off")
# So must the scoring copy's fields: AVX2 and F16C without FMA, no contraction.
set_source_files_properties(score/copy_fields_avx2.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-mf16c;-ffp-contract=off")
target_link_libraries(hill_score PUBLIC hill_compute hill_core)
