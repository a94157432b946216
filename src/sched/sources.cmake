# The decode step of a batch of sequences (DESIGN.md §3): plan, score, select, gather, attend, apply; the planner
# of the hot/cold split and its calibration (DESIGN.md §4).
hill_add_library(hill_sched
  sched/calibration.cpp
  sched/decode_step.cpp
  sched/hint_gate.cpp
  sched/planner.cpp
)
target_link_libraries(hill_sched PUBLIC hill_policy hill_csd hill_model hill_score hill_kv hill_compute hill_format hill_core)
