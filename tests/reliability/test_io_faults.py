"""R6: I/O faults injected at every call of a save (`os.open`, `os.write`, `os.fsync`,
`os.close`, `os.replace`, then the folder's open/fsync/close).

Before the replace: `save_checkpoint` raises OSError, the old file is intact, no temporary is
left, the trainer's state hash is unchanged. After the replace (folder fsync): OSError, and
the target holds the complete new file. EINTR at any retried call (all but close, which must
never be retried on Linux) and short writes: the save succeeds."""

import errno
import os

import mojolearn as ml
import pytest
from mojolearn import checkpoint
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import spec as _spec

from ._util import record

CALLS = ("open", "write", "fsync", "close", "replace")


class _Injector:
    """Wraps the os calls of a save; raises `exc` at call number `at` (counted over all)."""

    def __init__(self, monkeypatch, at=None, exc=None, short_writes=False):
        self.log, self.at, self.exc, self.short = [], at, exc, short_writes
        for name in CALLS:
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._wrap(name, real))

    def _wrap(self, name, real):
        def call(*args, **kwargs):
            index = len(self.log)
            self.log.append(name)
            if index == self.at:
                raise self.exc
            if name == "write" and self.short and len(args[1]) > 1:
                return real(args[0], bytes(args[1][: max(1, len(args[1]) // 3)]))
            return real(*args, **kwargs)

        return call


@pytest.fixture(params=["small", "mlp"])
def kind(request):
    """Both trainers' saves: SmallMLPTrainer's small file and MLPTrainer's mlp-checkpoint.v1."""
    return request.param


def _trainer(seed, kind="small"):
    if kind == "small":
        t = ml.SmallMLPTrainer(*_spec.init_small_mlp(seed), data_schedule={"seed": seed})
    else:
        t = ml.MLPTrainer([8, 24, 24, 3], seed=seed, data_schedule={"seed": seed})
    X, y = next(iter(_rng.batches(seed, 8, 1)))
    t.train_step(X, y)
    return t


def _suite(name, kind):
    return name if kind == "small" else f"{name}_mlp"


def _sequence(tmp_path, monkeypatch, t):
    with monkeypatch.context() as m:
        inj = _Injector(m)
        t.save_checkpoint(tmp_path / "probe.ckpt")
    os.unlink(tmp_path / "probe.ckpt")
    return inj.log


def test_faults_at_every_call(tmp_path, monkeypatch, kind):
    path = tmp_path / "ck.ckpt"
    _trainer(1, kind).save_checkpoint(path)
    old = path.read_bytes()
    t = _trainer(2, kind)
    new = checkpoint.dumps(t.state_dict())
    h = t.state_hash()
    seq = _sequence(tmp_path, monkeypatch, t)
    replace_at = seq.index("replace")
    assert seq[: replace_at + 1] == ["open", "write", "fsync", "close", "replace"]
    cases = 0
    for code in (errno.ENOSPC, errno.EIO):
        for k, name in enumerate(seq):
            path.write_bytes(old)
            with monkeypatch.context() as m:
                _Injector(m, at=k, exc=OSError(code, f"injected {errno.errorcode[code]} at {name}"))
                if k > replace_at and name == "open":
                    t.save_checkpoint(path)  # a folder that cannot be opened is skipped
                else:
                    with pytest.raises(OSError, match="injected"):
                        t.save_checkpoint(path)
            after = path.read_bytes()
            if k <= replace_at:
                assert after == old, f"{name} #{k}: old file changed"
            else:
                assert after == new, f"{name} #{k} (after the replace): target is not the new file"
            assert sorted(os.listdir(tmp_path)) == ["ck.ckpt"], f"{name} #{k}: temporary left"
            assert t.state_hash() == h
            cases += 1
    record(_suite("R6_faults", kind), calls_per_save=len(seq), cases=cases, sequence="/".join(seq))


def test_eintr_is_retried_and_short_writes_completed(tmp_path, monkeypatch, kind):
    path = tmp_path / "ck.ckpt"
    _trainer(1, kind).save_checkpoint(path)
    t = _trainer(3, kind)
    new = checkpoint.dumps(t.state_dict())
    seq = _sequence(tmp_path, monkeypatch, t)
    retried = 0
    for k, name in enumerate(seq):
        if name == "close":
            continue  # close is never retried (the fd is released even when it fails)
        with monkeypatch.context() as m:
            _Injector(m, at=k, exc=InterruptedError(errno.EINTR, "injected EINTR"))
            t.save_checkpoint(path)
        assert path.read_bytes() == new
        assert sorted(os.listdir(tmp_path)) == ["ck.ckpt"]
        retried += 1
    path.write_bytes(b"old")
    with monkeypatch.context() as m:
        inj = _Injector(m, short_writes=True)
        t.save_checkpoint(path)
    assert inj.log.count("write") > 1 and path.read_bytes() == new
    record(_suite("R6_eintr", kind), retried=retried, short_write_calls=inj.log.count("write"))


def test_keyboard_interrupt_mid_save_leaves_old_file(tmp_path, monkeypatch, kind):
    path = tmp_path / "ck.ckpt"
    _trainer(1, kind).save_checkpoint(path)
    old = path.read_bytes()
    t = _trainer(4, kind)
    seq = _sequence(tmp_path, monkeypatch, t)
    for k in range(seq.index("replace") + 1):
        with monkeypatch.context() as m:
            _Injector(m, at=k, exc=KeyboardInterrupt())
            with pytest.raises(KeyboardInterrupt):
                t.save_checkpoint(path)
        assert path.read_bytes() == old and sorted(os.listdir(tmp_path)) == ["ck.ckpt"]
