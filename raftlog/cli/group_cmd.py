"""`raftlog group list|describe|reset-offsets|delete`, after kafka-consumer-groups.

reset-offsets is the replay primitive: it rewrites a group's committed offsets (to earliest,
latest, an offset, or the first offset at a timestamp) for an empty group. Like Kafka's tool it
only prints the plan unless --execute is given.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from raftlog.cli.client_cmd import add_bootstrap
from raftlog.client import Admin
from raftlog.errors import InvalidConfigError
from raftlog.topics import TopicPartition


def register(sub: Any) -> None:
    g = sub.add_parser("group", help="consumer groups: list, describe, reset offsets, delete")
    gsub = g.add_subparsers(dest="group_command", required=True, metavar="SUBCOMMAND")
    ls = gsub.add_parser("list", help="list groups")
    add_bootstrap(ls)
    ls.set_defaults(func=_list)
    d = gsub.add_parser("describe", help="members, assignment, committed offsets and lag")
    d.add_argument("group")
    d.add_argument("--json", action="store_true")
    add_bootstrap(d)
    d.set_defaults(func=_describe)
    r = gsub.add_parser("reset-offsets", help="rewrite committed offsets (empty group only)")
    r.add_argument("group")
    r.add_argument("--topic", required=True)
    r.add_argument("--partition", type=int, action="append", help="only these partitions")
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int)
    to.add_argument(
        "--to-timestamp",
        type=int,
        metavar="MS",
        help="the first offset whose record timestamp is at or after MS",
    )
    r.add_argument("--execute", action="store_true", help="apply (default: print the plan)")
    add_bootstrap(r)
    r.set_defaults(func=_reset)
    rm = gsub.add_parser("delete", help="delete an empty group and its offsets")
    rm.add_argument("group")
    add_bootstrap(rm)
    rm.set_defaults(func=_delete)


def _list(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap_server) as admin:
        for g in admin.list_groups():
            print(
                f"{g['group_id']}  {g['state']}  generation {g['generation']}  "
                f"members {g['members']}  protocol {g['protocol'] or '-'}"
            )
    return 0


def _describe(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap_server) as admin:
        d = admin.describe_group(args.group)
    if args.json:
        print(json.dumps(d, indent=2))
        return 0
    print(
        f"Group {d['group_id']}  state {d['state']}  generation {d['generation']}  "
        f"protocol {d['protocol'] or '-'}  members {len(d['members'])}"
    )
    for m in d["members"]:
        owned = ", ".join(f"{t}-{p}" for t, p in m["assignment"]) or "-"
        print(f"  member {m['member_id']}  client {m['client_id']}  partitions {owned}")
    print(f"  {'TOPIC':20} {'PARTITION':>9} {'COMMITTED':>10} {'LOG-END':>10} {'LAG':>8}  OWNER")
    for p in d["partitions"]:
        committed = "-" if p["committed"] is None else p["committed"]
        lag = "-" if p["lag"] is None else p["lag"]
        print(
            f"  {p['topic']:20} {p['partition']:>9} {committed:>10} "
            f"{p['log_end_offset']:>10} {lag:>8}  {p['owner'] or '-'}"
        )
    return 0


def _reset(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap_server) as admin:
        (desc,) = admin.describe_topics([args.topic])
        parts = args.partition or [p.partition for p in desc.partitions]
        known = {p.partition for p in desc.partitions}
        bad = [p for p in parts if p not in known]
        if bad:
            raise InvalidConfigError(f"topic {args.topic} has no partition {bad[0]}")
        tps = [TopicPartition(args.topic, p) for p in parts]
        if args.to_offset is not None:
            if args.to_offset < 0:
                raise InvalidConfigError("--to-offset must be >= 0")
            plan = {tp: args.to_offset for tp in tps}
        else:
            spec = -2 if args.to_earliest else -1 if args.to_latest else args.to_timestamp
            found = admin.list_offsets({tp: spec for tp in tps})
            latest = admin.list_offsets({tp: -1 for tp in tps}) if spec >= 0 else {}
            # A timestamp later than every record resets to the log end, as Kafka does.
            plan = {tp: o if o >= 0 else latest[tp][0] for tp, (o, _) in found.items()}
        for tp, offset in sorted(plan.items()):
            print(f"{args.group}  {tp}  -> {offset}")
        if not args.execute:
            print("(dry run: add --execute to apply)")
            return 0
        n = admin.reset_offsets(args.group, plan)
    print(f"reset {n} offset(s) of group {args.group}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap_server) as admin:
        admin.delete_group(args.group)
    print(f"deleted group {args.group}")
    return 0
