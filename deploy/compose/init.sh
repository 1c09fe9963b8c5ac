#!/usr/bin/env bash
# One-shot init of the docker-compose stack (service `init`): creates, only when absent, the local
# CA and the gateway's serving certificate, the key-encryption key of wisp-token, the per-service
# NATS users (scripts/nats-auth: one user per service with the subject permissions it needs) and,
# for each service, a config file with its NATS credentials (passed as --config, so passwords never
# appear on a command line). A second `docker-compose up` reuses everything.
#
#   init.sh OUT_DIR [NATS_AUTH_SCRIPT]
# OUT_DIR gets pki/ (ca.pem, gateway.pem, gateway-key.pem), secrets/ (key-encryption-key,
# nats-<user>.password, <user>.yaml) and nats/users.conf (included by deploy/compose/nats.conf).
set -euo pipefail
out=${1:?usage: init.sh OUT_DIR [NATS_AUTH_SCRIPT]}
nats_auth=${2:-/opt/wisp/nats-auth}
uid=${WISP_UID:-10001}
pki=$out/pki secrets=$out/secrets natsdir=$out/nats
mkdir -p "$pki" "$secrets" "$natsdir"

if [[ ! -s $pki/ca.pem || ! -s $pki/gateway.pem ]]; then
  echo "init: creating the local CA and the gateway's serving certificate"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
    -subj "/CN=wisp compose CA" -keyout "$pki/ca-key.pem" -out "$pki/ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=wisp-gateway" \
    -keyout "$pki/gateway-key.pem" -out "$pki/gateway.csr" 2>/dev/null
  printf 'subjectAltName=DNS:wisp-gateway,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' \
    >"$pki/ext.cnf"
  openssl x509 -req -in "$pki/gateway.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca-key.pem" \
    -CAcreateserial -days 825 -extfile "$pki/ext.cnf" -out "$pki/gateway.pem" 2>/dev/null
  rm -f "$pki/gateway.csr" "$pki/ext.cnf"
fi

kek=$secrets/key-encryption-key
if [[ ! -s $kek ]]; then
  echo "init: creating the key-encryption key"
  (umask 077; head -c 32 /dev/urandom >"$kek")
fi

# The users file is regenerated each start (permissions may change with an upgrade); passwords
# are kept in secrets/nats-<user>.password.
"$nats_auth" "$secrets" >"$natsdir/users.conf.tmp"
mv "$natsdir/users.conf.tmp" "$natsdir/users.conf"

for user in wisp-gateway wisp-policy wisp-token wisp-populator wispctl; do
  f=$secrets/$user.yaml
  (umask 077
   printf 'nats-user: %s\nnats-password: "%s"\n' "$user" "$(cat "$secrets/nats-$user.password")" >"$f.tmp")
  mv "$f.tmp" "$f"
done

# The services run as uid $uid; the CA key stays root-only.
chown -R "$uid:$uid" "$secrets" "$pki/gateway-key.pem" 2>/dev/null || true
chmod 600 "$pki/ca-key.pem"
chmod 644 "$pki/ca.pem" "$pki/gateway.pem" "$natsdir/users.conf"
echo "init: done"
