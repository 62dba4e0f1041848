"""Fixtures that run real broker processes; see _support.BrokerProcess for the contract.

`broker` is a fresh node per test, `make_broker(*dev_args)` starts more with other options
(e.g. --auto-create-topics). Teardown always stops every node (SIGTERM, SIGKILL after a
deadline) and fails the test if a node died unexpectedly, did not exit 0 on SIGTERM, or logged
a Python traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration._support import BrokerProcess

MakeBroker = Callable[..., BrokerProcess]


def _teardown(brokers: list[BrokerProcess]) -> None:
    problems: list[str] = []
    for b in brokers:
        problems.extend(b.shutdown_and_check())
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[MakeBroker]:
    brokers: list[BrokerProcess] = []

    def make(*dev_args: str) -> BrokerProcess:
        n = len(brokers) + 1
        b = BrokerProcess(tmp_path / f"node{n}-data", tmp_path / f"node{n}-logs", dev_args)
        brokers.append(b)
        b.start()
        return b

    try:
        yield make
    finally:
        _teardown(brokers)


@pytest.fixture
def broker(make_broker: MakeBroker) -> BrokerProcess:
    return make_broker()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One node for a whole module (the fuzz tests), for speed."""
    root = tmp_path_factory.mktemp("module-broker")
    b = BrokerProcess(root / "data", root / "logs")
    try:
        b.start()
        yield b
    finally:
        _teardown([b])
