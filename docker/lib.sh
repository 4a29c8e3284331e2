# Shared by docker/build-offline.sh and docker/e2e.sh (sourced, not run): the tools, and a dockerd started
# only when none runs, stopped by its PID by whoever started it.
#
# dockerd changes the host: it sets net.ipv4.ip_forward=1, loads br_netfilter (bridged traffic then passes
# iptables' FORWARD chain), sets FORWARD's policy to DROP, which would cut every other bridge on the host (the
# chaos lab's network namespaces, chaos/netns.py), and leaves its iptables-nft tables and docker0 behind. So
# the FORWARD policy is put back right after dockerd starts, and when the dockerd started here stops, the
# sysctl values are restored and the nftables tables and docker0 it created are deleted.

DOCKERD_PID=""
DOCKERD_STATE=""

say() { echo "[docker] $*" >&2; }

need_root() {
    [[ "$(id -u)" == 0 ]] || { say "run as root (debootstrap, dockerd)"; exit 2; }
}

ensure_tools() {
    local pkgs=()
    command -v dockerd >/dev/null 2>&1 || pkgs+=(docker.io)
    command -v docker >/dev/null 2>&1 || pkgs+=(docker.io)
    command -v docker-compose >/dev/null 2>&1 || pkgs+=(docker-compose)
    command -v debootstrap >/dev/null 2>&1 || pkgs+=(debootstrap)
    if ((${#pkgs[@]})); then
        say "installing from Debian: ${pkgs[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" </dev/null
    fi
}

_sysctl_get() { cat "/proc/sys/${1//.//}" 2>/dev/null || echo "-"; }

forward_policy() { iptables -S FORWARD 2>/dev/null | awk '$1 == "-P" {print $3; exit}'; }

# Start dockerd when no daemon answers; sets DOCKERD_PID when this shell started it.
ensure_dockerd() {
    if docker info >/dev/null 2>&1; then
        return 0
    fi
    local run="${RMQ_LAB_DOCKERD_DIR:-/tmp/rmq-lab-dockerd}"
    mkdir -p "$run"
    DOCKERD_STATE="$run/host-state"
    local policy
    policy="$(forward_policy)"
    printf 'ip_forward=%s\nbridge_nf=%s\nforward_policy=%s\nbr_netfilter=%s\nnft_tables=%s\ndocker0=%s\n' \
        "$(_sysctl_get net.ipv4.ip_forward)" "$(_sysctl_get net.bridge.bridge-nf-call-iptables)" \
        "${policy:-ACCEPT}" "$(grep -q '^br_netfilter ' /proc/modules 2>/dev/null && echo loaded || echo absent)" \
        "$(nft list tables 2>/dev/null | sed 's/^table //' | tr ' \n' '_,')" \
        "$(ip link show docker0 >/dev/null 2>&1 && echo present || echo absent)" > "$DOCKERD_STATE"
    say "starting dockerd (log: $run/dockerd.log)"
    dockerd >"$run/dockerd.log" 2>&1 &
    DOCKERD_PID=$!
    echo "$DOCKERD_PID" > "$run/dockerd.pid"
    local i
    for i in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        kill -0 "$DOCKERD_PID" 2>/dev/null || { say "dockerd exited: $(tail -5 "$run/dockerd.log")"; exit 2; }
        sleep 0.5
    done
    docker info >/dev/null 2>&1 || { say "dockerd did not answer in 30 s"; stop_dockerd; exit 2; }
    iptables -P FORWARD "${policy:-ACCEPT}" 2>/dev/null || true
    say "dockerd $DOCKERD_PID up"
}

# Stop the dockerd this shell started (by PID), then restore what it changed on the host.
stop_dockerd() {
    [[ -n "$DOCKERD_PID" ]] || return 0
    say "stopping dockerd $DOCKERD_PID"
    kill -TERM "$DOCKERD_PID" 2>/dev/null || true
    local i
    for i in $(seq 1 60); do
        kill -0 "$DOCKERD_PID" 2>/dev/null || break
        sleep 0.5
    done
    kill -0 "$DOCKERD_PID" 2>/dev/null && kill -KILL "$DOCKERD_PID" 2>/dev/null
    DOCKERD_PID=""
    # containerd started by dockerd exits with it; the saved host state goes back.
    if [[ -f "$DOCKERD_STATE" ]]; then
        local ip_forward bridge_nf forward_pol br
        ip_forward="$(sed -n 's/^ip_forward=//p' "$DOCKERD_STATE")"
        bridge_nf="$(sed -n 's/^bridge_nf=//p' "$DOCKERD_STATE")"
        forward_pol="$(sed -n 's/^forward_policy=//p' "$DOCKERD_STATE")"
        br="$(sed -n 's/^br_netfilter=//p' "$DOCKERD_STATE")"
        [[ "$ip_forward" != "-" ]] && sysctl -qw "net.ipv4.ip_forward=$ip_forward" || true
        if [[ "$br" == absent ]]; then
            modprobe -r br_netfilter 2>/dev/null || true
        elif [[ "$bridge_nf" != "-" ]]; then
            sysctl -qw "net.bridge.bridge-nf-call-iptables=$bridge_nf" || true
        fi
        iptables -P FORWARD "${forward_pol:-ACCEPT}" 2>/dev/null || true
        local before t
        before="$(sed -n 's/^nft_tables=//p' "$DOCKERD_STATE")"
        for t in ip_filter ip_nat ip6_filter ip6_nat; do
            if [[ ",$before" != *",$t,"* ]] && nft list table "${t/_/ }" >/dev/null 2>&1; then
                nft delete table "${t/_/ }" || true
            fi
        done
        if [[ "$(sed -n 's/^docker0=//p' "$DOCKERD_STATE")" == absent ]]; then
            ip link delete docker0 2>/dev/null || true
        fi
        rm -f "$DOCKERD_STATE"
    fi
}
