"""An emulated cluster on this machine: nodes as network namespaces on shaped links, which MPI ranks run across.

``up`` builds N nodes: each a network namespace and a UTS namespace of its own (its own host name, so MPI tells its
ranks from another node's and sends between nodes over TCP, inside a node through shared memory), joined by a veth
pair to one bridge (a switch with no limit of its own), each node's link shaped both ways by a ``tbf`` qdisc (its
injection and ejection rate). With racks, the nodes of a rack share a bridge of their own, joined to a core bridge by an
uplink shaped both ways too: a two-level fabric whose taper is the uplink's rate against the rack's node links. What it
built is written to a TOML file (:class:`Testbed`) that ``run`` and ``calibrate`` take with ``--testbed``;
``down`` removes everything with the testbed's prefix, and only that.

Every name the testbed makes starts with its prefix (namespaces ``PREFIX-nI``, links ``PREFIX-...``, the state folder
``/run/stragglerlab/PREFIX``), so a crashed testbed's leftovers are found and removed by name. Its addresses are a /24
of 198.18.0.0/15 (the range set aside for benchmarking networks) that no interface or route of the host uses.

**(choice)** Links carry jumbo frames (:data:`MTU`): with 1500-byte frames, TCP's headers and acks took 5 % of a link
one way and 11 % of one sending both ways, as every exchange does; with 9000, 1 % and 2 % (docs/testbed.md). A ``tbf``
bucket lets a burst through at the veth's speed; the bucket is one frame (:data:`BURST`), the least that passes one, so
messages of about 100 kB and more see the shaped rate within 10 %. The queue behind each shaper holds a second of
traffic, so converging senders queue instead of losing packets (a lost packet costs TCP a retransmission timeout of at
least 200 ms; with a 64 kB queue, 7 senders into one node stalled up to 2.3 times the time its link needed).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from stragglerlab.analysis.errors import UserError

STATE = Path("/run/stragglerlab")
#: what a testbed file is called where none is named: the state folder's copy
FILE = "testbed.toml"
#: the environment variable through which a command hands its testbed to every launch it makes (and its ranks)
VARIABLE = "STRAGGLERLAB_TESTBED"
#: the links' frames: jumbo, as cluster networks use (module doc)
MTU = 9000
#: bytes of each shaper's bucket: one frame (module doc)
BURST = MTU + 216
#: the smallest message the shaped rate prices within about 10 %: below it a larger share passes in the bucket
SHAPED = 10 * BURST
#: seconds of traffic each shaper queues
QUEUE = 1.0
#: the ranges addresses are drawn from
RANGES = (ipaddress.IPv4Network("198.18.0.0/16"), ipaddress.IPv4Network("198.19.0.0/16"))
#: the nodes' interface inside their namespaces
IFACE = "eth0"
#: the capabilities a testbed needs (bit numbers in /proc/self/status), and what each is for
CAPABILITIES = {12: "CAP_NET_ADMIN (links, bridges, qdiscs)", 21: "CAP_SYS_ADMIN (namespaces)"}
#: units of ``tc`` rates, in bytes per second
UNITS = {
    "bit": 1 / 8,
    "kbit": 1e3 / 8,
    "mbit": 1e6 / 8,
    "gbit": 1e9 / 8,
    "tbit": 1e12 / 8,
    "bps": 1.0,
    "kbps": 1e3,
    "mbps": 1e6,
    "gbps": 1e9,
    "tbps": 1e12,
}
PREFIX_PATTERN = re.compile(r"[a-z][a-z0-9]{0,5}")
#: share of the cores the links may keep busy in the TCP path at full rate (the ranks need the rest)
CPU_SHARE = 0.5


def parse_rate(text: str, what: str = "--link") -> float:
    """Bytes per second of a rate as ``tc`` spells it (``50mbit``, ``1gbit``, ``800kbps``); one-line errors."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]+)\s*", text.lower())
    if not match or match.group(2) not in UNITS:
        raise UserError(f"{what} {text}: not a rate as tc spells it (a number and one of {', '.join(UNITS)})")
    rate = float(match.group(1)) * UNITS[match.group(2)]
    if not 1e3 <= rate <= 1e11:
        raise UserError(f"{what} {text}: must lie between 8kbit and 800gbit")
    return rate


@dataclass(frozen=True)
class Node:
    name: str  # its namespaces' name and its host name
    address: str
    rack: int


@dataclass(frozen=True)
class Testbed:
    """What ``up`` built (module doc)."""

    prefix: str
    nodes: tuple[Node, ...]
    link: str  # as given, tc's spelling
    rate: float  # bytes per second each way of every node's link
    racks: int
    uplink: str  # "" without racks
    uplink_rate: float  # bytes per second each way of every rack's uplink; 0 without racks
    subnet: str
    host_address: str  # this machine's address on the switch (what the launcher listens on)
    switch: str  # the bridge this machine's address is on
    ranks_per_node: int
    tcp_cpu: float  # seconds of CPU a byte costs its sender and receiver through the shaped TCP path (0: not measured)

    @property
    def state(self) -> Path:
        return STATE / self.prefix

    @property
    def launcher(self) -> Path:
        """The script hydra's ssh launcher runs to start a command on a node."""
        return self.state / "exec"

    def nodes_per_rack(self) -> int:
        return len(self.nodes) // self.racks

    def placement(self, nodes: int) -> list[Node]:
        """The nodes a job of ``nodes`` nodes runs on: spread evenly over the racks (the first of each rack), so that
        a smaller job keeps the fabric's two levels."""
        if nodes > len(self.nodes):
            raise UserError(
                f"the testbed {self.prefix} has {len(self.nodes)} nodes; the job needs {nodes} "
                f"(cluster.workers / cluster.workers_per_node): build a larger one with testbed up --nodes"
            )
        if self.racks == 1:
            return list(self.nodes[:nodes])
        if nodes % self.racks:
            raise UserError(
                f"a job of {nodes} nodes on the testbed {self.prefix}'s {self.racks} racks: give it a multiple of "
                f"{self.racks} nodes, so that every rack holds as many"
            )
        per = nodes // self.racks
        return [n for rack in range(self.racks) for n in [m for m in self.nodes if m.rack == rack][:per]]

    def describe(self) -> dict[str, object]:
        """What a run folder's ``meta.json`` records of the testbed it ran on."""
        return {k: v for k, v in asdict(self).items() if k != "nodes"} | {
            "nodes": [asdict(n) for n in self.nodes],
        }


def to_toml(tb: Testbed) -> str:
    lines = ["# an emulated cluster: stragglerlab testbed status|probe|down FILE", ""]
    for key, value in asdict(tb).items():
        if key != "nodes":
            lines.append(f"{key} = {json.dumps(value)}")
    for node in tb.nodes:
        lines += ["", "[[nodes]]", *(f"{k} = {json.dumps(v)}" for k, v in asdict(node).items())]
    return "\n".join(lines) + "\n"


def load(path: Path) -> Testbed:
    """The testbed a file describes; a one-line error for a file that is not one."""
    try:
        data = tomllib.loads(path.read_text())
        nodes = tuple(Node(str(n["name"]), str(n["address"]), int(n["rack"])) for n in data.pop("nodes"))
        fields = {k: data[k] for k in Testbed.__dataclass_fields__ if k != "nodes"}
        return Testbed(nodes=nodes, **fields)
    except FileNotFoundError:
        raise UserError(f"{path}: no such testbed file (stragglerlab testbed up writes one)") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read the testbed file ({err})") from None
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as err:
        raise UserError(f"{path}: not a testbed file ({type(err).__name__}: {err})") from None


def default_file(prefix: str = "sl") -> Path:
    return STATE / prefix / FILE


def active() -> Testbed | None:
    """The testbed this process's launches run across (named by :data:`VARIABLE`), if any."""
    path = os.environ.get(VARIABLE)
    return load(Path(path)) if path else None


def use(path: Path) -> Testbed:
    """Make ``path``'s testbed the one every later launch of this process (and of its children) runs across, after
    checking that it stands."""
    tb = load(path)
    missing = [n.name for n in tb.nodes if not (Path("/run/netns") / n.name).exists()]
    if missing or not tb.launcher.exists():
        raise UserError(
            f"{path}: the testbed {tb.prefix} is not up (no {', '.join(missing) or tb.launcher}); "
            "stragglerlab testbed up builds it"
        )
    os.environ[VARIABLE] = str(path.resolve())
    return tb


def layout(tb: Testbed, ranks: int, per_node: int) -> dict[str, int]:
    """The scenario keys that place a job of ``ranks`` ranks, ``per_node`` to a node, as :meth:`Testbed.placement`
    does: its racks' nodes (``cluster.nodes_per_rack``; 0 where the testbed has one switch)."""
    nodes = -(-ranks // per_node)
    return {"cluster.nodes_per_rack": nodes // tb.racks if tb.racks > 1 and nodes >= tb.racks else 0}


def launcher_options(tb: Testbed, ranks: int, per_node: int, nodes: Sequence[Node] | None = None) -> list[str]:
    """hydra's options that start ``ranks`` ranks across the testbed, ``per_node`` to a node (rank r on the
    (r // per_node)-th node of ``nodes``, by default the placement of :meth:`Testbed.placement`), sending between
    nodes over TCP (MPICH's OFI netmod with its tcp provider; without them UCX finds the shared memory that the
    namespaces share)."""
    if per_node > tb.ranks_per_node:
        raise UserError(
            f"cluster.workers_per_node = {per_node}: the testbed {tb.prefix} was built for at most "
            f"{tb.ranks_per_node} ranks a node (testbed up --ranks-per-node)"
        )
    if ranks % per_node:
        raise UserError(f"{ranks} ranks do not fill nodes of {per_node} (cluster.workers_per_node)")
    chosen = tb.placement(ranks // per_node) if nodes is None else nodes
    hosts = ",".join(f"{n.name}:{per_node}" for n in chosen)
    env = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": IFACE, "GLOO_SOCKET_IFNAME": IFACE}
    return [
        "-launcher", "ssh", "-launcher-exec", str(tb.launcher), "-iface", tb.switch, "-hosts", hosts,
        *(x for k, v in env.items() for x in ("-genv", k, v)),
    ]  # fmt: skip


# --- building and removing ------------------------------------------------------------------------------------------


def _run(*argv: str, what: str = "") -> str:
    """Run one system command; its failure is a one-line error naming what it was for."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise UserError(f"testbed: needs {argv[0]} (iproute2 / util-linux), which is not installed") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise UserError(f"testbed: {what or ' '.join(argv)} failed: {said[-1] if said else done.returncode}")
    return done.stdout


def _quiet(*argv: str) -> None:
    subprocess.run(argv, capture_output=True, check=False)


def check_privileges() -> None:
    """A one-line error naming the capabilities this process lacks."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        raise UserError("testbed: needs Linux (/proc/self/status cannot be read)") from None
    effective = int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff")), 16)
    missing = [name for bit, name in CAPABILITIES.items() if not effective >> bit & 1]
    if missing:
        raise UserError(f"testbed: needs {' and '.join(missing)}: run it as root")
    for tool in ("ip", "tc", "nsenter", "unshare", "setpriv", "mount", "umount"):
        if shutil.which(tool) is None:
            raise UserError(f"testbed: needs {tool} (iproute2 / util-linux), which is not on PATH")


def check_kernel(prefix: str) -> None:
    """Make and remove a veth pair, a bridge and a tbf qdisc: a one-line error naming what the kernel lacks."""
    veth, br = f"{prefix}-k0", f"{prefix}-kb"
    try:
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", f"{prefix}-k1", what="a veth pair (veth)")
        _run("ip", "link", "add", br, "type", "bridge", what="a bridge (bridge)")
        _run("tc", "qdisc", "add", "dev", veth, "root", "tbf", "rate", "1mbit", "burst", str(BURST), "latency", "1s",
             what="a tbf qdisc (sch_tbf)")  # fmt: skip
    finally:
        _quiet("ip", "link", "del", veth)
        _quiet("ip", "link", "del", br)


def leftovers(prefix: str) -> list[str]:
    """What stands of a testbed with ``prefix``: its namespaces, links and state folder."""
    found = [f"namespace {n}" for n in _netns() if n.startswith(f"{prefix}-n")]
    found += [f"link {name}" for name in _links() if name.startswith(f"{prefix}-")]
    if (STATE / prefix).exists():
        found.append(f"folder {STATE / prefix}")
    return found


def _netns() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _links() -> list[str]:
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=False).stdout
    return [link["ifname"] for link in json.loads(out or "[]")]


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 of :data:`RANGES` that no address or route of this machine overlaps."""
    taken: list[ipaddress.IPv4Network] = []
    for argv in (["ip", "-j", "addr", "show"], ["ip", "-j", "route", "show", "table", "all"]):
        out = json.loads(subprocess.run(argv, capture_output=True, text=True, check=False).stdout or "[]")
        for entry in out:
            for info in entry.get("addr_info", []):
                if info.get("family") == "inet":
                    taken.append(ipaddress.IPv4Network(f"{info['local']}/{info['prefixlen']}", strict=False))
            dst = entry.get("dst", "")
            if dst and dst != "default" and ":" not in dst:
                taken.append(ipaddress.IPv4Network(dst if "/" in dst else f"{dst}/32", strict=False))
    for candidate in (s for r in RANGES for s in r.subnets(new_prefix=24)):
        if not any(candidate.overlaps(t) for t in taken):
            return candidate
    raise UserError("testbed: every /24 of 198.18.0.0/15 is in use on this machine")


def _shape(dev: str, rate: float, netns: str | None = None) -> None:
    """Shape the egress of ``dev`` (in ``netns``) to ``rate`` bytes per second (module doc)."""
    where = ["-n", netns] if netns else []
    limit = max(int(rate * QUEUE), 16 * BURST)
    _run("tc", *where, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{int(rate * 8)}bit", "burst", str(BURST),
         "limit", str(limit), what=f"shaping {dev}")  # fmt: skip


def _veth(outer: str, inner: str) -> None:
    _run("ip", "link", "add", outer, "mtu", str(MTU), "type", "veth", "peer", "name", inner, "mtu", str(MTU),
         what=f"the veth pair {outer}")  # fmt: skip


def _bridge(name: str) -> None:
    _run("ip", "link", "add", name, "mtu", str(MTU), "type", "bridge", what=f"the bridge {name}")
    _run("ip", "link", "set", name, "up")


def launcher_script(state: Path) -> str:
    """hydra's ssh launcher calls this as ``ssh [options] HOST COMMAND``: run COMMAND in HOST's namespaces, killed
    when the launcher dies (so a killed job leaves nothing behind on the nodes)."""
    return (
        "#!/bin/sh\n"
        "# hydra's launcher: [options] NODE COMMAND; runs COMMAND on the emulated node NODE\n"
        'while [ "${1#-}" != "$1" ]; do shift; done\n'
        'node=$1; shift\n'
        f'exec nsenter --net=/run/netns/"$node" --uts={state}/uts/"$node" '
        'setpriv --pdeathsig KILL -- sh -c "exec $*"\n'
    )  # fmt: skip


def up(
    nodes: int,
    link: str,
    racks: int = 1,
    uplink: str = "",
    prefix: str = "sl",
    ranks_per_node: int = 1,
    force: bool = False,
    progress: bool = True,
    tcp_cpu: Callable[[Testbed], float] | None = None,
) -> Testbed:
    """Build a testbed (module doc) and write its file into the state folder; on any failure, remove what was made.
    ``tcp_cpu`` measures the CPU a byte costs through its links (:func:`.netprobe.tcp_cpu`), which the links' rate is
    checked against; None: not measured."""
    if not PREFIX_PATTERN.fullmatch(prefix):
        raise UserError(f"--prefix {prefix}: a lower-case letter, then up to 5 letters or digits")
    if not 1 <= nodes <= 250:
        raise UserError(f"--nodes {nodes}: between 1 and 250")
    if racks < 1 or nodes % racks:
        raise UserError(f"--racks {racks}: must divide --nodes {nodes} (every rack holds as many nodes)")
    if (racks > 1) != bool(uplink):
        raise UserError("--uplink RATE goes with --racks R > 1 (the rate of each rack's uplink)")
    if ranks_per_node < 1:
        raise UserError(f"--ranks-per-node {ranks_per_node}: at least 1")
    rate = parse_rate(link)
    uplink_rate = parse_rate(uplink, "--uplink") if uplink else 0.0
    check_privileges()
    stale = leftovers(prefix)
    if stale:
        raise UserError(
            f"testbed: a testbed with the prefix {prefix} stands already, or a crashed one left "
            f"{', '.join(stale[:3])}{' ...' if len(stale) > 3 else ''}: stragglerlab testbed down --prefix {prefix} "
            "removes it"
        )
    check_kernel(prefix)
    subnet = free_subnet()
    hosts = list(subnet.hosts())
    names = [f"{prefix}-n{i}" for i in range(nodes)]
    per_rack = nodes // racks
    switch = f"{prefix}-sw"
    tb = Testbed(
        prefix=prefix,
        nodes=tuple(Node(name, str(hosts[i + 9]), i // per_rack) for i, name in enumerate(names)),
        link=link,
        rate=rate,
        racks=racks,
        uplink=uplink,
        uplink_rate=uplink_rate,
        subnet=str(subnet),
        host_address=str(hosts[0]),
        switch=switch,
        ranks_per_node=ranks_per_node,
        tcp_cpu=0.0,
    )
    try:
        _build(tb, progress)
        _shape_all(tb)
        if tcp_cpu is not None:
            tb = _checked_rate(tb, force, tcp_cpu)
        (tb.state / FILE).write_text(to_toml(tb))
    except BaseException:
        down(prefix)
        raise
    return tb


def _build(tb: Testbed, progress: bool) -> None:
    from tqdm import tqdm

    (tb.state / "uts").mkdir(parents=True)
    tb.launcher.write_text(launcher_script(tb.state))
    tb.launcher.chmod(0o755)
    _bridge(tb.switch)
    _run("ip", "addr", "add", f"{tb.host_address}/{ipaddress.ip_network(tb.subnet).prefixlen}", "dev", tb.switch)
    rack_bridge = {0: tb.switch}
    if tb.racks > 1:
        for rack in range(tb.racks):
            rack_bridge[rack] = f"{tb.prefix}-r{rack}"
            _bridge(rack_bridge[rack])
            down_end, up_end = f"{tb.prefix}-u{rack}", f"{tb.prefix}-c{rack}"
            _veth(down_end, up_end)
            _run("ip", "link", "set", down_end, "master", rack_bridge[rack], "up")
            _run("ip", "link", "set", up_end, "master", tb.switch, "up")
    bar = tqdm(tb.nodes, desc="testbed up", unit="node", disable=not progress, leave=False)
    for i, node in enumerate(bar):
        outer, inner = f"{tb.prefix}-v{i}", f"{tb.prefix}-p{i}"
        _run("ip", "netns", "add", node.name, what=f"the namespace {node.name}")
        uts = tb.state / "uts" / node.name
        uts.touch()
        _run("unshare", f"--uts={uts}", "hostname", node.name, what=f"the host name of {node.name}")
        _veth(outer, inner)
        _run("ip", "link", "set", inner, "netns", node.name)
        _run("ip", "link", "set", outer, "master", rack_bridge[node.rack if tb.racks > 1 else 0], "up")
        _run("ip", "-n", node.name, "link", "set", "lo", "up")
        _run("ip", "-n", node.name, "link", "set", inner, "name", IFACE)
        _run("ip", "-n", node.name, "addr", "add", f"{node.address}/24", "dev", IFACE)
        _run("ip", "-n", node.name, "link", "set", IFACE, "up")


def _shape_all(tb: Testbed) -> None:
    """Shape every node's link both ways, and every rack's uplink."""
    for i, node in enumerate(tb.nodes):
        _shape(f"{tb.prefix}-v{i}", tb.rate)  # ejection: the switch's port towards the node
        _shape(IFACE, tb.rate, node.name)  # injection
    for rack in range(tb.racks if tb.racks > 1 else 0):
        _shape(f"{tb.prefix}-u{rack}", tb.uplink_rate)  # into the rack
        _shape(f"{tb.prefix}-c{rack}", tb.uplink_rate)  # out of the rack


def _checked_rate(tb: Testbed, force: bool, tcp_cpu: Callable[[Testbed], float]) -> Testbed:
    """``tb`` with the CPU a byte costs through its links' TCP path measured (``tcp_cpu``); a one-line error when
    every node sending at its link's rate would keep more than :data:`CPU_SHARE` of the cores busy in that path
    (unless ``force``): the cores, not the links, would set the pace, and the ranks need CPU of their own."""
    if len(tb.nodes) < 2:
        return tb
    cost = tcp_cpu(tb)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    busy = len(tb.nodes) * tb.rate * cost
    if busy > CPU_SHARE * cores and not force:
        most = CPU_SHARE * cores / (cost * len(tb.nodes))
        raise UserError(
            f"testbed: {len(tb.nodes)} nodes sending at {tb.link} would keep {busy:.2g} of this machine's {cores} "
            f"cores busy in the TCP path alone ({cost * 1e9:.0f} ns of CPU a byte, measured), more than "
            f"{CPU_SHARE:.0%}: the cores, not the links, set the pace; keep --link under about {rate_text(most)}, "
            "use fewer nodes, or give --force"
        )
    return Testbed(**{**tb.__dict__, "tcp_cpu": cost})


def processes(prefix: str) -> list[int]:
    """The processes running inside a testbed's namespaces."""
    pids: list[int] = []
    for ns in _netns():
        if ns.startswith(f"{prefix}-n"):
            out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=False).stdout
            pids += [int(p) for p in out.split() if p.isdigit()]
    return pids


def stop_processes(prefix: str) -> int:
    """Kill every process inside the testbed's namespaces; how many there were."""
    pids = processes(prefix)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def down(prefix: str) -> list[str]:
    """Remove everything a testbed with ``prefix`` made (its processes first); what was removed."""
    removed = leftovers(prefix)
    stop_processes(prefix)
    for ns in _netns():
        if ns.startswith(f"{prefix}-n"):
            _quiet("ip", "netns", "del", ns)
    for name in _links():
        if name.startswith(f"{prefix}-"):
            _quiet("ip", "link", "del", name)
    state = STATE / prefix
    for uts in sorted((state / "uts").glob("*")) if (state / "uts").exists() else []:
        _quiet("umount", str(uts))
    shutil.rmtree(state, ignore_errors=True)
    return removed


def standing(tb: Testbed) -> Iterator[tuple[str, bool]]:
    """Each part of ``tb`` and whether it stands."""
    names = set(_netns())
    links = set(_links())
    yield tb.switch, tb.switch in links
    for rack in range(tb.racks if tb.racks > 1 else 0):
        yield f"{tb.prefix}-r{rack}", f"{tb.prefix}-r{rack}" in links
    for i, node in enumerate(tb.nodes):
        yield node.name, node.name in names and f"{tb.prefix}-v{i}" in links


def rate_text(rate: float) -> str:
    """A rate in bytes per second as megabits, as ``tc`` shows it."""
    bits = rate * 8
    return f"{bits / 1e9:.3g}gbit" if bits >= 1e9 else f"{bits / 1e6:.3g}mbit"


def summary(tb: Testbed) -> list[str]:
    """Lines ``status`` prints."""
    per = tb.nodes_per_rack()
    racks = f", {tb.racks} racks of {per} (uplinks {tb.uplink} each way)" if tb.racks > 1 else ""
    lines = [
        f"testbed {tb.prefix}: {len(tb.nodes)} nodes on {tb.subnet}{racks}, every node's link {tb.link} each way "
        f"({tb.rate / 1e6:.3g} MB/s), up to {tb.ranks_per_node} rank(s) a node; this machine is {tb.host_address} "
        f"on {tb.switch}",
    ]
    if tb.tcp_cpu:
        cores = len(tb.nodes) * tb.rate * tb.tcp_cpu
        lines.append(
            f"TCP path: {tb.tcp_cpu * 1e9:.0f} ns of CPU a byte (measured when it was built): {cores:.2g} cores busy "
            "with every node sending at its rate"
        )
    return lines
