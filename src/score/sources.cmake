# Importance scoring and token selection (DESIGN.md §3 steps 2-3): the host scorer, the
# scoring copy and the selector.
hill_add_library(hill_score
  score/attention_recall.cpp
  score/attention_totals.cpp
  score/host_scorer.cpp
  score/key_sketch.cpp
  score/page_bounds.cpp
  score/score_avx2.cpp
  score/score_config.cpp
  score/quant_copy.cpp
  score/softmax_avx2.cpp
  score/selector.cpp
)
# Only this file is compiled for AVX2/FMA/F16C; it runs only when cpu_has_avx2() says so.
set_source_files_properties(score/score_avx2.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
# The softmax weights must equal the scalar code's bits: AVX2 without FMA, no contraction.
set_source_files_properties(score/softmax_avx2.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-ffp-contract=off")
target_link_libraries(hill_score PUBLIC hill_compute hill_core)
