"""Admin clients: create, delete, list and describe topics, and list offsets.

`AsyncAdmin` for asyncio code; `Admin` runs it on a private event loop in the caller's thread.
Errors come back as the matching RaftlogError (TopicAlreadyExistsError, InvalidTopicError, ...)
with the broker's message. Requests that can be sent again with the same effect (describe_cluster,
elect_leaders, alter_partition_reassignments, alter_topic_config, describe_replicas) retry a
retriable refusal
(the metadata quorum's leader changed under the command, a broker gone) until the request
timeout; creating and deleting do not, since a retry of one that took effect would be refused
(TopicAlreadyExistsError) where it had succeeded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from raftlog import protocol
from raftlog.client.cluster import ClusterClient
from raftlog.client.group import coordinator_request
from raftlog.errors import RaftlogError, error_from_code
from raftlog.messages.groups import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ResetOffsetsRequest,
    ResetOffsetsResponse,
)
from raftlog.messages.metadata import DescribeClusterRequest
from raftlog.messages.partitions import ElectLeadersRequest, ElectLeadersResponse
from raftlog.messages.replicas import (
    DescribeReplicasRequest,
    DescribeReplicasResponse,
    ReplicaState,
)
from raftlog.messages.topics import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    NewPartitions,
    NewTopic,
    PartitionFigures,
)
from raftlog.metadata.model import BrokerInfo, TopicInfo
from raftlog.topics import TopicPartition

# A retriable refusal of a repeatable request is tried again after this, doubling up to the max.
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_S_MAX = 1.0


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    """One partition as its leader reports it. The log figures are None when no leader could
    tell them (the partition is offline, or its leader did not answer): a figure from another
    replica, or a zero, would read as if the partition were empty."""

    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start_offset: int | None
    log_end_offset: int | None
    high_watermark: int | None
    size_bytes: int | None
    segments: int | None
    # KIP-966's eligible leader replicas (out of the ISR, holding every committed record).
    elr: tuple[int, ...] = ()
    # Each replica's log end offset as the leader knows it (-1: no fetch seen yet).
    log_end_offsets: dict[int, int] | None = None


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str
    partitions: tuple[PartitionDescription, ...]
    config: dict[str, Any]
    overrides: dict[str, str]


@dataclass(frozen=True, slots=True)
class ReplicaStates:
    """Every live broker's own replicas (AsyncAdmin.describe_replicas), and the live brokers
    that did not answer, with why: a caller shows what it has and says what is missing."""

    replicas: tuple[ReplicaState, ...]
    unanswered: dict[int, str]  # node id -> the error its request ended with

    def get(self, node_id: int, tp: TopicPartition) -> ReplicaState | None:
        """Broker `node_id`'s replica of `tp`, if it reported one."""
        for r in self.replicas:
            if r.node_id == node_id and r.tp == tp:
                return r
        return None


class AsyncAdmin:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        client_id: str = "raftlog-admin",
        request_timeout_ms: int = 30_000,
    ):
        self.client = ClusterClient(bootstrap_servers, client_id, request_timeout_ms)

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """`replication_factor` None: the brokers' default_replication_factor (KIP-464)."""
        spec = NewTopic(
            name, partitions, {k: str(v) for k, v in (config or {}).items()}, replication_factor
        )
        request = CreateTopicsRequest((spec,))
        body, _ = await self.client.request(None, protocol.ApiKey.CREATE_TOPICS, request.to_body())
        for r in CreateTopicsResponse.from_body(body).topics:
            if r.error:
                raise error_from_code(r.error, r.message or "")

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> None:
        """Grow topic `name` to `count` partitions (never fewer: InvalidPartitionsError).
        `assignments`: the new partitions' replicas, one broker list each (None: the
        controller places them); `validate_only`: check, grow nothing."""
        spec = NewPartitions(
            name, count, None if assignments is None else tuple(tuple(a) for a in assignments)
        )
        request = CreatePartitionsRequest((spec,), validate_only)
        body, _ = await self.client.request(
            None, protocol.ApiKey.CREATE_PARTITIONS, request.to_body()
        )
        for r in CreatePartitionsResponse.from_body(body).topics:
            if r.error:
                raise error_from_code(r.error, r.message or "")

    async def elect_leaders(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, RaftlogError | None]:
        """Preferred-leader elections: each partition's preferred leader (its first replica)
        leads again if it is a live in-sync replica. `partitions` None: every partition whose
        preferred leader does not lead. Returns each partition's outcome: None (it leads
        now) or the error (ElectionNotNeededError: it led already;
        PreferredLeaderNotAvailableError; UnknownTopicOrPartitionError)."""
        wanted = None if partitions is None else tuple(TopicPartition(*tp) for tp in partitions)
        body = await self._repeatable(
            protocol.ApiKey.ELECT_LEADERS, ElectLeadersRequest(wanted).to_body()
        )
        return {
            r.tp: None if r.error == 0 else error_from_code(r.error, r.message or "")
            for r in ElectLeadersResponse.from_body(body).partitions
        }

    async def alter_topic_config(
        self, name: str, changes: Mapping[str, str | int | None], validate_only: bool = False
    ) -> dict[str, str]:
        """Change topic `name`'s configs on the live topic (Kafka's kafka-configs --alter):
        each key set to its value, or back to the default with None. Returns the topic's
        config afterwards (with `validate_only`: as it would be; nothing changes). Refused
        whole (InvalidConfigError naming the key) for an unknown key, a bad value, or
        durability.policy / min.insync.replicas, which stay as the topic was created."""
        body: dict[str, Any] = {
            "topic": name,
            "changes": {str(k): None if v is None else str(v) for k, v in changes.items()},
        }
        if validate_only:
            body["validate_only"] = True
        answer = await self._repeatable(protocol.ApiKey.ALTER_TOPIC_CONFIG, body)
        return {str(k): str(v) for k, v in answer["config"].items()}

    async def alter_partition_reassignments(
        self, moves: dict[TopicPartition, Sequence[int] | None], throttle: int | None = None
    ) -> dict[TopicPartition, RaftlogError | None]:
        """Move each partition's replicas to the given brokers (the first the preferred
        leader), or cancel its reassignment under way (None). Returns each one's outcome:
        None (started, or done at once) or the error. `throttle`, if given, replaces the
        replication throttle (bytes per second each broker may fetch for the replicas it is
        adding; 0 removes it) in the same metadata command."""
        if throttle is not None and throttle < 0:
            raise ValueError(f"throttle {throttle}: bytes per second must be >= 0")
        body: dict[str, Any] = {
            "reassignments": [
                [tp.topic, tp.partition, None if r is None else list(r)] for tp, r in moves.items()
            ]
        }
        if throttle is not None:
            body["throttle"] = throttle
        answer = await self._repeatable(protocol.ApiKey.ALTER_PARTITION_REASSIGNMENTS, body)
        return {
            r.tp: None if r.error == 0 else error_from_code(r.error, r.message or "")
            for r in ElectLeadersResponse.from_body(answer).partitions
        }

    async def delete_topics(self, names: Iterable[str]) -> None:
        request = DeleteTopicsRequest(tuple(names))
        body, _ = await self.client.request(None, protocol.ApiKey.DELETE_TOPICS, request.to_body())
        for r in DeleteTopicsResponse.from_body(body).topics:
            if r.error:
                raise error_from_code(r.error, r.message or "")

    async def list_topics(self) -> dict[str, TopicInfo]:
        await self.client.refresh_metadata(None)
        return dict(self.client.topics)

    async def brokers(self) -> list[BrokerInfo]:
        await self.client.refresh_metadata([])
        return list(self.client.brokers.values())

    async def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        """Topics with their configs and, per partition, offsets and size as its leader
        reports them (every broker is asked about the partitions it hosts)."""
        wanted = None if names is None else tuple(names)
        await self.client.refresh_metadata(wanted)
        request = DescribeConfigsRequest(wanted).to_body()
        answer = DescribeConfigsResponse.from_body(
            (await self.client.request(None, protocol.ApiKey.DESCRIBE_CONFIGS, request))[0]
        )
        # Partition figures come from each partition's leader.
        stats: dict[tuple[str, int], PartitionFigures] = {}
        for node in sorted(self.client.brokers):
            try:
                nb, _ = await self.client.request(node, protocol.ApiKey.DESCRIBE_CONFIGS, request)
            except RaftlogError:
                continue  # an unreachable broker: the partitions it leads show None
            for t in DescribeConfigsResponse.from_body(nb).topics:
                info = self.client.topics.get(t.name)
                for row in t.partitions:
                    if info is not None and info.partitions[row.partition].leader == node:
                        stats[(t.name, row.partition)] = row
        out = []
        for t in answer.topics:
            if t.error:
                raise error_from_code(t.error, t.message or "")
            info = self.client.topics.get(t.name)
            parts = []
            for row in t.partitions:
                p = row.partition
                figures = stats.get((t.name, p))
                meta = info.partitions[p] if info is not None else None
                parts.append(
                    PartitionDescription(
                        p,
                        meta.leader if meta else -1,
                        meta.leader_epoch if meta else -1,
                        meta.replicas if meta else (),
                        meta.isr if meta else (),
                        figures.log_start_offset if figures else None,
                        figures.log_end_offset if figures else None,
                        figures.high_watermark if figures else None,
                        figures.size_bytes if figures else None,
                        figures.segments if figures else None,
                        meta.elr if meta else (),
                        figures.replica_log_end_offsets if figures else None,
                    )
                )
            topic_id = t.topic_id or ""  # a topic without an error has one
            out.append(TopicDescription(t.name, topic_id, tuple(parts), t.config, t.overrides))
        return out

    async def list_offsets(
        self, specs: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """{tp: -2 earliest | -1 latest | timestamp ms} -> {tp: (offset, timestamp)}."""
        return await self.client.list_offsets(specs)

    async def list_offsets_known(
        self, specs: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """`list_offsets`, with None for a partition no leader can answer for now (offline,
        or its leader unreachable) instead of failing them all."""
        found, failed = await self.client.list_offsets_partial(specs)
        if failed:
            # A leader that moved, or a topic a broker has not applied yet: ask once more.
            self.client.invalidate()
            again, _ = await self.client.list_offsets_partial({tp: specs[tp] for tp in failed})
            found.update(again)
        return {tp: found.get(tp) for tp in specs}

    # -- groups --------------------------------------------------------------------------------

    async def _group_call(self, group_id: str, api: int, body: dict[str, Any]) -> dict[str, Any]:
        return await coordinator_request(
            self.client, group_id, api, body, self.client.request_timeout_s
        )

    async def list_groups(self) -> list[dict[str, Any]]:
        body = await self._group_call(
            "", protocol.ApiKey.LIST_GROUPS, ListGroupsRequest().to_body()
        )
        return list(ListGroupsResponse.from_body(body).groups)

    async def describe_group(self, group_id: str) -> dict[str, Any]:
        """Members, assignment, generation, committed offsets, and lag per partition: the
        DescribeGroups answer's map, plus "partitions"."""
        request = DescribeGroupsRequest(group_id)
        answer = DescribeGroupsResponse.from_body(
            await self._group_call(group_id, protocol.ApiKey.DESCRIBE_GROUPS, request.to_body())
        )
        committed = {o.tp: o.offset for o in answer.offsets}
        owners = {tp: m.member_id for m in answer.members for tp in m.assignment}
        tps = sorted(set(committed) | set(owners))
        ends = await self.list_offsets_known({tp: -1 for tp in tps}) if tps else {}
        desc = answer.to_body()
        desc["partitions"] = []
        for tp in tps:
            end = ends[tp]
            log_end = None if end is None else end[0]  # None: offline, no leader to ask
            desc["partitions"].append(
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "committed": committed.get(tp),
                    "log_end_offset": log_end,
                    "lag": None
                    if tp not in committed or log_end is None
                    else max(log_end - committed[tp], 0),
                    "owner": owners.get(tp),
                }
            )
        return desc

    async def reset_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> int:
        """Set committed offsets by hand (the replay primitive); the group must be empty."""
        request = ResetOffsetsRequest.of(group_id, offsets)
        body = await self._group_call(group_id, protocol.ApiKey.RESET_OFFSETS, request.to_body())
        return ResetOffsetsResponse.from_body(body).reset

    async def delete_group(self, group_id: str) -> None:
        request = DeleteGroupsRequest(group_id)
        await self._group_call(group_id, protocol.ApiKey.DELETE_GROUPS, request.to_body())

    async def describe_cluster(self) -> dict[str, Any]:
        """Controllers, who leads, Raft term and commit index, brokers, partitions."""
        body = await self._repeatable(
            protocol.ApiKey.DESCRIBE_CLUSTER, DescribeClusterRequest().to_body()
        )
        return body  # the documented map (DescribeClusterResponse), whole: the CLI prints it

    async def describe_replicas(self, topics: Iterable[str] | None = None) -> ReplicaStates:
        """Every live (unfenced) broker's own replicas of `topics` (None: all): sizes, offsets,
        and for compacted logs the dirty ratio and the last clean, local state each broker
        keeps for itself (Kafka's DescribeLogDirs). The brokers are asked at once, each
        retried as `_repeatable` does; one that still does not answer is in `unanswered`."""
        cluster = await self.describe_cluster()
        live = sorted(
            b["node_id"]
            for b in cluster["brokers"]
            if not b["fenced"] and not b.get("shutting_down")
        )
        await self.client.refresh_metadata([])  # their addresses on the listener we came in by
        request = DescribeReplicasRequest(None if topics is None else tuple(topics)).to_body()
        answers: dict[int, DescribeReplicasResponse | str] = {}

        async def ask(node: int) -> None:
            try:
                body = await self._repeatable(protocol.ApiKey.DESCRIBE_REPLICAS, request, node)
                answers[node] = DescribeReplicasResponse.from_body(body)
            except RaftlogError as e:
                answers[node] = f"{type(e).__name__}: {e}"

        async with asyncio.TaskGroup() as tg:
            for node in live:
                tg.create_task(ask(node))
        replicas: list[ReplicaState] = []
        unanswered = {}
        for node in live:
            answer = answers[node]
            if isinstance(answer, str):
                unanswered[node] = answer
            elif answer.node_id != node:  # its address is another broker's now
                unanswered[node] = f"node {answer.node_id} answered at node {node}'s address"
            else:
                replicas += answer.replicas
        return ReplicaStates(tuple(replicas), unanswered)

    async def _repeatable(
        self, api_key: int, body: dict[str, Any], node_id: int | None = None
    ) -> dict[str, Any]:
        """The answer to a request that may be sent again with the same effect (a read, or a
        write that sets a state rather than adds to it). A retriable refusal (the metadata
        quorum's leader changed under the command, a broker gone, a timeout) is retried, with
        a backoff, until the request timeout has passed, as Kafka's admin client retries: the
        caller sees only the errors retrying cannot cure. `node_id`: ask that broker (None:
        any)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.client.request_timeout_s
        delay = RETRY_BACKOFF_S
        while True:
            try:
                answer, _ = await self.client.request(node_id, api_key, body)
                return answer
            except RaftlogError as e:
                if not e.retriable or loop.time() + delay >= deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_BACKOFF_S_MAX)

    async def close(self) -> None:
        await self.client.close()


class Admin:
    def __init__(self, bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092", **kw: Any):
        self._loop = asyncio.new_event_loop()
        self._async = AsyncAdmin(bootstrap_servers, **kw)

    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """`replication_factor` None: the brokers' default_replication_factor (KIP-464)."""
        self._run(self._async.create_topic(name, partitions, replication_factor, config))

    def create_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> None:
        """Grow topic `name` to `count` partitions (see AsyncAdmin.create_partitions)."""
        self._run(self._async.create_partitions(name, count, assignments, validate_only))

    def elect_leaders(
        self, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, RaftlogError | None]:
        """Preferred-leader elections (see AsyncAdmin.elect_leaders)."""
        return self._run(self._async.elect_leaders(partitions))  # type: ignore[no-any-return]

    def alter_topic_config(
        self, name: str, changes: Mapping[str, str | int | None], validate_only: bool = False
    ) -> dict[str, str]:
        """See AsyncAdmin.alter_topic_config."""
        return self._run(self._async.alter_topic_config(name, changes, validate_only))  # type: ignore[no-any-return]

    def alter_partition_reassignments(
        self, moves: dict[TopicPartition, Sequence[int] | None], throttle: int | None = None
    ) -> dict[TopicPartition, RaftlogError | None]:
        """See AsyncAdmin.alter_partition_reassignments."""
        return self._run(self._async.alter_partition_reassignments(moves, throttle))  # type: ignore[no-any-return]

    def delete_topics(self, names: Iterable[str]) -> None:
        self._run(self._async.delete_topics(names))

    def list_topics(self) -> dict[str, TopicInfo]:
        return self._run(self._async.list_topics())  # type: ignore[no-any-return]

    def brokers(self) -> list[BrokerInfo]:
        return self._run(self._async.brokers())  # type: ignore[no-any-return]

    def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        return self._run(self._async.describe_topics(names))  # type: ignore[no-any-return]

    def list_offsets(
        self, specs: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        return self._run(self._async.list_offsets(specs))  # type: ignore[no-any-return]

    def list_offsets_known(
        self, specs: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        return self._run(self._async.list_offsets_known(specs))  # type: ignore[no-any-return]

    def describe_cluster(self) -> dict[str, Any]:
        return self._run(self._async.describe_cluster())  # type: ignore[no-any-return]

    def describe_replicas(self, topics: Iterable[str] | None = None) -> ReplicaStates:
        """See AsyncAdmin.describe_replicas."""
        return self._run(self._async.describe_replicas(topics))  # type: ignore[no-any-return]

    def list_groups(self) -> list[dict[str, Any]]:
        return self._run(self._async.list_groups())  # type: ignore[no-any-return]

    def describe_group(self, group_id: str) -> dict[str, Any]:
        return self._run(self._async.describe_group(group_id))  # type: ignore[no-any-return]

    def reset_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> int:
        return self._run(self._async.reset_offsets(group_id, offsets))  # type: ignore[no-any-return]

    def delete_group(self, group_id: str) -> None:
        self._run(self._async.delete_group(group_id))

    def close(self) -> None:
        if not self._loop.is_closed():
            self._run(self._async.close())
            self._loop.close()
