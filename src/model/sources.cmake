# GGUF container, used by the tokenizer and the model loaders.
hill_add_library(hill_gguf
  model/gguf_file.cpp
  model/gguf_writer.cpp
)
target_link_libraries(hill_gguf PUBLIC hill_core)

# Hugging Face checkpoint folders: safetensors reader, config.json, shards, and the HF -> GGUF
# name mapping shared by the folder loader and `hillinfer convert`.
hill_add_library(hill_hf
  model/hf_checkpoint.cpp
  model/hf_names.cpp
  model/safetensors_file.cpp
)
target_link_libraries(hill_hf PUBLIC hill_core nlohmann_json::nlohmann_json)

# model_loader: GGUF files and checkpoint folders; arch_*: one file per architecture family (its
# loader and its forward pass); forward: the forward pass's interface and what its implementations share.
hill_add_library(hill_model
  model/arch_llama.cpp
  model/arch_opt.cpp
  model/arch_qwen.cpp
  model/forward.cpp
  model/gguf_model.cpp
  model/hf_model.cpp
  model/llama2c_file.cpp
  model/model.cpp
  model/model_loader.cpp
  model/synthetic_model.cpp
)
# The model owns its tokenizer; the synthetic models quantize with the compute kernels.
target_link_libraries(hill_model PUBLIC hill_gguf hill_tokenizer hill_compute hill_core)
# Hugging Face folders are loaded through hill_hf.
target_link_libraries(hill_model PUBLIC hill_hf)

# `hillinfer convert`: a Hugging Face folder written out as GGUF. It reads hyperparameters through
# the HF loader's architecture code (model_loader.h), so it sits above hill_model.
hill_add_library(hill_convert
  model/hf_convert.cpp
)
target_link_libraries(hill_convert PUBLIC hill_model hill_hf hill_gguf hill_compute PRIVATE nlohmann_json::nlohmann_json)
