"""The `reassign` fault: replicas move and the topic grows while a node is killed.

Elasticity under faults (KIP-455's promise): a reassignment adds the new replicas, lets them
catch up and join the ISR, then drops the old ones, and nothing acknowledged may be lost if any
node dies at any step. `moved_replicas(spec, cluster, topic, rng, partitions)`:

- picks up to two partitions of the topic (seeded by the fault) and moves one replica of each
  to a node that holds none of that partition (a reorder when every node holds one), as one
  reassignment, throttled if the spec's options say so (`throttle`, bytes per second: the move
  then lasts long enough for the kill to land mid-copy);
- with `grow`, also adds one partition to the topic (`partitions.set` tells the workload, whose
  producers then send there too, and the final read covers it);
- kills the spec's target node (kill -9) while the moves run: the target, the controller or a
  leaving or joining replica, as the seed falls; heal: it is started again. The moves complete
  after the fault window, once every joining replica has caught up (the runner waits for every
  partition to be whole before its final read).

What it did is returned as data for the history (`moves`, `grown_to`, `throttle`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from chaos.faults import FaultError, FaultSpec, ProcessControl, heal_all
from raftlog.client import Admin
from raftlog.errors import RaftlogError
from raftlog.topics import TopicPartition

MOVES_MAX = 2
ADMIN_TIMEOUT_MS = 10_000


@contextmanager
def moved_replicas(
    spec: FaultSpec,
    cluster: Any,
    topic: str,
    rng: random.Random,
    grown: Callable[[int], None],
) -> Iterator[dict[str, Any]]:
    """Start the moves (and the growth), kill the target; on exit start it again. `cluster`
    is a ProcessControl with `describe(node_id)` and `bootstrap`; `grown(n)` is told the
    topic's new partition count."""
    c: ProcessControl = cluster
    view = _any_view(cluster)
    parts = [p for p in view["partitions"] if p["topic"] == topic]
    if not parts:
        raise FaultError(f"fault reassign: topic {topic!r} has no partitions")
    nodes = sorted(c.node_ids())
    moves: dict[TopicPartition, list[int]] = {}
    for p in rng.sample(parts, min(MOVES_MAX, len(parts))):
        target = [r for r in p["replicas"] if r not in p.get("removing", [])]
        spare = [n for n in nodes if n not in target]
        if spare:
            out, new = rng.choice(target), rng.choice(spare)
            moves[TopicPartition(topic, p["partition"])] = [new if r == out else r for r in target]
        else:
            moves[TopicPartition(topic, p["partition"])] = target[1:] + target[:1]
    throttle = int(spec.options.get("throttle", 0)) or None
    done: dict[str, Any] = {
        "moves": {str(tp): r for tp, r in moves.items()},
        "throttle": throttle or 0,
    }
    try:
        with Admin(cluster.bootstrap, request_timeout_ms=ADMIN_TIMEOUT_MS) as admin:
            results = admin.alter_partition_reassignments(dict(moves), throttle)
            refused = {str(tp): str(e) for tp, e in results.items() if e is not None}
            if refused:
                done["refused"] = refused
            if spec.options.get("grow"):
                count = len(parts) + 1
                admin.create_partitions(topic, count)
                grown(count)
                done["grown_to"] = count
    except RaftlogError as e:
        raise FaultError(f"fault reassign: {e}") from e
    killed: list[int] = []
    try:
        for n in spec.targets:
            killed.append(n)
            c.kill9(n)
        yield done
    finally:
        if killed:
            heal_all([(f"start nodes {killed}", lambda: c.start(*killed))])


def _any_view(cluster: Any) -> dict[str, Any]:
    """The metadata as the first node that answers sees it."""
    for n in cluster.node_ids():
        try:
            view: dict[str, Any] = cluster.describe(n)
            return view
        except RaftlogError:
            continue
    raise FaultError("fault reassign: no node answered DescribeCluster")
