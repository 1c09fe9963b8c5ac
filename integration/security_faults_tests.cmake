# Security and fault-injection integration tests (issue 8). Included from integration/CMakeLists.txt.

# Least privilege on the bus: scripts/nats-auth's users against a real nats-server.
wisp_add_test(security_bus_integration_test
  SOURCES security_bus_test.cpp
  DEPS wisp::bus wisp::integration_stack nlohmann_json::nlohmann_json
  LABELS integration)

# Optional TLS to NATS: a TLS-only nats-server verifying client certificates (test CA), the real
# wisp-token over it, and the clients it must refuse.
wisp_add_test(security_tls_integration_test
  SOURCES security_tls_test.cpp
  DEPS wisp::bus wisp::integration_stack wisp::proto_events
  LABELS integration)
if(TARGET security_tls_integration_test AND TARGET wisp-token)
  add_dependencies(security_tls_integration_test wisp-token)
endif()

# Faults: a 3-node cluster with an R3 bucket, one node SIGKILLed under steady load.
wisp_add_test(faults_cluster_integration_test
  SOURCES faults_cluster_test.cpp
  DEPS wisp::bus wisp::integration_harness
  LABELS integration)

# JetStream replicas as configuration (issue 24): --jetstream-replicas of the real binaries against
# one nats-server (1 serves, 3 refused in one line) and a 3-node cluster (R1 raised to R3 in place).
wisp_add_test(jetstream_replicas_integration_test
  SOURCES jetstream_replicas_test.cpp
  DEPS wisp::bus wisp::integration_stack nlohmann_json::nlohmann_json
  LABELS integration)
if(TARGET jetstream_replicas_integration_test AND TARGET wisp-populator)
  add_dependencies(jetstream_replicas_integration_test wisp-populator wisp-policy)
endif()

# Faults: two wisp-token replicas racing at start and at key rotation (about 80 s: the binary's
# smallest rotation period is 1m and it checks every 10 s).
wisp_add_test(faults_token_rotation_integration_test
  SOURCES faults_token_rotation_test.cpp
  DEPS wisp::bus wisp::integration_nats wisp::jwt wisp::proto_events
  LABELS integration)
if(TARGET faults_token_rotation_integration_test AND TARGET wisp-token)
  add_dependencies(faults_token_rotation_integration_test wisp-token)
endif()

# Faults with wisp itself (issue 24, item 2): a 3-node NATS cluster over TLS, two replicas of each
# service with --jetstream-replicas 3, load on every path (admission, issue, STS, CSI rotation, a
# 1 GiB import) through node and replica kills. Root (tmpfs mounts); about 2 minutes.
if(TARGET wisp::gateway_csi AND TARGET wisp::populator_testing)
  wisp_add_test(faults_wisp_integration_test
    SOURCES faults_wisp_test.cpp
    DEPS wisp::integration_stack wisp::bus wisp::jwt wisp::proto_events wisp::proto_csi
         wisp::populator_testing gRPC::grpc++ nlohmann_json::nlohmann_json
    LABELS integration)
  target_include_directories(faults_wisp_integration_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  add_dependencies(faults_wisp_integration_test wisp-gateway wisp-token wisp-policy
                   wisp-populator)
endif()
