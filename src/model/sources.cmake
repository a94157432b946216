# GGUF container, used by the tokenizer and the model loaders.
hill_add_library(hill_gguf
  model/gguf_file.cpp
  model/gguf_writer.cpp
)
target_link_libraries(hill_gguf PUBLIC hill_core)

hill_add_library(hill_model
  model/llama2c_file.cpp
  model/llama_gguf.cpp
  model/model.cpp
  model/synthetic_model.cpp
)
# The model owns its tokenizer; the synthetic models quantize with the compute kernels.
target_link_libraries(hill_model PUBLIC hill_gguf hill_tokenizer hill_compute hill_core)
