"""The `mojolearn` command line: `train`, `info`, `verify`.

`mojolearn train` trains an MLP (the 8→16→3 network by default, any sizes with `--layers`) on
the bundled wine data (or `--dataset digits`, or `--data CSV`) with a seeded, recorded data
order, checkpoints every `--checkpoint-every` steps and on Ctrl-C, and resumes (`--resume`)
to exactly the bytes of an uninterrupted run. Exit codes: 0 success, 1 `verify` found the file
invalid, 2 bad input (one line on stderr, nothing written) or a run that diverged (the last
checkpoint kept), 130 interrupted by Ctrl-C / 143 by SIGTERM (checkpoint saved in both cases).
"""

import argparse
import errno
import io
import json
import math
import os
import shlex
import signal
import sys

from .._runtime import files as _files
from .._runtime.portable import round_f32
from . import data as _data
from . import history as _history
from .progress import Progress, printable

_shown = _files.shown

DEFAULT_CHECKPOINT = "mojolearn-run.ckpt"
DEFAULTS = dict(epochs=30, batch_size=16, lr=0.01, weight_decay=0.01, seed=0, checkpoint_every=50)
DIGITS_LAYERS = [64, 128, 10]  # `--dataset digits` without --layers
SCHEDULE_FORMAT = "mojolearn.data-schedule.v1"
EXIT_OK, EXIT_INVALID, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


# -- argument parsing ----------------------------------------------------------------------


def _int_in(lo, hi, what):
    def parse(text):
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer {what}, got {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"expected an integer {what}, got {value}")
        return value

    return parse


def _float_in(positive, what):
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number {what}, got {text!r}") from None
        if (
            not math.isfinite(value)
            or abs(value) > _data.F32_MAX
            or value < 0
            or (positive and value == 0)
        ):
            raise argparse.ArgumentTypeError(f"expected a finite number {what}, got {text!r}")
        if positive and round_f32(value) == 0:  # the trainer computes in float32
            raise argparse.ArgumentTypeError(
                f"expected a finite number {what} in float32, got {text!r} (it rounds to 0)"
            )
        return value

    return parse


class _Parser(argparse.ArgumentParser):
    """argparse, with a refusal as ONE line on stderr (exit 2), as every other refusal is."""

    def error(self, message):
        self.exit(
            EXIT_BAD_INPUT,
            printable(f"{self.prog}: error: {message} (see {self.prog} --help)\n", sys.stderr),
        )


def _power_of_two(text):
    value = _int_in(1, 1 << 20, "power of two in [1, 2**20]")(text)
    if value & (value - 1):
        raise argparse.ArgumentTypeError(f"expected a power of two (1, 2, 4, ...), got {value}")
    return value


def _layers_arg(text):
    try:
        sizes = [int(part, 10) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 64,128,10, got {text!r}"
        ) from None
    from .._mlp.spec import LayerSizes

    try:
        LayerSizes(sizes, "layer sizes")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return sizes


class _Version(argparse.Action):
    """`--version`: argparse's version action, with the version read only when asked (reading
    the installed metadata costs tens of milliseconds that no other command should pay)."""

    def __init__(self, option_strings, dest, help=None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        import mojolearn

        print(f"{parser.prog} {mojolearn.__version__}", file=sys.stdout)
        parser.exit(EXIT_OK)


def build_parser():
    d = DEFAULTS
    parser = _Parser(
        prog="mojolearn",
        description="Bit-reproducible training of MLPs with AdamW: any layer sizes (train "
        "--layers); the default run trains the 8 -> 16 -> 3 network on the bundled wine data.",
    )
    parser.add_argument(
        "--version",
        action=_Version,
        help="print the version (the one `mojolearn info` prints) and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    train = sub.add_parser(
        "train",
        help="train an MLP on bundled data (wine, digits) or your CSV, with exact resume",
        description="Train an MLP with AdamW: SmallMLPTrainer's 8 -> 16 -> 3 network by "
        "default, or an MLPTrainer of any --layers sizes. Without --data it trains on the "
        "bundled UCI wine data (8 of 13 attributes, standardized; 144 train / 34 test rows), "
        "or on the bundled handwritten digits with --dataset digits. --microbatches M makes "
        "data-parallel steps (under mpiexec, several processes with the bits of one). The run "
        "can be stopped at any moment (Ctrl-C saves a checkpoint) and resumed with --resume "
        "to the same final bytes (--allow-profile-change for a checkpoint of an older "
        "arithmetic profile).",
        epilog=f"Defaults: --epochs {d['epochs']} when neither --steps nor --epochs is given, "
        f"--checkpoint {DEFAULT_CHECKPOINT} (history in {DEFAULT_CHECKPOINT}"
        f".history.jsonl); without --resume an existing checkpoint and history at that "
        f"path are replaced. On --resume, options left out are taken from the checkpoint; "
        f"options that differ from it (dataset, batch size, seed, lr, weight decay, mode) "
        f"are refused. Exit codes: 0 done, 2 bad input or a diverged run (the last "
        f"checkpoint kept), 130 interrupted by Ctrl-C, 143 by SIGTERM (checkpoint saved "
        f"in both cases).",
    )
    source = train.add_mutually_exclusive_group()
    source.add_argument(
        "--data",
        metavar="CSV",
        help="CSV with numeric feature columns and one label column (integer "
        "classes from 0, or distinct strings); as many features and "
        "classes as the network has (8 and up to 3 without --layers)",
    )
    source.add_argument(
        "--dataset",
        choices=(_data.BUNDLED_NAME, _data.DIGITS_NAME),
        help="bundled data: wine (default; 8 of 13 attributes, or all 13 with "
        "--layers 13,...,3) or digits (8x8 handwritten digits, 64 "
        "features, 10 classes; default --layers 64,128,10)",
    )
    train.add_argument(
        "--layers",
        type=_layers_arg,
        metavar="SIZES",
        help="layer sizes of an MLPTrainer network, e.g. 64,128,10: inputs, "
        "hidden widths, classes (default: SmallMLPTrainer's 8,16,3)",
    )
    train.add_argument(
        "--label-column",
        metavar="NAME",
        help="name (or 1-based number without a header) of the label column; "
        "default: the column named 'label', else the last",
    )
    length = train.add_mutually_exclusive_group()
    length.add_argument(
        "--steps",
        type=_int_in(1, (1 << 31) - 1, "in [1, 2**31)"),
        metavar="N",
        help="the step the run ends at (also after --resume)",
    )
    length.add_argument(
        "--epochs",
        type=_int_in(1, 1 << 20, "in [1, 2**20]"),
        metavar="E",
        help=f"train until E epochs are done (default {d['epochs']})",
    )
    train.add_argument(
        "--batch-size",
        type=_int_in(1, 256, "in [1, 256]"),
        metavar="B",
        help=f"rows per step (default {d['batch_size']}); the last batch of an "
        f"epoch is smaller when B does not divide the training rows",
    )
    train.add_argument(
        "--lr",
        type=_float_in(True, "> 0"),
        metavar="LR",
        help=f"AdamW learning rate (default {d['lr']})",
    )
    train.add_argument(
        "--weight-decay",
        type=_float_in(False, ">= 0"),
        metavar="WD",
        help=f"AdamW decoupled weight decay (default {d['weight_decay']})",
    )
    train.add_argument(
        "--seed",
        type=_int_in(0, (1 << 64) - 1, "in [0, 2**64)"),
        metavar="S",
        help=f"seed of the initial weights and the data order (default {d['seed']})",
    )
    train.add_argument(
        "--mode",
        choices=("identical", "fast"),
        help="numeric mode (default identical: the same bits on every machine)",
    )
    train.add_argument(
        "--checkpoint",
        metavar="PATH",
        default=DEFAULT_CHECKPOINT,
        help=f"checkpoint file (default {DEFAULT_CHECKPOINT})",
    )
    train.add_argument(
        "--checkpoint-every",
        type=_int_in(1, (1 << 31) - 1, ">= 1"),
        metavar="K",
        default=d["checkpoint_every"],
        help=f"save every K steps (default {d['checkpoint_every']})",
    )
    train.add_argument(
        "--microbatches",
        type=_power_of_two,
        metavar="M",
        help="data-parallel steps of M microbatches (a power of two dividing "
        "every batch): under `mpiexec -n N` the N processes share them and "
        "end with the bits of one process; rank 0 writes the checkpoint, "
        "history and output",
    )
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue the run saved in --checkpoint at exactly the next batch",
    )
    train.add_argument(
        "--allow-profile-change",
        action="store_true",
        help="with --resume: continue an identical-mode checkpoint written under an older "
        "arithmetic profile (its next steps then follow this version's arithmetic, not the "
        "original run's bits)",
    )
    train.add_argument(
        "--plot",
        metavar="PNG",
        help="write a PNG of train and test loss per step (needs matplotlib: pip install "
        "matplotlib)",
    )
    train.add_argument(
        "--json", action="store_true", help="print one JSON object per report line on stdout"
    )
    train.add_argument(
        "--log-every",
        type=_int_in(1, (1 << 31) - 1, ">= 1"),
        metavar="N",
        help="report every N steps (default: about 20 reports per run)",
    )
    train.set_defaults(func=cmd_train)

    info = sub.add_parser("info", help="version, vendor, numeric mode and build flags")
    info.add_argument("--mode", choices=("identical", "fast"), help="load this mode's binding")
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.set_defaults(func=cmd_info)

    verify = sub.add_parser(
        "verify",
        help="check a checkpoint file; print its step, schema, "
        "profile and state hash (exit 1 when invalid)",
    )
    verify.add_argument("checkpoint", metavar="CHECKPOINT")
    verify.add_argument("--json", action="store_true", help="print one JSON object")
    verify.set_defaults(func=cmd_verify)
    return parser


# -- trainer adapter (the few calls the CLI makes on SmallMLPTrainer and checkpoint) --------


def _trainer_class():
    from ..trainer import SmallMLPTrainer

    return SmallMLPTrainer


def _new_trainer(opts, schedule):
    """SmallMLPTrainer (no --layers) or MLPTrainer, seeded weights, the run's options."""
    hyper = dict(data_schedule=schedule, lr=opts["lr"], weight_decay=opts["weight_decay"])
    if opts["layers"] is None:
        from .._mlp.spec import init_small_mlp

        return _trainer_class()(*init_small_mlp(opts["seed"]), **hyper)
    from ..mlp_trainer import MLPTrainer

    return MLPTrainer(opts["layers"], seed=opts["seed"], **hyper)


def _trainer_for(state):
    """The trainer (class by the state's schema) holding a checked checkpoint state."""
    if state["schema"] == _mlp_schema():
        from ..mlp_trainer import MLPTrainer

        return MLPTrainer._from_state(state)
    return _trainer_class()._from_state(state)


def _mlp_schema():
    from .._mlp.state import MLP_SCHEMA

    return MLP_SCHEMA


def _checkpoint_module():
    from .. import checkpoint

    return checkpoint


def _peek_checkpoint(path, allow_profile_change=False):
    """The data_schedule of a checkpoint, fully checked without loading a binding (the
    numeric mode must be chosen before the binding loads)."""
    if not os.path.isfile(path):
        raise UsageError(
            f"--resume: no checkpoint at {_shown(path)} (train without --resume "
            f"first, or pass --checkpoint PATH)"
        )
    ckpt = _checkpoint_module()
    try:
        state, envelope = ckpt.load_with_envelope(path, schema=None)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"--resume: {_shown(path)} is not a valid mojolearn checkpoint: {exc}"
        ) from None
    try:  # read once: the file's profile decides whether it may be continued
        ckpt.check_resumable(state, envelope, allow_profile_change)
    except ValueError as exc:
        raise UsageError(f"--resume: {_shown(path)}: {exc}") from None
    problem = run_schedule_problem(state)
    if problem:
        raise UsageError(f"--resume: {_shown(path)}: {problem}")
    return state["data_schedule"]


# What `train` records in a checkpoint's data_schedule: key -> (type check, what it must be).
def _int_at_least(lo, hi=None):
    return lambda x: type(x) is int and x >= lo and (hi is None or x <= hi)


def _number_in(positive):
    return lambda x: (
        type(x) in (int, float) and math.isfinite(x) and (x > 0 if positive else x >= 0)
    )


_SCHEDULE_FIELDS = {
    "dataset": (lambda x: type(x) is str and x != "", "a non-empty string"),
    "dataset_sha256": (
        lambda x: type(x) is str and len(x) == 64 and all(c in "0123456789abcdef" for c in x),
        "64 lowercase hex digits",
    ),
    "label_column": (lambda x: type(x) is str, "a string"),
    "n_train": (_int_at_least(1), "an integer >= 1"),
    "split_seed": (lambda x: x == _data.SPLIT_SEED and type(x) is int, str(_data.SPLIT_SEED)),
    "seed": (_int_at_least(0, (1 << 64) - 1), "an integer in [0, 2**64)"),
    "batch_size": (_int_at_least(1, 256), "an integer in [1, 256]"),
    "lr": (_number_in(True), "a finite number > 0"),
    "weight_decay": (_number_in(False), "a finite number >= 0"),
    "mode": (lambda x: x in ("identical", "fast"), "'identical' or 'fast'"),
    "epoch": (_int_at_least(0), "an integer >= 0"),
    "cursor": (_int_at_least(0), "an integer >= 0"),
}


def run_schedule_problem(state):
    """Why a checked checkpoint state cannot be resumed by `train` (None when it can): its
    data_schedule must be the one `train` writes, with every field of the right type and
    range, agreeing with the state (mode, lr, weight decay, the data position of its step)."""
    schedule = state["data_schedule"]
    if schedule.get("format") != SCHEDULE_FORMAT:
        return f"not written by `mojolearn train` (its data_schedule is not {SCHEDULE_FORMAT})"
    for key, (ok, what) in _SCHEDULE_FIELDS.items():
        if key not in schedule:
            return f"data_schedule has no {key!r}"
        if not ok(schedule[key]):
            return f"data_schedule {key} must be {what}, got {schedule[key]!r}"[:300]
    m = schedule.get("microbatches", 1)
    if type(m) is not int or m < 1 or m & (m - 1):
        return f"data_schedule microbatches must be a power of two, got {m!r}"[:300]
    layers = schedule.get("layers")
    mlp = state["schema"] == _mlp_schema()
    if mlp and layers != state["architecture"] or not mlp and "layers" in schedule:
        return (
            f"data_schedule layers {layers!r} differ from the state's network "
            f"{state['architecture']!r}"
        )[:300]
    if schedule["mode"] != state["numeric_mode"]:
        return (
            f"data_schedule mode {schedule['mode']!r} differs from the state's numeric "
            f"mode {state['numeric_mode']!r}"
        )
    for key in ("lr", "weight_decay"):  # as given (v2), or rounded (a v1 file's config)
        if state["config"][key] not in (schedule[key], round_f32(schedule[key])):
            return (
                f"data_schedule {key} {schedule[key]!r} differs from the state's "
                f"{state['config'][key]!r}"
            )
    step = state["optimizer"]["step"]
    where = _data.position(step, schedule["n_train"], schedule["batch_size"])
    if (schedule["epoch"], schedule["cursor"]) != where:
        return (
            f"data position epoch {schedule['epoch']} cursor {schedule['cursor']} does "
            f"not match step {step} (expected epoch {where[0]} cursor {where[1]})"
        )
    return None


# -- train ---------------------------------------------------------------------------------


def _argmax_correct(logits, targets, rows):
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


class _Interrupt:
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


def _resolve_options(args, stored):
    """The run's options: given ones, else the checkpoint's (on --resume), else defaults.
    On --resume a given option that differs from the checkpoint is refused by name."""
    d = DEFAULTS
    opts = {
        "batch_size": args.batch_size,
        "seed": args.seed,
        "lr": args.lr,
        "weight_decay": args.weight_decay,
        "mode": args.mode,
        "layers": args.layers,
        "microbatches": args.microbatches,
    }
    if stored is None:
        # MOJOLEARN_NUMERIC_MODE, else identical; digits' default network is MLPTrainer's.
        defaults = dict(
            d,
            mode=_requested_mode(),
            microbatches=None,
            layers=DIGITS_LAYERS if args.dataset == _data.DIGITS_NAME else None,
        )
        return {k: (v if v is not None else defaults[k]) for k, v in opts.items()}
    conflicts = []
    for key, flag in (
        ("batch_size", "--batch-size"),
        ("seed", "--seed"),
        ("lr", "--lr"),
        ("weight_decay", "--weight-decay"),
        ("mode", "--mode"),
        ("layers", "--layers"),
        ("microbatches", "--microbatches"),
    ):
        given, saved = opts[key], stored.get(key)
        if given is not None and given != saved:
            conflicts.append(f"{flag} {given} (checkpoint: {saved})")
        opts[key] = saved
    if conflicts:
        raise UsageError(
            f"--resume: options conflict with the checkpoint: "
            f"{'; '.join(conflicts)} (leave them out or pass the saved values)"
        )
    return opts


def _requested_mode():
    from .._runtime.backend import requested_mode

    try:
        return requested_mode()
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_environment():
    """A bad MOJOLEARN_NUMERIC_MODE, MOJOLEARN_NUM_THREADS, MOJOLEARN_CPU_LEVEL or
    MOJOLEARN_VENDOR is a usage error of every command, raised before anything is read: never
    a verdict on a file (`verify`) or a refusal of one (`train --resume`)."""
    from .._runtime import backend as _backend
    from .._runtime import threads as _threads

    _requested_mode()
    try:
        _threads.num_threads()
        _backend._cpu_level()
        vendor = os.environ.get("MOJOLEARN_VENDOR")
        if vendor and vendor not in _backend.VENDORS:  # _backend's own check and message
            raise ValueError(f"MOJOLEARN_VENDOR must be one of {_backend.VENDORS}, got {vendor!r}")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_dataset(dataset, stored):
    problems = []
    if dataset.sha256 != stored.get("dataset_sha256"):
        problems.append(
            f"dataset sha256 {dataset.sha256[:16]}... (checkpoint: "
            f"{str(stored.get('dataset_sha256'))[:16]}..., {stored.get('dataset')})"
        )
    elif dataset.label_column != stored.get("label_column"):
        problems.append(
            f"label column {dataset.label_column!r} (checkpoint: {stored.get('label_column')!r})"
        )
    elif dataset.n_train != stored.get("n_train"):
        problems.append(f"{dataset.n_train} training rows (checkpoint: {stored.get('n_train')})")
    if problems:
        raise UsageError(
            f"--resume: the data differs from the checkpoint's: {problems[0]}; "
            f"pass the same --data (and --label-column) as the saved run"
        )


def _schedule(dataset, opts, epoch, cursor):
    schedule = {
        "format": SCHEDULE_FORMAT,
        "dataset": dataset.name,
        "dataset_sha256": dataset.sha256,
        "label_column": dataset.label_column,
        "n_train": dataset.n_train,
        "split_seed": _data.SPLIT_SEED,
        "seed": opts["seed"],
        "batch_size": opts["batch_size"],
        "lr": opts["lr"],
        "weight_decay": opts["weight_decay"],
        "mode": opts["mode"],
        "epoch": epoch,
        "cursor": cursor,
    }
    if opts["layers"] is not None:  # an MLPTrainer run (SmallMLPTrainer's schedule has none)
        schedule["layers"] = list(opts["layers"])
    if opts["microbatches"] is not None:  # a data-parallel run
        schedule["microbatches"] = opts["microbatches"]
    return schedule


def _evaluate(trainer, dataset):
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
        correct += _argmax_correct(trainer.predict_logits(X), y, len(chunk))
        loss, _ = trainer.loss_and_grads(X, Y)
        total += float(loss) * len(chunk)
    n = len(rows)
    return (float(loss) if n <= most else total / n), correct / n


def _save(trainer, history, path, schedule, dp=None):
    """History first (after a crash it then holds at least the checkpoint's steps), then the
    checkpoint with the data position of the next batch in its data_schedule. A data-parallel
    run's processes all record the schedule (it is part of the state); rank 0 writes, and all
    return once it has (or all raise)."""
    trainer.data_schedule = schedule
    if dp is None:
        history.flush()
        trainer.save_checkpoint(path)
        return
    problem = None
    if dp.rank == 0:
        try:
            history.flush()
            trainer.save_checkpoint(path)
        except Exception as exc:  # noqa: BLE001 - every process must hear of it
            problem = exc
    dp._agree(problem)


def _target(path, flag):
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


def cmd_train(args, out):
    if args.label_column is not None and args.data is None:
        raise UsageError("--label-column applies only with --data")
    if args.plot:
        _target(args.plot, "--plot")
        _require_matplotlib()
    _target(args.checkpoint, "--checkpoint")
    _target(_history.path_for(args.checkpoint), "--checkpoint's history")
    m = args.microbatches
    if m is None and args.resume:  # a data-parallel run resumes data-parallel
        try:
            m = _peek_checkpoint(args.checkpoint).get("microbatches")
        except UsageError:
            pass  # _setup_run says what is wrong with the checkpoint
    group = _Group(m)
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
            run = _setup_run(args, group)
        except UsageError as exc:
            problem = exc
        group.agree(problem)
        return _report(args, run, _train_loop(args, run, out if group.root else group.quiet()))
    finally:
        if lock is not None:
            lock.release()


class _Group:
    """The processes of a run: one without --microbatches; with it, MPI's world when mpi4py
    is there (else one process). Only rank 0 writes files and output; a refusal on any rank
    is raised on all of them, so no process waits for another forever; a process that stops
    on its own (an uncaught exception, or SIGINT before the loop's signal handling, e.g.
    while the CSV loads) aborts the whole job (`end`)."""

    job = None  # the communicator of a run of more than one process, once there is one

    def __init__(self, microbatches):
        self.comm, self.mpi = None, None
        if microbatches is not None:
            from ..distributed import _guard_job, _world

            self.comm, self.mpi = _world(None)
            if self.mpi is not None:
                _guard_job()  # an uncaught exception on any process aborts the job
                if self.comm.size > 1:
                    _Group.job = self.comm
        self.rank = 0 if self.comm is None else self.comm.rank
        self.root = self.rank == 0
        global _QUIET
        _QUIET = not self.root

    def agree(self, problem):
        if self.mpi is None:
            if problem is not None:
                raise problem
            return
        failed = self.comm.allgather(None if problem is None else str(problem))
        first = next((f for f in failed if f), None)
        if first is not None:
            raise problem if problem is not None else UsageError(first)

    @staticmethod
    def end(code):
        """Under mpiexec, end every process of the job now with `code` (MPI_Abort): this one
        stops while the others may wait for it in a collective. Nothing in one process."""
        if _Group.job is not None:
            from ..distributed import _abort

            _abort(code)

    def any(self, flag):
        """The largest `flag` of all processes (a signal seen by one stops all together)."""
        return flag if self.mpi is None else self.comm.allreduce(flag, op=self.mpi.MAX)

    @staticmethod
    def quiet():
        return open(os.devnull, "w")


_QUIET = False  # a data-parallel process other than rank 0: no output


class _Run:
    """What a run's loop and report need: the trainer, data, options and where it stands."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def _setup_run(args, group):
    """Options, dataset and trainer of a fresh run (step 0 saved at once) or a resumed one;
    every refusal is a UsageError before anything is written."""
    ckpt = args.checkpoint
    stored = _peek_checkpoint(ckpt, args.allow_profile_change) if args.resume else None
    opts = _resolve_options(args, stored)
    import mojolearn

    mojolearn.set_numeric_mode(opts["mode"])  # before any binding use

    layers = opts["layers"]
    features, classes = (layers[0], layers[-1]) if layers else (_data.FEATURES, _data.CLASSES)
    name = args.dataset
    if name is None and stored is not None and args.data is None:
        name = stored["dataset"]  # a bundled run resumes on its own data
    try:
        dataset = _data.load(args.data, args.label_column, features, classes, name)
    except _data.DataError as exc:
        raise UsageError(str(exc)) from None
    if stored is not None:
        _check_dataset(dataset, stored)
    bs = opts["batch_size"]
    m = opts["microbatches"]
    if m is not None and (bs % m or dataset.n_train % bs % m):
        raise UsageError(
            f"--microbatches {m} must divide every batch: --batch-size {bs} and "
            f"the epoch's last batch of {dataset.n_train % bs or bs} rows "
            f"({dataset.n_train} training rows)"
        )
    per_epoch = _data.steps_per_epoch(dataset.n_train, bs)
    end = args.steps if args.steps is not None else per_epoch * (args.epochs or DEFAULTS["epochs"])
    history = _history.History(ckpt)
    if stored is not None:
        try:
            trainer = _trainer_for(_checkpoint_module().load(ckpt, schema=None))
        except ValueError as exc:
            raise UsageError(f"--resume: {_shown(ckpt)}: {exc}") from None
        start = trainer.step_
        epoch, cursor = stored["epoch"], stored["cursor"]
        if group.root:
            history.resume_at(start)
    else:
        start, epoch, cursor = 0, 0, 0
        try:
            trainer = _new_trainer(opts, _schedule(dataset, opts, 0, 0))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    dp = None
    if m is not None:
        from ..distributed import DataParallel

        dp = DataParallel(trainer, m, group.comm)
    if stored is None:
        if group.root:
            history.start_fresh()
        # Step 0 on disk at once: the checkpoint and its history never belong to two runs.
        _save(trainer, history, ckpt, _schedule(dataset, opts, 0, 0), dp)
    return _Run(
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
        stream=_data.BatchStream(dataset, opts["seed"], bs, epoch, cursor),
    )


def _train_loop(args, run, out):
    """Steps until the end or a signal, saving every --checkpoint-every steps and at the end;
    returns (the signal that stopped it or 0, the last step, its loss). A step refused as
    non-finite (the run diverged) is one line naming the step and the checkpoint kept."""
    from .._buffers.array import Array

    trainer, dataset, history, ckpt = run.trainer, run.dataset, run.history, run.ckpt
    opts, stream, end = run.opts, run.stream, run.end
    every = args.log_every or max(1, (end - run.start) // 20)
    run.progress = progress = Progress(
        run.start, end, every, stream=out, json_lines=args.json and run.group.root
    )
    what = f"{dataset.name} ({dataset.n_train} train / {dataset.n_test} test rows)"
    progress.emit(
        {
            "event": "start",
            "dataset": dataset.name,
            "dataset_sha256": dataset.sha256,
            "n_train": dataset.n_train,
            "n_test": dataset.n_test,
            "start_step": run.start,
            "end_step": end,
            "checkpoint": _shown(ckpt),
            "network": list(trainer.layer_sizes),
            **{k: opts[k] for k in opts},
        }
    )
    net = f"MLPTrainer {opts['layers']}" if opts["layers"] else "SmallMLPTrainer [8, 16, 3]"
    progress.message(
        f"{'resuming' if run.start else 'training'} {net} on {what}: step {run.start} "
        f"-> {end}, batch {opts['batch_size']}, lr {opts['lr']}, weight decay "
        f"{opts['weight_decay']}, seed {opts['seed']}, mode {opts['mode']}"
    )
    if run.start >= end:
        progress.message(
            f"the checkpoint is at step {run.start} already (--steps/--epochs "
            f"end at {end}); nothing to train"
        )
    step, loss, stop = run.start, None, 0
    with _Interrupt() as interrupt:
        try:
            while step < end and not stop:
                x, y, rows = stream.next_batch()
                X = Array._wrap(x, (rows, dataset.n_features), "<f4")
                Y = Array._wrap(y, (rows,), "<i4")
                if run.dp is None:
                    result = trainer.train_step(X, Y)
                    correct = _argmax_correct(result["logits"], y, rows)
                    record = {"accuracy": correct / rows}
                else:  # the steps' logits stay with the processes that computed them
                    result, correct, record = run.dp.train_step(X, Y), 0, {}
                step, loss = result["step"], float(result["loss"])
                record.update(step=step, loss=loss)
                # Test points depend on the step only (epoch ends), so a trace is the same
                # however the run was cut into legs; the end-of-run figures are in the report.
                if step % run.per_epoch == 0:
                    record["test_loss"], record["test_accuracy"] = _evaluate(trainer, dataset)
                history.add(record)
                progress.update(step, loss, correct, rows if run.dp is None else 0)
                if step % args.checkpoint_every == 0 and step != end:
                    _save(
                        trainer,
                        history,
                        ckpt,
                        _schedule(dataset, opts, stream.epoch, stream.cursor),
                        run.dp,
                    )
                    run.saved = step
                # A signal on any process stops all after the same step. The handler's flag
                # is never overwritten: one that lands during this agreement counts at the
                # next step (assigning the agreed value to it could lose that signal).
                stop = run.group.any(interrupt.hit)
        except RuntimeError as exc:  # the state is unchanged: the step was refused whole
            progress.close()
            raise UsageError(
                f"step {trainer.step_ + 1} is not finite, so the run stopped "
                f"(lr {opts['lr']}, weight decay {opts['weight_decay']} diverge: "
                f"try smaller ones); {_shown(ckpt)} keeps step {run.saved}; "
                f"{str(exc)[:200]}"
            ) from None
        _save(trainer, history, ckpt, _schedule(dataset, opts, stream.epoch, stream.cursor), run.dp)
    progress.close()
    return stop or interrupt.hit, step, loss


def _report(args, run, outcome):
    """The closing lines: how to resume after a signal, else accuracy, state hash, plot."""
    hit, step, loss = outcome
    trainer, dataset, progress, ckpt = run.trainer, run.dataset, run.progress, run.ckpt
    if hit and step < run.end:
        resume = shlex.join(
            ["mojolearn"] + [a for a in args.argv if a != "--resume"] + ["--resume"]
        )
        name = signal.Signals(hit).name
        progress.emit(
            {"event": "interrupted", "signal": name, "step": step, "checkpoint": _shown(ckpt)}
        )
        progress.message(
            f"interrupted ({name}) at step {step}; checkpoint saved to "
            f"{_shown(ckpt)}. Resume with: {_shown(resume)}"
        )
        return 128 + hit
    test_loss, test_acc = _evaluate(trainer, dataset)
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
    if args.plot and run.group.root:
        _plot(_history.read(history), args.plot, dataset.name, (trainer.step_, test_loss))
        summary["plot"] = _shown(args.plot)
    acc = "n/a" if test_acc is None else f"{100 * test_acc:.1f}% ({dataset.n_test} rows)"
    if loss is None:  # nothing trained in this process: the last recorded step's loss
        loss = next((r["loss"] for r in reversed(_history.read(history))), None)
        summary["final_loss"] = loss
    final = "n/a" if loss is None else f"{loss:.4f}"
    progress.emit(summary)
    progress.message(
        f"done: step {trainer.step_} in {progress.elapsed():.2f} s\n"
        f"  test accuracy {acc}\n"
        f"  final train loss {final}\n"
        f"  state hash {state_hash}\n"
        f"  checkpoint {_shown(ckpt)}\n"
        f"  history {_shown(history)}" + (f"\n  plot {_shown(args.plot)}" if args.plot else "")
    )
    return EXIT_OK


# -- plot ----------------------------------------------------------------------------------


def _require_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib, which is not installed: pip install matplotlib"
        ) from None


def _plot(records, path, title, final_test=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(
        [r["step"] for r in records], [r["loss"] for r in records], lw=1, label="train loss (batch)"
    )
    test = [(r["step"], r["test_loss"]) for r in records if r.get("test_loss") is not None]
    if final_test and final_test[1] is not None and (not test or test[-1][0] != final_test[0]):
        test.append(final_test)
    if test:
        ax.plot([s for s, _ in test], [v for _, v in test], "o-", ms=3, label="test loss")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.set_title(f"mojolearn train: {title}")
    ax.legend()
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png")
    plt.close(fig)
    try:
        _files.write_atomic(path, png.getvalue(), what="--plot")
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"--plot {_shown(path)}: {getattr(exc, 'strerror', None) or exc}"
        ) from None


# -- info and verify -----------------------------------------------------------------------


def cmd_info(args, out):
    import mojolearn

    from .._runtime import backend as _backend

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
    info = {
        "version": mojolearn.__version__,
        "vendor": b.vendor,
        "mode": b.mode,
        "target_cpu": b.target_cpu,
        "accelerator": b.accelerator,
        "build_flags": flags,
        "binding": b.name,
        "bindings_installed": built,
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
    ckpt = _checkpoint_module()
    try:
        report = dict(ckpt.verify(path))
        state = ckpt.load(path, schema=None)
        if state["data_schedule"].get("format") == SCHEDULE_FORMAT:
            problem = run_schedule_problem(state)
            if problem:
                raise ValueError(f"cannot be resumed by `mojolearn train`: {problem}")
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
    trainer = _trainer_for(state)
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
            Array.from_list(list(x), "<f4").reshape(rows, -1), Array.from_list(list(y), "<i4")
        )
    except RuntimeError as exc:
        raise ValueError(
            f"the state cannot take a finite step (step {trainer.step_ + 1} on "
            f"{where}): {str(exc)[:200]}"
        ) from None
    return f"finite (step {trainer.step_} on {where})"


# -- entry point ---------------------------------------------------------------------------


def main(argv=None):
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.argv = argv
    out = sys.stdout
    try:
        _check_environment()  # a bad MOJOLEARN_* setting is one line for every command
        return args.func(args, out)
    except UsageError as exc:
        if not _QUIET:  # under mpiexec, one line from rank 0 (every rank refused the same)
            print(printable(f"mojolearn {args.command}: error: {exc}", sys.stderr), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"mojolearn {args.command}: interrupted", file=sys.stderr)
        _Group.end(EXIT_INTERRUPTED)  # under mpiexec: the other processes end too
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
