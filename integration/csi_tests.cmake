# CSI end-to-end tests (issue 5): the real wisp-gateway's CSI socket driven with gRPC from C++.
# Included from integration/CMakeLists.txt. Needs root (real tmpfs and bind mounts).
if(TARGET wisp::gateway_csi AND TARGET wisp::integration_stack)
  wisp_add_test(csi_integration_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/csi_test.cpp
    DEPS wisp::integration_stack wisp::integration_nats wisp::proto_csi wisp::proto_events gRPC::grpc++
         wisp::populator_testing nlohmann_json::nlohmann_json
    LABELS integration)
  target_include_directories(csi_integration_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  add_dependencies(csi_integration_test wisp-gateway wisp-token wisp-policy wisp-populator wispctl)
endif()
