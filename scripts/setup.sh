#!/usr/bin/env bash
# Idempotent developer/CI setup: system tools (fio, fincore, nft, ip) and the .venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { echo "[setup] $*"; }

# ---------------------------------------------------------------- system tools
# fio (device baselines), fincore (page-cache residency, util-linux), a JDK (Spark; RocketMQ 4.9.8; javac for
# the Java client driver of tests/java), libstdc++6 (the C++ client's librocketmq.so, tests/interop).
missing=()
packages=()
command -v fio >/dev/null 2>&1 || { missing+=(fio); packages+=(fio); }
if ! command -v fincore >/dev/null 2>&1; then
    # Debian 12 moved fincore from util-linux (always installed) to util-linux-extra.
    missing+=(fincore)
    packages+=(FINCORE)  # resolved once the package lists are fresh
fi
# nft (nftables) and ip (iproute2): the lab network's partitions (chaos/netns.py, chaos/partition.py; root).
command -v nft >/dev/null 2>&1 || { missing+=(nft); packages+=(nftables); }
command -v ip >/dev/null 2>&1 || { missing+=(ip); packages+=(iproute2); }
command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 \
    || { missing+=(javac); packages+=(openjdk-17-jdk-headless); }
ldconfig -p 2>/dev/null | grep -q 'libstdc++\.so\.6 ' || { missing+=(libstdc++); packages+=(libstdc++6); }
# The interpreter the .venv is made from: $LAB_PYTHON when set; else the first Python >= 3.11 among
# /usr/bin/python3.11, python3.11 and python3 whose executable is not linked against a shared libpython, else
# the first Python >= 3.11 among them. A shared libpython (pyenv's default build) calls its own functions
# through the PLT and cannot inline across them (semantic interposition): the broker spent ~15 % more CPU per
# message on pyenv's 3.11.7 than on Debian's statically linked 3.11.2 (BENCHMARKS.md, issue 23, session 35).
py_ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1; }
py_static() {  # asks the interpreter for its executable: a pyenv shim is a script
    local exe
    exe="$("$1" -c 'import sys; print(sys.executable)' 2>/dev/null)" || return 1
    ldd "$exe" >/dev/null 2>&1 && ! ldd "$exe" 2>/dev/null | grep -q 'libpython'
}
PY=""
if [[ -n "${LAB_PYTHON:-}" ]]; then
    PY="$LAB_PYTHON"
else
    first_ok=""
    for cand in /usr/bin/python3.11 python3.11 python3; do
        command -v "$cand" >/dev/null 2>&1 && py_ok "$cand" || continue
        first_ok="${first_ok:-$cand}"
        py_static "$cand" && { PY="$cand"; break; }
    done
    PY="${PY:-${first_ok:-python3}}"
fi
# `python3 -m venv` needs ensurepip, which Debian ships separately (python3-venv / python3.11-venv).
"$PY" -c 'import ensurepip' >/dev/null 2>&1 || { missing+=(ensurepip); packages+=("$(basename "$PY")-venv"); }
if ((${#missing[@]})); then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        log "missing: ${missing[*]}; running: apt-get update -qq"
        apt-get update -qq
        for i in "${!packages[@]}"; do
            if [[ "${packages[$i]}" == FINCORE ]]; then
                packages[$i]=util-linux
                apt-cache show util-linux-extra >/dev/null 2>&1 && packages[$i]=util-linux-extra
            fi
        done
        log "running: apt-get install -y -qq ${packages[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" </dev/null
    else
        log "WARNING: ${missing[*]} missing and cannot install (not root or no apt-get);"
        log "         the fio baselines are skipped, fincore's page-cache figures are absent, the Spark reports"
        log "         need a Java runtime, and the venv needs ensurepip."
    fi
fi
# Peer brokers for `--driver nats|rabbitmq` and `python -m harness compare` (harness/peers.py): Debian's
# nats-server and rabbitmq-server, when root and apt has them. Their Debian services are never started
# (policy-rc.d refuses while installing; there is no systemd here): the harness starts private instances.
peer_pkgs=()
command -v nats-server >/dev/null 2>&1 || peer_pkgs+=(nats-server)
command -v rabbitmq-server >/dev/null 2>&1 || peer_pkgs+=(rabbitmq-server)
if ((${#peer_pkgs[@]})) && [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    ((${#missing[@]})) || apt-get update -qq
    available=()
    for p in "${peer_pkgs[@]}"; do
        apt-cache show "$p" >/dev/null 2>&1 && available+=("$p")
    done
    if ((${#available[@]})); then
        log "running: apt-get install -y -qq --no-install-recommends ${available[*]} (services not started)"
        made_policy=0
        if [[ ! -e /usr/sbin/policy-rc.d ]]; then
            printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made_policy=1
        fi
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${available[@]}" </dev/null \
            || log "WARNING: apt-get install ${available[*]} failed; their drivers skip"
        if ((made_policy)); then rm -f /usr/sbin/policy-rc.d; fi
    fi
fi
for tool in fio fincore java javac nft ip nats-server rabbitmq-server; do
    command -v "$tool" >/dev/null 2>&1 || log "WARNING: $tool is still missing; the figures that need it are skipped."
done

# ---------------------------------------------------------------- python
if ! py_ok "$PY"; then
    echo "[setup] ERROR: Python >= 3.11 is required; '$PY' is $("$PY" --version 2>&1 || echo 'not found')" >&2
    exit 1
fi

want="$("$PY" -c 'import os, sys; print(os.path.realpath(sys.executable))')"
have="$(sed -n 's/^executable = //p' .venv/pyvenv.cfg 2>/dev/null || true)"
if [[ -x .venv/bin/python && -n "$have" && "$(realpath "$have" 2>/dev/null || echo "$have")" != "$want" ]]; then
    log ".venv was made from $have; remaking it from $want"
    rm -rf .venv
fi
if [[ ! -x .venv/bin/python ]]; then
    log "creating .venv with $PY ($want, $("$PY" --version 2>&1))"
    rm -rf .venv
    "$PY" -m venv .venv
fi

hash="$(sha256sum pyproject.toml | cut -d' ' -f1)"
stamp=".venv/.installed-$hash"
if [[ -f "$stamp" ]]; then
    log ".venv up to date ($stamp)"
else
    log "installing project into .venv: pip install -e '.[dev,harness,interop,peers]'"
    .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev,harness,interop,peers]'
    rm -f .venv/.installed-*
    touch "$stamp"
    log "done"
fi

# ---------------------------------------------------------------- compiled twins (optional)
# The put path's hot functions in C (reference_broker/common/_*_c.pyx, Cython); skipped with a message when
# there is no compiler. RMQ_PURE_PYTHON=1 runs the pure-Python reference instead (common/compiled.py).
mkdir -p build
if .venv/bin/python scripts/build_compiled.py >build/compiled.log 2>&1; then
    grep '^\[build_compiled\]' build/compiled.log | sed 's/^\[build_compiled\]/[setup]/'
else
    cat build/compiled.log >&2
    log "ERROR: building the compiled twins failed (build/compiled.log); RMQ_PURE_PYTHON=1 runs without them"
    exit 1
fi
