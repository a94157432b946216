hill_add_library(hill_engine
  engine/batch_generator.cpp
  engine/context.cpp
  engine/passkey.cpp
  engine/perplexity.cpp
  engine/prompt_cache.cpp
  engine/prompt_cache_dir.cpp
  engine/run_report.cpp
  engine/sampler.cpp
  engine/session.cpp
)
target_link_libraries(hill_engine PRIVATE PkgConfig::XXHASH PUBLIC nlohmann_json::nlohmann_json)
target_link_libraries(hill_engine PUBLIC hill_sched hill_policy hill_csd hill_kv hill_model hill_tokenizer hill_compute hill_core)
