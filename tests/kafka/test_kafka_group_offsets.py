"""Kafka groups' committed offsets and Kafka's group admin tools against a three-node raftlog
cluster, through its Kafka listeners: one offset registry with raftlog's own groups.

confluent-kafka consumers that assign() their partitions commit offsets and a new one reads
them back, as it reads those kafka-python's and aiokafka's consumers commit; `raftlog group
describe` shows them and `raftlog group reset-offsets` moves them, and a restarted Kafka
consumer starts from there; kafka-python's admin client lists, describes, reads the offsets of
and deletes groups (raftlog's own groups among them); FindCoordinator asked of a node that is
not the controller names the controller; a commit naming a partition that does not exist is
refused and stores nothing; an unknown group's offsets are -1; a subscribed confluent-kafka
group's member, assignment, commits and lag show in both tools. Three nodes because
FindCoordinator must be asked of a node that is not the controller; no node is restarted.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftlog.client import Admin, Consumer
from raftlog.kafka.api import ApiKey
from raftlog.kafka.errors import ErrorCode
from raftlog.kafka.messages.commits import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)
from raftlog.kafka.messages.groups import FindCoordinatorRequest, FindCoordinatorResponse
from tests.integration._cluster import Cluster, started_cluster
from tests.integration._support import run_cli, wait_for
from tests.kafka import clients
from tests.kafka._raw import KafkaRawClient

TOPIC = "kafka-group-offsets"
PARTITIONS = 3
RECORDS = 10  # per partition
WAIT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("kafka-group-offsets")
    with started_cluster(root) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        for p in range(PARTITIONS):
            clients.confluent_produce(
                c.kafka_bootstrap, TOPIC, clients.keyed_records(RECORDS, f"p{p}"), partition=p
            )
        yield c


def kafka_address(cluster: Cluster, node_id: int) -> str:
    return str(cluster.nodes[node_id].config.kafka_listener)


def consumer(cluster: Cluster, group: str) -> Any:
    from confluent_kafka import Consumer as KafkaConsumer

    return KafkaConsumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )


def tps(*partitions: tuple[int, int] | int) -> list[Any]:
    from confluent_kafka import TopicPartition

    return [
        TopicPartition(TOPIC, *p) if isinstance(p, tuple) else TopicPartition(TOPIC, p)
        for p in partitions
    ]


def committed(cluster: Cluster, group: str) -> dict[int, int]:
    """What a new confluent-kafka consumer of `group` reads as committed (-1001: none)."""
    c = consumer(cluster, group)
    try:
        return {tp.partition: tp.offset for tp in c.committed(tps(0, 1, 2), timeout=WAIT_S)}
    finally:
        c.close()


def cli_json(*args: str) -> Any:
    res = run_cli(*args, "--json")
    assert res.returncode == 0, res
    return json.loads(res.stdout)


def first_offset_read(cluster: Cluster, group: str, partition: int) -> int:
    """The offset of the first record a new consumer of `group` assigned `partition` (with no
    position given, so from the committed offset) reads."""
    c = consumer(cluster, group)
    try:
        c.assign(tps(partition))
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            msg = c.poll(clients.POLL_S)
            if msg is not None:
                assert msg.error() is None, msg.error()
                return int(msg.offset())
        raise TimeoutError(f"no record of {TOPIC}-{partition} read in {WAIT_S} s")
    finally:
        c.close()


def test_commits_of_an_assign_consumer_are_read_back_shown_and_reset(cluster: Cluster) -> None:
    group = "assigning"
    c = consumer(cluster, group)
    try:
        c.assign(tps(0, 1))
        c.commit(offsets=tps((0, 7), (1, 3)), asynchronous=False)
    finally:
        c.close()
    assert committed(cluster, group) == {0: 7, 1: 3, 2: -1001}

    described = cli_json("group", "describe", group, "-b", cluster.bootstrap)
    assert {(o["topic"], o["partition"], o["offset"]) for o in described["offsets"]} == {
        (TOPIC, 0, 7),
        (TOPIC, 1, 3),
    }
    lag = {p["partition"]: p["lag"] for p in described["partitions"]}
    assert lag == {0: RECORDS - 7, 1: RECORDS - 3}
    assert described["state"] == "Empty" and described["members"] == []
    [listed] = [
        g for g in cli_json("group", "list", "-b", cluster.bootstrap) if g["group_id"] == group
    ]
    assert (listed["state"], listed["members"], listed["protocol_type"]) == ("Empty", 0, None)

    reset = run_cli(
        "group", "reset-offsets", group, "--topic", TOPIC, "--partition", "0",
        "--to-offset", "2", "--execute", "-b", cluster.bootstrap,
    )  # fmt: skip
    assert reset.returncode == 0, reset
    assert committed(cluster, group)[0] == 2
    assert first_offset_read(cluster, group, 0) == 2


def test_kafka_admin_client_lists_describes_reads_and_deletes_groups(cluster: Cluster) -> None:
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KpTopicPartition

    group = "admin-seen"
    c = consumer(cluster, group)
    try:
        c.assign(tps(2))
        c.commit(offsets=tps((2, 4)), asynchronous=False)
    finally:
        c.close()
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap, request_timeout_ms=30_000)
    try:
        with (
            Consumer(
                TOPIC,
                bootstrap_servers=cluster.bootstrap,
                group_id="native",
                auto_offset_reset="earliest",
            ) as native,
            Admin(cluster.bootstrap) as raftlog_admin,
        ):

            def stable() -> bool:
                native.poll(100)  # joins the group, then reads
                return bool(raftlog_admin.describe_group("native")["state"] == "Stable")

            wait_for(stable, WAIT_S, "the raftlog group Stable")
            listed = {g["group_id"]: g["protocol_type"] for g in admin.list_groups()}
            # An offsets-only group is Kafka's "" (its tools list it); raftlog's own is shown
            # as such (Kafka's tools leave it out instead of misreading it).
            assert listed[group] == "" and listed["native"] == "raftlog"

            described = admin.describe_groups([group, "native", "never-made"])
            assert described[group]["group_state"] == "Empty" and described[group]["error"] is None
            assert described["never-made"]["group_state"] == "Dead"
            [member] = described["native"]["members"]
            assert described["native"]["group_state"] == "Stable"
            assert member["member_metadata"]["topics"] == [TOPIC]
            owned = member["member_assignment"]["assigned_partitions"]
            assert owned == [{"topic": TOPIC, "partitions": list(range(PARTITIONS))}]

            offsets = admin.list_group_offsets(group)[group]
            assert {tp: o.offset for tp, o in offsets.items()} == {KpTopicPartition(TOPIC, 2): 4}

            deleted = admin.delete_groups([group, "native", "never-made"])
            assert deleted == {
                group: "OK",
                "native": "NonEmptyGroupError",
                "never-made": "GroupIdNotFoundError",
            }
        listed = {g["group_id"] for g in admin.list_groups()}
        assert group not in listed and "native" in listed
    finally:
        admin.close()


def test_find_coordinator_from_another_node_names_the_controller(cluster: Cluster) -> None:
    controller = cluster.wait_controller(WAIT_S)
    other = next(i for i in cluster.nodes if i != controller)
    with KafkaRawClient(kafka_address(cluster, other)) as raw:
        for version in (0, 1, 2):
            body = raw.request(ApiKey.FIND_COORDINATOR, version, FindCoordinatorRequest("g"))
            answer = FindCoordinatorResponse.decode(body, version)
            assert answer.error_code == 0 and answer.node_id == controller
            assert f"{answer.host}:{answer.port}" == kafka_address(cluster, controller)
        # The other node is not the coordinator: a commit sent to it is NOT_COORDINATOR.
        request = commit_request("elsewhere", 0)
        body = raw.request(ApiKey.OFFSET_COMMIT, 7, request)
        codes = partition_codes(OffsetCommitResponse.decode(body, 7))
        assert codes == [ErrorCode.NOT_COORDINATOR]
        tx = raw.request(ApiKey.FIND_COORDINATOR, 2, FindCoordinatorRequest("tx", 1))
        answer = FindCoordinatorResponse.decode(tx, 2)
        assert answer.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert "transactions" in (answer.error_message or "")


def commit_request(group: str, *partitions: int) -> OffsetCommitRequest:
    entries = tuple(OffsetCommitRequestPartition(p, 1, "") for p in partitions)
    return OffsetCommitRequest(group, -1, "", (OffsetCommitRequestTopic(TOPIC, entries),))


def partition_codes(answer: OffsetCommitResponse) -> list[int]:
    return [p.error_code for t in answer.topics for p in t.partitions]


def test_a_commit_naming_a_missing_partition_stores_nothing(cluster: Cluster) -> None:
    controller = cluster.wait_controller(WAIT_S)
    with KafkaRawClient(kafka_address(cluster, controller)) as raw:
        body = raw.request(ApiKey.OFFSET_COMMIT, 7, commit_request("missing", 0, PARTITIONS))
        assert partition_codes(OffsetCommitResponse.decode(body, 7)) == [
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ]
        for version in (1, 5):
            fetch = OffsetFetchRequest("missing", (OffsetFetchRequestTopic(TOPIC, (0, 1)),))
            answer = OffsetFetchResponse.decode(
                raw.request(ApiKey.OFFSET_FETCH, version, fetch), version
            )
            assert answer.error_code == 0
            assert [
                (p.partition_index, p.committed_offset, p.metadata, p.error_code)
                for p in answer.topics[0].partitions
            ] == [
                (0, -1, "", 0),
                (1, -1, "", 0),
            ]
        every = OffsetFetchResponse.decode(
            raw.request(ApiKey.OFFSET_FETCH, 5, OffsetFetchRequest("never-made", None)), 5
        )
        assert every.topics == () and every.error_code == 0


def test_kafka_python_and_aiokafka_commit_what_librdkafka_reads(cluster: Cluster) -> None:
    """The other clients' OffsetCommit and OffsetFetch (their own versions) on one registry."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition
    from kafka.structs import OffsetAndMetadata

    kp = KafkaConsumer(
        bootstrap_servers=cluster.kafka_bootstrap, group_id="kafka-python", enable_auto_commit=False
    )
    try:
        tp = KpTopicPartition(TOPIC, 1)
        kp.assign([tp])
        kp.commit({tp: OffsetAndMetadata(6, "kp", -1)})
        assert kp.committed(tp) == 6
    finally:
        kp.close()
    assert committed(cluster, "kafka-python")[1] == 6

    async def aiokafka_commit() -> int | None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition as AioTopicPartition

        consumer = AIOKafkaConsumer(
            bootstrap_servers=cluster.kafka_bootstrap, group_id="aiokafka", enable_auto_commit=False
        )
        await consumer.start()
        try:
            tp = AioTopicPartition(TOPIC, 2)
            consumer.assign([tp])
            await consumer.commit({tp: 8})
            return await consumer.committed(tp)
        finally:
            await consumer.stop()

    assert asyncio.run(aiokafka_commit()) == 8
    assert committed(cluster, "aiokafka")[2] == 8


def test_a_subscribed_kafka_group_is_shown_by_raftlogs_and_kafkas_tools(cluster: Cluster) -> None:
    """A confluent-kafka group (subscribe): its member, assignment and commits, through
    `raftlog group` and kafka-python's admin client, while it runs and after it left."""
    from kafka import KafkaAdminClient

    group = "subscribed"
    c = consumer(cluster, group)
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap, request_timeout_ms=30_000)
    try:
        c.subscribe([TOPIC])
        read: dict[int, int] = {}
        deadline = time.monotonic() + WAIT_S
        while len(read) < PARTITIONS or min(read.values()) < RECORDS - 1:
            assert time.monotonic() < deadline, f"read only {read} in {WAIT_S} s"
            msg = c.poll(clients.POLL_S)
            if msg is not None and msg.error() is None:
                read[msg.partition()] = msg.offset()
        c.commit(asynchronous=False)

        shown = cli_json("group", "describe", group, "-b", cluster.bootstrap)
        assert (shown["state"], shown["protocol_type"]) == ("Stable", "consumer")
        [member] = shown["members"]
        assert member["topics"] == [TOPIC]
        assert sorted((a["topic"], a["partition"]) for a in member["assignment"]) == [
            (TOPIC, p) for p in range(PARTITIONS)
        ]
        assert {
            (p["partition"], p["committed"], p["lag"], p["owner"]) for p in shown["partitions"]
        } == {(p, RECORDS, 0, member["member_id"]) for p in range(PARTITIONS)}
        text = run_cli("group", "describe", group, "-b", cluster.bootstrap)
        assert text.returncode == 0, text
        assert text.stdout.startswith(f"Group {group}  type consumer  state Stable"), text.stdout

        described = admin.describe_groups([group])[group]
        assert (described["group_state"], described["protocol_type"]) == ("Stable", "consumer")
        assert described["protocol_data"] == shown["protocol"]
        [kafka_member] = described["members"]
        assert kafka_member["member_id"] == member["member_id"]
        assert kafka_member["member_metadata"]["topics"] == [TOPIC]
        assert kafka_member["member_assignment"]["assigned_partitions"] == [
            {"topic": TOPIC, "partitions": list(range(PARTITIONS))}
        ]
        assert {g["group_id"]: g["protocol_type"] for g in admin.list_groups()}[group] == "consumer"
        assert admin.delete_groups([group]) == {group: "NonEmptyGroupError"}
    finally:
        c.close()  # leaves the group
        admin.close()
    left = wait_for(
        lambda: (
            (d := cli_json("group", "describe", group, "-b", cluster.bootstrap))["state"] == "Empty"
            and d
        ),
        WAIT_S,
        "the group Empty after its member left",
    )
    assert left["protocol_type"] == "consumer" and left["members"] == []
    assert {(o["partition"], o["offset"]) for o in left["offsets"]} == {
        (p, RECORDS) for p in range(PARTITIONS)
    }
