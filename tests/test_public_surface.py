"""Every public name has a docstring and complete annotations (issue #19).

The public surface is what `mojolearn.__all__`, `mojolearn.training.__all__` and
`mojolearn.distributed.__all__` export, and for each class its public methods and properties
(and `__init__`). Each must have a docstring with a summary line; a function or method must
annotate every parameter and its return, with annotations that resolve (`typing.get_type_hints`
after running the module's `if TYPE_CHECKING:` imports, third-party ones stubbed); and its
docstring must follow the Google convention: an "Args:" section naming every parameter (for
`__init__`, in the class's docstring or its own) and a "Returns:" section unless it returns
None. `tools/build_docs.sh` runs this file before building the API reference.
"""

import ast
import importlib
import importlib.util
import inspect
import re
import sys
import typing

import mojolearn

MODULES = ("mojolearn", "mojolearn.training", "mojolearn.distributed", "mojolearn.nn")


def _importable(name):
    try:
        importlib.import_module(name)
    except ImportError:  # absent, or its NumPy blocked (the NumPy-free pass)
        return False
    return True


if _importable("sklearn"):  # an optional extra: checked when present
    MODULES += ("mojolearn.sklearn",)


class _Stub(type):
    """Stands in for a typing-only third-party import (torch, mpi4py): any attribute of it is
    itself, so `torch.nn.Sequential` resolves without importing torch."""

    def __getattr__(cls, name):
        return cls


_namespaces = {}


def _namespace(module_name):
    """The module's globals plus what its `if TYPE_CHECKING:` blocks define (as pdoc and the
    checker see them), so that string annotations resolve."""
    if module_name not in _namespaces:
        module = sys.modules[module_name]
        ns = dict(vars(module))
        for stmt in _type_checking_statements(inspect.getsource(module)):
            if _third_party(stmt):
                for alias in stmt.names:
                    ns[(alias.asname or alias.name).partition(".")[0]] = _Stub("Stub", (), {})
                continue
            exec(compile(ast.Module([stmt], []), module.__file__, "exec"), ns)
        _namespaces[module_name] = ns
    return _namespaces[module_name]


def _type_checking_statements(source):
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            yield from node.body


def _third_party(stmt):
    if isinstance(stmt, ast.Import):
        top = {a.name.partition(".")[0] for a in stmt.names}
    elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0:
        top = {stmt.module.partition(".")[0]}
    else:
        return False
    return not top <= set(sys.stdlib_module_names) | {"mojolearn"}


def _exported():
    """(qualified name, object) of every name in the three `__all__`s."""
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            yield f"{module_name}.{name}", getattr(module, name)


def _defined_name(obj):
    obj = inspect.unwrap(obj)  # the method behind a wrapper (optim's `_locked`)
    return f"{obj.__module__}.{obj.__qualname__}"


def _members(cls):
    """(raw attribute, whether it takes self or cls) of a class's public methods and
    properties, `__init__` included, from wherever in the MRO they are defined (object's
    excluded)."""
    for name in sorted(dir(cls)):
        if name.startswith("_") and name != "__init__":
            continue
        owner = next(k for k in cls.__mro__ if name in vars(k))
        if owner is object or not owner.__module__.startswith("mojolearn"):
            continue  # scikit-learn's get_params, score: theirs, documented there
        raw = vars(owner)[name]
        bound = not isinstance(raw, staticmethod)
        if isinstance(raw, (classmethod, staticmethod)):
            raw = raw.__func__
        if isinstance(raw, property) or inspect.isfunction(raw):
            yield raw, bound


def _summary(doc):
    return bool(doc) and bool(doc.strip().splitlines()[0].strip())


def _section(doc, title):
    """The entry names of a Google-style section ("Args:"), or None when it is absent:
    `name: text` lines at the section's first indentation (`a, b: text` names both)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    heads = [i for i, line in enumerate(lines) if line.strip() == f"{title}:"]
    if not heads:
        return None
    indent = len(lines[heads[0]]) - len(lines[heads[0]].lstrip())
    names, entry_indent = set(), None
    for line in lines[heads[0] + 1 :]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if depth <= indent:
            break
        entry_indent = depth if entry_indent is None else entry_indent
        match = re.match(r"([\w*, ]+):", line.strip())
        if depth == entry_indent and match:
            names.update(n.strip().lstrip("*") for n in match.group(1).split(","))
    return names


def _hints(func):
    return typing.get_type_hints(func, globalns=_namespace(func.__module__))


def _function_problems(func, is_method, class_doc=None):
    func = inspect.unwrap(func)
    name = _defined_name(func)
    problems = []
    doc = func.__doc__
    is_init = func.__name__ == "__init__"
    if not _summary(doc) and not (is_init and _summary(class_doc)):
        problems.append(f"{name}: no docstring summary line")
    params = list(inspect.signature(func).parameters.values())[1 if is_method else 0 :]
    try:
        hints = _hints(func)
    except Exception as exc:  # noqa: BLE001 - any failure to resolve is the finding
        return problems + [f"{name}: annotations do not resolve ({type(exc).__name__}: {exc})"]
    problems += [
        f"{name}: parameter {p.name!r} not annotated" for p in params if p.name not in hints
    ]
    if "return" not in hints:
        problems.append(f"{name}: no return annotation")
    if params:
        listed = (_section(doc, "Args") or set()) | (
            (_section(class_doc, "Args") or set()) if is_init else set()
        )
        missing = [p.name for p in params if p.name not in listed]
        if missing:
            problems.append(f"{name}: Args section does not name {missing}")
    if not is_init and hints.get("return", type(None)) is not type(None):
        if _section(doc, "Returns") is None:
            problems.append(f"{name}: no Returns section")
    return problems


def _property_problems(prop, name):
    problems = []
    if not _summary(prop.fget.__doc__):
        problems.append(f"{name}: no docstring summary line")
    for accessor in (prop.fget, prop.fset):
        if accessor is None:
            continue
        accessor = inspect.unwrap(accessor)
        try:
            hints = _hints(accessor)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{name}: annotations do not resolve ({type(exc).__name__}: {exc})")
            continue
        params = list(inspect.signature(accessor).parameters)[1:]
        if "return" not in hints or any(p not in hints for p in params):
            problems.append(f"{name}: {accessor.__name__} is not fully annotated")
    return problems


def _surface_problems():
    """{defined qualified name: [problems]} over the whole public surface."""
    found = {}
    for exported, obj in _exported():
        if inspect.ismodule(obj):
            if not _summary(obj.__doc__):
                found[exported] = [f"{exported}: no module docstring"]
        elif inspect.isclass(obj):
            found[_defined_name(obj)] = (
                [] if _summary(obj.__doc__) else [f"{_defined_name(obj)}: no docstring summary"]
            )
            for raw, bound in _members(obj):
                if isinstance(raw, property):
                    name = _defined_name(raw.fget)
                    found[name] = _property_problems(raw, name)
                else:
                    found[_defined_name(raw)] = _function_problems(raw, bound, obj.__doc__)
        elif inspect.isfunction(obj):
            found[_defined_name(obj)] = _function_problems(obj, False)
        else:
            found[exported] = [f"{exported}: not a module, class or function ({type(obj)})"]
    return found


def test_every_public_name_is_documented_and_annotated():
    found = _surface_problems()
    offenders = [p for _, ps in sorted(found.items()) for p in ps]  # nothing is skipped
    assert not offenders, f"{len(offenders)} problems:\n" + "\n".join(offenders)


def test_the_type_checker_sees_every_lazy_name():
    # mojolearn/__init__.py imports each lazily resolved name under TYPE_CHECKING: a name
    # missing there would be Any to a user's type checker.
    with open(mojolearn.__file__, encoding="utf-8") as f:
        statements = list(_type_checking_statements(f.read()))
    imported = {
        a.asname or a.name
        for s in statements
        if isinstance(s, ast.ImportFrom) and s.module != "typing"
        for a in s.names
    }
    assert imported == set(mojolearn._LAZY)


def test_the_checker_finds_what_is_missing():
    def undocumented(a, b: int):
        return a

    def documented(a: int) -> int:
        """Summary.

        Args:
            a: a number.
        """
        return a

    problems = _function_problems(undocumented, False) + _function_problems(documented, False)
    name = _defined_name(undocumented)
    assert f"{name}: no docstring summary line" in problems
    assert f"{name}: parameter 'a' not annotated" in problems
    assert f"{name}: no return annotation" in problems
    assert f"{name}: Args section does not name ['a', 'b']" in problems
    assert problems[-1] == f"{_defined_name(documented)}: no Returns section"
