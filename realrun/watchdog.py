"""Failure detection: a rank that dies makes the others stop within a bounded time, naming it, instead of hanging.

Two watchers, both reading the heartbeat files of the run folder's ``.live/``:

- :func:`watch_job`, in ``stragglerlab run --np``'s launcher process: it notes the first rank whose process dies
  before it is done, and when the job ends reports that rank in one line and in ``meta.json`` (``error``,
  ``finished = false``). This is the report that always comes: MPICH itself takes every surviving rank down within
  milliseconds once its progress engine sees a peer's connection close (measured with MPICH 5.0: fault tolerance
  mode, ``MPIR_CVAR_ENABLE_FT``, asserts instead), often before any rank could say anything.
- :class:`Watchdog`, a thread in every rank, for the failures MPI does not notice: a rank that hangs, stops or sits
  on another host whose death MPI learns late.

MPI gives no portable way to learn that a peer died (a rank blocked in a collective or in the native core's wait
may simply wait), so every rank runs a watchdog thread beside the training loop. It rewrites its own heartbeat file in
the run folder's ``.live/`` every ``period`` seconds and reads the others': a peer is lost when its process on this
host is gone, or when its heartbeat is older than ``timeout`` seconds (another host, or a hung process). A rank that
finishes marks its file done, and is not waited for any more. On a loss the watchdog calls ``on_loss(message)``
(which flushes what this rank has and records the failure) and ends the process with status 3: the loop may be
blocked inside MPI, where nothing else could stop it. The heartbeat thread runs while the loop computes or sleeps
(torch and the native core release the GIL), so a straggler's long delay is never mistaken for a death.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path

EXIT_LOST = 3
LIVE = ".live"  # the heartbeat folder inside the run folder


class Watchdog:
    """Heartbeats of rank ``rank`` among ``peers`` (rank -> (host, pid)); started by :meth:`start`."""

    def __init__(
        self,
        folder: Path,
        rank: int,
        peers: dict[int, tuple[str, int]],
        host: str,
        on_loss: Callable[[str], None],
        period: float = 0.5,
        timeout: float = 10.0,
    ):
        self.dir = Path(folder) / LIVE
        self.rank, self.peers, self.host = rank, peers, host
        self.on_loss, self.period, self.timeout = on_loss, period, timeout
        self._stop = threading.Event()
        self._done: set[int] = set()
        self._thread = threading.Thread(target=self._loop, name="stragglerlab-watchdog", daemon=True)

    def _file(self, rank: int) -> Path:
        return self.dir / f"rank-{rank:05d}.json"

    def _beat(self, state: str) -> None:
        tmp = self.dir / f".rank-{self.rank:05d}.tmp"
        tmp.write_text(json.dumps({"state": state, "t": time.time(), "pid": os.getpid(), "host": self.host}))
        tmp.rename(self._file(self.rank))

    def start(self) -> Watchdog:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._beat("running")
        self._started = time.time()
        self._thread.start()
        return self

    def finish(self) -> None:
        """This rank is done: stop watching and tell the others not to wait for its heartbeat."""
        self._stop.set()
        self._thread.join()
        self._beat("done")

    def clear(self, limit: float = 5.0) -> None:
        """Remove the heartbeat folder once every rank has marked itself done (rank 0, at the end of a run that
        finished), so a finished run folder holds no ``.live/``; a peer silent for ``limit`` seconds leaves it."""
        deadline = time.monotonic() + limit
        while any(self._state(peer)[0] != "done" for peer in self.peers):
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        shutil.rmtree(self.dir, ignore_errors=True)

    def lost(self) -> str | None:
        """A message naming a lost peer, or None when every peer is alive or done."""
        now = time.time()
        for peer, (host, pid) in self.peers.items():
            if peer == self.rank or peer in self._done:
                continue
            if host == self.host and not alive(pid):
                if self._state(peer)[0] == "done":
                    self._done.add(peer)
                    continue
                return f"rank {peer} (pid {pid} on {host}) died"
            state, beat = self._state(peer)
            if state == "done":
                self._done.add(peer)
            elif now - max(beat, self._started) > self.timeout:
                return f"rank {peer} (pid {pid} on {host}) sent no heartbeat for {self.timeout:g} s"
        return None

    def _state(self, peer: int) -> tuple[str, float]:
        try:
            record = json.loads(self._file(peer).read_text())
            return record["state"], float(record["t"])
        except (OSError, ValueError, KeyError):
            return "unknown", 0.0

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self._beat("running")
            message = self.lost()
            if message is not None:
                try:
                    self.on_loss(message)
                    self._beat("stopped")
                    self._let_rank0_record()
                finally:
                    sys.stderr.flush()
                    os._exit(EXIT_LOST)

    def _let_rank0_record(self, limit: float = 3.0) -> None:
        """Before exiting, give rank 0 a moment to record the failure in ``meta.json``: some launchers take the
        whole job down when one rank exits."""
        host, pid = self.peers.get(0, (None, 0))
        deadline = time.monotonic() + limit
        while self.rank != 0 and time.monotonic() < deadline:
            if self._state(0)[0] in ("stopped", "done") or (host == self.host and not alive(pid)):
                return
            time.sleep(0.05)


def _records(folder: Path) -> dict[int, dict]:
    """Every rank's last heartbeat record in ``folder/.live`` (none once rank 0 has removed the folder at the end of
    a finished run, which it may do while they are read)."""
    out: dict[int, dict] = {}
    try:
        paths = list((Path(folder) / LIVE).glob("rank-*.json"))
    except OSError:
        return out
    for path in paths:
        try:
            out[int(path.stem.split("-")[1])] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return out


def watch_job(
    proc: subprocess.Popen, folder: Path, hosts: Collection[str], period: float = 0.01, grace: float = 5.0
) -> str | None:
    """Wait for the launched job ``proc``; return a message naming the first of its ranks (on ``hosts``: this one, or
    the emulated nodes of a testbed, whose processes are this machine's) that died
    before it was done (or, when several were already gone at one look, all of them), or None. Records the message
    in the run's ``meta.json`` when the run did not finish.

    Processes are checked every ``period`` seconds (MPI takes the survivors down some tens of milliseconds after a
    death, so the first to go is the lost one); the heartbeat files, for the ranks' pids, every half second. When
    the survivors have stopped on a loss of their own finding (a hung rank) and the job is still there ``grace``
    seconds later, the ranks still running are killed: the launcher would otherwise wait for the hung one."""
    lost, since, records, read, stopped = None, time.time(), {}, 0.0, None
    while proc.poll() is None:
        time.sleep(period)
        if time.monotonic() - read > 0.5:
            records = {rank: r for rank, r in _records(folder).items() if r.get("host") in hosts and r["t"] >= since}
            read = time.monotonic()
            if stopped is None and any(r.get("state") == "stopped" for r in records.values()):
                stopped = time.monotonic()
        if stopped is not None and time.monotonic() - stopped > grace:
            for r in records.values():
                if r.get("state") == "running" and alive(r["pid"]):
                    os.kill(r["pid"], 9)
        if lost is None:
            running = {rank: r["pid"] for rank, r in sorted(records.items()) if r.get("state") == "running"}
            dead = [rank for rank, pid in running.items() if not alive(pid)]
            if dead:  # those that stopped on their own said so in their heartbeats
                now = _records(folder)
                dead = [rank for rank in dead if now.get(rank, {}).get("state") == "running"]
            named = [f"rank {rank} (pid {running[rank]} on {records[rank]['host']})" for rank in dead]
            if len(named) == 1:
                lost = f"{named[0]} died"
            elif named:  # a loaded machine can keep this loop off a core until MPI has taken the survivors down
                lost = f"one of {', '.join(named)} died first (all were gone when looked at)"
    meta_path = Path(folder) / "meta.json"
    if lost is not None and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if not meta.get("finished"):
            meta.setdefault("error", lost)
            tmp = meta_path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
            tmp.rename(meta_path)
    return lost


def alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (a zombie, dead but not yet reaped by its launcher, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
