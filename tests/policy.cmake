# tests of the attention policies
hill_add_test(test_policy unit LIBS hill_engine SOURCES test_policy.cpp)
hill_add_test(test_policy_data model LIBS hill_engine SOURCES test_policy_data.cpp)
hill_add_test(test_placement unit LIBS hill_policy SOURCES test_placement.cpp)
hill_add_test(test_placement_data model LIBS hill_engine SOURCES test_placement_data.cpp)
hill_add_test(test_infinigen unit LIBS hill_engine SOURCES test_infinigen.cpp)
