"""failOnDataLoss, both ways, when retention removed records a query still needed.

Retention is what deletes the oldest segment files of a partition; the broker runs it every
few minutes, too rarely for a test. So the test does what retention does while the node is
stopped: it deletes the partition's oldest segment files, and the restarted node (storage
recovery) starts the log at the first segment left, exactly as after retention.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from raftlog.client import Admin
from raftlog.client.reader import DataLossError, RangeReader
from raftlog.topics import TopicPartition
from tests.integration._support import BrokerProcess
from tests.integration.conftest import MakeBroker
from tests.spark._support import create_topic, latest, produce, reader

TOPIC = "lossy"
FIRST = 300  # records read by the query before the loss
TOTAL = 2000


def _retain_from(broker: BrokerProcess, offset: int) -> int:
    """Stop the node, delete the segments wholly below `offset`, restart; the new log start."""
    broker.stop()
    partition_dir = broker.data_dir / "logs" / f"{TOPIC}-0"
    bases = sorted(int(p.stem) for p in partition_dir.glob("*.log"))
    doomed = [b for b, nxt in itertools.pairwise(bases) if nxt <= offset]
    assert doomed, f"no whole segment below offset {offset} in {bases}"
    for base in doomed:
        for suffix in (".log", ".index", ".timeindex"):
            (partition_dir / f"{base:020d}{suffix}").unlink(missing_ok=True)
    broker.start()
    with Admin(broker.bootstrap) as admin:
        tp = TopicPartition(TOPIC, 0)
        return admin.list_offsets({tp: -2})[tp][0]


def _query(spark: Any, boot: str, out: Path, checkpoint: Path, fail: bool) -> Any:
    return (
        reader(
            spark,
            boot,
            stream=True,
            subscribe=TOPIC,
            startingOffsets="earliest",
            failOnDataLoss=str(fail).lower(),
        )
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_fail_on_data_loss_both_ways(spark: Any, make_broker: MakeBroker, tmp_path: Path) -> None:
    broker = make_broker()
    boot = broker.bootstrap
    # Small segments (about 40 records each), so retention can remove part of the log.
    create_topic(boot, TOPIC, 1, **{"segment.bytes": "4096"})
    produce(boot, TOPIC, [(None, b"%06d" % i + b"." * 80) for i in range(FIRST)], linger_ms=0)

    # A streaming query reads the first records and stops; a copy of its checkpoint lets the
    # same state be resumed twice, once per failOnDataLoss setting (the second into a new
    # output directory: a file sink's own log names its files by absolute path).
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = _query(spark, boot, out, checkpoint, fail=True)
    assert query.awaitTermination(300) and query.exception() is None
    assert spark.read.parquet(str(out)).count() == FIRST
    shutil.copytree(checkpoint, tmp_path / "checkpoint2")

    produce(boot, TOPIC, [(None, b"%06d" % i + b"." * 80) for i in range(FIRST, TOTAL)])
    log_start = _retain_from(broker, 1000)
    assert FIRST < log_start <= 1000
    boot = broker.bootstrap
    assert latest(boot, TOPIC) == {0: TOTAL}

    # failOnDataLoss=true: the resumed query fails, naming the partition and the lost range.
    query = _query(spark, boot, out, checkpoint, fail=True)
    with pytest.raises(Exception) as info:
        query.awaitTermination(300)
    assert f"data loss in {TOPIC}-0: offsets [{FIRST}, {log_start})" in str(info.value)

    # failOnDataLoss=false: it skips the lost range and reads everything still there.
    query = _query(spark, boot, tmp_path / "out2", tmp_path / "checkpoint2", fail=False)
    assert query.awaitTermination(300) and query.exception() is None
    # (Its files are read directly: the sink's log in out2 starts at batch 1, not 0.)
    written = spark.read.parquet(str(tmp_path / "out2" / "*.parquet"))
    offsets = sorted(r.offset for r in written.collect())
    assert offsets == list(range(log_start, TOTAL))

    # Batch: a starting offset below the log start is refused when the query is planned...
    starting = json.dumps({TOPIC: {"0": 0}})
    with pytest.raises(Exception, match=rf"data loss in {TOPIC}-0: offsets \[0, {log_start}\)"):
        reader(spark, boot, subscribe=TOPIC, startingOffsets=starting).load().count()
    # ...or skipped with failOnDataLoss=false.
    df = reader(
        spark, boot, subscribe=TOPIC, startingOffsets=starting, failOnDataLoss="false"
    ).load()
    assert df.count() == TOTAL - log_start

    # The client underneath (RangeReader) reports the same range, or skips it.
    tp = TopicPartition(TOPIC, 0)
    with RangeReader(boot) as raw:
        with pytest.raises(DataLossError) as lost:
            list(raw.read_range(tp, 100, TOTAL))
        assert (lost.value.tp, lost.value.missing_start, lost.value.missing_end) == (
            tp,
            100,
            log_start,
        )
        chunks = list(raw.read_range(tp, 100, TOTAL, fail_on_data_loss=False))
        assert [r.offset for c in chunks for r in c.records()] == list(range(log_start, TOTAL))
