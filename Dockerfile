# syntax=docker/dockerfile:1
# One image with every wisp binary (wisp-gateway, wisp-policy, wisp-token, wisp-populator,
# wisp-sidecar, wispctl); each container picks its binary with its command (or its first argument).
# Two ways to fill it, one runtime layout (stage `runtime-base`: the same libraries, user,
# entrypoint, healthcheck and ports):
#
#   docker build -t wisp:local .                     full build from source (the default target)
#   scripts/image --tag wisp:local                   binaries already built on this Debian 12 host
#                                                    (stage `host`; seconds instead of a build)
#   docker run --rm wisp:local wisp-token --help
#
# Both build with scripts/build's defaults: RelWithDebInfo (-O2 -g), warnings as errors, stripped on
# install. That is the build scripts/test compiles and tests, so a change that would break the
# image's compile breaks the tests first; the container test (integration/containers/, label
# `containers`) then builds the `host` stage and runs the compose stack on it.
#
# Runs as the unprivileged user wisp (uid/gid 10001). The one exception is the gateway in the
# CSI node role (Kubernetes DaemonSet): mounting into kubelet's pod directories with Bidirectional
# propagation needs a privileged, root container, which the Helm chart sets for that pod alone.

ARG DEBIAN_IMAGE=debian:12

# --- runtime-base: shared libraries only, no compiler, no headers, no package caches --------------
FROM ${DEBIAN_IMAGE} AS runtime-base
COPY scripts/install-deps /tmp/wisp/scripts/install-deps
RUN /tmp/wisp/scripts/install-deps --runtime \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /tmp/wisp \
 && groupadd --system --gid 10001 wisp \
 && useradd --system --uid 10001 --gid wisp --home-dir /var/lib/wisp --create-home \
      --shell /usr/sbin/nologin wisp \
 && install -d -o wisp -g wisp /var/lib/wisp/volumes /var/lib/wisp/csi
COPY deploy/docker/wisp-healthcheck deploy/docker/wisp-entrypoint /usr/local/bin/
LABEL org.opencontainers.image.title="wisp" \
      org.opencontainers.image.description="Short-lived identity tokens and populated volumes for Kubernetes and KubeVirt" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 10001:10001
WORKDIR /var/lib/wisp
# /healthz on the metrics port of whichever wisp service the container runs (see the script).
# Needs the docker image format (podman/buildah: --format docker); OCI images drop HEALTHCHECK.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 CMD ["wisp-healthcheck"]
# Ports by convention (docs/operations.md): 8443 gateway HTTPS; 9090-9093 metrics of gateway,
# policy, token, populator.
EXPOSE 8443 9090 9091 9092 9093
# A container spec with `args` and no `command` (Kubernetes keeps ENTRYPOINT and replaces CMD)
# still starts a wisp binary: the entrypoint runs its first argument when that is a program, and
# wisp-sidecar when the arguments are flags only (see deploy/docker/wisp-entrypoint).
ENTRYPOINT ["wisp-entrypoint"]
CMD ["wispctl", "--help"]

# --- host: binaries built on a Debian 12 host, staged by scripts/image into build/image/bin --------
# (listed before `build` so that `--target host` never compiles anything).
FROM runtime-base AS host
COPY build/image/bin/ /usr/local/bin/

# --- build: compilers, -dev packages, CMake + Ninja ------------------------------------------------
FROM ${DEBIAN_IMAGE} AS build
WORKDIR /src
# Installed first, alone, so the package layer is reused until the list changes.
COPY scripts/install-deps scripts/install-deps
RUN scripts/install-deps
COPY . .
RUN scripts/build --dir /build -- -DWISP_BUILD_TESTS=OFF -DWISP_BUILD_BENCH=OFF \
      -DWISP_BUILD_FUZZ=OFF \
 && cmake --install /build --prefix /out --strip

# --- runtime (default): the full build's binaries ----------------------------------------------------
FROM runtime-base AS runtime
COPY --from=build /out/bin/ /usr/local/bin/
