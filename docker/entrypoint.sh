#!/bin/sh
# The image's roles. Each execs its process (under compose's init: true, docker-init is pid 1 and forwards
# SIGTERM to it), so `docker stop` is the broker's graceful shutdown and `docker kill -s KILL` is a crash.
set -eu
role="${1:-help}"
[ "$#" -gt 0 ] && shift
case "$role" in
    namesrv)
        exec python -m reference_broker namesrv --kv-config-path /data/store/namesrv/kvConfig.json "$@" ;;
    broker)
        # RMQ_BROKER_CONF: broker.conf lines separated by ';' (compose sets them per broker), written to
        # /data/conf/broker.conf; without it that file is used as it is (a bind mount: harness/containers.py).
        conf=/data/conf/broker.conf
        if [ -n "${RMQ_BROKER_CONF:-}" ]; then
            printf '%s' "$RMQ_BROKER_CONF" | tr ';' '\n' | sed -e 's/^[[:space:]]*//' -e '/^$/d' > "$conf"
        fi
        [ -f "$conf" ] || { echo "no $conf and no RMQ_BROKER_CONF" >&2; exit 2; }
        exec python -m reference_broker broker -c "$conf" "$@" ;;
    health)
        # A remoting request to the process itself (not a port probe): a broker's runtime info, or a name
        # server's cluster table. health broker ADDR | health namesrv ADDR
        kind="${1:?health broker|namesrv ADDR}"; addr="${2:?health $kind ADDR}"
        case "$kind" in
            broker) exec python -m reference_broker admin brokerStatus -b "$addr" --json >/dev/null ;;
            namesrv) exec python -m reference_broker admin clusterList -n "$addr" --json >/dev/null ;;
            *) echo "health: broker or namesrv, not $kind" >&2; exit 2 ;;
        esac ;;
    locust-master|locust-worker)
        scenario="${RMQ_LAB_SCENARIO:-backlog}"
        file="/opt/rmq-lab/scenarios/${scenario}.py"
        [ -f "$file" ] || { echo "no scenario $scenario ($file)" >&2; exit 2; }
        if [ "$role" = locust-master ]; then
            exec locust -f "$file" --master "$@"
        fi
        exec locust -f "$file" --worker "$@" ;;
    reports)
        exec python -m spark_reports all --runs /data/runs --out /data/reports "$@" ;;
    chaos|harness|spark_reports|reference_broker)
        exec python -m "$role" "$@" ;;
    help)
        echo "roles: namesrv | broker | health broker|namesrv ADDR | locust-master | locust-worker | reports |"
        echo "       chaos ARGS | harness ARGS | reference_broker ARGS | any command"
        exit 0 ;;
    *)
        exec "$role" "$@" ;;
esac
