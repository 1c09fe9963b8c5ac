# Deploy checks (label lint): scripts/check-deploy runs helm, kubernetes-models, docker-compose,
# promtool and nats-server against deploy/, Dockerfile and docker-compose.yml. The flags check
# runs each binary of this build with --help. Included from integration/CMakeLists.txt.
foreach(check chart compose flags rules metric-names dockerfile)
  add_test(NAME deploy_${check}
           COMMAND ${CMAKE_SOURCE_DIR}/scripts/check-deploy --build-dir ${CMAKE_BINARY_DIR} ${check}
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(deploy_${check} PROPERTIES LABELS lint TIMEOUT 300)
endforeach()
# helm is extracted into build/tools once; the checks that need it must not race on it.
set_tests_properties(deploy_chart deploy_flags PROPERTIES RESOURCE_LOCK wisp_helm)
