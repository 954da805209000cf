"""numba's on-disk cache follows the compiled code a function takes from another module: after that
module changes, the caller is compiled again instead of loading its old machine code."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from guided.grammar import numba_cache
from guided.grammar.automata import dfa_rows

RUN = textwrap.dedent(
    """
    import sys
    from guided.grammar import numba_cache
    numba_cache._ROOT = sys.argv[1]  # the temporary package stands for this package's files
    sys.path.insert(0, sys.argv[1])
    from pkg import caller
    print(caller.g(1), sum(caller.g.stats.cache_hits.values()))
    """
)


def _call(root: Path, cache: Path | None = None) -> tuple[str, int]:
    """``caller.g(1)`` in a fresh process over the package at ``root``, and its cache hits."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["GUIDED_CACHE"] = str(cache or root / "cache")
    out = subprocess.run([sys.executable, "-c", RUN, str(root)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    value, hits = out.stdout.split()
    return value, int(hits)


def _run(root: Path, cache: Path | None = None) -> str:
    return _call(root, cache)[0]


def _hits(root: Path, cache: Path) -> int:
    return _call(root, cache)[1]


def test_a_caller_is_compiled_again_when_the_module_it_inlines_changes(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    callee = "import numba\n\n@numba.njit(cache=True)\ndef f(x):\n    return x + {}\n"
    (pkg / "callee.py").write_text(callee.format(10))
    (pkg / "caller.py").write_text(
        "import numba\nfrom pkg import callee\n\n@numba.njit(cache=True)\ndef g(x):\n    return callee.f(x) * 2\n"
    )
    assert _run(tmp_path) == "22"
    assert list((tmp_path / "cache" / "numba").glob("caller-*/caller.g-*.nbc"))  # cached on disk, user-wide
    assert _run(tmp_path) == "22"
    (pkg / "callee.py").write_text(callee.format(20))  # the caller's own file is unchanged
    assert _run(tmp_path) == "42"  # numba alone loads the caller's cached code: 22


def test_the_row_builder_is_stamped_with_the_derivatives_it_inlines():
    deps = numba_cache.dependencies(dfa_rows.__name__)
    assert any(p.endswith("expr_core.py") for p in deps)
    locator = dfa_rows.rows._cache._impl.locator
    assert type(locator).__name__.startswith("Guided") and locator._deps == deps


def test_a_copy_of_the_sources_elsewhere_loads_the_machine_code_compiled_for_the_first(tmp_path):
    """An installed wheel or a second checkout holds the same files at another path: their caches are
    placed by contents, so the copy loads what the first compiled, and an edited copy does not."""
    import shutil

    first = tmp_path / "first"
    (first / "pkg").mkdir(parents=True)
    (first / "pkg" / "__init__.py").write_text("")
    (first / "pkg" / "callee.py").write_text("import numba\n\n@numba.njit(cache=True)\ndef f(x):\n    return x + 10\n")
    (first / "pkg" / "caller.py").write_text(
        "import numba\nfrom pkg import callee\n\n@numba.njit(cache=True)\ndef g(x):\n    return callee.f(x) * 2\n"
    )
    cache = tmp_path / "cache"
    assert _hits(first, cache) == 0  # compiled
    second = tmp_path / "elsewhere" / "copy"
    shutil.copytree(first / "pkg", second / "pkg", ignore=shutil.ignore_patterns("__pycache__"))
    assert _hits(second, cache) == 1 and _run(second, cache) == "22"  # loaded
    (second / "pkg" / "callee.py").write_text("import numba\n\n@numba.njit(cache=True)\ndef f(x):\n    return x + 20\n")
    assert _hits(second, cache) == 0 and _run(second, cache) == "42"  # its inlined callee changed: compiled


def test_the_node_constructors_hold_one_compiled_copy_each():
    """Callers pass the constructors constant kinds and fields; without their explicit signatures numba
    compiled one copy per combination of literal arguments (13-15 each), a large share of a cold
    process's JIT. After a workload that calls them every way, each holds its one signature."""
    from guided.grammar import ExprPool, parse_regex  # lazy: the workload's front end
    from guided.grammar.automata import expr_core as core

    pool = ExprPool.with_common()
    for pattern in ("[a-z]+(,[0-9]{2,4})*", "(ab|cd)*e?", "[^x]{3}|y+"):
        x = pool.intern(parse_regex(pattern))
        for b in b"acy,0":
            x = pool.deriv(x, b) if x is not None else x
    for fn in (core._hash, core._same, core._add, core._make, core.make_bytes, core.make_or, core.make_and,
               core._push, core._sorted_unique, core._guide):
        assert len(fn.signatures) == 1, (fn.py_func.__name__, fn.signatures)
