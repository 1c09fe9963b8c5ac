# The container test (issue 26, label `containers`): wisp's image from this build's binaries, the
# docker-compose stack under podman (deploy/compose/offline.yml), one request through each door and
# the injected token sidecar run as a kubelet would (integration/containers/test). Included from
# integration/CMakeLists.txt. Not built with sanitizers: the image packages the plain build.
if(NOT WISP_SANITIZE)
  add_test(NAME containers_compose_stack COMMAND ${CMAKE_SOURCE_DIR}/integration/containers/test
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(containers_compose_stack PROPERTIES
                       LABELS containers TIMEOUT 1500
                       ENVIRONMENT WISP_BIN_DIR=${CMAKE_BINARY_DIR}/bin
                       RESOURCE_LOCK wisp_podman)
endif()
