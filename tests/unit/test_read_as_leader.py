"""`ReplicaManager.read_as_leader`: the one way a fetch reads a leader's log."""

from __future__ import annotations

import os

import pytest

from raftlog.errors import FencedLeaderEpochError
from raftlog.storage import LogConfig, PartitionLog
from tests.unit.test_high_watermark_checkpoint import TP, _append, _lead_alone, _manager


def test_room_bounds_a_response_but_its_first_data_always_gets_a_whole_batch(tmp_path) -> None:
    data = str(tmp_path)
    plog = PartitionLog.open(os.path.join(data, "logs", "t-0"), LogConfig())
    manager = _manager(data)
    try:
        manager.add(TP, plog, {}, "id-a")
        _lead_alone(manager, "id-a")
        _append(manager, plog, 3)
        p = manager.leader(TP)
        whole = manager.read_as_leader(p, 0, 1 << 20, False, 1, 1 << 20, True)
        assert (whole.high_watermark, whole.log_start_offset, whole.deferred) == (3, 0, False)
        assert whole.data.size == plog.size_bytes
        one = manager.read_as_leader(p, 0, 1 << 20, False, 1, 1, True)  # first: a whole batch
        assert 0 < one.data.size < whole.data.size and not one.deferred
        # Later in the response: data that does not fit waits for the next request.
        later = manager.read_as_leader(p, 0, 1 << 20, False, 1, one.data.size - 1, False)
        assert later.data.size == 0 and later.deferred
        full = manager.read_as_leader(p, 0, 1 << 20, False, 1, 0, False)
        assert full.data.size == 0 and full.deferred
        at_end = manager.read_as_leader(p, 3, 1 << 20, False, 1, 0, False)
        assert at_end.data.size == 0 and not at_end.deferred  # nothing there to wait
        # A consumer that believes in an older leader epoch is told so (KIP-320).
        with pytest.raises(FencedLeaderEpochError):
            manager.read_as_leader(p, 0, 1 << 20, False, 0, 1 << 20, True)
    finally:
        manager.close()
        plog.close()
