"""What a Kafka-client test does when kcat or Go is missing: fail where scripts/test could
have installed it (root with apt-get, as in CI), skip elsewhere, naming what is missing."""

from __future__ import annotations

import pytest

from tests.kafka import tools


def test_nothing_missing_goes_on() -> None:
    tools.need(None)


def test_missing_where_it_could_be_installed_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools, "could_install", lambda: True)
    with pytest.raises(pytest.fail.Exception, match=r"kcat is not installed.*install step failed"):
        tools.need("kcat is not installed")


def test_missing_where_it_cannot_be_installed_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools, "could_install", lambda: False)
    with pytest.raises(pytest.skip.Exception, match=r"go .* not installed"):
        tools.need("go (Debian package golang-go) not installed")
