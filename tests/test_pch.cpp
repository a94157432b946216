// The translation unit tests/CMakeLists.txt builds the test files' shared precompiled header with.
