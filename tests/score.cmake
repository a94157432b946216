# tests of importance scoring and token selection
hill_add_test(test_score unit LIBS hill_score SOURCES test_score.cpp)
hill_add_test(test_score_copy unit LIBS hill_score SOURCES test_score_copy.cpp)
