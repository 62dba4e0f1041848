"""`raftlog group list|describe|reset-offsets|delete`, after kafka-consumer-groups.

reset-offsets is the replay primitive: it rewrites a group's committed offsets (to earliest,
latest, an offset, or the first offset at a timestamp) for an empty group. Like Kafka's tool it
only prints the plan unless --execute is given; it refuses an active group before printing any
plan (a plan printed and then refused reads as if it had been applied), and clamps an offset
outside a partition's log to its start or end, saying so in the plan, as Kafka does.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from raftlog.cli.client_cmd import add_bootstrap, add_json, non_negative_int, or_unknown
from raftlog.client import Admin
from raftlog.errors import GroupIdNotFoundError, GroupNotEmptyError, InvalidConfigError
from raftlog.messages.groups import NATIVE_PROTOCOL_TYPE
from raftlog.topics import TopicPartition


def register(sub: Any) -> None:
    g = sub.add_parser("group", help="consumer groups: list, describe, reset offsets, delete")
    gsub = g.add_subparsers(dest="group_command", required=True, metavar="SUBCOMMAND")
    ls = gsub.add_parser("list", help="list groups")
    add_json(
        ls, "one object per group: group_id, state, generation, members, protocol, protocol_type"
    )
    add_bootstrap(ls)
    ls.set_defaults(func=_list)
    d = gsub.add_parser("describe", help="members, assignment, committed offsets and lag")
    d.add_argument("group", help="the group's id")
    add_json(d, "members, committed offsets and partitions as objects; unknown figures null")
    add_bootstrap(d)
    d.set_defaults(func=_describe)
    r = gsub.add_parser("reset-offsets", help="rewrite committed offsets (empty group only)")
    r.add_argument("group", help="the group's id (it must have no active member)")
    r.add_argument("--topic", required=True, help="the topic whose offsets to reset")
    r.add_argument(
        "--partition",
        type=non_negative_int,
        action="append",
        help="only these partitions (repeat for several; default: all)",
    )
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="to each log's start")
    to.add_argument("--to-latest", action="store_true", help="to each log's end")
    to.add_argument(
        "--to-offset",
        type=non_negative_int,
        help="to this offset (clamped to each log's start and end, as Kafka does)",
    )
    to.add_argument(
        "--to-timestamp",
        type=non_negative_int,
        metavar="MS",
        help="the first offset whose record timestamp is at or after MS",
    )
    r.add_argument("--execute", action="store_true", help="apply (default: print the plan)")
    add_bootstrap(r)
    r.set_defaults(func=_reset)
    rm = gsub.add_parser("delete", help="delete an empty group and its offsets")
    rm.add_argument("group", help="the group's id")
    add_bootstrap(rm)
    rm.set_defaults(func=_delete)


def _list(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap_server) as admin:
        groups = admin.list_groups()
    if args.json:
        rows = [
            {k: g[k] for k in ("group_id", "state", "generation", "members", "protocol")}
            | {"protocol_type": _protocol_type(g, g["members"])}
            for g in groups
        ]
        print(json.dumps(rows, indent=2))
        return 0
    for g in groups:
        print(
            f"{g['group_id']}  {g['state']}  generation {g['generation']}  "
            f"members {g['members']}  protocol {g['protocol'] or '-'}  "
            f"type {_protocol_type(g, g['members']) or '-'}"
        )
    return 0


def _protocol_type(group: dict[str, Any], members: int) -> str | None:
    """The group's protocol type: "raftlog" (raftlog's own groups), a Kafka group's
    ("consumer"), or None for a raftlog group without members, which holds committed offsets
    only (those of consumers that assign their partitions themselves, Kafka's too, or of a
    reset). Brokers of older code do not say, and have raftlog groups only."""
    protocol_type = str(group.get("protocol_type", NATIVE_PROTOCOL_TYPE))
    return None if protocol_type == NATIVE_PROTOCOL_TYPE and members == 0 else protocol_type


def _describe(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap_server) as admin:
        d = admin.describe_group(args.group)
    if args.json:
        print(json.dumps(_describe_json(d), indent=2))
        return 0
    print(
        f"Group {d['group_id']}  type {_protocol_type(d, len(d['members'])) or '-'}  "
        f"state {d['state']}  generation "
        f"{d['generation']}  protocol {d['protocol'] or '-'}  members {len(d['members'])}"
    )
    preparing = d["state"] == "PreparingRebalance"
    if preparing:
        # Older brokers send neither field: they rebalance in one step, never in this state.
        waiting = [m["member_id"] for m in d["members"] if not m.get("rejoined")]
        print(
            f"  rebalancing: generation {d['generation']} stands until {len(waiting)} of "
            f"{len(d['members'])} members rejoin ({', '.join(waiting)}); members that have "
            "not by the deadline are removed"
        )
    for m in d["members"]:
        owned = ", ".join(f"{t}-{p}" for t, p in m["assignment"]) or "-"
        rejoined = ("  rejoined" if m.get("rejoined") else "  not rejoined") if preparing else ""
        print(f"  member {m['member_id']}  client {m['client_id']}  partitions {owned}{rejoined}")
    print(f"  {'TOPIC':20} {'PARTITION':>9} {'COMMITTED':>10} {'LOG-END':>10} {'LAG':>8}  OWNER")
    for p in d["partitions"]:
        committed = "-" if p["committed"] is None else p["committed"]
        # No committed offset: no lag ("-"); an offline partition: its end is "unknown".
        lag = "-" if p["committed"] is None else or_unknown(p["lag"])
        print(
            f"  {p['topic']:20} {p['partition']:>9} {committed:>10} "
            f"{or_unknown(p['log_end_offset']):>10} {lag:>8}  {p['owner'] or '-'}"
        )
    return 0


def _describe_json(d: dict[str, Any]) -> dict[str, Any]:
    """The group with named fields only: the wire's positional arrays become objects."""
    return {
        "group_id": d["group_id"],
        "state": d["state"],
        "generation": d["generation"],
        "protocol": d["protocol"],
        "protocol_type": _protocol_type(d, len(d["members"])),
        "rebalance_deadline_ms": d.get("rebalance_deadline_ms"),
        "members": [
            {
                "member_id": m["member_id"],
                "client_id": m["client_id"],
                "instance_id": m["instance_id"],
                "session_timeout_ms": m["session_timeout_ms"],
                "topics": m["topics"],
                "assignment": [{"topic": t, "partition": p} for t, p in m["assignment"]],
                "rejoined": m.get("rejoined", False),
            }
            for m in d["members"]
        ],
        "offsets": [
            {"topic": t, "partition": p, "offset": o, "metadata": meta, "commit_ms": ts}
            for t, p, o, meta, ts in d["offsets"]
        ],
        "partitions": d["partitions"],
    }


def _reset(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap_server) as admin:
        # Refuse an active group before any plan is printed.
        try:
            members = len(admin.describe_group(args.group)["members"])
        except GroupIdNotFoundError:
            members = 0  # a new group: its offsets can be set
        if members:
            raise GroupNotEmptyError(
                f"group {args.group!r} has {members} active member(s): stop them before "
                "resetting its offsets; nothing was reset"
            )
        (desc,) = admin.describe_topics([args.topic])
        parts = args.partition or [p.partition for p in desc.partitions]
        known = {p.partition for p in desc.partitions}
        bad = [p for p in parts if p not in known]
        if bad:
            raise InvalidConfigError(f"topic {args.topic} has no partition {bad[0]}")
        tps = [TopicPartition(args.topic, p) for p in parts]
        earliest = {tp: o for tp, (o, _) in admin.list_offsets({tp: -2 for tp in tps}).items()}
        latest = {tp: o for tp, (o, _) in admin.list_offsets({tp: -1 for tp in tps}).items()}
        notes: dict[TopicPartition, str] = {}
        if args.to_offset is not None:
            plan = {}
            for tp in tps:
                plan[tp] = min(max(args.to_offset, earliest[tp]), latest[tp])
                if plan[tp] > args.to_offset:
                    notes[tp] = f"{args.to_offset} is before the log start: clamped"
                elif plan[tp] < args.to_offset:
                    notes[tp] = f"{args.to_offset} is past the log end: clamped"
        elif args.to_earliest:
            plan = earliest
        elif args.to_latest:
            plan = latest
        else:
            found = admin.list_offsets({tp: args.to_timestamp for tp in tps})
            # A timestamp later than every record resets to the log end, as Kafka does.
            plan = {tp: o if o >= 0 else latest[tp] for tp, (o, _) in found.items()}
        for tp, offset in sorted(plan.items()):
            note = f"  ({notes[tp]})" if tp in notes else ""
            print(f"{args.group}  {tp}  -> {offset}{note}")
        if not args.execute:
            print("(dry run: add --execute to apply)")
            return 0
        try:
            n = admin.reset_offsets(args.group, plan)
        except GroupNotEmptyError as e:
            raise GroupNotEmptyError(f"not applied: {e}") from None
    print(f"reset {n} offset(s) of group {args.group}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    with Admin(args.bootstrap_server) as admin:
        admin.delete_group(args.group)
    print(f"deleted group {args.group}")
    return 0
