"""Benchmark: ms per epoch of `mojolearn.fit` against the same loop written by hand over the
public calls (`Batches`, `train_step`, `evaluate`), and `fit` with a checkpoint (a history
file and a checkpoint saved every epoch, PATH.best on improvement).

    python tools/bench_fit.py [--rounds 7] [--epochs 3]

Cases: SmallMLPTrainer on (1000, 8) rows in batches of 32, MLPTrainer [64, 128, 10] on
(4000, 64) in batches of 64; validation rows: a quarter as many. Prints medians of
interleaved rounds (each round times every method once) and the ratio method / hand loop
(> 1: slower than the hand loop).
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
)

import mojolearn as ml  # noqa: E402

CASES = (("small [8, 16, 3]", None, 1000, 32), ("mlp [64, 128, 10]", [64, 128, 10], 4000, 64))


def _data(rng, n, width, classes):
    X = ml.Array.from_list([[rng.uniform(-1, 1) for _ in range(width)] for _ in range(n)])
    return X, ml.Array.from_list([rng.randrange(classes) for _ in range(n)], "<i4")


def _trainer(layers):
    if layers is None:
        return ml.SmallMLPTrainer(*ml.init_small_mlp(0), data_schedule={"seed": 0})
    return ml.MLPTrainer(layers, seed=0, data_schedule={"seed": 0})


def _hand(layers, X, y, val, epochs, bs):
    trainer, batches = _trainer(layers), ml.Batches(X, y, bs, seed=0)
    for _ in range(epochs):
        losses = [float(trainer.train_step(Xb, yb)["loss"]) for Xb, yb in batches]
        trainer.evaluate(*val)
    return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    rng, e = random.Random(0), args.epochs
    print(f"{'case':<20} {'method':<22} {'ms/epoch':>10} {'ratio':>7}")
    with tempfile.TemporaryDirectory() as folder:
        for name, layers, n, bs in CASES:
            width, classes = (8, 3) if layers is None else (layers[0], layers[-1])
            X, y = _data(rng, n, width, classes)
            val = _data(rng, n // 4, width, classes)
            ckpt = os.path.join(folder, "bench.ckpt")

            def with_checkpoint(layers=layers, X=X, y=y, val=val, bs=bs, ckpt=ckpt):
                for suffix in ("", ".best", ".fit-history.json"):
                    if os.path.exists(ckpt + suffix):
                        os.remove(ckpt + suffix)
                ml.fit(_trainer(layers), X, y, epochs=e, batch_size=bs, val=val, seed=0,
                       checkpoint=ckpt)  # fmt: skip

            fns = {
                "hand loop": lambda: _hand(layers, X, y, val, e, bs),
                "fit": lambda: ml.fit(
                    _trainer(layers), X, y, epochs=e, batch_size=bs, val=val, seed=0
                ),  # fmt: skip
                "fit + checkpoint": with_checkpoint,
            }
            samples = {k: [] for k in fns}
            for _ in range(args.rounds):
                for k, fn in fns.items():
                    t0 = time.perf_counter()
                    fn()
                    samples[k].append((time.perf_counter() - t0) * 1e3 / e)
            base = statistics.median(samples["hand loop"])
            for k, s in samples.items():
                med = statistics.median(s)
                print(f"{name:<20} {k:<22} {med:>10.2f} {med / base:>7.2f}")


if __name__ == "__main__":
    main()
