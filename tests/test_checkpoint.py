"""Checkpoint files: the canonical envelope, atomic save, the bounded loader and each of its
refusals (ValueError naming the problem, nothing changed), the reference-layout profile
migration, `verify`, and a small mutation fuzz of `loads`."""

import hashlib
import json
import os
import random

import mojolearn as ml
import pytest
from mojolearn import checkpoint
from mojolearn._mlp import rng as _rng
from mojolearn._mlp import spec as _spec
from mojolearn._mlp import state as S

from tests.reliability._mutate import nodes

SCHEDULE = {"dataset_sha256": "ab" * 32, "seed": 11, "cursor": 96}


def trained(seed=1, steps=3):
    t = ml.SmallMLPTrainer(*_spec.init_small_mlp(seed), data_schedule=SCHEDULE)
    for X, y in _rng.batches(seed + 1, 8, steps):
        t.train_step(X, y)
    return t


def canon(obj):
    return (
        json.dumps(
            obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
        ).encode()
        + b"\n"
    )


def rewrap(envelope, rehash=True):
    """Envelope bytes after an edit, with the payload hash recomputed (so the refusal under
    test is the edited field, not the hash)."""
    if rehash:
        envelope["payload_sha256"] = hashlib.sha256(canon(envelope["payload"])[:-1]).hexdigest()
        if "envelope_sha256" in envelope:
            envelope["envelope_sha256"] = checkpoint.envelope_hash(envelope)
    return canon(envelope)


def test_file_layout(tmp_path):
    t = trained()
    path = tmp_path / "ck.json"
    t.save_checkpoint(path)
    data = path.read_bytes()
    assert data.endswith(b"}\n") and data.count(b"\n") == 1 and len(data) <= 32768
    env = json.loads(data)
    assert data == canon(env), "the file is the canonical JSON of its envelope"
    assert set(env) == {
        "schema",
        "payload",
        "payload_sha256",
        "arithmetic_profile",
        "envelope_sha256",
    }
    assert env["envelope_sha256"] == checkpoint.envelope_hash(env)
    assert env["schema"] == "mojolearn.small-mlp-checkpoint.v1"
    assert env["arithmetic_profile"] == "mojolearn.portable-fp32.v2"
    assert env["payload_sha256"] == hashlib.sha256(canon(env["payload"])[:-1]).hexdigest()
    assert env["payload_sha256"] == t.state_hash()
    p = env["payload"]
    assert p["weights"]["weight1"]["dtype"] == "<f4" and p["weights"]["weight1"]["shape"] == [16, 8]
    assert bytes.fromhex(p["weights"]["bias2"]["hex"]) == t.weights_["bias2"].tobytes()
    assert p["optimizer"]["flags"] == {"dtype": "<i4", "shape": [4], "hex": "00" * 16}
    assert p["optimizer"]["step"] == 3 and p["data_schedule"] == SCHEDULE
    assert list(os.listdir(tmp_path)) == ["ck.json"], "no temporary left behind"


def test_round_trip(tmp_path):
    t = trained()
    path = tmp_path / "ck.json"
    t.save_checkpoint(path)
    u = ml.SmallMLPTrainer.from_checkpoint(path)
    assert u.state_hash() == t.state_hash() and u.step_ == 3
    u.save_checkpoint(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()
    info = checkpoint.verify(path)
    assert info == {
        "step": 3,
        "schema": "mojolearn.small-mlp-checkpoint.v1",
        "profile": "mojolearn.portable-fp32.v2",
        "numeric_mode": t.numeric_mode_used(),
        "state_hash": t.state_hash(),
        "architecture": [8, 16, 3],
    }


def test_atomic_save_failure_keeps_old_file(tmp_path, monkeypatch):
    path = tmp_path / "ck.json"
    trained(1).save_checkpoint(path)
    old = path.read_bytes()
    t = trained(2)
    for target in ("replace", "fsync"):

        def boom(*a, **k):
            raise OSError(f"injected {target} failure")

        with monkeypatch.context() as m:
            m.setattr(os, target, boom)
            with pytest.raises(OSError, match="injected"):
                t.save_checkpoint(path)
        assert path.read_bytes() == old
        assert sorted(os.listdir(tmp_path)) == ["ck.json"], "no temporary left behind"
    t.save_checkpoint(path)
    assert path.read_bytes() != old


def _edits():
    """(name, function(envelope) -> bytes, expected message fragment)."""

    def payload(fn, rehash=True):
        def edit(env):
            fn(env["payload"])
            return rewrap(env, rehash)

        return edit

    def raw(fn):
        return lambda env: fn(rewrap(env, False))

    return [
        (
            "duplicate key",
            raw(
                lambda b: b.replace(
                    b'{"arithmetic_profile"', b'{"schema":"x","arithmetic_profile"', 1
                )
            ),
            "duplicate key",
        ),
        (
            "bad hex",
            payload(
                lambda p: p["weights"]["bias2"].update(hex="zz" + p["weights"]["bias2"]["hex"][2:])
            ),
            "not hexadecimal",
        ),
        (
            "short hex",
            payload(lambda p: p["weights"]["bias2"].update(hex="00" * 11)),
            "needs 24 hex digits",
        ),
        (
            "wrong shape",
            payload(lambda p: p["weights"]["weight1"].update(shape=[8, 16])),
            "shape must be",
        ),
        (
            "wrong dtype",
            payload(lambda p: p["optimizer"]["flags"].update(dtype="<f4")),
            "dtype must be",
        ),
        (
            "tensor field",
            payload(lambda p: p["optimizer"]["m"].update(order="C")),
            "exactly dtype, shape, hex",
        ),
        ("file schema", lambda env: rewrap({**env, "schema": "other.v1"}), "schema must be"),
        ("state schema", payload(lambda p: p.update(schema="x")), "state schema"),
        (
            "hash mismatch",
            payload(lambda p: p["optimizer"].update(step=2), rehash=False),
            "payload_sha256 does not match",
        ),
        ("unknown envelope field", lambda env: rewrap({**env, "comment": "hi"}), "envelope fields"),
        (
            "missing envelope field",
            lambda env: rewrap({k: v for k, v in env.items() if k != "payload_sha256"}, False),
            "envelope fields",
        ),
        ("unknown payload field", payload(lambda p: p.update(extra=1)), "unknown fields"),
        ("missing payload field", payload(lambda p: p.pop("config")), "missing fields"),
        (
            "missing optimizer field",
            payload(lambda p: p["optimizer"].pop("flags")),
            "optimizer must hold",
        ),
        (
            "other profile",
            lambda env: rewrap({**env, "arithmetic_profile": "someone.else.v3"}),
            "arithmetic profile is 'someone.else.v3'",
        ),
        ("NaN", raw(lambda b: b.replace(b'"lr":', b'"lr":NaN,"x":', 1)), "not allowed"),
        ("huge number", raw(lambda b: b.replace(b'"lr":', b'"lr":1e999,"x":', 1)), "out of range"),
        ("not canonical", raw(lambda b: b.replace(b'","', b'", "', 1)), "not canonical"),
        ("two newlines", raw(lambda b: b + b"\n"), "exactly one newline"),
        ("no newline", raw(lambda b: b[:-1]), "exactly one newline"),
        (
            "non-ascii",
            raw(lambda b: b.replace(b'"cursor"', '"c\u00fcrsor"'.encode(), 1)),
            "ASCII JSON",
        ),
        ("not json", raw(lambda b: b[:100] + b"\n"), "ASCII JSON"),
        ("top level list", raw(lambda b: b"[1]\n"), "must be a JSON object"),
        (
            "negative v",
            payload(
                lambda p: p["optimizer"]["v"].update(
                    hex="000080bf" + p["optimizer"]["v"]["hex"][8:]
                )
            ),
            "must be >= 0",
        ),
        (
            "inf weight",
            payload(
                lambda p: p["weights"]["bias1"].update(
                    hex="0000807f" + p["weights"]["bias1"]["hex"][8:]
                )
            ),
            "bias1 must be finite",
        ),
        (
            "bool step",
            payload(lambda p: p["optimizer"].update(step=True)),
            "step must be an integer",
        ),
        (
            "string lr",
            payload(lambda p: p["config"].update(lr="0.001")),
            "config values must be numbers",
        ),
        ("bad lr", payload(lambda p: p["config"].update(lr=0)), "learning rate"),
        ("bad mode", payload(lambda p: p.update(numeric_mode="exact")), "numeric_mode"),
        (
            "deep schedule",
            payload(lambda p: p.update(data_schedule={"a": [[[[[[[[[1]]]]]]]]]})),
            "deeper than 8",
        ),
    ]


@pytest.mark.parametrize("name,edit,match", _edits(), ids=[e[0] for e in _edits()])
def test_loader_refusals(tmp_path, name, edit, match):
    t = trained()
    path = tmp_path / "ck.json"
    t.save_checkpoint(path)
    env = json.loads(path.read_bytes())
    bad = edit(env)
    with pytest.raises(ValueError, match=match):
        checkpoint.loads(bad)
    bad_path = tmp_path / "bad.json"
    bad_path.write_bytes(bad)
    before = t.state_hash()
    with pytest.raises(ValueError, match=match):
        ml.SmallMLPTrainer.from_checkpoint(bad_path)
    with pytest.raises(ValueError, match=match):
        checkpoint.verify(bad_path)
    assert bad_path.read_bytes() == bad and t.state_hash() == before


def test_size_bound_applies_before_parsing(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_bytes(b"{" + b" " * 40000 + b"}\n")
    parsed = []
    monkeypatch.setattr(json, "loads", lambda *a, **k: parsed.append(1))
    with pytest.raises(ValueError, match="larger than 32768 bytes"):
        ml.SmallMLPTrainer.from_checkpoint(path)
    with pytest.raises(ValueError, match="exceed the 32768-byte bound"):
        checkpoint.loads(b"{" * 40000)
    assert not parsed


def test_deep_nesting_is_a_value_error():
    with pytest.raises(ValueError):
        checkpoint.loads(b"[" * 30000 + b"\n")


def reference_layout_file(t, profile=None):
    """A checkpoint written by hand the way the reference writes its v1 files: same fields,
    same encoding, and no `arithmetic_profile` (the reference's default profile)."""
    sd = t.state_dict()
    tensor = lambda a: {"dtype": a.dtype, "shape": list(a.shape), "hex": a.tobytes().hex()}
    payload = {
        "schema": "mojolearn.small-mlp-trainer.v1",
        "architecture": [8, 16, 3],
        "numeric_mode": sd["numeric_mode"],
        "parameter_order": ["weight1", "bias1", "weight2", "bias2"],
        "weights": {n: tensor(a) for n, a in sd["weights"].items()},
        "optimizer": {
            "kind": "AdamW",
            "step": sd["optimizer"]["step"],
            "m": tensor(sd["optimizer"]["m"]),
            "v": tensor(sd["optimizer"]["v"]),
            "flags": tensor(sd["optimizer"]["flags"]),
        },
        "config": sd["config"],
        "data_schedule": sd["data_schedule"],
    }
    env = {
        "schema": "mojolearn.small-mlp-checkpoint.v1",
        "payload": payload,
        "payload_sha256": hashlib.sha256(canon(payload)[:-1]).hexdigest(),
    }
    if profile is not None:
        env["arithmetic_profile"] = profile
    return canon(env)


def test_reference_profile_refused_then_migrated(tmp_path):
    t = trained(4)
    path = tmp_path / "reference.json"
    path.write_bytes(reference_layout_file(t))
    with pytest.raises(
        ValueError,
        match=r"arithmetic profile is none \(the reference's default "
        r"mojolearn.neural-training.fp32.v1\).*allow_profile_change",
    ):
        ml.SmallMLPTrainer.from_checkpoint(path)
    u = ml.SmallMLPTrainer.from_checkpoint(path, allow_profile_change=True)
    assert u.state_hash() == t.state_hash() and u.step_ == t.step_
    info = checkpoint.verify(path, allow_profile_change=True)
    assert info["profile"] == "mojolearn.neural-training.fp32.v1"
    # After the migration the trainer saves under our profile.
    u.save_checkpoint(tmp_path / "ours.json")
    assert (
        json.loads((tmp_path / "ours.json").read_bytes())["arithmetic_profile"]
        == checkpoint.PROFILE
    )
    # Our own file, written by hand with our profile, loads without the flag.
    path.write_bytes(reference_layout_file(t, checkpoint.PROFILE))
    assert ml.SmallMLPTrainer.from_checkpoint(path).state_hash() == t.state_hash()


def test_mode_mismatch_refused():
    t = trained(5)
    env = json.loads(checkpoint.dumps(t.state_dict()))
    other = "fast" if t.numeric_mode_used() == "identical" else "identical"
    env["payload"]["numeric_mode"] = other
    state = checkpoint.loads(rewrap(env))  # the format itself is fine ...
    with pytest.raises(ValueError, match="saved in numeric mode"):  # ... the process is not
        t.load_state_dict(state)


def test_mutation_fuzz(seed):
    """Random byte edits: `loads` accepts or raises ValueError, nothing else."""
    rng = random.Random(seed)
    good = checkpoint.dumps(trained(6, 1).state_dict())
    accepted = 0
    for _ in range(300):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(3)
            i = rng.randrange(len(data))
            if op == 0:
                data[i] = rng.randrange(256)
            elif op == 1:
                del data[i : i + rng.randint(1, 50)]
            else:
                data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 5)))
        try:
            checkpoint.loads(bytes(data))
            accepted += 1
        except ValueError:
            pass
    assert accepted < 300, f"seed {seed}"


def test_dumps_bound():
    sd = trained(7, 1).state_dict()
    assert len(checkpoint.dumps(sd)) < checkpoint.MAX_BYTES
    sd["data_schedule"] = {f"k{i}": "x" * 2000 for i in range(20)}  # bypasses the trainer
    with pytest.raises(ValueError, match="exceed the 32768-byte bound"):
        checkpoint.dumps(sd)
    assert S.TOTAL == 195


def test_structured_fuzz(seed):
    """Replace random payload nodes with random JSON values and re-hash: `loads` accepts or
    raises ValueError, nothing else."""
    rng = random.Random(seed)
    good = json.loads(checkpoint.dumps(trained(8, 1).state_dict()))
    values = [None, True, 0, -1, 1.5, "", "x", [], {}, [1, 2], {"dtype": "<f4"}, 1 << 40]

    paths = [path for path, _ in nodes(good["payload"])][1:]
    for _ in range(200):
        env = json.loads(json.dumps(good))
        path = rng.choice(paths)
        parent = env["payload"]
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = rng.choice(values)
        try:
            checkpoint.loads(rewrap(env))
        except ValueError:
            pass


def test_each_trainer_reads_its_schema_record(tmp_path):
    # One record per trainer class: its state and file schemas, its bound, its optimizer
    # fields; the table finds it by either name, and the command line builds its class.
    from mojolearn._mlp.schema import MLP_RECORD, SCHEMAS, SMALL_RECORD, record
    from mojolearn.cli.trainers import trainer_for

    mlp = ml.MLPTrainer([8, 5, 3], seed=4, data_schedule=SCHEDULE)
    for t, rec in ((trained(), SMALL_RECORD), (mlp, MLP_RECORD)):
        assert type(t)._SCHEMA_REC is rec and rec.api == type(t).__name__
        state = t.state_dict()
        assert state["schema"] == rec.state_schema
        assert set(state["optimizer"]) == rec.optimizer_keys
        t.save_checkpoint(tmp_path / "ck")
        env = json.loads((tmp_path / "ck").read_bytes())
        assert env["schema"] == rec.file_schema
        assert SCHEMAS[rec.file_schema] is SCHEMAS[rec.state_schema] is rec
        assert type(trainer_for(checkpoint.load(tmp_path / "ck", schema=None))) is type(t)
        other = MLP_RECORD if rec is SMALL_RECORD else SMALL_RECORD
        assert record(rec.file_schema, "file_schema", other) is rec
        # a name of the other kind, another name or an unhashable value: the default
        for name in (rec.state_schema, "garbage", ["x"], None):
            assert record(name, "file_schema", other) is other
    assert SMALL_RECORD.max_bytes == checkpoint.MAX_BYTES and SMALL_RECORD.spec is _spec.SMALL
    assert MLP_RECORD.max_bytes == checkpoint.MLP_MAX_BYTES and MLP_RECORD.spec is None
    with pytest.raises(AttributeError):
        SMALL_RECORD.max_bytes = 1  # frozen
