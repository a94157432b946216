# tests of model
# The GGUF reader/writer live in hill_gguf (src/model/sources.cmake); the tests need nothing else.
hill_add_test(test_gguf unit LIBS hill_gguf SOURCES test_gguf.cpp)
hill_add_test(test_gguf_data model LIBS hill_gguf SOURCES test_gguf_data.cpp)
# The passkey model is run by a session: hill_engine brings hill_model.
hill_add_test(test_passkey_model unit LIBS hill_engine SOURCES test_passkey_model.cpp)

# libFuzzer target for the GGUF reader. The fuzz build configures the whole project with
# CMAKE_CXX_COMPILER=clang++; the reader and the core sources it needs are compiled here
# directly so that all of them carry the sanitizers (hill_core/hill_model do not).
if(HILL_BUILD_FUZZ)
  set(HILL_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1)
  add_executable(fuzz_gguf
    fuzz/fuzz_gguf.cpp
    ${PROJECT_SOURCE_DIR}/src/model/gguf_file.cpp
    ${PROJECT_SOURCE_DIR}/src/core/error.cpp
    ${PROJECT_SOURCE_DIR}/src/core/ggml_type.cpp
    ${PROJECT_SOURCE_DIR}/src/core/mapped_file.cpp)
  target_include_directories(fuzz_gguf PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(fuzz_gguf PRIVATE ${HILL_FUZZ_FLAGS})
  target_link_options(fuzz_gguf PRIVATE ${HILL_FUZZ_FLAGS})
  target_link_libraries(fuzz_gguf PRIVATE fmt::fmt hill_warnings)
  # Replays the committed seed corpus (and the inputs of fixed crashes) once: no mutation, and
  # files (not the folder) are passed so that nothing is written into the source tree.
  file(GLOB HILL_FUZZ_GGUF_CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/gguf/*)
  add_test(NAME fuzz_gguf_corpus COMMAND fuzz_gguf ${HILL_FUZZ_GGUF_CORPUS})
  set_tests_properties(fuzz_gguf_corpus PROPERTIES LABELS unit)

  # The same for the safetensors reader (it parses its JSON header with nlohmann-json, header-only,
  # so the parser is instrumented too).
  add_executable(fuzz_safetensors
    fuzz/fuzz_safetensors.cpp
    ${PROJECT_SOURCE_DIR}/src/model/safetensors_file.cpp
    ${PROJECT_SOURCE_DIR}/src/core/error.cpp
    ${PROJECT_SOURCE_DIR}/src/core/ggml_type.cpp
    ${PROJECT_SOURCE_DIR}/src/core/mapped_file.cpp)
  target_include_directories(fuzz_safetensors PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(fuzz_safetensors PRIVATE ${HILL_FUZZ_FLAGS})
  target_link_options(fuzz_safetensors PRIVATE ${HILL_FUZZ_FLAGS})
  target_link_libraries(fuzz_safetensors PRIVATE fmt::fmt nlohmann_json::nlohmann_json hill_warnings)
  file(GLOB HILL_FUZZ_SAFETENSORS_CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/safetensors/*)
  add_test(NAME fuzz_safetensors_corpus COMMAND fuzz_safetensors ${HILL_FUZZ_SAFETENSORS_CORPUS})
  set_tests_properties(fuzz_safetensors_corpus PROPERTIES LABELS unit)
endif()

# safetensors reader, Hugging Face checkpoint folders, HF -> GGUF names (hill_hf).
hill_add_test(test_safetensors unit LIBS hill_hf SOURCES test_safetensors.cpp)
# hillinfer convert: checkpoint folder -> GGUF, compared through the engine's logits.
hill_add_test(test_convert unit LIBS hill_convert hill_engine SOURCES test_convert.cpp)
