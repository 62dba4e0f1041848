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
