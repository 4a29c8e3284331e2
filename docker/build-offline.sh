#!/usr/bin/env bash
# Build the project's image without a container registry: a minimal Debian (debootstrap minbase, python3 and
# its venv module, ca-certificates) from the Debian mirror apt uses on this host, with the host's extra CA
# certificates (/usr/local/share/ca-certificates) so pip inside the build trusts the proxy the host trusts,
# imported as a local base image; then docker/Dockerfile on top of it (BASE_IMAGE=that image).
#
#   sudo docker/build-offline.sh [--rebuild-base] [--tag rmq-lab:latest]
#
# Installs docker.io, docker-compose and debootstrap from Debian when missing; starts dockerd when none runs
# and stops it (by PID) at the end, unless RMQ_LAB_KEEP_DOCKERD=1. The base image is reused when it exists.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=docker/lib.sh
source "$ROOT/docker/lib.sh"

TAG="${RMQ_LAB_IMAGE:-rmq-lab:latest}"
REBUILD_BASE=0
while (($#)); do
    case "$1" in
        --rebuild-base) REBUILD_BASE=1 ;;
        --tag) TAG="$2"; shift ;;
        *) say "usage: $0 [--rebuild-base] [--tag IMAGE]"; exit 2 ;;
    esac
    shift
done

need_root
ensure_tools
ROOTFS=""
cleanup() {
    [[ -n "$ROOTFS" ]] && rm -rf "$ROOTFS"
    [[ "${RMQ_LAB_KEEP_DOCKERD:-0}" == 1 ]] || stop_dockerd
}
trap cleanup EXIT
ensure_dockerd

. /etc/os-release
SUITE="${VERSION_CODENAME:-bookworm}"
BASE="${RMQ_LAB_BASE_IMAGE:-rmq-lab-base:$SUITE}"

# The mirror as apt is configured here: the first Debian URI of the deb822 sources, else of sources.list.
mirror() {
    local uri=""
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
        uri="$(awk '/^URIs:/ && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)"
    fi
    if [[ -z "$uri" && -f /etc/apt/sources.list ]]; then
        uri="$(awk '$1 == "deb" && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list)"
    fi
    echo "${uri:-http://deb.debian.org/debian}"
}

if [[ "$REBUILD_BASE" == 0 ]] && docker image inspect "$BASE" >/dev/null 2>&1; then
    say "base image $BASE exists (--rebuild-base to make it again)"
else
    MIRROR="$(mirror)"
    ROOTFS="$(mktemp -d "${TMPDIR:-/tmp}/rmq-lab-rootfs.XXXXXX")"
    t0=$SECONDS
    say "debootstrap --variant=minbase $SUITE from $MIRROR"
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        "$SUITE" "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 \
        || { say "debootstrap failed: $(tail -20 "$ROOTFS.log")"; exit 1; }
    rm -f "$ROOTFS.log"
    say "debootstrap took $((SECONDS - t0)) s"
    # apt inside the image reads the same mirror, with the host's Acquire:: settings (e.g. a snapshot
    # mirror's Check-Valid-Until) so `apt-get update` in the Dockerfile behaves as it does here.
    printf 'deb %s %s main\ndeb %s %s-updates main\n' "$MIRROR" "$SUITE" "$MIRROR" "$SUITE" \
        > "$ROOTFS/etc/apt/sources.list"
    for f in /etc/apt/apt.conf.d/*; do
        case "$(basename "$f")" in docker-*) continue ;; esac
        grep -q '^Acquire::' "$f" 2>/dev/null && cp "$f" "$ROOTFS/etc/apt/apt.conf.d/"
    done
    shopt -s nullglob
    certs=(/usr/local/share/ca-certificates/*.crt)
    if ((${#certs[@]})); then
        say "adding the host's extra CA certificates: ${certs[*]##*/}"
        cp "${certs[@]}" "$ROOTFS/usr/local/share/ca-certificates/"
        chroot "$ROOTFS" update-ca-certificates >/dev/null
    fi
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
    t0=$SECONDS
    tar -C "$ROOTFS" -c . | docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
    say "imported $BASE in $((SECONDS - t0)) s"
    rm -rf "$ROOTFS"
    ROOTFS=""
fi

t0=$SECONDS
say "docker build -t $TAG --build-arg BASE_IMAGE=$BASE"
# The classic builder: dockerd 20.10 from Debian has no BuildKit plugin here, and the Dockerfile needs none.
DOCKER_BUILDKIT=0 docker build -q -f "$ROOT/docker/Dockerfile" --build-arg "BASE_IMAGE=$BASE" -t "$TAG" "$ROOT" >/dev/null
say "built $TAG in $((SECONDS - t0)) s"
