"""The few calls the command line makes on trainers and checkpoints.

SmallMLPTrainer (no --layers) or MLPTrainer, chosen by the options or by a checkpoint's
schema; the library is imported on first use, after the numeric mode is chosen.
"""


def _small_trainer_class():
    from ..trainer import SmallMLPTrainer

    return SmallMLPTrainer


def new_trainer(opts, schedule):
    """SmallMLPTrainer (no --layers) or MLPTrainer, seeded weights, the run's options."""
    hyper = dict(data_schedule=schedule, lr=opts["lr"], weight_decay=opts["weight_decay"])
    if opts["layers"] is None:
        from .._mlp.rng import init_small_mlp

        return _small_trainer_class()(*init_small_mlp(opts["seed"]), **hyper)
    from ..mlp_trainer import MLPTrainer

    return MLPTrainer(opts["layers"], seed=opts["seed"], **hyper)


def trainer_for(state):
    """The trainer (class by the state's schema) holding a checked checkpoint state."""
    if state["schema"] == mlp_schema():
        from ..mlp_trainer import MLPTrainer

        return MLPTrainer._from_state(state)
    return _small_trainer_class()._from_state(state)


def mlp_schema():
    """The state schema of an MLPTrainer checkpoint (SmallMLPTrainer's is the other one)."""
    from .._mlp.state import MLP_SCHEMA

    return MLP_SCHEMA


def checkpoints():
    """The checkpoint codec module (`mojolearn.checkpoint`)."""
    from .. import checkpoint

    return checkpoint


def argmax_correct(logits, targets, rows):
    """Rows whose largest logit (first on ties) is the target; comparisons only."""
    values = logits.tolist() if hasattr(logits, "tolist") else list(logits)
    if values and not isinstance(values[0], list):
        width = len(values) // rows
        values = [values[i * width : (i + 1) * width] for i in range(rows)]
    correct = 0
    for row, y in zip(values, targets):
        best = 0
        for j in range(1, len(row)):
            if row[j] > row[best]:
                best = j
        correct += best == y
    return correct


def evaluate(trainer, dataset):
    """(test loss, test accuracy) on the held-out rows, or (None, None) when there are none.
    Chunks of at most the trainer's `max_rows`; with several chunks the loss is the
    row-weighted mean of the chunks' losses (a report, not part of the state)."""
    if not dataset.n_test:
        return None, None
    from .._buffers.array import Array

    total, correct = 0.0, 0
    rows = dataset.test_rows
    most = trainer.max_rows
    for lo in range(0, len(rows), most):
        chunk = rows[lo : lo + most]
        x, y = dataset.gather(chunk)
        X = Array._wrap(x, (len(chunk), dataset.n_features), "<f4")
        Y = Array._wrap(y, (len(chunk),), "<i4")
        correct += argmax_correct(trainer.predict_logits(X), y, len(chunk))
        loss, _ = trainer.loss_and_grads(X, Y)
        total += float(loss) * len(chunk)
    n = len(rows)
    return (float(loss) if n <= most else total / n), correct / n
