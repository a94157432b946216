# Policies (DESIGN.md §1-3): read-only deciders of selection and placement, one file each, and the
# registry (name -> factory).
hill_add_library(hill_policy
  policy/full.cpp
  policy/h2o.cpp
  policy/hillinfer.cpp
  policy/infinigen.cpp
  policy/leoam.cpp
  policy/placement.cpp
  policy/policy.cpp
  policy/quest.cpp
  policy/registry.cpp
  policy/streaming.cpp
  policy/top_alpha.cpp
)
target_link_libraries(hill_policy PUBLIC hill_score hill_kv hill_core)
