# tests of tokenizer
hill_add_test(test_tokenizer unit LIBS hill_tokenizer SOURCES test_tokenizer.cpp)
hill_add_test(test_tokenizer_data model LIBS hill_tokenizer nlohmann_json::nlohmann_json SOURCES test_tokenizer_data.cpp)
