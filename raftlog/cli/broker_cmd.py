"""`raftlog broker decommission ID`: move every replica off a broker, so it can be stopped.

What an operator of a Kafka cluster does by hand with kafka-reassign-partitions before retiring
a broker, in one command: a plan that replaces the broker in every partition it holds (or is
joining) by the live broker that holds the fewest replicas and none of that partition's, the
moves started as one reassignment (KIP-455: the new replicas catch up and join the ISR, then
the broker's replicas leave and delete their logs; a partition it leads hands over first), then
progress until none of its replicas is left, or `--timeout` passes (exit 1, naming what is still
moving). `--throttle BYTES_PER_S` caps each broker's fetches for the replicas it is adding, and
is removed at the end if no other move is under way. `--dry-run` prints the plan only.

Rules: the plan keeps each partition's replication factor and the order of its other replicas
(the new broker takes the leaving one's place, so the preferred leader changes only where the
leaving broker was it); a partition that cannot get a replacement (fewer live brokers than its
replication factor) refuses the whole command before anything moves. A topic created after the
plan may still place replicas on the broker: decommission it once more before stopping it.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from raftlog.cli.client_cmd import add_bootstrap, non_negative_int
from raftlog.client import Admin
from raftlog.errors import InvalidConfigError
from raftlog.topics import TopicPartition

POLL_S = 1.0


def register(sub: Any) -> None:
    p = sub.add_parser("broker", help="brokers: decommission one before stopping it")
    bsub = p.add_subparsers(dest="broker_command", required=True, metavar="SUBCOMMAND")
    d = bsub.add_parser(
        "decommission",
        help="move every replica off a broker (then it can be stopped)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d.add_argument("broker_id", type=non_negative_int, metavar="ID", help="the broker to empty")
    d.add_argument(
        "--throttle",
        type=non_negative_int,
        metavar="BYTES_PER_S",
        help="the bytes per second each broker may fetch for the replicas it is adding",
    )
    d.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="how long to wait for the moves (default 600; 0: start them and return)",
    )
    d.add_argument("--dry-run", action="store_true", help="print the plan, move nothing")
    add_bootstrap(d)
    d.set_defaults(func=_decommission)


def decommission_plan(
    partitions: list[dict[str, Any]], live: list[int], leaving: int
) -> dict[TopicPartition, list[int]]:
    """The target replicas of every partition `leaving` holds, `partitions` as DescribeCluster
    gives them (a move under way counts by its target). Raises InvalidConfigError if one has
    no live broker to take its place."""
    candidates = sorted(b for b in live if b != leaving)
    load = dict.fromkeys(candidates, 0)
    targets = {}
    for p in partitions:
        target = [r for r in p["replicas"] if r not in p.get("removing", [])]
        targets[TopicPartition(p["topic"], p["partition"])] = target
        for r in target:
            if r in load:
                load[r] += 1
    plan = {}
    for tp, target in sorted(targets.items()):
        if leaving not in target:
            continue
        free = [b for b in candidates if b not in target]
        if not free:
            raise InvalidConfigError(
                f"{tp} has {len(target)} replicas {target}: no other live broker can take "
                f"broker {leaving}'s place (live: {candidates})"
            )
        chosen = min(free, key=lambda b: (load[b], b))
        load[chosen] += 1
        plan[tp] = [chosen if r == leaving else r for r in target]
    return plan


def _holding(view: dict[str, Any], broker: int) -> list[str]:
    """The partitions whose replicas still include `broker`."""
    return [f"{p['topic']}-{p['partition']}" for p in view["partitions"] if broker in p["replicas"]]


def _decommission(args: argparse.Namespace) -> int:
    leaving = args.broker_id
    with Admin(args.bootstrap_server) as admin:
        view = admin.describe_cluster()
        brokers = {b["node_id"]: b for b in view["brokers"]}
        if leaving not in brokers:
            raise InvalidConfigError(
                f"broker {leaving} is not registered (brokers: {sorted(brokers)})"
            )
        live = [n for n, b in brokers.items() if not b["fenced"] and not b["shutting_down"]]
        plan = decommission_plan(view["partitions"], live, leaving)
        rows = [
            {"topic": tp.topic, "partition": tp.partition, "replicas": r}
            for tp, r in sorted(plan.items())
        ]
        if args.dry_run:
            print(json.dumps({"version": 1, "partitions": rows}))
            return 0
        if plan:
            results = admin.alter_partition_reassignments(dict(plan), args.throttle)
            failed = [(tp, e) for tp, e in sorted(results.items()) if e is not None]
            if failed:
                for tp, e in failed:
                    print(f"Error moving {tp} off broker {leaving}: {e}")
                return 1
            print(
                f"Moving {len(plan)} partitions off broker {leaving}"
                + (f" (throttle {args.throttle} bytes/s)" if args.throttle else "")
            )
        if args.timeout <= 0:
            return 0
        deadline = time.monotonic() + args.timeout
        reported = -1
        while True:
            view = admin.describe_cluster()
            holding = _holding(view, leaving)
            if len(holding) != reported:
                print(f"{len(plan) - len(holding)} of {len(plan)} partitions moved", flush=True)
                reported = len(holding)
            if not holding:
                break
            if time.monotonic() >= deadline:
                print(
                    f"Broker {leaving} still holds {len(holding)} partitions after "
                    f"{args.timeout:g} s: {', '.join(holding[:10])} (the moves go on; run "
                    "this again, or `raftlog partitions reassign --verify`, to follow them)"
                )
                return 1
            time.sleep(POLL_S)
        moving = any(p["adding"] or p["removing"] for p in view["partitions"])
        if args.throttle and not moving:
            admin.alter_partition_reassignments({}, throttle=0)
            print("Throttle was removed.")
    print(f"Broker {leaving} holds no replica: it can be stopped.")
    return 0
