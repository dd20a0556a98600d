"""R5: a saver process SIGKILLed at >= 200 random instants (and once at each call of the save
sequence through an injected pause) always leaves the target byte-equal to the old or the new
version, never torn; a temporary left by a killed save is removed by the next save. Run for
SmallMLPTrainer files (R5) and for MLPTrainer files (R5_mlp: layer sizes [16, 32, 32, 4], a
~42 KB file, over the small schema's 32 KiB bound)."""

import copy
import json
import os
import random
import subprocess
import sys

import mojolearn as ml

from tests.helpers import PKG_PARENT

from ._util import LONG, ROOT, new_seed, record

KILLS = 2000 if LONG else 200
MLP_SIZES = [16, 32, 32, 4]


def _mlp_versions(folder):
    """Two MLPTrainer checkpoint files of one run, before and after a step: (paths, trainer
    at the first)."""
    folder.mkdir()
    first = ml.MLPTrainer(MLP_SIZES, seed=5, data_schedule={"dataset": "r5"}, lr=1e-2)
    later = copy.copy(first)
    rng = random.Random(5)
    X = ml.Array.from_list(
        [[rng.uniform(-1, 1) for _ in range(MLP_SIZES[0])] for _ in range(8)], "<f4"
    )
    later.train_step(X, ml.Array.from_list([rng.randrange(MLP_SIZES[-1]) for _ in range(8)], "<i4"))
    paths = [folder / "old.ckpt", folder / "new.ckpt"]
    first.save_checkpoint(paths[0])
    later.save_checkpoint(paths[1])
    return paths, first


def _kill_savers(folder, version_paths=()):
    """The child's observations (the pause sequence popped) and its seed."""
    seed = new_seed()
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([ROOT, PKG_PARENT, os.environ.get("PYTHONPATH", "")])
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.reliability._crash_child",
            str(folder),
            str(KILLS),
            str(seed),
            *map(str, version_paths),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out, out.pop("pause_steps"), seed


def _check(out, steps, seed):
    assert out["kills"] == KILLS and out["torn"] == 0 and out["old_or_new"] == KILLS, (seed, out)
    assert min(out["versions_seen"]) > 0, f"seed {seed}: the saver never got to save: {out}"
    names = [s["name"] for s in steps]
    assert names == ["open", "write", "fsync", "close", "replace", "open", "fsync", "close"]
    replace = names.index("replace")
    for s in steps:
        assert s["target"] == ("old" if s["call"] <= replace else "new"), (seed, s)
        assert s["temps"] == (1 if 0 < s["call"] <= replace else 0), (seed, s)
        assert s["temps_after_next_save"] == 0, (seed, s)
    assert out["stale_after_next_save"] == 0


def _record(figure, out, steps, seed, **extra):
    record(
        figure,
        **out,
        pause_points=len(steps),
        seed=seed,
        **extra,
        pause_targets="/".join(f"{s['name']}:{s['target']}" for s in steps),
    )


def test_kill_9_during_saves(tmp_path):
    out, steps, seed = _kill_savers(tmp_path)
    _record("R5", out, steps, seed)
    _check(out, steps, seed)


def test_kill_9_during_mlp_saves(tmp_path):
    paths, first = _mlp_versions(tmp_path / "versions")
    sizes = [os.path.getsize(p) for p in paths]
    assert paths[0].read_bytes() != paths[1].read_bytes()
    out, steps, seed = _kill_savers(tmp_path, paths)
    _record("R5_mlp", out, steps, seed, layer_sizes="x".join(map(str, MLP_SIZES)), bytes=max(sizes))
    _check(out, steps, seed)
    # The child ends by saving the old version: what a resume would read back.
    resumed = ml.MLPTrainer.from_checkpoint(tmp_path / "run.ckpt")
    assert resumed.state_hash() == first.state_hash()
