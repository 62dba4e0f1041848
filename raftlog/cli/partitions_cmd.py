"""`raftlog partitions elect-leaders`, after kafka-leader-election.

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
