"""The build backend: setuptools' own, except that an editable install (``pip install -e .``) does not print
setuptools' notice that it is one (``Editable installation. Please be careful with folders in your working
directory...``), which setuptools prints on every editable install of a package whose folders are mapped to other
names (``package-dir``), as this one's planes are. Every other warning of setuptools still shows."""

from __future__ import annotations

import warnings

from setuptools import build_meta
from setuptools.build_meta import (
    build_sdist,
    build_wheel,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Editable installation\.")
        return build_meta.build_editable(wheel_directory, config_settings, metadata_directory)
