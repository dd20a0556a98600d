"""MLPTrainer checkpoint files (`mojolearn.mlp-checkpoint.v1`): round trips byte for byte,
every single-bit flip refused, tensors checked against the declared architecture, the size
bound before parsing, and every refusal before any trainer state changes. The writer is the
small schema's (`_files.write_atomic`), whose kill -9 and I/O-fault suites cover both."""

import copy
import json
import math
import os
import random

import mojolearn as ml
import pytest
from mojolearn import checkpoint

from ._util import record


def _trainer(sizes, seed, steps=2):
    rng = random.Random(seed)
    t = ml.MLPTrainer(sizes, seed=seed, data_schedule={"seed": seed, "note": "x"}, lr=0.01)
    for _ in range(steps):
        X = ml.Array.from_list(
            [[rng.uniform(-1, 1) for _ in range(sizes[0])] for _ in range(3)], "<f4"
        )
        y = ml.Array.from_list([rng.randrange(sizes[-1]) for _ in range(3)], "<i4")
        t.train_step(X, y)
    return t


def _seal(envelope):
    envelope["payload_sha256"] = checkpoint.state_hash(envelope["payload"])
    envelope["envelope_sha256"] = checkpoint.envelope_hash(envelope)
    return json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode() + b"\n"


@pytest.mark.parametrize("sizes", [[3, 2], [4, 5, 3], [6, 4, 4, 4, 2]])
def test_round_trip_is_byte_exact_and_hash_is_the_state_hash(tmp_path, sizes):
    t = _trainer(sizes, 1)
    path = tmp_path / "m.ckpt"
    t.save_checkpoint(path)
    data = path.read_bytes()
    assert checkpoint.dumps(checkpoint.loads(data, schema=checkpoint.MLP_FILE_SCHEMA)) == data
    envelope = json.loads(data)
    assert envelope["schema"] == "mojolearn.mlp-checkpoint.v1"
    assert envelope["payload_sha256"] == t.state_hash()
    u = ml.MLPTrainer.from_checkpoint(path)
    assert u.state_hash() == t.state_hash() and u.layer_sizes == sizes
    u.save_checkpoint(tmp_path / "again.ckpt")
    assert (tmp_path / "again.ckpt").read_bytes() == data
    info = checkpoint.verify(path)
    assert info["schema"] == "mojolearn.mlp-checkpoint.v1" and info["architecture"] == sizes


def test_every_single_bit_flip_is_refused(tmp_path):
    data = checkpoint.dumps(_trainer([1, 2], 3).state_dict())
    refused = 0
    for i in range(len(data)):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[i] ^= 1 << bit
            with pytest.raises(ValueError):
                checkpoint.loads(bytes(flipped), schema=checkpoint.MLP_FILE_SCHEMA)
            refused += 1
    record("R2_mlp", flips=refused, refused=refused, bytes=len(data))


def _edited(t, edit):
    envelope = json.loads(checkpoint.dumps(t.state_dict()))
    edit(envelope["payload"])
    return _seal(envelope)


@pytest.mark.parametrize(
    "what,edit,message",
    [
        (
            "wider hidden",
            lambda p: p.update(architecture=[4, 6, 3]),
            r"tensor weight1 shape must be \[6, 4\]",
        ),
        (
            "more layers",
            lambda p: p.update(architecture=[4, 5, 5, 3]),
            r"weights must hold exactly",
        ),
        (
            "width zero",
            lambda p: p.update(architecture=[4, 0, 3]),
            r"layer_sizes\[1\] must be in \[1, 65536\]",
        ),
        ("one class", lambda p: p.update(architecture=[4, 5, 1]), r"classes\) must be >= 2"),
        (
            "float width",
            lambda p: p.update(architecture=[4, 5.0, 3]),
            r"architecture must be a list of JSON integers",
        ),
        (
            "bool width",
            lambda p: p.update(architecture=[4, True, 3]),
            r"architecture must be a list of JSON integers",
        ),
        (
            "not a list",
            lambda p: p.update(architecture="4,5,3"),
            r"architecture must be a list of JSON integers",
        ),
        ("huge", lambda p: p.update(architecture=[65536, 65536, 2]), r"at most 67,108,864"),
        (
            "short m",
            lambda p: p["optimizer"]["m"].update(hex=p["optimizer"]["m"]["hex"][:-8], shape=[42]),
            r"tensor m shape must be \[43\]",
        ),
        (
            "flags added",
            lambda p: p["optimizer"].update(flags={"dtype": "<i4", "shape": [4], "hex": "0" * 32}),
            r"optimizer must hold exactly",
        ),
        (
            "small schema",
            lambda p: p.update(schema="mojolearn.small-mlp-trainer.v1"),
            r"state schema must be 'mojolearn.mlp-trainer.v1'",
        ),
        (
            "order",
            lambda p: p.update(parameter_order=["bias1", "weight1", "weight2", "bias2"]),
            r"parameter_order must be",
        ),
        (
            "negative v",
            lambda p: p["optimizer"]["v"].update(hex="000080bf" + p["optimizer"]["v"]["hex"][8:]),
            r"second moments\) must be >= 0",
        ),
    ],
)
def test_tensors_are_checked_against_the_declared_architecture(tmp_path, what, edit, message):
    t = _trainer([4, 5, 3], 2)
    data = _edited(t, edit)
    with pytest.raises(ValueError, match=message):
        checkpoint.loads(data, schema=checkpoint.MLP_FILE_SCHEMA)
    path = tmp_path / "e.ckpt"
    path.write_bytes(data)
    before = t.state_hash()
    with pytest.raises(ValueError):
        t.load_checkpoint(path)
    assert t.state_hash() == before
    with pytest.raises(ValueError):
        ml.MLPTrainer.from_checkpoint(path)


def test_size_bound_applies_before_parsing(tmp_path):
    t = _trainer([40, 64, 10], 4, steps=1)
    path = tmp_path / "big.ckpt"
    t.save_checkpoint(path)
    size = os.path.getsize(path)
    assert size > checkpoint.MAX_BYTES  # over the small schema's bound: read by its tail
    with pytest.raises(ValueError, match=rf"is larger than {size - 1} bytes \({size} bytes\)"):
        ml.MLPTrainer.from_checkpoint(path, max_bytes=size - 1)
    with pytest.raises(ValueError, match=r"max_bytes must be a positive int"):
        ml.MLPTrainer.from_checkpoint(path, max_bytes=0)
    assert ml.MLPTrainer.from_checkpoint(path, max_bytes=size).state_hash() == t.state_hash()
    # A large file whose tail does not name the MLP schema is held to the small bound unread.
    (tmp_path / "junk.ckpt").write_bytes(b"{" + b" " * 100000 + b"}\n")
    with pytest.raises(ValueError, match=r"is larger than 32768 bytes"):
        ml.MLPTrainer.from_checkpoint(tmp_path / "junk.ckpt")
    assert checkpoint.MLP_MAX_BYTES == 24 * 2**26 + 2**20


def test_schemas_do_not_cross(tmp_path):
    small = ml.SmallMLPTrainer(*ml.init_small_mlp(0), data_schedule={"a": 1})
    small.save_checkpoint(tmp_path / "s.ckpt")
    _trainer([8, 16, 3], 5).save_checkpoint(tmp_path / "m.ckpt")
    with pytest.raises(
        ValueError,
        match=r"schema must be 'mojolearn.mlp-checkpoint.v1', got "
        r"'mojolearn.small-mlp-checkpoint.v1'",
    ):
        ml.MLPTrainer.from_checkpoint(tmp_path / "s.ckpt")
    with pytest.raises(ValueError, match=r"schema must be 'mojolearn.small-mlp-checkpoint.v1'"):
        ml.SmallMLPTrainer.from_checkpoint(tmp_path / "m.ckpt")
    assert checkpoint.verify(tmp_path / "s.ckpt")["architecture"] == [8, 16, 3]
    assert checkpoint.verify(tmp_path / "m.ckpt")["schema"] == "mojolearn.mlp-checkpoint.v1"


def test_special_paths_are_refused_for_mlp_saves_too(tmp_path):
    t = _trainer([3, 2], 6, steps=0)
    os.mkfifo(tmp_path / "p.ckpt")
    for path, kind in (
        (tmp_path / "p.ckpt", "a FIFO"),
        (tmp_path, "a folder"),
        ("/dev/null", "a character device"),
    ):
        with pytest.raises(ValueError, match=f"is {kind}, not a regular file"):
            t.save_checkpoint(path)
        with pytest.raises(ValueError, match=f"is {kind}, not a regular file"):
            ml.MLPTrainer.from_checkpoint(path)
    assert sorted(os.listdir(tmp_path)) == ["p.ckpt"]


def _random_mlp_state(rng):
    """A random state MLPTrainer accepts: 1 to 3 layers of widths 1..6, random float32 bit
    patterns for weights and moments (v >= 0), a random valid config and schedule."""
    from mojolearn._mlp import spec as _layers
    from mojolearn._mlp import state as S

    from ._util import f32_bits, random_state

    sizes = [rng.randint(1, 6) for _ in range(rng.randint(1, 3))] + [rng.randint(2, 6)]
    spec = _layers.LayerSizes(sizes)
    base = random_state(rng, ml.numeric_mode_used())
    return {
        "schema": S.MLP_SCHEMA,
        "architecture": sizes,
        "numeric_mode": base["numeric_mode"],
        "parameter_order": list(spec.names),
        "weights": {
            n: f32_bits(rng, math.prod(s)).reshape(*s) for n, s in zip(spec.names, spec.shapes)
        },
        "optimizer": {
            "kind": "AdamW",
            "step": base["optimizer"]["step"],
            "m": f32_bits(rng, spec.total),
            "v": f32_bits(rng, spec.total, nonneg=True),
        },
        "config": base["config"],
        "data_schedule": base["data_schedule"],
    }


def test_fuzzed_bytes_and_states_are_refused_or_round_trip():
    """R1 and R9 for the MLP schema: random valid states round-trip byte for byte (and load
    into a trainer with the file's hash); mutated files (blind and structure-aware) are refused
    with ValueError or are exactly what the writer writes of what they decode to."""
    from . import _mutate
    from ._util import LONG, new_seed

    seed = new_seed()
    rng = random.Random(seed)
    states = [_random_mlp_state(rng) for _ in range(300 if LONG else 60)]
    files = [checkpoint.dumps(s) for s in states]
    for data in files:
        assert checkpoint.dumps(checkpoint.loads(data, schema=checkpoint.MLP_FILE_SCHEMA)) == data
        t = ml.MLPTrainer._from_state(checkpoint.loads(data, schema=checkpoint.MLP_FILE_SCHEMA))
        assert t.state_hash() == json.loads(data)["payload_sha256"], f"seed {seed}"
    envelopes = [json.loads(f) for f in files]
    counts = {"refused": 0, "accepted": 0}
    n = 100_000 if LONG else 10_000
    for i in range(n):
        if rng.random() < 0.5:
            data, what = _mutate.blind(rng, rng.choice(files), files)
        else:
            data, what = _mutate.structured(rng, copy.deepcopy(rng.choice(envelopes)))
        try:
            state = checkpoint.loads(data, schema=checkpoint.MLP_FILE_SCHEMA)
        except ValueError:
            counts["refused"] += 1
            continue
        except Exception as exc:  # noqa: BLE001 - the point is to catch anything
            pytest.fail(f"seed {seed}, input {i} ({what}): {type(exc).__name__}: {exc}")
        # A deleted envelope_sha256 is the earlier layout, still read: of the same state.
        profile = json.loads(data).get("arithmetic_profile", checkpoint.REFERENCE_PROFILE)
        assert _mutate.written(state, profile, data), f"seed {seed}, input {i} ({what})"
        counts["accepted"] += 1
    record("R1_mlp", inputs=n, **counts)
    record("R9_mlp", states=len(states), byte_equal=len(states))
