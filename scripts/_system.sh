# Sourced by scripts/test and scripts/run: system tools beyond Python packages.
# Java 17+: Spark (the page-view job in the main job and tests/spark) runs on the JVM.
# iptables: the chaos suite's network faults (chaos/netns.py) drop packets with iptables inside
# network namespaces. Installed when missing and we are root with apt (CI, the dev machines);
# elsewhere the tests that need it are skipped, saying what is missing.
# kcat and Go + Sarama: the Kafka-protocol tests (tests/kafka) drive raftlog's Kafka listener
# with them (ensure_kafka_tools).
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

# kcat (librdkafka's command-line client) and Go with Sarama 1.22 (a Go service's client, built
# offline in GOPATH mode by tests/kafka/golang.py) for the Kafka-protocol tests. Installed when
# missing and we are root with apt; elsewhere those tests skip, naming what is missing; where
# we are root with apt and they are still missing, the tests fail (an install step failed).
ensure_kafka_tools() {
    local missing=()
    command -v kcat >/dev/null 2>&1 || missing+=(kcat)
    command -v go >/dev/null 2>&1 || missing+=(golang-go)
    # cgo: Sarama's zstd codec is DataDog/zstd, C code over libzstd.
    command -v gcc >/dev/null 2>&1 || missing+=(gcc)
    [ -d /usr/share/gocode/src/github.com/Shopify/sarama ] \
        || missing+=(golang-github-shopify-sarama-dev)
    if [ "${#missing[@]}" -eq 0 ]; then
        return 0
    fi
    if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "== ${missing[*]} missing (needs root and apt-get): the kcat and Go Kafka tests" \
            "will skip"
        return 0
    fi
    echo "== installing ${missing[*]} (Kafka-protocol tests)"
    _apt_install "${missing[@]}" \
        || echo "== installing ${missing[*]} failed: the kcat and Go Kafka tests will fail"
}

# Prometheus (Debian's `prometheus`: the server and promtool) for the alert-rule checks and the
# live test (tests/integration/test_prometheus*.py). Installed without its recommended
# node-exporter. The package enables a prometheus service on :9090 with Debian's sample config;
# where services start on install (not on the project's machines: a policy file blocks it), it
# is stopped and disabled, since the tests run their own server (their config, data directory
# and a free port) and nothing should scrape or hold a port behind their back. As with the
# Kafka tools: missing where it could have been installed, the tests fail; elsewhere they skip.
ensure_prometheus() {
    if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "== prometheus missing (needs root and apt-get): the Prometheus tests will skip"
        return 0
    fi
    echo "== installing prometheus (Prometheus tests)"
    _apt_install --no-install-recommends prometheus \
        || echo "== installing prometheus failed: the Prometheus tests will fail"
    # systemd, or (no systemd, as in containers) the package's init script.
    if command -v systemctl >/dev/null 2>&1 \
        && systemctl is-active --quiet prometheus.service 2>/dev/null; then
        systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    elif [ -x /etc/init.d/prometheus ] && /etc/init.d/prometheus status >/dev/null 2>&1; then
        /etc/init.d/prometheus stop >/dev/null 2>&1 || true
        update-rc.d prometheus disable >/dev/null 2>&1 || true
    fi
}
