#!/usr/bin/env bash
# Idempotent developer/CI setup: system tools (fio, fincore) and the .venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { echo "[setup] $*"; }

# ---------------------------------------------------------------- system tools
# fio (device baselines), fincore (page-cache residency, util-linux), a Java runtime (Spark).
missing=()
packages=()
command -v fio >/dev/null 2>&1 || { missing+=(fio); packages+=(fio); }
command -v fincore >/dev/null 2>&1 || { missing+=(fincore); packages+=(util-linux); }
command -v java >/dev/null 2>&1 || { missing+=(java); packages+=(openjdk-17-jre-headless); }
if ((${#missing[@]})); then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        log "missing: ${missing[*]}; running: apt-get update -qq"
        apt-get update -qq
        log "running: apt-get install -y -qq ${packages[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" </dev/null
    else
        log "WARNING: ${missing[*]} missing and cannot install (not root or no apt-get);"
        log "         the fio baselines are skipped and the Spark reports need a Java runtime."
    fi
fi

# ---------------------------------------------------------------- python
if command -v python3.11 >/dev/null 2>&1; then
    PY=python3.11
else
    PY=python3
fi
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
    echo "[setup] ERROR: Python >= 3.11 is required; '$PY' is $("$PY" --version 2>&1 || echo 'not found')" >&2
    exit 1
fi

if [[ ! -x .venv/bin/python ]]; then
    log "creating .venv with $PY ($("$PY" --version 2>&1))"
    rm -rf .venv
    "$PY" -m venv .venv
fi

hash="$(sha256sum pyproject.toml | cut -d' ' -f1)"
stamp=".venv/.installed-$hash"
if [[ -f "$stamp" ]]; then
    log ".venv up to date ($stamp)"
else
    log "installing project into .venv: pip install -e '.[dev,harness]'"
    .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev,harness]'
    rm -f .venv/.installed-*
    touch "$stamp"
    log "done"
fi
