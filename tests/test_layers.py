"""The package's house rules, read from its imports (issue 28).

Layers, lowest first: `_buffers` < `_runtime` < `_mlp`, `_optim`, `_model` < the public modules < `cli`.
A module may import its own layer or a lower one, never a higher one, and no chain of imports
comes back to where it started at run time. For the layers every import counts: at the top,
inside a function and under `TYPE_CHECKING` alike, since a lazy import is still a dependency.
For circles an import under `if TYPE_CHECKING:` does not: it never runs, so it cannot make a
module wait for one that is still importing it (`Array`'s annotations name the types that name
`Array`).
"""

from __future__ import annotations

import ast
import pathlib

import mojolearn

PKG = pathlib.Path(mojolearn.__file__).parent
LAYERS = {
    "_buffers": 0,
    "_runtime": 1,
    "_mlp": 2,
    "_optim": 2,
    "_model": 2,
    "cli": 4,
    "__main__": 4,
}
PUBLIC = 3


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(PKG).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(["mojolearn", *parts])] = path
    return found


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.get(parts[1], PUBLIC) if len(parts) > 1 else PUBLIC


def _typing_only(tree: ast.AST) -> set[int]:
    """ids of the nodes inside `if TYPE_CHECKING:` blocks."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name):
            if node.test.id == "TYPE_CHECKING":
                inside.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return inside


def _imports(
    module: str, source: str, is_package: bool, known: set[str], run_time: bool = False
) -> set[str]:
    """The package modules `module` imports (a name imported from a package counts as its
    submodule when there is one); with `run_time`, not those under `if TYPE_CHECKING:`."""
    package = module if is_package else module.rsplit(".", 1)[0]
    out = set()
    tree = ast.parse(source)
    skip = _typing_only(tree) if run_time else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "mojolearn")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "mojolearn":
                continue
            subs = {f"{target}.{a.name}" for a in node.names} & known
            out.update(subs or {target})
    return {m for m in out if m in known and m != module}


def _graph(run_time: bool = False) -> dict[str, set[str]]:
    mods = _modules()
    return {
        m: _imports(m, p.read_text(encoding="utf-8"), p.name == "__init__.py", set(mods), run_time)
        for m, p in mods.items()
    }


def test_the_house_has_its_wings():
    mods = _modules()
    for wing in ("_buffers", "_runtime", "_mlp", "_optim", "cli"):
        assert f"mojolearn.{wing}" in mods, wing
    # no flat private module is left beside the wings
    flat = [m for m in mods if m.count(".") == 1 and m.split(".")[1].startswith("_")]
    assert [m for m in flat if m.split(".")[1] not in LAYERS] == []


def test_no_module_imports_a_higher_layer():
    upward = [
        f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
        for m, targets in _graph().items()
        if m != "mojolearn"  # the package's face names every public module (lazily)
        for t in sorted(targets)
        if _layer(t) > _layer(m)
    ]
    assert upward == []


def test_no_import_circle():
    graph = _graph(run_time=True)
    graph.pop("mojolearn")  # the face imports lazily on attribute access; nothing imports it back
    for targets in graph.values():
        targets.discard("mojolearn")
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == []


def test_the_checker_sees_violations():
    """The reader resolves relative, absolute and function-level imports, so the rules above
    would catch a real upward import or circle."""
    known = set(_modules())
    source = (
        "from .._mlp import core\n"
        "def f():\n    from ..cli.data import BUNDLED_FILE\n    import mojolearn.checkpoint\n"
        "from . import array\n"
    )
    found = _imports("mojolearn._buffers.intake", source, False, known)
    assert found == {
        "mojolearn._mlp.core",
        "mojolearn.cli.data",
        "mojolearn.checkpoint",
        "mojolearn._buffers.array",
    }
    layers = [_layer(m) for m in ("mojolearn._buffers.intake", *sorted(found))]
    assert layers == [0, 0, 2, 3, 4]
    typed = "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from .array import Array\n"
    assert _imports("mojolearn._buffers.intake", typed, False, known) == {
        "mojolearn._buffers.array"
    }
    assert _imports("mojolearn._buffers.intake", typed, False, known, run_time=True) == set()


# Units over the limits, each to be cut (issue 28): an entry that fits must leave this list.
PENDING: set[str] = set()
# Hot on purpose: one frame a step (its docstring says so).
EXEMPT = {"mojolearn.trainer.SmallMLPTrainer.train_step"}
MAX_CLASS, MAX_FUNCTION = 450, 80


def _units() -> dict[str, int]:
    """Lines of every class and function of the package, by qualified name."""
    sizes = {}
    for module, path in _modules().items():

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = f"{prefix}.{child.name}"
                    kind = "class" if isinstance(child, ast.ClassDef) else "function"
                    sizes[name] = (kind, (child.end_lineno or 0) - child.lineno + 1)
                    visit(child, name)

        visit(ast.parse(path.read_text(encoding="utf-8")), module)
    return sizes


def test_no_unit_is_too_big_to_read_in_one_sitting():
    over = {
        name
        for name, (kind, n) in _units().items()
        if n > (MAX_CLASS if kind == "class" else MAX_FUNCTION)
    }
    assert over - PENDING - EXEMPT == set()
    assert PENDING - over == set(), "these fit now: take them off PENDING"
    assert EXEMPT <= over | EXEMPT


def test_the_hot_step_says_why_it_is_long():
    from mojolearn.trainer import SmallMLPTrainer

    assert "hot on purpose" in (SmallMLPTrainer.train_step.__doc__ or "")


def test_every_wing_is_within_its_line_budget():
    """tools/sz.py --check: lines of code (no blank lines, comments or docstrings) per wing."""
    import subprocess
    import sys

    tool = pathlib.Path(__file__).resolve().parent.parent / "tools" / "sz.py"
    out = subprocess.run(
        [sys.executable, str(tool), "--check"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "mojolearn/_mlp" in out.stdout and "mojo/training" in out.stdout
