"""Test hosts made of network namespaces: one services host with a bridge, worker hosts on veths.

Every address is one this module assigns, from ``10.213.<subnet>.0/24``, on interfaces
inside namespaces it creates: the services namespace holds a bridge (``.1``) and one veth
end per worker host; each worker host holds the other end as ``eth0`` (``.10`` and up).
Nothing is routed anywhere else. Processes join a host with ``nsenter --net``, which
execs the command, so the PID we hold is the process's own.

A host's link can be cut (link down), made lossy (an nftables table in the host's
namespace dropping a share of its packets both ways: ``numgen random``) or slow (a
``tc`` token bucket on both ends of its veth, so packets queue for up to a second and
more). ``tc netem`` would do both, but kernels built without ``sch_netem`` (this
project's machines) have no such qdisc; nftables and ``tbf`` are built in.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Host", "Network", "NetworkUnavailable", "join_namespace"]

_NETNS_DIR = Path("/run/netns")
_LOSSY_TABLE = "chaos_loss"
_CLONE_NEWNET = 0x40000000


class NetworkUnavailable(RuntimeError):
    """Namespaces cannot be made here (not root, no iproute2, no nsenter); says why."""


@dataclass(frozen=True)
class Host:
    """One test host: a network namespace and its address on the test bridge."""

    name: str
    namespace: str
    address: str
    #: The veth end in the services namespace; taking it down partitions this host.
    uplink: str | None = None

    def argv(self, command: list[str]) -> list[str]:
        """``command`` run inside this host's namespace (same PID, same user)."""
        return ["nsenter", f"--net={_NETNS_DIR / self.namespace}", "--", *command]


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetworkUnavailable(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _in_namespace(namespace: str, argv: list[str], stdin: str | None = None) -> None:
    done = subprocess.run(
        ["ip", "netns", "exec", namespace, *argv],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise NetworkUnavailable(f"{' '.join(argv)} in {namespace}: {done.stderr.strip()}")


def join_namespace(namespace: str) -> None:
    """Move the calling thread (call it before starting threads) into ``namespace``."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(_NETNS_DIR / namespace, os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            raise NetworkUnavailable(f"setns {namespace}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


class Network:
    """A services host and ``workers`` worker hosts; :meth:`remove` deletes them all."""

    def __init__(self, workers: int) -> None:
        self._check()
        tag = f"{os.getpid() % 100000:05d}"
        self.subnet = random.randint(1, 254)
        prefix = f"10.213.{self.subnet}"
        self.services = Host("services", f"ck{tag}-svc", f"{prefix}.1")
        self.workers = [
            Host(f"h{i}", f"ck{tag}-h{i}", f"{prefix}.{10 + i}", uplink=f"ck{tag}v{i}")
            for i in range(1, workers + 1)
        ]
        self._made: list[str] = []
        try:
            self._build(prefix)
        except BaseException:
            self.remove()
            raise

    @staticmethod
    def _check() -> None:
        if os.geteuid() != 0:
            raise NetworkUnavailable("network namespaces need root (ip netns add)")
        for tool, package in (
            ("ip", "iproute2"), ("tc", "iproute2"), ("nsenter", "util-linux"), ("nft", "nftables")
        ):  # fmt: skip
            if shutil.which(tool) is None:
                raise NetworkUnavailable(f"{tool} not found (apt-get install {package})")

    def _add_namespace(self, namespace: str) -> None:
        _ip("netns", "add", namespace)
        self._made.append(namespace)
        _ip("-n", namespace, "link", "set", "lo", "up")

    def _build(self, prefix: str) -> None:
        svc = self.services.namespace
        self._add_namespace(svc)
        _ip("-n", svc, "link", "add", "br0", "type", "bridge")
        _ip("-n", svc, "addr", "add", f"{self.services.address}/24", "dev", "br0")
        _ip("-n", svc, "link", "set", "br0", "up")
        for host in self.workers:
            assert host.uplink is not None
            self._add_namespace(host.namespace)
            # Made inside the host's namespace, so no interface ever exists outside ours.
            _ip(
                "-n", host.namespace, "link", "add", "eth0", "type", "veth",
                "peer", "name", host.uplink, "netns", svc,
            )  # fmt: skip
            _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _ip("-n", host.namespace, "link", "set", "eth0", "up")
            _ip("-n", svc, "link", "set", host.uplink, "master", "br0")
            _ip("-n", svc, "link", "set", host.uplink, "up")

    def partition(self, host: Host) -> None:
        """Cut ``host`` off the bridge: its packets go nowhere until :meth:`heal`."""
        assert host.uplink is not None
        _ip("-n", self.services.namespace, "link", "set", host.uplink, "down")

    def heal(self, host: Host) -> None:
        assert host.uplink is not None
        _ip("-n", self.services.namespace, "link", "set", host.uplink, "up")

    def drop_packets(self, host: Host, percent: int) -> None:
        """Drop ``percent`` % of the packets ``host`` sends and receives, at random."""
        rule = f"numgen random mod 100 < {percent} drop;"
        _in_namespace(
            host.namespace,
            ["nft", "-f", "-"],
            stdin=f"table inet {_LOSSY_TABLE} {{\n"
            f"  chain out {{ type filter hook output priority 0; {rule} }}\n"
            f"  chain in {{ type filter hook input priority 0; {rule} }}\n"
            "}\n",
        )

    def stop_dropping(self, host: Host) -> None:
        _in_namespace(host.namespace, ["nft", "delete", "table", "inet", _LOSSY_TABLE])

    def throttle(self, host: Host, rate: str) -> None:
        """Limit ``host``'s link to ``rate`` (``"96kbit"``) each way; excess queues, then drops."""
        for namespace, device in self._link_ends(host):
            _in_namespace(
                namespace,
                ["tc", "qdisc", "add", "dev", device, "root", "tbf", "rate", rate,
                 "burst", "4kb", "latency", "1500ms"],
            )  # fmt: skip

    def stop_throttling(self, host: Host) -> None:
        for namespace, device in self._link_ends(host):
            _in_namespace(namespace, ["tc", "qdisc", "del", "dev", device, "root"])

    def _link_ends(self, host: Host) -> list[tuple[str, str]]:
        """Both ends of ``host``'s veth: a qdisc shapes only what leaves through its device."""
        assert host.uplink is not None
        return [(host.namespace, "eth0"), (self.services.namespace, host.uplink)]

    def remove(self) -> None:
        """Delete every namespace made (their veths and the bridge go with them)."""
        for namespace in reversed(self._made):
            with contextlib.suppress(NetworkUnavailable):
                _ip("netns", "del", namespace)
        self._made.clear()
