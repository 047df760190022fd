# Included by llama-cpp-python's top-level CMake project (CMAKE_PROJECT_llama_cpp_INCLUDE, set by
# scripts/setup.sh --for-tests) to build only what its Python binding loads (libllama, libggml*).
# llama-cpp-python 0.3.36 forces llama.cpp's `common` library on (LLAMA_BUILD_COMMON ... FORCE) and llama.cpp
# installs it, but the binding never loads it. `common`, with the HTTP and hash libraries only it links, is 55 of
# the 127 compile steps, and the slowest ones (chat templates, argument parsing, JSON, cpp-httplib).
# Once every directory is read (DEFER), `common` is left with one empty source file and no links, so the library
# still exists for its install rule but costs one compile step, and the two vendored libraries leave `all`.
set(_lean_stub "${CMAKE_BINARY_DIR}/llama-common-stub.cpp")
file(WRITE "${_lean_stub}" "// llama.cpp's common library: unused by the Python binding (scripts/llama-cpp-lean.cmake)\n")
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}"
    CALL set_property TARGET llama-common PROPERTY SOURCES "${_lean_stub}")
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}"
    CALL set_property TARGET llama-common PROPERTY LINK_LIBRARIES "")
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}"
    CALL set_property TARGET cpp-httplib vendor-hash PROPERTY EXCLUDE_FROM_ALL TRUE)
