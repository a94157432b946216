# The `hillinfer bench` and `hillinfer calibrate` experiments: workloads and runners over the engine (above engine/).
hill_add_library(hill_experiments
  experiments/calibrate.cpp
  experiments/step_bench.cpp
)
target_link_libraries(hill_experiments PUBLIC hill_engine)
