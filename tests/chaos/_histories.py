"""Build synthetic chaos histories for the checker's tests: each call appends what a client of
a real run would have recorded (an invoke and its completion), with times that only go up."""

from __future__ import annotations

from typing import Any

from chaos.history import Op, op

# (offset, value), or in a compacted run (offset, value, key).
Records = dict[str, list[tuple[int, str]] | list[tuple[int, str, str]]]


class HistoryBuilder:
    def __init__(self, seed: int | None = None, compact: bool = False) -> None:
        """`compact`: the run record says the topic was compacted (the checker's per-key
        rules); needs a seed, as the run record carries both."""
        self.ops: list[Op] = []
        self.now = 0.0
        self._next_id = 0
        self._invokes: dict[int, Op] = {}
        assert seed is not None or not compact, "a compacted history's run record needs a seed"
        if seed is not None:
            run = {"seed": seed, **({"compact": True} if compact else {})}
            self._add(op("runner", "info", "run", 0.0, value=run))

    def _add(self, o: Op) -> Op:
        o = Op(o.process, o.type, o.f, o.time, o.id, o.value, o.extra, index=len(self.ops))
        self.ops.append(o)
        return o

    def _tick(self, at: float | None) -> float:
        self.now = max(self.now, at) if at is not None else self.now + 0.01
        return self.now

    def invoke(
        self, process: str, f: str, value: Any = None, at: float | None = None, **extra: Any
    ) -> int:
        op_id = self._next_id
        self._next_id += 1
        self._invokes[op_id] = self._add(
            op(process, "invoke", f, self._tick(at), op_id, value, **extra)
        )
        return op_id

    def complete(
        self, op_id: int, type: str = "ok", value: Any = None, at: float | None = None, **extra: Any
    ) -> None:
        inv = self._invokes[op_id]
        value = inv.value if value is None else value
        self._add(
            op(inv.process, type, inv.f, self._tick(at), op_id, value, **{**inv.extra, **extra})
        )

    def send(
        self,
        process: str,
        tp: str,
        value: str,
        offset: int | None,
        type: str = "ok",
        at: float | None = None,
        key: str | None = None,
    ) -> None:
        keyed = {"key": key} if key is not None else {}
        op_id = self.invoke(process, "send", value, at=at, tp=tp, **keyed)
        extra = {"offset": offset} if type == "ok" else {}
        self.complete(op_id, type, **extra)

    def poll(self, process: str, records: Records, group: str = "g") -> None:
        op_id = self.invoke(process, "poll", group=group)
        self.complete(op_id, "ok", value={tp: [list(r) for r in rs] for tp, rs in records.items()})

    def assign(self, process: str, tps: list[str], group: str = "g") -> None:
        self._add(op(process, "ok", "assign", self._tick(None), -1, tps, group=group))

    def commit(
        self,
        process: str,
        offsets: dict[str, int],
        group: str = "g",
        invoke_at: float | None = None,
        complete_at: float | None = None,
    ) -> None:
        op_id = self.invoke(process, "commit", offsets, at=invoke_at, group=group)
        self.complete(op_id, "ok", at=complete_at)

    def final_read(self, records: Records) -> None:
        value = {tp: [list(r) for r in rs] for tp, rs in records.items()}
        self._add(op("final-reader", "ok", "final-read", self._tick(None), -1, value))

    def replica(
        self,
        node: int,
        tp: str,
        records: list[tuple[int, str]] | list[tuple[int, str, str]],
        hw: int,
        leo: int,
        isr: list[int],
    ) -> None:
        self._add(
            op(
                "checker",
                "ok",
                "replica-read",
                self._tick(None),
                -1,
                [list(r) for r in records],
                node=node,
                tp=tp,
                high_watermark=hw,
                log_end_offset=leo,
                isr=isr,
            )
        )

    def fault(self, kind: str, targets: list[int], start: float, end: float | None) -> int:
        spec = {
            "kind": kind,
            "targets": targets,
            "start_s": start,
            "duration_s": None if end is None else end - start,
        }
        op_id = self.invoke("nemesis", "fault", spec, at=start)
        if end is not None:
            self.complete(op_id, "ok", at=end)
        return op_id
