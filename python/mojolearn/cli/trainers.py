"""The few calls the command line makes on trainers and checkpoints.

SmallMLPTrainer (no --layers), MLPTrainer (--layers) or Trainer (--model), chosen by the
options or by a checkpoint's schema (its record in `_mlp.schema.SCHEMAS`, or a model state's);
the library is imported on first use, after the numeric mode is chosen.
"""

MODEL_STATE = "mojolearn.model-state.v1"  # a `mojolearn.Trainer` state (`_model.persist`)


def lr_schedule_for(opts, total_steps):
    """The learning-rate schedule of --schedule and --warmup over a run of `total_steps`
    steps: None for constant (every step at --lr, as before schedules), else the project's
    warmup schedule peaking at --lr and decaying to min_lr 0 (torch's CosineAnnealingLR
    eta_min default, and the schedules' own) at the run's last step."""
    from ..schedules import WarmupCosineLR, WarmupLinearLR

    kind = {"warmup-linear": WarmupLinearLR, "warmup-cosine": WarmupCosineLR}.get(opts["schedule"])
    if kind is None:
        return None
    return kind(opts["lr"], warmup_steps=opts["warmup"], total_steps=total_steps, min_lr=0.0)


def new_trainer(opts, schedule, total_steps, width, image=None):
    """SmallMLPTrainer (no --layers), MLPTrainer or a Trainer of --model on `width` inputs
    (an `image` (C, H, W) of them for a SPEC with conv or pool layers: `spec.input_shape`),
    seeded weights, the run's options; its learning-rate schedule (`lr_schedule_for`) spans
    `total_steps` steps."""
    hyper = dict(data_schedule=schedule, lr=opts["lr"], weight_decay=opts["weight_decay"])
    hyper["lr_schedule"] = lr_schedule_for(opts, total_steps)
    if opts["model"] is not None:
        from .._model.trainer import Trainer
        from .spec import build, input_shape

        shape = input_shape(opts["model"], width, image)
        model = build(opts["model"], shape)
        return Trainer(model, input_shape=shape, loss=opts["loss"], seed=opts["seed"], **hyper)
    if opts["layers"] is None:
        from .._mlp.spec import init_small_mlp
        from ..trainer import SmallMLPTrainer

        return SmallMLPTrainer(*init_small_mlp(opts["seed"]), **hyper)
    from ..mlp_trainer import MLPTrainer

    return MLPTrainer(opts["layers"], seed=opts["seed"], **hyper)


def trainer_for(state, path=None):
    """The trainer (class by the state's schema record) holding a checked checkpoint state;
    a model state's trainer is read from its file `path` (`Trainer.from_checkpoint`)."""
    import mojolearn

    if is_model(state):
        return mojolearn.Trainer.from_checkpoint(path)
    # The record's name in messages is the public class's name.
    return getattr(mojolearn, schema_of(state).api)._from_state(state)


def is_model(state):
    """Whether a checked checkpoint state is a `mojolearn.Trainer`'s (--model)."""
    return state["schema"] == MODEL_STATE


def load_state(path, envelope=False):
    """The checked state of a checkpoint of any schema (with its envelope when asked)."""
    ckpt = checkpoints()
    load = ckpt.load_with_envelope if envelope else ckpt.load
    return load(path, schema=ckpt.ALL_SCHEMAS)


def schema_of(state):
    """The record (`_mlp.schema.Schema`) of a checked checkpoint state's schema."""
    from .._mlp.schema import SCHEMAS

    return SCHEMAS[state["schema"]]


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


def evaluate(trainer, dataset, rows):
    """(loss, accuracy) of the trainer on the dataset's `rows` (its test or validation rows),
    or (None, None) when there are none: `evaluate`'s mean loss (the steps' loss kernel over
    all the rows) and `predict`'s argmax; for a regression (loss, R²), the loss the mean
    squared error of the standardized targets. A report, not part of the state."""
    if not rows:
        return None, None
    from .._mlp.infer import NonFiniteRow
    from .usage import UsageError

    X, Y = dataset.scoring(trainer, rows)
    try:
        result = trainer.evaluate(X, Y)
    except NonFiniteRow as exc:
        raise UsageError(overflow_message(dataset, rows[exc.row], trainer.step_)) from None
    except ValueError as exc:  # a Trainer's: the rows' loss overflows with these weights
        raise UsageError(f"{dataset.name}: {exc} at step {trainer.step_}") from None
    return result["loss"], result["r2" if dataset.targets is not None else "accuracy"]


def overflow_message(dataset, row, step):
    """The refusal of a data row whose logits overflow float32 at `step`."""
    return (
        f"row {dataset.lines[row]} of {dataset.name}: its standardized values give a "
        f"non-finite logit with the weights of step {step} (the network's outputs overflow "
        f"float32); rescale that row's large values or drop the row"
    )


def schedule_problem(opts, schedule):
    """Why the trainer `new_trainer` makes for `opts` refuses `schedule` (None when it takes
    it): the library's own data_schedule bounds."""
    from .._mlp.state import check_schedule

    try:
        api = "MLPTrainer" if opts["layers"] else "Trainer" if opts["model"] else "SmallMLPTrainer"
        check_schedule(schedule, api)
    except ValueError as exc:
        return str(exc)
    return None
