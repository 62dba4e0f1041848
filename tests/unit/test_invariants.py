"""raftlog's invariant checks run under `python -O` too: no plain `assert` guards them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

RAFTLOG = Path(__file__).resolve().parents[2] / "raftlog"


def test_no_plain_assert_in_raftlog() -> None:
    found = [
        f"{path.relative_to(RAFTLOG.parent)}:{node.lineno}"
        for path in sorted(RAFTLOG.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Assert)
    ]
    assert not found, f"plain asserts (stripped by python -O): {found}"


def test_an_index_entry_out_of_order_is_refused_under_python_O(tmp_path: Path) -> None:
    code = (
        "from raftlog.storage.index import SparseIndex\n"
        "from raftlog.invariants import InvariantError\n"
        f"ix = SparseIndex({str(tmp_path / 'a.index')!r}, {str(tmp_path / 'a.timeindex')!r})\n"
        "ix.add(10, 100, 0)\n"
        "try:\n"
        "    ix.add(5, 200, 0)\n"
        "except InvariantError as e:\n"
        "    print('refused:', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-O", "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "refused: index entry (5, 200) not after the last (10, 100)" in out


def test_the_cores_invariant_errors_are_invariant_errors() -> None:
    from raftlog.invariants import InvariantError
    from raftlog.metadata.groups import GroupInvariantError
    from raftlog.metadata.state import MetadataInvariantError
    from raftlog.replication.core import ReplicationInvariantError

    for cls in (GroupInvariantError, MetadataInvariantError, ReplicationInvariantError):
        assert issubclass(cls, InvariantError) and issubclass(cls, AssertionError)
