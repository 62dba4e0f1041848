"""What the runner writes into a history from records and replica files (pure, no cluster):
a compacted run's keyed records and tombstones, and a stopped replica's high watermark."""

from __future__ import annotations

from pathlib import Path

from chaos.runner import TOMBSTONE_ID_HEADER, entry, replica_high_watermark
from raftlog.broker.logs import TOPIC_ID_FILE
from raftlog.record_types import Record
from raftlog.replication.manager import HIGH_WATERMARK_FILE, HIGH_WATERMARKS_FILE
from raftlog.storage.checkpoint import OffsetCheckpoint, PartitionOffsets


def test_a_record_is_offset_and_value_or_in_a_compacted_run_also_its_key() -> None:
    r = Record(b"k07", b"p1-9", offset=12)
    assert entry(r, compact=False) == [12, "p1-9"]
    assert entry(r, compact=True) == [12, "p1-9", "k07"]


def test_a_tombstone_is_recorded_by_the_id_its_header_carries() -> None:
    r = Record(b"k07", None, headers=((TOMBSTONE_ID_HEADER, b"p2-4"),), offset=3)
    assert entry(r, compact=True) == [3, "~p2-4", "k07"]
    # Without the header (nobody in the workload sends that) it is still told from a value.
    assert entry(Record(b"k07", None, offset=3), compact=True) == [3, "~", "k07"]
    assert entry(Record(None, b"v", offset=4), compact=True) == [4, "v", None]


def _replica(tmp_path: Path, topic_id: str = "id-1") -> Path:
    path = tmp_path / "node-1" / "logs" / "chaos-2"
    path.mkdir(parents=True)
    (path / TOPIC_ID_FILE).write_text(topic_id)
    return path


def test_a_replicas_high_watermark_is_its_brokers_entry_for_the_partition(tmp_path: Path) -> None:
    path = _replica(tmp_path)
    PartitionOffsets(str(tmp_path / "node-1" / HIGH_WATERMARKS_FILE)).write(
        [("chaos", 1, "id-1", 7), ("chaos", 2, "id-1", 2666)]
    )
    assert replica_high_watermark(path) == 2666


def test_an_entry_of_an_earlier_topic_of_that_name_is_not_taken(tmp_path: Path) -> None:
    path = _replica(tmp_path, topic_id="id-new")
    PartitionOffsets(str(tmp_path / "node-1" / HIGH_WATERMARKS_FILE)).write(
        [("chaos", 2, "id-old", 50)]
    )
    assert replica_high_watermark(path) == 0
    OffsetCheckpoint(str(path / HIGH_WATERMARK_FILE)).write(9)  # the older per-partition file
    assert replica_high_watermark(path) == 9
