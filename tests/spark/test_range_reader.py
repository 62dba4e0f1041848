"""RangeReader (raftlog/client/reader.py) against a real node: exact ranges, record for record
as the consumer reads them; nothing past the end asked for; bad ranges refused."""

from __future__ import annotations

import pytest

from raftlog.client.reader import RangeReader
from raftlog.errors import InvalidConfigError
from raftlog.topics import TopicPartition
from tests.integration._support import BrokerProcess
from tests.spark._support import consume_range, create_topic, latest, produce

TOPIC = "ranges"


def test_exact_ranges_equal_the_consumer(module_broker: BrokerProcess) -> None:
    boot = module_broker.bootstrap
    create_topic(boot, TOPIC, 1)
    produce(boot, TOPIC, [(b"k%d" % i, b"v" * (i % 300), [("h", b"1")] if i % 9 == 0 else None)
                          for i in range(5000)], linger_ms=5)  # fmt: skip
    end = latest(boot, TOPIC)[0]
    tp = TopicPartition(TOPIC, 0)
    # Small fetches: ranges cut through batches at both ends and span many fetches.
    with RangeReader(boot, partition_fetch_bytes=20_000) as reader:
        for start, stop in ((0, end), (1, end - 1), (777, 778), (4000, 4000), (123, 2345)):
            chunks = list(reader.read_range(tp, start, stop))
            got = [(0, r.offset, r.timestamp, r.key, r.value, r.headers)
                   for c in chunks for r in c.records()]  # fmt: skip
            assert got == consume_range(boot, TOPIC, {0: start}, {0: stop}), (start, stop)
            assert all(c.start < c.end for c in chunks)
            if stop > start:
                assert (chunks[0].start, chunks[-1].end) == (start, stop)
        with pytest.raises(InvalidConfigError, match=r"range \[9, 3\) of ranges-0"):
            list(reader.read_range(tp, 9, 3))
