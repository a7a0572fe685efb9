"""The native partial-collective core: C sources shipped as package data, compiled by ``stragglerlab.realrun.build``.

Nothing here is Python code to import beyond the paths below; see ``include/pcoll.h`` for the C API.
"""

from pathlib import Path

#: Folder holding ``include/``, ``src/`` and ``tests/``.
SOURCE_DIR = Path(__file__).resolve().parent
#: The one public header.
HEADER = SOURCE_DIR / "include" / "pcoll.h"

__all__ = ["HEADER", "SOURCE_DIR"]
