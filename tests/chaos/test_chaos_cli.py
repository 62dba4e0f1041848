"""`raftlog chaos check HISTORY`: the verdict as exit status, the report as text or JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.history import write_history
from raftlog.cli import main
from tests.chaos._histories import HistoryBuilder

TP = "t-0"


def _history(tmp_path: Path, lose_one: bool) -> Path:
    h = HistoryBuilder(seed=42)
    recs = [(i, f"v{i}") for i in range(3)]
    for offset, value in recs:
        h.send("p1", TP, value, offset)
    h.fault("kill", [1], start=h.now + 0.1, end=h.now + 0.5)
    h.final_read({TP: [recs[0], recs[2]] if lose_one else recs})
    path = tmp_path / "history.jsonl"
    write_history(path, h.ops)
    return path


def test_valid_history_exits_0_and_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _history(tmp_path, lose_one=False)
    out = tmp_path / "report.json"
    assert main(["chaos", "check", str(path), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "VALID (seed 42)" in text
    assert "fault kill [1]" in text
    report = json.loads(out.read_text())
    assert report["valid"] and report["acknowledged"] == 3 and report["seed"] == 42


def test_invalid_history_exits_1_naming_the_anomaly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _history(tmp_path, lose_one=True)
    assert main(["chaos", "check", str(path), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["lost"] == 1 and report["anomalies"]["lost"][0]["value"] == "v1"
    assert main(["chaos", "check", str(path)]) == 1
    text = capsys.readouterr().out
    assert "INVALID" in text and "lost: 1" in text and '"value": "v1"' in text


def test_unreadable_history_is_an_error_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text(
        '{"index": 0, "time": 0, "process": "p", "type": "ok", "f": "send"}\nnot json\n'
    )
    assert main(["chaos", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:1" in err and "needs the id of its invoke" in err
    path.write_text("not json\n")
    assert main(["chaos", "check", str(path)]) == 1
    assert f"{path}:1: not JSON" in capsys.readouterr().err
    assert main(["chaos", "check", str(tmp_path / "missing.jsonl")]) == 1
    assert "missing.jsonl" in capsys.readouterr().err


def test_a_compacted_history_is_checked_per_key_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    h = HistoryBuilder(seed=9, compact=True)
    for offset, (value, key) in enumerate([("a", "k1"), ("b", "k1")]):
        h.send("p1", TP, value, offset, key=key)
    h.final_read({TP: [(1, "b", "k1")]})  # a was compacted away
    path = tmp_path / "history.jsonl"
    write_history(path, h.ops)
    assert main(["chaos", "check", str(path)]) == 0
    text = capsys.readouterr().out
    assert "VALID (seed 9, compacted topic: per-key rules)" in text
    assert "1 acknowledged sends superseded, 1 compacted away" in text
