"""Toxiproxy's API and toxics, driven by the `toxiproxy-python` client over real sockets.

Each toxic's test measures its effect on a real TCP connection through the proxy (the delay a
latency toxic adds, the rate a bandwidth toxic allows, the byte a limit_data toxic stops at);
the API tests check the status codes Toxiproxy documents. Everything here must also hold for a
real Toxiproxy (TOXIPROXY_URL, see conftest.py); what only our server promises is in
test_toxiproxy_server.py. Timing bounds are loose upwards (a loaded 2-core machine is slow)
and tight downwards (a toxic must never make things faster than it says).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from statistics import median

import pytest
import requests
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists
from toxiproxy.proxy import Proxy

from tests.integration._support import wait_for

HOST = "127.0.0.1"
# Upper slack on a measured delay: scheduling on a busy 2-core VM, never a toxic's doing. Upper
# bounds are checked on the median of several samples, lower bounds on every sample: a toxic
# must never make anything faster than it says, while one sample can meet a stalled scheduler
# (measured here: one round trip in ~50 took 0.97 s while other tests loaded both cores).
SLACK_S = 0.25
RECV_TIMEOUT_S = 5.0

Handler = Callable[[socket.socket], None]


class Upstream:
    """A TCP server on 127.0.0.1 that runs `handler` for each connection in its own thread."""

    def __init__(self, handler: Handler):
        self.handler = handler
        self.sock = socket.create_server((HOST, 0))
        self.port = self.sock.getsockname()[1]
        self.received = bytearray()
        self.accepted = 0
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed by close()
            self.accepted += 1
            self._conns.append(conn)
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        try:
            self.handler(conn)
        except OSError:
            pass  # the proxy closed or reset the connection: that is what many tests do
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()
        for c in self._conns:
            c.close()


def echo(conn: socket.socket) -> None:
    while data := conn.recv(65536):
        conn.sendall(data)


def sink(upstream: list[Upstream]) -> Handler:
    def handle(conn: socket.socket) -> None:
        while data := conn.recv(65536):
            upstream[0].received.extend(data)

    return handle


def send_then(payload: bytes, then_close: bool = True) -> Handler:
    """Send `payload` at once, then close (or wait for the client to close)."""

    def handle(conn: socket.socket) -> None:
        conn.sendall(payload)
        if not then_close:
            while conn.recv(65536):
                pass

    return handle


@pytest.fixture
def upstreams() -> Iterator[Callable[[Handler], Upstream]]:
    made: list[Upstream] = []

    def make(handler: Handler) -> Upstream:
        u = Upstream(handler)
        made.append(u)
        return u

    yield make
    for u in made:
        u.close()


_names = iter(range(1_000_000))


def make_proxy(t: Toxiproxy, upstream: Upstream) -> Proxy:
    return t.create(upstream=upstream.address, name=f"test_{next(_names)}", listen=f"{HOST}:0")


def connect(proxy: Proxy) -> socket.socket:
    host, _, port = proxy.listen.rpartition(":")
    s = socket.create_connection((host, int(port)), timeout=RECV_TIMEOUT_S)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def round_trip_s(s: socket.socket, payload: bytes = b"x") -> float:
    t0 = time.monotonic()
    s.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = s.recv(65536)
        assert chunk, "the proxy closed the connection"
        got += chunk
    assert got == payload
    return time.monotonic() - t0


def read_until_closed(s: socket.socket) -> tuple[bytes, list[int], float]:
    """Everything until EOF: the bytes, the size of each recv, and when EOF came."""
    data, sizes = bytearray(), []
    while chunk := s.recv(65536):
        data.extend(chunk)
        sizes.append(len(chunk))
    return bytes(data), sizes, time.monotonic()


# -- the API ------------------------------------------------------------------------------------


def test_proxy_lifecycle(toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream]) -> None:
    up = upstreams(echo)
    proxy = make_proxy(toxiproxy, up)
    assert proxy.enabled and proxy.upstream == up.address
    assert proxy.listen.startswith(f"{HOST}:") and not proxy.listen.endswith(":0")
    assert round_trip_s(connect(proxy)) < 1.0
    listed = toxiproxy.proxies()[proxy.name]
    assert (listed.listen, listed.upstream, listed.enabled) == (proxy.listen, up.address, True)
    shown = APIConsumer.get(f"/proxies/{proxy.name}").json()
    assert shown == {
        "name": proxy.name,
        "listen": proxy.listen,
        "upstream": up.address,
        "enabled": True,
        "toxics": [],
    }
    assert b"version" in toxiproxy.version()
    assert proxy.destroy()
    assert toxiproxy.get_proxy(proxy.name) is None
    with pytest.raises(NotFound):
        APIConsumer.get(f"/proxies/{proxy.name}")


def test_api_status_codes(toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream]) -> None:
    up = upstreams(echo)
    proxy = make_proxy(toxiproxy, up)
    body = {"name": proxy.name, "upstream": up.address, "listen": f"{HOST}:0"}
    # 409: the client checks for an existing name itself, so ask the API directly.
    with pytest.raises(ProxyExists):
        APIConsumer.post("/proxies", json=body)
    assert APIConsumer.post("/proxies", json={**body, "name": proxy.name + "b"}).status_code == 201
    with pytest.raises(InvalidToxic):  # 400: no upstream
        APIConsumer.post("/proxies", json={"name": "no_upstream"})
    with pytest.raises(InvalidToxic):  # 400: not JSON
        APIConsumer.post("/proxies", data=b"{nope")
    with pytest.raises(NotFound):
        APIConsumer.get("/proxies/no_such_proxy")
    with pytest.raises(NotFound):
        APIConsumer.get("/proxies/no_such_proxy/toxics")
    with pytest.raises(NotFound):
        proxy.destroy_toxic("no_such_toxic")
    with pytest.raises(NotFound):
        APIConsumer.delete("/proxies/no_such_proxy")
    with pytest.raises(InvalidToxic):  # 400: unknown type
        proxy.add_toxic(type="no_such_type")
    with pytest.raises(InvalidToxic):  # 400: bad stream
        proxy.add_toxic(type="latency", stream="sideways")
    proxy.add_toxic(type="latency", attributes={"latency": 1})
    with pytest.raises(ProxyExists):  # 409: a toxic of that name exists
        proxy.add_toxic(type="latency", attributes={"latency": 2})
    created = APIConsumer.post(
        f"/proxies/{proxy.name}/toxics",
        json={"type": "latency", "stream": "upstream", "attributes": {"latency": 3}},
    )
    assert created.status_code == 200
    assert created.json() == {
        "name": "latency_upstream",
        "type": "latency",
        "stream": "upstream",
        "toxicity": 1.0,
        "attributes": {"latency": 3, "jitter": 0},
    }
    assert sorted(proxy.toxics()) == ["latency_downstream", "latency_upstream"]
    updated = APIConsumer.post(
        f"/proxies/{proxy.name}/toxics/latency_upstream", json={"attributes": {"jitter": 1}}
    ).json()
    assert updated["attributes"] == {"latency": 3, "jitter": 1}
    delete = requests.delete(
        f"http://{APIConsumer.host}:{APIConsumer.port}/proxies/{proxy.name}/toxics/latency_upstream"
    )
    assert delete.status_code == 204
    assert sorted(proxy.toxics()) == ["latency_downstream"]


def test_populate_creates_keeps_and_replaces(
    toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream]
) -> None:
    a, b = upstreams(echo), upstreams(echo)
    names = [f"test_pop_{next(_names)}", f"test_pop_{next(_names)}"]
    wanted = [{"name": n, "upstream": a.address, "listen": f"{HOST}:0"} for n in names]
    r = APIConsumer.post("/populate", json=wanted)
    assert r.status_code == 201
    first = {p["name"]: p for p in r.json()["proxies"]}
    assert set(first) == set(names) and all(p["enabled"] for p in first.values())
    # The same again, with the addresses the proxies got: nothing changes.
    same = [{**w, "listen": first[w["name"]]["listen"]} for w in wanted]
    again = {p["name"]: p for p in APIConsumer.post("/populate", json=same).json()["proxies"]}
    assert again == first
    # Another upstream replaces the proxy.
    moved = [{**same[0], "upstream": b.address}]
    replaced = APIConsumer.post("/populate", json=moved).json()["proxies"]
    assert replaced[0]["upstream"] == b.address
    with pytest.raises(InvalidToxic):  # 400: an entry without upstream
        APIConsumer.post("/populate", json=[{"name": "x"}])


def test_reset_enables_proxies_and_removes_toxics(
    toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream]
) -> None:
    up = upstreams(echo)
    proxy = make_proxy(toxiproxy, up)
    proxy.add_toxic(type="latency", attributes={"latency": 500})
    proxy.disable()
    assert toxiproxy.reset()
    shown = APIConsumer.get(f"/proxies/{proxy.name}").json()
    assert shown["enabled"] and shown["toxics"] == []
    assert round_trip_s(connect(proxy)) < 0.4


# -- the toxics --------------------------------------------------------------------------------


def test_latency_is_added_to_live_and_new_connections(
    toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream]
) -> None:
    proxy = make_proxy(toxiproxy, upstreams(echo))
    live = connect(proxy)
    base = min(round_trip_s(live) for _ in range(5))
    assert base < 0.05, f"round trip {base:.3f} s without toxics"
    proxy.add_toxic(type="latency", attributes={"latency": 150})
    for s in (live, connect(proxy)):
        rtts = [round_trip_s(s) for _ in range(3)]
        assert min(rtts) >= 0.150 and median(rtts) <= 0.150 + SLACK_S, rtts
    proxy.add_toxic(type="latency", stream="upstream", attributes={"latency": 100})
    rtts = [round_trip_s(live) for _ in range(3)]
    assert min(rtts) >= 0.250 and median(rtts) <= 0.250 + SLACK_S, rtts
    proxy.destroy_toxic("latency_downstream")
    proxy.destroy_toxic("latency_upstream")
    rtt = min(round_trip_s(live) for _ in range(3))
    assert rtt < 0.1, f"round trip {rtt:.3f} s after the toxics were removed"


def test_latency_jitter_spreads_delays(
    toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream]
) -> None:
    proxy = make_proxy(toxiproxy, upstreams(echo))
    proxy.add_toxic(type="latency", attributes={"latency": 100, "jitter": 60})
    s = connect(proxy)
    rtts = [round_trip_s(s) for _ in range(12)]
    assert min(rtts) >= 0.040 and median(rtts) <= 0.160 + SLACK_S, rtts
    assert max(rtts) - min(rtts) >= 0.02, f"jitter 60 ms but every delay alike: {rtts}"


def test_bandwidth_limits_the_rate(
    toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream]
) -> None:
    payload = bytes(range(256)) * 1200  # 307,200 bytes
    proxy = make_proxy(toxiproxy, upstreams(send_then(payload)))
    t0 = time.monotonic()
    data, _, _ = read_until_closed(connect(proxy))
    fast_s = time.monotonic() - t0
    assert data == payload
    proxy.add_toxic(type="bandwidth", attributes={"rate": 200})  # 200 KB/s
    t0 = time.monotonic()
    data, _, done = read_until_closed(connect(proxy))
    elapsed = done - t0
    assert data == payload
    expected = len(payload) / 200_000  # 1.54 s
    assert expected - 0.15 <= elapsed <= 1.5 * expected + SLACK_S, (
        f"{len(payload)} bytes at 200 KB/s took {elapsed:.2f} s (unlimited: {fast_s:.3f} s)"
    )


def test_slow_close_delays_the_close(
    toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream]
) -> None:
    proxy = make_proxy(toxiproxy, upstreams(send_then(b"bye")))
    proxy.add_toxic(type="slow_close", attributes={"delay": 400})
    waits = []
    for _ in range(3):
        t0 = time.monotonic()  # before connecting: the upstream closes as soon as it is reached
        data, _, closed_at = read_until_closed(connect(proxy))
        assert data == b"bye"
        waits.append(closed_at - t0)
    assert min(waits) >= 0.4 and median(waits) <= 0.4 + SLACK_S, waits


def test_timeout_zero_is_a_black_hole_until_removed(
    toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream]
) -> None:
    holder: list[Upstream] = []
    up = upstreams(sink(holder))
    holder.append(up)
    proxy = make_proxy(toxiproxy, up)
    proxy.add_toxic(type="timeout", stream="upstream", attributes={"timeout": 0})
    s = connect(proxy)
    s.sendall(b"into the void")
    s.settimeout(0.6)
    with pytest.raises(TimeoutError):
        s.recv(10)  # held open: no data, no close
    assert up.received == b"", "the black hole let data through"
    proxy.destroy_toxic("timeout_upstream")
    s.settimeout(RECV_TIMEOUT_S)
    # Removing the toxic closes the connections it held (Toxiproxy's TimeoutToxic.Cleanup).
    with contextlib.suppress(ConnectionResetError):
        assert s.recv(10) == b""
    assert up.received == b""


def test_timeout_closes_after_the_timeout_without_data(
    toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream]
) -> None:
    proxy = make_proxy(toxiproxy, upstreams(echo))
    proxy.add_toxic(type="timeout", attributes={"timeout": 300})
    waits = []
    for _ in range(3):
        t0 = time.monotonic()  # the timeout runs from when the connection's link starts
        s = connect(proxy)
        s.sendall(b"ping")
        try:
            data, _, closed_at = read_until_closed(s)
        except ConnectionResetError:
            data, closed_at = b"", time.monotonic()
        assert data == b""
        waits.append(closed_at - t0)
    assert min(waits) >= 0.3 and median(waits) <= 0.3 + SLACK_S, waits


@pytest.mark.parametrize("timeout_ms", [0, 300])
def test_reset_peer_resets_the_connection(
    toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream], timeout_ms: int
) -> None:
    proxy = make_proxy(toxiproxy, upstreams(echo))
    # Before connecting: Toxiproxy makes a connection reset-able (SO_LINGER 0) when it starts.
    proxy.add_toxic(type="reset_peer", stream="upstream", attributes={"timeout": timeout_ms})
    waits = []
    for _ in range(3):
        s = connect(proxy)
        t0 = time.monotonic()
        s.sendall(b"hello")
        with pytest.raises(ConnectionResetError):
            s.recv(10)
        waits.append(time.monotonic() - t0)
    assert min(waits) >= timeout_ms / 1000 and median(waits) <= timeout_ms / 1000 + SLACK_S, waits


def test_limit_data_closes_after_n_bytes(
    toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream]
) -> None:
    payload = bytes(i % 251 for i in range(5000))
    proxy = make_proxy(toxiproxy, upstreams(send_then(payload, then_close=False)))
    proxy.add_toxic(type="limit_data", attributes={"bytes": 1000})
    data, _, _ = read_until_closed(connect(proxy))
    assert data == payload[:1000]


def test_slicer_splits_writes(
    toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream]
) -> None:
    payload = bytes(i % 253 for i in range(1000))
    proxy = make_proxy(toxiproxy, upstreams(send_then(payload)))
    data, sizes, _ = read_until_closed(connect(proxy))
    assert data == payload and len(sizes) <= 2, f"without the slicer: reads of {sizes}"
    proxy.add_toxic(
        type="slicer", attributes={"average_size": 100, "size_variation": 20, "delay": 20_000}
    )
    t0 = time.monotonic()
    data, sizes, done = read_until_closed(connect(proxy))
    assert data == payload
    # Pieces of at most 120 bytes, 20 ms apart: the client sees many small reads over at least
    # 8 gaps (a reader that stalls may get a few pieces in one read, so the median is checked).
    assert len(sizes) >= 5 and median(sizes) <= 240, sizes
    assert done - t0 >= 8 * 0.020, f"{len(sizes)} reads in {done - t0:.3f} s"


def test_toxicity_zero_never_applies(
    toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream]
) -> None:
    proxy = make_proxy(toxiproxy, upstreams(echo))
    proxy.add_toxic(type="latency", toxicity=0.0, attributes={"latency": 300})
    rtt = max(round_trip_s(connect(proxy)) for _ in range(3))
    assert rtt < 0.2, f"round trip {rtt:.3f} s with a toxic of toxicity 0"


def test_down_closes_connections_and_refuses_new_ones(
    toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream]
) -> None:
    up = upstreams(echo)
    proxy = make_proxy(toxiproxy, up)
    live = connect(proxy)
    round_trip_s(live)
    host, _, port = proxy.listen.rpartition(":")
    with proxy.down():
        with contextlib.suppress(ConnectionResetError):
            assert live.recv(10) == b""
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, int(port)), timeout=RECV_TIMEOUT_S)
        assert not toxiproxy.proxies()[proxy.name].enabled
    assert toxiproxy.proxies()[proxy.name].enabled
    assert round_trip_s(connect(proxy)) < 1.0
    wait_for(lambda: up.accepted == 2, RECV_TIMEOUT_S, "two upstream connections")


def test_removing_toxics_mid_stream_loses_and_reorders_nothing(
    toxiproxy: Toxiproxy, upstreams: Callable[[Handler], Upstream]
) -> None:
    payload = bytes(i % 241 for i in range(400_000))
    proxy = make_proxy(toxiproxy, upstreams(send_then(payload)))
    proxy.add_toxic(type="bandwidth", attributes={"rate": 300})
    proxy.add_toxic(type="latency", name="lat", attributes={"latency": 50, "jitter": 20})
    proxy.add_toxic(
        type="slicer", attributes={"average_size": 500, "size_variation": 100, "delay": 100}
    )
    s = connect(proxy)
    got = bytearray(s.recv(65536))
    for name in ("lat", "bandwidth_downstream", "slicer_downstream"):
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            got.extend(s.recv(65536))
        proxy.destroy_toxic(name)
    data, _, _ = read_until_closed(s)
    assert bytes(got) + data == payload
