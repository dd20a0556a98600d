"""`mojolearn train`: setup, the training loop, saves, the closing report, and signals.

A run is set up (options, data, trainer: a fresh one saved at step 0 at once, or the one a
checkpoint holds), then steps until its end, a signal or (with --patience) the end of its
patience, saving every --checkpoint-every steps and at the end, then reports. At every epoch
end the validation rows (--val-fraction) are scored into the history, and with --patience the
best state so far is kept as CHECKPOINT.best; the test rows are scored once, in the report.
Under mpiexec with --microbatches the processes of the job (`Group`) agree on every refusal,
so none waits for another forever; rank 0 alone writes.
"""

import errno
import math
import os
import shlex
import signal
import time
from types import SimpleNamespace

from .._runtime import files as _files
from .._runtime.world import OneProcess, World, abort, guard_job
from . import data as _data
from . import history as _history
from .plot import plot, require_matplotlib
from .progress import Progress
from .resume import (
    CHECKPOINT_SECONDS,
    DEFAULTS,
    check_dataset,
    peek_checkpoint,
    resolve_options,
    schedule_record,
)
from .spec import has_images, outputs, parse
from .trainers import (
    argmax_correct,
    evaluate,
    load_state,
    new_trainer,
    overflow_message,
    schedule_problem,
    trainer_for,
)
from .usage import EXIT_OK, UsageError

_shown = _files.shown
BEST_SUFFIX = ".best"  # the best checkpoint of a run with --patience: CHECKPOINT.best


class Interrupt:
    """SIGINT (Ctrl-C) and SIGTERM set a flag the training loop checks between steps, so a
    step is never cut: the loop stops, saves a checkpoint and exits 128 + the signal number."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.hit = 0
        self._old = {}

    def __enter__(self):
        for sig in self.SIGNALS:
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.hit:  # a second signal: stop waiting for the save
            raise KeyboardInterrupt
        self.hit = signum

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


def _usage_error(rank, kind, text):
    """What a process raises when process `rank` refused first: the same one-line refusal."""
    return UsageError(text)


class Group:
    """The processes of a run: one without --microbatches; with it, MPI's world when mpi4py
    is there (else one process). Only rank 0 writes files and output; a refusal on any rank
    is raised on all of them, so no process waits for another forever; a process that stops
    on its own (an uncaught exception, or SIGINT before the loop's signal handling, e.g.
    while the CSV loads) aborts the whole job (`end`)."""

    job = None  # the communicator of a run of more than one process, once there is one
    quiet = False  # a data-parallel process other than rank 0: no output

    def __init__(self, microbatches):
        self.world = World(None if microbatches is not None else OneProcess())
        if self.world.mpi is not None:
            guard_job()  # an uncaught exception on any process aborts the job
            if self.world.size > 1:
                Group.job = self.world.comm
        self.comm = self.world.comm
        self.rank = self.world.rank
        self.root = self.rank == 0
        Group.quiet = not self.root

    def agree(self, problem):
        """Raise on every process when any refused (see `World.gather`)."""
        self.world.agree(problem, _usage_error)

    def any(self, flag):
        """The largest `flag` of all processes (a signal seen by one stops all together)."""
        return self.world.any(flag)

    def root_value(self, value):
        """Rank 0's `value` on every process (a fast-mode figure may differ by machine, and
        the processes must take the same decisions)."""
        return self.world.gather(None, value, failed=_usage_error)[0][1]

    @staticmethod
    def end(code):
        """Under mpiexec, end every process of the job now with `code` (MPI_Abort): this one
        stops while the others may wait for it in a collective. Nothing in one process."""
        if Group.job is not None:
            abort(code)

    @staticmethod
    def devnull():
        return open(os.devnull, "w")


# -- the command ---------------------------------------------------------------------------


def cmd_train(args, out, kind=None):
    """`mojolearn train`: check the outputs' paths, take the run's lock, set up, train,
    report; the exit code. `kind`: another kind of run's (setup, report) (`textrun`), else
    this module's (a run on rows)."""
    run_setup, run_report = kind or (setup, report)
    if args.label_column is not None and args.data is None:
        raise UsageError("--label-column applies only with --data")
    args.resume_from = args.checkpoint
    if args.resume:
        args.checkpoint = _resumed_into(args.checkpoint)
    if args.plot:
        target(args.plot, "--plot")
        require_matplotlib()
    target(args.checkpoint, "--checkpoint")
    target(_history.path_for(args.checkpoint), "--checkpoint's history")
    refuse_same_files(_outputs(args), _inputs(args))
    m = args.microbatches
    if m is None and args.resume:  # a data-parallel run resumes data-parallel
        try:
            m = peek_checkpoint(args.resume_from).get("microbatches")
        except UsageError:
            pass  # setup says what is wrong with the checkpoint
    group = Group(m)
    problem, lock = None, None
    try:
        if group.root:  # one lock for the job: rank 0's
            lock = _lock_run(args.checkpoint)
    except UsageError as exc:
        problem = exc
    group.agree(problem)
    try:
        problem, run = None, None
        try:
            run = run_setup(args, group)
        except UsageError as exc:
            problem = exc
        group.agree(problem)
        return run_report(args, run, loop(args, run, out if group.root else group.devnull()))
    finally:
        if lock is not None:
            lock.release()


def _outputs(args):
    """(path, what) of every file a train run may write: the checkpoint, its history, its
    best checkpoint (a --patience run's, given or recorded) and the plot."""
    ckpt = args.checkpoint
    out = [(ckpt, "--checkpoint"), (_history.path_for(ckpt), "--checkpoint's history")]
    if args.patience is not None or args.resume:
        out.append((_history.path_for(ckpt, BEST_SUFFIX), "--checkpoint's best"))
    return out + ([(args.plot, "--plot")] if args.plot else [])


def _inputs(args):
    """(path, what) of the files a train run reads and must not write: its --data or --text
    FILE. (The checkpoint a resume reads it writes on purpose.)"""
    given = ((args.data, "--data"), (getattr(args, "text", None), "--text"))
    return [(path, what) for path, what in given if isinstance(path, str)]


def same_file(a, b):
    """Whether the paths `a` and `b` lead to one file: the same real path (symlinks and
    relative spellings resolved; the file may not exist yet), or one existing file (a hard
    link)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def refuse_same_files(outputs, inputs):
    """Refuse (UsageError, before anything is written) an output that leads to one of the
    command's inputs or to another of its outputs: writing it would replace what the command
    reads, or what it wrote a moment before. Both are lists of (path, what)."""
    for i, (path, what) in enumerate(outputs):
        for other, other_what in list(inputs) + outputs[:i]:
            if same_file(path, other):
                raise UsageError(
                    f"{what} {_shown(path)} leads to the same file as {other_what} "
                    f"{_shown(other)}: writing it would replace that file; pass another path"
                )


def _resumed_into(path):
    """The checkpoint a `--resume --checkpoint path` run writes: `path`, except for the best
    checkpoint CHECKPOINT.best of a --patience run, which continues into the run's own
    CHECKPOINT (and its history, cut back to the best step); CHECKPOINT.best is replaced only
    by a better state. CHECKPOINT of another run is refused; a missing one is made."""
    main = _best_of(path)
    best = _schedule_of(path) if main is not None else None
    if best is None or best.get("patience") is None:  # not a best checkpoint
        return path
    if os.path.lexists(main):
        stored = _schedule_of(main)
        if stored is None or _run_of(stored) != _run_of(best):
            raise UsageError(
                f"--resume: {_shown(path)} is a best checkpoint, but {_shown(main)} (where "
                f"its run continues) is not a checkpoint of the same run; copy "
                f"{_shown(path)} to a new path and resume that"
            )
    return main


def _best_of(path):
    """The main checkpoint whose best checkpoint `path` names (its name, else the file it
    leads to, ends in `.best`), or None."""
    for name in (path, os.path.realpath(path)):
        if name.endswith(BEST_SUFFIX) and len(os.path.basename(name)) > len(BEST_SUFFIX):
            return name[: -len(BEST_SUFFIX)]
    return None


def _schedule_of(path):
    """The data_schedule of the checkpoint at `path`, None when it is not a valid one."""
    try:
        return load_state(path)["data_schedule"]
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _run_of(schedule):
    """What a run's checkpoints share at every step: its schedule less the data position and
    the early-stopping state."""
    return {k: v for k, v in schedule.items() if k not in ("epoch", "cursor", "early_stopping")}


def target(path, flag):
    """The real path a run will write for `flag` (`--checkpoint`, its history, `--plot`),
    checked before anything is written: not empty, not an existing non-regular file (a symlink
    is followed), in a folder that exists."""
    try:
        real, _ = _files.resolve(path, flag)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        hint = ""
        if exc.errno == errno.ENAMETOOLONG and path.endswith(_history.SUFFIX):
            hint = f" (the history adds {len(_history.SUFFIX)} bytes to the checkpoint's name)"
        raise UsageError(f"{flag} {_shown(path)}: {exc.strerror or exc}{hint}") from None
    folder = os.path.dirname(real)
    if not os.path.isdir(folder):
        raise UsageError(f"{flag} {_shown(path)}: the folder {_shown(folder)} does not exist")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{flag} {_shown(path)}: the folder {_shown(folder)} is not writable")
    return real


def _lock_run(ckpt):
    """The run's advisory lock on the checkpoint (held until the run ends): a second run on
    the same file is refused by name, so checkpoint and history always belong to one run."""
    try:
        return _files.RunLock(ckpt, "--checkpoint")
    except _files.Busy:
        raise UsageError(
            f"--checkpoint {_shown(ckpt)} is in use by another `mojolearn train` "
            f"run; wait for it or pass another --checkpoint"
        ) from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(
            f"--checkpoint {_shown(ckpt)}: cannot write in its folder ({exc.strerror or exc})"
        ) from None


# -- setup ---------------------------------------------------------------------------------


def setup(args, group):
    """Options, dataset and trainer of a fresh run (step 0 saved at once) or a resumed one;
    every refusal is a UsageError before anything is written."""
    ckpt = args.checkpoint
    source = args.resume_from  # `ckpt`, or the best checkpoint the run continues from
    stored = peek_checkpoint(source, args.allow_profile_change) if args.resume else None
    opts = resolve_options(args, stored)
    import mojolearn

    mojolearn.set_numeric_mode(opts["mode"])  # before any binding use
    dataset = _load_dataset(args, opts, stored)
    best = None
    if opts["patience"] is not None:
        best = _history.path_for(ckpt, BEST_SUFFIX)
        target(best, "--checkpoint's best")
    per_epoch = _data.steps_per_epoch(dataset.n_train, opts["batch_size"])
    end = args.steps if args.steps is not None else per_epoch * (args.epochs or DEFAULTS["epochs"])
    # A constant-rate run given its end records it, so a resume without --steps/--epochs
    # ends there too (a scheduled run's lr_schedule records its end: `_scheduled_end`).
    given = args.steps is not None or args.epochs is not None
    if opts["schedule"] == "constant":
        opts["end_step"] = end if given else (stored or {}).get("end_step")
        end = opts["end_step"] or end
    history = _history.History(ckpt)
    if stored is not None:
        try:
            trainer = trainer_for(load_state(source), source)
        except ValueError as exc:
            raise UsageError(f"--resume: {_shown(source)}: {exc}") from None
        start, epoch, cursor = trainer.step_, stored["epoch"], stored["cursor"]
        end = _scheduled_end(args, trainer, end)
        stopping = stored.get("early_stopping")
        if group.root:
            history.resume_at(start)
    else:
        start, epoch, cursor = 0, 0, 0
        stopping = dict(best_step=0, best_val_loss=None, bad_epochs=0)
        trainer = _new_trainer(dataset, opts, stopping, end)
    _check_logits(dataset, trainer)
    dp = None
    if opts["microbatches"] is not None:
        from ..distributed import DataParallel

        dp = DataParallel(trainer, opts["microbatches"], group.comm)
    run = SimpleNamespace(  # what the loop and the report need
        ckpt=ckpt,
        opts=opts,
        dataset=dataset,
        per_epoch=per_epoch,
        start=start,
        end=end,
        history=history,
        trainer=trainer,
        saved=start,
        dp=dp,
        group=group,
        stream=_data.BatchStream(dataset, opts["seed"], opts["batch_size"], epoch, cursor),
        stopping=stopping if opts["patience"] is not None else None,
        best=best,
        # What a text run (`textrun`) does its own way, the loop and `save` call through.
        announce=_announce,
        take_step=_step,
        after_step=_after_step,
        record=_record,
    )
    if stored is None:
        if group.root:
            history.start_fresh()
            _remove_earlier_best(best)
        # Step 0 on disk at once: the checkpoint and its history never belong to two runs.
        save(run)
    return run


def _check_logits(dataset, trainer):
    """Refuse, before any step or write, data with a row whose logits overflow float32 with
    the run's starting weights (its finite standardized values are too large for the
    network): one forward over every row, so no step, validation or test scoring meets it
    first (a row can still overflow later, once the weights have grown: see `loop`). A state
    whose weights overflow on any row is left to the first step, which names the state."""
    from .._buffers.array import Array
    from .._mlp.infer import NonFiniteRow

    width = dataset.n_features
    X, _ = dataset.scoring(trainer, range(len(dataset.labels)))
    try:
        trainer.predict(X)
    except NonFiniteRow as exc:
        try:  # the training rows' mean overflowing too: the state's fault, which the step names
            # (the raw mean row standardizes to 0.0 in every column)
            zero = [list(dataset.means)] if trainer.preprocessing is not None else None
            trainer.predict(zero or Array.from_list([0.0] * width, "<f4").reshape((1, width)))
        except NonFiniteRow:
            return
        raise UsageError(overflow_message(dataset, exc.row, trainer.step_)) from None
    except ValueError as exc:  # a Trainer's (rows counted from 0)
        raise UsageError(f"{dataset.name}: {exc} (the weights of step {trainer.step_})") from None


def _remove_earlier_best(best):
    """A fresh run with --patience owns CHECKPOINT.best: an earlier run's goes (as its
    checkpoint and history are replaced), so the file never holds another run's state."""
    if best is None or not os.path.isfile(best):
        return
    try:
        os.remove(best)
    except OSError as exc:
        raise UsageError(f"--checkpoint's best {_shown(best)}: {exc.strerror or exc}") from None


def _scheduled_end(args, trainer, end):
    """The step a resumed run ends at: a warmup schedule's own end (its total steps, what
    --steps/--epochs resolved to when the run began), so the rates continue exactly; a
    --steps/--epochs ending elsewhere is refused by name. `end` when there is no schedule."""
    schedule = trainer.lr_schedule
    if schedule is None:
        return end
    total = schedule.total_steps
    given = "--steps" if args.steps is not None else "--epochs" if args.epochs else None
    if given is not None and end != total:
        value = args.steps if args.steps is not None else args.epochs
        raise UsageError(
            f"--resume: {given} {value} ends the run at step {end}, but the checkpoint's "
            f"learning-rate schedule ends at step {total} (its total steps); leave "
            f"--steps/--epochs out or pass --steps {total}"
        )
    return total


def _warmup_fits(opts, end):
    """Refuse a warmup schedule whose warmup does not end before the run does."""
    if opts["schedule"] != "constant" and opts["warmup"] >= end:
        raise UsageError(
            f"--warmup {opts['warmup']} must be below the run's {end} steps (--steps/--epochs): "
            f"the {opts['schedule']} schedule decays after its warmup, to 0 at the last step"
        )


def _new_trainer(dataset, opts, stopping, end):
    """A fresh run's trainer (its learning-rate schedule over the run's `end` steps); a
    data_schedule too large for it (it records the data's column and class names) is
    refused by name."""
    _warmup_fits(opts, end)
    schedule = schedule_record(dataset, opts, 0, 0, stopping)
    problem = schedule_problem(opts, schedule)
    if problem:
        more = (
            ""
            if opts["layers"] or opts["model"]
            else ", as does --layers 8,16,3 (an MLPTrainer holds more)"
        )
        raise UsageError(
            f"{problem}: the checkpoint records the data's {dataset.n_features} column names "
            f"and {dataset.n_classes} class names; shorter names fit{more}"
        )
    try:
        return new_trainer(opts, schedule, end, dataset.n_features, dataset.image_shape)
    except ValueError as exc:
        raise UsageError(
            f"--model {opts['model']!r}: {exc}" if opts["model"] else str(exc)
        ) from None


def _recorded_csv(args, stored, flag="--data"):
    """The --data CSV (or `flag`'s file) of a resumed run given none: the file of the recorded
    name with the recorded SHA-256 beside the checkpoint, else in the current folder."""
    name, digest = stored["dataset"], stored["dataset_sha256"]
    for folder in (os.path.dirname(os.path.abspath(args.resume_from)), os.getcwd()):
        path = os.path.join(folder, name)
        try:
            if os.path.isfile(path) and _data.file_sha256(path) == digest:
                return path
        except OSError:
            continue
    raise UsageError(
        f"--resume: the run trained on {flag} {name} (SHA-256 {digest[:16]}...), which is "
        f"neither beside the checkpoint nor in the current folder; pass {flag} PATH"
    )


def _outputs_fit(opts, dataset):
    """Refuse a network with more outputs than the data has classes (--layers lists ALL the
    sizes, the classes last; a --model's last linear:N gives them), naming the fix."""
    if dataset.targets is not None or not (opts["layers"] or opts["model"]) or not dataset.labels:
        return
    present = max(dataset.labels) + 1
    outs = opts["layers"][-1] if opts["layers"] else outputs(parse(opts["model"]))
    if present >= outs:
        return
    if opts["layers"]:
        sizes = opts["layers"]
        fix = ",".join(map(str, sizes[:-1] + [present]))
        raise UsageError(
            f"--layers {','.join(map(str, sizes))} gives {outs} outputs, but the data has "
            f"{present} classes: --layers lists ALL the sizes, inputs, hidden widths and then "
            f"the classes (not scikit-learn's hidden_layer_sizes); e.g. --layers {fix}, or "
            f"--layers {','.join(map(str, sizes))},{present} to keep every width hidden"
        )
    raise UsageError(
        f"--model {opts['model']!r} gives {outs} outputs, but the data has {present} classes: "
        f"end the SPEC with linear:{present}"
    )


def _image_shape(opts, dataset, path):
    """Give a CSV of flattened images (`path`) the --image-shape, refused by name for bundled
    data, without a --model SPEC of conv or pool layers, or unless C·H·W is the feature count."""
    shape = opts["image_shape"]
    if shape is None:
        return
    flag = f"--image-shape {','.join(map(str, shape))}"
    if opts["model"] is None or not has_images(parse(opts["model"])):
        raise UsageError(
            f"{flag} needs a --model SPEC with conv, maxpool or avgpool layers (without them a "
            f"row is one vector of features, e.g. --model conv:8:3,relu,flatten,linear:10)"
        )
    if path is None:
        raise UsageError(
            f"{flag} applies to a --data CSV of flattened images; the bundled {dataset.name} "
            f"data {'are 1x8x8 images already' if dataset.image_shape else 'are no images'}"
        )
    if math.prod(shape) != dataset.n_features:
        raise UsageError(
            f"{flag} makes images of {math.prod(shape)} values (C·H·W), but the data has "
            f"{dataset.n_features} feature columns"
        )
    dataset.image_shape = tuple(shape)


def _load_dataset(args, opts, stored):
    """The run's data (--data, --dataset, or on --resume the checkpoint's bundled data), its
    validation rows held out, checked against the network, the checkpoint and
    --microbatches."""
    layers, model = opts["layers"], opts["model"]
    features, classes = (layers[0], layers[-1]) if layers else (_data.FEATURES, _data.CLASSES)
    if model is not None:  # the inputs are the data's; mse: numeric targets, no classes
        features, classes = None, None if opts["loss"] == "mse" else outputs(parse(model))
    name, path, label = args.dataset, args.data, args.label_column
    bundled = stored is not None and stored["dataset"] in (_data.BUNDLED_NAME, _data.DIGITS_NAME)
    if stored is not None and name is None and path is None:  # a run resumes on its own data
        name, path = (stored["dataset"], None) if bundled else (None, _recorded_csv(args, stored))
    if stored is not None and not bundled and label is None:  # and on its own label column
        label = stored["label_column"]
    try:
        dataset = _data.load(path, label, features, classes, name, opts["classification"])
        if opts["test_fraction"] is not None:
            dataset.split(opts["test_fraction"])
    except _data.DataError as exc:
        raise UsageError(str(exc)) from None
    _outputs_fit(opts, dataset)
    _image_shape(opts, dataset, path)
    fraction = opts["val_fraction"]
    if fraction is not None:
        try:
            dataset.hold_out(fraction, opts["seed"])
        except _data.DataError as exc:  # standardized again: a validation row may overflow
            raise UsageError(str(exc)) from None
        if not dataset.n_val:
            raise UsageError(
                f"--val-fraction {fraction} holds out no row: each class gives "
                f"floor({fraction} x its training rows) ({dataset.n_train} training rows)"
            )
    if stored is not None:
        check_dataset(dataset, stored)
    bs, m = opts["batch_size"], opts["microbatches"]
    if m is not None and (bs % m or dataset.n_train % bs % m):
        raise UsageError(
            f"--microbatches {m} must divide every batch: --batch-size {bs} and "
            f"the epoch's last batch of {dataset.n_train % bs or bs} rows "
            f"({dataset.n_train} training rows)"
        )
    return dataset


# -- saves ---------------------------------------------------------------------------------


def save(run, path=None):
    """The checkpoint with the data position of the next batch (and the early-stopping state)
    in its data_schedule; the history first (after a crash it then holds at least the
    checkpoint's steps). `path`: the best checkpoint instead (no history). A data-parallel
    run's processes all record the schedule (it is part of the state); rank 0 writes, and all
    return once it has (or all raise)."""
    run.trainer.data_schedule = run.record(run)
    problem = None
    if run.group.root:
        try:
            if path is None:
                run.history.flush()
            run.trainer.save_checkpoint(path or run.ckpt)
        except Exception as exc:  # noqa: BLE001 - every process must hear of it
            problem = exc
    run.group.agree(problem)


def _record(run):
    """The data_schedule of a run on rows at its stream's position."""
    stream = run.stream
    return schedule_record(run.dataset, run.opts, stream.epoch, stream.cursor, run.stopping)


# -- the loop ------------------------------------------------------------------------------


def _announce(args, run, out):
    """The run's progress reporter, after its first lines: the start record and what trains."""
    dataset, opts, trainer, end = run.dataset, run.opts, run.trainer, run.end
    every = args.log_every or max(1, (end - run.start) // 20)
    progress = Progress(run.start, end, every, stream=out, json_lines=args.json and run.group.root)
    val = f"{dataset.n_val} validation / " if dataset.n_val else ""
    what = f"{dataset.name} ({dataset.n_train} train / {val}{dataset.n_test} test rows)"
    progress.emit(
        {
            "event": "start",
            "dataset": dataset.name,
            "dataset_sha256": dataset.sha256,
            "n_train": dataset.n_train,
            "n_test": dataset.n_test,
            "start_step": run.start,
            "end_step": end,
            "checkpoint": _shown(run.ckpt),
            "network": repr(trainer.model) if opts["model"] else list(trainer.layer_sizes),
            **({"n_val": dataset.n_val} if dataset.n_val else {}),
            **{k: opts[k] for k in opts if k != "end_step"},  # end_step: the run's, above
        }
    )
    net = f"MLPTrainer {opts['layers']}" if opts["layers"] else "SmallMLPTrainer [8, 16, 3]"
    if opts["model"]:
        net = f"Trainer {trainer.model!r} ({opts['loss']})"
    progress.message(
        f"{'resuming' if run.start else 'training'} {net} on {what}: step {run.start} "
        f"-> {end}, batch {opts['batch_size']}, {lr_text(opts, end)}, weight decay "
        f"{opts['weight_decay']}, seed {opts['seed']}, mode {opts['mode']}"
    )
    if run.start >= end:
        progress.message(
            f"the checkpoint is at step {run.start} already (--steps/--epochs "
            f"end at {end}); nothing to train"
        )
    elif _patience_spent(run):
        progress.message(
            f"the run stopped early already (at step {run.start}: no better validation loss "
            f"in {run.opts['patience']} epochs); nothing to train"
        )
    return progress


def _step(run):
    """One step on the stream's next batch: (the step's history record, correct rows, rows)."""
    from .._buffers.array import Array

    x, y, rows = run.stream.next_batch()
    X = Array._wrap(x, (rows, run.dataset.n_features), "<f4")
    Y = Array._wrap(y, (rows,), y.typecode == "f" and "<f4" or "<i4")
    if (
        run.dp is not None or y.typecode == "f"
    ):  # the steps' logits stay with the processes that computed them
        result = (run.dp or run.trainer).train_step(X, Y)
        return {"step": result["step"], "loss": float(result["loss"])}, 0, 0
    result = run.trainer.train_step(X, Y)
    correct = argmax_correct(result["logits"], y, rows)
    record = {"accuracy": correct / rows, "step": result["step"], "loss": float(result["loss"])}
    return record, correct, rows


def _score(dataset):
    """The name of the score `evaluate` gives with the loss: accuracy, or a regression's R²."""
    return "r2" if dataset.targets is not None else "accuracy"


def _patience_spent(run):
    return run.stopping is not None and run.stopping["bad_epochs"] >= run.opts["patience"]


def _epoch_end(run, record, step):
    """At an epoch's end: the validation loss and accuracy into the step's record and, with
    --patience, the early-stopping state (a better loss saves CHECKPOINT.best at once)."""
    if not run.dataset.n_val:
        return
    loss, score = run.group.root_value(evaluate(run.trainer, run.dataset, run.dataset.val_rows))
    record["val_loss"], record[f"val_{_score(run.dataset)}"] = loss, score
    stopping = run.stopping
    if stopping is None:
        return
    if stopping["best_val_loss"] is None or loss < stopping["best_val_loss"]:
        stopping.update(best_step=step, best_val_loss=loss, bad_epochs=0)
        save(run, run.best)
    else:
        stopping["bad_epochs"] += 1


def _after_step(run, record, step):
    """Validation points depend on the step only (epoch ends), so a trace is the same however
    the run was cut into legs; the test rows are scored once, in the report, so that they
    choose nothing."""
    if step % run.per_epoch == 0:
        _epoch_end(run, record, step)


def _save_due(args, run, step):
    """Whether this step ends a save interval: every --checkpoint-every K steps, else once
    CHECKPOINT_SECONDS of training have passed since the last save."""
    if args.checkpoint_every is not None:
        return int(step % args.checkpoint_every == 0)
    return int(time.monotonic() - run.saved_at >= CHECKPOINT_SECONDS)


def loop(args, run, out):
    """Steps until the end, a signal or the end of the patience, saving every
    --checkpoint-every steps and at the end; returns (the signal that stopped it or 0, the
    last step, its loss). A step refused as non-finite (the run diverged) is one line naming
    the step and the checkpoint kept."""
    run.progress = progress = run.announce(args, run, out)
    run.saved_at = time.monotonic()
    step, loss, stop = run.start, None, 0
    with Interrupt() as interrupt:
        try:
            while step < run.end and not stop and not _patience_spent(run):
                record, correct, rows = run.take_step(run)
                step, loss = record["step"], record["loss"]
                run.after_step(run, record, step)
                run.history.add(record)
                progress.update(step, loss, correct, rows)
                # A signal on any process stops all after the same step, and a save that is
                # due on any (by the clock) is made by all: one agreement carries both (the
                # signal in the low byte). The handler's flag is never overwritten: one that
                # lands during this agreement (or loses to a due save) counts at a later step.
                agreed = run.group.any(interrupt.hit | _save_due(args, run, step) << 8)
                stop = agreed & 0xFF
                if agreed >> 8 and step != run.end:
                    save(run)
                    run.saved, run.saved_at = step, time.monotonic()
        except RuntimeError as exc:  # the state is unchanged: the step was refused whole
            progress.close()
            opts = run.opts
            raise UsageError(
                f"step {run.trainer.step_ + 1} is not finite, so the run stopped "
                f"(lr {opts['lr']}, weight decay {opts['weight_decay']} diverge: "
                f"try smaller ones); {_shown(run.ckpt)} keeps step {run.saved}; "
                f"{str(exc)[:200]}"
            ) from None
        except UsageError as exc:  # validation rows that overflow with the grown weights
            progress.close()
            raise UsageError(f"{exc}; {_shown(run.ckpt)} keeps step {run.saved}") from None
        save(run)
    progress.close()
    return stop or interrupt.hit, step, loss


# -- the report ----------------------------------------------------------------------------


def _interrupted(args, run, hit, step):
    """The lines of a run a signal stopped: where it stopped and how to resume."""
    resume = shlex.join(["mojolearn"] + _resume_argv(args) + ["--resume"])
    name = signal.Signals(hit).name
    run.progress.emit(
        {"event": "interrupted", "signal": name, "step": step, "checkpoint": _shown(run.ckpt)}
    )
    run.progress.message(
        f"interrupted ({name}) at step {step}; checkpoint saved to "
        f"{_shown(run.ckpt)}. Resume with: {_shown(resume)}"
    )
    return 128 + hit


def _resume_argv(args):
    """The run's arguments less --resume; a run continued from a best checkpoint resumes
    from the checkpoint it writes (its --checkpoint replaced)."""
    argv = [a for a in args.argv if a != "--resume"]
    if args.resume_from == args.checkpoint:
        return argv
    kept, skip = [], False
    for a in argv:
        if skip or a.startswith("--checkpoint="):
            skip = False
            continue
        skip = a == "--checkpoint"
        if not skip:
            kept.append(a)
    return kept + ["--checkpoint", args.checkpoint]


def _validation_lines(run, summary):
    """The report's validation and early-stopping figures, into `summary` and as lines."""
    dataset, stopping = run.dataset, run.stopping
    if not dataset.n_val:
        return ""
    loss, score = run.group.root_value(evaluate(run.trainer, dataset, dataset.val_rows))
    summary.update({"val_loss": loss, f"val_{_score(dataset)}": score})
    shown = f"R² {score:.4f}" if dataset.targets is not None else f"accuracy {100 * score:.1f}%"
    lines = f"\n  validation {shown} ({dataset.n_val} rows)"
    if stopping is None:
        return lines
    best = stopping["best_val_loss"]
    summary.update(
        stopped_early=_patience_spent(run),
        best_step=stopping["best_step"],
        best_val_loss=best,
        best_checkpoint=None if best is None else _shown(run.best),
    )
    if _patience_spent(run):
        lines += f"\n  stopped early: no better validation loss in {run.opts['patience']} epochs"
    if best is None:
        return lines + "\n  best checkpoint none yet (no epoch has ended)"
    return lines + (
        f"\n  best checkpoint {_shown(run.best)} (step {stopping['best_step']}, "
        f"validation loss {best:.4f})"
    )


def report(args, run, outcome):
    """The closing lines: how to resume after a signal, else the test accuracy (the test
    rows' only scoring), validation and early stopping, state hash, plot."""
    hit, step, loss = outcome
    trainer, dataset, progress, ckpt = run.trainer, run.dataset, run.progress, run.ckpt
    if hit and step < run.end and not _patience_spent(run):
        return _interrupted(args, run, hit, step)
    test_loss, test_acc = evaluate(trainer, dataset, dataset.test_rows)
    state_hash = trainer.state_hash()
    history = run.history.path
    summary = {
        "event": "done",
        "step": trainer.step_,
        "final_loss": loss,
        "test_loss": test_loss,
        "test_accuracy": test_acc,
        "state_hash": state_hash,
        "checkpoint": _shown(ckpt),
        "history": _shown(history),
        "seconds": round(progress.elapsed(), 3),
    }
    if dataset.targets is not None:  # the test MSE in the target's units (the loss's are sd)
        del summary["test_accuracy"]
        test_mse = None if test_loss is None else test_loss * dataset.target_sd**2
        summary.update(test_mse=test_mse, test_r2=test_acc)
    validation = _validation_lines(run, summary)
    if args.plot and run.group.root:
        plot(_history.read(history), args.plot, dataset.name, (trainer.step_, test_loss))
        summary["plot"] = _shown(args.plot)
    acc = "accuracy n/a" if test_acc is None else f"accuracy {100 * test_acc:.1f}%"
    if dataset.targets is not None and test_acc is not None:
        acc = f"MSE {summary['test_mse']:.6g} (in the target's units), R² {test_acc:.4f}"
    acc += f" ({dataset.n_test} rows)" if test_acc is not None else ""
    if loss is None:  # nothing trained in this process: the last recorded step's loss
        loss = next((r["loss"] for r in reversed(_history.read(history))), None)
        summary["final_loss"] = loss
    final = "n/a" if loss is None else f"{loss:.4f}"
    progress.emit(summary)
    progress.message(
        f"done: step {trainer.step_} in {progress.elapsed():.2f} s\n"
        f"  test {acc}{validation}\n"
        f"  final train loss {final}\n"
        f"  state hash {state_hash}\n"
        f"  checkpoint {_shown(ckpt)}\n"
        f"  history {_shown(history)}" + (f"\n  plot {_shown(args.plot)}" if args.plot else "")
    )
    return EXIT_OK


def lr_text(opts, end):
    """The run's learning rate for its first progress line, its schedule too."""
    lr = f"lr {opts['lr']}"
    if opts["schedule"] != "constant":
        lr += f" ({opts['schedule']}, warmup {opts['warmup']}, to 0 at step {end})"
    return lr
