"""The quick bench tests run each benchmark as a user does: `python -m <module>` in a child
process from the repository root, so that its options, exit code, stdout and result files are
what is checked, not its functions."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_bench(
    module: str, *args: str, timeout_s: float = 300, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`<this interpreter> -m <module> <args>` in REPO with `env` (this process's where None),
    stdout and stderr captured as text; subprocess.TimeoutExpired after `timeout_s`. The exit
    code is the caller's to check."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        check=False,
    )
