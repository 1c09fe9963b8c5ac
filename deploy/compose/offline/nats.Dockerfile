# Stand-in for nats:2.10.24-alpine (deploy/compose/offline.yml): Debian's nats-server, with wget
# for the compose health check. Same interface: ENTRYPOINT nats-server, flags as the command.
FROM debian:12
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nats-server wget \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*
EXPOSE 4222 8222
ENTRYPOINT ["nats-server"]
