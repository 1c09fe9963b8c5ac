# wisp_warnings: warnings for wisp's own code only (linked PRIVATE, never leaks into dependents).
add_library(wisp_warnings INTERFACE)
add_library(wisp::warnings ALIAS wisp_warnings)
target_compile_options(wisp_warnings INTERFACE -Wall -Wextra -Wpedantic -Wno-missing-field-initializers
                       $<$<BOOL:${WISP_WERROR}>:-Werror>)

# wisp_add_library(<name> SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
#   Defines target wisp_<name> with alias wisp::<name>, include/ as its public include directory.
function(wisp_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(wisp_${name} STATIC ${ARG_SOURCES})
  add_library(wisp::${name} ALIAS wisp_${name})
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/include)
    target_include_directories(wisp_${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)
  endif()
  target_link_libraries(wisp_${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE wisp::warnings ${ARG_PRIVATE_DEPS})
endfunction()

# wisp_add_test(<name> SOURCES ... [DEPS ...] [LABELS ...])
#   A GoogleTest binary registered with ctest through gtest_discover_tests (label "unit" by default).
function(wisp_add_test name)
  if(NOT WISP_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE wisp::warnings ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}"
                       WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
endfunction()

# wisp_add_binary(<name> SOURCES ... DEPS ...): an installed executable, linked with the allocator
# WISP_MALLOC chose (wisp::malloc).
function(wisp_add_binary name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE wisp::warnings ${ARG_DEPS} wisp::malloc)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
  install(TARGETS ${name} RUNTIME DESTINATION bin)
endfunction()
