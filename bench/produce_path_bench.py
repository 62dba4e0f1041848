"""Where a one-record Produce request's CPU goes, measured in process, without sockets.

Run from the repository root::

    .venv/bin/python -m bench.produce_path_bench            # 200,000 requests, median of 5
    .venv/bin/python -m bench.produce_path_bench --quick    # small (tests)

The paper bench (`raftlog bench`) gives the end-to-end figure; this one splits it, so a change
to one side can be measured without the other side's noise:

- broker: pipelined one-record Produce frames (200-byte values) fed to a real broker
  `Connection` (real handlers, a real `PartitionLog` on disk, the metadata replaced by a
  one-topic stand-in, a transport that counts writes): CPU per request with 100 requests per
  read (what a pipelining producer delivers; the read's requests are appended together) and
  with 1 request per read in the same run (the baseline: every request appended alone);
- client: the producer core's work per record with one record per request: `send()` (append),
  the sender's drain and dispatch (a transport that drops the bytes), and the responses (real
  response frames fed to the connection), with the garbage collector on, as in a real run.

Each figure is the median of `--runs` runs (CPU time of this process). Results go to stdout
and bench/results/produce-path-<timestamp>.md.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import common
from bench.common import REPO, default_base_dir, machine_facts

VALUE = bytes(range(200))


class _Transport:
    """A transport that counts what would be written."""

    def __init__(self) -> None:
        self.writes = 0

    def writelines(self, parts: Any) -> None:
        self.writes += 1

    def write(self, data: Any) -> None:
        self.writes += 1

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 0)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class _Metadata:
    """The one-topic metadata a broker Connection needs (this node leads partition 0)."""

    topology_version = 0
    stale = False  # in contact with the metadata quorum (Broker.writable_partition asks)

    def __init__(self, topics: dict[str, Any]):
        self._topics = topics

    def topics(self) -> dict[str, Any]:
        return dict(self._topics)

    def partition(self, topic: str, partition: int) -> Any:
        t = self._topics.get(topic)
        return None if t is None or partition >= len(t.partitions) else t.partitions[partition]

    def broker_epochs(self) -> dict[int, int]:
        return {1: 1}

    def replication_throttle(self) -> int:
        return 0  # no reassignment here


def _produce_frames(n: int) -> list[bytes]:
    from raftlog import protocol
    from raftlog.records import BatchBuilder

    frames = []
    for i in range(n):
        head, tail = BatchBuilder.sealed_one(None, VALUE, 1_700_000_000_000 + i).seal()
        body = {"acks": 1, "timeout_ms": 30000, "topics": [["t", [[0, len(head) + len(tail)]]]]}
        parts = protocol.encode_request(protocol.ApiKey.PRODUCE, 0, i + 1, "b", body, [head, tail])
        frames.append(b"".join(bytes(p) for p in parts))
    return frames


def broker_us_per_request(n: int, per_read: int, base_dir: str, metrics: bool = True) -> float:
    """CPU microseconds per request for `n` requests delivered `per_read` at a time, with the
    broker counting requests and traffic for its metrics or not (`metrics_enable`)."""
    from raftlog.broker.connection import Connection
    from raftlog.broker.server import Broker, BrokerConfig
    from raftlog.metadata.model import PartitionInfo, TopicInfo

    frames = _produce_frames(n)
    reads = [b"".join(frames[i : i + per_read]) for i in range(0, n, per_read)]
    data_dir = tempfile.mkdtemp(prefix="raftlog-produce-path-", dir=base_dir)
    try:

        async def run() -> float:
            info = TopicInfo("t", "id", (PartitionInfo(0, 1, 0, (1,), (1,)),))
            broker = Broker(
                BrokerConfig(data_dir=data_dir, port=0, metrics_enable=metrics),
                _Metadata({"t": info}),
            )
            await broker.reconcile_now()
            conn = Connection(broker)
            conn.transport = _Transport()  # type: ignore[assignment]
            started = time.process_time()
            for data in reads:
                conn.data_received(data)
            cpu = time.process_time() - started
            from raftlog.topics import TopicPartition

            end = broker.logs.get(TopicPartition("t", 0)).log_end_offset
            assert end == n, f"{end} records appended of {n}"
            broker.logs.close()
            return cpu

        return asyncio.run(run()) / n * 1e6
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def client_us_per_record(n: int) -> tuple[float, float, float]:
    """CPU microseconds per record of (send, drain + dispatch, responses)."""
    from raftlog import protocol
    from raftlog.client.connection import BrokerConnection
    from raftlog.client.producer import ProducerConfig, _ProducerCore
    from raftlog.metadata.model import PartitionInfo, TopicInfo

    core = _ProducerCore(
        ProducerConfig(
            linger_ms=0,
            batch_size=1,
            max_request_size=1,
            max_in_flight_requests_per_connection=n,
            buffer_memory=1 << 40,
        )
    )
    core.client.topics["t"] = TopicInfo("t", "id", (PartitionInfo(0, 0, 0, (0,), (0,)),))
    core._wake = lambda: None  # type: ignore[method-assign]

    async def run() -> tuple[float, float, float]:
        conn = BrokerConnection("127.0.0.1", 0, "bench")
        conn.transport = _Transport()  # type: ignore[assignment]
        conn.limits_learned = True  # no broker to ask: its frame limit stays unknown
        core.loop = asyncio.get_running_loop()
        core.client.ready_connection = lambda node: conn  # type: ignore[method-assign]
        core.space, core._idle = asyncio.Event(), asyncio.Event()
        t0 = time.process_time()
        for _ in range(n):
            core.acc.append("t", VALUE, None, None, None, None, True)
        t1 = time.process_time()
        with core.acc.lock:
            requests, _, _ = core.acc.drain(
                time.monotonic(), core._node_of, core._free_slots, False
            )
        for node, node_requests in requests.items():
            core._dispatch(node, node_requests)
        t2 = time.process_time()
        ids = sorted(conn._pending)
        assert len(ids) == n, f"{len(ids)} requests of {n}"
        answers = b"".join(
            bytes(p)
            for i, corr in enumerate(ids)
            for p in protocol.encode_response(corr, {"topics": [["t", [[0, 0, i, 0, None]]]]})
        )
        t3 = time.process_time()
        for i in range(0, len(answers), 64 * 1024):
            conn.data_received(answers[i : i + 64 * 1024])
        t4 = time.process_time()
        assert conn.in_flight == 0
        return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6, (t4 - t3) / n * 1e6

    return asyncio.run(run())


def _median_of(runs: int, fn: Callable[[], Any], label: str) -> Any:
    results = []
    for i in range(runs):
        print(f"  {label}: run {i + 1} of {runs}", file=sys.stderr, flush=True)
        results.append(fn())
    if isinstance(results[0], tuple):
        return tuple(statistics.median(r[k] for r in results) for k in range(len(results[0])))
    return statistics.median(results)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=200_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="2,000 requests, 1 run (tests)")
    p.add_argument("--results-dir", default=str(REPO / "bench" / "results"))
    args = p.parse_args(argv)
    if args.requests < 100 or args.runs < 1:
        p.error("--requests must be >= 100 and --runs >= 1")
    n, runs = (2_000, 1) if args.quick else (args.requests, args.runs)
    base = default_base_dir()
    facts = machine_facts(base)
    grouped = _median_of(runs, lambda: broker_us_per_request(n, 100, base), "broker, 100/read")
    # The metrics' cost: runs with and without the counting, alternating, each first in every
    # other pair (the machine's speed drifts more between minutes than the difference).
    order = iter(range(runs))

    def pair() -> tuple[float, float]:
        if next(order) % 2:
            off = broker_us_per_request(n, 100, base, False)
            return broker_us_per_request(n, 100, base, True), off
        on = broker_us_per_request(n, 100, base, True)
        return on, broker_us_per_request(n, 100, base, False)

    metrics_on, metrics_off = _median_of(runs, pair, "broker, 100/read, metrics on and off")
    alone = _median_of(runs, lambda: broker_us_per_request(n, 1, base), "broker, 1/read")
    send, dispatch, responses = _median_of(runs, lambda: client_us_per_record(n), "client")
    rows = [
        ("broker, 100 requests per read (appended together)", grouped, f"{alone / grouped:.2f}x"),
        ("broker, 1 request per read (appended alone: baseline)", alone, "1.00x"),
        ("client, send()", send, ""),
        ("client, drain + dispatch", dispatch, ""),
        ("client, responses", responses, ""),
        ("client, total", send + dispatch + responses, ""),
    ]
    command = "python -m bench.produce_path_bench " + " ".join(argv or sys.argv[1:])
    lines = [
        f"# One-record Produce requests, CPU per request ({facts['date']})",
        "",
        f"Command: `{command.strip()}`; {n:,} requests, median of {runs} run(s).",
        "",
        "Machine: " + ", ".join(f"{k}={v}" for k, v in facts.items()),
        "",
        "| path | CPU µs per request | speed-up vs baseline |",
        "|---|---:|---:|",
        *(f"| {name} | {us:.2f} | {ratio} |" for name, us, ratio in rows),
        "",
        f"Metrics (raftlog/metrics/stats.py's counting, 100 requests per read, runs "
        f"alternating): on {metrics_on:.2f} µs, off {metrics_off:.2f} µs per request, "
        f"on/off {metrics_on / metrics_off:.3f}.",
    ]
    report = "\n".join(lines) + "\n"
    print(report)
    prefix = common.results_prefix(args.results_dir, "produce-path", common.run_stamp(utc=False))
    path = Path(f"{prefix}.md")
    path.write_text(report)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
