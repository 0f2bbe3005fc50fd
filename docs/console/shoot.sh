#!/usr/bin/env bash
# The screenshots of docs/console.md: a `skiff serve` of three workers over
# the test suite's partitioned TPC-H (SF 0.01; run the suite once first),
# a migrated query, a stream of queries held on their workers and a long
# one, a distributed query, a drained worker, and a pod run watched by a
# second server (--pod); each page shot by the distribution's headless
# Chromium through chromedriver's WebDriver API (curl).
# Usage: docs/console/shoot.sh [OUT_DIR]   (from the repository root)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${SKIFF_BIN:-$ROOT/target/debug/skiff}
OUT=$(cd "${1:-$ROOT/docs/console}" && pwd)
D=$(mktemp -d)
T=$(mktemp -d)
for t in "$ROOT"/target/skiff-testdata/tpch-sf0.01-p8/*; do ln -s "$t" "$D/"; done
$BIN serve --data "$D" --workers 3 --partitions 2 --pg-addr 127.0.0.1:15433 --flight-addr 127.0.0.1:15051 \
  --http-addr 127.0.0.1:18080 --fault-injection > "$T/serve.out" 2> "$T/serve.err" &
SERVE=$!
trap 'kill $SERVE 2>/dev/null; wait $SERVE 2>/dev/null' EXIT
for i in $(seq 1 120); do grep -q "console on" "$T/serve.out" && break; sleep 1; done
PSQL="psql -X -q -h 127.0.0.1 -p 15433 -U skiff -d skiff"
q() { echo "$ROOT/tests/queries/tpch/$1.sql"; }
# A migrated query, finished.
{ echo "SET skiff.distribute = off; SET skiff.migrate_after_pipelines = 2;"; cat "$(q q05)"; } > "$T/mig.sql"
$PSQL -f "$T/mig.sql" > /dev/null
# A stream: several queries held on their workers, one long one.
for n in q03 q07 q09 q18; do
  { echo "SET skiff.distribute = off; SET skiff.test_hold_after_pipelines = 2;"; cat "$(q $n)"; } > "$T/$n.sql"
  $PSQL -f "$T/$n.sql" > /dev/null 2>&1 < /dev/null &
done
$PSQL -c "SELECT count(*) FROM lineitem a, lineitem b WHERE a.l_partkey + b.l_partkey = 7" > /dev/null 2>&1 < /dev/null &
sleep 6
chromedriver --port=19515 > /dev/null 2>&1 &
DRIVER=$!
trap 'kill $SERVE $DRIVER 2>/dev/null; wait $SERVE 2>/dev/null' EXIT
sleep 2
SESSION=$(curl -s -X POST localhost:19515/session -H 'Content-Type: application/json' -d '{"capabilities":{"alwaysMatch":{"browserName":"chrome","goog:chromeOptions":{"binary":"/usr/bin/chromium","args":["--headless=new","--no-sandbox","--disable-gpu","--disable-dev-shm-usage","--disable-quic","--no-first-run","--disable-background-networking","--disable-component-update","--disable-sync","--hide-scrollbars","--window-size=1400,1000"]}}}}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["value"]["sessionId"])')
W=localhost:19515/session/$SESSION
shot() {
  curl -s -X POST $W/window/rect -H 'Content-Type: application/json' -d "{\"width\":1400,\"height\":${3:-1000}}" > /dev/null
  curl -s -X POST $W/url -H 'Content-Type: application/json' -d "{\"url\":\"http://127.0.0.1:18080/$2\"}" > /dev/null
  sleep 3
  curl -s $W/screenshot | python3 -c 'import json,sys,base64; sys.stdout.buffer.write(base64.b64decode(json.load(sys.stdin)["value"]))' > "$OUT/$1.png"
}
MIG=$($PSQL -At -c "SELECT id FROM skiff.queries WHERE migrations > 0 ORDER BY id LIMIT 1")
RUN=$($PSQL -At -c "SELECT id FROM skiff.queries WHERE state = 'running' AND worker IS NOT NULL ORDER BY id LIMIT 1")
shot queries "#/queries" 640
shot query-running "#/query/$RUN" 1400
shot query-migrated "#/query/$MIG" 1100
# A distributed query: its stages' tasks over the workers.
{ echo "SET skiff.distribute = on;"; cat "$(q q05)"; } > "$T/dist.sql"
$PSQL -f "$T/dist.sql" > /dev/null
DIST=$($PSQL -At -c "SELECT id FROM skiff.queries WHERE tasks IS NOT NULL ORDER BY id DESC LIMIT 1")
shot query-distributed "#/query/$DIST" 900
# A drain: the held queries on worker 1 migrate to the others.
$PSQL -At -c "SELECT skiff.drain('1')" > /dev/null
sleep 2
shot cluster "#/cluster" 760
$PSQL -At -c "SELECT skiff.cancel(id) FROM skiff.queries WHERE state = 'running' AND sql LIKE '%l_partkey + b.l_partkey%'" > /dev/null
echo "migrated $MIG running $RUN"
# The pod page: a two-host Pasha static pod under TPC-C's standard mix,
# watched by a server started with --pod.
kill $SERVE 2>/dev/null; wait $SERVE 2>/dev/null || true
POD=/dev/shm/skiff-console-shot-$$
$BIN serve --data "$D" --workers 1 --pg-addr 127.0.0.1:15433 --flight-addr 127.0.0.1:15051 \
  --http-addr 127.0.0.1:18080 --pod "$POD" > "$T/serve2.out" 2> "$T/serve2.err" &
SERVE=$!
for i in $(seq 1 120); do grep -q "console on" "$T/serve2.out" && break; sleep 1; done
$BIN pod run --shm "$POD" --hosts 2 --warehouses 4 --workers 1 --arch d --mix standard \
  --multi-warehouse-pct 60 --duration 25 > /dev/null 2>&1 &
PODRUN=$!
sleep 20
shot pod "#/pod" 900
wait $PODRUN || true
