"""`raftlog consume --group` stopped by SIGTERM or SIGINT leaves its group, prints its summary
and exits 0, as a real process.

Before: SIGTERM killed the process on the spot (the member lingered in the group for its
session timeout, holding its partitions), and SIGINT raised KeyboardInterrupt wherever the
main thread was, which once left a poll task pending ("Task was destroyed but it is pending")
and the group not left.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time

import pytest

from raftlog.client import Admin, Producer
from raftlog.errors import GroupIdNotFoundError
from tests.integration._support import BrokerProcess, _child_env, cli_command, wait_for

TOPIC = "signals"
RECORDS = 50
# The consumer's session timeout is 10 s (the CLI's default): a member gone well within it
# left; it did not expire.
LEFT_WITHIN_S = 3.0
EXIT_WITHIN_S = 10.0


@pytest.fixture(scope="module")
def signal_broker(module_broker: BrokerProcess) -> BrokerProcess:
    with Admin(module_broker.bootstrap) as admin:
        admin.create_topic(TOPIC, 2)
    with Producer(bootstrap_servers=module_broker.bootstrap, acks=1) as producer:
        for i in range(RECORDS):
            producer.send(TOPIC, b"record-%d" % i)
        producer.flush(10)
    return module_broker


def read_lines(proc: subprocess.Popen[bytes], want: int, timeout_s: float) -> bytes:
    """stdout until it holds `want` lines (fails at the deadline or if stdout ends)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    out = b""
    deadline = time.monotonic() + timeout_s
    while (lines := out.count(b"\n")) < want:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"only {lines} lines within {timeout_s} s"
        if select.select([fd], [], [], remaining)[0]:
            chunk = os.read(fd, 65536)
            assert chunk, f"stdout ended after {lines} lines"
            out += chunk
    return out


def members(admin: Admin, group: str) -> int:
    try:
        return len(admin.describe_group(group)["members"])
    except GroupIdNotFoundError:
        return 0  # not made yet: the consumer has not joined


@pytest.mark.parametrize("run", range(10))
@pytest.mark.parametrize("when", ["idle", "joined"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_leaves_the_group_prints_the_summary_and_exits_0(
    signal_broker: BrokerProcess, sig: signal.Signals, when: str, run: int
) -> None:
    """`idle`: the signal comes once every record is printed (the consumer waits in poll);
    `joined`: as soon as the group lists the member (joining, fetching, printing)."""
    group = f"signal-{sig.name}-{when}-{run}"
    proc = subprocess.Popen(
        cli_command(
            "consume", TOPIC, "--group", group, "--from-beginning", "-b", signal_broker.bootstrap
        ),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_child_env(),
    )
    admin = Admin(signal_broker.bootstrap)
    try:
        if when == "idle":
            read_lines(proc, RECORDS, 30)  # joined, assigned both partitions, consumed all
        wait_for(lambda: members(admin, group) == 1, 30, f"a member of {group}")
        proc.send_signal(sig)
        try:
            out, err = proc.communicate(timeout=EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"consume did not exit within {EXIT_WITHIN_S} s of {sig.name}"
            ) from None
        stopped = time.monotonic()
        text = err.decode(errors="replace")
        assert proc.returncode == 0, f"exit {proc.returncode} after {sig.name}:\n{text}"
        assert "Task was destroyed" not in text and "Traceback" not in text, text
        shown = RECORDS if when == "idle" else out.count(b"\n")
        assert text.strip().splitlines()[-1] == f"consumed {shown} record(s)", text
        wait_for(
            lambda: members(admin, group) == 0,
            LEFT_WITHIN_S,
            f"member of {group} gone after {sig.name}",
        )
        assert time.monotonic() - stopped < LEFT_WITHIN_S
        # What it printed is what it committed on the way out, no more and no less.
        partitions = admin.describe_group(group)["partitions"]
        committed = sum(p["committed"] or 0 for p in partitions)
        assert committed == shown, (committed, shown)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        admin.close()
