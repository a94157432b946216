# The OpenAI-compatible HTTP server (above engine/): cpp-httplib from Debian (libcpp-httplib-dev, a
# compiled library).
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET GLOBAL cpp-httplib)
hill_add_library(hill_server
  server/api_request.cpp
  server/server.cpp
)
target_link_libraries(hill_server PUBLIC hill_engine PRIVATE PkgConfig::HTTPLIB nlohmann_json::nlohmann_json fmt::fmt)
