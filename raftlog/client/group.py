"""A consumer's membership in a group: coordinator discovery, join, heartbeats, commits.

The coordinator is the active controller's node (FindCoordinator). The group rebalances as in
Kafka's classic protocol (docs/ARCHITECTURE.md, "Consumer groups"): a join is answered once
the rebalance it takes part in has completed, with the new generation and this member's
partitions, which the coordinator computes. A heartbeat answered RebalanceInProgress (or with
another generation, or UnknownMemberId) means this member must commit, give up its partitions
and join again (the consumer does that in its next poll). Commits carry the member id and
generation, so a member that lost a partition in a rebalance cannot overwrite the new owner's
progress (CommitFailedError says why).

Group requests go on a connection of their own to the coordinator, as Kafka's clients do: a
join may wait for the whole rebalance, and a broker answers a connection's requests in order,
so a join on the shared connection would hold up fetches and metadata requests behind it.

Every call retries the errors that say the coordinator is away or elsewhere
(`COORDINATOR_UNAVAILABLE`: NotCoordinator, NotController, BrokerNotAvailable, a timeout) by
finding the coordinator again after a backoff, up to `request_timeout_ms` (a join: up to its
rebalance timeout plus that); the consumer's poll retries past that. Errors that mean
"rejoin" (UnknownMemberId, IllegalGeneration, RebalanceInProgress) or "refused" (CommitFailed)
go back to the caller at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from raftlog import protocol
from raftlog.client.cluster import ClusterClient
from raftlog.client.connection import BrokerConnection
from raftlog.errors import (
    BrokerNotAvailableError,
    IllegalGenerationError,
    NotControllerError,
    NotCoordinatorError,
    RaftlogTimeoutError,
    RebalanceInProgressError,
    RequestTimedOutError,
    UnknownMemberIdError,
)
from raftlog.messages.groups import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from raftlog.topics import TopicPartition

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1
# The coordinator is down, moving (a controller failover) or not this node: find it again.
COORDINATOR_UNAVAILABLE = (
    NotCoordinatorError,
    NotControllerError,
    BrokerNotAvailableError,
    RaftlogTimeoutError,
    RequestTimedOutError,
)


async def coordinator_request(
    client: ClusterClient, group_id: str, api: int, body: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    """Send a group request to the group's coordinator, finding it (again) as needed."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            body_found, _ = await client.request(
                None, protocol.ApiKey.FIND_COORDINATOR, FindCoordinatorRequest(group_id).to_body()
            )
            found = FindCoordinatorResponse.from_body(body_found)
            if found.node_id not in client.brokers:
                await client.refresh_metadata([])
            resp, _ = await client.request(found.node_id, api, body)
            return resp
        except COORDINATOR_UNAVAILABLE as e:
            if time.monotonic() >= deadline:
                raise
            log.debug("group %s: %s; finding the coordinator again", group_id, e)
            client.invalidate()
            await asyncio.sleep(RETRY_BACKOFF_S)


class GroupMembership:
    """One member's view of its group: member id, generation, assignment; the calls that
    change them. Not thread-safe: one asyncio loop drives it."""

    def __init__(
        self,
        client: ClusterClient,
        group_id: str,
        client_id: str,
        instance_id: str | None,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        assignors: Sequence[str],
        request_timeout_ms: int,
    ):
        self.client = client
        self.group_id = group_id
        self.client_id = client_id
        self.instance_id = instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.assignors = list(assignors)
        self.request_timeout_s = request_timeout_ms / 1000
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.assignment: list[TopicPartition] = []
        # The connection group requests use (see the module docstring); None until needed,
        # and again after an error that says the coordinator moved or the connection broke.
        self._conn: BrokerConnection | None = None
        self._coordinator: int | None = None

    async def _coordinator_connection(self) -> BrokerConnection:
        if self._conn is None or self._conn.closed:
            request = FindCoordinatorRequest(self.group_id)
            body, _ = await self.client.request(
                None, protocol.ApiKey.FIND_COORDINATOR, request.to_body()
            )
            found = FindCoordinatorResponse.from_body(body)
            self._conn = await BrokerConnection.connect(
                found.host, found.port, self.client_id, self.client.connect_timeout_s
            )
            self._coordinator = found.node_id
        return self._conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        self._coordinator = None

    async def _call(
        self, api: int, body: dict[str, Any], timeout_s: float | None = None
    ) -> dict[str, Any]:
        """One group request, retried on another coordinator connection while the
        coordinator is unavailable, for up to `timeout_s` (request_timeout_ms)."""
        timeout_s = self.request_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                conn = await self._coordinator_connection()
                resp, _ = await conn.request(api, body, (), timeout_s)
                return resp
            except COORDINATOR_UNAVAILABLE as e:
                # A request that timed out may still be answered later on that connection:
                # a new one keeps the answers in step with the requests.
                self._drop_connection()
                if time.monotonic() >= deadline:
                    raise
                log.debug("group %s: %s; finding the coordinator again", self.group_id, e)
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def join(self, topics: Sequence[str]) -> list[TopicPartition]:
        """Join (or rejoin) with this member id; returns this member's partitions in the
        generation the join completed. Waits while the group rebalances (for up to the
        rebalance timeout). A coordinator that no longer knows the id (it expired) gets an
        empty one next time, as Kafka's client does."""
        try:
            request = JoinGroupRequest(
                self.group_id,
                self.session_timeout_ms,
                self.rebalance_timeout_ms,
                tuple(topics),
                tuple(self.assignors),
                self.member_id,
                self.client_id,
                self.instance_id,
            )
            body = await self._call(
                protocol.ApiKey.JOIN_GROUP,
                request.to_body(),
                # The coordinator answers at the group's rebalance deadline at the latest.
                self.rebalance_timeout_ms / 1000 + self.request_timeout_s,
            )
        except UnknownMemberIdError:
            if self.instance_id is None:
                self.member_id = ""
            raise
        joined = JoinGroupResponse.from_body(body)
        self.member_id = joined.member_id
        self.generation = joined.generation
        self.protocol = joined.protocol
        self.assignment = sorted(joined.assignment)
        log.info(
            "group %s: member %s joined generation %d with %d partitions (%s)",
            self.group_id,
            self.member_id,
            self.generation,
            len(self.assignment),
            self.protocol,
        )
        return self.assignment

    async def heartbeat(self) -> bool:
        """True while this member's generation is current and the group is not rebalancing;
        False means: commit, give up the partitions and join again."""
        if not self.member_id:
            return False
        try:
            request = HeartbeatRequest(self.group_id, self.member_id, self.generation)
            body = await self._call(protocol.ApiKey.HEARTBEAT, request.to_body())
        except RebalanceInProgressError:
            log.info(
                "group %s: rebalancing; member %s (generation %d) joins again",
                self.group_id,
                self.member_id,
                self.generation,
            )
            return False
        except IllegalGenerationError:
            return False
        except UnknownMemberIdError:
            log.info("group %s: member %s expired; rejoining", self.group_id, self.member_id)
            if self.instance_id is None:
                self.member_id = ""
            return False
        return HeartbeatResponse.from_body(body).generation == self.generation

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not offsets:
            return
        request = OffsetCommitRequest.of(self.group_id, offsets, self.member_id, self.generation)
        await self._call(protocol.ApiKey.OFFSET_COMMIT, request.to_body())

    async def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        request = OffsetFetchRequest(self.group_id, tuple(tps))
        body = await self._call(protocol.ApiKey.OFFSET_FETCH, request.to_body())
        return OffsetFetchResponse.from_body(body).committed()

    async def leave(self) -> None:
        if not self.member_id:
            return
        try:
            request = LeaveGroupRequest(self.group_id, (self.member_id,))
            await self._call(protocol.ApiKey.LEAVE_GROUP, request.to_body())
        finally:
            self.member_id = ""
            self.generation = -1
            self.assignment = []

    async def close(self) -> None:
        """Close the coordinator connection (after `leave`, or to stop without leaving)."""
        self._drop_connection()
