"""A full disk under a real node's metadata quorum (issue 9): refused while it lasts, no restart
needed after.

The node's data directory is a 2 MiB tmpfs (root needed; CI runs as root). pysyncobj's own
journal wrote through mmap: on a full disk the node died of SIGBUS, or its Raft thread died of
ENOSPC storing the term and commit index, and every metadata command timed out from then on.
Here the disk is filled (a few records, then a ballast file), offset commits (metadata only,
no log files) go on until the journal's reserved space is used up, and then:
- every commit is refused at once with StorageError naming the device error, never a timeout;
- the node stays up, its quorum ready, and its status says why metadata writes are refused;
- once space is back, commits, a new topic and a group consumer work without a restart.
And in one process: a snapshot that fails for lack of space is not retried at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.client import Admin, Consumer, Producer
from raftlog.errors import StorageError
from raftlog.launcher import free_ports
from raftlog.metadata import quorum as quorum_module
from raftlog.metadata.quorum import MetadataQuorum
from raftlog.protocol import ApiKey
from raftlog.topics import TopicPartition
from tests._tmpfs import fill, tmpfs
from tests.integration._support import BrokerProcess, RawClient, wait_for

FS_BYTES = 2 * 1024 * 1024
# Given back once the disk is full: room for the journal, a new topic and a group's offsets.
SPARE_BYTES = 512 * 1024
# Commit metadata of 4,000 bytes uses the journal's reserved space up in a few dozen commits.
METADATA = "m" * 4000
COMMITS_MAX = 500


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted afterwards whatever happens."""
    mount_point = tmp_path / "small-fs"
    mount_point.mkdir()
    with tmpfs(mount_point, FS_BYTES):
        yield mount_point


@pytest.fixture
def node(small_fs: Path, tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(small_fs / "data", tmp_path / "logs")
    try:
        b.start()
        yield b
    finally:
        problems = b.shutdown_and_check()
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)


def commit(client: RawClient, group: str, offset: int) -> dict[str, object]:
    body, _ = client.request(
        ApiKey.OFFSET_COMMIT,
        {
            "group_id": group,
            "member_id": "",
            "generation": -1,
            "offsets": [["t", 0, offset, METADATA]],
        },
    )
    return body


def quorum(node: BrokerProcess) -> dict[str, object]:
    """The node's view of its quorum, from `raftlog cluster status --json`'s source."""
    with Admin(node.bootstrap, request_timeout_ms=5000) as a:
        view: dict[str, object] = a.describe_cluster()["quorum"]
    assert view["ready"] and view["this_node_leads"], view
    assert view["raft_thread_failure"] is None, view
    return view


def test_a_full_disk_refuses_metadata_writes_and_recovers(
    node: BrokerProcess, small_fs: Path
) -> None:
    with Admin(node.bootstrap) as a:
        a.create_topic("t", partitions=1, replication_factor=1)
    with Producer(bootstrap_servers=node.bootstrap) as p:
        for i in range(100):
            p.send("t", b"%04d" % i + b"x" * 1000)
        p.flush()
    with RawClient(node.host, node.port) as client:
        # The group coordinator starts a moment after the node is ready (NotCoordinator until
        # then, which clients retry): wait for a first commit before the disk fills.
        wait_for(lambda: "error" not in commit(client, "g", 0), 10, "a first commit")
        spare = small_fs / "spare"
        spare.write_bytes(b"\0" * SPARE_BYTES)
        fill(small_fs / "ballast")
        refused: dict[str, object] = {}
        for i in range(COMMITS_MAX):
            body = commit(client, "g", i)
            if "error" in body:
                refused = body
                break
        assert refused, f"{COMMITS_MAX} commits of 4 KB accepted on a full 2 MiB disk"
        assert refused["error"] == StorageError.code, refused
        assert "No space left on device" in str(refused["message"]), refused
        # While the disk stays full: refused at once, every time, and the node is healthy.
        for _ in range(3):
            t0 = time.monotonic()
            body = commit(client, "g", 0)
            assert body.get("error") == StorageError.code and time.monotonic() - t0 < 2, body
        assert "No space left on device" in str(quorum(node)["journal_full"])
        node.check_alive()

        spare.unlink()
        # Space is back: the next commit goes in, without a restart.
        wait_for(lambda: "error" not in commit(client, "g", 10_000), 10, "a commit to go in")

    with Admin(node.bootstrap) as a:
        a.create_topic("after", partitions=1, replication_factor=1)
        assert a.describe_group("g")["offsets"][0][:3] == ["t", 0, 10_000]
    with Consumer(
        bootstrap_servers=node.bootstrap, group_id="readers", auto_offset_reset="earliest"
    ) as c:
        c.subscribe(["t"])
        records = wait_for(lambda: c.poll(timeout_ms=500), 20, "records for the group consumer")
        assert records
        c.commit()
        assert c.committed([TopicPartition("t", 0)])[TopicPartition("t", 0)] > 0
    assert quorum(node)["journal_full"] is None


def test_a_snapshot_that_fails_on_a_full_disk_is_retried_slowly(
    small_fs: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """pysyncobj retried a failed snapshot at once: a fork and a pickle of the whole state
    about 20 times a second for as long as the disk stayed full (measured: 203 in 5 s)."""
    monkeypatch.setattr(quorum_module, "COMPACT_INTERVAL_S", 0.2)  # compaction always due
    monkeypatch.setattr(quorum_module, "COMPACT_RETRY_S", 1.0)
    address = f"127.0.0.1:{free_ports(1, '127.0.0.1')[0]}"
    q = MetadataQuorum(address, [address], str(small_fs / "node"))
    q.start()
    try:
        wait_for(lambda: q.status().ready, 10, "a one-voter quorum")
        fill(small_fs / "ballast")
        with caplog.at_level(logging.WARNING, logger="pysyncobj"):
            window_s, t0 = 4.0, time.monotonic()
            while time.monotonic() - t0 < window_s:  # entries to snapshot, in reserved space
                asyncio.run(q.propose("noop"))
            failed = caplog.text.count("Failed to store full dump")
        assert 1 <= failed <= window_s / quorum_module.COMPACT_RETRY_S + 1, caplog.text[-2000:]
        assert q.status().failure is None
        (small_fs / "ballast").unlink()
        freed = time.monotonic()
        wait_for(lambda: q._journal is not None and q._journal.compacted_at > freed, 10,
                 "a snapshot once space is back")  # fmt: skip
    finally:
        q.stop()
