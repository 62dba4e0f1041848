"""The producer's sender: drives the accumulator and the idempotence state over connections.

`Sender` (the core that `Producer` and `AsyncProducer` share) lives on one event loop. It
owns the accumulator (client/accumulator.py: where `send` puts records), the idempotence state
(client/idempotence.py: ids, sequences, the epoch bump) and the cluster client (metadata,
connections), and does all of the I/O those pure types leave out.

How it works: a sender task runs passes. Each pass drains every ready batch from the
accumulator, groups them by partition leader and sends one Produce request per broker with
every ready batch, keeping at most `max_in_flight_requests_per_connection` requests
outstanding per broker, and writes each broker's requests with one write; each response
completes its batches from a callback run by the connection. The sender sleeps on a future
that an append (a batch filled up, or a partition's first batch opened), a response, or the
linger timer resolves.

Delivery: a retriable error (leader moved, lost connection, timeout, a broker's full disk)
refreshes metadata and re-queues the batch at the head of its partition (logged at WARNING
once per topic per RETRY_WARNING_INTERVAL_S), until `retries` or `delivery_timeout_ms` runs
out; then the error reaches every future of the batch. A batch that expires says how many
attempts it had and the last error they met, so a broker's StorageError reaches the
application as itself, not as a bare timeout. Every future completes by its delivery timeout
plus EXPIRY_GRACE_S, whatever the broker or the sender does (client/futures.py).

Metadata: refreshed for a topic when a batch of it meets a retriable error, and for every
topic sent to at least every metadata_max_age_ms (checked by the sender's passes), so that a
topic grown meanwhile gets records in its new partitions (keyless records at once; a key may
hash to another partition than before, as in Kafka).

Idempotence (client/idempotence.py states its rules): the sender asks for a producer id
(InitProducerId) before the first send, tells the state of every send, answer and failure,
drains with its per-partition `room`, stamps each batch's bytes with what `begin_send`
assigned, and once `bump_due` runs the bump: every queued batch restamped, those of unknown
outcome failed with OutOfOrderSequenceError. Without idempotence, with retries and more than
one request in flight, a retried batch may land after a later one, or twice (at-least-once,
as in Kafka without idempotence).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import math
import random
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any

from raftlog import protocol
from raftlog.client.accumulator import Accumulator, ProducerBatch
from raftlog.client.cluster import ClusterClient
from raftlog.client.compressed import with_producer_v2
from raftlog.client.connection import BrokerConnection
from raftlog.client.futures import resolve
from raftlog.client.idempotence import IdempotenceState
from raftlog.client.producer_config import ProducerConfig, retry_backoff_s
from raftlog.errors import (
    BrokerNotAvailableError,
    OutOfOrderSequenceError,
    RaftlogError,
    RaftlogTimeoutError,
    RecordTooLargeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    error_from_code,
)
from raftlog.invariants import InvariantError
from raftlog.messages.produce import (
    ProducePartition,
    ProducePartitionResult,
    ProduceRequest,
    ProduceResponse,
)
from raftlog.messages.producer_ids import InitProducerIdRequest, InitProducerIdResponse
from raftlog.metadata.model import TopicInfo
from raftlog.records import with_producer
from raftlog.tasks import TaskSet
from raftlog.topics import TopicPartition

log = logging.getLogger(__name__)

# A sender pass writes its requests in writes of this many: the broker starts on the first
# ones while the rest are being built, instead of the two taking turns at idling.
REQUESTS_PER_WRITE = 64
# A topic's retries are logged at WARNING at most once per this interval (DEBUG otherwise),
# with the count of the retries since the last line: per partition, a 10,000-partition topic
# whose leaders were not ready yet logged 10,000 lines.
RETRY_WARNING_INTERVAL_S = 10.0
# Room left for a Produce request's header when several batches are grouped under a broker's
# request_bytes_max: the header lists each partition with its topic (249 bytes at most) and
# two integers, so this holds about 250 partitions of the longest names.
REQUEST_HEADER_BYTES_ROOM = 64 * 1024


class _OneBatchRequest:
    """A one-batch Produce request in flight; the connection calls it with the outcome. One
    object per request (not a partial over a dict and a list): requests in flight are
    long-lived enough that every object they hold costs garbage-collector time."""

    __slots__ = ("batch", "buffered", "node", "sender")

    def __init__(self, sender: Sender, node: int, batch: ProducerBatch, buffered: int):
        self.sender, self.node, self.batch, self.buffered = sender, node, batch, buffered

    def __call__(
        self, body: dict[str, Any] | None, _payload: memoryview | None, error: RaftlogError | None
    ) -> None:
        self.sender._on_one_response(self.node, self.batch, self.buffered, body, error)


class Sender:
    """The sender shared by Producer and AsyncProducer; lives on one loop (see the module).

    The sender is one coroutine. Each pass drains every ready batch, builds the Produce
    requests for each leader (as many as its free in-flight slots allow) and writes them with
    one write per connection; each response completes its batches from a callback run by the
    connection. The sender sleeps on a future that `send` (a batch filled up, or a partition's
    first batch opened), a response, or the linger timer resolves.

    Delivery timeouts: a pass expires queued batches past their deadline (drain), and batches
    in flight past theirs (`_expire_in_flight`, as Kafka does: the late answer is ignored); it
    sleeps no later than the earliest deadline. Nothing one batch holds can stop the sender: a
    batch that fails to build fails alone (`_unbuildable`), application callbacks run guarded
    (BatchResult.complete), and if the sender task ends with an error anyway (a bug), every
    batch fails with it and later sends raise it (`_sender_stopped`) instead of hanging.
    """

    def __init__(self, config: ProducerConfig, rng: random.Random | None = None):
        """`rng`: the keyless partition choice's randomness (tests pass a seeded one)."""
        self.config = config
        self.client = ClusterClient(
            config.bootstrap_servers, config.client_id, config.request_timeout_ms
        )
        # Appends run on any thread and wake the sender through `_wake`.
        self.acc = Accumulator(config, self.client.topics, self._wake, rng)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._kicked = False
        self._waiter: asyncio.Future[None] | None = None
        self._in_flight: dict[int, int] = collections.defaultdict(int)
        self._inflight_batches = 0
        # node -> the batches sent to it, in send order (acks != 0): the connection answers in
        # order, so answered ones leave from the front; `_expire_in_flight` looks at the rest.
        self._sent: dict[int, collections.deque[ProducerBatch]] = {}
        # When `_expire_in_flight` must next look: the earliest deadline in flight.
        self._inflight_check_at = math.inf
        # topic -> (no WARNING before this time, retries logged at DEBUG since the last one)
        self._retry_warned_until: dict[str, tuple[float, int]] = {}
        # Pre-encoded Produce headers of one-batch requests, per partition.
        self._templates: dict[TopicPartition, protocol.ProduceTemplate] = {}
        self._refreshing: set[str] = set()
        # When the sender next refreshes every known topic's metadata (metadata_max_age_ms).
        self._metadata_due = time.monotonic() + config.metadata_max_age_ms / 1000
        self._connecting: set[int] = set()
        self._sender: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = False
        self._tasks = TaskSet("producer")  # connects, metadata refreshes, InitProducerId
        self._idle: asyncio.Event | None = None
        self.space: asyncio.Event | None = None
        self._acks = config.acks_code
        self._timeout_s = config.request_timeout_ms / 1000
        self._timeout_ms = config.request_timeout_ms
        # Idempotence (client/idempotence.py): None when it is off. Nothing is sent while the
        # state is not `ready` (no producer id yet, or an epoch bump pending).
        self.idem = IdempotenceState() if config.enable_idempotence else None
        # How a batch is stamped with the producer's id, epoch and sequence: every batch of a
        # producer has one format, raftlog's own or (compressed) Kafka's v2.
        self._with_producer = with_producer_v2 if config.compression_codec else with_producer
        self._initializing = False  # an InitProducerId request is under way

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.space = asyncio.Event()
        self._idle = asyncio.Event()
        self._sender = asyncio.create_task(self._run())
        self._sender.add_done_callback(self._sender_stopped)

    def _sender_stopped(self, task: asyncio.Task[None]) -> None:
        """The sender ended: normal at close; with an error it is a bug, and then no batch
        may wait for it: fail them all with the error and make later sends raise it."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        log.critical("the producer's sender stopped with an error", exc_info=exc)
        dead = RaftlogError(f"the producer's sender stopped: {exc!r}")
        queued = self.acc.fail_all(dead)
        in_flight = [b for q in self._sent.values() for b in q]
        self._sent.clear()
        for b in queued + in_flight:
            b.expire(dead)
        if self._idle is not None:
            self._idle.set()  # a flush() waiting for the sender returns

    async def topic_metadata(self, topic: str, refresh: bool = False) -> TopicInfo:
        """The topic's metadata for send(), asked for anew with `refresh` (a partition named
        explicitly that the cache lacks: the topic may have grown). A broker that cannot be
        reached (restarting, or the cached metadata was dropped after a failed batch, a
        metadata request that timed out) is retried until max_block_ms, as send() promises; an
        unknown topic fails at once, unless the broker auto-creates topics (a producer asks it
        to, as Kafka's does; the broker's setting decides)."""
        if refresh:
            self.client.topics.pop(topic, None)
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        while True:
            try:
                return await self.client.topic(topic, allow_auto_create=True)
            except UnknownTopicOrPartitionError:
                raise
            except RaftlogError as e:
                # A broker down or slow (a metadata request timing out while a node restarts):
                # ask again, another broker if need be, until max_block_ms.
                if not e.retriable or time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    def _wake(self) -> None:
        """Make the sender run a pass soon; from any thread. Before `start` there is no
        sender to wake: its first pass drains whatever was queued."""
        loop = self.loop
        if loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._kick()
        else:
            loop.call_soon_threadsafe(self._kick)

    def begin_flush(self) -> None:
        self.acc.begin_flush()
        self._wake()

    def end_flush(self) -> None:
        self.acc.end_flush()

    # -- the sender (on the loop) --------------------------------------------------------------

    def _kick(self) -> None:
        self._kicked = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _sleep(self, timeout: float | None) -> None:
        loop = self.loop
        if loop is None:
            raise InvariantError("loop is None")
        waiter = self._waiter = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, resolve, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    async def _run(self) -> None:
        if self._idle is None:
            raise InvariantError("self._idle is None")
        acc, idem = self.acc, self.idem
        room_of = None if idem is None else idem.room
        while True:
            self._kicked = False
            now = time.monotonic()
            if idem is not None and idem.bump_due:
                self.bump_epoch()
            if now >= self._metadata_due:
                self._refresh_all(now)
            with acc.lock:
                acc.wake_scheduled = False
                requests, next_ready, expired = acc.drain(
                    now,
                    self._node_of,
                    self._free_slots,
                    self._closing,
                    room_of,
                    self._max_request,
                )
                pending = acc.pending()
            for b in expired:
                b.complete(-1, b.expiry_error("not sent"))
                self._sequence_lost(b)
            if expired:
                self._space_freed()
            for node, node_requests in requests.items():
                self._dispatch(node, node_requests)
            for q in self._sent.values():
                while q and not q[0].in_flight:
                    q.popleft()
            if now >= self._inflight_check_at:
                self._expire_in_flight(now)
            if pending == 0 and self._inflight_batches == 0:
                self._idle.set()
                if self._closing:
                    return
            else:
                self._idle.clear()
            if self._kicked:
                continue
            if acc.slot_bound:
                # Every free in-flight slot is used and ready batches wait: a response will
                # wake the sender, so send() need not (a wake-up costs two system calls).
                acc.wake_scheduled = True
            wake_at = min(
                math.inf if next_ready is None else next_ready,
                acc.next_deadline,
                self._inflight_check_at,
            )
            timeout = None if wake_at == math.inf else max(wake_at - time.monotonic(), 0)
            if pending and not requests and next_ready is None:
                # Batches wait for metadata, a connection or a free in-flight slot; responses
                # and connections wake the sender, this is the fallback.
                backoff = self.config.retry_backoff_ms / 1000
                timeout = backoff if timeout is None else min(timeout, backoff)
            await self._sleep(timeout)

    def _expire_in_flight(self, now: float) -> None:
        """Fail the batches in flight past their delivery timeout (Kafka expires them too);
        their requests stay on the connection, and a late answer finds them complete. The
        builder stays with the request, which still counts its records."""
        check_at = math.inf
        for q in self._sent.values():
            for b in q:
                if not b.in_flight or b._done:
                    continue
                if b.deadline <= now:
                    b.expire(b.expiry_error("no answer"))
                    self._sequence_lost(b)
                elif b.deadline < check_at:
                    check_at = b.deadline
        self._inflight_check_at = check_at

    def _sent_to(self, node: int, batches: Sequence[ProducerBatch]) -> None:
        """Batches now in flight to `node` (a request that expects an answer)."""
        q = self._sent.get(node)
        if q is None:
            q = self._sent[node] = collections.deque()
        check_at = self._inflight_check_at
        for b in batches:
            b.in_flight = True
            q.append(b)
            if b.deadline < check_at:
                check_at = b.deadline
        self._inflight_check_at = check_at

    def _node_of(self, tp: TopicPartition) -> int | None:
        try:
            return self.client.leader_for(tp)
        except RaftlogError:
            self._schedule_refresh(tp.topic)
            return None

    def _free_slots(self, node: int) -> int:
        idem = self.idem
        if idem is not None and not idem.ready:
            if idem.producer_id < 0 and not self._initializing:
                self._initializing = True
                self._spawn(self._init_producer_id(), "InitProducerId")
            return 0  # a response or the id's arrival wakes the sender
        conn = self.client.ready_connection(node)
        if conn is None or not conn.limits_learned:
            self._schedule_connect(node)
            return 0
        if not conn.writable:
            return 0  # resume_writing wakes the sender
        return self.config.max_in_flight_requests_per_connection - self._in_flight[node]

    def _max_request(self, node: int) -> int:
        """The bound of a request of several batches to `node`: max_request_size, or less
        when the broker reads less (with room for the request's header)."""
        max_request = self.config.max_request_size
        conn = self.client.ready_connection(node)
        limit = conn.request_bytes_max if conn is not None else None
        if limit is not None:
            max_request = min(max_request, limit - REQUEST_HEADER_BYTES_ROOM)
        return max_request

    # -- idempotence ---------------------------------------------------------------------------

    async def _init_producer_id(self) -> None:
        idem = self.idem
        if idem is None:
            raise InvariantError("InitProducerId without idempotence")
        try:
            body, _ = await self.client.request(
                None, protocol.ApiKey.INIT_PRODUCER_ID, InitProducerIdRequest().to_body()
            )
            if body.get("error"):
                raise error_from_code(body["error"], body.get("message") or "")
            answer = InitProducerIdResponse.from_body(body)
            idem.start(answer.producer_id, answer.producer_epoch)
            log.info(
                "idempotent producer %s has producer id %d, epoch %d",
                self.config.client_id,
                idem.producer_id,
                idem.epoch,
            )
        except RaftlogError as e:
            # Batches wait (and expire by their delivery timeout); the next pass asks again.
            log.warning("InitProducerId failed, retrying: %s: %s", type(e).__name__, e)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self._initializing = False
        self._kick()

    def _sequence_lost(self, b: ProducerBatch) -> None:
        """`b` failed or expired for good: with idempotence, a hole in its partition's
        sequences if it was stamped; the next epoch starts every partition at 0 again."""
        idem = self.idem
        if idem is not None and idem.sequence_lost(b):
            self._bump_started(b)

    def _bump_started(self, b: ProducerBatch) -> None:
        idem = self.idem
        if idem is not None:
            log.warning(
                "a record batch for %s with sequence %d failed; producer %d will bump its "
                "epoch %d once its requests in flight are answered",
                b.tp,
                b.sequence,
                idem.producer_id,
                idem.epoch,
            )

    def bump_epoch(self) -> None:
        """Start the next epoch (IdempotenceState.bump), once `bump_due` (nothing in flight):
        the queued batches are restamped at their next send, except those whose outcome is
        unknown: they fail with OutOfOrderSequenceError (`_unknown_outcome_error`)."""
        idem, acc = self.idem, self.acc
        if idem is None:
            raise InvariantError("an epoch bump without idempotence")
        with acc.lock:
            bump = idem.bump(acc.queued())
            acc.discard(bump.failing)
        log.warning(
            "producer %d bumped its epoch to %d (a partition lost sequences)%s",
            idem.producer_id,
            idem.epoch,
            f"; {len(bump.failing)} batch(es) of unknown outcome fail" if bump.failing else "",
        )
        for b in bump.failing:
            b.complete(-1, self._unknown_outcome_error(b, bump.old_producer_id, bump.old_epoch))
        if bump.failing:
            self._space_freed()

    def _unknown_outcome_error(
        self, b: ProducerBatch, producer_id: int, epoch: int
    ) -> OutOfOrderSequenceError:
        """The error of a queued batch that an epoch bump cannot restamp: a send of it may have
        been appended under its old epoch and sequence, and the new epoch starts the
        partition's sequences at 0 again, so the broker would append it a second time. Kafka
        never changes the sequence of a batch that was sent, for this reason (KIP-360)."""
        error = OutOfOrderSequenceError(
            f"record batch for {b.tp} (producer {producer_id}, epoch {epoch}, sequence "
            f"{b.sequence}, {len(b.builder)} record(s)) failed after {b.attempts} attempt(s): "
            "its outcome is unknown, it may or may not be in the log; the producer bumped its "
            "epoch after another batch left a hole in its sequences, and resending this one "
            "under the new epoch could append it twice"
            + (
                f"; last error: {type(b.last_error).__name__}: {b.last_error}"
                if b.last_error is not None
                else ""
            )
        )
        error.__cause__ = b.last_error
        return error

    def _spawn(self, coro: Coroutine[Any, Any, None], what: str) -> None:
        self._tasks.spawn(coro, what)

    def _schedule_connect(self, node: int) -> None:
        if node not in self._connecting:
            self._connecting.add(node)
            self._spawn(self._connect(node), f"connect to broker {node}")

    async def _connect(self, node: int) -> None:
        conn = None
        try:
            conn = await self.client.connection(node)
            conn.on_writable = self._kick
            if not conn.limits_learned:
                # The broker's frame limit, before the first Produce: a batch it could not
                # read fails here at once (RecordTooLargeError), not by a closed connection.
                await conn.learn_limits(self.config.request_timeout_ms / 1000)
        except RaftlogError as e:
            if conn is not None and not conn.limits_learned:
                conn.close()  # no answer to ApiVersions: try a new connection next time
            # The leader may have moved: refresh the metadata of every topic waiting on it.
            log.debug("cannot connect to broker %d: %s", node, e)
            with self.acc.lock:
                topics = {tp.topic for tp, q in self.acc.queues.items() if q}
            for topic in topics:
                self._schedule_refresh(topic)
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self._connecting.discard(node)
        self._kick()

    def _schedule_refresh(self, topic: str) -> None:
        if topic not in self._refreshing:
            self._refreshing.add(topic)
            self._spawn(self._refresh(topic), f"metadata refresh of {topic}")

    def _refresh_all(self, now: float) -> None:
        """Refresh every known topic's metadata in one request (metadata_max_age_ms)."""
        self._metadata_due = now + self.config.metadata_max_age_ms / 1000
        topics = sorted(set(self.client.topics) - self._refreshing)
        if topics:
            self._refreshing.update(topics)
            self._spawn(self._refresh_topics(topics), "periodic metadata refresh")

    async def _refresh_topics(self, topics: list[str]) -> None:
        try:
            await self.client.refresh_metadata(topics)
        except RaftlogError as e:
            log.debug("metadata refresh for %s failed: %s", ", ".join(topics), e)
        finally:
            self._refreshing.difference_update(topics)
        self._kick()

    async def _refresh(self, topic: str) -> None:
        try:
            await asyncio.sleep(self.config.retry_backoff_ms / 1000)
            await self.client.refresh_metadata([topic])
        except RaftlogError as e:
            log.debug("metadata refresh for %s failed: %s", topic, e)
        finally:
            self._refreshing.discard(topic)
        self._kick()

    def _dispatch(self, node: int, node_requests: list[list[ProducerBatch]]) -> None:
        """Build and write the requests for one leader: one write for all of them."""
        conn = self.client.ready_connection(node)
        for i, batches in enumerate(node_requests, 1):
            self._send_request(conn, node, batches)
            if conn is not None and not i % REQUESTS_PER_WRITE:
                conn.flush()
        if conn is not None:
            conn.flush()

    def _send_request(
        self, conn: BrokerConnection | None, node: int, batches: list[ProducerBatch]
    ) -> None:
        if len(batches) == 1:
            self._send_one(conn, node, batches[0])
            return
        # Batches of one partition travel as one chunk: one append on the broker, one answer.
        merged: dict[TopicPartition, list[ProducerBatch]] = {}
        pieces: dict[TopicPartition, list[bytes]] = {}
        count = 0
        buffered = 0  # what the batches count in the buffer: released once answered
        idem = self.idem
        for b in batches:
            try:
                head, tail = b.builder.build_parts()
            except Exception as e:  # any cause: see _unbuildable
                self._unbuildable(b, e)
                continue
            if idem is not None:
                idem.begin_send(b)
                head, tail = self._with_producer(
                    head, tail, idem.producer_id, b.producer_epoch, b.sequence
                )
            count += 1
            buffered += b.builder.size_bytes
            group = merged.get(b.tp)
            if group is None:
                merged[b.tp] = [b]
                pieces[b.tp] = [head, tail]
            else:
                group.append(b)
                pieces[b.tp] += (head, tail)
        if not count:
            return
        payload: list[bytes] = []
        by_topic: dict[str, list[ProducePartition]] = {}
        for tp, tp_pieces in pieces.items():
            size = sum(map(len, tp_pieces))
            payload += tp_pieces
            by_topic.setdefault(tp.topic, []).append(ProducePartition(tp.partition, size))
        body = ProduceRequest(
            tuple((t, tuple(ps)) for t, ps in by_topic.items()), self._acks, self._timeout_ms
        ).to_body()
        self._in_flight[node] += 1
        self._inflight_batches += count
        done = functools.partial(self._on_response, node, merged, count, buffered)
        try:
            if conn is None:
                raise BrokerNotAvailableError(f"no connection to broker {node}")
            conn.queue_request(
                protocol.ApiKey.PRODUCE,
                body,
                payload,
                done if self._acks else None,
                self._timeout_s,
            )
        except RaftlogError as e:
            done(None, None, e)
            return
        if not self._acks:
            done(None, None, None)  # acks=0: delivered once written; offsets unknown (-1)
        else:
            for group in merged.values():
                self._sent_to(node, group)

    def _unbuildable(self, b: ProducerBatch, error: Exception) -> None:
        """A batch whose bytes cannot be made: whatever the cause (send() checks every field,
        so it is a bug), it fails that batch's records with the error, logged with its
        traceback, and the sender goes on with the other batches."""
        log.error("cannot build the record batch for %s; failing its records", b.tp, exc_info=error)
        self.acc.release(b.builder.size_bytes)  # never sent: its bytes leave the buffer now
        self._space_freed()
        b.complete(-1, error)

    def _refused(self, b: ProducerBatch, error: RaftlogError) -> None:
        """A batch refused before it was sent (it is over the broker's request limit): its
        records fail with the error, at once (not retriable)."""
        self.acc.release(b.builder.size_bytes)  # never sent: its bytes leave the buffer now
        self._space_freed()
        b.attempts += 1
        b.last_error = error
        b.complete(-1, error)
        self._sequence_lost(b)

    def _send_one(self, conn: BrokerConnection | None, node: int, b: ProducerBatch) -> None:
        """`_send_request` for a request of one batch, the common case: its header comes from
        the partition's pre-encoded template instead of msgpack."""
        tp = b.tp
        template = self._templates.get(tp)
        if template is None:
            template = self._templates[tp] = protocol.ProduceTemplate(
                self.config.client_id, self._acks, self._timeout_ms, tp.topic, tp.partition
            )
        limit = conn.request_bytes_max if conn is not None else None
        if limit is not None and template.frame_length(b.builder.size_bytes) > limit:
            # Before the batch is built (a copy of it) or its sequence stamped (a hole).
            if conn is None:
                raise InvariantError("conn is None")
            size = b.builder.size_bytes
            try:
                conn.check_size(
                    protocol.ApiKey.PRODUCE,
                    template.frame_length(size),
                    f" (a record batch of {size} bytes for {tp})",
                )
            except RecordTooLargeError as e:
                self._refused(b, e)
                return
        try:
            head, tail = b.builder.build_parts()
        except Exception as e:  # any cause: see _unbuildable
            self._unbuildable(b, e)
            return
        nbytes = len(head) + len(tail)
        idem = self.idem
        if idem is not None:
            idem.begin_send(b)
            head, tail = self._with_producer(
                head, tail, idem.producer_id, b.producer_epoch, b.sequence
            )
        self._in_flight[node] += 1
        self._inflight_batches += 1
        # The buffer counts a batch's size_bytes: its bytes, or a compressed batch's records
        # uncompressed (client/compressed.py).
        done = _OneBatchRequest(self, node, b, b.builder.size_bytes)
        try:
            if conn is None:
                raise BrokerNotAvailableError(f"no connection to broker {node}")
            conn.queue_produce(
                template, (head, tail), nbytes, done if self._acks else None, self._timeout_s
            )
        except RaftlogError as e:
            done(None, None, e)
            return
        if not self._acks:
            done(None, None, None)  # acks=0: delivered once written; offsets unknown (-1)
            return
        # In flight: _sent_to for one batch, inlined (this runs once per request).
        b.in_flight = True
        q = self._sent.get(node)
        if q is None:
            q = self._sent[node] = collections.deque()
        q.append(b)
        if b.deadline < self._inflight_check_at:
            self._inflight_check_at = b.deadline

    def _on_response(
        self,
        node: int,
        merged: dict[TopicPartition, list[ProducerBatch]],
        count: int,
        buffered: int,
        body: dict[str, Any] | None,
        _payload: memoryview | None,
        error: RaftlogError | None,
    ) -> None:
        self._in_flight[node] -= 1
        self._inflight_batches -= count
        self.acc.release(buffered)
        self._space_freed()
        written = False  # in flight once queued on a connection (_sent_to)
        idem = self.idem
        for group in merged.values():
            for b in group:
                written = written or b.in_flight
                b.in_flight = False
                if idem is not None:
                    idem.end_send(b.tp)
        try:
            if error is not None:
                for group in merged.values():
                    for b in group:
                        self.retry_or_fail(b, error, written)
            elif body is None:
                for group in merged.values():
                    for b in group:
                        b.complete(-1)
            else:
                self._complete(node, merged, body)
        finally:
            self._kick()

    def _on_one_response(
        self,
        node: int,
        b: ProducerBatch,
        buffered: int,
        body: dict[str, Any] | None,
        error: RaftlogError | None,
    ) -> None:
        """`_on_response` for a one-batch request, with the success case kept short."""
        self._in_flight[node] -= 1
        self._inflight_batches -= 1
        written = b.in_flight  # set once queued on a connection (_send_one)
        b.in_flight = False
        idem = self.idem
        if idem is not None:
            idem.end_send(b.tp)
        self.acc.release(buffered)
        self._space_freed()
        try:
            if error is not None:
                self.retry_or_fail(b, error, written)
            elif body is None:
                b.complete(-1)
            else:
                r: ProducePartitionResult | None
                try:
                    topic, r = ProduceResponse.only_result(body)
                    if topic != b.tp.topic or r.partition != b.tp.partition:
                        r = None
                except (KeyError, TypeError, IndexError, ValueError) as e:
                    log.warning("malformed Produce response %r: %s", body, e)
                    r = None
                if r is not None and not r.error:
                    if idem is not None:
                        idem.acked(b)  # before complete(), which drops the batch's records
                    b.complete(r.base_offset)
                else:
                    self._complete_partition(node, b.tp, (b,), r)
        finally:
            self._kick()

    def _complete(
        self, node: int, merged: dict[TopicPartition, list[ProducerBatch]], body: dict[str, Any]
    ) -> None:
        try:
            results = {tp: r for tp, r in ProduceResponse.from_body(body).results()}
        except (KeyError, TypeError, IndexError, ValueError) as e:
            results = {}
            log.warning("malformed Produce response %r: %s", body, e)
        for tp, group in merged.items():
            self._complete_partition(node, tp, group, results.get(tp))

    def _complete_partition(
        self,
        node: int,
        tp: TopicPartition,
        group: Sequence[ProducerBatch],
        r: ProducePartitionResult | None,
    ) -> None:
        """Complete (or retry) one partition's batches from leader `node`'s result for it;
        None if the response had none."""
        if r is None:
            err: RaftlogError | None = RaftlogError(f"no result for {tp} in the response")
        elif r.error:
            err = error_from_code(r.error, r.message or "")
        else:
            err = None
        if err is not None:
            if isinstance(err, RequestTimedOutError):
                # Not committed in time: the leader may be cut off from its followers and the
                # controller, and its metadata stale; ask another broker for the next.
                self.client.suspect(node)
            for b in group:
                self.retry_or_fail(b, err)
            return
        offset = r.base_offset if r is not None else -1  # (r is None is an error above)
        idem = self.idem
        for b in group:
            count = len(b.builder)
            if idem is not None:
                idem.acked(b)
            b.complete(offset)
            offset += count

    def _space_freed(self) -> None:
        """Wake blocked AsyncProducer.send() calls once the buffer has drained enough."""
        if self.space is not None and self.acc.buffered_bytes <= self.acc.resume_below:
            self.space.set()

    def retry_or_fail(
        self, batch: ProducerBatch, error: RaftlogError, written: bool = True
    ) -> None:
        """A send of `batch` failed with `error`; `written`: its request reached a connection
        (else the broker cannot have seen it). The batch goes back to its queue after its
        backoff (with a metadata refresh) if the error is retriable and it has tries and time
        left; else it fails with the error (or, out of time, with its expiry error)."""
        batch.attempts += 1
        batch.last_error = error
        retriable = error.retriable
        idem = self.idem
        if idem is not None and batch.sequence >= 0:
            # Its outcome may be unknown now, and OutOfOrderSequence may start an epoch bump.
            bump_was_pending = idem.bump_pending
            retriable = idem.send_failed(batch, error, written)
            if idem.bump_pending and not bump_was_pending:
                self._bump_started(batch)
        if retriable and not self._closed and time.monotonic() >= batch.deadline:
            # Out of delivery time: the same error as a batch that expires waiting, naming
            # this attempt's error as the last one.
            batch.complete(-1, batch.expiry_error("not delivered"))
            self._sequence_lost(batch)
            return
        if retriable and not self._closed and batch.attempts <= self.config.retries:
            now = time.monotonic()
            topic = batch.tp.topic
            until, quiet = self._retry_warned_until.get(topic, (0.0, 0))
            if now >= until:
                # Kafka's producer warns at every retry; once per topic per interval is
                # enough to make a full disk or a lost leader visible without a flood.
                self._retry_warned_until[topic] = (now + RETRY_WARNING_INTERVAL_S, 0)
                log.warning(
                    "retrying a record batch for %s (attempt %d, %.0f ms before its "
                    "delivery_timeout_ms) after %s: %s%s",
                    batch.tp,
                    batch.attempts,
                    (batch.deadline - now) * 1000,
                    type(error).__name__,
                    error,
                    f" ({quiet} more retries of {topic} since the last line)" if quiet else "",
                )
            else:
                self._retry_warned_until[topic] = (until, quiet + 1)
                log.debug("retrying batch for %s after %s", batch.tp, error)
            self.client.invalidate(batch.tp.topic)
            batch.retry_at = now + retry_backoff_s(self.config, batch.attempts)
            self.acc.requeue(batch)
            self._schedule_refresh(batch.tp.topic)
            return
        batch.complete(-1, error)
        self._sequence_lost(batch)

    async def wait_idle(self) -> None:
        if self._idle is None:
            raise InvariantError("self._idle is None")
        if self.acc.dead is not None:
            return  # nothing will happen any more: every batch has failed with the error
        # `_idle` is only updated when the sender runs: records appended since its last pass
        # (an AsyncProducer's sends do not yield to it) must not find it still set.
        with self.acc.lock:
            busy = self.acc.pending() > 0 or self._inflight_batches > 0
        if busy:
            self._idle.clear()
        self._kick()
        await self._idle.wait()

    async def close(self, timeout_s: float | None) -> None:
        self._closing = True
        self._kick()
        if self._sender is not None:
            # asyncio.wait, not wait_for: a sender that died with an error (a bug, already
            # logged by _sender_stopped) must not make close() raise it.
            finished, _ = await asyncio.wait({self._sender}, timeout=timeout_s)
            if not finished:
                self._sender.cancel()
        self._tasks.cancel()
        # From here a failed batch fails instead of waiting for a retry that will not come:
        # closing the connections fails the requests still in flight.
        self._closed = True
        await self.client.close()
        with self.acc.lock:
            leftovers = self.acc.take_all()
        for b in leftovers:
            b.complete(-1, RaftlogTimeoutError("producer closed before the record was sent"))
