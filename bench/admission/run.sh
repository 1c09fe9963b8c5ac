#!/usr/bin/env bash
# bench/admission/run.sh BUILD_DIR [DURATION] [CONNECTIONS]
#
# AdmissionReview of a realistic ~4 KiB pod through HTTPS -> admission (wisp's gateway admission
# library on common/http) -> NATS -> wisp-policy, with wrk at 64 connections; and in the same run an
# nginx HTTPS endpoint answering a fixed 2 KiB JSON, this machine's ceiling. Prints one RESULT line
# per target (req/s, p50, p99) and the ratio. Needs nats-server, nginx, wrk, openssl, python3.
set -euo pipefail
BUILD=${1:?usage: run.sh BUILD_DIR [DURATION] [CONNECTIONS]}
DURATION=${2:-15s}
CONNS=${3:-64}
THREADS=${WRK_THREADS:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=$(cd "$BUILD/bin" && pwd)
WORK=$(mktemp -d /tmp/wisp-admission-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "port $1 never opened; logs:" >&2
  tail -n 5 "$WORK"/*.log "$WORK"/nginx/error.log "$WORK"/nginx.out >&2 2>/dev/null || true
  return 1
}

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$WORK/key.pem" -out "$WORK/cert.pem" \
  2>/dev/null
python3 "$HERE/make_body.py" > "$WORK/review.json"
python3 -c 'import json; print(json.dumps({"ok": True, "pad": "x" * 2030}))' > "$WORK/fixed.json"

NATS_PORT=$(free_port)
nats-server -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$WORK/js" > "$WORK/nats.log" 2>&1 &
PIDS+=($!)
wait_port "$NATS_PORT"
"$BIN/wisp-policy" --nats-url "nats://127.0.0.1:$NATS_PORT" --metrics-address 127.0.0.1:0 \
  --policy-file "$ROOT/deploy/local/policy.yaml" --serve-threads 4 --log-level warn \
  > "$WORK/policy.log" 2>&1 &
PIDS+=($!)
ADM_PORT=$(free_port)
"$BIN/admission_bench_server" --nats-url "nats://127.0.0.1:$NATS_PORT" --port "$ADM_PORT" \
  --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" --http-threads "${HTTP_THREADS:-8}" \
  --log-level warn > "$WORK/admission.log" 2>&1 &
PIDS+=($!)
wait_port "$ADM_PORT"

NGINX_PORT=$(free_port)
mkdir -p "$WORK/nginx"
cat > "$WORK/nginx.conf" <<CONF
daemon off;
worker_processes auto;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx;
  proxy_temp_path $WORK/nginx;
  fastcgi_temp_path $WORK/nginx;
  uwsgi_temp_path $WORK/nginx;
  scgi_temp_path $WORK/nginx;
  client_max_body_size 4m;
  server {
    listen 127.0.0.1:$NGINX_PORT ssl;
    ssl_certificate $WORK/cert.pem;
    ssl_certificate_key $WORK/key.pem;
    location / {
      default_type application/json;
      return 200 '$(cat "$WORK/fixed.json")';
    }
  }
}
CONF
nginx -c "$WORK/nginx.conf" -p "$WORK/nginx" > "$WORK/nginx.out" 2>&1 &
PIDS+=($!)
wait_port "$NGINX_PORT"

# Sanity: the admission answer is a real mutation.
curl -sk -H 'Content-Type: application/json' --data-binary @"$WORK/review.json" \
  "https://127.0.0.1:$ADM_PORT/mutate?timeout=10s" | python3 -c \
  'import json,sys; r=json.load(sys.stdin)["response"]; assert r["allowed"] and r["patchType"]=="JSONPatch", r; print("check: allowed with a", len(r["patch"]), "byte base64 patch")'

export BODY_FILE="$WORK/review.json"
echo "== wisp admission (HTTPS -> admission -> NATS -> wisp-policy), $CONNS connections, $DURATION"
ADM=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$HERE/post.lua" \
  "https://127.0.0.1:$ADM_PORT/mutate?timeout=10s" | tee "$WORK/wrk-admission.txt" | grep RESULT)
echo "$ADM"
echo "== nginx HTTPS fixed 2 KiB JSON (ceiling), $CONNS connections, $DURATION"
NGX=$(wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$HERE/post.lua" \
  "https://127.0.0.1:$NGINX_PORT/" | tee "$WORK/wrk-nginx.txt" | grep RESULT)
echo "$NGX"
python3 - "$ADM" "$NGX" <<'PY'
import sys
def rps(line):
    return float(dict(kv.split("=") for kv in line.split()[1:])["rps"])
a, n = rps(sys.argv[1]), rps(sys.argv[2])
print("ratio: wisp admission peak = %.1f%% of the nginx ceiling (goal >= 20%%)" % (100 * a / n))
PY
