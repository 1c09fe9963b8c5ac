# syntax=docker/dockerfile:1
# One image with every wisp binary (wisp-gateway, wisp-policy, wisp-token, wisp-populator,
# wisp-sidecar, wispctl); each container picks its binary with its command. Both stages use the
# one install list, scripts/install-deps (README and CI use it too).
#
#   docker build -t wisp:local .
#   docker run --rm wisp:local wisp-token --help
#
# Runs as the unprivileged user wisp (uid/gid 10001). The one exception is the gateway in the
# CSI node role (Kubernetes DaemonSet): mounting into kubelet's pod directories with Bidirectional
# propagation needs a privileged, root container, which the Helm chart sets for that pod alone.

ARG DEBIAN_IMAGE=debian:12

# --- build: compilers, -dev packages, CMake + Ninja ------------------------------------------------
FROM ${DEBIAN_IMAGE} AS build
WORKDIR /src
# Installed first, alone, so the package layer is reused until the list changes.
COPY scripts/install-deps scripts/install-deps
RUN scripts/install-deps
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DWISP_BUILD_TESTS=OFF -DWISP_BUILD_BENCH=OFF -DWISP_BUILD_FUZZ=OFF \
 && ninja -C /build \
 && cmake --install /build --prefix /out \
 && strip --strip-unneeded /out/bin/*

# --- runtime: shared libraries only, no compiler, no headers, no package caches ---------------------
FROM ${DEBIAN_IMAGE} AS runtime
COPY scripts/install-deps /tmp/wisp/scripts/install-deps
RUN /tmp/wisp/scripts/install-deps --runtime \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /tmp/wisp \
 && groupadd --system --gid 10001 wisp \
 && useradd --system --uid 10001 --gid wisp --home-dir /var/lib/wisp --create-home \
      --shell /usr/sbin/nologin wisp \
 && install -d -o wisp -g wisp /var/lib/wisp/volumes /var/lib/wisp/csi
COPY --from=build /out/bin/ /usr/local/bin/
COPY deploy/docker/wisp-healthcheck /usr/local/bin/wisp-healthcheck
LABEL org.opencontainers.image.title="wisp" \
      org.opencontainers.image.description="Short-lived identity tokens and populated volumes for Kubernetes and KubeVirt" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 10001:10001
WORKDIR /var/lib/wisp
# /healthz on the metrics port of whichever wisp service the container runs (see the script).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 CMD ["wisp-healthcheck"]
# Ports by convention (docs/operations.md): 8443 gateway HTTPS; 9090-9093 metrics of gateway,
# policy, token, populator.
EXPOSE 8443 9090 9091 9092 9093
CMD ["wispctl", "--help"]
