"""A group member as the rebalance tests run it: poll, process (record), commit, every poll.

`consume` runs in a test's thread, or as its own process (`python -m
tests.integration._group_member ...`) when a test must kill it with SIGKILL. It reports
through `emit`, one line per event, which the process form writes to a file with one
`os.write` per line (atomic, unbuffered: a kill -9 loses no line that was written):

    R <topic> <partition> <offset>   a record processed (returned by poll)
    C                                a commit of every position succeeded
    F <error>                        a commit was refused
    HOLD                             processed a poll's records and stopped before committing
                                     them (asked to by the hold file): waits to be killed

Rules: manual commits (enable_auto_commit off), one commit after every poll, as an
application that must not lose work does; the group's timings are short so that a test of a
rebalance takes seconds.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raftlog.client import Consumer
from raftlog.errors import CommitFailedError

GROUP_OPTS: dict[str, Any] = {
    "session_timeout_ms": 3000,
    "heartbeat_interval_ms": 200,
    "max_poll_interval_ms": 30_000,  # the rebalance timeout
    "fetch_max_wait_ms": 100,
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
}


def consume(
    bootstrap: str,
    group: str,
    topic: str,
    name: str,
    emit: Callable[[str], None],
    stop: Callable[[], bool],
    hold: Callable[[], bool] = lambda: False,
) -> None:
    """Poll, record, commit until `stop()`; then close (commit nothing more, leave). With
    `hold()` true after a poll that returned records: emit HOLD and wait to be killed."""
    consumer = Consumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=name,
                        **GROUP_OPTS)  # fmt: skip
    try:
        while not stop():
            batch = consumer.poll(100)
            for tp, records in batch.items():
                for r in records:
                    emit(f"R {tp.topic} {tp.partition} {r.offset}")
            if batch and hold():
                emit("HOLD")
                while True:  # until SIGKILL: its heartbeats go on meanwhile
                    time.sleep(1)
            try:
                consumer.commit()
                emit("C")
            except CommitFailedError as e:
                emit(f"F {e}")
    finally:
        consumer.close()


class ThreadMember:
    """A member consuming (`consume`) in a thread of the test process; its event lines in
    `lines`."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str):
        self.name = name
        self.lines: list[str] = []
        self.stopped = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(
            target=self._run, args=(bootstrap, group, topic), name=name, daemon=True
        )
        self.thread.start()

    def _run(self, bootstrap: str, group: str, topic: str) -> None:
        try:
            consume(bootstrap, group, topic, self.name, self.lines.append, self.stopped.is_set)
        except BaseException as e:
            self.error = e

    def partitions(self) -> set[int]:
        """The partitions it has processed records of."""
        return {int(line.split()[2]) for line in list(self.lines) if line.startswith("R ")}

    def stop(self) -> None:
        """Stop polling and close (a clean leave)."""
        self.stopped.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), f"{self.name} did not stop"
        assert self.error is None, f"{self.name}: {self.error!r}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--out", required=True, type=Path, help="the event lines go here")
    parser.add_argument("--hold-file", required=True, type=Path, help="HOLD once it exists")
    parser.add_argument("--stop-file", required=True, type=Path, help="stop once it exists")
    args = parser.parse_args()
    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    consume(
        args.bootstrap,
        args.group,
        args.topic,
        args.name,
        emit,
        stop=args.stop_file.exists,
        hold=args.hold_file.exists,
    )


if __name__ == "__main__":
    main()
