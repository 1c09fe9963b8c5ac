#!/usr/bin/env bash
# bench/admission/run.sh BUILD_DIR [DURATION] [CONNECTIONS]
#
# AdmissionReview of a realistic ~4 KiB pod through HTTPS -> admission (wisp's gateway admission
# library on common/http) -> NATS -> wisp-policy, in one run:
#   1. steady: wrk paced to RATE req/s (default 1000) over PACED_CONNS connections (default 16);
#   2. peak: wrk at CONNECTIONS (default 64) as fast as it goes;
#   3. ceiling: the same POST to an nginx HTTPS endpoint answering a fixed 2 KiB JSON.
# Prints one RESULT line per phase (req/s, p50, p99), the CPU each process used per 1,000 requests
# (utime+stime from /proc, so it stays meaningful on a busy machine), and the peak/ceiling ratio.
# With FLOORS=1, two more phases between peak and ceiling say what no change to one part can go
# below: "floor-bus", the same path with wisp-policy replaced by admission_null_policy (one verdict
# computed at start), and "floor-https", the same HTTPS server answering the real answer at once
# (admission_bench_server --fixed-response: no parsing, no bus).
# Environment: RATE, PACED_CONNS, WRK_THREADS (2), HTTP_THREADS (admission server, 2),
# SERVE_THREADS (wisp-policy, 2), POLICY_FLAGS (more flags for wisp-policy and its stand-in, e.g.
# "--serve-loops 0" to measure the shared connection), ADMISSION_FLAGS (more flags for the
# admission server, e.g. --no-admission-bus-per-thread), NATS_GOGC (nats-server's GOGC, 400 as
# deployed), NATS_GOMAXPROCS (1, as docker-compose and scripts/local-up run it on a machine shared
# with the stack).
# Needs nats-server, nginx, wrk (LuaJIT), openssl, python3.
set -euo pipefail
BUILD=${1:?usage: run.sh BUILD_DIR [DURATION] [CONNECTIONS]}
DURATION=${2:-15s}
CONNS=${3:-64}
THREADS=${WRK_THREADS:-2}
RATE=${RATE:-1000}
PACED_CONNS=${PACED_CONNS:-16}
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
# CPU ticks (utime + stime, all threads) of the processes given as comma-separated pids.
cpu_ticks() {
  local total=0 p
  for p in ${1//,/ }; do
    # Past the "(comm) " field, utime and stime are the 12th and 13th.
    total=$((total + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
  done
  echo "$total"
}
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
# nats-server runs with the Go runtime settings the chart, docker-compose and scripts/local-up give
# it (nats.goRuntime); NATS_GOGC and NATS_GOMAXPROCS override them for comparisons (Go's defaults
# are 100 and every CPU).
GOGC=${NATS_GOGC:-400} GOMEMLIMIT=900MiB GOMAXPROCS=${NATS_GOMAXPROCS:-1} nats-server -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$WORK/js" > "$WORK/nats.log" 2>&1 &
PIDS+=($!)
wait_port "$NATS_PORT"
"$BIN/wisp-policy" --nats-url "nats://127.0.0.1:$NATS_PORT" --metrics-address 127.0.0.1:0 \
  --policy-file "$ROOT/deploy/local/policy.yaml" --serve-threads "${SERVE_THREADS:-2}" \
  ${POLICY_FLAGS:-} --log-level warn > "$WORK/policy.log" 2>&1 &
PIDS+=($!)
NATS_PID=${PIDS[0]}
POLICY_PID=$!
ADM_PORT=$(free_port)
"$BIN/admission_bench_server" --nats-url "nats://127.0.0.1:$NATS_PORT" --port "$ADM_PORT" \
  --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" --http-threads "${HTTP_THREADS:-2}" ${ADMISSION_FLAGS:-} \
  --log-level warn > "$WORK/admission.log" 2>&1 &
PIDS+=($!)
ADM_PID=$!
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
NGINX_PID=$!
wait_port "$NGINX_PORT"
# nginx's master forks the workers; they do the serving.
NGINX_PIDS=$(echo "$NGINX_PID" $(cat /proc/"$NGINX_PID"/task/*/children) | tr ' ' ',')

# Sanity: the admission answer is a real mutation.
curl -sk -H 'Content-Type: application/json' --data-binary @"$WORK/review.json" \
  "https://127.0.0.1:$ADM_PORT/mutate?timeout=10s" > "$WORK/answer.json"
python3 -c 'import json,sys; r=json.load(sys.stdin)["response"]; assert r["allowed"] and r["patchType"]=="JSONPatch", r; print("check: allowed with a", len(r["patch"]), "byte base64 patch")' \
  < "$WORK/answer.json"

export BODY_FILE="$WORK/review.json" WRK_THREADS="$THREADS" RATE
TCK=$(getconf CLK_TCK)
# run_wrk NAME LABEL=PIDS... -- WRK_ARGS...: runs wrk, prints its RESULT line, then the CPU seconds
# each watched process used per 1,000 requests of that run; keeps the RESULT line in NAME_line.
run_wrk() {
  local name=$1 w line requests ticks total=0 i=0 cpu="CPU per 1k requests:"
  shift
  local watch=() before=()
  while [[ $1 != -- ]]; do watch+=("$1"); shift; done
  shift
  for w in "${watch[@]}"; do before+=("$(cpu_ticks "${w#*=}")"); done
  line=$(wrk "$@" | tee "$WORK/wrk-$name.txt" | grep RESULT)
  requests=${line#*requests=}
  requests=${requests%% *}
  for w in "${watch[@]}"; do
    ticks=$(($(cpu_ticks "${w#*=}") - before[i]))
    total=$((total + ticks))
    cpu+=$(awk -v t="$ticks" -v hz="$TCK" -v n="$requests" -v l="${w%%=*}" \
      'BEGIN { printf " %s=%.3fs", l, t / hz * 1000 / (n > 0 ? n : 1) }')
    i=$((i + 1))
  done
  ((${#watch[@]} > 1)) && cpu+=$(awk -v t="$total" -v hz="$TCK" -v n="$requests" \
    'BEGIN { printf " total=%.3fs", t / hz * 1000 / (n > 0 ? n : 1) }')
  echo "$line"
  echo "$cpu"
  printf -v "${name}_line" '%s' "$line"
}
WISP_PROCS=("admission=$ADM_PID" "policy=$POLICY_PID" "nats=$NATS_PID")
URL="https://127.0.0.1:$ADM_PORT/mutate?timeout=10s"

echo "== steady: wisp admission paced to $RATE req/s, $PACED_CONNS connections, $DURATION"
run_wrk steady "${WISP_PROCS[@]}" -- -t"$THREADS" -c"$PACED_CONNS" -d"$DURATION" --latency \
  -s "$HERE/paced.lua" "$URL"
echo "== peak: wisp admission (HTTPS -> admission -> NATS -> wisp-policy), $CONNS connections, $DURATION"
run_wrk peak "${WISP_PROCS[@]}" -- -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency \
  -s "$HERE/post.lua" "$URL"
if [[ ${FLOORS:-0} == 1 ]]; then
  kill "$POLICY_PID"
  wait "$POLICY_PID" 2>/dev/null || true
  "$BIN/admission_null_policy" --nats-url "nats://127.0.0.1:$NATS_PORT" \
    --metrics-address 127.0.0.1:0 --review "$WORK/review.json" \
    --policy-file "$ROOT/deploy/local/policy.yaml" --serve-threads "${SERVE_THREADS:-2}" \
    ${POLICY_FLAGS:-} --log-level warn > "$WORK/null-policy.log" 2>&1 &
  PIDS+=($!)
  NULL_PID=$!
  # Ready when the stand-in gives the answer wisp-policy gave.
  for _ in $(seq 1 100); do
    curl -sk -H 'Content-Type: application/json' --data-binary @"$WORK/review.json" \
      "https://127.0.0.1:$ADM_PORT/mutate?timeout=1s" > "$WORK/null-answer.json" || true
    cmp -s "$WORK/null-answer.json" "$WORK/answer.json" && break
    sleep 0.1
  done
  if ! cmp -s "$WORK/null-answer.json" "$WORK/answer.json"; then
    echo "admission_null_policy never gave wisp-policy's answer; log:" >&2
    tail -n 5 "$WORK/null-policy.log" >&2
    exit 1
  fi
  echo "== floor-bus: the same path, wisp-policy replaced by one precomputed verdict, $CONNS connections, $DURATION"
  run_wrk floor_bus "admission=$ADM_PID" "null-policy=$NULL_PID" "nats=$NATS_PID" -- \
    -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$HERE/post.lua" "$URL"
  FIXED_PORT=$(free_port)
  "$BIN/admission_bench_server" --nats-url "nats://127.0.0.1:$NATS_PORT" --port "$FIXED_PORT" \
    --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" --http-threads "${HTTP_THREADS:-2}" \
    --fixed-response "$WORK/answer.json" --log-level warn > "$WORK/fixed.log" 2>&1 &
  PIDS+=($!)
  FIXED_PID=$!
  wait_port "$FIXED_PORT"
  echo "== floor-https: the same HTTPS server answering the real answer at once, $CONNS connections, $DURATION"
  run_wrk floor_https "admission=$FIXED_PID" -- -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency \
    -s "$HERE/post.lua" "https://127.0.0.1:$FIXED_PORT/mutate"
fi
echo "== ceiling: nginx HTTPS fixed 2 KiB JSON, $CONNS connections, $DURATION"
run_wrk ceiling "nginx=$NGINX_PIDS" -- -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency \
  -s "$HERE/post.lua" "https://127.0.0.1:$NGINX_PORT/"
python3 - "$steady_line" "$peak_line" "$ceiling_line" "$RATE" "${floor_bus_line:-}" \
  "${floor_https_line:-}" <<'PY'
import sys
def field(line, key):
    return float(dict(kv.split("=") for kv in line.split()[1:])[key])
steady, peak, ceiling, rate = sys.argv[1:4] + [float(sys.argv[4])]
for name, line in (("floor-bus", sys.argv[5]), ("floor-https", sys.argv[6])):
    if line:
        print("%s: %.0f req/s = %.1f%% of the nginx ceiling" % (
            name, field(line, "rps"), 100 * field(line, "rps") / field(ceiling, "rps")))
print("steady: %.0f req/s achieved of %.0f, p50 %.2f ms, p99 %.2f ms (goal p99 <= 5 ms)"
      % (field(steady, "rps"), rate, field(steady, "p50_ms"), field(steady, "p99_ms")))
print("ratio: wisp admission peak %.0f req/s = %.1f%% of the nginx ceiling %.0f req/s (goal >= 20%%)"
      % (field(peak, "rps"), 100 * field(peak, "rps") / field(ceiling, "rps"), field(ceiling, "rps")))
PY
