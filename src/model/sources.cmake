hill_add_library(hill_model
  model/gguf_file.cpp
  model/gguf_writer.cpp
)
target_link_libraries(hill_model PUBLIC hill_core)
