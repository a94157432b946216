# tests of model
# The passkey model is run by a session: hill_engine brings hill_model.
hill_add_test(test_passkey_model unit LIBS hill_engine SOURCES test_passkey_model.cpp)
# The forward pass around attention (model/forward.h): batch rows equal rows alone, every architecture.
hill_add_test(test_forward unit LIBS hill_model SOURCES test_forward.cpp)
# hillinfer convert: checkpoint folder -> GGUF, compared through the engine's logits.
hill_add_test(test_convert unit LIBS hill_convert hill_engine SOURCES test_convert.cpp)
# Weight schemes of the model writers (model/weight_scheme.h): names, the Q4_K_M rule, fallbacks.
hill_add_test(test_weight_scheme unit LIBS hill_model SOURCES test_weight_scheme.cpp)
