"""MOJOLEARN_NUM_THREADS in the trainers' steps (mojolearn/_runtime/threads.py, training/pool.mojo):
every thread count gives one thread's bits (MLPTrainer and Trainer: MLPs, convolutions and
pools, a gpt), in both numeric modes, with the workers really taking part; a forked child (no
workers) still trains, to the same bits."""

import json
import os

import pytest

from .helpers import run_python

# Networks whose products are large enough to be split (>= 2**20 multiply-adds), with an
# uneven number of parts for some thread counts and both cut directions (rows and columns).
CODE = """
import json, os
import mojolearn as ml
from mojolearn._mlp import rng as _rng
from mojolearn._runtime import threads as _threads
from mojolearn._buffers.array import Array
ml.set_numeric_mode({mode!r})
out = {{}}
# [600, 512, 10]: a B too large to share (600 x 512 floats), each part packing its own.
for sizes, rows in (([64, 128, 10], 160), ([54, 256, 256, 7], 40), ([30, 200, 3], 300),
                    ([600, 512, 10], 200)):
    tr = ml.MLPTrainer(sizes, seed=5, data_schedule={{"test": 1}})
    rng = _rng.SplitMix64(sum(sizes) + rows)
    xs = [rng.uniform() * 2 - 1 for _ in range(3 * rows * sizes[0])]
    ys = [rng.randbelow(sizes[-1]) for _ in range(3 * rows)]
    X, y = Array.from_list(xs, "<f4").reshape(3 * rows, sizes[0]), Array.from_list(ys, "<i4")
    tr.train_steps(X, y, 3)
    step = tr.train_step(Array.from_list(xs[:rows * sizes[0]], "<f4").reshape(rows, sizes[0]),
                         Array.from_list(ys[:rows], "<i4"), return_input_grad=True)
    out[str(sizes)] = [tr.state_hash(), step["input_grad"].tolist()[0][:5]]
nn = ml.nn  # the model engine: GEMMs split, elementwise layers on the calling thread
model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.LayerNorm(256),
                      nn.Residual(nn.Linear(256, 256), nn.ReLU()), nn.Dropout(0.1),
                      nn.Linear(256, 10))
tm = ml.Trainer(model, input_shape=(64,), seed=3)
rng = _rng.SplitMix64(77)
xs = [rng.uniform() * 2 - 1 for _ in range(2 * 160 * 64)]
ys = [rng.randbelow(10) for _ in range(2 * 160)]
tm.train_steps(Array.from_list(xs, "<f4").reshape(320, 64), Array.from_list(ys, "<i4"), 2)
out["model"] = tm.state_hash()
# A bias gradient wide and tall enough to be cut by columns (640 x 512 sums).
tw = ml.Trainer(nn.Sequential(nn.Linear(32, 512), nn.ReLU(), nn.Linear(512, 10)),
                input_shape=(32,), seed=6)
xs = [rng.uniform() * 2 - 1 for _ in range(640 * 32)]
tw.train_step(Array.from_list(xs, "<f4").reshape(640, 32), Array.from_list(ys[:64] * 10, "<i4"))
out["wide"] = tw.state_hash()
# While the workers spin (after the first Linear's split product): the loss's rows in two
# parts (64 x 48 x 200), and the fused ReLU's mask run beside the next Linear's dW, after its
# dX, the last gradient in (a Residual's add gave the first).
tr2 = ml.Trainer(nn.Sequential(nn.Linear(1024, 200), nn.ReLU(), nn.Residual(nn.Linear(200, 200)),
                               nn.Linear(200, 48)), input_shape=(1024,), seed=8)
xs = [rng.uniform() * 2 - 1 for _ in range(2 * 64 * 1024)]
tr2.train_steps(Array.from_list(xs, "<f4").reshape(128, 1024),
                Array.from_list([rng.randbelow(48) for _ in range(128)], "<i4"), 2)
out["mask beside"] = tr2.state_hash()
# Layers with parts of their own: convolutions (stride 1 by examples and dW by taps, stride 2
# through the GEMM), pools by planes, attention by (example, head).
conv = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                     nn.Conv2d(6, 8, 3, stride=2), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(),
                     nn.Linear(72, 10))
tc = ml.Trainer(conv, input_shape=(1, 28, 28), seed=4)
rng = _rng.SplitMix64(78)
xs = [rng.uniform() * 2 - 1 for _ in range(2 * 48 * 784)]
ys = [rng.randbelow(10) for _ in range(2 * 48)]
tc.train_steps(Array.from_list(xs, "<f4").reshape(96, 1, 28, 28), Array.from_list(ys, "<i4"), 2)
out["conv"] = tc.state_hash()
# Stride-1 dWs: the first conv's from its pool's picks, by ranges of channels (an odd image:
# a row and a column no window covers), the second's (two channel vectors) cut by taps.
wide = nn.Sequential(nn.Conv2d(1, 12, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                     nn.Conv2d(12, 16, 3, padding=1), nn.ReLU(), nn.Flatten(),
                     nn.Linear(16 * 49, 10))
tw2 = ml.Trainer(wide, input_shape=(1, 15, 15), seed=9)
xs = [rng.uniform() * 2 - 1 for _ in range(2 * 64 * 225)]
tw2.train_steps(Array.from_list(xs, "<f4").reshape(128, 1, 15, 15),
                Array.from_list([rng.randbelow(10) for _ in range(128)], "<i4"), 2)
out["conv wide"] = tw2.state_hash()
# LeNet-5's second conv: its dW from its pool's picks (channels 6, 5 and 5 on three threads),
# its dX after, by examples.
lenet = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Linear(400, 10))
tl = ml.Trainer(lenet, input_shape=(1, 28, 28), seed=11)
xs = [rng.uniform() * 2 - 1 for _ in range(64 * 784)]
tl.train_step(Array.from_list(xs, "<f4").reshape(64, 1, 28, 28),
              Array.from_list([rng.randbelow(10) for _ in range(64)], "<i4"))
out["lenet"] = tl.state_hash()
# The loss's rows in parts (48 classes: wider than a register tile, so not in the epilogue).
tg = ml.Trainer(nn.gpt(48, 32, 2, 4, 64), input_shape=(32,), seed=5)
ids = [[rng.randbelow(48) for _ in range(33)] for _ in range(24)]
st = tg.train_step(Array.from_list([r[:-1] for r in ids], "<i4"),
                   Array.from_list([r[1:] for r in ids], "<i4"))
out["gpt"] = [tg.state_hash(), float(st["loss"])]
pool = _threads.pool()
out["worker_parts"] = ml._runtime.backend.binding().raw.pool_worker_parts([pool], []) if pool else 0
{after}
print(json.dumps(out))
"""

FORKED = """
pid = os.fork()
if pid == 0:  # the last trainer's session names the parent's pool, whose workers are gone
    tr.train_steps(X, y, 3)
    os.write(1, (tr.state_hash() + "\\n").encode())
    os._exit(0)
os.waitpid(pid, 0)
"""


def _run(mode, threads, after=""):
    out = run_python(
        CODE.format(mode=mode, after=after),
        env={"MOJOLEARN_NUM_THREADS": str(threads)},
        timeout=300,
    )
    lines = out.strip().splitlines()
    return json.loads(lines[-1]), lines[:-1]


@pytest.mark.parametrize("mode", ["identical", "fast"])
def test_every_thread_count_gives_the_bits_of_one(mode):
    one, _ = _run(mode, 1)
    assert one.pop("worker_parts") == 0
    for threads in (2, 3):
        many, _ = _run(mode, threads)
        assert many.pop("worker_parts") > 0, "the workers never ran a part: nothing was split"
        assert many == one, (mode, threads)


def test_a_forked_child_trains_without_the_parents_workers():
    one, child_one = _run("identical", 1, after=FORKED)
    two, child_two = _run("identical", 2, after=FORKED)
    assert len(child_two) == 1 and child_two == child_one
    assert one.pop("worker_parts") == 0 and two.pop("worker_parts") > 0
    assert two == one


# `alone()` (tools/bench_threads.py's one-thread side, in a two-thread process): pool() is 0
# inside on this thread only; an MLPTrainer opened inside and a Trainer stepped inside publish
# no task (the workers' part count stays), with the bits of the pool's.
ALONE = """
import json, threading
import mojolearn as ml
from mojolearn._mlp import rng as _rng
from mojolearn._runtime import threads as _threads
from mojolearn._buffers.array import Array
nn = ml.nn
raw = ml._runtime.backend.binding().raw
pool = _threads.pool()
parts = lambda: raw.pool_worker_parts([pool], [])
rng = _rng.SplitMix64(31)
xs = [rng.uniform() * 2 - 1 for _ in range(3 * 256 * 256)]
X = Array.from_list(xs, "<f4").reshape(3 * 256, 256)
y = Array.from_list([rng.randbelow(10) for _ in range(3 * 256)], "<i4")
model = lambda: nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
seen = []
with _threads.alone():
    inside = _threads.pool()
    other = threading.Thread(target=lambda: seen.append(_threads.pool()))
    other.start()
    other.join(60)
    mlp_one = ml.MLPTrainer([256, 256, 10], seed=2, data_schedule={"test": 1})
out = {"pool": pool, "inside": inside, "other thread": seen, "after": _threads.pool()}
tm_one = ml.Trainer(model(), input_shape=(256,), seed=2)
before = parts()
mlp_one.train_steps(X, y, 3)  # (outside the block: its session never took the pool)
with _threads.alone():
    tm_one.train_steps(X, y, 3)
out["parts alone"] = parts() - before
mlp_many = ml.MLPTrainer([256, 256, 10], seed=2, data_schedule={"test": 1})
tm_many = ml.Trainer(model(), input_shape=(256,), seed=2)
mlp_many.train_steps(X, y, 3)
tm_many.train_steps(X, y, 3)
out["same bits"] = [mlp_one.state_hash() == mlp_many.state_hash(),
                    tm_one.state_hash() == tm_many.state_hash()]
print(json.dumps(out))
"""


def test_alone_runs_this_threads_steps_without_the_pool_and_with_its_bits():
    out = run_python(ALONE, env={"MOJOLEARN_NUM_THREADS": "2"}, timeout=300)
    got = json.loads(out.strip().splitlines()[-1])
    assert got["pool"] != 0 and got["inside"] == 0
    assert got["other thread"] == [got["pool"]] and got["after"] == got["pool"]
    assert got["parts alone"] == 0
    assert got["same bits"] == [True, True]


BOUND = """
import json, os, threading
from mojolearn._runtime import threads as _threads
_threads.pool()
workers = [t for t in threading.enumerate() if t.name.startswith("mojolearn-worker")]
print(json.dumps({"cpus": sorted(os.sched_getaffinity(0)),
                  "main": sorted(os.sched_getaffinity(threading.get_native_id())),
                  "workers": [sorted(os.sched_getaffinity(t.native_id)) for t in workers]}))
"""


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs sched_getaffinity and two CPUs",
)
def test_each_worker_is_bound_to_a_cpu_of_its_own_but_not_under_several_local_ranks():
    cpus = sorted(os.sched_getaffinity(0))
    out = run_python(BOUND, env={"MOJOLEARN_NUM_THREADS": "2"}, timeout=120)
    got = json.loads(out.strip().splitlines()[-1])
    assert got["cpus"] == cpus and got["main"] == cpus  # the caller's thread: never bound
    assert got["workers"] == [[cpus[1]]]
    # more threads than CPUs, or two ranks of this machine: the workers stay unbound
    over = run_python(BOUND, env={"MOJOLEARN_NUM_THREADS": str(len(cpus) + 1)}, timeout=120)
    got = json.loads(over.strip().splitlines()[-1])
    assert got["workers"] == [cpus] * len(cpus)
    ranks = run_python(
        BOUND, env={"MOJOLEARN_NUM_THREADS": "2", "MPI_LOCALNRANKS": "2"}, timeout=120
    )
    got = json.loads(ranks.strip().splitlines()[-1])
    assert got["workers"] == [cpus]


# A network whose products are all below the split size but whose AdamW update (131,098
# elements: two parts claiming ranges of 2^14) is cut in two: the workers' parts up to
# `worker_parts` are AdamW ranges only.
ADAM_ONLY = """
import json
import mojolearn as ml
from mojolearn._mlp import rng as _rng
from mojolearn._runtime import threads as _threads
from mojolearn._buffers.array import Array
sizes, rows = [16384, 8, 2], 4
rng = _rng.SplitMix64(11)
x0 = [rng.uniform() * 2 - 1 for _ in range(rows * sizes[0])]
ys = [rng.randbelow(2) for _ in range(50 * rows)]
# 50 steps (one batch's inputs again, other labels): 50 chances for the worker to claim a
# range on a loaded host
X, y = Array.from_list(x0 * 50, "<f4").reshape(50 * rows, sizes[0]), Array.from_list(ys, "<i4")
tr = ml.MLPTrainer(sizes, seed=3, data_schedule={"test": 1})
tr.train_steps(X, y, 50)
pool = _threads.pool()
out = {"hash": tr.state_hash(),
       "worker_parts": ml._runtime.backend.binding().raw.pool_worker_parts([pool], []) if pool else 0}
nn = ml.nn  # the model engine: GEMMs split, the other layers on the calling thread
model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.LayerNorm(256),
                      nn.Residual(nn.Linear(256, 256), nn.ReLU()), nn.Dropout(0.1),
                      nn.Linear(256, 10))
tm = ml.Trainer(model, input_shape=(64,), seed=3)
rng = _rng.SplitMix64(77)
xs = [rng.uniform() * 2 - 1 for _ in range(2 * 160 * 64)]
ys = [rng.randbelow(10) for _ in range(2 * 160)]
tm.train_steps(Array.from_list(xs, "<f4").reshape(320, 64), Array.from_list(ys, "<i4"), 2)
out["model"] = tm.state_hash()
# The last bias is in the last range: lr * weight_decay = 8 makes the decay factor -7, so
# only that element (5e38 / 10) overflows (the logits, losses and gradients stay finite), and
# the step must be refused from the part that found it, naming it, with nothing changed.
w = [t.copy() for t in ml._mlp.spec.LayerSizes(sizes).init(3)]
shapes = [(8, 16384), (8,), (2, 8), (2,)]
w = [Array.from_list(a.tolist(), "<f4").reshape(s) for a, s in zip(w, shapes)]
b2 = w[3].tolist()
b2[1] = 5.0e37
w[3] = Array.from_list(b2, "<f4")
bad = ml.MLPTrainer(sizes, w, data_schedule={"test": 1}, lr=800.0, weight_decay=0.01)
before = bad.state_hash()
try:
    bad.train_step(Array.from_list(x0, "<f4").reshape(rows, sizes[0]),
                   Array.from_list([0] * rows, "<i4"))
    out["refused"] = None
except RuntimeError as exc:
    out["refused"] = str(exc)
out["unchanged"] = bad.state_hash() == before and bad.step_ == 0
print(json.dumps(out))
"""


def test_adamw_ranges_run_on_the_workers_with_the_bits_and_refusals_of_one_thread():
    got = {}
    for threads in (1, 2):
        # The worker claims ranges only once it is scheduled: on a loaded 2-core host the
        # caller has been seen to finish all the steps' ranges first, so up to 3 processes.
        for _ in range(3):
            out = run_python(ADAM_ONLY, env={"MOJOLEARN_NUM_THREADS": str(threads)}, timeout=300)
            got[threads] = json.loads(out.strip().splitlines()[-1])
            if threads == 1 or got[threads]["worker_parts"] > 0:
                break
    assert got[1].pop("worker_parts") == 0
    assert got[2].pop("worker_parts") > 0, "no AdamW range ran on a worker"
    assert got[1]["refused"] is not None and "output 'params' is not finite" in got[1]["refused"]
    total = 16384 * 8 + 8 + 2 * 8 + 2
    assert f"at index {total - 1}" in got[1]["refused"], got[1]["refused"]
    assert got[1]["unchanged"]
    assert got[2] == got[1]


# A session's GEMMs pack into its arena (training/arena.mojo): it grows during the first step
# and never again for batches no larger, on one thread (products unsplit), on two (the
# [64, 128, 10] step has shared-B products, row splits and unsplit ones) and in both modes.
ARENA = """
import json
import mojolearn as ml
from mojolearn._mlp import rng as _rng
from mojolearn._buffers.array import Array
ml.set_numeric_mode({mode!r})
raw = ml._runtime.backend.binding().raw
sizes, rows = [64, 128, 10], 256
rng = _rng.SplitMix64(21)
xs = [rng.uniform() * 2 - 1 for _ in range(4 * rows * sizes[0])]
ys = [rng.randbelow(sizes[-1]) for _ in range(4 * rows)]
X, y = Array.from_list(xs, "<f4").reshape(4 * rows, sizes[0]), Array.from_list(ys, "<i4")
tr = ml.MLPTrainer(sizes, seed=2, data_schedule={{"test": 1}})
arena = lambda: raw.mlp_resident_arena([tr._session.handle], [])
out = {{"before": arena()}}
batch = lambda i, r: (Array.from_list(xs[i * rows * 64:(i * rows + r) * 64], "<f4").reshape(r, 64),
                      Array.from_list(ys[i * rows:i * rows + r], "<i4"))
tr.train_step(*batch(0, rows))
out["first"] = arena()
for i in range(1, 4):
    tr.train_step(*batch(i, rows), return_input_grad=i == 2)
tr.train_steps(X, y, 4)
tr.train_step(*batch(1, 100))
out["after"] = arena()
print(json.dumps(out))
"""


@pytest.mark.parametrize("mode", ["identical", "fast"])
def test_steps_after_the_first_allocate_no_packing_memory(mode):
    for threads in (1, 2):
        out = run_python(
            ARENA.format(mode=mode), env={"MOJOLEARN_NUM_THREADS": str(threads)}, timeout=300
        )
        got = json.loads(out.strip().splitlines()[-1])
        assert got["before"] == [0, 0], got
        assert got["first"][0] > 0 and got["first"][1] >= 1, got
        assert got["after"] == got["first"], (mode, threads, got)


def _info(env, rc=0):
    """`mojolearn info --json` in a child whose environment is this one's with MOJOLEARN_NUM_THREADS
    and the MPI local-size variables replaced by `env` (None: unset)."""
    import os
    import subprocess
    import sys

    full = dict(os.environ)
    for name in ("MOJOLEARN_NUM_THREADS", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        full.pop(name, None)
    full.update(env)
    proc = subprocess.run(
        [sys.executable, "-m", "mojolearn", "info", "--json"],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
    )
    assert proc.returncode == rc, proc.stderr
    return json.loads(proc.stdout) if rc == 0 else proc.stderr


def test_the_default_thread_count_is_every_cpu_the_process_may_use_and_info_says_so():
    import os

    cpus = len(os.sched_getaffinity(0))
    info = _info({})
    assert info["threads"] == min(cpus, 256)
    assert "CPUs this process may use" in info["threads_source"]
    info = _info({"MOJOLEARN_NUM_THREADS": "3"})
    assert (info["threads"], info["threads_source"]) == (3, "MOJOLEARN_NUM_THREADS")
    info = _info({"MPI_LOCALNRANKS": "2"})  # two ranks of an MPICH job on this machine
    assert info["threads"] == max(1, cpus // 2)
    assert "shared by 2 MPI ranks" in info["threads_source"]
    err = _info({"MOJOLEARN_NUM_THREADS": "zero"}, rc=2)  # refused as by every command
    assert "MOJOLEARN_NUM_THREADS must be an integer in [1, 256], got 'zero'" in err


def test_the_default_follows_the_affinity_mask():
    import os

    one = sorted(os.sched_getaffinity(0))[:1]
    out = run_python(
        f"import os; os.sched_setaffinity(0, {one!r})\n"
        "from mojolearn._runtime import threads\n"
        "print(threads.thread_choice()[0])",
        env={"MOJOLEARN_NUM_THREADS": ""},
    )
    assert out.strip() == "1"


SCAN = """
import json
import mojolearn as ml
t = ml.MLPTrainer([784, 16, 3], seed=1)
out = []
for bad in ([70001, 90000], [10, 90000], [100351], [50175, 50176]):
    xs = [0.5] * (128 * 784)
    for i, at in enumerate(bad):
        xs[at] = float("nan") if i == 0 else float("-inf")
    try:
        t.train_step(ml.Array.from_list(xs).reshape((128, 784)), ml.Array.from_list([0] * 128, "<i4"))
        out.append(None)
    except ValueError as e:
        out.append(str(e))
out.append(t.step_)
print(json.dumps(out))
"""


def test_the_shared_input_check_names_the_first_non_finite_value():
    """Two threads scan a batch's 100 k inputs in ranges; the error names the first bad
    value whichever range holds it (each alone, both, at a range's edges), as one thread."""
    got = {}
    for threads in (1, 2):
        out = run_python(SCAN, env={"MOJOLEARN_NUM_THREADS": str(threads)}, timeout=300)
        got[threads] = json.loads(out.strip().splitlines()[-1])
    assert got[1] == got[2], got
    firsts = [70001, 10, 100351, 50175]
    for msg, at in zip(got[2][:-1], firsts):
        assert msg is not None and f"flat index {at} is nan" in msg, (msg, at)
    assert got[2][-1] == 0  # nothing applied
