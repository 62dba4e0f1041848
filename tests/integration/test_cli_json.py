"""The CLI's machine-readable output and its group offset tool, against a real broker.

- Every `--json` output has named fields: no positional arrays a reader must count into
  (`topic list --json` and `group list --json` exist).
- Repeated header keys survive `consume --format json` (headers are a list, in order).
- `group reset-offsets` clamps an offset outside the log (as Kafka does) and says so, and
  refuses an active group before it prints any plan.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from raftlog.client import Admin, Consumer, Producer
from tests.integration._support import BrokerProcess, run_cli, wait_for

TOPIC = "json-out"
GROUP = "json-group"


def ok(*args: str) -> str:
    res = run_cli(*args)
    assert res.returncode == 0, f"{args}: exit {res.returncode}\n{res.stdout}{res.stderr}"
    assert "Traceback" not in res.stderr
    return res.stdout


def positional_arrays(value: Any, where: str = "$") -> list[str]:
    """Paths of lists that hold lists or mixed types: fields a reader must know by position.
    Lists of one scalar type (replica ids, topic names) are values, not records."""
    found = []
    if isinstance(value, dict):
        for k, v in value.items():
            found += positional_arrays(v, f"{where}.{k}")
    elif isinstance(value, list):
        if any(isinstance(v, list) for v in value) or len({type(v) for v in value}) > 1:
            found.append(where)
        for i, v in enumerate(value):
            found += positional_arrays(v, f"{where}[{i}]")
    return found


@pytest.fixture(scope="module")
def json_broker(module_broker: BrokerProcess) -> BrokerProcess:
    with Admin(module_broker.bootstrap) as admin:
        admin.create_topic(TOPIC, 2)
    with Producer(bootstrap_servers=module_broker.bootstrap, acks=1) as producer:
        for i in range(6):
            producer.send(TOPIC, b"v%d" % i, partition=i % 2)
        producer.send(
            TOPIC,
            b"with-headers",
            partition=0,
            headers=[("trace", b"a"), ("other", None), ("trace", b"b")],
        )
        producer.flush(10)
    # A group with committed offsets and, while the test needs it, a member.
    with Consumer(
        TOPIC,
        bootstrap_servers=module_broker.bootstrap,
        group_id=GROUP,
        auto_offset_reset="earliest",
    ) as consumer:
        got = 0
        while got < 7:
            got += sum(len(rs) for rs in consumer.poll(500).values())
        consumer.commit()
    return module_broker


def test_every_json_output_has_named_fields(json_broker: BrokerProcess) -> None:
    b = ("-b", json_broker.bootstrap)
    outputs = {
        "topic list": json.loads(ok("topic", "list", "--json", *b)),
        "topic describe": json.loads(ok("topic", "describe", TOPIC, "--json", *b)),
        "offsets": json.loads(ok("offsets", TOPIC, "--json", *b)),
        "group list": json.loads(ok("group", "list", "--json", *b)),
        "group describe": json.loads(ok("group", "describe", GROUP, "--json", *b)),
    }
    for command, out in outputs.items():
        assert not positional_arrays(out), f"{command} --json: {positional_arrays(out)}"
    [topic] = [t for t in outputs["topic list"] if t["name"] == TOPIC]
    assert topic["partitions"] == 2 and topic["topic_id"]
    [group] = [g for g in outputs["group list"] if g["group_id"] == GROUP]
    assert group["state"] == "Empty" and group["members"] == 0
    described = outputs["group describe"]
    assert {(o["topic"], o["partition"], o["offset"]) for o in described["offsets"]} == {
        (TOPIC, 0, 4),
        (TOPIC, 1, 3),
    }
    assert [p["log_end_offset"] for p in described["partitions"]] == [4, 3]


def test_repeated_header_keys_survive_json_output(json_broker: BrokerProcess) -> None:
    out = ok(
        "consume", TOPIC, "--partition", "0", "--offset", "3", "--max-messages", "1",
        "--format", "json", "-b", json_broker.bootstrap,
    )  # fmt: skip
    record = json.loads(out)
    assert record["value"] == "with-headers"
    assert record["headers"] == [
        {"key": "trace", "value": "a"},
        {"key": "other", "value": None},
        {"key": "trace", "value": "b"},
    ]


def test_reset_offsets_clamps_to_the_log_and_says_so(json_broker: BrokerProcess) -> None:
    b = ("-b", json_broker.bootstrap)
    plan = ok("group", "reset-offsets", GROUP, "--topic", TOPIC, "--to-offset", "999999", *b)
    assert plan.splitlines() == [
        f"{GROUP}  {TOPIC}-0  -> 4  (999999 is past the log end: clamped)",
        f"{GROUP}  {TOPIC}-1  -> 3  (999999 is past the log end: clamped)",
        "(dry run: add --execute to apply)",
    ]
    ok("group", "reset-offsets", GROUP, "--topic", TOPIC, "--to-offset", "999999", "--execute", *b)
    with Admin(json_broker.bootstrap) as admin:
        committed = {(t, p): o for t, p, o, *_ in admin.describe_group(GROUP)["offsets"]}
    assert committed == {(TOPIC, 0): 4, (TOPIC, 1): 3}
    # Within the log: as given, no note.
    plan = ok("group", "reset-offsets", GROUP, "--topic", TOPIC, "--to-offset", "2", *b)
    assert plan.splitlines()[:2] == [f"{GROUP}  {TOPIC}-0  -> 2", f"{GROUP}  {TOPIC}-1  -> 2"]


def test_reset_offsets_refuses_an_active_group_before_any_plan(
    json_broker: BrokerProcess,
) -> None:
    with (
        Consumer(
            TOPIC,
            bootstrap_servers=json_broker.bootstrap,
            group_id=GROUP,
            auto_offset_reset="earliest",
        ),
        Admin(json_broker.bootstrap) as admin,
    ):
        wait_for(lambda: admin.describe_group(GROUP)["members"], 10, "an active member")
        for extra in ((), ("--execute",)):
            res = run_cli(
                "group", "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest", *extra,
                "-b", json_broker.bootstrap,
            )  # fmt: skip
            assert res.returncode == 1, res
            assert res.stdout == "", f"a plan was printed for an active group:\n{res.stdout}"
            assert res.stderr.strip() == (
                f"raftlog: error: group '{GROUP}' has 1 active member(s): stop them before "
                "resetting its offsets; nothing was reset"
            )
