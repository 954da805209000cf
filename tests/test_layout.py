"""The layout the code promises: sub-packages listed for the wheel, layers that import only downward, no
import circle (hidden ones included: imports inside functions count), and a lazy import inside a
function only with a comment saying why. Read from the source with ``ast``; nothing is imported."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
ROOTS = {"guided": "guided", "grammar": "guided.grammar", "engine": "guided.engine", "kernels": "guided.kernels",
         "schemas": "guided.schema_files"}  # fmt: skip
LAYERS = {  # what each top-level subsystem may import besides itself
    "guided.grammar": {"guided.errors"},
    "guided.kernels": {"guided.errors"},
    "guided.engine": {"guided.errors", "guided.kernels", "guided.grammar"},
}


def _modules() -> dict[str, Path]:
    """Every module of the distribution by dotted name (packages by their ``__init__``)."""
    out = {}
    for folder, name in ROOTS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            out[".".join((name, *parts))] = path
    return out


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(name: str, path: Path):
    """(target module, line, inside a function) for each import of a project module, TYPE_CHECKING
    blocks left out."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")
                    base = ".".join(up[: len(up) - child.level + 1] + ([base] if base else []))
                for alias in child.names:
                    target = f"{base}.{alias.name}"
                    yield (target if target in MODULES else base), child.lineno, in_function
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, child.lineno, in_function
            yield from visit(child, inner)

    return [(t, line, f) for t, line, f in visit(tree, False) if t in MODULES and t != name]


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycle(nodes: set[str]) -> list[str] | None:
    """One import circle among ``nodes`` (each module's imports, function-level ones included)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m: str):
        state[m] = 1
        stack.append(m)
        for target, _, _ in GRAPH[m]:
            if target not in nodes:
                continue
            if state.get(target) == 1:
                return stack[stack.index(target) :] + [target]
            if target not in state and (found := dfs(target)):
                return found
        state[m] = 2
        stack.pop()
        return None

    for m in sorted(nodes):
        if m not in state and (found := dfs(m)):
            return found
    return None


@pytest.mark.parametrize("root", ["guided.grammar", "guided.engine", "guided.kernels", "guided"])
def test_no_import_circle(root):
    nodes = {m for m in MODULES if m == root or m.startswith(root + ".")}
    assert _cycle(nodes) is None, " -> ".join(_cycle(nodes))


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layers_import_only_downward(layer):
    allowed = LAYERS[layer] | {layer}
    bad = [(m, t, line) for m, imports in GRAPH.items() if m.startswith(layer + ".") or m == layer
           for t, line, _ in imports if not any(t == a or t.startswith(a + ".") for a in allowed)]  # fmt: skip
    assert not bad, bad


def test_imports_inside_functions_say_why():
    """A project module imported inside a function keeps start-up light; the line or the one above says so."""
    silent = []
    for name, imports in GRAPH.items():
        lines = MODULES[name].read_text().splitlines()
        for _, line, in_function in imports:
            if in_function and not _commented(lines, line - 1):
                silent.append(f"{MODULES[name].relative_to(REPO)}:{line}")
    assert not silent, silent


def _commented(lines: list[str], i: int) -> bool:
    """Whether the import at ``lines[i]``, or the block of imports it closes, carries a comment."""
    while i >= 0 and re.match(r"\s*(from \S+ import|import |#)", lines[i]):
        if "#" in lines[i]:
            return True
        i -= 1
    return False


def test_every_package_is_listed_for_the_wheel():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    assert set(config["packages"]) == packages
    assert {config["package-dir"][k] for k in ROOTS.values()} == set(ROOTS)


def test_root_of_guided_is_the_api():
    """The user's side at the root of guided/ (at most 12 modules); subsystems in sub-packages."""
    root = [p.name for p in (REPO / "guided").glob("*.py")]
    assert len(root) <= 12, root
    assert not [n for n in root if re.match(r"(schema|json|server|bench)_", n)], root


def test_the_user_side_uses_the_grammar_face():
    """guided/ (outside grammar, engine, kernels) imports from guided.grammar only its public face and
    its IR and language modules, never the automata or token internals."""
    face = {"guided.grammar", "guided.grammar.regex_ast", "guided.grammar.cfg_ir", "guided.grammar.languages",
            "guided.grammar.vocab", "guided.grammar.compiler", "guided.grammar.bounded_cache",
            "guided.grammar.disk_cache"}  # fmt: skip
    inside = ("guided.grammar", "guided.engine", "guided.kernels", "guided.schema_files")
    bad = [(m, t) for m, imports in GRAPH.items() if not m.startswith(inside)
           for t, _, _ in imports if t.startswith("guided.grammar") and t not in face]  # fmt: skip
    assert not bad, bad
