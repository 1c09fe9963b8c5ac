# Stand-in for prom/prometheus:v2.53.3 (deploy/compose/offline.yml): Debian's prometheus. Same
# interface: ENTRYPOINT prometheus, flags as the command, user nobody, data in /prometheus.
FROM debian:12
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/* \
 && install -d -o nobody -g nogroup /prometheus
USER nobody
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
