"""Where the toolkit writes: folders and files made with one-line errors, default names that never collide, and
the rule that nothing a user made is replaced without ``--force``.

A command's *default* output (``runs/<name>``) that exists already becomes ``runs/<name>-2``, ``-3``, ... (the
command says which it used); an output the user *named* that exists is an error unless ``--force`` is given. The
folders an output needs are made, for every output alike: run folders, sweeps, figures, fragments, models. Run
folders add their own rules on top (:mod:`.runfolder`: a real run is never replaced).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from stragglerlab.analysis.errors import UserError


def output_path(text: str) -> Path:
    """``-o PATH`` as a command line gives it (argparse's ``type``): an empty name is refused, not taken as the current
    folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty name; name a file or folder")
    return Path(text)


def unused_name(path: Path) -> Path:
    """``path`` if nothing is there, else the first of ``path-2``, ``path-3``, ... that is free."""
    candidate, n = path, 1
    while candidate.exists() or candidate.is_symlink():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def make_folder(path: Path) -> Path:
    """Create the folder ``path`` (and its parents) unless it is one already; a one-line error when it cannot be."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{path}: exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"{path}: cannot create the folder ({err.strerror})") from None
    return path


def check_new_file(path: Path, force: bool) -> Path:
    """Check, before any work is done, that the file ``path`` can be written: its folder exists (it is made when
    missing) and takes a file (a temporary one is made and removed), and it is not a folder, nor an existing file
    unless ``force``."""
    folder = path.parent
    if path.is_dir():
        raise UserError(f"{path}: is a folder; name a file")
    if path.exists() and not force:
        raise UserError(f"{path}: exists; give --force to replace it")
    make_folder(folder)
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".stragglerlab-probe-"):
            pass
    except OSError as err:
        raise UserError(f"{path}: cannot write into {folder} ({err.strerror})") from None
    return path


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary name, so an interrupted write leaves no half file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as err:
        raise UserError(f"{path}: cannot write ({err.strerror})") from None
    return path
