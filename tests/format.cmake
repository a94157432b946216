# tests of format: the containers in hill_format (src/format/sources.cmake).
hill_add_test(test_json_file unit LIBS hill_format SOURCES test_json_file.cpp)
hill_add_test(test_gguf unit LIBS hill_format SOURCES test_gguf.cpp)
hill_add_test(test_gguf_data model LIBS hill_format SOURCES test_gguf_data.cpp)
# safetensors reader and Hugging Face checkpoint folders; also the HF -> GGUF names (hill_model).
hill_add_test(test_safetensors unit LIBS hill_model SOURCES test_safetensors.cpp)

# libFuzzer targets for the GGUF and safetensors readers (the latter parses its JSON header with
# nlohmann-json, header-only, so the parser is instrumented too).
if(HILL_BUILD_FUZZ)
  hill_add_fuzzer(fuzz_gguf CORPUS gguf LIBS fmt::fmt SOURCES
    fuzz/fuzz_gguf.cpp
    ${PROJECT_SOURCE_DIR}/src/format/gguf_file.cpp
    ${PROJECT_SOURCE_DIR}/src/core/error.cpp
    ${PROJECT_SOURCE_DIR}/src/core/ggml_type.cpp
    ${PROJECT_SOURCE_DIR}/src/core/mapped_file.cpp)
  hill_add_fuzzer(fuzz_safetensors CORPUS safetensors LIBS fmt::fmt nlohmann_json::nlohmann_json SOURCES
    fuzz/fuzz_safetensors.cpp
    ${PROJECT_SOURCE_DIR}/src/format/safetensors_file.cpp
    ${PROJECT_SOURCE_DIR}/src/format/json_file.cpp
    ${PROJECT_SOURCE_DIR}/src/core/error.cpp
    ${PROJECT_SOURCE_DIR}/src/core/ggml_type.cpp
    ${PROJECT_SOURCE_DIR}/src/core/mapped_file.cpp)
endif()
