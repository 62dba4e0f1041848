"""Admin clients: create, delete, list and describe topics, and list offsets.

`AsyncAdmin` for asyncio code; `Admin` runs it on a private event loop in the caller's thread.
Errors come back as the matching RaftlogError (TopicAlreadyExistsError, InvalidTopicError, ...)
with the broker's message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from raftlog import protocol
from raftlog.client.cluster import ClusterClient
from raftlog.client.group import coordinator_request
from raftlog.errors import RaftlogError, error_from_code
from raftlog.metadata.model import BrokerInfo, TopicInfo
from raftlog.topics import TopicPartition


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
        spec: dict[str, Any] = {
            "name": name,
            "partitions": partitions,
            "config": {k: str(v) for k, v in (config or {}).items()},
        }
        if replication_factor is not None:
            spec["replication_factor"] = replication_factor
        body, _ = await self.client.request(None, protocol.ApiKey.CREATE_TOPICS, {"topics": [spec]})
        for _name, error, message in body["topics"]:
            if error:
                raise error_from_code(error, message or "")

    async def delete_topics(self, names: Iterable[str]) -> None:
        body, _ = await self.client.request(
            None, protocol.ApiKey.DELETE_TOPICS, {"topics": list(names)}
        )
        for _name, error, message in body["topics"]:
            if error:
                raise error_from_code(error, message or "")

    async def list_topics(self) -> dict[str, TopicInfo]:
        await self.client.refresh_metadata(None)
        return dict(self.client.topics)

    async def brokers(self) -> list[BrokerInfo]:
        await self.client.refresh_metadata([])
        return list(self.client.brokers.values())

    async def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicDescription]:
        """Topics with their configs and, per partition, offsets and size as its leader
        reports them (every broker is asked about the partitions it hosts)."""
        wanted = None if names is None else list(names)
        await self.client.refresh_metadata(wanted)
        body, _ = await self.client.request(
            None, protocol.ApiKey.DESCRIBE_CONFIGS, {"topics": wanted}
        )
        # Partition figures come from each partition's leader.
        stats: dict[tuple[str, int], list[Any]] = {}
        for node in sorted(self.client.brokers):
            try:
                nb, _ = await self.client.request(
                    node, protocol.ApiKey.DESCRIBE_CONFIGS, {"topics": wanted}
                )
            except RaftlogError:
                continue  # an unreachable broker: the partitions it leads show None
            for t in nb["topics"]:
                info = self.client.topics.get(t["name"])
                for row in t.get("partitions") or []:
                    if info is not None and info.partitions[row[0]].leader == node:
                        stats[(t["name"], row[0])] = row
        out = []
        for t in body["topics"]:
            if t["error"]:
                raise error_from_code(t["error"], t["message"] or "")
            info = self.client.topics.get(t["name"])
            parts = []
            for row in t["partitions"]:
                p = row[0]
                figures = stats.get((t["name"], p))
                start, end, hw, size, segments = (
                    figures[1:6] if figures is not None else (None,) * 5
                )
                leos = (
                    {int(n): int(o) for n, o in figures[6].items()}
                    if figures is not None and len(figures) > 6
                    else None
                )
                meta = info.partitions[p] if info is not None else None
                parts.append(
                    PartitionDescription(
                        p,
                        meta.leader if meta else -1,
                        meta.leader_epoch if meta else -1,
                        meta.replicas if meta else (),
                        meta.isr if meta else (),
                        start,
                        end,
                        hw,
                        size,
                        segments,
                        meta.elr if meta else (),
                        leos,
                    )
                )
            out.append(
                TopicDescription(
                    t["name"], t["topic_id"], tuple(parts), t["config"], t["overrides"]
                )
            )
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
        body = await self._group_call("", protocol.ApiKey.LIST_GROUPS, {})
        groups: list[dict[str, Any]] = body["groups"]
        return groups

    async def describe_group(self, group_id: str) -> dict[str, Any]:
        """Members, assignment, generation, committed offsets, and lag per partition."""
        desc = await self._group_call(
            group_id, protocol.ApiKey.DESCRIBE_GROUPS, {"group_id": group_id}
        )
        committed = {(t, p): o for t, p, o, *_ in desc["offsets"]}
        owners = {(t, p): m["member_id"] for m in desc["members"] for t, p in m["assignment"]}
        tps = sorted(set(committed) | set(owners))
        ends = (
            await self.list_offsets_known({TopicPartition(t, p): -1 for t, p in tps}) if tps else {}
        )
        desc["partitions"] = []
        for t, p in tps:
            end = ends[TopicPartition(t, p)]
            log_end = None if end is None else end[0]  # None: offline, no leader to ask
            desc["partitions"].append(
                {
                    "topic": t,
                    "partition": p,
                    "committed": committed.get((t, p)),
                    "log_end_offset": log_end,
                    "lag": None
                    if (t, p) not in committed or log_end is None
                    else max(log_end - committed[(t, p)], 0),
                    "owner": owners.get((t, p)),
                }
            )
        return desc

    async def reset_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> int:
        """Set committed offsets by hand (the replay primitive); the group must be empty."""
        body = await self._group_call(
            group_id,
            protocol.ApiKey.RESET_OFFSETS,
            {
                "group_id": group_id,
                "offsets": [[tp.topic, tp.partition, o] for tp, o in sorted(offsets.items())],
            },
        )
        return int(body["reset"])

    async def delete_group(self, group_id: str) -> None:
        await self._group_call(group_id, protocol.ApiKey.DELETE_GROUPS, {"group_id": group_id})

    async def describe_cluster(self) -> dict[str, Any]:
        """Controllers, who leads, Raft term and commit index, brokers, partitions."""
        body, _ = await self.client.request(None, protocol.ApiKey.DESCRIBE_CLUSTER, {})
        return body

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
