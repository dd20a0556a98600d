"""R2: every single-bit flip of a small valid checkpoint is refused (100 %), and R9: the
canonical round trip `dumps(loads(f)) == f` for random states, two saves of one state equal."""

import random
import time

from mojolearn import checkpoint

from ._util import LONG, new_seed, random_state, record
from .attacks import generate


def _flips(data):
    for i in range(len(data)):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[i] ^= 1 << bit
            yield i, bit, bytes(flipped)


def test_every_single_bit_flip_is_refused():
    files = [generate.valid_bytes()]
    if LONG:
        files.append(checkpoint.dumps(random_state(random.Random(new_seed()))))
    total = refused = 0
    worst = 0.0
    for data in files:
        checkpoint.loads(data)
        for i, bit, flipped in _flips(data):
            t0 = time.perf_counter()
            try:
                checkpoint.loads(flipped)
            except ValueError:
                refused += 1
            else:
                raise AssertionError(f"flip of bit {bit} of byte {i} ({data[i : i + 1]!r}) loaded")
            worst = max(worst, time.perf_counter() - t0)
            total += 1
    record(
        "R2",
        files=len(files),
        flips=total,
        refused=refused,
        refused_pct=round(100.0 * refused / total, 3),
        worst_ms=round(worst * 1e3, 2),
    )
    assert refused == total == 8 * sum(len(f) for f in files)


def test_canonical_round_trip():
    seed = new_seed()
    rng = random.Random(seed)
    n = 10_000 if LONG else 1_000
    profiles = (checkpoint.PROFILE, checkpoint.REFERENCE_PROFILE)
    for i in range(n):
        state = random_state(rng, rng.choice(("identical", "fast")))
        profile = profiles[i % 2]
        f = checkpoint.dumps(state, profile)
        assert checkpoint.dumps(state, profile) == f, f"seed {seed}: two saves of one state differ"
        loaded = checkpoint.loads(f, allow_profile_change=profile != checkpoint.PROFILE)
        assert checkpoint.dumps(loaded, profile) == f, f"seed {seed}, state {i}: save(load(f)) != f"
    record("R9", states=n, byte_equal=n, seed=seed)


def test_canonical_round_trip_through_the_trainer(tmp_path):
    """save(load(f)) == f through a trainer: from_checkpoint then save_checkpoint, and the
    trainer's state hash is the file's payload_sha256."""
    import json

    import mojolearn as ml

    seed = new_seed()
    rng = random.Random(seed)
    mode = ml.numeric_mode_used()
    path, again = tmp_path / "f.ckpt", tmp_path / "g.ckpt"
    n = 300 if LONG else 60
    for i in range(n):
        f = checkpoint.dumps(random_state(rng, mode))
        path.write_bytes(f)
        t = ml.SmallMLPTrainer.from_checkpoint(path)
        t.save_checkpoint(again)
        assert again.read_bytes() == f, f"seed {seed}, state {i}"
        assert t.state_hash() == json.loads(f)["payload_sha256"]
    record("R9_trainer", states=n, byte_equal=n, seed=seed)
