"""`mojolearn predict CHECKPOINT --data CSV [--proba] [--out CSV]`.

A `train` checkpoint records its data's preprocessing (`resume.preprocessing_record`): the
feature columns, the standardization's means and standard deviations over its training rows
and the class names. `predict` reads a CSV with `train`'s checks, holds its columns against
the record, standardizes the rows exactly as `train` did (`data.standardize_rows`, the same
arithmetic, so a training row gets the very bits the network trained on) and writes one line
per row: the predicted class by name, and with --proba the probability of each class (the
shortest decimal that reads back as the float32 `predict_proba` gave). A regressor's (`train
--model ... --loss mse`) prediction is its output in the target's units, `z * sd + mean` in
float64 with the target's recorded mean and sd, written as Python's shortest repr.
"""

import csv
import io
import math
import os
import shlex
import stat
import sys

from .._runtime import files as _files
from .._runtime.portable import round_f32
from . import data as _data
from .progress import printable
from .resume import run_schedule_problem
from .run import refuse_same_files, target
from .textrecord import TEXT_FORMAT
from .trainers import checkpoints, is_model, load_state, trainer_for
from .usage import EXIT_OK, UsageError

_shown = _files.shown


def cmd_predict(args, out):
    """Predict the class of each row of --data with CHECKPOINT's network; the exit code."""
    path = args.checkpoint
    stream = args.out is not None and _stream(args.out)
    write_to = target(args.out, "--out") if args.out is not None and not stream else None
    if args.out is not None:
        refuse_same_files([(args.out, "--out")], [(path, "CHECKPOINT"), (args.data, "--data")])
    state = _train_state(path)
    schedule = state["data_schedule"]
    record = schedule["preprocessing"]
    regression = "target_sd" in record
    if args.proba and regression:
        raise UsageError(f"--proba: {_shown(path)} is a regressor (--loss mse): it has no classes")
    try:
        raw, labels, lines = _data.load_for_predict(
            args.data,
            record["columns"],
            schedule["label_column"],
            record["label_index"],
            record["header"],
            record.get("classes"),
        )
        _check_rows(raw, record, lines)
    except _data.DataError as exc:
        raise UsageError(str(exc)) from None
    trainer = _trainer(state, path)
    from .._mlp.infer import NonFiniteRow  # after the numeric mode is chosen (`_trainer`)

    try:  # the trainer standardizes the raw rows itself (`train`'s arithmetic: its bits)
        rows = [list(r) for r in raw]
        predicted = (trainer.predict_logits if regression else trainer.predict)(rows).tolist()
        proba = trainer.predict_proba(rows).tolist() if args.proba else None
    except NonFiniteRow as exc:
        raise UsageError(
            f"row {lines[exc.row]} of --data {_shown(args.data)}: its standardized values give "
            f"a non-finite logit (the network's outputs overflow float32); nothing was written"
        ) from None
    except ValueError as exc:  # a Trainer's: the rows (from 0) whose outputs overflow
        raise UsageError(f"--data {_shown(args.data)}: {exc}; nothing was written") from None
    if regression:
        mean, sd = record["target_mean"], record["target_sd"]
        predicted = [z[0] * sd + mean for z in predicted]
        text = "prediction\n" + "".join(f"{v!r}\n" for v in predicted)
    else:
        width = trainer.output_shape[-1] if is_model(state) else trainer.layer_sizes[-1]
        text = _table(predicted, proba, record["classes"], width)
    if args.out is None:
        out.write(printable(text, out))
        _summary(sys.stderr, labels, predicted, None)
        return EXIT_OK
    try:
        if stream:
            _write_stream(args.out, text.encode("utf-8"))
        else:
            _files.write_atomic(write_to, text.encode("utf-8"), what="--out")
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise UsageError(f"--out {_shown(args.out)}: {why}") from None
    _summary(sys.stderr if stream else out, labels, predicted, args.out)
    return EXIT_OK


def _stream(path):
    """Whether --out names a pipe or a terminal-like device (/dev/stdout into a pipe, a FIFO,
    /dev/null): written in place, as a shell's `>` writes it. Such a path has no folder to
    hold a temporary (/dev/stdout leads to /proc/PID/fd/pipe:[N]), so it cannot be replaced
    atomically, and it holds no file to lose."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def _write_stream(path, blob):
    """Write `blob` into the pipe or device `path`; a FIFO that no process reads is refused
    (ENXIO), not waited on."""
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        os.set_blocking(fd, True)
        _files.write_all(fd, blob)
    finally:
        os.close(fd)


def _train_state(path):
    """The checked state of a `train` checkpoint that records its preprocessing."""
    if not os.path.isfile(path):
        raise UsageError(f"no checkpoint at {_shown(path)}")
    ckpt = checkpoints()
    try:
        state, envelope = load_state(path, envelope=True)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{_shown(path)} is not a valid mojolearn checkpoint: {exc}") from None
    problem = run_schedule_problem(state)
    if problem:
        raise UsageError(f"{_shown(path)}: {problem}")
    if state["data_schedule"].get("format") == TEXT_FORMAT:
        raise UsageError(
            f"{_shown(path)} is a text model's checkpoint (`train --text`), which predicts no "
            f"CSV rows: generate text with `mojolearn sample {_shown(path)}`"
        )
    if "preprocessing" not in state["data_schedule"]:
        raise UsageError(
            f"{_shown(path)} records no preprocessing (a checkpoint written before `mojolearn "
            f"predict` existed): resume it once at its own step with `"
            f"{_shown(_record_command(ckpt, state, envelope, path))}` (with the run's --data "
            f"and --label-column if it had them), which records it"
        )
    return state


def _record_command(ckpt, state, envelope, path):
    """The `train` command that rewrites a checkpoint with its preprocessing and trains
    nothing: a resume ending at its own step, with every flag that resume needs (the flag a
    file of an older arithmetic profile needs to be continued at all)."""
    argv = ["mojolearn", "train", "--resume", "--checkpoint", path]
    if state.get("lr_schedule") is None:  # a scheduled run's resume ends where it ends
        argv += ["--steps", str(state["optimizer"]["step"])]
    try:
        ckpt.check_resumable(state, envelope, False)
    except ValueError:
        argv.append("--allow-profile-change")
    return shlex.join(argv)


def _trainer(state, path):
    """The checkpoint's trainer, in its numeric mode."""
    import mojolearn

    try:
        mojolearn.set_numeric_mode(state["numeric_mode"])
        return trainer_for(state, path)
    except (RuntimeError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def _check_rows(raw, record, lines):
    """Refuse (DataError naming the CSV row and column) a value whose standardization with
    the recorded means and standard deviations is past float32's range."""
    rows = _data.standardize_rows(raw, record["mean"], record["sd"])
    _data.check_standardized(rows, raw, lines, record["columns"], record["sd"])


def _f32_text(value):
    """The shortest decimal that reads back as the float32 `value`."""
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if round_f32(float(text)) == value:
            return text
    return repr(value)


def _table(predicted, proba, names, classes):
    """The CSV text: a `prediction` column of class names (a class the data had no name for
    by its number), then with `proba` one `proba_<name>` column per class."""
    names = list(names) + [str(c) for c in range(len(names), classes)]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["prediction"] + ([f"proba_{n}" for n in names] if proba else []))
    for i, c in enumerate(predicted):
        writer.writerow([names[c]] + ([_f32_text(p) for p in proba[i]] if proba else []))
    return buffer.getvalue()


def _summary(stream, labels, predicted, written):
    """One line: where the predictions went and, when the CSV had labels, the accuracy."""
    parts = [f"wrote {len(predicted)} predictions to {_shown(written)}"] if written else []
    if labels is not None and labels and type(labels[0]) is float:  # a regression's targets
        mean = math.fsum(labels) / len(labels)
        ss = math.fsum((p - y) ** 2 for p, y in zip(predicted, labels))
        total = math.fsum((y - mean) ** 2 for y in labels)
        r2 = f"{1 - ss / total:.4f}" if total else "n/a (constant targets)"
        parts.append(f"MSE {ss / len(labels):.6g}, R² {r2} ({len(labels)} rows)")
    elif labels is not None:
        right = sum(p == y for p, y in zip(predicted, labels))
        parts.append(f"accuracy {100 * right / len(labels):.1f}% ({right} of {len(labels)} rows)")
    if parts:
        print(printable("; ".join(parts), stream), file=stream)
