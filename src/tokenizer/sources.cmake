hill_add_library(hill_tokenizer
  tokenizer/bpe_pre_tokenizer.cpp
  tokenizer/bpe_tokenizer.cpp
  tokenizer/chat_template.cpp
  tokenizer/spm_tokenizer.cpp
  tokenizer/tokenizer.cpp
)
# PCRE2 (8-bit, with Unicode properties and JIT) runs the byte-level BPE pre-tokenizer regexes;
# Debian: libpcre2-dev.
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET GLOBAL libpcre2-8)  # GLOBAL: tests/ links it too (fuzz)
target_link_libraries(hill_tokenizer PUBLIC hill_format hill_core PRIVATE PkgConfig::PCRE2 PkgConfig::XXHASH nlohmann_json::nlohmann_json)
