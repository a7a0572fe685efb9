"""Each rank's rows of a real run, written as its own numbered parts inside the run folder's tables.

A real run's folder has the simulator's layout (:mod:`~stragglerlab.analysis.runfolder`): while the run goes every
table is a directory of parts, which :func:`~stragglerlab.analysis.runfolder.load_run` reads whatever wrote them.
Every rank writes its own parts there (``part-r<rank>-<n>.parquet``), so no rank waits on another to get its rows to
disk and a crash of any rank leaves every other rank's rows readable; rank 0's
:class:`~stragglerlab.analysis.runfolder.RunWriter` merges them all when the run finishes. A part is written to a
hidden name and renamed into place, so a reader never sees half a part. The run folder must be on a file system every
rank sees (one machine, or a cluster's shared file system).
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq

from stragglerlab.analysis.runfolder import TABLES, rows_table


class RankParts:
    """Buffers this rank's rows and writes them as parts on :meth:`flush` (every ``flush_seconds``: :meth:`due`)."""

    def __init__(self, folder: Path, rank: int, flush_seconds: float = 2.0):
        self.folder, self.rank, self.flush_seconds = Path(folder), rank, flush_seconds
        self._rows: dict[str, list[tuple]] = {t: [] for t in TABLES}
        self._count = 0
        self._last = time.monotonic()

    def add(self, table: str, row: tuple) -> None:
        """One row, as :func:`~stragglerlab.analysis.runfolder.columns` reads rows."""
        self._rows[table].append(row)

    def due(self) -> bool:
        """Whether ``flush_seconds`` passed since the last flush (cheap to ask every iteration)."""
        return time.monotonic() - self._last >= self.flush_seconds

    def flush(self) -> None:
        for table, rows in self._rows.items():
            if not rows:
                continue
            data = rows_table(table, rows)
            directory = self.folder / f"{table}.parquet"
            name = f"part-r{self.rank:05d}-{self._count:06d}.parquet"
            pq.write_table(data, directory / f".{name}.tmp")
            (directory / f".{name}.tmp").rename(directory / name)
            rows.clear()
        self._count += 1
        self._last = time.monotonic()
