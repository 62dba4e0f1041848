"""The workload's threads' common shape (runner.py's native workers, kafka_workers.py's).

A `WorkloadThread` runs `_run` once; whatever ends it is kept in `error`, which the runner
reports and which fails the run (a worker that died must not pass for one that finished).
"""

from __future__ import annotations

import threading


class WorkloadThread(threading.Thread):
    def __init__(self, name: str, stop: threading.Event):
        super().__init__(name=name, daemon=True)
        self.process = name
        self.stop = stop
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # reported by the runner, which fails the run
            self.error = e

    def _run(self) -> None:
        raise NotImplementedError
