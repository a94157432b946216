# model_loader: GGUF files and checkpoint folders (containers in hill_format); arch_*: one file per
# architecture family (its loader and its forward pass); forward: the forward pass's interface and
# what its implementations share; hf_names: the HF -> GGUF names shared by the folder loader and
# `convert`.
hill_add_library(hill_model
  model/arch_gemma.cpp
  model/arch_llama.cpp
  model/arch_opt.cpp
  model/arch_phi3.cpp
  model/arch_qwen.cpp
  model/forward.cpp
  model/gguf_model.cpp
  model/hf_model.cpp
  model/hf_names.cpp
  model/llama2c_file.cpp
  model/model.cpp
  model/model_loader.cpp
  model/synthetic_model.cpp
  model/weight_scheme.cpp
)
# The model owns its tokenizer; the synthetic models quantize with the compute kernels.
target_link_libraries(hill_model PUBLIC hill_format hill_tokenizer hill_compute hill_core PRIVATE PkgConfig::XXHASH)

# `hillinfer convert`: a Hugging Face folder written out as GGUF. It reads hyperparameters through
# the HF loader's architecture code (model_loader.h), so it sits above hill_model.
hill_add_library(hill_convert
  model/hf_convert.cpp
)
target_link_libraries(hill_convert PUBLIC hill_model hill_format hill_compute PRIVATE nlohmann_json::nlohmann_json)
