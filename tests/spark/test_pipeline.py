"""The page-view pipeline: batch and streaming give the same rows; `commitToGroup` makes the
job's lag visible; a group reset with the CLI and `startingOffsets=group:<id>` replays it to
identical results; the demo's report function returns the consumer's totals."""

from __future__ import annotations

import collections
import datetime
import json
import random
from typing import Any

from raftlog_spark.jobs import pageviews

from raftlog.client import Admin
from tests.integration._support import BrokerProcess, run_cli
from tests.spark._support import create_topic, latest, produce

TOPIC = "pageviews"
GROUP = "pageviews-spark"
PAGES = ["/", "/pricing", "/docs", "/blog", "/signup"]
BASE_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def _events(n: int) -> list[tuple[bytes, bytes]]:
    """Demo-shaped events (scripts/run): JSON keyed by user, spread over about five minutes."""
    rng = random.Random(5)
    seq: collections.Counter[str] = collections.Counter()
    out = []
    for i in range(n):
        user = f"user-{rng.randrange(300):04d}"
        event = {"user": user, "page": rng.choice(PAGES), "seq": seq[user], "ts": BASE_MS + i * 97}
        seq[user] += 1
        out.append((user.encode(), json.dumps(event).encode()))
    return out


def _expected(events: list[tuple[bytes, bytes]]) -> tuple[list[Any], list[Any]]:
    views: collections.Counter[tuple[datetime.datetime, str]] = collections.Counter()
    users: dict[str, set[str]] = collections.defaultdict(set)
    for _key, value in events:
        e = json.loads(value)
        minute = datetime.datetime.fromtimestamp(e["ts"] // 60000 * 60, datetime.UTC)
        views[(minute.replace(tzinfo=None), e["page"])] += 1
        users[e["page"]].add(e["user"])
    return sorted((m, p, n) for (m, p), n in views.items()), sorted(
        (p, len(u)) for p, u in users.items()
    )


def _rows(spark: Any, out_dir: str) -> tuple[list[Any], list[Any]]:
    views, users = pageviews.read_results(spark, out_dir)
    return [(r.minute, r.page, r.views) for r in views], [(r.page, r.users) for r in users]


def test_streaming_with_commit_to_group_then_replay_from_the_group(
    spark: Any, module_broker: BrokerProcess, tmp_path: Any
) -> None:
    boot = module_broker.bootstrap
    create_topic(boot, TOPIC, 3)
    events = _events(4000)
    produce(boot, TOPIC, events, linger_ms=10)
    expected = _expected(events)

    # Streaming, checkpointed, committing each micro-batch's end to the group.
    streamed = str(tmp_path / "streamed")
    query = pageviews.run_streaming(
        spark, boot, TOPIC, streamed, str(tmp_path / "checkpoint"),
        commitToGroup=GROUP, maxOffsetsPerTrigger="1500",
    )  # fmt: skip
    assert query.awaitTermination(300)
    assert query.exception() is None
    assert len([p for p in query.recentProgress if p["numInputRows"]]) >= 3
    pageviews.finalize(spark, streamed)
    assert _rows(spark, streamed) == expected

    # The group shows where the job is: everything read, no lag.
    ends = latest(boot, TOPIC)
    with Admin(boot) as admin:
        described = admin.describe_group(GROUP)["partitions"]
    assert {p["partition"]: p["committed"] for p in described} == ends
    assert all(p["lag"] == 0 for p in described)
    shown = run_cli("group", "describe", GROUP, "-b", boot)
    assert shown.returncode == 0, shown.stderr

    # Replay: reset the group with the CLI, run the batch job from the group's offsets.
    reset = run_cli(
        "group", "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest", "--execute", "-b", boot
    )
    assert reset.returncode == 0, reset.stderr + reset.stdout
    with Admin(boot) as admin:
        assert {
            p["partition"]: p["committed"] for p in admin.describe_group(GROUP)["partitions"]
        } == {p: 0 for p in ends}
    replayed = str(tmp_path / "replayed")
    pageviews.run_batch(spark, boot, TOPIC, replayed, starting_offsets=f"group:{GROUP}")
    assert _rows(spark, replayed) == expected

    # The report the demo calls: totals equal to what a consumer counts.
    summary = pageviews.run_pageview_report(
        boot, TOPIC, str(tmp_path / "report"), starting_offsets=f"group:{GROUP}", spark=spark
    )
    pages = collections.Counter(json.loads(v)["page"] for _, v in events)
    assert summary["events"] == len(events)
    assert summary["pages"] == dict(pages)
    assert summary["users_per_page"] == dict(expected[1])
    assert sum(summary["per_minute"].values()) == len(events)
