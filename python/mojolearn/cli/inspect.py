"""`mojolearn info` and `mojolearn verify` (with its next-step check)."""

import json
import os
import sys

from .._model.trainer import engine_device
from .._runtime import files as _files
from . import data as _data
from .progress import printable
from .resume import SCHEDULE_FORMAT, run_schedule_problem
from .textrecord import TEXT_FORMAT
from .trainers import checkpoints, load_state, trainer_for
from .usage import EXIT_INVALID, EXIT_OK, UsageError

_shown = _files.shown


def cmd_info(args, out):
    """Print the version, vendor, numeric mode, CPU target and build flags of the binding,
    and the thread count with where it came from."""
    import mojolearn

    from .._runtime import backend as _backend
    from .._runtime import threads as _threads

    if args.mode:
        mojolearn.set_numeric_mode(args.mode)
    b = _backend.binding()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package root
    built = sorted(
        n.split(".")[0][len("_mojolearn_training_") :]
        for n in os.listdir(here)
        if n.startswith("_mojolearn_training_") and n.endswith(".so")
    )
    flags = f"--target-cpu {b.target_cpu}" + (
        " --fp-mode contract=off" if b.mode == "identical" else ""
    )
    threads, source = _threads.thread_choice()  # a bad setting was refused before
    info = {
        "version": mojolearn.__version__,
        "vendor": b.vendor,
        "mode": b.mode,
        "target_cpu": b.target_cpu,
        "accelerator": b.accelerator,
        "build_flags": flags,
        "binding": b.name,
        "bindings_installed": built,
        "model_engine": engine_device(b.vendor),
        "threads": threads,
        "threads_source": source,
        "python": sys.version.split()[0],
    }
    if args.json:
        print(json.dumps(info, sort_keys=True), file=out)
    else:
        for key in (
            "version",
            "vendor",
            "mode",
            "accelerator",
            "target_cpu",
            "build_flags",
            "binding",
            "bindings_installed",
            "model_engine",
            "threads",
            "threads_source",
            "python",
        ):
            value = ", ".join(info[key]) if isinstance(info[key], list) else info[key]
            print(f"{key:<19}{value}", file=out)
    return EXIT_OK


def cmd_verify(args, out):
    """Check a file fully (`checkpoint.verify`); for a `train` checkpoint also its data
    schedule; then take the state's next step on a copy: a state that cannot take a finite
    step (weights or moments near the float32 limit) is reported INVALID too."""
    path = args.checkpoint
    if not os.path.isfile(path):
        raise UsageError(f"verify: no file at {_shown(path)}")
    ckpt = checkpoints()
    try:
        report = dict(ckpt.verify(path))
        state = load_state(path)
        if state["data_schedule"].get("format") in (SCHEDULE_FORMAT, TEXT_FORMAT):
            problem = run_schedule_problem(state)
            if problem:
                raise ValueError(f"cannot be resumed by `mojolearn train`: {problem}")
        if report["schema"] == ckpt.MODEL_FILE_SCHEMA:
            report["next_step"] = _model_next_step_check(path)
        else:
            report["next_step"] = _next_step_check(path, state)
    except ValueError as exc:
        if args.json:
            print(
                json.dumps({"ok": False, "checkpoint": _shown(path), "error": str(exc)}), file=out
            )
        else:
            print(printable(f"{_shown(path)}: INVALID: {exc}", out), file=out)
        return EXIT_INVALID
    if args.json:
        print(
            json.dumps(
                {"ok": True, "checkpoint": _shown(path), **report}, sort_keys=True, default=str
            ),
            file=out,
        )
    else:
        print(printable(f"{_shown(path)}: OK", out), file=out)
        for key in ("step", "schema", "profile", "numeric_mode", "state_hash", "next_step"):
            print(f"  {key:<14}{report.get(key)}", file=out)
    return EXIT_OK


def _next_step_check(path, state):
    """'finite (...)' when one training step from the state stays finite, on the run's own
    next batch when the checkpoint is a `train` run on the bundled data, else on a fixed probe
    batch of unit-scale rows; ValueError when it does not. The file is not changed."""
    import mojolearn

    from .._buffers.array import Array

    try:
        mojolearn.set_numeric_mode(state["numeric_mode"])
    except RuntimeError:  # another mode's binding is loaded in this process already
        return "not checked (this process runs the other numeric mode)"
    custom = _custom_schedule_class(state)
    if custom is not None:  # its rates live in an object the file cannot hold: none to run
        return (
            f"not checked (a custom lr_schedule of class {custom}: a load or resume "
            f"needs that schedule object again, lr_schedule=)"
        )
    trainer = trainer_for(state)
    schedule = state["data_schedule"]
    sizes = trainer.layer_sizes
    try:
        bundled = _data.load(None, None, sizes[0], sizes[-1], schedule.get("dataset"))
    except _data.DataError:
        bundled = None
    if (
        schedule.get("format") == SCHEDULE_FORMAT
        and bundled is not None
        and schedule.get("dataset") in (_data.BUNDLED_NAME, _data.DIGITS_NAME)
        and schedule.get("dataset_sha256") == bundled.sha256
    ):
        if "val_fraction" in schedule:  # the run trained on the rows its validation left
            bundled.hold_out(schedule["val_fraction"], schedule["seed"])
        stream = _data.BatchStream(
            bundled, schedule["seed"], schedule["batch_size"], schedule["epoch"], schedule["cursor"]
        )
        x, y, rows = stream.next_batch()
        where = "the run's next batch"
    else:
        inputs, classes = trainer.layer_sizes[0], trainer.layer_sizes[-1]
        x = [0.0] * inputs + [1.0] * inputs + [-1.0] * inputs
        y, rows, where = [c % classes for c in range(3)], 3, "a probe batch"
    try:
        trainer.train_step(
            Array.from_list(list(x), "<f4").reshape((rows, len(x) // rows)),
            Array.from_list(list(y), "<i4"),
        )
    except RuntimeError as exc:
        raise ValueError(
            f"the state cannot take a finite step (step {trainer.step_ + 1} on "
            f"{where}): {str(exc)[:200]}"
        ) from None
    return f"finite (step {trainer.step_} on {where})"


def _model_next_step_check(path):
    """`_next_step_check` for a model checkpoint (`mojolearn.Trainer`): one step on a probe
    batch of unit-scale rows (0, 1 and -1; class ids 0, 1, 2 mod the classes, or zero
    targets for an MSE model), in this process's numeric mode (the file records none)."""
    import mojolearn

    from .._buffers.array import Array

    try:
        trainer = mojolearn.Trainer.from_checkpoint(path)
    except ValueError as exc:
        if "custom schedule" not in str(exc):
            raise
        return "not checked (a custom lr_schedule: a load needs that schedule object again)"
    width, per, out = 1, 1, trainer.output_shape
    for d in trainer.input_shape:
        width *= d
    for d in out:
        per *= d
    first = trainer.model.layers[0]
    if isinstance(first, mojolearn.nn.Embedding):  # token ids in [0, vocab) as inputs
        ids = [(r + p) % first.num_embeddings for r in range(3) for p in range(width)]
        x = Array.from_list(ids, "<i4")
    else:
        x = Array.from_list([float(v) for v in (0, 1, -1) for _ in range(width)], "<f4")
    x = x.reshape((3, *trainer.input_shape))
    if trainer.loss == "mse":
        y = Array.from_list([0.0] * (3 * per), "<f4").reshape((3, *out))
    else:
        n = per // out[-1]  # positions per example
        y = Array.from_list([(r + p) % out[-1] for r in range(3) for p in range(n)], "<i4")
        y = y.reshape((3, *out[:-1]))
    try:
        trainer.train_step(x, y)
    except RuntimeError as exc:
        raise ValueError(
            f"the state cannot take a finite step (step {trainer.step_ + 1} on a probe "
            f"batch): {str(exc)[:200]}"
        ) from None
    return f"finite (step {trainer.step_} on a probe batch)"


def _custom_schedule_class(state):
    """The class name a state's custom lr_schedule record names, None for any other state."""
    rec = state.get("lr_schedule")
    if isinstance(rec, dict) and rec.get("kind") == "custom":
        return rec.get("class")
    return None
