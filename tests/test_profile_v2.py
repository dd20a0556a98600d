"""Profile `mojolearn.portable-fp32.v2` (issue 27): accuracy beside torch, one GEMM for both
modes, one set of bits for both x86-64 builds and every thread count, v1 checkpoints, and the
default wine run's state hash.

1. Six AdamW steps (lr 1e-2, weight decay 0.01, default betas and eps) from the same weights
   (torch's default initialization, seeded) and batches: identical mode beside torch float32
   and torch float64 (`torch.optim.AdamW`, one thread), at [8, 16, 3], [64, 128, 10],
   [784, 256, 10] and [16, 32, 32, 32, 4]. Distance from float64 after the steps, asserted
   within 1.5x of torch float32's, as the median over seeds: the RMS over the per-row losses
   of a fixed batch (each network's own float32 logits, losses in binary64), the RMS over those
   logits, and the RMS over the weights. Profile v1 (float32-formed optimizer scalars) fails
   it at every size: row losses 3.1-14x, logits 3.3-15x, weights 3.7-8.6x (1.2x at
   [784, 256, 10]). A single seed is noisy: Adam's early steps move a weight by about lr
   whatever its gradient's size, so a gradient element near eps turns its rounding error into
   a 1e-5 jump of one weight, on either side by chance (at [784, 256, 10], 2e5 weights,
   per-seed ratios run 0.2-7x). Printed (with -s), not
   asserted: the mean loss's distance (the difference of two means, each near zero, so a
   median of 7 ratios is too noisy to hold to 1.5x), the forward pass before training
   (identical mode's p-ascending chain over k = 784 is 1.9-2.1x torch's, whose k-blocked
   sums do not grow with k; 1.2x at [64, 128, 10], 1.0x below), and the float32 loss each
   framework reports (identical mode sums the row losses in one float32 chain, rows ascending:
   1.5-7x torch's distance; that measures the loss reduction, not the training).
2. Identical-mode `matmul` equals fast mode's bit for bit, all four transposes, k past the
   k blocks (256 at AVX-512 width, 1024 at AVX2) and accumulating into C (`neural_gemm`); the
   trainers' forward pass (GEMM, bias, ReLU) is compared too.
3. The x86-64-v3 and x86-64-v4 identical bindings give the same bits: products, logits and
   state hashes after steps of SmallMLPTrainer (the lanes kernel) and MLPTrainer.
4. 1, 2 and 3 threads give the same bits at [784, 256, 10] batch 64 (and for `matmul`):
   tests/test_threads.py covers [64, 128, 10], [54, 256, 256, 7] and [30, 200, 3] in both modes.
5. v1 checkpoints: read by `checkpoint.load` and `verify`; an identical-mode v1 state is refused
   for resuming (one ValueError naming both profiles and the override) by both trainers'
   `from_checkpoint` and `load_checkpoint` and by `mojolearn train --resume` (one line, exit 2),
   and resumes with `allow_profile_change=True` / `--allow-profile-change`; a fast-mode v1 state
   resumes without it. The v1 files are real ones, in tests/golden/ (written by mojolearn under
   profile v1, f4f8d88's arithmetic: `v1_wine_step5.ckpt` by `mojolearn train --steps 5`,
   `v1_mlp_identical.ckpt` and `v1_mlp_fast.ckpt` by MLPTrainer.save_checkpoint after three
   steps, see `_v1_batches`), and v2 files converted at test time (`to_v1`).
6. The default `mojolearn train` run's state hash under profile v2 (README pins it).
"""

import array
import copy
import json
import os
import random
import shutil
import statistics

import mojolearn as ml
import pytest
from mojolearn import Array, checkpoint
from mojolearn._mlp import rng as _rng
from mojolearn._runtime import backend as _backend
from mojolearn._runtime.portable import round_f32

from tests.helpers import run_python
from tests.test_cli import assert_one_line_error, done_record, ok, run_cli

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
V1_WINE = os.path.join(GOLDEN, "v1_wine_step5.ckpt")
V1_MLP = os.path.join(GOLDEN, "v1_mlp_identical.ckpt")
V1_MLP_FAST = os.path.join(GOLDEN, "v1_mlp_fast.ckpt")
# Profile v1's bits, for the record: `mojolearn train --steps 8` and the default run (270
# steps), and v1_mlp_identical.ckpt after its next step.
V1_WINE_STEP8_HASH = "7e0c2e493ec9b8666a3e50678805dbb02002accf6bda8ef4987c68c4897e3b66"
V1_WINE_DEFAULT_HASH = "cc4c306b383132863e3732f6fc34266b62de710f755c74546ee5decaf6cf3498"
V1_MLP_STEP4_HASH = "ceb2a572c6cdbccb33960ea4e2e4ff9ee4c18a7eec4f96c254e87d2eab4b6ae3"
# The default `mojolearn train` run (wine, 270 steps, identical mode) under profile v2. Its
# data_schedule records the data's preprocessing since issue 29; without that record the
# payload hashes to the value pinned before it: the weights, moments and options are the same.
WINE_DEFAULT_HASH = "c67ffb176f9f675be79a667e42e974f7a73ffc09cf8b851460a60cc62a0e1f0a"
WINE_DEFAULT_HASH_BEFORE_PREPROCESSING = (
    "519a5d8d14c491846860477e53478bda3e2fec5f499fbc63a6f740c664dc8794"
)

IDENTICAL = _backend.requested_mode() == "identical"
needs_identical = pytest.mark.skipif(not IDENTICAL, reason="this process runs fast mode")

# A v2 file as a v1 writer would have written it: the profile named, the config rounded to
# float32 (v1 kept float32 hyperparameters), the payload hash recomputed. Also run in
# subprocesses, hence a string.
TO_V1 = """
import json as _json
from mojolearn import checkpoint as _C
from mojolearn._mlp import state as _S
from mojolearn._runtime.portable import round_f32

def to_v1(data):
    env = _json.loads(data)
    env["arithmetic_profile"] = _C.PROFILE_V1
    payload = env["payload"]
    payload["config"] = {k: round_f32(x) for k, x in payload["config"].items()}
    env["payload_sha256"] = _C.state_hash(payload)
    env["envelope_sha256"] = _C.envelope_hash(env)
    return _S.canonical(env) + b"\\n"
"""
_TO_V1 = {}
exec(TO_V1, _TO_V1)
to_v1 = _TO_V1["to_v1"]


def _uniform(rng, count):
    return [rng.uniform() * 2 - 1 for _ in range(count)]


# ---------------------------------------------------------------- 1. accuracy beside torch

# (sizes, training rows, seeds, rows of the fixed batch measured after the steps)
ACCURACY = [
    ([8, 16, 3], 32, 7, 256),
    ([64, 128, 10], 32, 7, 256),
    ([784, 256, 10], 16, 9, 64),
    ([16, 32, 32, 32, 4], 32, 7, 256),
]
ASSERTED = ("row losses", "logits", "weights")
PRINTED = ("loss", "forward0", "f32 loss")
LR, WEIGHT_DECAY, STEPS, WITHIN = 1e-2, 0.01, 6, 1.5


def _accuracy_run(torch, sizes, rows, seed, eval_rows):
    """{measure: (identical mode's distance from float64, torch float32's)} for one seed."""
    F = torch.nn.functional
    with torch.random.fork_rng():  # torch's default initialization, seeded
        torch.manual_seed(seed)
        layers = [torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])]
    start = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.ReLU())][:-1])
    ours = ml.MLPTrainer.from_torch(start, lr=LR, weight_decay=WEIGHT_DECAY)
    t32, t64 = copy.deepcopy(start), copy.deepcopy(start).double()
    opt32 = torch.optim.AdamW(t32.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    opt64 = torch.optim.AdamW(t64.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    g = torch.Generator().manual_seed(seed)

    def batch(n):
        X = torch.rand(n, sizes[0], generator=g) * 2 - 1
        return X, torch.randint(0, sizes[-1], (n,), generator=g)

    batches = [batch(rows) for _ in range(STEPS)]
    Xe, ye = batch(eval_rows)

    def rms(a, b):
        return float(torch.sqrt(torch.mean((a.double() - b.double()) ** 2)))

    with torch.no_grad():
        ref0 = t64(Xe.double())
        forward0 = (
            rms(torch.from_dlpack(ours.predict_logits(Xe)), ref0),
            rms(t32(Xe), ref0),
        )
    for X, y in batches:
        ours.train_step(X, y.to(torch.int32))
        for net, opt, dtype in ((t32, opt32, torch.float32), (t64, opt64, torch.float64)):
            opt.zero_grad()
            F.cross_entropy(net(X.to(dtype)), y).backward()
            opt.step()
    with torch.no_grad():
        logits64, logits32 = t64(Xe.double()), t32(Xe)
    logits = torch.from_dlpack(ours.predict_logits(Xe))
    loss64 = float(F.cross_entropy(logits64, ye))
    own_loss, _ = ours.loss_and_grads(Xe, ye.to(torch.int32))

    def flat(net):
        return torch.cat([p.detach().reshape(-1).double() for p in net.parameters()])

    def loss_of(z):
        return abs(float(F.cross_entropy(z.double(), ye)) - loss64)

    rows64 = F.cross_entropy(logits64, ye, reduction="none")

    def row_losses(z):
        return rms(F.cross_entropy(z.double(), ye, reduction="none"), rows64)

    w64 = flat(t64)
    return {
        "row losses": (row_losses(logits), row_losses(logits32)),
        "loss": (loss_of(logits), loss_of(logits32)),
        "logits": (rms(logits, logits64), rms(logits32, logits64)),
        "weights": (rms(flat(ours.to_torch()), w64), rms(flat(t32), w64)),
        "forward0": forward0,
        "f32 loss": (abs(own_loss - loss64), abs(float(F.cross_entropy(logits32, ye)) - loss64)),
    }


@needs_identical
def test_six_adamw_steps_within_1_5x_of_torch_float32():
    torch = pytest.importorskip("torch")
    pytest.importorskip("numpy")  # torch.optim needs it (torch._dynamo imports it)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # torch's float32 sums depend on its thread count
    try:
        failures = []
        print(
            f"\nmedian over seeds of distance from torch float64 (identical / torch float32); "
            f"asserted: {', '.join(ASSERTED)} <= {WITHIN}x"
        )
        for sizes, rows, seeds, eval_rows in ACCURACY:
            runs = [
                _accuracy_run(torch, sizes, rows, seed, eval_rows) for seed in range(1, seeds + 1)
            ]
            cells = []
            for measure in ASSERTED + PRINTED:
                pairs = [r[measure] for r in runs]
                ratio = statistics.median(a / b if b else float("inf") for a, b in pairs)
                ours = statistics.median(a for a, _ in pairs)
                theirs = statistics.median(b for _, b in pairs)
                cells.append(f"{measure} {ours:.3g}/{theirs:.3g}={ratio:.2f}x")
                if measure in ASSERTED and not ratio <= WITHIN:
                    per_seed = [f"{a:.3g}/{b:.3g}" for a, b in pairs]
                    failures.append(f"{sizes} {measure}: median {ratio:.2f}x ({per_seed})")
            print(f"{sizes} batch {rows}, {seeds} seeds: " + "; ".join(cells))
        assert not failures, "identical mode drifts from float64 more than torch float32:\n" + (
            "\n".join(failures)
        )
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------- 2-4. the same bits

# Products: all four transposes, edge tiles, k past a k block (256 at AVX-512, 1024 at AVX2),
# one product large enough to be split over threads (>= 2**22 multiply-adds).
PRODUCTS = [(1, 1, 1), (7, 3, 16), (13, 29, 300), (37, 41, 520), (3, 5, 0)]
ONE_TRANSPOSE = [(5, 70, 1025), (17, 33, 1100), (6, 40, 2100), (64, 64, 1100)]
SEED = int.from_bytes(os.urandom(4), "little")


def _f32_words(rng, count):
    """Random float32 values (as bits): signed zeros, subnormals, magnitudes 2**-60..2**20."""
    words = []
    for _ in range(count):
        sign, kind, mant = rng.getrandbits(1) << 31, rng.randrange(16), rng.getrandbits(23)
        if kind == 0:
            words.append(sign)
        elif kind == 1:
            words.append(sign | mant | 1)
        else:
            words.append(sign | (rng.randint(127 - 60, 127 + 20) << 23) | mant)
    return array.array("I", words).tobytes()


def _product_jobs(folder):
    rng = random.Random(SEED)
    shapes = [(m, n, k, ta, tb) for m, n, k in PRODUCTS for ta in (0, 1) for tb in (0, 1)]
    shapes += [(m, n, k, i % 2, i // 2 % 2) for i, (m, n, k) in enumerate(ONE_TRANSPOSE)]
    shapes += [  # random shapes, one with k > 1024
        (rng.randint(1, 40), rng.randint(1, 80), k, rng.randrange(2), rng.randrange(2))
        for k in (rng.randint(1, 300), rng.randint(257, 1024), rng.randint(1025, 2200))
    ]
    jobs = []
    for i, (m, n, k, ta, tb) in enumerate(shapes):
        path = os.path.join(folder, f"product{i}")
        with open(path, "wb") as f:
            f.write(_f32_words(rng, m * k + k * n + m * n))
        jobs.append((path, m, n, k, ta, tb))
    return jobs


BITS = """
import array, json
import mojolearn as ml
from mojolearn import Array
from mojolearn._runtime import backend as _backend
from mojolearn._mlp import rng as _rng
from mojolearn._runtime import threads as _threads
b = _backend.binding()
out = {"binding": [b.name, b.target_cpu, b.mode], "products": {}, "logits": {}, "hashes": {}}
for i, (path, m, n, k, ta, tb) in enumerate(JOBS):
    raw = array.array("f")
    raw.frombytes(open(path, "rb").read())
    a = Array.from_buffer(raw[: m * k]).reshape((k, m) if ta else (m, k))
    bb = Array.from_buffer(raw[m * k : m * k + k * n]).reshape((n, k) if tb else (k, n))
    c = Array.from_buffer(raw[m * k + k * n :]).reshape(m, n)
    name = f"#{i} {m}x{n}x{k} ta={ta} tb={tb}"
    product = ml.matmul(a, bb, transpose_a=bool(ta), transpose_b=bool(tb))
    out["products"][name] = product.tobytes().hex()
    if m * n:  # k = 0 reads neither operand (an empty one has no address): a stand-in
        at, bt = (a._addr, bb._addr) if k else (ml.zeros((1,))._addr,) * 2
        b.neural_gemm([at, bt, c._addr], [m, n, k, ta, tb, 1, 0, m])
    out["products"][name + " accumulate"] = c.tobytes().hex()
for sizes, rows in (([64, 128, 10], 32), ([784, 256, 10], 16), ([16, 32, 32, 32, 4], 33)):
    tr = ml.MLPTrainer(sizes, seed=3, data_schedule={"test": "bits"})
    r = _rng.SplitMix64(7)
    X = Array.from_list([r.uniform() * 2 - 1 for _ in range(rows * sizes[0])], "<f4").reshape(rows, -1)
    out["logits"][str(sizes)] = tr.predict_logits(X).tobytes().hex()
pool = _threads.pool()
def parts_run():
    return b.raw.pool_worker_parts([pool], []) if pool else 0
def train_all():
    hashes = {}
    for sizes, rows, steps in ([8, 16, 3], 7, 5), ([64, 128, 10], 32, 5), ([784, 256, 10], 64, 3):
        r = _rng.SplitMix64(sum(sizes))
        xs = [r.uniform() * 2 - 1 for _ in range(steps * rows * sizes[0])]
        ys = [r.randbelow(sizes[-1]) for _ in range(steps * rows)]
        X, y = Array.from_list(xs, "<f4").reshape(steps * rows, -1), Array.from_list(ys, "<i4")
        if sizes == [8, 16, 3]:
            w = ml.MLPTrainer(sizes, seed=4, data_schedule={"test": "bits"}).weights_
            tr = ml.SmallMLPTrainer(*(w[n] for n in ("weight1", "bias1", "weight2", "bias2")),
                                    data_schedule={"test": "bits"})
            for i in range(steps):
                tr.train_step(Array.from_list(xs[i * rows * 8 : (i + 1) * rows * 8], "<f4").reshape(rows, 8),
                              Array.from_list(ys[i * rows : (i + 1) * rows], "<i4"))
        else:
            tr = ml.MLPTrainer(sizes, seed=4, data_schedule={"test": "bits"})
            tr.train_steps(X, y, steps)
        hashes[str(sizes)] = tr.state_hash()
    return hashes
if b.mode == "identical":
    # With threads, train again (the same bits each time) until the workers took part in a
    # run, at most 20 runs: whether a worker gets a part of a 3-step run depends on how the
    # machine schedules it (a loaded machine ran them all on the main thread once).
    out["hashes"] = train_all()
    runs = 1
    while pool and parts_run() == 0 and runs < 20:
        out["hashes"] = train_all()
        runs += 1
out["worker_parts"] = parts_run()
print(json.dumps(out))
"""

_RUNS = {}


@pytest.fixture(scope="module")
def bits(tmp_path_factory):
    """bits(mode, level, threads): the BITS outputs of one subprocess (cached)."""
    jobs = _product_jobs(str(tmp_path_factory.mktemp("products")))

    def get(mode, level="auto", threads=1):
        key = (mode, level, threads)
        if key not in _RUNS:
            out = run_python(
                f"JOBS = {jobs!r}\n" + BITS,
                env={
                    "MOJOLEARN_NUMERIC_MODE": mode,
                    "MOJOLEARN_CPU_LEVEL": level,
                    "MOJOLEARN_NUM_THREADS": str(threads),
                    "MOJOLEARN_VENDOR": "cpu",
                },
                timeout=300,
            )
            _RUNS[key] = json.loads(out.strip().splitlines()[-1])
        return _RUNS[key]

    yield get
    _RUNS.clear()


def _differences(want, got, what):
    """'name: first differing float32 at i' for every entry of `want` that `got` differs in."""
    bad = []
    for name, hexes in want.items():
        other = got[name]
        if other != hexes:
            i = next((i for i in range(0, len(hexes), 8) if hexes[i : i + 8] != other[i : i + 8]))
            bad.append(
                f"{what} {name}: word {i // 8} is {other[i : i + 8]}, not {hexes[i : i + 8]}"
            )
    return bad


def test_identical_matmul_equals_fast_matmul_bit_for_bit(bits):
    identical, fast = bits("identical"), bits("fast")
    print(f"\nseed {SEED}: {identical['binding']} against {fast['binding']}")
    assert identical["binding"][2] == "identical" and fast["binding"][2] == "fast"
    assert len(identical["products"]) == 2 * (4 * len(PRODUCTS) + len(ONE_TRANSPOSE) + 3)
    bad = _differences(identical["products"], fast["products"], "product")
    assert not bad, f"seed {SEED}:\n" + "\n".join(bad)
    # Not a promise (fast mode may fuse the bias add): reported, not asserted.
    same = [s for s in identical["logits"] if identical["logits"][s] == fast["logits"][s]]
    print(f"predict_logits equal in both modes at {same} of {list(identical['logits'])}")


def test_x86_64_v3_and_v4_identical_bindings_give_the_same_bits(bits):
    if not (_backend._available("cpu", "identical", "_v4") and _backend.cpu_has_v4()):
        missing = sorted(_backend._V4_FLAGS - _backend.cpu_flags())
        pytest.skip(
            "no x86-64-v4 identical binding can run here: "
            + (f"this CPU lacks {', '.join(missing)}" if missing else "none is installed")
        )
    v3, v4 = bits("identical", "v3"), bits("identical")  # auto: v4 where it can run
    assert v3["binding"][1:] == ["x86-64-v3", "identical"], v3["binding"]
    assert v4["binding"][1:] == ["x86-64-v4", "identical"], v4["binding"]
    bad = _differences(v3["products"], v4["products"], "product")
    bad += _differences(v3["logits"], v4["logits"], "logits")
    bad += [f"state hash {s}" for s in v3["hashes"] if v3["hashes"][s] != v4["hashes"][s]]
    assert len(v3["hashes"]) == 3 and not bad, f"seed {SEED}:\n" + "\n".join(bad)


def test_one_two_and_three_threads_give_the_same_bits(bits):
    one = bits("identical")
    assert one["worker_parts"] == 0
    for threads in (2, 3):
        many = bits("identical", threads=threads)
        assert many["worker_parts"] > 0, f"{threads} threads: the workers never ran a part"
        assert many["hashes"] == one["hashes"], threads
        bad = _differences(one["products"], many["products"], "product")
        assert not bad, f"seed {SEED}, {threads} threads:\n" + "\n".join(bad)


# ---------------------------------------------------------------- 5. v1 checkpoints

V1_REFUSAL = (
    f"checkpoint: written in identical mode under arithmetic profile {checkpoint.PROFILE_V1!r}; "
    f"this mojolearn computes {checkpoint.PROFILE!r}, so resuming cannot reproduce the run "
    f"that wrote it. Pass allow_profile_change=True (CLI: --allow-profile-change) to continue "
    f"it under {checkpoint.PROFILE!r}"
)


def _v1_batches():
    """The batches v1_mlp_*.ckpt were trained on (three steps of 4 rows), and its fourth step
    (all 12 rows): MLPTrainer([6, 5, 3], seed=9, data_schedule={"fixture": "profile v1",
    "mode": mode}), train_steps(X, y, 3), save_checkpoint, train_steps(X, y, 1)."""
    rng = _rng.SplitMix64(4)
    X = Array.from_list(_uniform(rng, 12 * 6), "<f4").reshape((12, 6))
    return X, Array.from_list([rng.randbelow(3) for _ in range(12)], "<i4")


def _envelope(path):
    with open(path, "rb") as f:
        return json.loads(f.read())


def _constructed_v1(tmp_path, trainer, name):
    """`trainer`'s file (written under v2) converted to a v1 file at tmp_path / name."""
    v2 = tmp_path / (name + ".v2")
    trainer.save_checkpoint(v2)
    path = tmp_path / name
    path.write_bytes(to_v1(v2.read_bytes()))
    return path


def _small(seed, schedule):
    w = ml.MLPTrainer([8, 16, 3], seed=seed, data_schedule=schedule).weights_
    return ml.SmallMLPTrainer(
        *(w[f"{k}{i}"] for i in (1, 2) for k in ("weight", "bias")), data_schedule=schedule
    )


def _small_trainer(steps=3):
    tr = _small(2, {"test": "v1"})
    rng = _rng.SplitMix64(3)
    for _ in range(steps):
        X = Array.from_list(_uniform(rng, 5 * 8), "<f4").reshape((5, 8))
        tr.train_step(X, Array.from_list([rng.randbelow(3) for _ in range(5)], "<i4"))
    return tr


def _mlp_trainer(steps=3):
    tr = ml.MLPTrainer([5, 7, 3], seed=2, data_schedule={"test": "v1"})
    rng = _rng.SplitMix64(3)
    X = Array.from_list(_uniform(rng, steps * 4 * 5), "<f4").reshape((steps * 4, 5))
    tr.train_steps(X, Array.from_list([rng.randbelow(3) for _ in range(steps * 4)], "<i4"), steps)
    return tr


@pytest.fixture
def v1_files(tmp_path):
    """{name: (path, class)}: the real v1 files and v2 files converted to v1."""
    files = {
        "v1_wine_step5": (V1_WINE, ml.SmallMLPTrainer),
        "v1_mlp_identical": (V1_MLP, ml.MLPTrainer),
    }
    if IDENTICAL:
        files["constructed small"] = (
            _constructed_v1(tmp_path, _small_trainer(), "small.ckpt"),
            ml.SmallMLPTrainer,
        )
        files["constructed mlp"] = (
            _constructed_v1(tmp_path, _mlp_trainer(), "mlp.ckpt"),
            ml.MLPTrainer,
        )
    return files


def test_v1_files_load_and_verify(v1_files):
    for name, (path, cls) in [*v1_files.items(), ("v1_mlp_fast", (V1_MLP_FAST, ml.MLPTrainer))]:
        env = _envelope(path)
        assert env["arithmetic_profile"] == checkpoint.PROFILE_V1, name
        assert all(round_f32(x) == x for x in env["payload"]["config"].values())
        state = checkpoint.load(path, schema=cls._SCHEMA_REC.file_schema)
        assert state["optimizer"]["step"] == env["payload"]["optimizer"]["step"] > 0, name
        report = checkpoint.verify(path)
        assert report["profile"] == checkpoint.PROFILE_V1, name
        assert report["state_hash"] == env["payload_sha256"], name
        assert report["numeric_mode"] == env["payload"]["numeric_mode"], name


@needs_identical
def test_identical_v1_resume_refused_naming_both_profiles(v1_files):
    for name, (path, cls) in v1_files.items():
        with pytest.raises(ValueError) as refused:
            cls.from_checkpoint(path)
        assert str(refused.value) == V1_REFUSAL, name
        with pytest.raises(ValueError) as refused:
            checkpoint.load_resumable(path, schema=cls._SCHEMA_REC.file_schema)
        assert str(refused.value) == V1_REFUSAL, name
        other = _small_trainer(1) if cls is ml.SmallMLPTrainer else None
        if other is None:
            arch = _envelope(path)["payload"]["architecture"]
            other = ml.MLPTrainer(arch, seed=1, data_schedule={"test": "other"})
        before = other.state_hash()
        with pytest.raises(ValueError) as refused:
            other.load_checkpoint(path)
        assert str(refused.value) == V1_REFUSAL and other.state_hash() == before, name


@needs_identical
def test_allow_profile_change_resumes_a_v1_state_under_v2(v1_files, tmp_path):
    for name, (path, cls) in v1_files.items():
        env = _envelope(path)
        tr = cls.from_checkpoint(path, allow_profile_change=True)
        # The state is the file's, bit for bit (its float32 config included).
        assert tr.state_hash() == env["payload_sha256"], name
        assert tr.state_dict()["config"] == env["payload"]["config"], name
        other = cls.from_checkpoint(path, allow_profile_change=True)
        assert other.load_checkpoint(path, allow_profile_change=True).state_hash() == (
            tr.state_hash()
        )
        sizes = env["payload"]["architecture"]
        if name == "v1_mlp_identical":
            X, y = _v1_batches()  # its next step under v2: not v1's bits
            tr.train_steps(X, y, 1)
            assert tr.state_hash() != V1_MLP_STEP4_HASH
        else:
            rng = _rng.SplitMix64(8)
            X = Array.from_list(_uniform(rng, 6 * sizes[0]), "<f4").reshape((6, sizes[0]))
            tr.train_step(X, Array.from_list([rng.randbelow(sizes[-1]) for _ in range(6)], "<i4"))
        assert tr.step_ == env["payload"]["optimizer"]["step"] + 1, name
        # Saved again it is a v2 file, which resumes without being asked.
        again = tmp_path / "again.ckpt"
        tr.save_checkpoint(again)
        assert _envelope(again)["arithmetic_profile"] == checkpoint.PROFILE
        assert cls.from_checkpoint(again).state_hash() == tr.state_hash(), name


def test_fast_mode_v1_state_resumes_without_the_flag(tmp_path):
    # load_resumable refuses by profile and mode of the state, not of this process.
    state = checkpoint.load_resumable(V1_MLP_FAST, schema=checkpoint.MLP_FILE_SCHEMA)
    assert state["numeric_mode"] == "fast" and state["optimizer"]["step"] == 3
    code = (
        TO_V1
        + """
import mojolearn as ml
from mojolearn import Array
ml.set_numeric_mode("fast")
tr = ml.MLPTrainer.from_checkpoint(PATH)
X = Array.from_list([[0.5, -1.0, 0.25, 2.0, -0.75, 1.5]], "<f4")
tr.train_step(X, Array.from_list([2], "<i4"))
w = ml.MLPTrainer([8, 16, 3], seed=1, data_schedule={"test": "fast v1"}).weights_
small = ml.SmallMLPTrainer(w["weight1"], w["bias1"], w["weight2"], w["bias2"],
                           data_schedule={"test": "fast v1"})
small.train_step(Array.from_list([0.5] * 16, "<f4").reshape(2, 8), Array.from_list([0, 1], "<i4"))
small.save_checkpoint(FOLDER + "/small.v2")
with open(FOLDER + "/small.v1", "wb") as f:
    f.write(to_v1(open(FOLDER + "/small.v2", "rb").read()))
back = ml.SmallMLPTrainer.from_checkpoint(FOLDER + "/small.v1")
back.load_checkpoint(FOLDER + "/small.v1")
v1_hash = _json.loads(open(FOLDER + "/small.v1", "rb").read())["payload_sha256"]
print(tr.step_, back.step_, back.state_hash() == v1_hash != small.state_hash())
"""
    )
    out = run_python(f"PATH = {V1_MLP_FAST!r}\nFOLDER = {str(tmp_path)!r}\n" + code, timeout=120)
    assert out.split() == ["4", "1", "True"], out


# ---------------------------------------------------------------- 5. the CLI on v1 files


def test_cli_refuses_an_identical_v1_resume_and_allows_it_when_asked(tmp_path):
    shutil.copy(V1_WINE, tmp_path / "v1.ckpt")
    before = (tmp_path / "v1.ckpt").read_bytes()
    err = assert_one_line_error(
        run_cli(["train", "--resume", "--checkpoint", "v1.ckpt", "--steps", "8"], tmp_path),
        checkpoint.PROFILE_V1,
        checkpoint.PROFILE,
        "--allow-profile-change",
    )
    print(f"\n{err}")
    assert (tmp_path / "v1.ckpt").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["v1.ckpt"], "a refused resume wrote something"
    # verify reads it (and its next step).
    text = ok(run_cli(["verify", "v1.ckpt"], tmp_path)).stdout
    print(text)
    assert "v1.ckpt: OK" in text and f"profile       {checkpoint.PROFILE_V1}" in text
    report = json.loads(ok(run_cli(["verify", "v1.ckpt", "--json"], tmp_path)).stdout)
    assert report["ok"] and report["profile"] == checkpoint.PROFILE_V1 and report["step"] == 5
    done = done_record(
        run_cli(
            [
                "train",
                "--resume",
                "--allow-profile-change",
                "--checkpoint",
                "v1.ckpt",
                "--steps",
                "8",
                "--json",
            ],
            tmp_path,
        )
    )
    assert done["step"] == 8 and done["state_hash"] != V1_WINE_STEP8_HASH
    assert _envelope(tmp_path / "v1.ckpt")["arithmetic_profile"] == checkpoint.PROFILE
    # Now a v2 file: it resumes without the flag.
    again = done_record(
        run_cli(
            ["train", "--resume", "--checkpoint", "v1.ckpt", "--steps", "10", "--json"], tmp_path
        )
    )
    assert again["step"] == 10


def test_cli_converted_files_identical_refused_fast_resumed(tmp_path):
    for mode in ("identical", "fast"):
        name = f"{mode}.ckpt"
        ok(run_cli(["train", "--mode", mode, "--steps", "5", "--checkpoint", name], tmp_path))
        path = tmp_path / name
        path.write_bytes(to_v1(path.read_bytes()))
        resume = ["train", "--resume", "--checkpoint", name, "--steps", "8", "--json"]
        if mode == "identical":
            assert_one_line_error(
                run_cli(resume, tmp_path), checkpoint.PROFILE_V1, "--allow-profile-change"
            )
            resume.append("--allow-profile-change")
        assert done_record(run_cli(resume, tmp_path))["step"] == 8, mode


# ---------------------------------------------------------------- 6. the default run's hash


def test_default_wine_run_state_hash(tmp_path):
    levels = ["auto"] + (["v3"] if _backend.cpu_has_v4() else [])
    for level in levels:
        done = done_record(
            run_cli(["train", "--json"], tmp_path, env={"MOJOLEARN_CPU_LEVEL": level})
        )
        print(f"\ndefault run, MOJOLEARN_CPU_LEVEL={level}: {done}")
        assert (done["step"], done["state_hash"]) == (270, WINE_DEFAULT_HASH), level
        envelope = _envelope(tmp_path / "mojolearn-run.ckpt")
        assert done["state_hash"] == envelope["payload_sha256"]
        payload = envelope["payload"]
        del payload["data_schedule"]["preprocessing"]
        assert checkpoint.state_hash(payload) == WINE_DEFAULT_HASH_BEFORE_PREPROCESSING, level
        os.remove(tmp_path / "mojolearn-run.ckpt")
        os.remove(tmp_path / "mojolearn-run.ckpt.history.jsonl")
