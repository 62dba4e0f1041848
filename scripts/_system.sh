# Sourced by scripts/test and scripts/run: system tools beyond Python packages.
# Java 17+: Spark (the page-view job in the main job and tests/spark) runs on the JVM.
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
    _apt_install iptables || echo "== installing iptables failed: the network-fault tests will skip"
}

_apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 && return 0
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1
}

ensure_java() {
    local v
    v=$({ "${JAVA_HOME:+$JAVA_HOME/bin/}java" -version 2>&1 || true; } \
        | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
    if [ -n "$v" ] && [ "$v" -ge 17 ]; then
        return 0
    fi
    if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "== no Java 17+ (Spark needs it): install openjdk-17-jre-headless or set JAVA_HOME" >&2
        return 1
    fi
    echo "== installing a Java 17 runtime (Spark)"
    _apt_install openjdk-17-jre-headless || {
        echo "== installing openjdk-17-jre-headless failed: Spark cannot run" >&2
        return 1
    }
}
