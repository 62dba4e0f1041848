# Sourced by the scripts: make .venv with raftlog and its extras installed, once.
VENV="${RAFTLOG_VENV:-$PWD/.venv}"
PY="${PYTHON:-python3}"

ensure_venv() {
    local extras="${1:-dev}"
    local stamp="$VENV/.raftlog-installed-$extras"
    if [ ! -x "$VENV/bin/python" ]; then
        echo "== creating virtual environment in $VENV"
        "$PY" -m venv "$VENV"
    fi
    # Reinstall when pyproject.toml changed since the last install.
    if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
        echo "== installing raftlog[$extras]"
        "$VENV/bin/python" -m pip install --quiet --upgrade pip
        "$VENV/bin/python" -m pip install --quiet -e ".[$extras]"
        touch "$stamp"
    fi
}

ensure_spark_class_archive() {
    # Once per Java and Spark (about a minute): later Spark sessions start from it in ~7 s
    # instead of 11-13 s. Without it they still start, only slower.
    "$VENV/bin/python" -m raftlog_spark.class_archive \
        || echo "== no Spark class archive: Spark sessions will start without it" >&2
}
