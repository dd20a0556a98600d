"""R3: the adversarial corpus (`attacks/`), each file refused by `checkpoint.load` with
ValueError and its exact expected message in under 100 ms; path attacks (sparse 1 GiB file,
FIFO, folder, devices, socket, symlinks) made at test time. R4: no pickle/marshal/eval/exec
anywhere in the loader's modules.

A symlink to a regular file is followed (and loads); a symlink to anything else is refused
like its target."""
import ast
import math
import os
import re
import signal
import socket
import time

import pytest

from mojolearn import checkpoint

from .attacks import generate
from ._util import ROOT, record

LIMIT_S = 0.1
_TIMES = {}


def _load_refused(path, expected):
    """The refusal's time: the best of up to three tries, so that a scheduling hiccup on a
    shared machine is not taken for a slow input."""
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        with pytest.raises(ValueError) as info:
            checkpoint.load(path)
        best = min(best, time.perf_counter() - t0)
        assert re.search(expected, str(info.value)), f"{path}: got {info.value!s:.300}"
        if best < LIMIT_S:
            break
    assert best < LIMIT_S, f"{path}: refused in {best:.3f} s"
    return best


@pytest.mark.parametrize("name,make,expected", generate.ATTACKS, ids=[a[0] for a in generate.ATTACKS])
def test_corpus_file(tmp_path, name, make, expected):
    data = make()
    path = os.path.join(generate.FOLDER, name)
    if generate.committed(make):
        with open(path, "rb") as f:
            assert f.read() == data, f"{name} differs from its generator; rerun generate.py"
    else:
        path = tmp_path / name
        path.write_bytes(data)
    _TIMES[name] = _load_refused(path, expected)
    with pytest.raises(ValueError, match=expected):
        checkpoint.loads(data)


def test_corpus_is_complete():
    names = {a[0] for a in generate.ATTACKS}
    on_disk = {n for n in os.listdir(generate.FOLDER) if n.endswith(".ckpt")}
    assert on_disk == {a[0] for a in generate.ATTACKS if generate.committed(a[1])}
    assert len(names) == len(generate.ATTACKS) >= 25
    checkpoint.loads(generate.valid_bytes())  # the base every edit starts from is valid


class _Alarm:
    """Fail instead of hanging if a path attack blocks (a FIFO opened for reading)."""

    def __enter__(self):
        def boom(*_):
            raise TimeoutError("the loader blocked")
        self.old = signal.signal(signal.SIGALRM, boom)
        signal.setitimer(signal.ITIMER_REAL, 2.0)

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.old)


def _path_attacks(tmp):
    """(name, path, expected) made in `tmp`."""
    out = []
    big = tmp / "sparse_1GiB.ckpt"
    with open(big, "wb") as f:
        f.truncate(1 << 30)  # sparse: no disk blocks
    out.append(("sparse 1 GiB file", big, r"is larger than 32768 bytes \(1073741824 bytes\)$"))
    fifo = tmp / "fifo.ckpt"
    os.mkfifo(fifo)
    out.append(("FIFO", fifo, r"is a FIFO, not a regular file$"))
    folder = tmp / "folder.ckpt"
    folder.mkdir()
    out.append(("folder", folder, r"is a folder, not a regular file$"))
    out.append(("/dev/zero", "/dev/zero", r"'/dev/zero' is a character device, not a regular file$"))
    out.append(("/dev/null", "/dev/null", r"'/dev/null' is a character device, not a regular file$"))
    link = tmp / "link_to_fifo.ckpt"
    link.symlink_to(fifo)
    out.append(("symlink to FIFO", link, r"is a FIFO, not a regular file$"))
    link2 = tmp / "link_to_folder.ckpt"
    link2.symlink_to(folder)
    out.append(("symlink to folder", link2, r"is a folder, not a regular file$"))
    sock_path = os.path.join(str(tmp), "s.sock")
    if len(sock_path) < 100:
        s = socket.socket(socket.AF_UNIX)
        s.bind(sock_path)
        out.append(("socket", sock_path, r"is a socket, not a regular file$"))
    return out


def test_path_attacks(tmp_path):
    attacks = _path_attacks(tmp_path)
    worst = 0.0
    with _Alarm():
        for name, path, expected in attacks:
            worst = max(worst, _load_refused(path, expected))
            with pytest.raises(ValueError, match=expected):
                checkpoint.verify(path)
    assert os.stat(tmp_path / "sparse_1GiB.ckpt").st_blocks * 512 < 1 << 20, "not sparse"
    record("R3_paths", attacks=len(attacks), worst_ms=round(worst * 1e3, 2))


def test_symlink_to_regular_file_is_followed(tmp_path):
    real = tmp_path / "real.ckpt"
    real.write_bytes(generate.valid_bytes())
    link = tmp_path / "link.ckpt"
    link.symlink_to(real)
    assert checkpoint.load(link)["optimizer"]["step"] == 7
    chain = tmp_path / "chain.ckpt"
    chain.symlink_to(link)
    assert checkpoint.load(chain)["optimizer"]["step"] == 7


def test_missing_path_is_the_system_oserror(tmp_path):
    # Not a refusal of content: the caller sees the OS error (documented in checkpoint.py).
    with pytest.raises(FileNotFoundError):
        checkpoint.load(tmp_path / "absent.ckpt")
    dangling = tmp_path / "dangling.ckpt"
    dangling.symlink_to(tmp_path / "absent.ckpt")
    with pytest.raises(FileNotFoundError):
        checkpoint.load(dangling)


def test_record_corpus_times():
    # Runs after the parametrized corpus tests in file order; records their figures.
    committed = sum(generate.committed(m) for _, m, _ in generate.ATTACKS)
    if _TIMES:
        worst = max(_TIMES, key=_TIMES.get)
        record("R3_corpus", files=len(generate.ATTACKS), committed=committed,
               refused=len(_TIMES), worst_ms=round(_TIMES[worst] * 1e3, 2), worst_file=worst)


# -- R4 ---------------------------------------------------------------------------------------

LOADER_MODULES = ("checkpoint.py", "_mlp_state.py", "_array.py", "_buffer.py", "_bufcheck.py")
_FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "copyreg"}
_FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__", "execfile", "input"}


def _violations(source, name):
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in _FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in _FORBIDDEN_MODULES:
            found.append(node.module)
        elif isinstance(node, ast.Call):
            fn = node.func
            called = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
            if called in _FORBIDDEN_CALLS or called in ("loads", "load") and isinstance(fn, ast.Attribute) \
                    and isinstance(fn.value, ast.Name) and fn.value.id in _FORBIDDEN_MODULES:
                found.append(called)
        elif isinstance(node, ast.Name) and node.id in ("eval", "exec", "__import__"):
            found.append(node.id)
    return found


def test_r4_no_pickle_marshal_eval_exec():
    package = os.path.join(ROOT, "python", "mojolearn")
    bad = {}
    for name in LOADER_MODULES:
        with open(os.path.join(package, name)) as f:
            found = _violations(f.read(), name)
        if found:
            bad[name] = found
    assert not bad, f"forbidden constructs in loader modules: {bad}"
    # The scan itself works: it finds each construct in a sample.
    sample = "import pickle\nfrom marshal import loads\neval('1')\nexec('x=1')\nf = eval\n"
    assert sorted(set(_violations(sample, "sample"))) == ["eval", "exec", "marshal", "pickle"]
    record("R4", modules=len(LOADER_MODULES), violations=0)
