"""Link faults: a Toxiproxy proxy in front of every node, toxics on it as faults.

    with Links.open(os.environ.get("TOXIPROXY_URL")) as links:
        advertised = links.proxy(node_id, "127.0.0.1:9092")   # -> "127.0.0.1:41234"
        ... node started with advertised_listener = advertised ...
        with inject_link(spec, links):
            ...                                               # the toxic is on
                                                              # removed here, always

Where the proxies sit: each node advertises a proxy's address as its client listener,
another's as its replication listener and, with a Kafka listener, a third's as that one, so
the metadata names the proxies to everyone who looks a broker up: producers and consumers
after their bootstrap (raftlog's and Kafka's), and other brokers' replica fetchers (which dial
the replication listener). A toxic on node i goes on all of its proxies and so hurts every
client and replication connection TO node i (its produce and fetch requests, and
the fetches of the followers of the partitions it leads) in the stream it names ("upstream":
the requests, "downstream": the responses). Raft traffic (pysyncobj) is not proxied: pysyncobj names
a peer by its address and only one side of a pair dials, so two names for one peer break its
peer matching; the network faults (chaos/netns.py) cut Raft. The suite's own observer (the
runner's `describe`, the final reads' bootstrap) dials the nodes' own listeners, so a toxic
never blinds the nemesis. Link faults and network namespaces are not combined in one run: the
proxies listen on the host and would carry traffic past a namespace's DROP rules.

The API is Toxiproxy's, driven with the `toxiproxy-python` client: our server
(chaos/toxiproxy_server.py, started here as a child process) unless `TOXIPROXY_URL` names a
real Toxiproxy, which then must reach the nodes' listeners on 127.0.0.1 (same host). Proxy
names carry this process's pid, so runs sharing one Toxiproxy do not collide; `close()`
deletes them. The client's API address is class-wide: every call here sets it first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from typing import IO, Any

from toxiproxy import Toxiproxy
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists
from toxiproxy.proxy import Proxy

from chaos.faults import LINK_KINDS, FaultError, FaultSpec, heal_all

log = logging.getLogger(__name__)

TOXIPROXY_PORT_DEFAULT = 8474
SERVER_START_TIMEOUT_S = 30.0
SERVER_STOP_TIMEOUT_S = 10.0
# The toxic a link fault adds is named so that healing removes only what the suite added.
TOXIC_NAME_PREFIX = "chaos-"


def parse_url(url: str) -> tuple[str, int]:
    """ "http://host:port" (or "host:port") -> (host, port); the port defaults to 8474."""
    parts = urllib.parse.urlsplit(url if "//" in url else f"http://{url}")
    return parts.hostname or "127.0.0.1", parts.port or TOXIPROXY_PORT_DEFAULT


class _Server:
    """`python -m chaos.toxiproxy_server --port 0` as a child; its API address once ready."""

    def __init__(self) -> None:
        # stderr to a file: a pipe nobody reads during a long run could fill and stall it.
        self.err: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chaos.toxiproxy_server", "--host", "127.0.0.1", "--port", "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.proc.stdout is not None
        # The server writes its one line with one write; it exits if it cannot listen.
        line = self.proc.stdout.readline().decode()
        if not line.startswith("toxiproxy API listening on "):
            self.close()
            raise FaultError(f"the toxiproxy server did not start (got {line!r}): {self.stderr()}")
        host, _, port = line.split()[-1].rpartition(":")
        self.address = (host, int(port))

    def stderr(self) -> str:
        self.err.seek(0)
        return self.err.read().decode(errors="replace")[-4000:]

    def close(self) -> list[str]:
        """Stop the server; what went wrong with it (a slow or failed exit, logged errors)."""
        from chaos.local_cluster import wait_or_kill

        if self.proc.poll() is None:
            self.proc.terminate()
        rc = wait_or_kill(self.proc, SERVER_STOP_TIMEOUT_S)
        problems = []
        text = self.stderr()
        if rc != 0 or "Traceback" in text or " ERROR " in text:
            problems.append(f"the toxiproxy server exited {rc}; stderr:\n{text}")
        self.err.close()
        return problems


class Links:
    """One proxy per node on a Toxiproxy API; toxics added and removed by node id."""

    def __init__(self, address: tuple[str, int], server: _Server | None = None):
        self.address = address
        self.server = server
        self.client = Toxiproxy()
        # Each node's proxies: one per listener it advertises (client, replication, Kafka).
        self.proxies: dict[int, list[Proxy]] = {}
        self.tag = f"raftlog-{os.getpid()}-{int(time.time() * 1000) % 1_000_000}"
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while not self._api().running():
            if time.monotonic() > deadline:
                raise FaultError(f"no Toxiproxy API on {address[0]}:{address[1]}")
            time.sleep(0.1)

    @classmethod
    @contextlib.contextmanager
    def open(cls, url: str | None = None) -> Iterator[Links]:
        """Links on the Toxiproxy at `url`, or on our own server when `url` is None/empty.
        On exit the proxies are deleted and our server is stopped."""
        server = None if url else _Server()
        links = cls(parse_url(url) if url else server.address, server)  # type: ignore[union-attr]
        try:
            yield links
        finally:
            problems = links.close()
            if problems:
                raise FaultError("; ".join(problems))

    def _api(self) -> Toxiproxy:
        self.client.update_api_consumer(*self.address)
        return self.client

    def proxy(self, node_id: int, upstream: str) -> str:
        """Create a proxy of node `node_id` to `upstream` (one of its listeners); the address
        it listens on. A node's toxics go on every proxy it has."""
        proxies = self.proxies.setdefault(node_id, [])
        name = f"{self.tag}-node-{node_id}" + (f"-{len(proxies)}" if proxies else "")
        try:
            proxy = self._api().create(upstream=upstream, name=name, listen="127.0.0.1:0")
        except (ProxyExists, InvalidToxic, KeyError) as e:
            raise FaultError(f"creating proxy {name} for {upstream}: {e!r}") from None
        proxies.append(proxy)
        log.info("node %d: proxy %s on %s for %s", node_id, name, proxy.listen, upstream)
        return str(proxy.listen)

    def _proxies(self, node_id: int) -> list[Proxy]:
        try:
            return self.proxies[node_id]
        except KeyError:
            known = sorted(self.proxies)
            raise FaultError(f"node {node_id} has no proxy (nodes with one: {known})") from None

    def add_toxic(self, node_id: int, options: dict[str, Any]) -> str:
        """Add the toxic `options` describes ({toxic, stream, attributes}); its name."""
        toxic, stream = options["toxic"], options.get("stream", "downstream")
        name = f"{TOXIC_NAME_PREFIX}{toxic}_{stream}"
        self._api()
        try:
            for proxy in self._proxies(node_id):
                proxy.add_toxic(
                    name=name, type=toxic, stream=stream, attributes=dict(options["attributes"])
                )
        except (InvalidToxic, NotFound, ProxyExists) as e:
            raise FaultError(f"node {node_id}: adding toxic {name} {options}: {e!r}") from None
        return name

    def remove_toxics(self, node_id: int) -> None:
        """Remove every toxic the suite added to node `node_id`'s proxies, and enable them."""
        for proxy in self._proxies(node_id):
            self._api()
            try:
                for name in proxy.toxics():
                    if name.startswith(TOXIC_NAME_PREFIX):
                        proxy.destroy_toxic(name)
                if not proxy.enabled:
                    proxy.enable()
            except NotFound as e:
                raise FaultError(f"node {node_id}: healing proxy {proxy.name}: {e!r}") from None

    def close(self) -> list[str]:
        problems: list[str] = []
        for node_id, proxies in self.proxies.items():
            for proxy in proxies:
                self._api()
                try:
                    proxy.destroy()
                except NotFound as e:
                    problems.append(f"deleting node {node_id}'s proxy {proxy.name}: {e!r}")
        self.proxies.clear()
        if self.server is not None:
            problems.extend(self.server.close())
            self.server = None
        return problems


@contextlib.contextmanager
def inject_link(spec: FaultSpec, links: Links) -> Iterator[FaultSpec]:
    """The spec's toxic on each target's proxy inside the block; removed on exit, always."""
    if spec.kind not in LINK_KINDS:
        raise FaultError(f"fault {spec.kind} is not a link fault")
    if not spec.options.get("toxic"):
        raise FaultError(f"fault link: options {spec.options} name no toxic")
    added: list[int] = []
    try:
        for n in spec.targets:
            added.append(n)
            links.add_toxic(n, spec.options)
        yield spec
    finally:
        heal_all([(f"toxics of node {n}", lambda n=n: links.remove_toxics(n)) for n in added])
