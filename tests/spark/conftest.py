"""Fixtures for the Spark tests: one local SparkSession for the whole run, real broker nodes.

Spark is heavy (about 1.3 GB and several seconds to start), so every test module shares one
session (`spark`), and each module has its own broker (`module_broker`) unless a test needs to
restart one. A machine without what Spark needs FAILS here with the message saying what to
install: the spark extra is part of the dev install, and Java 17 is documented, so a skip would
only hide a missing install step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

# The integration tests' node fixtures: `make_broker` (per test), `module_broker` (per module).
from tests.integration.conftest import MakeBroker, make_broker, module_broker  # noqa: F401


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from raftlog_spark import check_environment, local_session

    problems = check_environment()
    if problems:
        pytest.fail("Spark cannot run here:\n" + "\n".join(problems), pytrace=False)
    session = local_session("raftlog-tests")
    try:
        yield session
    finally:
        session.stop()
