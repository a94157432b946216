# The `hillinfer bench` and `hillinfer calibrate` experiments: workloads and runners over the engine (above engine/).
hill_add_library(hill_experiments
  experiments/accuracy.cpp
  experiments/calibrate.cpp
  experiments/e2e_bench.cpp
  experiments/plot.cpp
  experiments/step_bench.cpp
  experiments/step_experiments.cpp
)
target_link_libraries(hill_experiments PUBLIC hill_engine)
