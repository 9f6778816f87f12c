"""Hosts on one machine: Linux network namespaces joined by a bridge, each by a veth pair.

Each host is a namespace with one interface on a private /24; the bridge sits in a
namespace of its own (the switch), and the controller (the calling process, in the root
namespace) joins it as one more port, so it reaches every host and they reach it. Cutting
a host takes its port on the switch down: its packets are dropped, not refused, as when a
cable or a route is lost, while its processes keep running. Needs root (``ip netns``);
:func:`netns_problem` says why not, for a test to skip.

    with Network.create() as net:
        db = net.add_host("db")
        net.run(db, ["postgres", ...])      # argv prefix: ip netns exec <ns>
        net.cut(db); net.restore(db)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence

import msgspec

#: The switch's bridge, and the controller's address on it (the hosts' gateway).
BRIDGE = "br0"
CONTROLLER_OCTET = 1


class NetnsError(RuntimeError):
    """An ``ip`` command failed."""


class Host(msgspec.Struct, frozen=True):
    """One namespace: its name here, its namespace, its address and its switch port."""

    name: str
    ns: str
    address: str
    port: str

    def exec_args(self) -> list[str]:
        """The argv prefix that runs a command inside this host."""
        return ["ip", "netns", "exec", self.ns]


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def netns_problem() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    if shutil.which("ip") is None:
        return "no 'ip' command (iproute2)"
    if os.geteuid() != 0:
        return "network namespaces need root ('ip netns add')"
    probe = f"rlprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except NetnsError as exc:
        return f"'ip netns add' is not permitted here: {exc}"
    with contextlib.suppress(NetnsError):
        _ip("netns", "del", probe)
    return None


def _free_subnet(seed: int) -> str:
    """A /24 of 10.213.0.0/16 that no route of the root namespace uses yet (another run's
    controller sits on its own)."""
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=False).stdout
    for step in range(250):
        subnet = f"10.213.{(seed + step) % 250}"
        if f"{subnet}." not in routes:
            return subnet
    raise NetnsError("no free /24 left in 10.213.0.0/16")


class Network:
    """The switch, the controller's port on it, and the hosts plugged in."""

    def __init__(self, prefix: str, subnet: str) -> None:
        #: Namespace and interface names start with it (unique per run: the pid).
        self.prefix = prefix
        #: The first three octets of the /24, e.g. ``10.213.7``.
        self.subnet = subnet
        self.switch = f"{prefix}-sw"
        self.controller_if = f"{prefix}c"
        self.hosts: dict[str, Host] = {}

    @classmethod
    @contextlib.contextmanager
    def create(cls) -> Iterator[Network]:
        """A switch with the controller on it; every namespace and link gone at exit."""
        pid = os.getpid()
        net = cls(f"rl{pid}", _free_subnet(pid))
        try:
            net._make_switch()
            yield net
        finally:
            net.close()

    @property
    def controller(self) -> str:
        """The controller's address on the switch."""
        return f"{self.subnet}.{CONTROLLER_OCTET}"

    def _make_switch(self) -> None:
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "set", "lo", "up")
        _ip("-n", self.switch, "link", "add", BRIDGE, "type", "bridge")
        _ip("-n", self.switch, "link", "set", BRIDGE, "up")
        port = "ctl"
        _ip("link", "add", self.controller_if, "type", "veth", "peer", "name", port)
        _ip("link", "set", port, "netns", self.switch)
        self._plug(port)
        _ip("addr", "add", f"{self.controller}/24", "dev", self.controller_if)
        _ip("link", "set", self.controller_if, "up")

    def _plug(self, port: str) -> None:
        _ip("-n", self.switch, "link", "set", port, "master", BRIDGE)
        _ip("-n", self.switch, "link", "set", port, "up")

    def add_host(self, name: str) -> Host:
        """A new namespace on the switch, at the next address."""
        octet = CONTROLLER_OCTET + 1 + len(self.hosts)
        host = Host(name, f"{self.prefix}-{name}", f"{self.subnet}.{octet}", f"p{octet}")
        _ip("netns", "add", host.ns)
        self.hosts[name] = host
        _ip("-n", host.ns, "link", "set", "lo", "up")
        _ip("-n", host.ns, "link", "add", "eth0", "type", "veth", "peer", "name", host.port)
        _ip("-n", host.ns, "link", "set", host.port, "netns", self.switch)
        self._plug(host.port)
        _ip("-n", host.ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", host.ns, "link", "set", "eth0", "up")
        return host

    def cut(self, host: Host) -> None:
        """Take the host's switch port down: its packets go nowhere, its processes run on."""
        _ip("-n", self.switch, "link", "set", host.port, "down")

    def restore(self, host: Host) -> None:
        _ip("-n", self.switch, "link", "set", host.port, "up")

    def exec_args(self, host: Host | None) -> list[str]:
        """The argv prefix for a command on ``host`` (None: the controller)."""
        return host.exec_args() if host is not None else []

    def popen(
        self, host: Host | None, argv: Sequence[str], **kw: object
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` on ``host``; ``ip netns exec`` execs it, so the pid is its own."""
        return subprocess.Popen([*self.exec_args(host), *argv], **kw)  # type: ignore[call-overload, no-any-return]

    def close(self) -> None:
        """Delete every namespace and the controller's link (their veths go with them).
        Processes started in a namespace are the caller's to stop first."""
        for host in self.hosts.values():
            with contextlib.suppress(NetnsError):
                _ip("netns", "del", host.ns)
        with contextlib.suppress(NetnsError):
            _ip("link", "del", self.controller_if)
        with contextlib.suppress(NetnsError):
            _ip("netns", "del", self.switch)
        self.hosts.clear()
