"""Shared pieces of the integration tests: a real broker process, waits, a raw wire client.

Rules these helpers keep (STYLE.md, Tests): brokers are real `raftlog dev` processes, started
by the one launcher (raftlog/launcher.py), on 127.0.0.1 with their data in a temporary
directory; every wait is a poll of observable state (a node's ready file, a socket, a process
status) with a deadline, never a bare sleep; a broker that dies unexpectedly, exits non-zero
after SIGTERM, or logs a Python traceback fails the test. A node is ready when its data
directory has a `node.ready` file naming this process (raftlog/readiness.py), never by
parsing its output.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from raftlog import protocol
from raftlog.client import Consumer, ConsumerRecord
from raftlog.launcher import LaunchError, NodeProcess, close_all
from raftlog.launcher import cli_command as launcher_cli
from raftlog.messages.fetch import FetchPartition, FetchRequest
from raftlog.readiness import READY_FILE, read_ready_file
from raftlog.topics import TopicPartition

T = TypeVar("T")

HOST = "127.0.0.1"
# Generous deadlines: a 2-core CI machine under load starts Python slowly; a healthy broker
# meets them with a wide margin, and a hung one still fails the test in bounded time.
START_TIMEOUT_S = 30.0
# The broker's own shutdown_timeout_ms is 10 s; a graceful stop must fit in it with room to spare.
STOP_TIMEOUT_S = 15.0
POLL_INTERVAL_S = 0.005
CLI_TIMEOUT_S = 60.0


def wait_for(
    predicate: Callable[[], T], timeout_s: float, what: str, interval_s: float = POLL_INTERVAL_S
) -> T:
    """Poll `predicate` until it returns something truthy; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


def cli_command(*args: str) -> list[str]:
    """The `raftlog` command line, run with this interpreter (the test venv's)."""
    return launcher_cli(*args)


def run_cli(
    *args: str, input: bytes | None = None, timeout_s: float = CLI_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        cli_command(*args),
        input=input,
        capture_output=True,
        timeout=timeout_s,
        env=_child_env(),
    )
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode()
    )


def wait_node_ready(
    proc: subprocess.Popen[bytes], data_dir: Path, timeout_s: float, what: str
) -> dict[str, Any]:
    """The ready file `proc` writes in `data_dir` once it serves (raftlog/node.py); fails if
    the process exits first or the deadline passes."""

    def ready() -> dict[str, Any] | bool | None:
        info = read_ready_file(str(data_dir))
        if info is not None and info["pid"] == proc.pid:
            return info
        return proc.poll() is not None  # True: died before it was ready, reported below

    info = wait_for(ready, timeout_s, f"{what}'s {data_dir / READY_FILE}")
    if not isinstance(info, dict):
        raise AssertionError(f"{what} exited with status {proc.returncode} before it was ready")
    return info


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("RAFTLOG_BOOTSTRAP", None)  # every test names its broker explicitly
    return env


class BrokerProcess(NodeProcess):
    """One `raftlog dev` node as a child process; restartable on the same data dir and port.

    The launcher's NodeProcess (raftlog/launcher.py) with the tests' contract: `host`, `port`,
    `data_dir` and `proc` are the fixture's; failures are AssertionErrors carrying the log's
    tail. Each incarnation writes its stdout and stderr to its own files under `log_dir`, so a
    restart keeps the earlier logs for the traceback check and for failure messages.
    """

    def __init__(
        self, data_dir: Path, log_dir: Path, extra_args: Sequence[str] = (), name: str = "broker"
    ):
        super().__init__(name, [], [data_dir], log_dir=log_dir, log_stem="broker", env=_child_env())
        self.host = HOST
        self.port = 0  # the first start asks for any free port; restarts reuse the bound one
        self.kafka_address: str | None = None  # its Kafka listener's, from its ready file
        self.data_dir = data_dir
        self.extra_args = list(extra_args)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_files(self) -> list[Path]:
        """Each incarnation's stderr file."""
        return self.err_paths

    @property
    def stderr_path(self) -> Path:
        return self.err_paths[-1]

    # -- lifecycle ---------------------------------------------------------------------------

    def command_line(self) -> list[str]:
        """What the next incarnation runs: `raftlog dev` on this data dir, host and port."""
        return launcher_cli(
            "dev",
            "--data-dir",
            str(self.data_dir),
            "--host",
            self.host,
            "--port",
            str(self.port),
            *self.extra_args,
        )

    def start(self, timeout_s: float = START_TIMEOUT_S) -> list[dict[str, Any]]:
        assert not self.running(), f"{self.name} already running"
        self.launch()
        return [self.wait_started(timeout_s)]

    def launch(self) -> None:
        self.command = self.command_line()
        super().launch()

    def wait_started(self, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        """Wait for the launched incarnation's ready file and check it (`check_ready`); a
        start that fails kills what it started and fails with the log's tail."""
        try:
            (info,) = self.wait_ready(timeout_s)
        except LaunchError as e:
            self.kill()
            raise AssertionError(f"{e}:\n{self.log_tail()}") from None
        self.check_ready(info)
        return info

    def check_ready(self, info: dict[str, Any]) -> None:
        host, _, port = str(info["client_address"]).rpartition(":")
        assert host == self.host, f"broker listens on {info['client_address']}, not {self.host}"
        self.port = int(port)
        self.kafka_address = info.get("kafka_address")

    @property
    def kafka_bootstrap(self) -> str:
        """Its Kafka listener's address (Kafka's clients bootstrap from it)."""
        assert self.kafka_address, f"{self.name} has no Kafka listener"
        return self.kafka_address

    def stop(self, timeout_s: float = STOP_TIMEOUT_S, sig: signal.Signals = signal.SIGTERM) -> int:
        """SIGTERM, wait for a graceful exit; SIGKILL and fail if it does not come in time."""
        assert self.proc is not None
        self.check_alive()
        rc = super().stop(timeout_s, sig)
        if rc is None:
            raise AssertionError(
                f"{self.name} did not exit within {timeout_s} s of {sig.name}:\n" + self.log_tail()
            )
        return rc

    def interrupt(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        return self.stop(timeout_s, signal.SIGINT)

    def kill9(self) -> None:
        """SIGKILL: no flush, no close; the next start runs storage recovery."""
        assert self.proc is not None
        self.check_alive()
        super().kill9()

    def restart(self) -> None:
        """Graceful stop (which must exit 0), then start on the same data dir and port."""
        rc = self.stop()
        assert rc == 0, f"{self.name} exited with status {rc} on SIGTERM:\n{self.log_tail()}"
        self.start()

    def crash_restart(self) -> None:
        self.kill9()
        self.start()

    # -- health --------------------------------------------------------------------------------

    def check_alive(self) -> str | None:
        """Fail (with the log's tail) if the broker died without being asked to."""
        problem = self.note_exit()
        if problem is not None:
            raise AssertionError(f"{problem}:\n" + self.log_tail())
        return None

    def shutdown_and_check(self) -> list[str]:
        """Fixture teardown: stop the broker however it is, and list what went wrong."""
        return close_all([self], STOP_TIMEOUT_S)


# -- a raw wire client ------------------------------------------------------------------------


class RawClient:
    """A blocking socket speaking the wire protocol by hand: for fuzzing and exact checks."""

    def __init__(self, host: str, port: int, timeout_s: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout_s = timeout_s
        self.decoder = protocol.FrameDecoder(1 << 31)
        self._next_corr = 1

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def next_corr(self) -> int:
        corr = self._next_corr
        self._next_corr += 1
        return corr

    def send_request(
        self,
        api_key: int,
        body: Any,
        payload: Sequence[bytes] = (),
        api_version: int = 0,
        corr: int | None = None,
    ) -> int:
        corr = self.next_corr() if corr is None else corr
        frame = protocol.encode_request(api_key, api_version, corr, "raw-test", body, payload)
        self.sock.sendall(b"".join(bytes(p) for p in frame))
        return corr

    def recv_frame(self, timeout_s: float | None = None) -> tuple[list[Any], bytes] | None:
        """The next frame as (header, payload), or None if the broker closed the connection."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame[0], bytes(frame[1])
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no whole response frame before the deadline")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                raise TimeoutError("no whole response frame before the deadline") from None
            if not data:
                return None
            self.decoder.feed(data)

    def recv_response(self, timeout_s: float | None = None) -> tuple[int, dict[str, Any], bytes]:
        frame = self.recv_frame(timeout_s)
        assert frame is not None, "broker closed the connection instead of answering"
        corr, body = protocol.parse_response_header(frame[0])
        return corr, body, frame[1]

    def request(
        self, api_key: int, body: Any, payload: Sequence[bytes] = (), api_version: int = 0
    ) -> tuple[dict[str, Any], bytes]:
        corr = self.send_request(api_key, body, payload, api_version)
        got, resp, data = self.recv_response()
        assert got == corr, f"response for correlation id {got}, expected {corr}"
        return resp, data

    def response_pending(self, within_s: float) -> bool:
        """True if no response byte arrives within `within_s` (the request is being held)."""
        readable, _, _ = select.select([self.sock], [], [], within_s)
        return not readable

    def drain_until_closed(self, timeout_s: float = 10.0) -> list[tuple[list[Any], bytes]]:
        """Read whole frames until the broker closes the connection; fail at the deadline.

        A reset counts as closed: the broker may close with our unread bytes in its buffer.
        """
        frames = []
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                frame = self.recv_frame(max(deadline - time.monotonic(), 0.001))
            except ConnectionResetError:
                return frames
            except TimeoutError:
                raise AssertionError(
                    f"broker kept the connection open for {timeout_s} s "
                    f"({self.decoder.buffered_bytes} bytes of a partial frame buffered)"
                ) from None
            if frame is None:
                assert self.decoder.buffered_bytes == 0, "broker sent a truncated frame"
                return frames
            frames.append(frame)


def fetch_body(
    tps: dict[TopicPartition, int], max_wait_ms: int = 0, min_bytes: int = 1
) -> dict[str, Any]:
    """A consumer's Fetch body: each partition from its offset, 1 MiB each."""
    wanted = {tp: FetchPartition(tp.partition, offset, 1 << 20) for tp, offset in tps.items()}
    request = FetchRequest.of(wanted, max_wait_ms=max_wait_ms, min_bytes=min_bytes)
    return request.to_body()


def produce_body(topic: str, sizes: dict[int, int], acks: int = 1) -> dict[str, Any]:
    return {
        "acks": acks,
        "timeout_ms": 10_000,
        "topics": [[topic, [[p, n] for p, n in sizes.items()]]],
    }


def list_offsets_body(tps: dict[TopicPartition, int]) -> dict[str, Any]:
    topics: dict[str, list[list[int]]] = {}
    for tp, ts in tps.items():
        topics.setdefault(tp.topic, []).append([tp.partition, ts])
    return {"topics": [[t, ps] for t, ps in topics.items()]}


# -- consuming everything -----------------------------------------------------------------


def consume_exactly(
    bootstrap: str, topic: str, end_offsets: dict[int, int], timeout_s: float = 30.0
) -> dict[int, list[ConsumerRecord]]:
    """Every record of `topic` from offset 0 up to the given end offsets, by partition.

    Fails if a partition's offsets are not exactly 0, 1, ..., end - 1 (nothing lost, nothing
    duplicated, nothing past the end).
    """
    expected = sum(end_offsets.values())
    got: dict[int, list[ConsumerRecord]] = {p: [] for p in end_offsets}
    with Consumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        assert {tp.partition for tp in consumer.assignment()} == set(end_offsets)
        deadline = time.monotonic() + timeout_s
        n = 0
        while n < expected:
            assert time.monotonic() < deadline, f"consumed {n} of {expected} records of {topic}"
            for tp, records in consumer.poll(timeout_ms=500).items():
                got[tp.partition].extend(records)
                n += len(records)
        # Whatever the broker still has past the expected ends is a duplicate or a stray.
        for tp in consumer.assignment():
            assert consumer.position(tp) == end_offsets[tp.partition], tp
        ends = consumer.end_offsets(consumer.assignment())
    for p, records in got.items():
        assert [r.offset for r in records] == list(range(end_offsets[p])), f"{topic}-{p}"
        assert ends[TopicPartition(topic, p)] == end_offsets[p], f"{topic}-{p} log end"
    return got


def consume(consumer: Consumer, n: int, timeout_s: float = 30.0) -> None:
    """Poll until `n` records came (fails at the deadline)."""
    got = 0

    def enough() -> bool:
        nonlocal got
        got += sum(len(rs) for rs in consumer.poll(200).values())
        return got >= n

    wait_for(enough, timeout_s, f"{n} records consumed", interval_s=0)


def consume_and_commit(bootstrap: str, topic: str, group: str, n: int) -> None:
    """A member of `group` reads `n` records of `topic` from the earliest offset, commits them
    and leaves (a short session, so a group it leaves behind settles fast)."""
    with Consumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        session_timeout_ms=3000,
        heartbeat_interval_ms=300,
    ) as c:
        consume(c, n)
        c.commit()
