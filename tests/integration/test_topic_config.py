"""A live topic's configs change (`raftlog topic alter T -c KEY=VALUE`, `--delete-config KEY`,
Admin.alter_topic_config) and every broker's logs of it follow, on a real 3-node cluster:

- max.message.bytes lowered: a record that fitted is refused by the leader, whichever node it
  is; deleted again: it fits again;
- retention.bytes set on a topic that kept everything: old segments go on every replica (the
  log start offset moves up where the leader reports it);
- refusals name what was wrong and change nothing: an unknown key, a bad value, a setting fixed
  at creation, an unknown topic; --validate-only changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin, Producer
from raftlog.errors import (
    InvalidConfigError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from raftlog.topics import TopicPartition
from tests.integration._cluster import Cluster, started_cluster
from tests.integration._support import run_cli, wait_for

TOPIC = "tuned"
WAIT_S = 30.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started_cluster(tmp_path, 3, retention_check_interval_ms=200) as c:
        yield c


def _alter(cluster: Cluster, *args: str) -> tuple[int, str]:
    out = run_cli("topic", "alter", TOPIC, *args, "-b", cluster.bootstrap)
    return out.returncode, out.stdout + out.stderr


def test_max_message_bytes_changes_on_the_live_topic_and_goes_back(cluster: Cluster) -> None:
    big = b"b" * 50_000
    with (
        Admin(cluster.bootstrap) as admin,
        Producer(bootstrap_servers=cluster.bootstrap, acks="all", retries=0) as p,
    ):
        admin.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
        assert p.send(TOPIC, big, partition=0).exception(30) is None

        code, out = _alter(cluster, "-c", "max.message.bytes=10000")
        assert code == 0 and "max.message.bytes=10000" in out, out
        assert admin.describe_topics([TOPIC])[0].overrides["max.message.bytes"] == "10000"

        def refused() -> bool:
            return isinstance(p.send(TOPIC, big, partition=0).exception(30), RecordTooLargeError)

        wait_for(refused, WAIT_S, "the leader refusing a 50 kB batch at max.message.bytes=10000")
        # Every replica took it: the next leader refuses it too.
        leader = admin.describe_topics([TOPIC])[0].partitions[0].leader
        cluster.kill9(leader)
        wait_for(refused, WAIT_S, "the new leader refusing it as well")
        cluster.nodes[leader].start()

        code, out = _alter(cluster, "--delete-config", "max.message.bytes")
        assert code == 0 and "max.message.bytes" not in out, out
        wait_for(
            lambda: p.send(TOPIC, big, partition=0).exception(30) is None,
            WAIT_S,
            "a 50 kB batch accepted again at the default",
        )


def test_retention_bytes_set_on_a_live_topic_deletes_old_segments(cluster: Cluster) -> None:
    tp = TopicPartition(TOPIC, 0)
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, 1, 3, {"segment.bytes": "20000"})
        with Producer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5) as p:
            for i in range(200):
                p.send(TOPIC, b"%04d" % i + b"r" * 1000, partition=0)
            p.flush(30)
        assert admin.list_offsets({tp: -2})[tp][0] == 0  # kept: no retention.bytes
        admin.alter_topic_config(TOPIC, {"retention.bytes": 50_000})
        wait_for(
            lambda: admin.list_offsets({tp: -2})[tp][0] >= 100,
            WAIT_S,
            "old segments deleted down to about 50 kB",
        )
        assert admin.list_offsets({tp: -1})[tp][0] == 200


def test_bad_changes_are_refused_by_name_and_change_nothing(cluster: Cluster) -> None:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, 1, 3, {"retention.ms": "60000"})
        before = admin.describe_topics([TOPIC])[0].overrides
        with pytest.raises(InvalidConfigError, match=r"did you mean 'retention\.ms'"):
            admin.alter_topic_config(TOPIC, {"retention.msx": "5"})
        with pytest.raises(InvalidConfigError, match=r"segment\.bytes='?5'?"):
            admin.alter_topic_config(TOPIC, {"segment.bytes": "5", "retention.ms": "1"})
        with pytest.raises(InvalidConfigError, match="cannot be changed on a live topic"):
            admin.alter_topic_config(TOPIC, {"durability.policy": "fsync"})
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.alter_topic_config("nope", {"retention.ms": "5"})
        would = admin.alter_topic_config(TOPIC, {"retention.ms": "1"}, validate_only=True)
        assert would["retention.ms"] == "1"
        assert admin.describe_topics([TOPIC])[0].overrides == before
    code, out = _alter(cluster)
    assert code == 1 and "needs --partitions, -c KEY=VALUE or --delete-config" in out, out
    code, out = _alter(cluster, "-c", "retention.ms")
    assert code == 2 and "must be KEY=VALUE" in out, out
