# tests of importance scoring and token selection
hill_add_test(test_score unit LIBS hill_score SOURCES test_score.cpp)
hill_add_test(test_quant_copy unit LIBS hill_score SOURCES test_quant_copy.cpp)
hill_add_test(test_page_bounds unit LIBS hill_score SOURCES test_page_bounds.cpp)
