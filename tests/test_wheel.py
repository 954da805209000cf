"""The built wheel works for someone who installs guided instead of working in the checkout: it is built,
installed into a fresh virtual environment outside the checkout, and ``guided generate`` and
``guided demo`` run from there (every sub-package, the model code and the demo schemas inside it)."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(argv, cwd, timeout=600, env=None):
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert out.returncode == 0, f"{argv}: {out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with the wheel installed; the dependencies are this environment's (a path entry,
    whose own .pth files, the editable install's among them, are not read)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"  # a copy of the tracked files: the build writes nothing into the checkout
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, target)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp), str(source)],
         cwd=tmp)  # fmt: skip
    (wheel,) = tmp.glob("guided-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
         cwd=tmp)  # fmt: skip
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp).stdout.strip())
    deps = [p for p in {sysconfig.get_paths()["purelib"], *site.getsitepackages()} if Path(p).is_dir()]
    (purelib / "dependencies.pth").write_text("\n".join(deps) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return venv, tmp, env


def test_wheel_holds_every_package(installed):
    venv, tmp, env = installed
    code = ("import guided, guided.engine.models, guided.schema, guided.server, guided.bench, guided.builtin, "
            "guided.grammar.tokens, guided.grammar.automata, guided.grammar.frontends; "
            "from guided.demo import demo_schemas; print(guided.__file__); print(sorted(demo_schemas()))")  # fmt: skip
    out = _run([str(venv / "bin" / "python"), "-c", code], tmp, env=env).stdout.splitlines()
    assert Path(out[0]).is_relative_to(venv) and not Path(out[0]).is_relative_to(REPO)
    assert out[1] == "['invoice', 'person', 'weather_tool']"


def test_installed_cli_generates_and_runs_the_demo(installed):
    venv, tmp, env = installed
    guided = str(venv / "bin" / "guided")
    out = _run([guided, "generate", "Phone:", "--regex", r"\(\d{3}\) \d{3}-\d{4}", "--max-tokens", "30"], tmp, env=env)
    assert out.stdout.splitlines()[0].startswith("(") and "finish_reason=stop" in out.stderr
    out = _run([guided, "demo"], tmp, env=env)
    assert "embedded default model" in out.stdout
