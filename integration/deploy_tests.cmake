# Deploy checks (label lint): scripts/check-deploy runs helm, kubernetes-models, docker-compose,
# promtool and nats-server against deploy/, Dockerfile and docker-compose.yml. The flags check
# runs each binary of this build with --help. Included from integration/CMakeLists.txt.
foreach(check chart compose flags rules metric-names dockerfile k8s-objects)
  add_test(NAME deploy_${check}
           COMMAND ${CMAKE_SOURCE_DIR}/scripts/check-deploy --build-dir ${CMAKE_BINARY_DIR} ${check}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(deploy_${check} PROPERTIES LABELS lint TIMEOUT 300)
endforeach()
# helm is extracted into build/tools once; the checks that need it must not race on it.
set_tests_properties(deploy_chart deploy_flags PROPERTIES RESOURCE_LOCK wisp_helm)

# Every installed binary loads the allocator WISP_MALLOC chose (tcmalloc would be silently dropped
# by a linker default of --as-needed, and the admission figures in bench/admission rely on it).
if(TARGET wisp_malloc AND WISP_MALLOC STREQUAL "tcmalloc" AND NOT WISP_SANITIZE)
  set(_wisp_binaries wisp-gateway wisp-policy wisp-token wisp-populator wisp-sidecar wispctl)
  set(_checks "")
  foreach(b IN LISTS _wisp_binaries)
    if(TARGET ${b})
      string(APPEND _checks "ldd $<TARGET_FILE:${b}> | grep -q libtcmalloc_minimal || "
                            "{ echo '${b} does not load tcmalloc'; exit 1; }; ")
    endif()
  endforeach()
  add_test(NAME deploy_allocator COMMAND sh -c "${_checks}echo 'every wisp binary loads tcmalloc'")
  set_tests_properties(deploy_allocator PROPERTIES LABELS lint TIMEOUT 60)
endif()
