"""What `train` records to resume a run, and the run's options.

A `train` checkpoint's data_schedule is the record `schedule_record` writes (format
`SCHEDULE_FORMAT`): the dataset's identity, the options that fix the bits (seed, batch size,
lr, weight decay, mode, layers, microbatches, validation fraction, patience, and a warmup
learning-rate schedule's name and warmup: the trainer's `lr_schedule` record holds its rates),
the data position of the next batch, the early-stopping state and the data's preprocessing
(its feature columns, standardization and class names: what `predict` applies to raw rows).
Checkpoints written before the preprocessing, validation, patience and schedule fields
existed have none of them and still resume (the next save adds the preprocessing); a run of
the constant schedule writes no schedule fields, so its bytes are what they always were.
Recorded only when given (so a run without them writes the bytes it always did): the test
fraction (`--test-fraction`), `--classification`, `--image-shape`, and a constant-rate run's
end step (`--steps`/`--epochs`), which a resume without them restores.
`run_schedule_problem` checks it against the state; `resolve_options` takes the options of a
run from the command line, else the checkpoint's (on --resume), else the defaults.
"""

import math
import os

from .._model.preprocessing import finite_numbers
from .._runtime import files as _files
from .._runtime.portable import round_f32
from . import data as _data
from .spec import SpecError, build, input_shape, outputs, parse
from .textrecord import TEXT_FORMAT, VOCAB_CHUNK, build_gpt, is_gpt, parse_gpt, vocab_of
from .trainers import checkpoints, is_model, load_state, schema_of
from .usage import UsageError

_shown = _files.shown

DEFAULT_CHECKPOINT = "mojolearn-run.ckpt"
DEFAULTS = dict(epochs=30, batch_size=16, lr=0.01, weight_decay=0.01, seed=0)
# Without --checkpoint-every a run saves after this many seconds of training (and at its end):
# a save is a full state write, so a step-count default doubled a small run's time.
CHECKPOINT_SECONDS = 60.0
DIGITS_LAYERS = [64, 128, 10]  # `--dataset digits` without --layers
SCHEDULE_FORMAT = "mojolearn.data-schedule.v1"
# --schedule's names; `constant` (every step at --lr) is the default and sets no lr_schedule,
# so its runs and checkpoints are byte for byte what they were before schedules.
LR_SCHEDULES = ("constant", "warmup-linear", "warmup-cosine")
_LR_KINDS = {"warmup-linear": "warmup_linear", "warmup-cosine": "warmup_cosine"}

# -- the data-schedule v1 record -----------------------------------------------------------


def schedule_record(dataset, opts, epoch, cursor, stopping=None):
    """The data_schedule `train` gives its trainer: the run's data and options, the data
    position (epoch, cursor) of the next batch and the early-stopping state `stopping`."""
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
        "preprocessing": preprocessing_record(dataset),
    }
    if opts["layers"] is not None:  # an MLPTrainer run (SmallMLPTrainer's schedule has none)
        schedule["layers"] = list(opts["layers"])
    if opts.get("model") is not None:  # a Trainer run: its SPEC and loss
        schedule.update(model=opts["model"], loss=opts["loss"])
    if opts["microbatches"] is not None:  # a data-parallel run
        schedule["microbatches"] = opts["microbatches"]
    if opts["val_fraction"] is not None:
        schedule.update(val_fraction=opts["val_fraction"], n_val=dataset.n_val)
    if opts["patience"] is not None:
        schedule.update(patience=opts["patience"], early_stopping=dict(stopping))
    if opts["schedule"] != "constant":  # a constant run records what it always did
        schedule.update(schedule=opts["schedule"], warmup=opts["warmup"])
    # Recorded only when given, so a run without them writes the bytes it always did.
    for key in ("test_fraction", "classification", "end_step", "image_shape"):
        if opts.get(key) is not None:
            schedule[key] = opts[key]
    return schedule


def preprocessing_record(dataset):
    """What `predict` needs to treat raw rows as `train` did: the feature columns (in the
    network's input order; whether a header named them; the label's place among the file's
    columns), the standardization's means and standard deviations (float64, exactly as
    `train` applied them) and the class names (in class order), or a regression's target
    mean and standard deviation instead (float64: predictions are `z * sd + mean`)."""
    record = {
        "columns": list(dataset.columns),
        "header": dataset.header,
        "label_index": dataset.label_index,
        "mean": list(dataset.means),
        "sd": list(dataset.sds),
    }
    if dataset.targets is not None:
        return dict(record, target_mean=dataset.target_mean, target_sd=dataset.target_sd)
    return dict(record, classes=list(dataset.class_names))


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
    if schedule.get("format") == TEXT_FORMAT:
        return _text_problem(state)
    if schedule.get("format") != SCHEDULE_FORMAT:
        return f"not written by `mojolearn train` (its data_schedule is not {SCHEDULE_FORMAT})"
    problem = _fields_problem(schedule, _SCHEDULE_FIELDS)
    if problem:
        return problem
    m = schedule.get("microbatches", 1)
    if type(m) is not int or m < 1 or m & (m - 1):
        return f"data_schedule microbatches must be a power of two, got {m!r}"[:300]
    layers, model = schedule.get("layers"), is_model(state)
    mlp = not model and schema_of(state).spec is None  # `train --layers` records its layers
    if model and "layers" in schedule:
        return "data_schedule layers: a model state's run records its --model, not layers"
    if not model and (mlp and layers != state["architecture"] or not mlp and "layers" in schedule):
        return (
            f"data_schedule layers {layers!r} differ from the state's network "
            f"{state['architecture']!r}"
        )[:300]
    sizes = _model_sizes(schedule, state) if model else state["architecture"]
    if model and type(sizes) is str or not model and ("model" in schedule or "loss" in schedule):
        return sizes if model else "data_schedule model and loss: the state is not a model's"
    problem = _config_problem(schedule, state)
    if problem:
        return problem
    step = state["step"] if model else state["optimizer"]["step"]
    where = _data.position(step, schedule["n_train"], schedule["batch_size"])
    if (schedule["epoch"], schedule["cursor"]) != where:
        return (
            f"data position epoch {schedule['epoch']} cursor {schedule['cursor']} does "
            f"not match step {step} (expected epoch {where[0]} cursor {where[1]})"
        )
    problem = (
        _stopping_problem(schedule, step)
        or _lr_schedule_problem(schedule, state)
        or _optional_problem(schedule)
    )
    if problem or "preprocessing" not in schedule:  # none in a file written before it
        return problem
    return preprocessing_problem(schedule["preprocessing"], sizes, schedule.get("loss") == "mse")


def _fields_problem(schedule, fields):
    """Why a required field of `fields` (key -> (check, what it must be)) is wrong."""
    for key, (ok, what) in fields.items():
        if key not in schedule:
            return f"data_schedule has no {key!r}"
        if not ok(schedule[key]):
            return f"data_schedule {key} must be {what}, got {schedule[key]!r}"[:300]
    return None


def _config_problem(schedule, state):
    """Why the recorded mode, lr and weight decay differ from the state's."""
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
    return None


def _model_sizes(schedule, state):
    """[inputs, outputs] of a model state whose data_schedule's SPEC and loss make its model
    on its data's input shape (an image's with conv or pool layers), else why not (a string)."""
    text, loss, record = schedule.get("model"), schedule.get("loss"), state["model"]
    image = schedule.get("image_shape")
    if schedule["dataset"] == _data.DIGITS_NAME:
        image = list(_data.DIGITS_SHAPE)
    built = shape = None
    try:
        if type(text) is str:
            shape = input_shape(text, math.prod(record["input_shape"]), image)
            built = build(text, shape)
    except (SpecError, ValueError, TypeError):
        built = None
    if (
        built is None
        or built.to_json() != record["model"]
        or loss != record["loss"]
        or list(shape) != list(record["input_shape"])
    ):
        return (
            f"data_schedule model {text!r} (loss {loss!r}) is not the state's model {record!r}"
        )[:300]
    return [math.prod(shape), outputs(parse(text))]


_OPTIONAL_FIELDS = {  # recorded only when the run was given them
    "test_fraction": (lambda x: type(x) in (int, float) and 0 <= x < 1, "a number in [0, 1)"),
    "classification": (lambda x: x is True, "true"),
    "end_step": (_int_at_least(1), "an integer >= 1"),
    "image_shape": (
        lambda x: type(x) is list and len(x) == 3 and all(map(_int_at_least(1), x)),
        "[C, H, W], integers >= 1",
    ),
}


MAX_EVAL_BATCHES = 10_000
_TEXT_FIELDS = {
    "text": _SCHEDULE_FIELDS["dataset"],
    "vocab": (
        lambda x: _strings(x) and x and all(1 <= len(s) <= VOCAB_CHUNK for s in x),
        f"a list of strings of 1 to {VOCAB_CHUNK} characters",
    ),
    "model": (lambda x: type(x) is str and is_gpt(x), "a gpt SPEC"),
    **{k: _SCHEDULE_FIELDS[k] for k in ("seed", "batch_size", "lr", "weight_decay", "mode")},
    "end_step": _OPTIONAL_FIELDS["end_step"],
    "eval_every": (_int_at_least(1), "an integer >= 1"),
    "eval_batches": (_int_at_least(1, MAX_EVAL_BATCHES), f"an integer in [1, {MAX_EVAL_BATCHES}]"),
    "data": (lambda x: type(x) is dict, "a TextData state (an object)"),
}


def _text_problem(state):
    """Why a text run's data_schedule (`textrecord`) does not fit its state: the gpt SPEC on
    the recorded vocabulary must make the state's model, the TextData state must be the run's
    (its window, batch and seed) at the state's step."""
    from ..text import _check_fields

    schedule = state["data_schedule"]
    problem = _fields_problem(schedule, _TEXT_FIELDS)
    if problem or not is_model(state):
        return problem or "a text run's data_schedule on a state that is not a Trainer's"
    vocab, record, data = vocab_of(schedule), state["model"], schedule["data"]
    if list(vocab) != sorted(set(vocab)):
        return "data_schedule vocab must be distinct characters in code point order"
    try:
        block = parse_gpt(schedule["model"])["block"]
        built = build_gpt(schedule["model"], len(vocab)).to_json()
        _check_fields(data, "data_schedule data")
    except (SpecError, ValueError, TypeError) as exc:
        return str(exc)[:300]
    if built != record["model"] or list(record["input_shape"]) != [block]:
        return (
            f"data_schedule model {schedule['model']!r} over {len(vocab)} characters is not the "
            f"state's model"
        )[:300]
    for key, want in (("block_size", block), ("batch_size", schedule["batch_size"])):
        if data[key] != want or data["seed"] != schedule["seed"]:
            return f"data_schedule data (block_size, batch_size, seed) are not the run's {key}"
    if data["train_batches"] != state["step"]:
        return (
            f"data position: {data['train_batches']} training batches drawn, but the state "
            f"is at step {state['step']}"
        )
    return _config_problem(schedule, state) or _lr_schedule_problem(schedule, state)


def _optional_problem(schedule):
    """Why an optional field (--test-fraction, --classification, the run's end) is wrong."""
    for key, (ok, what) in _OPTIONAL_FIELDS.items():
        if key in schedule and not ok(schedule[key]):
            return f"data_schedule {key} must be {what}, got {schedule[key]!r}"[:300]
    return None


def _stopping_problem(schedule, step):
    """Why the validation and early-stopping fields (absent, or all of them) are wrong."""
    fraction, n_val = schedule.get("val_fraction"), schedule.get("n_val")
    if fraction is not None or n_val is not None:
        if not (type(fraction) in (int, float) and 0 < fraction < 1):
            return f"data_schedule val_fraction must be a number in (0, 1), got {fraction!r}"[:300]
        if not _int_at_least(1)(n_val):
            return f"data_schedule n_val must be an integer >= 1, got {n_val!r}"[:300]
    patience, stopping = schedule.get("patience"), schedule.get("early_stopping")
    if patience is None and stopping is None:
        return None
    if fraction is None or not _int_at_least(1)(patience):
        return (
            f"data_schedule patience must be an integer >= 1 with a val_fraction, got {patience!r}"
        )[:300]
    if type(stopping) is not dict or set(stopping) != {"best_step", "best_val_loss", "bad_epochs"}:
        return "data_schedule early_stopping must hold best_step, best_val_loss and bad_epochs"
    best = stopping["best_val_loss"]
    if (
        not _int_at_least(0, step)(stopping["best_step"])
        or not _int_at_least(0)(stopping["bad_epochs"])
        or (best is not None and not _number_in(False)(best))
    ):
        return f"data_schedule early_stopping {stopping!r} is out of range at step {step}"[:300]
    return None


def _lr_schedule_problem(schedule, state):
    """Why the schedule and warmup fields (both absent: constant, or both there) disagree with
    the state's learning-rate schedule (the record `--schedule` and `--warmup` made)."""
    name, warmup, rec = schedule.get("schedule"), schedule.get("warmup"), state.get("lr_schedule")
    if name is None and warmup is None:
        if rec is not None:
            return f"the state has an lr_schedule ({rec.get('kind')}) its data_schedule lacks"
        return None
    if name not in _LR_KINDS or not _int_at_least(0)(warmup):
        return (
            f"data_schedule schedule must be one of {sorted(_LR_KINDS)} with warmup an integer "
            f">= 0, got {name!r} and {warmup!r}"
        )[:300]
    want = dict(kind=_LR_KINDS[name], peak_lr=round_f32(schedule["lr"]), warmup_steps=warmup)
    want["min_lr"] = 0.0
    if rec is None or any(rec.get(k) != v for k, v in want.items()):
        return (
            f"data_schedule schedule {name} (warmup {warmup}, lr {schedule['lr']!r}) differs "
            f"from the state's lr_schedule {rec!r}"
        )[:300]
    return None


def preprocessing_problem(record, sizes, regression=False):
    """Why a data_schedule's `preprocessing` record does not fit the network `sizes` (None
    when it does): see `preprocessing_record`."""
    inputs, classes = sizes[0], sizes[-1]
    keys = {"columns", "header", "label_index", "mean", "sd"}
    keys |= {"target_mean", "target_sd"} if regression else {"classes"}
    if type(record) is not dict or set(record) != keys:
        return f"data_schedule preprocessing must hold exactly {sorted(keys)}"
    checks = (
        ("columns", lambda x: _strings(x) and len(x) == inputs, f"{inputs} column names"),
        ("header", lambda x: type(x) is bool, "true or false"),
        ("label_index", _int_at_least(0, inputs), f"an integer in [0, {inputs}]"),
        ("mean", lambda x: finite_numbers(x, inputs, None), f"{inputs} finite numbers"),
        ("sd", lambda x: finite_numbers(x, inputs, 0), f"{inputs} finite numbers >= 0"),
        (
            "classes",
            lambda x: _strings(x) and 1 <= len(x) <= classes and len(set(x)) == len(x),
            f"1 to {classes} distinct class names",
        ),
        ("target_mean", lambda x: finite_numbers([x], 1, None), "a finite number"),
        ("target_sd", lambda x: finite_numbers([x], 1, 0), "a finite number >= 0"),
    )
    for key, ok, what in [c for c in checks if c[0] in keys]:
        if not ok(record[key]):
            return f"data_schedule preprocessing {key} must be {what}, got {record[key]!r}"[:300]
    return None


def _strings(value):
    return type(value) is list and all(type(x) is str for x in value)


def peek_checkpoint(path, allow_profile_change=False):
    """The data_schedule of a checkpoint, fully checked without loading a binding (the
    numeric mode must be chosen before the binding loads)."""
    if not os.path.isfile(path):
        raise UsageError(
            f"--resume: no checkpoint at {_shown(path)} (train without --resume "
            f"first, or pass --checkpoint PATH)"
        )
    try:
        state, envelope = load_state(path, envelope=True)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"--resume: {_shown(path)} is not a valid mojolearn checkpoint: {exc}"
        ) from None
    try:  # read once: the file's profile decides whether it may be continued
        checkpoints().check_resumable(state, envelope, allow_profile_change)
    except ValueError as exc:
        raise UsageError(f"--resume: {_shown(path)}: {exc}") from None
    problem = run_schedule_problem(state)
    if problem:
        raise UsageError(f"--resume: {_shown(path)}: {problem}")
    return state["data_schedule"]


def check_dataset(dataset, stored):
    """Refuse (UsageError) data other than the checkpoint's on --resume."""
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


# -- the run's options ---------------------------------------------------------------------

# (key of the options, its flag) of the options a checkpoint records.
_RECORDED = (
    ("batch_size", "--batch-size"),
    ("seed", "--seed"),
    ("lr", "--lr"),
    ("weight_decay", "--weight-decay"),
    ("mode", "--mode"),
    ("layers", "--layers"),
    ("model", "--model"),
    ("loss", "--loss"),
    ("microbatches", "--microbatches"),
    ("val_fraction", "--val-fraction"),
    ("patience", "--patience"),
    ("schedule", "--schedule"),
    ("warmup", "--warmup"),
    ("test_fraction", "--test-fraction"),
    ("classification", "--classification"),
    ("image_shape", "--image-shape"),
)


def resolve_options(args, stored):
    """The run's options: given ones, else the checkpoint's (on --resume), else defaults.
    On --resume a given option that differs from the checkpoint is refused by name."""
    opts = {key: getattr(args, key) for key, _ in _RECORDED}
    if opts["test_fraction"] == 0.2:  # the default's rows: recorded as the default
        opts["test_fraction"] = None
    _warmup_needs_schedule(args, stored)
    if stored is None:
        # MOJOLEARN_NUMERIC_MODE, else identical; digits' default network is MLPTrainer's.
        digits = args.dataset == _data.DIGITS_NAME and args.model is None
        defaults = dict(
            DEFAULTS,
            mode=requested_mode(),
            microbatches=None,
            val_fraction=None,
            patience=None,
            model=None,
            loss="cross_entropy",
            layers=DIGITS_LAYERS if digits else None,
            schedule="constant",
            warmup=None if args.schedule in (None, "constant") else 0,
            test_fraction=None,
            classification=None,
            image_shape=None,
        )
        return _needs_validation(
            {k: (v if v is not None else defaults[k]) for k, v in opts.items()}
        )
    conflicts = []
    for key, flag in _RECORDED:
        given, saved = opts[key], stored.get(key)
        if key in ("schedule", "loss") and saved is None:  # what a file without them ran
            saved = "constant" if key == "schedule" else "cross_entropy"
        if given is not None and given != saved:
            conflicts.append(f"{flag} {given} (checkpoint: {saved})")
        opts[key] = saved
    if conflicts:
        raise UsageError(
            f"--resume: options conflict with the checkpoint: "
            f"{'; '.join(conflicts)} (leave them out or pass the saved values)"
        )
    return opts


def _warmup_needs_schedule(args, stored):
    """Refuse --warmup for a run whose schedule (given, else the checkpoint's) has none."""
    schedule = args.schedule or (stored or {}).get("schedule") or "constant"
    if args.warmup is not None and schedule == "constant":
        raise UsageError(
            f"--warmup {args.warmup} applies only with --schedule warmup-linear or "
            f"warmup-cosine (the run's schedule is constant: every step at --lr)"
        )


def _needs_validation(opts):
    if opts["model"] is None and opts["loss"] != "cross_entropy":
        raise UsageError(f"--loss {opts['loss']} needs --model SPEC (--layers makes classifiers)")
    if opts["loss"] == "mse" and outputs(parse(opts["model"])) != 1:
        raise UsageError(
            f"--model {opts['model']!r} gives {outputs(parse(opts['model']))} outputs, but "
            f"--loss mse fits the one target column: end the SPEC with linear:1"
        )
    if opts["patience"] is not None and opts["val_fraction"] is None:
        raise UsageError(
            f"--patience {opts['patience']} needs --val-fraction F: it stops when the loss on "
            f"the validation rows has not improved for {opts['patience']} epochs"
        )
    return opts


def requested_mode():
    """The numeric mode MOJOLEARN_NUMERIC_MODE asks for (identical when unset)."""
    from .._runtime.backend import requested_mode

    try:
        return requested_mode()
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_environment():
    """A bad MOJOLEARN_NUMERIC_MODE, MOJOLEARN_NUM_THREADS, MOJOLEARN_CPU_LEVEL or
    MOJOLEARN_VENDOR is a usage error of every command, raised before anything is read: never
    a verdict on a file (`verify`) or a refusal of one (`train --resume`)."""
    from .._runtime import backend as _backend
    from .._runtime import threads as _threads

    requested_mode()
    try:
        _threads.num_threads()
        _backend._cpu_level()
        vendor = os.environ.get("MOJOLEARN_VENDOR")
        if vendor and vendor not in _backend.VENDORS:  # _backend's own check and message
            raise ValueError(f"MOJOLEARN_VENDOR must be one of {_backend.VENDORS}, got {vendor!r}")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
