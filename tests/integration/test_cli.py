"""The `raftlog` client commands, run as subprocesses against a real broker.

Contract (raftlog/cli/__init__.py): output on stdout as documented; operating errors (no
broker, unknown topic) exit 1 with one line `raftlog: error: ...` on stderr and no traceback;
bad arguments exit 2 with argparse's usage message.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from tests.integration._support import BrokerProcess, run_cli


def ok(*args: str, input: bytes | None = None) -> str:
    res = run_cli(*args, input=input)
    assert res.returncode == 0, f"{args}: exit {res.returncode}\n{res.stdout}{res.stderr}"
    assert "Traceback" not in res.stderr
    return res.stdout


def fails(code: int, *args: str, input: bytes | None = None) -> str:
    """Run a command that must fail with `code`; returns its stderr."""
    res = run_cli(*args, input=input)
    assert res.returncode == code, f"{args}: exit {res.returncode}\n{res.stdout}{res.stderr}"
    assert "Traceback" not in res.stderr, res.stderr
    return res.stderr


def test_topic_lifecycle(broker: BrokerProcess) -> None:
    b = ("-b", broker.bootstrap)
    assert ok("topic", "list", *b) == ""
    out = ok("topic", "create", "events", "-p", "3", "-c", "retention.ms=60000", *b)
    assert out.strip() == "created topic events with 3 partition(s)"
    ok("topic", "create", "other", *b)
    assert ok("topic", "list", *b).splitlines() == ["events", "other"]

    text = ok("topic", "describe", "events", *b)
    lines = text.splitlines()
    assert lines[0].startswith("Topic: events ") and "Partitions: 3" in lines[0]
    assert "Configs: retention.ms=60000" in lines[0]
    assert [ln.split()[1] for ln in lines[1:]] == ["0", "1", "2"]
    assert all("Leader: 1" in ln and "LogEnd: 0" in ln for ln in lines[1:])

    [desc] = json.loads(ok("topic", "describe", "events", "--json", *b))
    assert desc["name"] == "events"
    assert desc["overrides"] == {"retention.ms": "60000"}
    assert desc["config"]["retention.ms"] == 60000
    assert [p["partition"] for p in desc["partitions"]] == [0, 1, 2]
    assert all(p["log_end_offset"] == 0 and p["isr"] == [1] for p in desc["partitions"])

    err = fails(1, "topic", "create", "events", *b)
    assert err.strip() == "raftlog: error: topic 'events' already exists"
    assert ok("topic", "create", "events", "--if-not-exists", *b).strip() == (
        "topic events already exists"
    )
    assert ok("topic", "delete", "events", "other", *b).strip() == "deleted events, other"
    assert ok("topic", "list", *b) == ""
    assert not (broker.data_dir / "logs" / "events-0").exists()


def test_produce_consume_and_offsets(broker: BrokerProcess) -> None:
    b = ("-b", broker.bootstrap)
    ok("topic", "create", "lines", "-p", "2", *b)
    lines = [f"user{i % 4}:click {i}" for i in range(40)] + ["no-separator-here"]
    res = run_cli(
        "produce", "lines", "--key-separator", ":", *b, input=("\n".join(lines) + "\n").encode()
    )
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip().endswith("produced 41 record(s) to lines")

    out = ok("consume", "lines", "--from-beginning", "--max-messages", "41", "--format", "json", *b)
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == 41
    assert {r["topic"] for r in records} == {"lines"}
    by_partition: dict[int, list[dict]] = {}
    for r in records:
        by_partition.setdefault(r["partition"], []).append(r)
    for rs in by_partition.values():
        assert [r["offset"] for r in rs] == list(range(len(rs)))
    # Keys split at the first separator, per-key order kept; a line without it has no key.
    for k in range(4):
        mine = [r for r in records if r["key"] == f"user{k}"]
        assert [r["value"] for r in mine] == [f"click {i}" for i in range(k, 40, 4)]
        assert len({r["partition"] for r in mine}) == 1
    [nokey] = [r for r in records if r["key"] is None]
    assert nokey["value"] == "no-separator-here" and nokey["headers"] == []

    # --max-messages stops early; plain format prints values.
    out = ok("consume", "lines", "--from-beginning", "--partition", "0", "--max-messages", "2", *b)
    p0 = [r["value"] for r in by_partition[0]]
    assert out.splitlines() == p0[:2]
    out = ok(
        "consume", "lines", "--partition", "0", "--offset", "1", "--max-messages", "1",
        "--format", "kv", *b,
    )  # fmt: skip
    first = by_partition[0][1]
    assert out == f"{first['key'] or ''}\t{first['value']}\n"
    # Nothing new: --timeout-ms ends a consume that would otherwise wait forever.
    out = ok("consume", "lines", "--timeout-ms", "300", *b)
    assert out == ""

    rows = json.loads(ok("offsets", "lines", "--json", *b))
    assert rows == [
        {"partition": p, "earliest": 0, "latest": len(by_partition.get(p, []))} for p in (0, 1)
    ]
    text = ok("offsets", "lines", *b).splitlines()
    assert text == [f"lines:{p}  earliest 0  latest {len(by_partition.get(p, []))}" for p in (0, 1)]
    ts = by_partition[0][0]["timestamp"]
    rows = json.loads(ok("offsets", "lines", "--time", str(ts), "--json", *b))
    assert rows[0]["at_time"] == 0
    rows = json.loads(ok("offsets", "lines", "--time", str(2**62), "--json", *b))
    assert [r["at_time"] for r in rows] == [-1, -1]


def test_produce_to_partition_with_acks(broker: BrokerProcess) -> None:
    b = ("-b", broker.bootstrap)
    ok("topic", "create", "acks", "-p", "3", *b)
    for acks in ("0", "1", "all"):
        res = run_cli("produce", "acks", "--partition", "2", "--acks", acks, *b, input=b"a\nb\n")
        assert res.returncode == 0, res.stderr
    out = ok("consume", "acks", "--from-beginning", "--max-messages", "6", "--format", "json", *b)
    records = [json.loads(line) for line in out.splitlines()]
    assert [(r["partition"], r["offset"], r["value"]) for r in records] == [
        (2, i, v) for i, v in enumerate(["a", "b"] * 3)
    ]


@pytest.fixture
def closed_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@pytest.mark.parametrize(
    "args",
    [
        ("topic", "list"),
        ("topic", "create", "t"),
        ("topic", "describe", "t"),
        ("topic", "delete", "t"),
        ("produce", "t"),
        ("consume", "t", "--max-messages", "1"),
        ("offsets", "t"),
    ],
    ids=lambda a: "-".join(a[:2]),
)
def test_unreachable_server_is_one_line_and_exit_1(closed_port: int, args: tuple[str]) -> None:
    where = f"127.0.0.1:{closed_port}"
    err = fails(1, *args, "-b", where, input=b"x\n")
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("raftlog: error: ") and where in lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ("topic", "describe", "nope"),
        ("topic", "delete", "nope"),
        ("produce", "nope"),
        ("consume", "nope", "--max-messages", "1"),
        ("offsets", "nope"),
    ],
    ids=lambda a: "-".join(a[:2]),
)
def test_unknown_topic_is_one_line_and_exit_1(broker: BrokerProcess, args: tuple[str]) -> None:
    err = fails(1, *args, "-b", broker.bootstrap, input=b"x\n")
    assert err.strip().splitlines() == ["raftlog: error: unknown topic 'nope'"]


def test_invalid_names_and_configs_are_one_line_and_exit_1(broker: BrokerProcess) -> None:
    b = ("-b", broker.bootstrap)
    err = fails(1, "topic", "create", "bad/name", *b)
    assert err.strip().splitlines() == [
        "raftlog: error: topic name 'bad/name' has characters outside ASCII letters, "
        "digits, '.', '_', '-'"
    ]
    err = fails(1, "topic", "create", "cfg", "-c", "segment.bytes=big", *b)
    assert len(err.strip().splitlines()) == 1 and "segment.bytes" in err
    err = fails(1, "consume", "t", "--offset", "3", *b)
    assert err.strip() == "raftlog: error: --offset needs exactly one --partition"


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("nosuchcommand",),
        ("topic",),
        ("topic", "create"),
        ("topic", "create", "t", "-p", "0"),
        ("topic", "create", "t", "-p", "many"),
        ("topic", "create", "t", "-c", "novalue"),
        ("produce", "t", "--acks", "2"),
        ("consume", "t", "--format", "xml"),
        ("consume", "t", "--max-messages", "0"),
        ("consume", "t", "--partition", "-1"),
        ("offsets",),
        ("dev", "--port", "http"),
    ],
    ids=lambda a: "-".join(a) or "empty",
)
def test_bad_arguments_exit_2(args: tuple[str]) -> None:
    err = fails(2, *args)
    assert "usage: raftlog" in err
