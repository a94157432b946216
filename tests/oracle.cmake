# llama.cpp as the oracle: HillInfer's token ids and logits against llama.cpp's (tests/oracle/
# llama_oracle.cpp, built by scripts/llamacpp.sh outside CMake; the tests skip without it).
hill_add_test(test_llama_oracle model LIBS hill_convert hill_engine nlohmann_json::nlohmann_json SOURCES test_llama_oracle.cpp)
