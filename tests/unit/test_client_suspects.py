"""ClusterClient asks a broker whose request timed out for metadata last (cluster.py's rule).

Two real listening brokers (scripted: one never answers, one answers everything) and the real
client: a timeout on the sticky broker's connection makes the next `any_connection` pick the
other, and the suspect is still used when it is the only broker that can be reached."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from raftlog import protocol
from raftlog.client.cluster import ClusterClient
from raftlog.errors import RaftlogTimeoutError
from raftlog.metadata.model import BrokerInfo
from tests.unit.test_client_connection import ScriptedBroker


@pytest.fixture
async def brokers() -> AsyncIterator[tuple[int, int, asyncio.Server]]:
    silent, answering = ScriptedBroker(lambda corr: False), ScriptedBroker(lambda corr: True)
    a = await asyncio.start_server(silent.handle, "127.0.0.1", 0)
    b = await asyncio.start_server(answering.handle, "127.0.0.1", 0)
    yield a.sockets[0].getsockname()[1], b.sockets[0].getsockname()[1], b
    for srv, broker in ((a, silent), (b, answering)):
        srv.close()
        for w in broker.writers:
            w.close()


async def test_a_broker_that_timed_out_is_asked_last(
    brokers: tuple[int, int, asyncio.Server],
) -> None:
    silent_port, answering_port, answering_server = brokers
    client = ClusterClient(f"127.0.0.1:{silent_port},127.0.0.1:{answering_port}")
    try:
        first = await client.any_connection()
        assert first.port == silent_port  # bootstrap order, no metadata yet
        assert await client.any_connection() is first  # sticky
        with pytest.raises(RaftlogTimeoutError):
            await first.request(protocol.ApiKey.METADATA, {}, (), timeout_s=0.2)
        second = await client.any_connection()
        assert second.port == answering_port and not first.closed
        body, _ = await second.request(protocol.ApiKey.METADATA, {}, (), timeout_s=5)
        assert "echo" in body

        # The suspect is the last resort, not excluded: with the other broker gone, it is used.
        answering_server.close()
        await answering_server.wait_closed()
        second.close()
        assert (await client.any_connection()).port == silent_port
    finally:
        await client.close()


async def test_a_caller_can_report_a_suspect(brokers: tuple[int, int, asyncio.Server]) -> None:
    silent_port, answering_port, _ = brokers
    client = ClusterClient(f"127.0.0.1:{silent_port},127.0.0.1:{answering_port}")
    try:
        client.brokers = {1: BrokerInfo(1, "127.0.0.1", silent_port)}
        assert (await client.any_connection()).port == silent_port
        client.suspect(1)  # e.g. its produce answer was RequestTimedOut
        assert (await client.any_connection()).port == answering_port
    finally:
        await client.close()
