# Prometheus for docker/compose.yaml's `prometheus` service, built without a registry: Debian's
# `prometheus` server (the package scripts/_system.sh's ensure_prometheus installs, 2.42) copied
# from the host onto the same base as the raftlog image.
#
# Built by `docker/cluster build` from a context holding `prometheus` (the host's binary: Go,
# needing only the C library, which every Debian base has) and `web/` (Debian's classic UI, the
# package's /usr/share/prometheus/web with its symlinks into /usr/share/javascript resolved,
# and without moment-timezone's 200 MB of data files, which the UI does not load). BASE_IMAGE
# is docker/build-base.sh's choice, as for docker/Dockerfile.
#
# It behaves like the prom/prometheus image compose.yaml names otherwise: the config at
# /etc/prometheus/prometheus.yml (compose mounts it, with alerts.yml beside it), the data in
# the volume /prometheus, port 9090, the user nobody (65534), the flags as CMD so that a
# compose `command:` can replace them. The same volume works with either image.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

COPY prometheus /usr/bin/prometheus
# Where Debian's build looks for its UI (its --web.local-assets default).
COPY web /usr/share/prometheus/web
# A new named volume takes the ownership of the image's directory, so nobody can write it.
RUN mkdir -p /etc/prometheus /prometheus \
    && chown 65534:65534 /prometheus \
    && /usr/bin/prometheus --version >/dev/null

USER 65534:65534
WORKDIR /prometheus
VOLUME /prometheus
EXPOSE 9090

# Ready: the TSDB is open and the config (with its rule files) loaded. The bases have no curl
# or wget, but both have Python.
HEALTHCHECK --interval=5s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9090/-/ready', timeout=4)"]
# exec form: prometheus is PID 1 and gets docker stop's SIGTERM (it closes the TSDB cleanly).
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus", \
     "--web.listen-address=:9090"]
