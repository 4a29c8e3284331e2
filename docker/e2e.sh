#!/usr/bin/env bash
# tox -e docker: the image built offline, the compose topology up (name server, two SYNC_MASTER groups with a
# slave each), a short backlog scenario through it by a locust master and two workers while broker-a's master
# container is killed (docker kill -s KILL) and started again, the run's checker (no acknowledged message
# lost), a graceful `docker stop` of the cluster (every exit code 0), the chaos matrix on containers (kill9,
# pause, partition, restart; its gate), the Spark reports (the compose one-shot job) over the scenario's and
# the chaos cells' runs, and everything torn down: containers, networks, volumes, images (RMQ_LAB_KEEP_IMAGES=1
# keeps the images), and a dockerd this script started. Output in docker/e2e-out (RMQ_LAB_E2E_OUT).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=docker/lib.sh
source "$ROOT/docker/lib.sh"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
PROJECT="rmqlab-e2e"
COMPOSE=(docker-compose -p "$PROJECT" -f "$ROOT/docker/compose.yaml")
IMAGE="${RMQ_LAB_IMAGE:-rmq-lab:latest}"
export RMQ_LAB_IMAGE="$IMAGE"
OUT="${RMQ_LAB_E2E_OUT:-$ROOT/docker/e2e-out}"
export RMQ_LAB_REPORTS="$OUT/reports"
CYCLES="${RMQ_LAB_E2E_CYCLES:-2}"

need_root
ensure_tools
teardown() {
    local rc=$?
    say "tearing down"
    "${COMPOSE[@]}" --profile reports down -v --remove-orphans -t 30 >/dev/null 2>&1 || true
    if [[ "${RMQ_LAB_KEEP_IMAGES:-0}" != 1 ]]; then
        docker image rm -f "$IMAGE" >/dev/null 2>&1 || true
        docker image rm -f "${RMQ_LAB_BASE_IMAGE:-rmq-lab-base:bookworm}" >/dev/null 2>&1 || true
        docker image prune -f >/dev/null 2>&1 || true
    fi
    stop_dockerd
    say "done (exit $rc) in $SECONDS s"
}
trap teardown EXIT
ensure_dockerd
rm -rf "$OUT"
mkdir -p "$OUT/reports" "$OUT/runs"

say "1/5 build the image offline (at ${SECONDS} s)"
RMQ_LAB_KEEP_DOCKERD=1 RMQ_LAB_IMAGE="$IMAGE" "$ROOT/docker/build-offline.sh"

say "2/5 compose up: name server, broker-a (+slave), broker-b (+slave); health = a remoting request (at ${SECONDS} s)"
"${COMPOSE[@]}" up -d namesrv broker-a broker-a-s broker-b broker-b-s
for svc in namesrv broker-a broker-a-s broker-b broker-b-s; do
    cid="$("${COMPOSE[@]}" ps -q "$svc")"
    for _ in $(seq 1 60); do
        [[ "$(docker inspect -f '{{.State.Health.Status}}' "$cid")" == healthy ]] && break
        sleep 1
    done
    [[ "$(docker inspect -f '{{.State.Health.Status}}' "$cid")" == healthy ]] \
        || { say "$svc is not healthy"; docker logs --tail 30 "$cid"; exit 1; }
done
"$PY" -m reference_broker admin clusterList -n 127.0.0.1:9876

say "3/5 the backlog scenario (locust master + 2 workers), broker-a's master killed -9 and started again (at ${SECONDS} s)"
"${COMPOSE[@]}" up --no-color --exit-code-from locust-master locust-master locust-worker-1 locust-worker-2 \
    > "$OUT/locust.log" 2>&1 &
locust_pid=$!
sleep "${RMQ_LAB_E2E_KILL_AFTER:-15}"
master_a="$("${COMPOSE[@]}" ps -q broker-a)"
say "docker kill -s KILL broker-a ($master_a)"
docker kill -s KILL "$master_a" >/dev/null
sleep 3
"${COMPOSE[@]}" start broker-a
set +e
wait "$locust_pid"
locust_rc=$?
set -e
tail -25 "$OUT/locust.log"
# The run record (the runs volume) out to the host: summary.json carries the checker's verdict.
docker run --rm -v "${PROJECT}_runs:/data/runs:ro" -v "$OUT/runs:/out" --user 0 --entrypoint sh "$IMAGE" \
    -c 'cp -r /data/runs/. /out/'
summary="$(ls -d "$OUT"/runs/*/summary.json | head -1)"
"$PY" - "$summary" "$locust_rc" <<'PYEOF'
import json, sys
summary, rc = json.load(open(sys.argv[1])), int(sys.argv[2])
check = summary.get("check") or {}
print(f"[docker] run check: acknowledged {check.get('acknowledged')}, lost {check.get('lost')}, "
      f"valid {check.get('valid')}, locust exit {rc}", file=sys.stderr)
if not check.get("acknowledged") or check.get("lost") != 0 or not check.get("valid") or rc != 0:
    sys.exit("[docker] FAILED: acknowledged messages lost (or no valid check) after the master's kill -9")
PYEOF

# The graceful shutdown: `docker stop` (SIGTERM through docker-init) ends every broker with exit 0 well
# inside the compose stop timeout (stop_grace_period 30 s; a broker still running then would be SIGKILLed: 137).
t0=$SECONDS
"${COMPOSE[@]}" stop -t 30 broker-a broker-a-s broker-b broker-b-s namesrv
for svc in broker-a broker-a-s broker-b broker-b-s namesrv; do
    code="$(docker inspect -f '{{.State.ExitCode}}' "$("${COMPOSE[@]}" ps -q "$svc")")"
    [[ "$code" == 0 ]] || { say "FAILED: $svc ended with exit code $code on docker stop"; exit 1; }
done
say "the brokers and the name server stopped gracefully (exit 0) in $((SECONDS - t0)) s"

say "4/5 the chaos matrix on containers: kill9, pause, partition, restart x $CYCLES cycles, gate (at ${SECONDS} s)"
"$PY" -m chaos matrix --topology docker --image "$IMAGE" --flush async --faults kill9,pause,partition,restart \
    --profiles none --cycles "$CYCLES" --runs-dir "$OUT/chaos-runs" --work-dir "${TMPDIR:-/tmp}" --gate
# Their run records are the process topology's: the same reports read them, beside the scenario's run.
docker run --rm -v "${PROJECT}_runs:/data/runs" -v "$OUT/chaos-runs:/in:ro" --user 0 --entrypoint sh "$IMAGE" \
    -c 'cp -r /in/. /data/runs/ && chown -R 10001:10001 /data/runs'

say "5/5 the reports (the one-shot job) over both into $RMQ_LAB_REPORTS (at ${SECONDS} s)"
chown "${RMQ_LAB_UID:-10001}:${RMQ_LAB_GID:-10001}" "$RMQ_LAB_REPORTS"
"${COMPOSE[@]}" run --rm reports
ls "$RMQ_LAB_REPORTS"
[[ -f "$RMQ_LAB_REPORTS/index.html" ]] || { say "FAILED: no reports/index.html"; exit 1; }
grep -q "chaos-kill9-async-none-docker" -r "$RMQ_LAB_REPORTS/loss" \
    || { say "FAILED: the loss report does not list the container chaos runs"; exit 1; }
