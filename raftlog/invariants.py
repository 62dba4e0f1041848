"""Always-on checks: what must hold in production as in tests.

`assert` is stripped by `python -O`, so raftlog never uses it for its invariants: a broken one
raises `InvariantError` (an AssertionError, so tests and tools treat both alike), naming what
broke. Each pure core raises its own subclass (ReplicationInvariantError,
MetadataInvariantError, GroupInvariantError) from the checks that end its transitions.
"""

from __future__ import annotations


class InvariantError(AssertionError):
    """A raftlog invariant broke: a bug in raftlog, never the fault of a peer or of input."""


def require(condition: bool, message: str) -> None:
    """Raise InvariantError(message) unless `condition` (runs under `python -O` too)."""
    if not condition:
        raise InvariantError(message)
