# File containers (DESIGN.md §2), below the tokenizer and the model: the GGUF reader and writer,
# the safetensors reader, Hugging Face checkpoint folders (config.json, shards) and JSON files with
# error paths. They know no architecture: the HF -> GGUF tensor names are model knowledge
# (model/hf_names.h).
hill_add_library(hill_format
  format/gguf_file.cpp
  format/gguf_writer.cpp
  format/hf_checkpoint.cpp
  format/json_file.cpp
  format/safetensors_file.cpp
)
# nlohmann-json is public: json_file.h hands out parsed documents (json_value::json()).
target_link_libraries(hill_format PUBLIC hill_core nlohmann_json::nlohmann_json)
