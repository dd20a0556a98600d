"""R5: a saver process SIGKILLed at >= 200 random instants (and once at each call of the save
sequence through an injected pause) always leaves the target byte-equal to the old or the new
version, never torn; a temporary left by a killed save is removed by the next save."""
import json
import os
import subprocess
import sys

from tests.helpers import PKG_PARENT

from ._util import LONG, ROOT, new_seed, record

KILLS = 2000 if LONG else 200


def test_kill_9_during_saves(tmp_path):
    seed = new_seed()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT, PKG_PARENT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "tests.reliability._crash_child", str(tmp_path),
                           str(KILLS), str(seed)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    steps = out.pop("pause_steps")
    record("R5", **out, pause_points=len(steps), seed=seed,
           pause_targets="/".join(f"{s['name']}:{s['target']}" for s in steps))
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
