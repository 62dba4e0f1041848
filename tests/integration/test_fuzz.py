"""Fuzzed frames never stop the server, never corrupt data, never leave a traceback.

One broker serves the whole module. Every hypothesis example opens its own raw connection and
sends something broken: garbage bytes, a valid length prefix with a garbage header, a valid
request with fields of the wrong type, an unknown API key or version, a frame cut short, a frame
over the size limit, a produce with bit-flipped batch bytes. Then `FuzzEnv.check` verifies, on
other connections, that the process is alive, that a normal client (Admin) still works, that
the canary topic written at the start still reads back byte-for-byte, and that the broker's log
holds no traceback and no ERROR line since the previous example.

What the broker must do with each kind of input (raftlog/broker/connection.py): an unparseable
frame is answered with an error if its correlation id can be read, and the connection is
closed (a frame over the size limit once its rest has arrived and been dropped); a well-framed
request with bad content gets an error response and the connection stays open; a produce
whose batch fails validation gets CorruptRecordError for that partition and appends nothing.

RAFTLOG_SLOW=1 runs ten times as many examples.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from raftlog import protocol
from raftlog.broker.connection import OVERSIZED_HEADER_BYTES_MAX
from raftlog.client import Admin, Producer, TopicPartition
from raftlog.errors import (
    CorruptRecordError,
    InvalidRequestError,
    RecordTooLargeError,
    UnsupportedVersionError,
)
from raftlog.records import CHECKSUMMED_FROM, LENGTH_AT, MAGIC_AT, encode_batch, iter_records
from tests.integration._support import (
    BrokerProcess,
    RawClient,
    fetch_body,
    list_offsets_body,
)

SLOW = os.environ.get("RAFTLOG_SLOW") == "1"
CANARY = "canary"
CANARY_PARTITIONS = 3
SINK = "fuzz-sink"  # where mutated produce requests may legitimately append
CORRUPT = "fuzz-corrupt"  # partition 0 must stay empty; partition 1 takes the valid batches
LIMIT = protocol.DEFAULT_MAX_FRAME_BYTES  # `raftlog dev` has no flag to lower it


def examples(n: int) -> settings:
    return settings(
        max_examples=n * 10 if SLOW else n,
        deadline=None,  # socket round trips make per-example times noisy
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@dataclass
class FuzzEnv:
    broker: BrokerProcess = field(repr=False)
    admin: Admin = field(repr=False)
    canary_bytes: dict[int, bytes] = field(repr=False)
    canary_ends: dict[int, int]
    corrupt_p1_end: int = 0
    log_offset: int = 0
    checks: int = 0

    def __repr__(self) -> str:  # hypothesis prints it with every failing example
        return f"FuzzEnv(broker={self.broker.bootstrap}, checks={self.checks})"

    @contextlib.contextmanager
    def example(self) -> Iterator[None]:
        """Run one example, then `check`. Whatever the broker logged during the example is
        read either way, so a failure is reported by the example that caused it (with the
        log attached), never by the next one."""
        try:
            yield
        except BaseException as e:
            e.add_note("broker log during this example:\n" + self.read_new_log()[-5000:])
            raise
        self.check()

    def check(self) -> None:
        """The broker is up, serves normal clients, and every earlier write is intact."""
        self.checks += 1
        self.broker.check_alive()
        topics = self.admin.list_topics()  # a normal client on its own, long-lived connection
        assert len(topics[CANARY].partitions) == CANARY_PARTITIONS
        tps = {TopicPartition(CANARY, p): 0 for p in range(CANARY_PARTITIONS)}
        with RawClient(self.broker.host, self.broker.port) as raw:
            body, payload = raw.request(protocol.ApiKey.FETCH, fetch_body(tps))
            pos = 0
            for _, parts in body["topics"]:
                for partition, error, hw, start, nbytes, *_ in parts:
                    assert (error, start, hw) == (0, 0, self.canary_ends[partition])
                    assert payload[pos : pos + nbytes] == self.canary_bytes[partition]
                    pos += nbytes
            corrupt = {TopicPartition(CORRUPT, 0): -1, TopicPartition(CORRUPT, 1): -1}
            body, _ = raw.request(protocol.ApiKey.LIST_OFFSETS, list_offsets_body(corrupt))
            ends = {p[0]: p[3] for p in body["topics"][0][1]}
            assert ends == {0: 0, 1: self.corrupt_p1_end}, "a corrupt batch was appended"
        self.check_log()

    def read_new_log(self) -> str:
        with open(self.broker.stderr_path, "rb") as f:
            f.seek(self.log_offset)
            new = f.read()
        self.log_offset += len(new)
        return new.decode(errors="replace")

    def check_log(self) -> None:
        text = self.read_new_log()
        for marker in ("Traceback", " ERROR ", " CRITICAL "):
            assert marker not in text, f"broker logged {marker.strip()}:\n{text[-5000:]}"


@pytest.fixture(scope="module")
def env(module_broker: BrokerProcess) -> Iterator[FuzzEnv]:
    b = module_broker
    admin = Admin(b.bootstrap)
    admin.create_topic(CANARY, CANARY_PARTITIONS)
    admin.create_topic(SINK, 1)
    admin.create_topic(CORRUPT, 2)
    with Producer(bootstrap_servers=b.bootstrap, acks="all", batch_size=512) as producer:
        for i in range(300):
            producer.send(CANARY, b"canary-%d" % i, key=b"k%d" % (i % 10))
        producer.flush(timeout=30)
    tps = {TopicPartition(CANARY, p): 0 for p in range(CANARY_PARTITIONS)}
    canary_bytes, canary_ends = {}, {}
    with RawClient(b.host, b.port) as raw:
        body, payload = raw.request(protocol.ApiKey.FETCH, fetch_body(tps))
    pos = 0
    for _, parts in body["topics"]:
        for partition, error, hw, _, nbytes, *_ in parts:
            assert error == 0
            canary_bytes[partition] = payload[pos : pos + nbytes]
            canary_ends[partition] = hw
            pos += nbytes
            assert len(list(iter_records(canary_bytes[partition]))) == hw
    assert sum(canary_ends.values()) == 300
    e = FuzzEnv(b, admin, canary_bytes, canary_ends)
    e.check()
    try:
        yield e
    finally:
        admin.close()


def open_raw(env: FuzzEnv) -> RawClient:
    return RawClient(env.broker.host, env.broker.port, timeout_s=10)


def send_ignoring_close(raw: RawClient, data: bytes) -> None:
    """Send all of `data`; the broker may close (or reset) before it has read it all."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        raw.sock.sendall(data)


def assert_responses(frames: list[tuple[list[Any], bytes]]) -> list[tuple[int, dict[str, Any]]]:
    """Whatever the broker sent back is well-formed response frames."""
    return [protocol.parse_response_header(header) for header, _ in frames]


# -- strategies ----------------------------------------------------------------------------

FIELD_NAMES = [
    "topics", "name", "partitions", "replication_factor", "config", "validate_only", "acks",
    "timeout_ms", "replica_id", "max_wait_ms", "min_bytes", "max_bytes", "allow_auto_create",
]  # fmt: skip

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.sampled_from([0, 1, -1, -2, 2**31, 2**63 - 1, 2**64 - 1, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.inf, -math.inf, math.nan, 1e30, -0.0, 0.5]),
    st.text(max_size=12),
    st.binary(max_size=12),
    st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=8)),
)
wire_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=6), st.integers(-9, 9)),
            children,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


def request_frame(
    api_key: Any, version: Any, corr: Any, body: Any, payload: bytes = b"", client_id: Any = "fz"
) -> bytes:
    header = msgpack.packb([api_key, version, corr, client_id, body], use_bin_type=True)
    return struct.pack("<II", 4 + len(header) + len(payload), len(header)) + header + payload


def templates() -> dict[int, tuple[dict[str, Any], bytes]]:
    """A valid request body (and payload) per API, harmless to run any number of times."""
    batch = encode_batch([(b"k", b"v")])
    return {
        protocol.ApiKey.API_VERSIONS: ({}, b""),
        protocol.ApiKey.METADATA: ({"topics": [CANARY], "allow_auto_create": False}, b""),
        protocol.ApiKey.CREATE_TOPICS: (
            {
                "topics": [
                    {
                        "name": "fuzz-created",
                        "partitions": 1,
                        "replication_factor": 1,
                        "config": {"retention.ms": "60000"},
                    }
                ],
                "validate_only": True,
            },
            b"",
        ),
        protocol.ApiKey.DELETE_TOPICS: ({"topics": ["fuzz-absent"]}, b""),
        protocol.ApiKey.DESCRIBE_CONFIGS: ({"topics": [CANARY]}, b""),
        protocol.ApiKey.PRODUCE: (
            {"acks": 1, "timeout_ms": 1000, "topics": [[SINK, [[0, len(batch)]]]]},
            batch,
        ),
        protocol.ApiKey.FETCH: (
            {
                "replica_id": -1,
                "max_wait_ms": 10,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "topics": [[CANARY, [[0, 0, 1 << 20]]]],
            },
            b"",
        ),
        protocol.ApiKey.LIST_OFFSETS: ({"topics": [[CANARY, [[0, -2], [1, -1], [2, 1000]]]]}, b""),
    }


TEMPLATES = templates()


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a nested body, the body itself first."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, (*prefix, i))


def get_at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = replaced(value[path[0]], path[1:], new)
    return copy


@st.composite
def mutated_requests(draw: st.DrawFn) -> tuple[int, Any, bytes, tuple[Any, ...]]:
    """A template request with one field replaced by a value of another type."""
    api = draw(st.sampled_from(sorted(TEMPLATES)))
    body, payload = TEMPLATES[api]
    path = draw(st.sampled_from(list(paths(body))))
    old = get_at(body, path)
    new = draw(wire_values.filter(lambda v: type(v) is not type(old)))
    return api, replaced(body, path, new), payload, path


def exchange_then_probe(
    env: FuzzEnv, frame: bytes, corr: int, may_go_unanswered: bool
) -> dict[str, Any] | None:
    """Send a well-framed request, then an ApiVersions probe on the same connection.

    The request must be answered (unless `may_go_unanswered`: an acks=0 produce), before the
    probe, and the probe must be answered too: the connection stays open.
    """
    probe = 2**40 + 7
    with open_raw(env) as raw:
        raw.sock.sendall(frame + request_frame(int(protocol.ApiKey.API_VERSIONS), 0, probe, {}))
        got: list[tuple[int, dict[str, Any]]] = []
        while not got or got[-1][0] != probe:
            frame_in = raw.recv_frame()
            assert frame_in is not None, f"connection closed after {got}"
            got.append(protocol.parse_response_header(frame_in[0]))
    answers = [body for c, body in got[:-1]]
    assert [c for c, _ in got[:-1]] == ([corr] if answers or not may_go_unanswered else [])
    assert "apis" in got[-1][1]
    return answers[0] if answers else None


# -- the fuzz tests --------------------------------------------------------------------------


@examples(700)
@given(data=st.binary(min_size=1, max_size=4096))
@example(data=b"\x00\x00\x00\x00")
@example(data=b"\xff\xff\xff\xff")
@example(data=struct.pack("<II", 8, 4) + b"\xc1\xc1\xc1\xc1")  # 0xc1: never valid msgpack
def test_garbage_bytes(env: FuzzEnv, data: bytes) -> None:
    with env.example(), open_raw(env) as raw:
        send_ignoring_close(raw, data)
        with contextlib.suppress(OSError):  # already closed by the broker
            raw.sock.shutdown(socket.SHUT_WR)  # the broker closes at EOF if not before
        assert_responses(raw.drain_until_closed())


def fatal_for_the_broker(frame: bytes) -> bool:
    """Whether the broker's own rules close this connection without waiting for more."""
    decoder = protocol.FrameDecoder()
    decoder.feed(frame)
    try:
        got = decoder.next_frame()
        if got is not None:
            protocol.parse_request_header(got[0])
    except protocol.RemoteProtocolError as e:
        return e.fatal
    return False


@examples(600)
@given(
    header=st.binary(max_size=64) | wire_values.map(msgpack.packb),
    payload=st.binary(max_size=64),
    header_length=st.none() | st.integers(0, 2**32 - 1),
)
@example(header=b"\x93\x01\x02\x03", payload=b"", header_length=None)  # an array of 3
@example(header=b"\xa3abc", payload=b"", header_length=None)  # not an array
@example(header=b"", payload=b"", header_length=1)  # header longer than the frame
def test_length_prefix_with_garbage_header(
    env: FuzzEnv, header: bytes, payload: bytes, header_length: int | None
) -> None:
    hlen = len(header) if header_length is None else header_length
    frame = struct.pack("<II", 4 + len(header) + len(payload), hlen) + header + payload
    fatal = fatal_for_the_broker(frame)
    with env.example(), open_raw(env) as raw:
        send_ignoring_close(raw, frame)
        if not fatal:
            # A valid request or an incomplete one: the broker may answer and keep waiting.
            raw.sock.shutdown(socket.SHUT_WR)
        # A fatal frame: the broker must close the connection by itself.
        assert_responses(raw.drain_until_closed())


@examples(900)
@given(mutated_requests())
@example((protocol.ApiKey.PRODUCE, {"acks": 1, "topics": [[SINK, [[0, 0.0]]]]}, b"x" * 92, ()))
@example((protocol.ApiKey.FETCH, {"max_wait_ms": math.inf, "topics": []}, b"", ()))
@example((protocol.ApiKey.FETCH, {"topics": [[CANARY, [[1e30, 0, 100]]]]}, b"", ()))
@example((protocol.ApiKey.FETCH, {"topics": [[CANARY, [[0, 2**64 - 1, 100]]]]}, b"", ()))
@example(
    (
        protocol.ApiKey.CREATE_TOPICS,
        {"topics": [{"name": "x", "config": {"retention.ms": math.inf}}], "validate_only": True},
        b"",
        (),
    )
)
@example((protocol.ApiKey.LIST_OFFSETS, {"topics": [[CANARY, [[0, math.inf]]]]}, b"", ()))
def test_valid_header_with_wrong_field_types(
    env: FuzzEnv, request: tuple[int, Any, bytes, tuple[Any, ...]]
) -> None:
    api, body, payload, _path = request
    corr = 77
    no_answer_ok = (
        api == protocol.ApiKey.PRODUCE and isinstance(body, dict) and body.get("acks", 1) == 0
    )
    frame = request_frame(int(api), 0, corr, body, payload)
    with env.example():
        answer = exchange_then_probe(env, frame, corr, no_answer_ok)
        if answer is not None and "error" in answer:
            assert isinstance(answer["error"], int) and isinstance(answer["message"], str)


@examples(500)
@given(
    api=st.sampled_from([int(k) for k in protocol.ApiKey]),
    body=st.dictionaries(st.sampled_from(FIELD_NAMES), wire_values, max_size=6),
    payload=st.binary(max_size=200),
)
def test_random_bodies_for_every_api(
    env: FuzzEnv, api: int, body: dict[str, Any], payload: bytes
) -> None:
    if api == protocol.ApiKey.CREATE_TOPICS:
        body["validate_only"] = True  # random specs must not create thousands of partitions
    if api == protocol.ApiKey.DELETE_TOPICS and CANARY in repr(body):
        body["topics"] = []
    if api == protocol.ApiKey.FETCH:
        body["max_wait_ms"] = 0  # a random fetch must not long-poll for minutes
    corr = 5
    no_answer_ok = api == protocol.ApiKey.PRODUCE and body.get("acks", 1) == 0
    with env.example():
        exchange_then_probe(env, request_frame(api, 0, corr, body, payload), corr, no_answer_ok)


@examples(400)
@given(
    api_key=st.integers(-(2**63), 2**64 - 1),
    version=st.integers(-(2**63), 2**64 - 1) | st.sampled_from([0, 1, -1]),
    corr=st.integers(-(2**63), 2**64 - 1),
)
@example(api_key=8, version=0, corr=1)
@example(api_key=int(protocol.ApiKey.PRODUCE), version=1, corr=2)
@example(api_key=2**64 - 1, version=2**64 - 1, corr=-(2**63))
def test_unknown_api_keys_and_versions(env: FuzzEnv, api_key: int, version: int, corr: int) -> None:
    if api_key in protocol.SUPPORTED_VERSIONS and version == 0:
        api_key = 1000  # that one is known: make it unknown
    with env.example():
        answer = exchange_then_probe(env, request_frame(api_key, version, corr, {}), corr, False)
        assert answer is not None and answer["error"] == UnsupportedVersionError.code, answer


@examples(400)
@given(
    api=st.sampled_from(sorted(TEMPLATES)),
    whole=st.lists(st.sampled_from(["versions", "long-poll"]), max_size=3),
    cut=st.floats(0, 1, exclude_max=True),
    claimed=st.none() | st.integers(4, LIMIT),
    abrupt=st.booleans(),
)
def test_truncated_frame_then_close(
    env: FuzzEnv, api: int, whole: list[str], cut: float, claimed: int | None, abrupt: bool
) -> None:
    """Whole requests (maybe a long-polling fetch), then a frame cut short, then the client
    goes away: abruptly, or by half-closing and waiting for the broker to close too."""
    body, payload = TEMPLATES[api]
    frame = request_frame(int(api), 0, 9, body, payload)
    if claimed is not None:
        frame = struct.pack("<I", claimed) + frame[4:]  # a length prefix that lies
    canary_end = {TopicPartition(CANARY, 0): env.canary_ends[0]}
    prefix = {
        "versions": request_frame(0, 0, 1, {}),
        "long-poll": request_frame(6, 0, 2, fetch_body(canary_end, max_wait_ms=2000)),
    }
    data = b"".join(prefix[w] for w in whole) + frame[: int(len(frame) * cut)]
    with env.example(), open_raw(env) as raw:
        send_ignoring_close(raw, data)
        if not abrupt:
            # Half-close and wait for the broker to close: it has then handled every byte.
            with contextlib.suppress(OSError):
                raw.sock.shutdown(socket.SHUT_WR)
            assert_responses(raw.drain_until_closed())


def oversized_outcome(claimed: int, tail: bytes) -> tuple[str, int | None, Any]:
    """What the broker must do with a frame over the limit whose bytes after its length field
    begin with `tail` (raftlog/broker/connection.py): answer the header's correlation id, close
    at once (a header it cannot read), or wait for more (until the frame's deadline)."""
    if len(tail) < 4:
        return "wait", None, None
    header_length = int.from_bytes(tail[:4], "little")
    if header_length > min(OVERSIZED_HEADER_BYTES_MAX, claimed - 4):
        return "close", None, None
    if len(tail) < 4 + header_length:
        return "wait", None, None
    try:
        header = msgpack.unpackb(tail[4 : 4 + header_length], raw=False, strict_map_key=False)
    except Exception:
        return "close", None, None
    if isinstance(header, list) and len(header) > 2 and type(header[2]) is int:
        return "answer", header[2], header[0]
    return "close", None, None


@examples(150)
@given(
    claimed=st.integers(LIMIT + 1, 2**32 - 1),
    tail=st.one_of(
        st.binary(max_size=4096),
        # A header that reads: the broker answers it.
        st.builds(
            lambda api, corr, body, rest: (
                struct.pack("<I", len(h := msgpack.packb([api, 0, corr, "fuzz", body]))) + h + rest
            ),
            st.integers(0, 30),
            st.integers(0, 2**32 - 1),
            st.dictionaries(st.sampled_from(FIELD_NAMES), scalars, max_size=3),
            st.binary(max_size=64),
        ),
    ),
)
@example(claimed=200 * 1024 * 1024, tail=b"")
@example(claimed=LIMIT + 1, tail=b"\x00" * 4096)
def test_frame_over_the_size_limit_is_answered_or_closed_never_buffered(
    env: FuzzEnv, claimed: int, tail: bytes
) -> None:
    outcome, corr, api = oversized_outcome(claimed, tail)
    with env.example(), open_raw(env) as raw:
        send_ignoring_close(raw, struct.pack("<I", claimed) + tail)
        if outcome == "close":
            assert raw.drain_until_closed() == []
        elif outcome == "answer":
            got, body, _ = raw.recv_response()
            assert got == corr, (got, body)
            produce = type(api) is int and api == protocol.ApiKey.PRODUCE
            code = RecordTooLargeError.code if produce else InvalidRequestError.code
            assert body["error"] == code, body
            assert (
                f"frame of {claimed} bytes (after its length field) exceeds broker 1's "
                f"request_bytes_max={LIMIT}"
            ) in body["message"], body
            # The rest would be dropped as it came; it never comes, and we hang up.
        else:
            assert raw.response_pending(within_s=0.2), "answered a header it had not read"


# Bits outside these ranges are the base offset and leader epoch, which the broker overwrites.
CHECKED_BYTES = st.one_of(st.integers(LENGTH_AT, LENGTH_AT + 3), st.integers(MAGIC_AT, 10**6))


@examples(400)
@given(
    values=st.lists(st.binary(max_size=40), min_size=1, max_size=8),
    flips=st.lists(st.tuples(CHECKED_BYTES, st.integers(0, 7)), min_size=1, max_size=3),
    valid_first=st.booleans(),
)
@example(values=[b"v"], flips=[(MAGIC_AT, 0)], valid_first=False)
@example(values=[b"v"], flips=[(CHECKSUMMED_FROM, 0)], valid_first=False)
@example(values=[b"v"], flips=[(LENGTH_AT, 0)], valid_first=True)
def test_corrupt_batch_gets_corrupt_record_error_and_is_not_appended(
    env: FuzzEnv, values: list[bytes], flips: list[tuple[int, int]], valid_first: bool
) -> None:
    good = encode_batch([(None, v) for v in values])
    bad = bytearray(good)
    for byte, bit in flips:
        at = byte if byte < MAGIC_AT else MAGIC_AT + (byte - MAGIC_AT) % (len(bad) - MAGIC_AT)
        bad[at] ^= 1 << bit
    if bytes(bad) == good:  # the flips cancelled out
        bad[MAGIC_AT] ^= 1
    # Partition 0: the corrupt batch (after a valid one, sometimes: nothing of the chunk may be
    # appended); partition 1 in the same request: a valid batch, appended.
    chunk0 = (good + bytes(bad)) if valid_first else bytes(bad)
    body = {
        "acks": 1,
        "timeout_ms": 1000,
        "topics": [[CORRUPT, [[0, len(chunk0)], [1, len(good)]]]],
    }
    with env.example():
        with open_raw(env) as raw:
            resp, _ = raw.request(protocol.ApiKey.PRODUCE, body, [chunk0, good])
        [[topic, [p0, p1]]] = resp["topics"]
        assert topic == CORRUPT
        assert p0[:4] == [0, CorruptRecordError.code, -1, -1], p0
        assert "nothing appended" in p0[4]
        assert p1[:3] == [1, 0, env.corrupt_p1_end], p1
        env.corrupt_p1_end += len(values)
