# Every third-party dependency, found once. All come from Debian 12 packages (scripts/install-deps).
find_package(PkgConfig REQUIRED)
# Debian's cnats CMake config names a static library it does not ship; pkg-config is correct.
pkg_check_modules(NATS REQUIRED IMPORTED_TARGET libnats)

find_package(Threads REQUIRED)
find_package(OpenSSL 3 REQUIRED)
find_package(ZLIB REQUIRED)
find_package(LibLZMA REQUIRED)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(simdjson CONFIG REQUIRED)
find_package(Boost 1.74 REQUIRED)
if(WISP_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
endif()
if(WISP_BUILD_BENCH)
  find_package(benchmark CONFIG REQUIRED)
endif()
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# The allocator linked into wisp's binaries (wisp_add_binary). glibc's malloc is a third of
# wisp-policy's instructions per admission (nlohmann trees are many small allocations);
# gperftools' tcmalloc cuts the CPU per admission by about a third (bench/admission/README.md).
# Sanitizer builds keep the system allocator: ASan and TSan bring their own.
set(WISP_MALLOC "tcmalloc" CACHE STRING "Allocator for wisp's binaries: tcmalloc | system")
set_property(CACHE WISP_MALLOC PROPERTY STRINGS tcmalloc system)
add_library(wisp_malloc INTERFACE)
add_library(wisp::malloc ALIAS wisp_malloc)
if(WISP_MALLOC STREQUAL "tcmalloc" AND NOT WISP_SANITIZE)
  # The runtime package (libtcmalloc-minimal4) is enough: no -dev symlink is needed.
  find_library(WISP_TCMALLOC_LIBRARY NAMES tcmalloc_minimal libtcmalloc_minimal.so.4)
  if(NOT WISP_TCMALLOC_LIBRARY)
    message(FATAL_ERROR "WISP_MALLOC=tcmalloc: libtcmalloc_minimal not found "
                        "(Debian package libtcmalloc-minimal4; scripts/install-deps installs it), "
                        "or configure with -DWISP_MALLOC=system")
  endif()
  # --no-as-needed: nothing names a tcmalloc symbol, it only has to be loaded before libc's malloc.
  target_link_libraries(wisp_malloc INTERFACE
                        "-Wl,--push-state,--no-as-needed" ${WISP_TCMALLOC_LIBRARY} "-Wl,--pop-state")
  message(STATUS "wisp binaries use tcmalloc: ${WISP_TCMALLOC_LIBRARY}")
elseif(NOT WISP_MALLOC STREQUAL "system" AND NOT WISP_SANITIZE)
  message(FATAL_ERROR "WISP_MALLOC must be tcmalloc or system, not '${WISP_MALLOC}'")
endif()
