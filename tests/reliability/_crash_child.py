"""R5 driver, run as `python -m tests.reliability._crash_child FOLDER KILLS SEED [OLD NEW]` in
its own process (no binding loaded, so forking is safe): forks savers that write two
alternating checkpoints to one target in a loop and SIGKILLs them at random instants, then at
each call of the save sequence through an injected pause. The two versions are the files OLD
and NEW when given (the test writes them with a trainer, e.g. MLPTrainer, which this process
must not load), else two small-schema files of the attack corpus's base. Prints one JSON
object of observations; the test asserts on it."""

import json
import os
import random
import signal
import sys
import time

from mojolearn import checkpoint

from .attacks import generate

_CALLS = ("open", "write", "fsync", "close", "replace")


def _versions(paths):
    if paths:
        versions = []
        for path in paths:
            with open(path, "rb") as f:
                versions.append(f.read())
        return tuple(versions)
    a = generate.base_envelope()
    b = generate.base_envelope()
    b["payload"]["optimizer"]["step"] = 8
    return (generate.canon(a) + b"\n", generate.canon(generate.seal(b)) + b"\n")


def _temps(folder):
    return sorted(n for n in os.listdir(folder) if n.endswith(checkpoint.TMP_SUFFIX))


def _saver(target, versions, pause_at=None, pipe=None):
    """Child body: save forever (or pause for good at call `pause_at` of the first save)."""
    if pause_at is not None:
        count, real_write = [0], os.write
        for name in _CALLS:
            real = getattr(os, name)

            def call(*args, _real=real, _name=name, **kwargs):
                if count[0] == pause_at:
                    real_write(pipe, _name.encode() + b"\n")
                    while True:
                        time.sleep(60)
                count[0] += 1
                return _real(*args, **kwargs)

            setattr(os, name, call)
        checkpoint.write_atomic(target, versions[1])
        os._exit(0)
    i = 0
    while True:
        checkpoint.write_atomic(target, versions[i % 2])
        i += 1


def _fork(fn, *args):
    pid = os.fork()
    if pid == 0:
        try:
            fn(*args)
        finally:
            os._exit(1)
    return pid


def main(folder, kills, seed, version_paths=()):
    rng = random.Random(seed)
    target = os.path.join(folder, "run.ckpt")
    versions = _versions(version_paths)
    checkpoint.write_atomic(target, versions[0])
    out = {
        "kills": 0,
        "torn": 0,
        "old_or_new": 0,
        "with_temp_left": 0,
        "max_temps": 0,
        "versions_seen": [0, 0],
        "pause_steps": [],
        "stale_after_next_save": 0,
    }
    for _ in range(kills):
        pid = _fork(_saver, target, versions)
        time.sleep(rng.uniform(0, 0.02))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        data = open(target, "rb").read()
        out["kills"] += 1
        if data in versions:
            out["old_or_new"] += 1
            out["versions_seen"][versions.index(data)] += 1
        else:
            out["torn"] += 1
        temps = _temps(folder)
        out["with_temp_left"] += bool(temps)
        out["max_temps"] = max(out["max_temps"], len(temps))
    # An injected pause at each call of the sequence: kill there, then check and clean.
    n_calls = 8
    for k in range(n_calls):
        checkpoint.write_atomic(target, versions[0])
        r, w = os.pipe()
        pid = _fork(_saver, target, versions, k, w)
        os.close(w)
        name = os.read(r, 64).decode().strip()
        os.close(r)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        data = open(target, "rb").read()
        state = "old" if data == versions[0] else "new" if data == versions[1] else "torn"
        temps = _temps(folder)
        checkpoint.write_atomic(target, versions[0])  # the next save cleans stale temporaries
        out["pause_steps"].append(
            {
                "call": k,
                "name": name,
                "target": state,
                "temps": len(temps),
                "temps_after_next_save": len(_temps(folder)),
            }
        )
    out["stale_after_next_save"] = len(_temps(folder))
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:6])
