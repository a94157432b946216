# tests of model
# The GGUF reader/writer live in hill_gguf (src/model/sources.cmake); the tests need nothing else.
hill_add_test(test_gguf unit LIBS hill_gguf SOURCES test_gguf.cpp)
hill_add_test(test_gguf_data model LIBS hill_gguf SOURCES test_gguf_data.cpp)
# The passkey model is run by a session: hill_engine brings hill_model.
hill_add_test(test_passkey_model unit LIBS hill_engine SOURCES test_passkey_model.cpp)
# The forward pass around attention (model/forward.h): batch rows equal rows alone, every architecture.
hill_add_test(test_forward unit LIBS hill_model SOURCES test_forward.cpp)

# libFuzzer targets for the GGUF and safetensors readers (the latter parses its JSON header with
# nlohmann-json, header-only, so the parser is instrumented too).
if(HILL_BUILD_FUZZ)
  hill_add_fuzzer(fuzz_gguf CORPUS gguf LIBS fmt::fmt SOURCES
    fuzz/fuzz_gguf.cpp
    ${PROJECT_SOURCE_DIR}/src/model/gguf_file.cpp
    ${PROJECT_SOURCE_DIR}/src/core/error.cpp
    ${PROJECT_SOURCE_DIR}/src/core/ggml_type.cpp
    ${PROJECT_SOURCE_DIR}/src/core/mapped_file.cpp)
  hill_add_fuzzer(fuzz_safetensors CORPUS safetensors LIBS fmt::fmt nlohmann_json::nlohmann_json SOURCES
    fuzz/fuzz_safetensors.cpp
    ${PROJECT_SOURCE_DIR}/src/model/safetensors_file.cpp
    ${PROJECT_SOURCE_DIR}/src/core/error.cpp
    ${PROJECT_SOURCE_DIR}/src/core/ggml_type.cpp
    ${PROJECT_SOURCE_DIR}/src/core/mapped_file.cpp)
endif()

# safetensors reader, Hugging Face checkpoint folders, HF -> GGUF names (hill_hf).
hill_add_test(test_safetensors unit LIBS hill_hf SOURCES test_safetensors.cpp)
# hillinfer convert: checkpoint folder -> GGUF, compared through the engine's logits.
hill_add_test(test_convert unit LIBS hill_convert hill_engine SOURCES test_convert.cpp)
