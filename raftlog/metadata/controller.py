"""The controller: broker liveness on the active controller (the Raft leader), and the
heartbeats brokers send it.

Every voter runs a `Controller`; only the one whose node leads the Raft quorum acts. Brokers
send a UDP datagram (asyncio-dgram) every `broker_heartbeat_interval_ms` to the active
controller, at the same host and port number as its Raft TCP listener. Only state changes go
through Raft: the controller proposes `fence_broker` for a broker silent for
`broker_session_timeout_ms` (which moves its leaderships to other ISR members) and
`unfence_broker` when it is heard again. A broker that stops cleanly fences itself first
(`shut_down_broker`, proposed by the stopping node: Kafka's controlled shutdown); the
controller leaves such a broker alone until it registers again.

Rules:
- A heartbeat counts only with the broker's current epoch (from its latest registration): a
  zombie process from an older incarnation cannot keep itself, or its successor, alive.
- A controller that has just become active gives every broker a full session timeout of grace,
  because the heartbeats went to the previous controller until now.
- A broker whose registration the controller has not seen before starts its timeout when the
  controller first sees it, so a new registration is never fenced at once.
- Silence counts only while the controller listens: after a pass that came more than
  CONTROLLER_STALL_MS late (its own event loop or process was held up), every broker's timeout
  starts again, as on becoming active. Heartbeats sent meanwhile wait in the socket; without
  this, one stalled controller fenced every broker at once (30,000 replicas re-led).

Leaders come back (Kafka's auto.leader.rebalance.enable): every `LeaderBalance.interval_ms`
the active controller proposes `elect_leaders` for the partitions whose preferred leader (the
first replica) could lead again, for each broker whose share of its preferred partitions led
by others is above `LeaderBalance.imbalance_percentage` (MetadataState.preferred_elections_due).
A returning broker counts once it is back in the ISR, so only a caught-up replica takes its
leaderships back.

Heartbeat datagram: msgpack array [node_id, broker_epoch].
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import asyncio_dgram
import msgpack

from raftlog.errors import RaftlogError
from raftlog.metadata.quorum import MetadataQuorum
from raftlog.tasks import TaskSet

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 0.1
# A check pass this late means the controller itself did not run: nobody's silence counts.
CONTROLLER_STALL_MS = 1000
# Retries of proposals that must eventually succeed: 0.1 s, doubling to 2 s (a log line each).
RETRY_BACKOFF_MIN_S = 0.1
RETRY_BACKOFF_MAX_S = 2.0


@dataclass(frozen=True, slots=True)
class LeaderBalance:
    """The automatic preferred-leader rebalance's settings (Kafka's
    leader.imbalance.check.interval.seconds and leader.imbalance.per.broker.percentage)."""

    interval_ms: int = 300_000
    imbalance_percentage: int = 10


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


class Controller:
    def __init__(
        self,
        quorum: MetadataQuorum,
        listen_address: str,
        session_timeout_ms: int,
        clock_ms: Callable[[], int] = monotonic_ms,
        on_active: Callable[[bool], None] | None = None,
        leader_balance: LeaderBalance | None = None,
    ):
        """`leader_balance`: None turns the automatic preferred-leader rebalance off."""
        self.quorum = quorum
        self.leader_balance = leader_balance
        # When the next automatic leader rebalance is due (clock_ms), and whether one runs.
        self._balance_at: int | None = None
        self._balancing = False
        self.listen_address = listen_address
        self.session_timeout_ms = session_timeout_ms
        self.clock_ms = clock_ms
        self.on_active = on_active or (lambda active: None)
        # node_id -> (broker_epoch, clock_ms): the last heartbeat with the current epoch, and
        # when this controller first saw that registration (the start of its grace).
        self._heard: dict[int, tuple[int, int]] = {}
        self._first_seen: dict[int, tuple[int, int]] = {}
        self.active = False
        self._last_check_ms: int | None = None
        self._proposing: set[int] = set()
        self._tasks = TaskSet("controller")

    async def run(self) -> None:
        host, port = split_address(self.listen_address)
        try:
            stream = await asyncio_dgram.bind((host, port))
        except OSError as e:
            raise OSError(
                e.errno, f"controller heartbeat listener (UDP) {self.listen_address}: {e.strerror}"
            ) from None
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._receive(stream))
                tg.create_task(self._check_loop())
        finally:
            stream.close()

    async def _receive(self, stream: asyncio_dgram.aio.DatagramServer) -> None:
        while True:
            data, _addr = await stream.recv()
            try:
                node_id, epoch = msgpack.unpackb(data)
                node_id, epoch = int(node_id), int(epoch)
            except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError):
                log.debug("ignoring a malformed heartbeat datagram of %d bytes", len(data))
                continue
            self.heard(node_id, epoch)

    def heard(self, node_id: int, epoch: int) -> None:
        current = self._current_epoch(node_id)
        if current is not None and epoch == current:
            self._heard[node_id] = (epoch, self.clock_ms())

    def _current_epoch(self, node_id: int) -> int | None:
        broker = self.quorum.read(lambda s: s.brokers.get(node_id))
        return None if broker is None else int(broker["broker_epoch"])

    async def _check_loop(self) -> None:
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            self.check()

    def check(self) -> None:
        """One pass: follow leadership changes, fence the silent, unfence the returned."""
        leader = self.quorum.is_leader
        now = self.clock_ms()
        late_ms = 0 if self._last_check_ms is None else now - self._last_check_ms
        self._last_check_ms = now
        if self.active and late_ms > CONTROLLER_STALL_MS:
            log.warning(
                "the controller did not run for %d ms: every broker's session timeout restarts",
                late_ms,
            )
            self._first_seen = {}
        if leader != self.active:
            self.active = leader
            log.info("node is %s the active controller", "now" if leader else "no longer")
            if leader:
                self._first_seen = {}  # grace: everyone's timeout starts now
                self._announce_active()
            else:
                self.on_active(False)
        if not leader:
            return
        brokers = self.quorum.read(
            lambda s: [
                (n, b["broker_epoch"], b["fenced"])
                for n, b in sorted(s.brokers.items())
                if not b.get("shutting_down", False)  # fenced by itself until it registers
            ]
        )
        for node_id, epoch, fenced in brokers:
            first = self._first_seen.get(node_id)
            if first is None or first[0] != epoch:
                self._first_seen[node_id] = first = (epoch, now)
            heard = self._heard.get(node_id)
            heard_at = heard[1] if heard is not None and heard[0] == epoch else None
            silent_ms = now - max(first[1], heard_at if heard_at is not None else first[1])
            if not fenced and silent_ms > self.session_timeout_ms:
                self._propose(node_id, "fence_broker", epoch, silent_ms)
            elif fenced and heard_at is not None and now - heard_at <= self.session_timeout_ms:
                self._propose(node_id, "unfence_broker", epoch, now - heard_at)
        balance = self.leader_balance
        if balance is not None:
            if self._balance_at is None:
                self._balance_at = now + balance.interval_ms
            elif now >= self._balance_at and not self._balancing:
                self._balance_at = now + balance.interval_ms
                self._rebalance_leaders(balance)

    def _rebalance_leaders(self, balance: LeaderBalance) -> None:
        due = self.quorum.read(lambda s: s.preferred_elections_due(balance.imbalance_percentage))
        if not due:
            return
        self._balancing = True

        async def go() -> None:
            try:
                results = await self.quorum.propose("elect_leaders", partitions=due)
                moved = [f"{t}-{p}" for t, p, code, _ in results if code == 0]
                log.info(
                    "preferred-leader rebalance: %d of %d partitions back with their preferred "
                    "leader%s",
                    len(moved),
                    len(due),
                    f" ({', '.join(moved[:10])}{', ...' if len(moved) > 10 else ''})"
                    if moved
                    else "",
                )
            except RaftlogError as e:
                log.warning("preferred-leader rebalance failed: %s", e)
            finally:
                self._balancing = False

        self._tasks.spawn(go(), "preferred-leader rebalance")

    async def close(self) -> None:
        """Cancel the proposals in flight (the node is stopping)."""
        self.active = False
        self._tasks.cancel()
        await self._tasks.wait()

    def _announce_active(self) -> None:
        """Commit a no-op first: once it applies, this leader has applied every entry of
        earlier terms, so what on_active(True) starts (the group coordinator) reads a
        complete state."""

        async def go() -> None:
            backoff_s = RETRY_BACKOFF_MIN_S
            while self.active:
                try:
                    await self.quorum.propose("noop")
                except RaftlogError as e:
                    # Backs off (a full disk refuses every proposal until space is freed).
                    log.warning(
                        "no-op after becoming leader failed, retrying in %.1f s: %s", backoff_s, e
                    )
                    await asyncio.sleep(backoff_s)
                    backoff_s = min(2 * backoff_s, RETRY_BACKOFF_MAX_S)
                    continue
                if self.active:
                    self.on_active(True)
                return

        self._tasks.spawn(go(), "no-op after becoming leader")

    def _propose(self, node_id: int, command: str, epoch: int, silent_ms: int) -> None:
        if node_id in self._proposing:
            return
        self._proposing.add(node_id)

        async def go() -> None:
            try:
                moved = await self.quorum.propose(command, node_id=node_id, broker_epoch=epoch)
                log.info(
                    "%s broker %d (epoch %d, silent %d ms): %s partitions re-led",
                    "fenced" if command == "fence_broker" else "unfenced",
                    node_id,
                    epoch,
                    silent_ms,
                    moved,
                )
            except RaftlogError as e:
                log.warning("%s of broker %d failed: %s", command, node_id, e)
            finally:
                self._proposing.discard(node_id)

        self._tasks.spawn(go(), f"{command} of broker {node_id}")


async def send_heartbeats(
    node_id: int,
    broker_epoch: Callable[[], int | None],
    controller_address: Callable[[], str | None],
    interval_ms: int,
) -> None:
    """Broker side: a datagram to the active controller every `interval_ms`, forever."""
    stream = await asyncio_dgram.bind(("0.0.0.0", 0))
    try:
        while True:
            epoch, target = broker_epoch(), controller_address()
            if epoch is not None and target is not None:
                with contextlib.suppress(OSError):
                    await stream.send(msgpack.packb([node_id, epoch]), split_address(target))
            await asyncio.sleep(interval_ms / 1000)
    finally:
        stream.close()
