"""benchmarks/compile_ab.py lays a git archive out as the installed package: its folder map must be
pyproject's package-dir, or a version it measures would import the checkout's code instead."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent


def test_compile_ab_layout_is_the_package_dir():
    spec = importlib.util.spec_from_file_location("compile_ab", REPO / "benchmarks" / "compile_ab.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    package_dir = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    expected = {folder: package.replace(".", "/") for package, folder in package_dir.items()}
    assert mod.LAYOUT == expected
