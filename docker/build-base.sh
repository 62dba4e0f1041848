#!/usr/bin/env bash
# Print the base image the raftlog image should be built FROM, building one locally if needed.
#
#   docker/build-base.sh            -> prints e.g. "python:3.11-slim" or "raftlog-base:bookworm"
#
# 1. $RAFTLOG_BASE_IMAGE, if set, is used as it is (a user's own base).
# 2. python:3.11-slim, the Dockerfile's default, if it is present or can be pulled.
# 3. Otherwise (no registry reachable, as on the machines this project is developed on) a
#    minimal Debian bookworm with Python 3.11 made by debootstrap from the Debian mirror this
#    machine's apt already uses (read from /etc/apt/sources.list* now, never written down
#    here), imported as raftlog-base:bookworm. Built once per machine: an existing image with
#    that tag is reused, so later runs take no time. Its Python is Debian's python3 (3.11),
#    at /usr/bin/python3, which the Dockerfile finds the same way as the official image's.
#
# Progress goes to stderr; only the image name goes to stdout.
set -euo pipefail

DEFAULT_BASE=python:3.11-slim
LOCAL_BASE=raftlog-base:bookworm
SUITE=bookworm
# What the raftlog image needs from its base: Python with venv (the image installs into one),
# certificates for users' own TLS, iptables for the network-cut tests (a container started with
# NET_ADMIN drops packets to a peer), procps for ps/kill when debugging a node.
PACKAGES=python3,python3-venv,ca-certificates,iptables,procps

say() { echo "== $*" >&2; }

if [ -n "${RAFTLOG_BASE_IMAGE:-}" ]; then
    echo "$RAFTLOG_BASE_IMAGE"
    exit 0
fi
if docker image inspect "$LOCAL_BASE" >/dev/null 2>&1; then
    echo "$LOCAL_BASE"
    exit 0
fi
if docker image inspect "$DEFAULT_BASE" >/dev/null 2>&1 \
    || timeout 60 docker pull -q "$DEFAULT_BASE" >/dev/null 2>&1; then
    echo "$DEFAULT_BASE"
    exit 0
fi

# The first Debian mirror apt uses for the main archive: deb822 files ("URIs: ...", with
# "Suites: bookworm") or one-line "deb URI bookworm main" entries.
mirror() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk -v suite="$SUITE" '
            /^[[:space:]]*$/ { if (uri != "" && ok) { print uri; exit } uri = ""; ok = 0; next }
            /^URIs:/ { uri = $2 }
            /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) ok = 1 }
            END { if (uri != "" && ok) print uri }
        ' "$f" | head -n 1
    done
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
        | awk -v suite="$SUITE" '$1 == "deb" && $3 == suite { print $2 }'
}
MIRROR="$(mirror | grep -m 1 -i debian || true)"
if [ -z "$MIRROR" ]; then
    say "$DEFAULT_BASE cannot be pulled and no Debian $SUITE mirror is named in /etc/apt/sources.list*"
    exit 1
fi
if ! command -v debootstrap >/dev/null 2>&1; then
    say "$DEFAULT_BASE cannot be pulled and debootstrap is missing: run docker/install-engine.sh"
    exit 1
fi

ROOTFS="$(mktemp -d /tmp/raftlog-base.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT
say "$DEFAULT_BASE cannot be pulled: building $LOCAL_BASE with debootstrap from $MIRROR"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR" \
    >"$ROOTFS.log" 2>&1 || { tail -n 20 "$ROOTFS.log" >&2; rm -f "$ROOTFS.log"; exit 1; }
rm -f "$ROOTFS.log"
# Leave out what a container never uses: apt's downloaded packages and lists, docs, man pages.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
    "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/*
tar -C "$ROOTFS" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    - "$LOCAL_BASE" >/dev/null
say "built $LOCAL_BASE ($(docker image inspect -f '{{.Size}}' "$LOCAL_BASE" | awk '{printf "%.0f MB", $1/1e6}'))"
echo "$LOCAL_BASE"
