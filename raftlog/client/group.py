"""A consumer's membership in a group: coordinator discovery, join, heartbeats, commits.

The coordinator is the active controller's node (FindCoordinator). Joining is one round trip:
the assignment is computed in the replicated state machine and returned with the generation.
Heartbeats are cheap in-memory checks on the coordinator; a heartbeat answer with another
generation (or UnknownMemberId) means the group rebalanced and this member must join again.
Commits carry the member id and generation, so a member that lost a partition in a rebalance
cannot overwrite the new owner's progress (CommitFailedError says why).

Every call retries the errors that say the coordinator is away or elsewhere
(`COORDINATOR_UNAVAILABLE`: NotCoordinator, NotController, BrokerNotAvailable, a timeout) by
finding the coordinator again after a backoff, up to `request_timeout_ms`; the consumer's poll
retries past that. Errors that mean "rejoin" (UnknownMemberId, IllegalGeneration) or "refused"
(CommitFailed) go back to the caller at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from raftlog import protocol
from raftlog.client.cluster import ClusterClient
from raftlog.errors import (
    BrokerNotAvailableError,
    NotControllerError,
    NotCoordinatorError,
    RaftlogTimeoutError,
    RequestTimedOutError,
    UnknownMemberIdError,
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
            found, _ = await client.request(
                None, protocol.ApiKey.FIND_COORDINATOR, {"group_id": group_id}
            )
            if int(found["node_id"]) not in client.brokers:
                await client.refresh_metadata([])
            resp, _ = await client.request(int(found["node_id"]), api, body)
            return resp
        except COORDINATOR_UNAVAILABLE as e:
            if time.monotonic() >= deadline:
                raise
            log.debug("group %s: %s; finding the coordinator again", group_id, e)
            client.invalidate()
            await asyncio.sleep(RETRY_BACKOFF_S)


class GroupMembership:
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
        self._coordinator: int | None = None

    async def _coordinator_node(self) -> int:
        if self._coordinator is None:
            body, _ = await self.client.request(
                None, protocol.ApiKey.FIND_COORDINATOR, {"group_id": self.group_id}
            )
            await self.client.refresh_metadata([])  # learn the coordinator's address
            self._coordinator = int(body["node_id"])
        return self._coordinator

    async def _call(self, api: int, body: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + self.request_timeout_s
        while True:
            try:
                node = await self._coordinator_node()
                resp, _ = await self.client.request(node, api, body)
                return resp
            except COORDINATOR_UNAVAILABLE as e:
                self._coordinator = None
                if time.monotonic() >= deadline:
                    raise
                log.debug("group %s: %s; finding the coordinator again", self.group_id, e)
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def join(self, topics: Sequence[str]) -> list[TopicPartition]:
        """Join (or rejoin) with this member id; a coordinator that no longer knows the id
        (it expired) gets an empty one next time, as Kafka's client does."""
        try:
            body = await self._join(topics)
        except UnknownMemberIdError:
            if self.instance_id is None:
                self.member_id = ""
            raise
        self.member_id = body["member_id"]
        self.generation = body["generation"]
        self.protocol = body["protocol"]
        self.assignment = sorted(TopicPartition(t, p) for t, p in body["assignment"])
        log.info(
            "group %s: member %s joined generation %d with %d partitions (%s)",
            self.group_id,
            self.member_id,
            self.generation,
            len(self.assignment),
            self.protocol,
        )
        return self.assignment

    async def _join(self, topics: Sequence[str]) -> dict[str, Any]:
        return await self._call(
            protocol.ApiKey.JOIN_GROUP,
            {
                "group_id": self.group_id,
                "member_id": self.member_id,
                "client_id": self.client_id,
                "instance_id": self.instance_id,
                "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms,
                "topics": list(topics),
                "protocols": self.assignors,
            },
        )

    async def heartbeat(self) -> bool:
        """True while this member's generation is current; False means rejoin."""
        if not self.member_id:
            return False
        try:
            body = await self._call(
                protocol.ApiKey.HEARTBEAT,
                {
                    "group_id": self.group_id,
                    "member_id": self.member_id,
                    "generation": self.generation,
                },
            )
        except UnknownMemberIdError:
            log.info("group %s: member %s expired; rejoining", self.group_id, self.member_id)
            if self.instance_id is None:
                self.member_id = ""
            return False
        return bool(body["generation"] == self.generation)

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not offsets:
            return
        await self._call(
            protocol.ApiKey.OFFSET_COMMIT,
            {
                "group_id": self.group_id,
                "member_id": self.member_id,
                "generation": self.generation,
                "offsets": [[tp.topic, tp.partition, o, ""] for tp, o in sorted(offsets.items())],
            },
        )

    async def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        body = await self._call(
            protocol.ApiKey.OFFSET_FETCH,
            {
                "group_id": self.group_id,
                "partitions": [[t, p] for t, p in tps],
            },
        )
        return {TopicPartition(t, p): o for t, p, o, _ in body["offsets"]}

    async def leave(self) -> None:
        if not self.member_id:
            return
        try:
            await self._call(
                protocol.ApiKey.LEAVE_GROUP,
                {
                    "group_id": self.group_id,
                    "member_ids": [self.member_id],
                },
            )
        finally:
            self.member_id = ""
            self.generation = -1
            self.assignment = []
