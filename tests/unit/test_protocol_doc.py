"""docs/PROTOCOL.md lists every error code of raftlog/errors.py, with its name and whether it
is retriable: a client written from the document must be able to read every error a broker
sends (code 27, NotCoordinator, was once missing)."""

from __future__ import annotations

import re
from pathlib import Path

from raftlog import errors

PROTOCOL_MD = Path(__file__).resolve().parents[2] / "docs" / "PROTOCOL.md"
ROW = re.compile(r"^\| (\d+) \| (\w+)[^|]* \| (yes|no) \|$")


def documented() -> dict[int, tuple[str, bool]]:
    rows: dict[int, tuple[str, bool]] = {}
    for line in PROTOCOL_MD.read_text().splitlines():
        m = ROW.match(line)
        if m:
            code = int(m.group(1))
            assert code not in rows, f"code {code} is listed twice in {PROTOCOL_MD}"
            rows[code] = (m.group(2), m.group(3) == "yes")
    return rows


def defined() -> dict[int, tuple[str, bool]]:
    classes = [errors.RaftlogError, *errors._all_subclasses(errors.RaftlogError)]
    out: dict[int, tuple[str, bool]] = {}
    for cls in classes:
        if cls.__module__ != errors.__name__:
            continue  # a subclass made elsewhere (tests) is not part of the protocol
        assert cls.code not in out, f"code {cls.code}: {out[cls.code][0]} and {cls.__name__}"
        out[cls.code] = (cls.__name__, cls.retriable)
    return out


def test_every_error_code_is_documented_with_its_name_and_retriability() -> None:
    docs, code = documented(), defined()
    missing = sorted(set(code) - set(docs))
    assert not missing, f"error codes missing from docs/PROTOCOL.md: {missing}"
    stale = sorted(set(docs) - set(code))
    assert not stale, f"docs/PROTOCOL.md lists codes raftlog/errors.py lacks: {stale}"
    wrong = {c: (docs[c], code[c]) for c in code if docs[c] != code[c]}
    assert not wrong, f"documented (name, retriable) differ from the code: {wrong}"
