# Attention policies (DESIGN.md §1-3): full, streaming, hillinfer.
hill_add_library(hill_policy
  policy/attention_policy.cpp
  policy/selection_policy.cpp
)
target_link_libraries(hill_policy PUBLIC hill_csd hill_score hill_kv hill_compute hill_core)
