hill_add_test(test_sampler unit LIBS hill_engine SOURCES test_sampler.cpp)
hill_add_test(test_session unit LIBS hill_engine SOURCES test_session.cpp)
hill_add_test(test_perplexity unit LIBS hill_engine SOURCES test_perplexity.cpp)
hill_add_test(test_reference unit LIBS hill_engine SOURCES test_reference.cpp)
hill_add_test(test_int8_logits unit LIBS hill_engine SOURCES test_int8_logits.cpp)
hill_add_test(test_golden model LIBS hill_engine nlohmann_json::nlohmann_json SOURCES test_golden.cpp)
hill_add_test(test_cli unit LIBS hill_engine nlohmann_json::nlohmann_json SOURCES test_cli.cpp)
target_compile_definitions(test_cli PRIVATE HILL_CLI_PATH="$<TARGET_FILE:hillinfer_cli>")
add_dependencies(test_cli hillinfer_cli)
hill_add_test(test_cli_models unit LIBS hill_engine nlohmann_json::nlohmann_json SOURCES test_cli_models.cpp)
target_compile_definitions(test_cli_models PRIVATE HILL_CLI_PATH="$<TARGET_FILE:hillinfer_cli>")
add_dependencies(test_cli_models hillinfer_cli)
hill_add_test(test_cli_chat unit LIBS hill_engine nlohmann_json::nlohmann_json SOURCES test_cli_chat.cpp)
target_compile_definitions(test_cli_chat PRIVATE HILL_CLI_PATH="$<TARGET_FILE:hillinfer_cli>")
add_dependencies(test_cli_chat hillinfer_cli)
hill_add_test(test_llama2c unit LIBS hill_engine SOURCES test_llama2c.cpp)
hill_add_test(test_prompt_cache unit LIBS hill_engine SOURCES test_prompt_cache.cpp)
hill_add_test(test_passkey unit LIBS hill_engine SOURCES test_passkey.cpp)
hill_add_test(test_passkey_long model LIBS hill_engine SOURCES test_passkey_long.cpp)
hill_add_test(test_passkey_slow slow LIBS hill_engine SOURCES test_passkey_slow.cpp)
hill_add_test(test_batch unit LIBS hill_engine SOURCES test_batch.cpp)
hill_add_test(test_cli_batch unit LIBS hill_engine nlohmann_json::nlohmann_json SOURCES test_cli_batch.cpp)
target_compile_definitions(test_cli_batch PRIVATE HILL_CLI_PATH="$<TARGET_FILE:hillinfer_cli>")
add_dependencies(test_cli_batch hillinfer_cli)
hill_add_test(test_step_bench unit LIBS hill_experiments SOURCES test_step_bench.cpp)
hill_add_test(test_hint_gate unit LIBS hill_engine SOURCES test_hint_gate.cpp)
hill_add_test(test_device_cache unit LIBS hill_engine SOURCES test_device_cache.cpp)
hill_add_test(test_planner unit LIBS hill_experiments nlohmann_json::nlohmann_json SOURCES test_planner.cpp)
hill_add_test(test_bench_experiments unit LIBS hill_experiments nlohmann_json::nlohmann_json SOURCES test_bench_experiments.cpp)
target_compile_definitions(test_bench_experiments PRIVATE HILL_CLI_PATH="$<TARGET_FILE:hillinfer_cli>")
add_dependencies(test_bench_experiments hillinfer_cli)
hill_add_test(test_bench_accuracy model LIBS hill_experiments nlohmann_json::nlohmann_json SOURCES test_bench_accuracy.cpp)
target_compile_definitions(test_bench_accuracy PRIVATE HILL_CLI_PATH="$<TARGET_FILE:hillinfer_cli>")
add_dependencies(test_bench_accuracy hillinfer_cli)
hill_add_test(test_serve unit LIBS hill_server PkgConfig::HTTPLIB nlohmann_json::nlohmann_json SOURCES test_serve.cpp)
target_compile_definitions(test_serve PRIVATE HILL_CLI_PATH="$<TARGET_FILE:hillinfer_cli>")
add_dependencies(test_serve hillinfer_cli)
# libFuzzer targets for the server's request parsing and validation and its HTTP side (hill_add_fuzzer,
# tests/CMakeLists.txt).
if(HILL_BUILD_FUZZ)
  hill_add_fuzzer(fuzz_api_request CORPUS api_request LIBS fmt::fmt nlohmann_json::nlohmann_json SOURCES
    fuzz/fuzz_api_request.cpp
    ${PROJECT_SOURCE_DIR}/src/server/api_request.cpp
    ${PROJECT_SOURCE_DIR}/src/format/json_file.cpp
    ${PROJECT_SOURCE_DIR}/src/core/error.cpp
    ${PROJECT_SOURCE_DIR}/src/core/mapped_file.cpp)
  # Raw HTTP requests into the real server: our server sources carry the sanitizers, the engine under them
  # (hill_engine, built plainly in the fuzz tree) and cpp-httplib (a shared library) do not.
  hill_add_fuzzer(fuzz_http CORPUS http LIBS hill_engine PkgConfig::HTTPLIB fmt::fmt nlohmann_json::nlohmann_json
    SOURCES
    fuzz/fuzz_http.cpp
    ${PROJECT_SOURCE_DIR}/src/server/server.cpp
    ${PROJECT_SOURCE_DIR}/src/server/api_request.cpp)
endif()
# The official `openai` npm package as a client (scripts/openai_client.sh installs it; skipped, saying why,
# when npm or the registry is unavailable).
add_test(NAME openai_client COMMAND ${PROJECT_SOURCE_DIR}/scripts/openai_client.sh $<TARGET_FILE:hillinfer_cli>)
set_tests_properties(openai_client PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 300)
