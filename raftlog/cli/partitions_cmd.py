"""`raftlog partitions elect-leaders`, after kafka-leader-election, and `raftlog partitions
reassign`, after kafka-reassign-partitions.

reassign: `--generate --topics T[,T...] --brokers 1,2,3` prints the current assignment and a
balanced one over those brokers (the topics' replication factors kept) in Kafka's JSON
(`{"version": 1, "partitions": [{"topic", "partition", "replicas"}, ...]}`); `--plan FILE
--execute` starts the moves in FILE (KIP-455: the new replicas join and catch up, then the
old ones leave), with `--throttle BYTES_PER_S` capping what each broker fetches for the
replicas it is adding (the in-sync followers are never slowed); `--verify` prints each move's
progress and exits 0 only when every one is complete, and then removes the throttle if no
other move is under way; `--cancel` stops the moves under way (back to the original replicas).


A partition's preferred leader is its first replica: where a topic's leaders were spread when
it was created. After a broker fails and returns, its partitions stay led elsewhere until a
preferred-leader election moves them back (the controller also does it by itself every
leader_imbalance_check_interval_ms, Kafka's auto.leader.rebalance.enable). Exit status 0 when
every named partition is led by its preferred leader afterwards (already, or elected now), 1
when one could not be (its preferred leader is not a live in-sync replica, or it is unknown).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from raftlog.cli.client_cmd import add_bootstrap, non_negative_int
from raftlog.client import Admin
from raftlog.errors import ElectionNotNeededError, InvalidConfigError, RaftlogError
from raftlog.topics import TopicPartition


def register(sub: Any) -> None:
    p = sub.add_parser("partitions", help="partition leadership: preferred-leader elections")
    psub = p.add_subparsers(dest="partitions_command", required=True, metavar="SUBCOMMAND")
    e = psub.add_parser(
        "elect-leaders",
        help="give partitions back to their preferred leaders",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    e.add_argument(
        "--preferred",
        action="store_true",
        required=True,
        help="the election type (the only one: an unclean election is a topic config)",
    )
    which = e.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--all-topic-partitions",
        action="store_true",
        help="every partition whose preferred leader does not lead",
    )
    which.add_argument("--topic", help="the partitions of this topic (with --partition: one)")
    which.add_argument(
        "--path-to-json-file",
        metavar="FILE",
        help='kafka-leader-election\'s JSON: {"partitions": [{"topic": T, "partition": P}, ...]}',
    )
    e.add_argument("--partition", type=non_negative_int, help="with --topic: only this one")
    add_bootstrap(e)
    e.set_defaults(func=_elect_leaders)

    r = psub.add_parser(
        "reassign",
        help="move partitions' replicas to other brokers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    action = r.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true", help="print a balanced plan")
    action.add_argument("--execute", action="store_true", help="start the plan's moves")
    action.add_argument("--verify", action="store_true", help="exit 0 once every move is done")
    action.add_argument("--cancel", action="store_true", help="stop the plan's moves")
    r.add_argument("--plan", metavar="FILE", help="the plan (Kafka's reassignment JSON)")
    r.add_argument("--topics", help="with --generate: T[,T...]")
    r.add_argument("--brokers", help="with --generate: the broker ids to spread over, 1,2,3")
    r.add_argument(
        "--throttle",
        type=non_negative_int,
        metavar="BYTES_PER_S",
        help="with --execute: the bytes per second each broker may fetch for the replicas it "
        "is adding (0: none); --verify removes it once every move in the cluster is done",
    )
    add_bootstrap(r)
    r.set_defaults(func=_reassign)


def _partitions_from_file(path: str) -> list[TopicPartition]:
    try:
        with open(path) as f:
            doc = json.load(f)
        entries = doc["partitions"]
        return [TopicPartition(str(x["topic"]), int(x["partition"])) for x in entries]
    except OSError as e:
        raise InvalidConfigError(f"{path}: {e.strerror}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise InvalidConfigError(
            f'{path}: not {{"partitions": [{{"topic": T, "partition": P}}, ...]}}: {e!r}'
        ) from None


def _elect_leaders(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        raise InvalidConfigError("--partition needs --topic")
    with Admin(args.bootstrap_server) as admin:
        wanted: list[TopicPartition] | None = None
        if args.path_to_json_file is not None:
            wanted = _partitions_from_file(args.path_to_json_file)
        elif args.topic is not None:
            if args.partition is not None:
                wanted = [TopicPartition(args.topic, args.partition)]
            else:
                known = admin.list_topics().get(args.topic)
                count = 0 if known is None else len(known.partitions)
                wanted = [TopicPartition(args.topic, i) for i in range(count)]
                if not wanted:
                    raise InvalidConfigError(f"unknown topic {args.topic!r}")
        results = admin.elect_leaders(wanted)
    return report(results)


def report(results: dict[TopicPartition, RaftlogError | None]) -> int:
    """Print the outcome as kafka-leader-election does; 1 if a partition could not be led by
    its preferred leader."""
    order = sorted(results, key=lambda tp: (tp.topic, tp.partition))
    elected = [str(tp) for tp in order if results[tp] is None]
    already = [str(tp) for tp in order if isinstance(results[tp], ElectionNotNeededError)]
    failed = [(tp, e) for tp in order if (e := results[tp]) is not None and str(tp) not in already]
    if elected:
        print(
            "Successfully completed leader election (PREFERRED) for partitions "
            + ", ".join(elected)
        )
    if already:
        print(f"Valid replica already elected for partitions {', '.join(already)}")
    if not results:
        print("Every partition is led by its preferred leader")
    for tp, error in failed:
        print(
            f"Error completing leader election (PREFERRED) for partition {tp}: {error}",
            file=sys.stderr,
        )
    return 1 if failed else 0


def _plan_from_file(path: str) -> dict[TopicPartition, list[int]]:
    try:
        with open(path) as f:
            doc = json.load(f)
        return {
            TopicPartition(str(x["topic"]), int(x["partition"])): [int(b) for b in x["replicas"]]
            for x in doc["partitions"]
        }
    except OSError as e:
        raise InvalidConfigError(f"{path}: {e.strerror}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise InvalidConfigError(
            f'{path}: not {{"version": 1, "partitions": [{{"topic": T, "partition": P, '
            f'"replicas": [B, ...]}}, ...]}}: {e!r}'
        ) from None


def _plan_json(plan: dict[TopicPartition, list[int]]) -> str:
    rows = [
        {"topic": tp.topic, "partition": tp.partition, "replicas": replicas}
        for tp, replicas in sorted(plan.items())
    ]
    return json.dumps({"version": 1, "partitions": rows})


def _int_list(text: str, what: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InvalidConfigError(f"{what} {text!r}: broker ids joined by ',', e.g. 1,2,3") from None
    if not out or len(set(out)) != len(out):
        raise InvalidConfigError(f"{what} {text!r}: distinct broker ids, at least one")
    return out


def balanced_plan(
    current: dict[TopicPartition, list[int]], brokers: list[int]
) -> dict[TopicPartition, list[int]]:
    """Each partition's replicas spread over `brokers` as a new topic's are over the live
    ones: partition i's from position i in the ring, its replication factor kept."""
    plan = {}
    n = len(brokers)
    for i, (tp, replicas) in enumerate(sorted(current.items())):
        if len(replicas) > n:
            raise InvalidConfigError(
                f"{tp} has {len(replicas)} replicas; --brokers names only {n} brokers"
            )
        plan[tp] = [brokers[(i + j) % n] for j in range(len(replicas))]
    return plan


def _reassign(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap_server) as admin:
        if args.generate:
            if not args.topics or not args.brokers:
                raise InvalidConfigError("--generate needs --topics and --brokers")
            topics = [t for t in args.topics.split(",") if t]
            brokers = _int_list(args.brokers, "--brokers")
            view = admin.describe_cluster()
            current = {
                TopicPartition(p["topic"], p["partition"]): list(p["replicas"])
                for p in view["partitions"]
                if p["topic"] in topics
            }
            missing = sorted(set(topics) - {tp.topic for tp in current})
            if missing:
                raise InvalidConfigError(f"unknown topics {missing}")
            print("Current partition replica assignment")
            print(_plan_json(current))
            print()
            print("Proposed partition reassignment configuration")
            print(_plan_json(balanced_plan(current, brokers)))
            return 0
        if not args.plan:
            raise InvalidConfigError("--execute, --verify and --cancel need --plan FILE")
        if args.throttle is not None and not args.execute:
            raise InvalidConfigError("--throttle goes with --execute")
        plan = _plan_from_file(args.plan)
        if args.verify:
            view = admin.describe_cluster()
            status = _verify(view, plan)
            moving = any(p.get("adding") or p.get("removing") for p in view["partitions"])
            if status == 0 and not moving and view.get("replication_throttle"):
                # As kafka-reassign-partitions --verify: the moves are done, the throttle goes.
                admin.alter_partition_reassignments({}, throttle=0)
                print("Throttle was removed.")
            return status
        moves: dict[TopicPartition, Any] = {
            tp: (None if args.cancel else replicas) for tp, replicas in plan.items()
        }
        results = admin.alter_partition_reassignments(moves, args.throttle)
        if args.throttle:
            print(f"The replication throttle is {args.throttle} bytes/s per broker.")
    failed = [(tp, e) for tp, e in sorted(results.items()) if e is not None]
    done = [str(tp) for tp, e in sorted(results.items()) if e is None]
    verb = "cancelled" if args.cancel else "started"
    if done:
        print(f"Successfully {verb} reassignment of partitions {', '.join(done)}")
    for tp, error in failed:
        print(f"Error in the reassignment of partition {tp}: {error}", file=sys.stderr)
    return 1 if failed else 0


def _verify(view: dict[str, Any], plan: dict[TopicPartition, list[int]]) -> int:
    by_tp = {TopicPartition(p["topic"], p["partition"]): p for p in view["partitions"]}
    pending = 0
    for tp, target in sorted(plan.items()):
        p = by_tp.get(tp)
        if p is None:
            print(f"Reassignment of partition {tp}: unknown partition")
            pending += 1
        elif list(p["replicas"]) == target and not p.get("adding") and not p.get("removing"):
            print(f"Reassignment of partition {tp} is completed")
        elif p.get("adding") or p.get("removing"):
            waiting = [r for r in p["adding"] if r not in p["isr"]]
            print(
                f"Reassignment of partition {tp} is still in progress "
                f"(replicas {p['replicas']}, isr {p['isr']}, waiting for {waiting} to catch up)"
            )
            pending += 1
        else:
            print(
                f"Reassignment of partition {tp}: its replicas are {p['replicas']}, not "
                f"{target}, and no move is under way (cancelled, or not started)"
            )
            pending += 1
    return 1 if pending else 0
