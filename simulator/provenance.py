"""What a run folder's ``meta.json`` says about a run, built in one place for simulated and real runs alike from the
run's plan (:mod:`.plan`): the resolved scenario, its seed, the cost model's figures, the algorithm's plot style and
when it applies a gradient (so figures and metrics need no list of algorithms), the versions of what ran it, the
command line, the git commit when the package runs from a checkout, the host and the start time. Real runs add their
backend, hosts and ranks; the simulator, its engine."""

from __future__ import annotations

import functools
import platform
import socket
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from stragglerlab.simulator import algorithms
from stragglerlab.simulator.network import message_bytes
from stragglerlab.simulator.plan import Plan
from stragglerlab.simulator.scenario import to_dict

#: packages whose versions every run records (others, such as torch or mpi4py, when they are loaded)
PACKAGES = ("stragglerlab", "numpy", "pandas", "pyarrow", "simpy", "numba")
LOADED = ("torch", "mpi4py")


def versions() -> dict[str, str]:
    """Python's version and those of :data:`PACKAGES`, and of :data:`LOADED` when this process imported them."""
    out = {"python": platform.python_version()}
    for package in PACKAGES + tuple(p for p in LOADED if p in sys.modules):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "not installed"
    return out


@functools.cache
def git_state() -> dict[str, Any] | None:
    """``{"commit": ..., "dirty": ...}`` of the git checkout the package runs from (an editable install), whether
    tracked files differ from that commit; None when it is not in a checkout or git cannot say."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        changes = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(changes.strip())}


def style(plan: Plan) -> dict[str, Any]:
    """The plot style of ``plan``'s algorithm: its colour, marker and place in legends."""
    record = plan.record
    return {"colour": record.style.colour, "marker": record.style.marker, "order": algorithms.order(record.name)}


def applied(plan: Plan) -> str:
    """When ``plan``'s algorithm applies a worker's gradient (what applied throughput counts): ``release``, to the
    worker's own replica when the worker is released (every gradient); ``round``, to the replicas or the server's
    model with the round or update that carries it (a gradient no round carries is never applied)."""
    return "release" if plan.record.own_step else "round"


def meta(plan: Plan, source: str, **extra: Any) -> dict[str, Any]:
    """The ``meta.json`` of a run of ``plan``'s scenario (``source``: ``sim`` or ``real``) starting now; ``extra``
    keys are added (``versions`` in it extends the recorded versions). ``command`` is the command line as run
    (``sys.argv``); ``git`` is :func:`git_state`, absent outside a checkout."""
    git = git_state()
    scenario = plan.scenario
    record = {
        "source": source,
        "scenario": to_dict(scenario),
        "seed": scenario.seed,
        "network": plan.costs.describe(scenario.workers, message_bytes(scenario)),
        "style": style(plan),
        "applied": applied(plan),
        "versions": {**versions(), **extra.pop("versions", {})},
        "command": list(sys.argv),
        **({"git": git} if git is not None else {}),
        "host": socket.gethostname(),
        "start_time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    return {**record, **extra}
