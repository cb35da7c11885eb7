#!/bin/bash
# The cost of OpenTelemetry in the `quartz` command (BENCHMARKS.md): one
# `quartz run` node on default settings, JOBS jobs every second (noop
# handler) on PostgreSQL, run SECS seconds at a time without and with
# OTEL_EXPORTER_OTLP_ENDPOINT set (a sink on 127.0.0.1:14318 that accepts and
# drops every export), alternately, twice each. Fires are counted from the
# ledger (succeeded, by the ledger's rows), CPU from /proc.
#
#   cargo build --release -p quartz-cli
#   quartz-bench/scripts/otel-cost.sh 1000 60
set -e
Q=${QUARTZ:-target/release/quartz}
URL=${QUARTZ_PG_URL:-postgres://postgres@127.0.0.1:5432/test}
S=otel-cost
JOBS=${1:-1000}
SECS=${2:-60}
count() { psql -tA "$URL" -c "SELECT COUNT(*) FROM quartz_fire WHERE scheduler = '$S' AND state = 'succeeded'"; }
$Q --database-url "$URL" migrate >/dev/null
if [ "$(psql -tA "$URL" -c "SELECT COUNT(*) FROM quartz_job WHERE scheduler = '$S'")" != "$JOBS" ]; then
  for i in $(seq 1 "$JOBS"); do
    $Q --database-url "$URL" --scheduler $S job add "j$i" --handler noop --every 1s >/dev/null 2>&1
  done
fi
python3 - <<'PY' &
import http.server
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get('content-length', 0)))
        self.send_response(200); self.send_header('content-type', 'application/json'); self.end_headers()
        self.wfile.write(b'{}')
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(('127.0.0.1', 14318), Sink).serve_forever()
PY
SINK=$!
trap 'kill $SINK' EXIT
# A first run catches the triggers up after the jobs were added.
for mode in warm-up plain otel plain otel; do
  if [ $mode = otel ]; then
    export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:14318 OTEL_METRIC_EXPORT_INTERVAL=10000
  else
    unset OTEL_EXPORTER_OTLP_ENDPOINT OTEL_METRIC_EXPORT_INTERVAL
  fi
  RUST_LOG=warn $Q --database-url "$URL" --scheduler $S run >/dev/null 2>&1 &
  P=$!
  sleep 10
  c0=$(count); t0=$(awk '{print $14 + $15}' /proc/$P/stat)
  sleep "$SECS"
  t1=$(awk '{print $14 + $15}' /proc/$P/stat); c1=$(count)
  kill -TERM $P; wait $P || true
  fires=$((c1 - c0)); ticks=$((t1 - t0))
  [ $mode = warm-up ] && continue
  echo "$mode: $fires fires in ${SECS} s, node CPU $(echo "scale=2; $ticks / 100" | bc) s, $(echo "scale=3; $ticks * 10 / $fires" | bc) CPU-s per 1,000 fires"
done
