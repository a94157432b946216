# tests of tokenizer
hill_add_test(test_tokenizer unit LIBS hill_tokenizer SOURCES test_tokenizer.cpp)
hill_add_test(test_chat_template unit LIBS hill_tokenizer SOURCES test_chat_template.cpp)
hill_add_test(test_bpe_tokenizer unit LIBS hill_tokenizer nlohmann_json::nlohmann_json SOURCES test_bpe_tokenizer.cpp)
hill_add_test(test_bpe_pre_tokenizer unit LIBS hill_tokenizer SOURCES test_bpe_pre_tokenizer.cpp)
hill_add_test(test_tokenizer_data model LIBS hill_tokenizer nlohmann_json::nlohmann_json SOURCES test_tokenizer_data.cpp)
hill_add_test(test_bpe_tokenizer_data model LIBS hill_tokenizer SOURCES test_bpe_tokenizer_data.cpp)

# libFuzzer target for byte-level BPE encode/decode (hill_add_fuzzer, tests/CMakeLists.txt).
if(HILL_BUILD_FUZZ)
  hill_add_fuzzer(fuzz_bpe_tokenizer CORPUS bpe LIBS fmt::fmt PkgConfig::PCRE2 PkgConfig::XXHASH SOURCES
    fuzz/fuzz_bpe_tokenizer.cpp
    ${PROJECT_SOURCE_DIR}/src/tokenizer/bpe_pre_tokenizer.cpp
    ${PROJECT_SOURCE_DIR}/src/tokenizer/bpe_tokenizer.cpp
    ${PROJECT_SOURCE_DIR}/src/core/error.cpp)
endif()
