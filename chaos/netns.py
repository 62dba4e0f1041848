"""Network partitions for local nodes: one network namespace per node, iptables DROP rules.

Why namespaces: pysyncobj names each peer by its address, and only one side of a pair dials,
so per-link TCP proxies (a different address for the same peer on each side) break its peer
matching. Giving each node its own network stack and address instead lets a partition cut Raft,
replication, heartbeats and client traffic alike, as a real one does, with every node keeping
one address that all its peers use.

Layout (root, Linux, `ip` and `iptables` installed; scripts/test installs iptables):

    namespace <prefix>h    a hub holding the bridge <prefix>b (so the host's own firewall,
                           e.g. Docker's FORWARD DROP, never sees this traffic)
    namespace <prefix>n<i> node i: interface eth0 = 10.<a>.<b>.<i>/24, veth to the bridge
    host                   veth <prefix>x = 10.<a>.<b>.254/24 on the bridge: the clients

`prefix` is "rl<pid in hex>-<k>" (at most 15 characters per interface name), so leftovers of a
killed test run can be found and removed (`sweep_stale`). Faults are a Grudge (node -> the
nodes it must not hear from; node 0 is the host): each grudge becomes `iptables -A INPUT -s
<addr> -j DROP` in the receiving node's namespace, and a host grudge becomes an OUTPUT rule in
the sending node's namespace, so the host's own rules are never touched. `heal()` flushes the
INPUT and OUTPUT chains of every node namespace; `destroy()` deletes the namespaces and the host
veth (the kernel removes their peers and the bridge). Both are idempotent and always run on
exit from the context manager.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence

from chaos.faults import FaultError, Grudge

log = logging.getLogger(__name__)

HOST_ID = 0
HOST_SUFFIX = 254
# The private range the namespaces' /24s are taken from; a /24 already routed on the host is
# skipped. 10.213.0.0/16: far from Docker's 172.17/16 defaults and common LAN ranges.
SUBNET_POOL = ipaddress.IPv4Network("10.213.0.0/16")
COMMAND_TIMEOUT_S = 10.0
_counter = iter(range(1 << 30))


def available() -> str | None:
    """None when namespaces can be made here; otherwise what is missing, for a skip message."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "iptables") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (scripts/test installs iptables as root)"
    return None


def _run(*cmd: str) -> str:
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise FaultError(f"`{' '.join(cmd)}` did not finish in {COMMAND_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        raise FaultError(f"`{' '.join(cmd)}` exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def _used_subnets() -> set[ipaddress.IPv4Network]:
    out = _run("ip", "-4", "-o", "addr", "show")
    used = set()
    for m in re.finditer(r"inet (\d+\.\d+\.\d+\.\d+)/(\d+)", out):
        used.add(ipaddress.IPv4Network(f"{m.group(1)}/24", strict=False))
    return used


class NetnsNetwork:
    """Nodes 1..n, each in its own namespace on a private bridge; the host reaches them all."""

    def __init__(self, node_ids: Sequence[int]):
        if not node_ids or min(node_ids) < 1 or max(node_ids) >= HOST_SUFFIX:
            raise FaultError(f"node ids {list(node_ids)}: must be 1..{HOST_SUFFIX - 1}")
        self._ids = sorted(node_ids)
        self.prefix = f"rl{os.getpid():x}-{next(_counter) % 36:x}"
        self.subnet: ipaddress.IPv4Network | None = None
        self.created = False

    # -- names and addresses -----------------------------------------------------------------

    def node_ids(self) -> list[int]:
        return list(self._ids)

    def namespace(self, node_id: int) -> str:
        return f"{self.prefix}n{node_id}"

    @property
    def hub(self) -> str:
        return f"{self.prefix}h"

    def address(self, node_id: int) -> str:
        """A node's address (node 0: the host's address on the bridge)."""
        assert self.subnet is not None, "create() first"
        return str(self.subnet.network_address + (HOST_SUFFIX if node_id == HOST_ID else node_id))

    def exec_prefix(self, node_id: int) -> list[str]:
        """Prepend to a command line to run it in the node's namespace (`ip netns exec` execs
        the command, so the child's pid is the command's own: signals reach it directly)."""
        return ["ip", "netns", "exec", self.namespace(node_id)]

    # -- lifecycle ---------------------------------------------------------------------------

    def create(self) -> None:
        problem = available()
        if problem is not None:
            raise FaultError(f"cannot create network namespaces: {problem}")
        used = _used_subnets()
        # Start the search at a place that depends on the pid, so that two runs creating
        # their networks at the same moment (neither sees the other's yet) do not collide.
        pool = list(SUBNET_POOL.subnets(new_prefix=24))
        first = os.getpid() % len(pool)
        self.subnet = next((s for s in pool[first:] + pool[:first] if s not in used), None)
        if self.subnet is None:
            raise FaultError(f"every /24 of {SUBNET_POOL} is in use on this host")
        self.created = True  # from here on destroy() has something to clean
        bridge, host_if = f"{self.prefix}b", f"{self.prefix}x"
        _run("ip", "netns", "add", self.hub)
        _run("ip", "-n", self.hub, "link", "add", bridge, "type", "bridge")
        _run("ip", "-n", self.hub, "link", "set", bridge, "up")
        _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", "h0", "netns", self.hub)
        _run("ip", "-n", self.hub, "link", "set", "h0", "master", bridge, "up")
        _run("ip", "addr", "add", f"{self.address(HOST_ID)}/24", "dev", host_if)
        _run("ip", "link", "set", host_if, "up")
        for i in self._ids:
            ns = self.namespace(i)
            _run("ip", "netns", "add", ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}",
                 "netns", self.hub)  # fmt: skip
            _run("ip", "-n", self.hub, "link", "set", f"p{i}", "master", bridge, "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
        log.info("network namespaces %s* on %s", self.prefix, self.subnet)

    def destroy(self) -> None:
        if not self.created:
            return
        errors = []
        for ns in [*(self.namespace(i) for i in self._ids), self.hub]:
            try:
                _run("ip", "netns", "del", ns)
            except FaultError as e:
                if "No such file" not in str(e):
                    errors.append(str(e))
        with contextlib.suppress(FaultError):  # gone with the hub already, normally
            _run("ip", "link", "del", f"{self.prefix}x")
        self.created = False
        if errors:
            raise FaultError("; ".join(errors))

    def __enter__(self) -> NetnsNetwork:
        try:
            self.create()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    # -- faults ------------------------------------------------------------------------------

    def _iptables(self, node_id: int, *args: str) -> None:
        _run(*self.exec_prefix(node_id), "iptables", "-w", *args)

    def apply(self, grudge: Grudge) -> None:
        """Drop what the grudge says, on top of the rules already there."""
        for receiver, senders in sorted(grudge.items()):
            for sender in sorted(senders):
                if receiver == sender:
                    continue
                if receiver == HOST_ID:
                    self._iptables(sender, "-A", "OUTPUT", "-d", self.address(HOST_ID), "-j",
                                   "DROP")  # fmt: skip
                else:
                    self._iptables(receiver, "-A", "INPUT", "-s", self.address(sender), "-j",
                                   "DROP")  # fmt: skip

    def heal(self) -> None:
        errors = []
        for i in self._ids:
            for chain in ("INPUT", "OUTPUT"):
                try:
                    self._iptables(i, "-F", chain)
                except FaultError as e:
                    errors.append(str(e))
        if errors:
            raise FaultError("; ".join(errors))

    def rules(self, node_id: int) -> list[str]:
        """The node namespace's filter rules (`iptables -S`), for checks and debugging."""
        out = _run(*self.exec_prefix(node_id), "iptables", "-w", "-S")
        return [line for line in out.splitlines() if line.startswith("-A")]


def sweep_stale() -> list[str]:
    """Delete namespaces left by runs whose process is gone (named rl<pid hex>-...)."""
    removed = []
    for line in _run("ip", "netns", "list").splitlines():
        name = line.split()[0] if line.strip() else ""
        m = re.fullmatch(r"rl([0-9a-f]+)-[0-9a-f]+(?:h|n\d+)", name)
        if m is None:
            continue
        pid = int(m.group(1), 16)
        if pid == os.getpid() or _alive(pid):
            continue
        with contextlib.suppress(FaultError):
            _run("ip", "netns", "del", name)
            removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def network(node_ids: Sequence[int]) -> Iterator[NetnsNetwork]:
    with NetnsNetwork(node_ids) as net:
        yield net
