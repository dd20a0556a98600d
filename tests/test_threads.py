"""MOJOLEARN_NUM_THREADS in the trainers' steps (mojolearn/_threads.py, training/pool.mojo):
every thread count gives one thread's bits, in both numeric modes, with the workers really
taking part; a forked child (no workers) still trains, to the same bits."""

import json

import pytest

from .helpers import run_python

# Networks whose products are large enough to be split (>= 2**20 multiply-adds), with an
# uneven number of parts for some thread counts and both cut directions (rows and columns).
CODE = """
import json, os
import mojolearn as ml
from mojolearn import _rng, _threads
from mojolearn._array import Array
ml.set_numeric_mode({mode!r})
out = {{}}
for sizes, rows in (([64, 128, 10], 160), ([54, 256, 256, 7], 40), ([30, 200, 3], 300)):
    tr = ml.MLPTrainer(sizes, seed=5, data_schedule={{"test": 1}})
    rng = _rng.SplitMix64(sum(sizes) + rows)
    xs = [rng.uniform() * 2 - 1 for _ in range(3 * rows * sizes[0])]
    ys = [rng.randbelow(sizes[-1]) for _ in range(3 * rows)]
    X, y = Array(xs, "<f4", (3 * rows, sizes[0])), Array(ys, "<i4")
    tr.train_steps(X, y, 3)
    step = tr.train_step(Array(xs[:rows * sizes[0]], "<f4", (rows, sizes[0])),
                         Array(ys[:rows], "<i4"), return_input_grad=True)
    out[str(sizes)] = [tr.state_hash(), step["input_grad"].tolist()[0][:5]]
pool = _threads.pool()
out["worker_parts"] = ml._backend.binding().raw.pool_worker_parts([pool], []) if pool else 0
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
