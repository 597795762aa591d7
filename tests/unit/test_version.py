"""The version the package reports is the one it is published as."""

from __future__ import annotations

import tomllib
from pathlib import Path

import tickwork
from tickwork._version import VERSION


def test_the_package_version_is_pyprojects() -> None:
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert tickwork.__version__ == VERSION == pyproject["project"]["version"]
