# The guest test (issue 23, label "guest"): a Debian cloud kernel booted by qemu (TCG) reads, over
# virtiofs, the token that the real wisp-gateway's CSI node writes for the VMI of story 2, through
# several rotations. Needs root (tmpfs, bind mounts, setpriv), qemu-system-x86 and busybox-static
# (scripts/install-deps) and, once, `apt-get download` of the kernel (cached in build/guest-cache).
# About 40-60 s on 2 cores (boot 10-15 s under TCG); scripts/test runs it once, not under the
# sanitizers.
if(TARGET wisp::proto_csi AND TARGET wisp::integration_stack)
  add_subdirectory(${CMAKE_CURRENT_LIST_DIR}/guest)
  wisp_add_test(guest_integration_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/guest_test.cpp
    DEPS wisp::integration_guest wisp::integration_stack wisp::integration_nats wisp::jwt wisp::proto_csi
         wisp::proto_events gRPC::grpc++ nlohmann_json::nlohmann_json OpenSSL::Crypto
    LABELS guest)
  target_include_directories(guest_integration_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  add_dependencies(guest_integration_test wisp-gateway wisp-token wisp-policy)
endif()
