hill_add_library(hill_tokenizer
  tokenizer/spm_tokenizer.cpp
  tokenizer/tokenizer.cpp
)
target_link_libraries(hill_tokenizer PUBLIC hill_gguf hill_core)
