"""What our Toxiproxy server promises beyond Toxiproxy: bad attributes are refused (Toxiproxy
accepts them and misbehaves), the slicer's cuts make progress, unknown routes and methods get
Go's answers. Always against our server (`own_toxiproxy`), whatever TOXIPROXY_URL says."""

from __future__ import annotations

import itertools
import random

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic

from chaos.toxiproxy_server import slice_points


def _proxy(t: Toxiproxy, name: str) -> None:
    t.create(upstream="127.0.0.1:9", name=name, listen="127.0.0.1:0")


@pytest.mark.parametrize(
    "toxic",
    [
        {"type": "latency", "attributes": {"latency": -1}},
        {"type": "latency", "attributes": {"latency": 1.5}},
        {"type": "latency", "attributes": {"latency": "100"}},
        {"type": "bandwidth", "attributes": {"rate": True}},
        {"type": "slicer", "attributes": {"average_size": 0}},
        {"type": "slicer", "attributes": {"average_size": 10, "size_variation": 10}},
        {"type": "latency", "toxicity": 1.5},
        {"type": "latency", "attributes": [1]},
        ["not", "an", "object"],
    ],
)
def test_bad_toxics_are_400_naming_the_value(own_toxiproxy: Toxiproxy, toxic: object) -> None:
    _proxy(own_toxiproxy, "bad_toxics")
    with pytest.raises(InvalidToxic) as e:
        APIConsumer.post("/proxies/bad_toxics/toxics", json=toxic)
    assert b"bad request body" in e.value.args[0]
    assert APIConsumer.get("/proxies/bad_toxics/toxics").json() == []


def test_update_with_a_bad_value_changes_nothing(own_toxiproxy: Toxiproxy) -> None:
    _proxy(own_toxiproxy, "upd")
    APIConsumer.post("/proxies/upd/toxics", json={"type": "latency", "attributes": {"latency": 5}})
    with pytest.raises(InvalidToxic):
        APIConsumer.post("/proxies/upd/toxics/latency_downstream", json={"toxicity": -0.1})
    assert APIConsumer.get("/proxies/upd/toxics/latency_downstream").json()["toxicity"] == 1.0


def test_unknown_routes_and_methods(own_toxiproxy: Toxiproxy) -> None:
    base = f"http://{APIConsumer.host}:{APIConsumer.port}"
    assert requests.get(f"{base}/nope").status_code == 404
    assert requests.put(f"{base}/proxies").status_code == 405
    assert requests.get(f"{base}/version", headers={"User-Agent": "Mozilla/5.0"}).status_code == 403
    r = requests.get(f"{base}/proxies/none")
    assert r.status_code == 404 and r.json() == {"error": "proxy not found", "status": 404}


def test_listen_on_a_taken_port_is_500_and_creates_nothing(own_toxiproxy: Toxiproxy) -> None:
    first = own_toxiproxy.create(upstream="127.0.0.1:9", name="first", listen="127.0.0.1:0")
    r = requests.post(
        f"http://{APIConsumer.host}:{APIConsumer.port}/proxies",
        json={"name": "second", "upstream": "127.0.0.1:9", "listen": first.listen},
    )
    assert r.status_code == 500 and "listen" in r.json()["error"]
    assert "second" not in own_toxiproxy.proxies()


@given(st.integers(0, 5000), st.integers(1, 300), st.data(), st.integers(0, 2**32))
def test_slice_points_cover_the_chunk_in_order(
    size: int, average: int, data: st.DataObject, seed: int
) -> None:
    variation = data.draw(st.integers(0, average - 1))
    points = slice_points(0, size, average, variation, random.Random(seed))
    assert points[0] == 0 and points[-1] == size
    assert all(a < b for a, b in itertools.pairwise(points)) or size == 0
    assert all(b - a <= average + variation for a, b in itertools.pairwise(points))
