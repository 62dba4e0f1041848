# Sourced by scripts/test: system tools the test suite needs beyond Python packages.
# iptables: the chaos suite's network faults (chaos/netns.py) drop packets with iptables inside
# network namespaces. Installed when missing and we are root with apt (CI, the dev machines);
# elsewhere the tests that need it are skipped, saying what is missing.
ensure_system_tools() {
    if command -v iptables >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "== iptables missing (needs root and apt-get): the network-fault tests will skip"
        return 0
    fi
    echo "== installing iptables (network-fault tests)"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null 2>&1; then
        apt-get update -qq >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null 2>&1 \
            || echo "== installing iptables failed: the network-fault tests will skip"
    fi
}
