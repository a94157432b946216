hill_add_library(hill_engine
  engine/passkey.cpp
  engine/perplexity.cpp
  engine/prompt_cache.cpp
  engine/sampler.cpp
  engine/session.cpp
)
target_link_libraries(hill_engine PRIVATE PkgConfig::XXHASH)
target_link_libraries(hill_engine PUBLIC hill_policy hill_kv hill_model hill_tokenizer hill_compute hill_core)
