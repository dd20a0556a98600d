"""Round 4 (issue 34), schedule and checkpoint rows: schedules are immutable values and a
trainer never writes a file its loader refuses (row 3, R18_d3); every envelope field of a new
checkpoint is under a hash, while files of the earlier layout still load (row 7, R18_d7); a
save into a missing folder names that folder (R18_x_folder); `allow_profile_change` must be a
bool (R18_x_bool). Each test failed at e874c97.
"""

import json
import os
import pickle

import mojolearn as ml
import pytest
from mojolearn import checkpoint
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import spec as _spec

from ._mutate import canon, old_layout
from ._util import ROOT, record

SIZES = [8, 6, 3]
FIELDS = ("peak_lr", "warmup_steps", "total_steps", "min_lr")
GOLDEN = os.path.join(ROOT, "tests", "golden")


def _schedules():
    return [
        ml.ConstantLR(0.02, warmup_steps=2),
        ml.WarmupLinearLR(0.02, warmup_steps=2, total_steps=9, min_lr=0.001),
        ml.WarmupCosineLR(0.02, warmup_steps=2, total_steps=9, min_lr=0.001),
    ]


def _trained(lr_schedule=None, steps=3, seed=4):
    t = ml.MLPTrainer(SIZES, seed=seed, data_schedule={"a": 1}, lr_schedule=lr_schedule)
    for X, y in _rng.batches(seed, 8, steps):
        t.train_step(X, y)
    return t


# ---------------------------------------------------------------- row 3: schedules


def test_schedules_are_immutable_and_a_trainer_file_always_loads(tmp_path):
    cases = held = 0
    # Every attribute, assigned or deleted, on every schedule class: refused, value kept.
    for sched in _schedules():
        cls = type(sched).__name__
        before = repr(sched)
        for name in (*FIELDS, "lr_at", "anything"):
            for verb, act in (
                ("assigned", lambda s, n: setattr(s, n, 3e-4)),
                ("deleted", lambda s, n: delattr(s, n)),
            ):
                cases += 1
                with pytest.raises(AttributeError) as err:
                    act(sched, name)
                msg = str(err.value)
                if f"{cls}.{name} cannot be {verb}" in msg and "immutable" in msg:
                    held += repr(sched) == before
        # A value: equal and hashable by its numbers, and it copies and pickles as one.
        cases += 1
        twin = type(sched)(sched.peak_lr, sched.warmup_steps, sched.total_steps, sched.min_lr)
        again = pickle.loads(pickle.dumps(sched))
        held += twin == sched == again and hash(twin) == hash(sched) and repr(again) == before

    # The run: train with each schedule, try the edit, save: the file loads.
    for sched in _schedules():
        cases += 1
        t = _trained(sched)
        with pytest.raises(AttributeError):
            t.lr_schedule.peak_lr = 3e-4
        with pytest.raises(AttributeError):
            t.lr_schedule.total_steps = 1
        path = tmp_path / f"{type(sched).__name__}.ckpt"
        t.save_checkpoint(path)
        u = ml.MLPTrainer.from_checkpoint(path)
        held += (
            u.state_hash() == t.state_hash() == checkpoint.verify(path)["state_hash"]
            and u.lr_schedule == sched
        )

    # A forged in-memory schedule (past the guard, as a C extension or a subclass could):
    # the save is refused before anything is made, and an existing file stays as it was.
    forgeries = [
        ("peak_lr", 3e-4),  # not a float32 value: the record's loader refuses it
        ("total_steps", 1),  # below warmup_steps
        ("min_lr", -1.0),
        ("warmup_steps", -2),
        ("min_lr", 0.5),  # above peak_lr
    ]
    for name, value in forgeries:
        for existing in (False, True):
            cases += 1
            sched = ml.WarmupCosineLR(0.02, warmup_steps=2, total_steps=9)
            t = _trained(sched, steps=1)
            path = tmp_path / f"forged-{name}-{existing}.ckpt"
            if existing:
                _trained(steps=1).save_checkpoint(path)
            old = path.read_bytes() if existing else None
            object.__setattr__(sched, name, value)
            with pytest.raises(ValueError, match="would not load"):
                t.save_checkpoint(path)
            left = sorted(os.listdir(tmp_path))
            kept = path.read_bytes() == old if existing else not path.exists()
            held += kept and not any(n.endswith(checkpoint.TMP_SUFFIX) for n in left)
    record(
        "R18_d3",
        cls="data loss",
        what="schedules immutable; save refuses a state its loader refuses",
        cases=cases,
        held=held,
    )
    assert held == cases


# ---------------------------------------------------------------- row 7: envelope under a hash


def _edits(data, field):
    """Every single-character edit of the value of the envelope's `field` (each position
    given another character of the same class), as (description, bytes)."""
    key = b'"' + field.encode() + b'":"'
    start = data.find(key) + len(key)
    if start < len(key):
        return
    end = data.index(b'"', start)
    for i in range(start, end):
        c = data[i : i + 1]
        subs = [b"1", b"3"] if c == b"2" else [b"2"] if c.isdigit() else [b"x", b"f"]
        for sub in subs:
            if sub != c:
                yield f"{field}[{i - start}] {c!r}->{sub!r}", data[:i] + sub + data[i + 1 :]


def _refused_everywhere(path, data):
    path.write_bytes(data)
    for allow in (False, True):
        for load in (
            lambda: checkpoint.loads(data, allow, schema=None),
            lambda: checkpoint.verify(path, allow),
            lambda: checkpoint.load_resumable(path, allow, schema=None),
        ):
            try:
                load()
            except ValueError:
                continue
            return False
    return True


def test_every_envelope_field_of_a_new_file_is_under_a_hash(tmp_path):
    cases = held = 0
    missed = []
    t = _trained()
    path = tmp_path / "new.ckpt"
    t.save_checkpoint(path)
    good = path.read_bytes()
    assert set(json.loads(good)) == {
        "schema",
        "payload",
        "payload_sha256",
        "arithmetic_profile",
        "envelope_sha256",
    }
    # A new file whose profile says v1 (as a v1 writer left it, sealed): each edit refused too.
    v1 = json.loads(good)
    v1["arithmetic_profile"] = checkpoint.PROFILE_V1
    v1["envelope_sha256"] = checkpoint.envelope_hash(v1)
    bad = tmp_path / "edited.ckpt"
    for data in (good, canon(v1) + b"\n"):
        for field in ("schema", "arithmetic_profile", "payload_sha256", "envelope_sha256"):
            for what, edited in _edits(data, field):
                cases += 1
                if _refused_everywhere(bad, edited):
                    held += 1
                else:
                    missed.append(what)
        # The profile removed, or the reference's layout claimed: refused as well.
        e = json.loads(data)
        del e["arithmetic_profile"]
        cases += 1
        held += _refused_everywhere(bad, canon(e) + b"\n")
    # The file itself still loads, and is what the writer writes of it.
    cases += 1
    u = ml.MLPTrainer.from_checkpoint(path)
    held += u.state_hash() == t.state_hash() and checkpoint.dumps(u.state_dict()) == good
    old_cases, old_held = _earlier_layout(tmp_path)
    record(
        "R18_d7",
        cls="tamper not detected",
        what="each one-character edit of a new file's envelope fields refused; earlier-layout "
        "files load with their hash, a v1 edited to v2 is read as v1",
        cases=cases + old_cases,
        held=held + old_held,
    )
    assert (held, old_held) == (cases, old_cases), f"loaded after an edit: {missed}"


def _earlier_layout(tmp_path):
    """(cases, held): files of the layout before envelope_sha256 still load."""
    cases = held = 0
    # The golden v1 files (written before the profile was hashed): same state, same hash.
    for name in ("v1_mlp_fast.ckpt", "v1_mlp_identical.ckpt", "v1_wine_step5.ckpt"):
        cases += 1
        path = os.path.join(GOLDEN, name)
        raw = open(path, "rb").read()
        report = checkpoint.verify(path)
        state = checkpoint.load(path, schema=None)
        held += (
            report["state_hash"] == json.loads(raw)["payload_sha256"]
            and report["profile"] == checkpoint.PROFILE_V1
            and checkpoint.state_hash(checkpoint.encode_state(state)) == report["state_hash"]
        )
        # The one-byte edit, v1 -> v2: read as v1 still, so an identical-mode one
        # resumes only when asked.
        cases += 1
        edited = raw.replace(b"portable-fp32.v1", b"portable-fp32.v2", 1)
        assert len(edited) == len(raw) and edited != raw
        other = tmp_path / name
        other.write_bytes(edited)
        report = checkpoint.verify(other)
        ok = report["profile"] == checkpoint.PROFILE_V1
        if json.loads(raw)["payload"]["numeric_mode"] == "identical":
            with pytest.raises(ValueError, match="allow_profile_change"):
                checkpoint.load_resumable(other, schema=None)
            ok = ok and checkpoint.load_resumable(other, True, schema=None) is not None
        else:
            ok = ok and checkpoint.load_resumable(other, schema=None) is not None
        held += ok
    # A v2 file of the earlier layout (no envelope_sha256), config as given: resumes as v2.
    cases += 1
    t = _trained()
    path = tmp_path / "old-v2.ckpt"
    path.write_bytes(old_layout(checkpoint.dumps(t.state_dict())))
    u = ml.MLPTrainer.from_checkpoint(path)
    held += (
        u.state_hash() == t.state_hash()
        and checkpoint.verify(path)["profile"] == checkpoint.PROFILE
    )
    return cases, held


# ---------------------------------------------------------------- extras


def test_a_save_into_a_missing_folder_names_the_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    t = _trained(steps=1)
    small = ml.SmallMLPTrainer(*_spec.init_small_mlp(3), data_schedule={"a": 1})
    cases = held = 0
    for folder in ("missing", os.path.join("missing", "deeper"), str(tmp_path / "absent")):
        target = os.path.join(folder, "run.ckpt")
        for save in (
            t.save_checkpoint,
            small.save_checkpoint,
            lambda p: checkpoint.write_atomic(p, b"x"),
        ):
            cases += 1
            with pytest.raises(FileNotFoundError) as err:
                save(target)
            msg = str(err.value)
            held += (
                isinstance(err.value, OSError)
                and repr(folder) in msg
                and checkpoint.TMP_SUFFIX not in msg
                and "does not exist" in msg
                and sorted(os.listdir(tmp_path)) == []
            )
    record(
        "R18_x_folder",
        cls="misleading message",
        what="save into a missing folder names the folder, not the temporary",
        cases=cases,
        held=held,
    )
    assert held == cases


def test_allow_profile_change_must_be_a_bool(tmp_path):
    t = _trained()
    path = tmp_path / "m.ckpt"
    t.save_checkpoint(path)
    data = path.read_bytes()
    state, envelope = checkpoint.load_with_envelope(path, schema=None)
    before = t.state_hash()
    apis = [
        ("checkpoint.loads", lambda a: checkpoint.loads(data, a, schema=None)),
        ("checkpoint.load", lambda a: checkpoint.load(path, a, schema=None)),
        ("checkpoint.load_resumable", lambda a: checkpoint.load_resumable(path, a, schema=None)),
        ("checkpoint.load_with_envelope", lambda a: checkpoint.load_with_envelope(path, a, None)),
        ("checkpoint.verify", lambda a: checkpoint.verify(path, a)),
        ("checkpoint.check_resumable", lambda a: checkpoint.check_resumable(state, envelope, a)),
        (
            "MLPTrainer.from_checkpoint",
            lambda a: ml.MLPTrainer.from_checkpoint(path, allow_profile_change=a),
        ),
        ("load_checkpoint", lambda a: t.load_checkpoint(path, allow_profile_change=a)),
    ]
    cases = held = 0
    for name, api in apis:
        for value in ("yes", "no", 1, 0, 1.0, None):
            cases += 1
            with pytest.raises(TypeError, match="allow_profile_change must be a bool") as err:
                api(value)
            assert repr(value) in str(err.value), name
            held += t.state_hash() == before
        for value in (False, True):  # the bools still work
            api(value)
    small = tmp_path / "s.ckpt"
    ml.SmallMLPTrainer(*_spec.init_small_mlp(3), data_schedule={"a": 1}).save_checkpoint(small)
    for value in ("yes", 1):
        cases += 1
        with pytest.raises(TypeError, match="allow_profile_change"):
            ml.SmallMLPTrainer.from_checkpoint(small, allow_profile_change=value)
        held += 1
    record(
        "R18_x_bool",
        cls="silent wrong result",
        what="allow_profile_change other than a bool refused by every API taking it",
        cases=cases,
        held=held,
    )
    assert held == cases
