"""Failure detection: a rank that dies makes the others stop within a bounded time, naming it, instead of hanging.

MPI gives no portable way to learn that a peer died (a rank blocked in a collective or in the native core's wait
simply waits), so every rank runs a watchdog thread beside the training loop. It rewrites its own heartbeat file in
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
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

EXIT_LOST = 3
LIVE = ".live"  # the heartbeat folder inside the run folder


class Watchdog:
    """Heartbeats of rank ``rank`` among ``peers`` (rank -> (host, pid)); started by :meth:`start`."""

    def __init__(self, folder: Path, rank: int, peers: dict[int, tuple[str, int]], host: str,
                 on_loss: Callable[[str], None], period: float = 0.5, timeout: float = 10.0):
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

    def lost(self) -> str | None:
        """A message naming a lost peer, or None when every peer is alive or done."""
        now = time.time()
        for peer, (host, pid) in self.peers.items():
            if peer == self.rank or peer in self._done:
                continue
            if host == self.host and not _alive(pid):
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
                finally:
                    sys.stderr.flush()
                    os._exit(EXIT_LOST)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
