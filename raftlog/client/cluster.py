"""`ClusterClient`: bootstrap, metadata cache and one connection per broker, for every client.

Producers, consumers and admin clients route requests by this metadata: the leader of a
partition, the brokers' addresses. A retriable error (NotLeaderOrFollower, UnknownTopic, a
lost connection) makes the caller refresh metadata and retry; this is what lets clients follow
leader changes without user code.

Metadata, and the other requests any broker can answer, go to one broker at a time ("sticky",
so a client reads its own admin changes), except a suspect one: a broker whose request timed
out lately, or that a caller reported (`suspect`). A partition leader cut off from its
followers and the controller but not from clients answers metadata at once, with its own
stale view ("I lead"), while its acks=all produce requests hang: asking it again after each
timeout kept producers on it for as long as the cut lasted (20-25 s in chaos runs).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Iterable, Sequence
from typing import Any

from raftlog import protocol
from raftlog.client.connection import BrokerConnection, ResponseT
from raftlog.errors import (
    BrokerNotAvailableError,
    InvalidConfigError,
    RaftlogError,
    RaftlogTimeoutError,
    UnknownTopicOrPartitionError,
    error_from_code,
)
from raftlog.messages.metadata import MetadataRequest, MetadataResponse
from raftlog.messages.offsets import ListOffsetsRequest, ListOffsetsResponse
from raftlog.metadata.model import BrokerInfo, PartitionInfo, TopicInfo
from raftlog.topics import TopicPartition

log = logging.getLogger(__name__)

UNKNOWN_TOPIC_WAIT_S = 1.0
# Brokers asked for metadata, one after the other, before a connection error reaches the caller.
METADATA_ATTEMPTS = 3
# How long a broker stays suspect after a timeout: asked for metadata only when no other broker
# can be reached. A cut-off leader is fenced and replaced within seconds; 30 s outlasts that on
# a loaded machine, and costs nothing when the broker was only slow (another one answers).
SUSPECT_S = 30.0


def parse_bootstrap(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """'host:port,host:port' or a list of 'host:port' -> [(host, port)]."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidConfigError(
                f"bootstrap server {item!r} must be host:port with a port in 1..65535"
            )
        out.append((host, int(port)))
    if not out:
        raise InvalidConfigError("bootstrap_servers is empty")
    return out


class ClusterClient:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        client_id: str = "raftlog",
        request_timeout_ms: int = 30_000,
        connect_timeout_ms: int = 10_000,
    ):
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        self.connect_timeout_s = connect_timeout_ms / 1000
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.controller_id = -1
        self._conns: dict[int | tuple[str, int], BrokerConnection] = {}
        self._connecting: dict[int | tuple[str, int], asyncio.Future[BrokerConnection]] = {}
        self._metadata_lock: asyncio.Lock | None = None
        self._sticky: int | tuple[str, int] | None = None
        # (host, port) -> monotonic time it became suspect (see the module docstring).
        self._suspects: dict[tuple[str, int], float] = {}
        # (topic id, partition) -> the newest partition state seen (survives invalidate()).
        self._partitions_seen: dict[tuple[str, int], PartitionInfo] = {}

    # -- connections ---------------------------------------------------------------------------

    async def _connect(self, key: int | tuple[str, int], host: str, port: int) -> BrokerConnection:
        conn = self._conns.get(key)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[BrokerConnection] = asyncio.get_running_loop().create_future()
        self._connecting[key] = fut
        try:
            conn = await BrokerConnection.connect(
                host, port, self.client_id, self.connect_timeout_s
            )
            conn.on_timeout = lambda: self._suspect_address(host, port)
            self._conns[key] = conn
            fut.set_result(conn)
            return conn
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved: the awaiting caller gets it via raise
            raise
        finally:
            del self._connecting[key]

    async def connection(self, node_id: int) -> BrokerConnection:
        broker = self.brokers.get(node_id)
        if broker is None:
            raise BrokerNotAvailableError(f"broker {node_id} is not in the cluster metadata")
        return await self._connect(node_id, broker.host, broker.port)

    def ready_connection(self, node_id: int) -> BrokerConnection | None:
        """The open connection to a broker, if there is one (no connecting, no waiting)."""
        conn = self._conns.get(node_id)
        return conn if conn is not None and not conn.closed else None

    def suspect(self, node_id: int) -> None:
        """Ask broker `node_id` for metadata only if no other broker answers, for SUSPECT_S:
        its answer to a request the caller sent was a timeout (RequestTimedOut)."""
        broker = self.brokers.get(node_id)
        if broker is not None:
            self._suspect_address(broker.host, broker.port)

    def _suspect_address(self, host: str, port: int) -> None:
        self._suspects[host, port] = time.monotonic()

    def _is_suspect(self, host: str, port: int) -> bool:
        since = self._suspects.get((host, port))
        return since is not None and time.monotonic() - since < SUSPECT_S

    async def any_connection(self) -> BrokerConnection:
        """A connection to some broker: the one used last if it is still open and not
        suspect (so that one client reads its own writes: the broker that proposed a change
        has applied it), else a known broker, else a bootstrap server; suspects last."""
        if self._sticky is not None:
            conn = self._conns.get(self._sticky)
            if conn is not None and not conn.closed and not self._is_suspect(conn.host, conn.port):
                return conn
        candidates: list[tuple[int | tuple[str, int], str, int]] = [
            (b.node_id, b.host, b.port) for b in self.brokers.values()
        ]
        random.shuffle(candidates)
        candidates += [((h, p), h, p) for h, p in self.bootstrap]
        candidates.sort(key=lambda c: self._is_suspect(c[1], c[2]))  # stable: order kept
        errors = []
        for key, host, port in candidates:
            try:
                conn = await self._connect(key, host, port)
            except BrokerNotAvailableError as e:
                errors.append(str(e))
                continue
            self._sticky = key
            return conn
        raise BrokerNotAvailableError("no broker reachable: " + "; ".join(dict.fromkeys(errors)))

    async def request(
        self,
        node_id: int | None,
        api_key: int,
        body: dict[str, Any],
        payload: Sequence[bytes | memoryview] = (),
    ) -> ResponseT:
        conn = await (self.any_connection() if node_id is None else self.connection(node_id))
        return await conn.request(api_key, body, payload, self.request_timeout_s)

    # -- metadata ------------------------------------------------------------------------------

    async def refresh_metadata(
        self, topics: Iterable[str] | None = None, allow_auto_create: bool = False
    ) -> MetadataResponse:
        if self._metadata_lock is None:
            self._metadata_lock = asyncio.Lock()
        request = MetadataRequest(
            None if topics is None else tuple(topics), allow_auto_create
        ).to_body()
        async with self._metadata_lock:
            # Metadata may come from any broker: one that died or froze under the request is
            # dropped (its connection closed) and the next one asked, as Kafka's
            # least-loaded-node choice does, before an error reaches the caller.
            for attempt in range(METADATA_ATTEMPTS):
                conn = await self.any_connection()
                try:
                    body, _ = await conn.request(
                        protocol.ApiKey.METADATA, request, (), self.request_timeout_s
                    )
                    break
                except (BrokerNotAvailableError, RaftlogTimeoutError):
                    self._sticky = None
                    conn.close()
                    if attempt == METADATA_ATTEMPTS - 1:
                        raise
        answer = MetadataResponse.from_body(body)
        self.brokers = {b.node_id: b for b in answer.brokers}
        self.controller_id = answer.controller_id
        if topics is None:
            self.topics.clear()  # in place: producers hold a reference to this dict
        for t in answer.topics:
            if t.info is None:
                self.topics.pop(t.name, None)
            else:
                self.topics[t.name] = self._newest(t.info)
        return answer

    def _newest(self, info: TopicInfo) -> TopicInfo:
        """Keep, per partition, the state with the highest leader epoch seen so far: a broker
        whose metadata lags must not send the client back to a deposed leader (Kafka ignores
        metadata with an older leader epoch the same way)."""
        parts = []
        for p in info.partitions:
            key = (info.topic_id, p.partition)
            seen = self._partitions_seen.get(key)
            if seen is not None and seen.leader_epoch > p.leader_epoch:
                p = seen
            self._partitions_seen[key] = p
            parts.append(p)
        return dataclasses.replace(info, partitions=tuple(parts))

    async def topic(
        self, name: str, allow_auto_create: bool = False, wait_s: float = UNKNOWN_TOPIC_WAIT_S
    ) -> TopicInfo:
        """Topic metadata, fetched if not cached; UnknownTopicOrPartitionError if none.

        An unknown topic is asked for again for up to `wait_s`: in a cluster, a topic created
        a moment ago through another node may not have reached the broker asked yet (the
        metadata reaches every node within a Raft round, tens of milliseconds).
        """
        info = self.topics.get(name)
        if info is not None:
            return info
        deadline = time.monotonic() + wait_s
        while True:
            answer = await self.refresh_metadata([name], allow_auto_create)
            info = self.topics.get(name)
            if info is not None:
                return info
            error: RaftlogError = UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            for t in answer.topics:
                if t.name == name and t.error:
                    error = error_from_code(t.error, t.message or str(error))
            if not isinstance(error, UnknownTopicOrPartitionError) or time.monotonic() >= deadline:
                raise error
            await asyncio.sleep(0.05)

    def leader_for(self, tp: TopicPartition) -> int:
        info = self.topics.get(tp.topic)
        if info is None or not 0 <= tp.partition < len(info.partitions):
            raise UnknownTopicOrPartitionError(f"unknown topic or partition {tp}")
        leader = info.partitions[tp.partition].leader
        if leader < 0:
            raise BrokerNotAvailableError(f"partition {tp} has no leader")
        return leader

    async def list_offsets(
        self, specs: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """{tp: -2 earliest | -1 latest | timestamp ms} -> {tp: (offset, timestamp)}.

        An offset of -1 means no record has a timestamp that late.

        Retriable errors are retried with fresh metadata: an unknown topic briefly (a topic
        created a moment ago through another node), anything else (a leader that moved, died
        or is being elected, a broker that cannot be reached) for up to the request timeout,
        long enough for a failover (the broker session timeout plus an election)."""
        started = time.monotonic()
        while True:
            try:
                return await self._list_offsets_once(specs)
            except RaftlogError as e:
                if not e.retriable:
                    raise
                waited = time.monotonic() - started
                if isinstance(e, UnknownTopicOrPartitionError):
                    if waited >= UNKNOWN_TOPIC_WAIT_S:
                        raise
                elif waited >= max(self.request_timeout_s, UNKNOWN_TOPIC_WAIT_S):
                    raise
                self.invalidate()
                await asyncio.sleep(0.05 if waited < 1 else 0.2)

    async def _list_offsets_once(
        self, specs: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        out, failed = await self.list_offsets_partial(specs)
        if failed:
            raise next(iter(failed.values()))
        return out

    async def list_offsets_partial(
        self, specs: dict[TopicPartition, int]
    ) -> tuple[dict[TopicPartition, tuple[int, int]], dict[TopicPartition, RaftlogError]]:
        """One round of `list_offsets` that answers what it can: the offsets found, and per
        partition the retriable error that kept it from an answer (no leader, a leader that
        cannot be reached or has moved, a topic not known yet), so that one dead broker holds
        up only its own partitions. A non-retriable error is raised."""
        out: dict[TopicPartition, tuple[int, int]] = {}
        failed: dict[TopicPartition, RaftlogError] = {}
        topic_errors: dict[str, RaftlogError] = {}
        for topic in dict.fromkeys(tp.topic for tp in specs):
            try:
                await self.topic(topic)
            except RaftlogError as e:
                if not e.retriable:
                    raise
                topic_errors[topic] = e
        by_node: dict[int, dict[TopicPartition, int]] = {}
        for tp, ts in specs.items():
            error = topic_errors.get(tp.topic)
            if error is None:
                try:
                    node = self.leader_for(tp)
                except RaftlogError as e:
                    if not e.retriable:
                        raise
                    error = e
            if error is not None:
                failed[tp] = error
                continue
            by_node.setdefault(node, {})[tp] = ts
        for node, timestamps in by_node.items():
            request = ListOffsetsRequest.of(timestamps)
            try:
                body, _ = await self.request(node, protocol.ApiKey.LIST_OFFSETS, request.to_body())
            except RaftlogError as e:
                if not e.retriable:
                    raise
                for tp, _ in request.partitions():
                    failed[tp] = e
                continue
            for tp, r in ListOffsetsResponse.from_body(body).results():
                if r.error:
                    error = error_from_code(r.error, r.message or "")
                    if not error.retriable:
                        raise error
                    failed[tp] = error
                else:
                    out[tp] = (r.offset, r.timestamp)
        for topic in {tp.topic for tp in failed}:
            self.invalidate(topic)  # the next round asks for fresh metadata
        return out, failed

    def invalidate(self, topic: str | None = None) -> None:
        if topic is None:
            self.topics.clear()
        else:
            self.topics.pop(topic, None)

    async def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


def check_error(code: int, message: str | None, what: str) -> None:
    if code:
        raise error_from_code(code, message or what)


__all__ = ["ClusterClient", "RaftlogError", "check_error", "parse_bootstrap"]
