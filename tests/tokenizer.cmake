# tests of tokenizer
hill_add_test(test_tokenizer unit LIBS hill_tokenizer SOURCES test_tokenizer.cpp)
hill_add_test(test_bpe_tokenizer unit LIBS hill_tokenizer nlohmann_json::nlohmann_json SOURCES test_bpe_tokenizer.cpp)
hill_add_test(test_tokenizer_data model LIBS hill_tokenizer nlohmann_json::nlohmann_json SOURCES test_tokenizer_data.cpp)
hill_add_test(test_bpe_tokenizer_data model LIBS hill_tokenizer SOURCES test_bpe_tokenizer_data.cpp)

# libFuzzer target for byte-level BPE encode/decode (see tests/model.cmake for the fuzz build):
# the tokenizer and the core sources it needs are compiled here so that all carry the sanitizers.
if(HILL_BUILD_FUZZ)
  add_executable(fuzz_bpe_tokenizer
    fuzz/fuzz_bpe_tokenizer.cpp
    ${PROJECT_SOURCE_DIR}/src/tokenizer/bpe_tokenizer.cpp
    ${PROJECT_SOURCE_DIR}/src/core/error.cpp)
  target_include_directories(fuzz_bpe_tokenizer PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(fuzz_bpe_tokenizer PRIVATE ${HILL_FUZZ_FLAGS})
  target_link_options(fuzz_bpe_tokenizer PRIVATE ${HILL_FUZZ_FLAGS})
  target_link_libraries(fuzz_bpe_tokenizer PRIVATE fmt::fmt PkgConfig::PCRE2 hill_warnings)
  file(GLOB HILL_FUZZ_BPE_CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/bpe/*)
  add_test(NAME fuzz_bpe_tokenizer_corpus COMMAND fuzz_bpe_tokenizer ${HILL_FUZZ_BPE_CORPUS})
  set_tests_properties(fuzz_bpe_tokenizer_corpus PROPERTIES LABELS unit)
endif()
