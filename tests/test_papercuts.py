"""Issue 29's papercuts, each pinned: `mojolearn --version`, a CLI help that describes today's
CLI, install hints that cannot fetch another project, `.gitignore` over a run's outputs, a build
that says what it compiles, and `tools/test.sh` saying what it installs before it starts."""

import ast
import os
import re
import shutil
import stat
import subprocess
import sys
import types
from pathlib import Path

import mojolearn
import pytest
from mojolearn._runtime import files as _files
from mojolearn.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "mojolearn"
TIMEOUT = 120


def _help(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 0
    return capsys.readouterr().out


# -- --version ------------------------------------------------------------------------------


def test_version_prints_the_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr()
    assert out.out == f"mojolearn {mojolearn.__version__}\n"
    assert out.err == ""


def test_version_from_the_command_line_matches_info():
    run = [sys.executable, "-m", "mojolearn"]
    proc = subprocess.run([*run, "--version"], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"mojolearn {mojolearn.__version__}\n" and proc.stderr == ""
    info = subprocess.run([*run, "info"], capture_output=True, text=True, timeout=TIMEOUT)
    assert info.returncode == 0, info.stderr
    assert f"version            {mojolearn.__version__}\n" in info.stdout


def test_no_command_still_says_a_command_is_required(capsys):
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "the following arguments are required: COMMAND" in err


# -- help ------------------------------------------------------------------------------------

STALE = ("8-16-3", "8 features -> 16 -> 3 classes", "Train the 8")


def test_help_describes_todays_cli(capsys):
    top = _help(capsys, ["--help"])
    train = _help(capsys, ["train", "--help"])
    for text in (top, train):
        for phrase in STALE:
            assert phrase not in text, f"stale {phrase!r} in\n{text}"
    assert "--version" in top and "--layers" in top
    # The description (between the usage and the option list) says what the options do.
    description = re.split(r"\n\n(?:options|optional arguments):", train.split("\n\n", 1)[1])[0]
    description = " ".join(description.split())
    for option in (
        "--layers",
        "--dataset digits",
        "--microbatches",
        "--resume",
        "--allow-profile-change",
    ):
        assert option in description, f"{option!r} not in the description: {description}"
    assert "8 -> 16 -> 3 network by default" in description
    assert "--log-every" in train  # the option list


# -- install hints ---------------------------------------------------------------------------


def _extras_requirements():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {"mojolearn"}
    for reqs in project["optional-dependencies"].values():
        names |= {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in reqs}
    return names - {"mojolearn"}


def test_install_hints_name_no_package_that_is_another_project():
    """Every `pip install ...` the package prints names a dependency it declares (matplotlib,
    mpi4py, mpich, ...) or a local path (`.`), never `mojolearn[...]`: on the package index
    that name is another project."""
    allowed = _extras_requirements()
    hints = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "mojolearn[" not in text, f"{path.name} names mojolearn[...]"
        for match in re.finditer(r"pip install ([^`'\"()\n]+)", text):
            hints.append(path.relative_to(PACKAGE).as_posix())
            for arg in match.group(1).split():
                local = arg.startswith(".")  # a path in the source tree: `.`, `'.[plot]'`
                arg = arg.rstrip(".,;:")
                assert local or arg.lower() in allowed, (
                    f"{path.name}: `pip install {match.group(1)}` names {arg!r}"
                )
    assert {"cli/plot.py", "distributed.py"} <= set(hints)  # the --plot and MPI hints are seen


MATPLOTLIB_BLOCKER = """
import sys
class _B:
    def find_spec(self, name, path=None, target=None):
        if name == 'matplotlib' or name.startswith('matplotlib.'):
            raise ModuleNotFoundError('matplotlib blocked', name=name)
sys.meta_path.insert(0, _B())
"""


def test_plot_hint_without_matplotlib_says_pip_install_matplotlib(tmp_path):
    code = MATPLOTLIB_BLOCKER + (
        "from mojolearn.cli import main; sys.exit(main(['train', '--plot', 'x.png']))"
    )
    env = dict(os.environ)
    env.pop("MOJOLEARN_NUMERIC_MODE", None)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert err == (
        "mojolearn train: error: --plot needs matplotlib, which is not installed: "
        "pip install matplotlib"
    )
    assert os.listdir(tmp_path) == []  # refused before anything is written


def test_plot_help_names_matplotlib(capsys):
    train = " ".join(_help(capsys, ["train", "--help"]).split())
    assert "needs matplotlib: pip install matplotlib" in train


# -- .gitignore ------------------------------------------------------------------------------


def _git_root():
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    proc = subprocess.run(
        [git, "-C", str(ROOT), "rev-parse", "--show-toplevel"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if proc.returncode != 0 or Path(proc.stdout.strip()).resolve() != ROOT:
        pytest.skip("not a git checkout of the project")
    return git


def _ignored(git, names):
    proc = subprocess.run(
        [git, "-C", str(ROOT), "check-ignore", "--no-index", "--stdin"],
        input="\n".join(names) + "\n",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return set(proc.stdout.split())


def test_gitignore_covers_a_runs_outputs(tmp_path):
    git = _git_root()
    ckpt = tmp_path / "mojolearn-run.ckpt"
    lock = _files.RunLock(ckpt)  # the lock file's real name, beside the checkpoint
    try:
        lock_name = os.path.basename(lock.path)
    finally:
        lock.release()
    tmp_name = _files.temporary_name(ckpt, os.getpid(), "0123456789ab")
    outputs = [
        "mojolearn-run.ckpt",
        "mojolearn-run.ckpt.history.jsonl",
        "runs/mojolearn-run.ckpt",
        "runs/mojolearn-run.ckpt.history.jsonl",
        lock_name,
        f"runs/{lock_name}",
        tmp_name,
    ]
    kept = ["tests/golden/new.ckpt", "python/mojolearn/cli/__init__.py", "README.md"]
    ignored = _ignored(git, outputs + kept)
    assert [n for n in outputs if n not in ignored] == []
    assert [n for n in kept if n in ignored] == []  # checkpoints in general stay committable


# -- the build says what it compiles ---------------------------------------------------------


def _setup_functions():
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
    return found


def test_build_prints_each_module_before_compiling_it():
    found = _setup_functions()
    assert "compiling_line" in found, "setup.py has no compiling_line"
    namespace = {}
    exec(compile(ast.Module([found["compiling_line"]], []), "setup.py", "exec"), namespace)
    ext = types.SimpleNamespace(
        module="_mojolearn_training_cpu_identical",
        vendor="cpu",
        mode="identical",
        target="x86-64-v3",
    )
    line = namespace["compiling_line"](ext)
    assert line.startswith("mojolearn build: compiling _mojolearn_training_cpu_identical (Mojo")
    assert "\n" not in line
    # build_mojo prints it to stderr, flushed, before the `mojo build` subprocess runs.
    build = found["build_mojo"]
    prints = [
        n
        for n in ast.walk(build)
        if isinstance(n, ast.Call)
        and getattr(n.func, "id", None) == "print"
        and n.args
        and isinstance(n.args[0], ast.Call)
        and getattr(n.args[0].func, "id", None) == "compiling_line"
    ]
    assert len(prints) == 1
    keywords = {k.arg: ast.unparse(k.value) for k in prints[0].keywords}
    assert keywords == {"file": "sys.stderr", "flush": "True"}
    runs = [
        n
        for n in ast.walk(build)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "subprocess.run"
    ]
    assert runs and prints[0].lineno < min(r.lineno for r in runs)


# -- tools/test.sh says what it installs -----------------------------------------------------


def test_test_sh_says_first_what_it_installs(tmp_path):
    """Run against a venv whose python is a stub that fails: the notice is the first line,
    before the build suite, and the script stops there (the build fails)."""
    if shutil.which("bash") is None or shutil.which("timeout") is None:
        pytest.skip("needs bash and timeout")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log = tmp_path / "calls.log"
    stub = venv / "bin" / "python"
    stub.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexit 1\n')
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, MOJOLEARN_VENV=str(venv))
    proc = subprocess.run(
        ["bash", str(ROOT / "tools" / "test.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith(f"tools/test.sh: installs into the venv {venv} (created if absent)")
    for part in ("numpy", "pytest", "hypothesis", "mojo-compiler", "editable", "MOJOLEARN_VENV"):
        assert part in first, f"{part!r} not in {first!r}"
    assert proc.stdout.index(first) < proc.stdout.index("=== build")
    assert "build failed: nothing else can run" in proc.stdout
    assert log.read_text().startswith("-m pip install")  # the notice came before any install
