"""`mojolearn.Trainer` checkpoints (issue 35): schema `mojolearn.model-checkpoint.v1`.

- Exact resume: N steps uninterrupted == N/2 steps + save + a NEW process + load + N/2 steps,
  the same state hash and the same file bytes (LayerNorm, Dropout, Residual, MSE;
  cross-entropy over (T, C) positions; a GPT on token ids).
- The file is canonical, round-trips byte for byte, its payload hash is `state_hash()`.
- Every single-byte change is refused; malformed payloads (re-sealed with valid hashes, so
  the payload's own checks answer) are refused by name, an absurd model before allocating.
- `load_state_dict` refusals change nothing; `verify` and `mojolearn verify` read the file.
"""

import copy
import json
import os
import random
import subprocess
import sys

import mojolearn as ml
import pytest
from mojolearn import checkpoint, nn
from mojolearn._mlp.codec import envelope_bytes
from mojolearn._model import persist

from tests.helpers import run_python

MODEL = checkpoint.MODEL_FILE_SCHEMA

# The two models and their data, shared with the resuming process (it runs this source).
SETUP = """
import random
import mojolearn as ml
from mojolearn import nn


def f32(x):
    import struct
    return struct.unpack("<f", struct.pack("<f", x))[0]


def make(kind, seed):
    sched = ml.WarmupCosineLR(5e-3, warmup_steps=2, total_steps=6)
    if kind == "mse":
        model = nn.Sequential(
            nn.Linear(6, 16), nn.LayerNorm(16), nn.Dropout(0.2),
            nn.Residual(nn.Linear(16, 16), nn.ReLU()), nn.Linear(16, 3),
        )
        return ml.Trainer(model, input_shape=(6,), loss="mse", seed=seed, lr_schedule=sched,
                          data_schedule={"seed": seed % 1000})
    if kind == "cnn":
        model = nn.Sequential(nn.Conv2d(1, 3, (3, 2), padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.AvgPool2d(2, 1), nn.Flatten(), nn.Linear(3 * 1 * 1, 3))
        return ml.Trainer(model, input_shape=(1, 4, 4), seed=seed, lr=1e-2)
    if kind == "gpt":
        return ml.Trainer(nn.gpt(7, 8, 1, 2, 8), input_shape=(6,), seed=seed, lr=1e-2)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.LayerNorm(8), nn.Dropout(0.2),
                          nn.Linear(8, 3))
    return ml.Trainer(model, input_shape=(5, 4), seed=seed, lr=1e-2)


def batches(kind, seed, n):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        rows = rng.randrange(1, 9)
        if kind == "cnn":  # flat (rows, C·H·W) batches
            X = ml.Array.from_list([[f32(rng.gauss(0, 1)) for _ in range(16)] for _ in range(rows)])
            y = ml.Array.from_list([rng.randrange(3) for _ in range(rows)], "<i4")
        elif kind == "gpt":
            X, y = (ml.Array.from_list([[rng.randrange(7) for _ in range(6)] for _ in range(rows)],
                                       "<i4") for _ in range(2))
        elif kind == "mse":
            X = ml.Array.from_list([[f32(rng.gauss(0, 1)) for _ in range(6)] for _ in range(rows)])
            y = ml.Array.from_list([[f32(rng.gauss(0, 1)) for _ in range(3)] for _ in range(rows)])
        else:
            X = ml.Array.from_list(
                [[[f32(rng.gauss(0, 1)) for _ in range(4)] for _ in range(5)] for _ in range(rows)]
            )
            y = ml.Array.from_list([[rng.randrange(3) for _ in range(5)] for _ in range(rows)], "<i4")
        out.append((X, y))
    return out
"""
namespace: dict = {}
exec(SETUP, namespace)
make, batches = namespace["make"], namespace["batches"]

RESUME = (
    SETUP
    + """
import json
kind, seed, src, dst = ARGS
t = ml.Trainer.from_checkpoint(src)
losses = [t.train_step(X, y)["loss"] for X, y in batches(kind, seed, 6)[t.step_:]]
t.save_checkpoint(dst)
print(json.dumps({"losses": [x.hex() for x in losses], "step": t.step_, "hash": t.state_hash()}))
"""
)


@pytest.mark.parametrize("kind", ["mse", "cross_entropy_positions", "cnn", "gpt"])
def test_exact_resume_in_a_new_process(tmp_path, seed, kind):
    seed %= 1 << 64
    data = batches(kind, seed, 6)
    full = make(kind, seed)
    losses = [full.train_step(X, y)["loss"] for X, y in data]
    half = make(kind, seed)
    first = [half.train_step(X, y)["loss"] for X, y in data[:3]]
    src, dst, whole = tmp_path / "half.json", tmp_path / "resumed.json", tmp_path / "full.json"
    half.save_checkpoint(src)
    args = (kind, seed, str(src), str(dst))
    out = json.loads(run_python(f"ARGS = {args!r}\n" + RESUME))
    assert first + [float.fromhex(x) for x in out["losses"]] == losses, f"seed {seed}"
    assert out["step"] == full.step_ == 6
    assert out["hash"] == full.state_hash()
    full.save_checkpoint(whole)
    assert dst.read_bytes() == whole.read_bytes()


def _trained(seed=3, kind="mse", steps=2):
    t = make(kind, seed)
    for X, y in batches(kind, seed, steps):
        t.train_step(X, y)
    return t


def _small(seed=1):
    t = ml.Trainer(nn.Sequential(nn.Linear(3, 2)), input_shape=(3,), loss="mse", seed=seed)
    X = ml.Array.from_list([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]])
    t.train_step(X, ml.Array.from_list([[1.0, 0.0], [0.0, 1.0]]))
    return t


def test_the_file_is_canonical_round_trips_and_hashes_the_state(tmp_path):
    t = _trained()
    path = tmp_path / "m.json"
    t.save_checkpoint(path)
    data = path.read_bytes()
    envelope = json.loads(data)
    assert json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode() + b"\n" == data
    assert envelope["schema"] == MODEL and envelope["arithmetic_profile"] == checkpoint.PROFILE
    assert envelope["payload"]["schema"] == "mojolearn.model-state.v1"
    assert (
        envelope["payload_sha256"] == t.state_hash() == checkpoint.state_hash(envelope["payload"])
    )
    assert envelope["envelope_sha256"] == checkpoint.envelope_hash(envelope)
    assert persist.dumps(checkpoint.loads(data, schema=MODEL)) == data
    u = ml.Trainer.from_checkpoint(path)
    assert u.state_hash() == t.state_hash() and u.step_ == t.step_
    assert u.model == t.model and u.lr_schedule is not None
    assert checkpoint.load(path, schema=MODEL)["step"] == 2
    # An MLP load refuses it by schema (the command line's readers use these).
    with pytest.raises(ValueError, match="schema must be"):
        checkpoint.load(path, schema=None)
    report = checkpoint.verify(path)
    assert report["schema"] == MODEL and report["state_hash"] == t.state_hash()
    assert report["step"] == 2 and report["model"] == t.state_dict()["model"]


def test_every_single_byte_change_is_refused(seed):
    data = persist.dumps(_small().state_dict())
    rng = random.Random(seed)
    positions = rng.sample(range(len(data)), min(2000, len(data)))
    for at in positions:
        bad = bytearray(data)
        bad[at] = (bad[at] + rng.randrange(1, 256)) % 256
        with pytest.raises(ValueError):
            checkpoint.loads(bytes(bad), schema=MODEL)
    assert checkpoint.loads(data, schema=MODEL)["step"] == 1


def _sealed(payload):
    """File bytes for an edited payload with valid hashes: the payload's checks must answer."""
    return envelope_bytes(MODEL, payload)


def _payload(t):
    return persist.payload(t.state_dict())


def _layers(p):
    return p["model"]["model"]["layers"]


def _edit_unknown_layer(p):
    _layers(p)[1]["layer"] = "Conv9d"


def _edit_layer_field(p):
    _layers(p)[0]["padding"] = 1


def _edit_payload_field(p):
    p["extra"] = 1


def _edit_residual(p):
    _layers(p)[3]["layers"][0]["out_features"] = 8


def _edit_shape(p):
    p["params"]["0.weight"]["shape"] = [6, 16]


def _edit_missing(p):
    del p["m"]["4.bias"]


def _edit_nan(p):
    h = p["params"]["4.weight"]["hex"]
    p["params"]["4.weight"]["hex"] = "0000c07f" + h[8:]


def _edit_negative_v(p):
    h = p["v"]["0.bias"]["hex"]
    p["v"]["0.bias"]["hex"] = "000080bf" + h[8:]


def _edit_absurd(p):
    p["model"] = {
        "input_shape": [1 << 20],
        "loss": "mse",
        "model": {
            "layer": "Sequential",
            "layers": [
                {"layer": "Linear", "in_features": 1 << 20, "out_features": 1 << 20, "bias": True}
            ],
        },
    }


def _edit_chain(p):
    p["model"]["input_shape"] = [7]


def _edit_int_config(p):
    p["config"]["lr"] = 1


def _edit_bare_input_shape(p):
    p["model"]["input_shape"] = 6


def _edit_float_dim(p):
    _layers(p)[0]["in_features"] = 6.0


def _edit_step(p):
    p["step"] = -1


def _edit_seed(p):
    p["seed"] = True


def _edit_lr_schedule(p):
    p["lr_schedule"]["kind"] = "exponential"


def _edit_loss(p):
    p["model"]["loss"] = "hinge"


@pytest.mark.parametrize(
    "edit, message",
    [
        (_edit_unknown_layer, "layer 1: unknown layer 'Conv9d'"),
        (_edit_layer_field, r"layer 0: a Linear record holds exactly"),
        (_edit_payload_field, r"payload has missing fields \[\] / unknown fields \['extra'\]"),
        (_edit_residual, "Residual: its layers map a last axis of 16 to 8"),
        (_edit_shape, r"tensor params\['0.weight'\] shape must be \[16, 6\]"),
        (_edit_missing, r"state m has missing fields \['4.bias'\]"),
        (_edit_nan, r"params\['4.weight'\] must be finite"),
        (_edit_negative_v, r"v \(second moments\) must be >= 0"),
        (_edit_absurd, "parameters, at most"),
        (_edit_chain, "layer 0 Linear"),
        (_edit_int_config, "config is not what mojolearn writes"),
        (_edit_bare_input_shape, "model is not what mojolearn writes"),
        (_edit_float_dim, "in_features must be an int"),
        (_edit_step, "step must be in"),
        (_edit_seed, "seed must be an int"),
        (_edit_lr_schedule, "lr_schedule must be a record"),
        (_edit_loss, "loss must be one of"),
    ],
)
def test_malformed_payloads_are_refused_by_name(edit, message):
    p = _payload(_trained())
    edit(p)
    with pytest.raises(ValueError, match=message):
        checkpoint.loads(_sealed(p), schema=MODEL)


def test_an_absurd_model_is_refused_before_its_tensors(tmp_path):
    """A 2**40-parameter Linear: refused by the record's parameter count, whatever the
    tensors say (so nothing of its size is ever decoded or allocated)."""
    p = _payload(_small())
    _edit_absurd(p)
    p["params"] = p["m"] = p["v"] = "not even tensors"
    path = tmp_path / "absurd.json"
    path.write_bytes(_sealed(p))
    with pytest.raises(ValueError, match=r"1,099,512,676,352 parameters"):
        ml.Trainer.from_checkpoint(path)


def test_envelope_and_bounds(tmp_path):
    t = _small()
    path = tmp_path / "s.json"
    t.save_checkpoint(path)
    data = path.read_bytes()
    with pytest.raises(ValueError, match=r"is larger than 100 bytes \(1[0-9]{3} bytes\)"):
        ml.Trainer.from_checkpoint(path, max_bytes=100)
    with pytest.raises(ValueError, match="max_bytes must be a positive int"):
        ml.Trainer.from_checkpoint(path, max_bytes=0)
    with pytest.raises(TypeError, match="allow_profile_change must be a bool"):
        ml.Trainer.from_checkpoint(path, allow_profile_change=1)  # type: ignore[arg-type]
    env = json.loads(data)
    # Without envelope_sha256 the profile would lie outside every hash: refused.
    del env["envelope_sha256"]
    bare = json.dumps(env, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    with pytest.raises(ValueError, match="envelope holds exactly"):
        checkpoint.loads(bare, schema=MODEL)
    dup = data.replace(b'{"arithmetic_profile"', b'{"arithmetic_profile":"x","arithmetic_profile"')
    with pytest.raises(ValueError, match="duplicate key 'arithmetic_profile'"):
        checkpoint.loads(dup, schema=MODEL)
    # Another profile: refused unless migrating.
    env = json.loads(data)
    env["arithmetic_profile"] = "mojolearn.portable-fp32.v9"
    env["envelope_sha256"] = checkpoint.envelope_hash(env)
    other = tmp_path / "other.json"
    other.write_bytes(json.dumps(env, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    with pytest.raises(ValueError, match="arithmetic profile is 'mojolearn.portable-fp32.v9'"):
        ml.Trainer.from_checkpoint(other)
    assert ml.Trainer.from_checkpoint(other, allow_profile_change=True).state_hash() == (
        t.state_hash()
    )
    # An MLP trainer's loader refuses it by schema, and Trainer refuses MLP files.
    with pytest.raises(ValueError, match="schema must be"):
        ml.MLPTrainer.from_checkpoint(path)
    mlp = tmp_path / "mlp.json"
    ml.MLPTrainer([3, 4, 2], data_schedule={"d": 1}).save_checkpoint(mlp)
    with pytest.raises(ValueError, match="schema must be 'mojolearn.model-checkpoint.v1'"):
        ml.Trainer.from_checkpoint(mlp)
    assert checkpoint.verify(mlp)["schema"] == checkpoint.MLP_FILE_SCHEMA


def _bad_states(t):
    sd = t.state_dict()
    other = ml.Trainer(nn.Sequential(nn.Linear(3, 3)), input_shape=(3,), loss="mse")

    def edited(fn):
        s = copy.deepcopy(sd)
        fn(s)
        return s

    def nan(s):
        s["params"]["0.weight"] = ml.Array.from_list([[float("nan")] * 3] * 2)

    yield other.state_dict(), "not this trainer's"
    yield edited(lambda s: s.pop("seed")), r"missing fields \['seed'\]"
    yield edited(lambda s: s.update(step=1 << 31)), "step must be in"
    yield edited(lambda s: s["params"].pop("0.bias")), r"missing fields \['0.bias'\]"
    yield edited(lambda s: s["m"].update({"0.bias": ml.Array.from_list([0.0] * 3)})), "shape"
    yield edited(nan), "must be finite"
    yield edited(lambda s: s["v"].update({"0.bias": ml.Array.from_list([-1.0, 0.0])})), ">= 0"
    yield edited(lambda s: s["config"].update(lr=-1.0)), "learning rate"
    yield edited(lambda s: s.update(schema="mojolearn.mlp-trainer.v1")), "state schema"
    yield edited(lambda s: s.update(data_schedule=[1])), "data_schedule"
    yield edited(lambda s: s.update(lr_schedule={"kind": "x"})), "lr_schedule"


def test_load_state_dict_refusals_change_nothing():
    t = _small()
    before = t.state_hash()
    for state, message in _bad_states(t):
        with pytest.raises(ValueError, match=message):
            t.load_state_dict(state)
        assert t.state_hash() == before
    with pytest.raises(ValueError, match="the state has no schedule"):
        t.load_state_dict(t.state_dict(), lr_schedule=ml.ConstantLR(1e-3))
    assert t.state_hash() == before


def test_load_state_dict_takes_the_seed_and_every_dropout_key():
    a = _trained(seed=11, steps=1)
    b = make("mse", 12)
    assert b.state_hash() != a.state_hash()
    assert b.load_state_dict(a.state_dict()) is b
    assert b.state_hash() == a.state_hash()
    for X, y in batches("mse", 11, 3):
        assert a.train_step(X, y)["loss"] == b.train_step(X, y)["loss"]
    assert b.state_hash() == a.state_hash()


def test_save_refuses_what_would_not_load(tmp_path):
    t = _small()
    state = t.state_dict()
    state["v"]["0.weight"] = ml.Array.from_list([[-1.0] * 3] * 2)
    with pytest.raises(ValueError, match="not written, the file would not load"):
        persist.dumps(state)
    folder = tmp_path / "a-folder"
    folder.mkdir()
    with pytest.raises(ValueError, match="not a regular file"):
        t.save_checkpoint(folder)
    assert os.listdir(folder) == [] and sorted(os.listdir(tmp_path)) == ["a-folder"]


def test_cli_verify_reads_a_model_checkpoint(tmp_path):
    path = tmp_path / "m.json"
    t = _trained(kind="cross_entropy_positions")
    t.save_checkpoint(path)
    out = run_python(
        "import sys; from mojolearn.cli import main; "
        f"sys.exit(main(['verify', '--json', {str(path)!r}]))"
    )
    report = json.loads(out)
    assert report["ok"] is True and report["state_hash"] == t.state_hash()
    assert report["next_step"].startswith("finite (step 3 on a probe batch)")
    data = bytearray(path.read_bytes())
    data[200] ^= 1
    path.write_bytes(bytes(data))
    proc = subprocess.run(
        [sys.executable, "-m", "mojolearn", "verify", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "INVALID" in proc.stdout


def _paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*path, i))


def test_edited_payloads_are_refused_or_are_what_the_writer_writes(seed):
    """Any field replaced, removed or added (re-sealed): a ValueError, or a state whose
    payload is, byte for byte, the one the file holds (so its hash is the file's)."""
    base = _payload(_trained())
    rng = random.Random(seed)
    values = [None, True, 0, -1, 1.5, 2.0**70, "x", [], {}, [1, 2], {"a": 1}, 2**64, 1 << 20]
    where = [p for p in _paths(base) if p and p[-1] != "hex"]
    for _ in range(300):
        p = copy.deepcopy(base)
        path = rng.choice(where)
        parent = p
        for key in path[:-1]:
            parent = parent[key]
        op = rng.randrange(3)
        if op == 0:
            parent[path[-1]] = rng.choice(values)
        elif isinstance(parent, dict):
            if op == 1:
                del parent[path[-1]]
            else:
                parent["zz"] = rng.choice(values)
        else:
            parent.append(rng.choice(values))
        try:
            state = checkpoint.loads(_sealed(p), schema=MODEL)
        except ValueError:
            continue
        assert persist.payload(state) == p, path
        assert checkpoint.state_hash(persist.payload(state)) == checkpoint.state_hash(p)


def test_a_state_of_the_other_numeric_mode_is_refused_and_changes_nothing():
    import mojolearn as ml
    from mojolearn import nn

    t = ml.Trainer(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)), input_shape=(3,))
    state = t.state_dict()
    running = state["numeric_mode"]
    assert running == ml.numeric_mode_used()
    before = t.state_hash()
    other = dict(state, numeric_mode="fast" if running == "identical" else "identical")
    with pytest.raises(
        ValueError,
        match=f"saved in numeric mode {other['numeric_mode']!r} but this process runs {running!r}",
    ):
        t.load_state_dict(other)
    with pytest.raises(ValueError, match="numeric_mode must be one of"):
        t.load_state_dict(dict(state, numeric_mode="fastest"))
    assert t.state_hash() == before
