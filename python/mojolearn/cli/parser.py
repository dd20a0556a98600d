"""The `mojolearn` argument parser, built from a table of options per command.

Each command's options are rows `(flags, keywords)` passed to argparse's `add_argument` in
order (the order of `--help`); an `_Exclusive` row holds rows that exclude each other. Values
are checked as they are parsed (ranges, float32, layer sizes), so a bad value is one line on
stderr and exit code 2 before anything runs.
"""

import argparse
import math
import sys

from .._runtime.portable import round_f32
from . import data as _data
from .inspect import cmd_info, cmd_verify
from .predict import cmd_predict
from .progress import printable
from .resume import CHECKPOINT_SECONDS, DEFAULT_CHECKPOINT, DEFAULTS, LR_SCHEDULES, MAX_EVAL_BATCHES
from .run import BEST_SUFFIX
from .sample import cmd_sample
from .textrecord import GPT_GRAMMAR, TEXT_DEFAULTS, gpt_text, is_gpt, parse_gpt
from .textrun import cmd_train
from .usage import EXIT_BAD_INPUT, EXIT_OK

# -- value checks ---------------------------------------------------------------------------


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


def _temperature(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    # generate divides the logits by float32(T): a T that rounds to 0 or inf is refused too
    if not (math.isfinite(value) and 0 < round_f32(value) < math.inf):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0 in float32, got {text!r}")
    return value


def _fraction(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0 < value < 1:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def _test_fraction(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}") from None
    if not 0 <= value < 1:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    return value


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


def _image_shape_arg(text):
    parts = text.split(",")
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() and len(p) < 9 for p in parts):
        raise argparse.ArgumentTypeError(
            f"expected C,H,W (three integers such as 1,28,28), got {text!r}"
        )
    shape = [int(p) for p in parts]
    if not all(1 <= n <= 1 << 20 for n in shape):
        raise argparse.ArgumentTypeError(f"expected C,H,W each in [1, 2**20], got {text!r}")
    return shape


def _model_arg(text):
    from .spec import SpecError, canonical, parse

    try:
        return gpt_text(parse_gpt(text)) if is_gpt(text) else canonical(parse(text))
    except SpecError as exc:
        raise argparse.ArgumentTypeError(f"SPEC {text[:200]!r}: {exc}") from None


class _Parser(argparse.ArgumentParser):
    """argparse, with a refusal as ONE line on stderr (exit 2), as every other refusal is."""

    def error(self, message):
        self.exit(
            EXIT_BAD_INPUT,
            printable(f"{self.prog}: error: {message} (see {self.prog} --help)\n", sys.stderr),
        )


class _Formatter(argparse.HelpFormatter):
    """argparse's layout, never breaking a line inside a hyphenated word: an option's name
    (`--allow-profile-change`) stays whole, so a reader can search for it."""

    def _fill_text(self, text, width, indent):
        import textwrap

        text = " ".join(text.split())
        return textwrap.fill(
            text, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
        )

    def _split_lines(self, text, width):
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class _Version(argparse.Action):
    """`--version`: argparse's version action, with the version read only when asked (reading
    the installed metadata costs tens of milliseconds that no other command should pay)."""

    def __init__(self, option_strings, dest, help=None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        import mojolearn

        print(f"{parser.prog} {mojolearn.__version__}", file=sys.stdout)
        parser.exit(EXIT_OK)


# -- the tables -----------------------------------------------------------------------------


class _Exclusive(tuple):
    """Rows of options that exclude each other (one mutually exclusive group)."""


d = DEFAULTS
_MODES = ("identical", "fast")
_POSITIVE = _int_in(1, (1 << 31) - 1, ">= 1")

TRAIN_DESCRIPTION = (
    "Train an MLP with AdamW: SmallMLPTrainer's 8 -> 16 -> 3 network by "
    "default, an MLPTrainer of any --layers sizes, or a Trainer of any --model SPEC "
    "(GELU, LayerNorm, Dropout, residual blocks, conv and pool layers on images; a "
    "classifier or, with --loss mse, a regressor). Without --data it trains on the "
    "bundled UCI wine data (8 of 13 attributes, standardized; 144 train / 34 test rows), "
    "or on the bundled handwritten digits with --dataset digits. --microbatches M makes "
    "data-parallel steps (under mpiexec, several processes with the bits of one). The run "
    "can be stopped at any moment (Ctrl-C saves a checkpoint) and resumed with --resume "
    "to the same final bytes (--allow-profile-change for a checkpoint of an older "
    "arithmetic profile). --val-fraction F holds out a stratified, seeded fraction of the "
    "training rows for validation (its loss and accuracy per epoch go to the history) and "
    "--patience P stops when the validation loss has not improved for P epochs, keeping the "
    f"best checkpoint as CHECKPOINT{BEST_SUFFIX}; the test rows are scored once, at the end. "
    "The checkpoint records the data's columns, standardization and class names, so "
    "`mojolearn predict` applies the network to raw rows. --text [FILE] trains a "
    "character-level gpt (--model gpt:...) on a UTF-8 text, the shipped one without FILE, "
    "printing train and validation losses; `mojolearn sample` generates text from its "
    "checkpoint."
)
TRAIN_EPILOG = (
    f"Defaults: --epochs {d['epochs']} when neither --steps nor --epochs is given, "
    f"--checkpoint {DEFAULT_CHECKPOINT} (history in {DEFAULT_CHECKPOINT}"
    f".history.jsonl); without --resume an existing checkpoint and history at that "
    f"path are replaced. On --resume, options left out are taken from the checkpoint (the "
    f"data: a --data CSV is found again by its name and SHA-256 beside the checkpoint or in "
    f"the current folder; the end of a run given --steps/--epochs; the schedule; the "
    f"splits); "
    f"options that differ from it (dataset, batch size, seed, lr, weight decay, mode, "
    f"schedule, warmup) are refused; a scheduled run ends where its schedule does."
    f" Exit codes: 0 done, 2 bad input or a diverged run (the last "
    f"checkpoint kept), 130 interrupted by Ctrl-C, 143 by SIGTERM (checkpoint saved "
    f"in both cases)."
)


def _o(flag, metavar, kind, text, **extra):
    """One row: `flag`'s metavar, value type (None: a string), help text and other keywords."""
    given = dict(metavar=metavar, type=kind, help=text)
    return flag, {**{k: v for k, v in given.items() if v is not None}, **extra}


# fmt: off
TRAIN_OPTIONS = (
    _Exclusive((
        _o("--data", "CSV", None,
           "CSV with numeric feature columns and one label column (integer classes from 0, or "
           "distinct strings); as many features and classes as the network has (8 and up to 3 "
           "without --layers)"),
        _o("--dataset", None, None,
           "bundled data: wine (default; 8 of 13 attributes, or all 13 with --layers 13,...,3) "
           "or digits (8x8 handwritten digits, 64 features, 10 classes; default --layers "
           "64,128,10)", choices=(_data.BUNDLED_NAME, _data.DIGITS_NAME)),
        _o("--text", "FILE", None,
           "train a character-level gpt (--model gpt:..., default nanoGPT's CPU configuration) "
           "on a UTF-8 text FILE (its sorted characters the vocabulary; the last 10%% "
           "validates; random windows of the block's length); --text alone: the shipped text "
           "(CPython 3.11's pydoc topics, 465K characters, PSF licence). Defaults: --steps "
           f"{TEXT_DEFAULTS['steps']}, --batch-size {TEXT_DEFAULTS['batch_size']}, --lr "
           f"{TEXT_DEFAULTS['lr']}", nargs="?", const=True),
    )),
    _Exclusive((
        _o("--layers", "SIZES", _layers_arg,
           "ALL layer sizes of an MLPTrainer network, e.g. 64,128,10: inputs, hidden widths, "
           "then the classes (not scikit-learn's hidden_layer_sizes: a last size other than "
           "the data's classes is refused; default: SmallMLPTrainer's 8,16,3)"),
        _o("--model", "SPEC", _model_arg,
           "a mojolearn.Trainer model as a comma-separated layer list, the input width taken "
           "from the data, e.g. 'linear:64,gelu,layernorm,dropout:0.1,linear:3'. Layers: "
           "linear:N (linear:N:nobias), relu, gelu (gelu:tanh: the tanh form), tanh, sigmoid, "
           "layernorm (over the previous layer's width), dropout:P (P in [0, 1)), flatten, "
           "residual(LAYERS) (x + LAYERS(x); LAYERS keep the width, e.g. "
           "residual(layernorm,linear:64,gelu)), conv:OUT:K[:S[:P]] (Conv2d: out channels, "
           "kernel, stride 1 and padding 0 by default), maxpool:K[:S], avgpool:K[:S] (stride K "
           "by default). linear:N and layernorm act on the last axis, flatten joins the axes; "
           "conv and pool layers take images (C, H, W): a SPEC with one gets the data's image "
           "shape (--dataset digits: 1x8x8; --image-shape), e.g. 'conv:16:3:1:1,relu,maxpool:2,"
           "flatten,linear:10'. The last linear:N outside a residual gives the outputs: the "
           "classes, or 1 for --loss mse. With --text, a gpt instead: " + GPT_GRAMMAR.replace(
               "%", "%%") + ", e.g. gpt:layers=4,heads=4,embd=128,block=64"),
    )),
    _o("--image-shape", "C,H,W", _image_shape_arg,
       "with --data and a --model SPEC with conv or pool layers: each row's features are an "
       "image's C·H·W values, row-major (channels, then rows; C·H·W must be the feature count; "
       "standardized per pixel and channel)"),
    _o("--loss", None, None,
       "with --model: cross_entropy (default; integer or named classes) or mse (regression "
       "on the numeric label column, standardized with the training rows' mean and sd; "
       "predictions and the test MSE in the target's units, with R²)",
       choices=("cross_entropy", "mse")),
    _o("--classification", None, None,
       "the label column's numbers are classes: without it, a numeric label column with "
       f"non-integer values, or more than {_data.TARGET_DISTINCT} distinct values that are "
       f"also more than {100 * _data.TARGET_SHARE:g}%% of the rows, is refused as a numeric "
       "target (use --loss mse)", action="store_const", const=True),
    _o("--label-column", "NAME", None,
       "name (or 1-based number without a header) of the label column (the target, with "
       "--loss mse); default: the column named 'label', else the last"),
    _Exclusive((
        _o("--steps", "N", _int_in(1, (1 << 31) - 1, "in [1, 2**31)"),
           "the step the run ends at (also after --resume; a --text run's default "
           f"{TEXT_DEFAULTS['steps']})"),
        _o("--epochs", "E", _int_in(1, 1 << 20, "in [1, 2**20]"),
           f"train until E epochs are done (default {d['epochs']})"),
    )),
    _o("--batch-size", "B", _int_in(1, 256, "in [1, 256]"),
       f"rows per step (default {d['batch_size']}); the last batch of an epoch is smaller when "
       f"B does not divide the training rows; a --text run's windows per step (default "
       f"{TEXT_DEFAULTS['batch_size']})"),
    _o("--lr", "LR", _float_in(True, "> 0"),
       f"AdamW learning rate (default {d['lr']}; a --text run's {TEXT_DEFAULTS['lr']})"),
    _o("--weight-decay", "WD", _float_in(False, ">= 0"),
       f"AdamW decoupled weight decay (default {d['weight_decay']})"),
    _o("--schedule", None, None,
       "learning-rate schedule over the run's steps (what --steps/--epochs resolve to): "
       "constant (default: every step at --lr), warmup-linear or warmup-cosine (linear warmup "
       "from 0 to --lr over --warmup steps, then linear or cosine decay to 0 at the last step)",
       choices=LR_SCHEDULES),
    _o("--warmup", "N", _int_in(0, (1 << 31) - 1, "in [0, 2**31)"),
       "with --schedule warmup-linear or warmup-cosine: steps of linear warmup, below the "
       "run's steps (default 0)"),
    _o("--seed", "S", _int_in(0, (1 << 64) - 1, "in [0, 2**64)"),
       f"seed of the initial weights and the data order (default {d['seed']})"),
    _o("--mode", None, None, "numeric mode (default identical: the same bits on every machine)",
       choices=_MODES),
    _o("--checkpoint", "PATH", None, f"checkpoint file (default {DEFAULT_CHECKPOINT})",
       default=DEFAULT_CHECKPOINT),
    _o("--checkpoint-every", "K", _POSITIVE,
       f"save every K steps (default: every {CHECKPOINT_SECONDS:g} seconds of training, so "
       "saves never dominate a small run; always at the end and on Ctrl-C/SIGTERM)"),
    _o("--test-fraction", "F", _test_fraction,
       "hold out floor(F x its rows) of each class (seeded, the same rows for every --seed) as "
       "the test rows, scored once at the end; 0: no test rows (default: n_class // 5, the "
       "rows of 0.2)"),
    _o("--microbatches", "M", _power_of_two,
       "data-parallel steps of M microbatches (a power of two dividing every batch): under "
       "`mpiexec -n N` the N processes share them and end with the bits of one process; rank 0 "
       "writes the checkpoint, history and output"),
    _o("--val-fraction", "F", _fraction,
       "hold out this fraction of each class's training rows (floor, seeded by --seed) for "
       "validation: loss and accuracy on them each epoch in the history (default: no "
       "validation)"),
    _o("--patience", "P", _int_in(1, 1 << 20, "in [1, 2**20]"),
       "with --val-fraction: stop when the validation loss has not improved for P epochs; the "
       f"best checkpoint is kept beside the last as CHECKPOINT{BEST_SUFFIX}"),
    _o("--resume", None, None,
       "continue the run saved in --checkpoint at exactly the next batch (a best checkpoint "
       f"CHECKPOINT{BEST_SUFFIX} continues into CHECKPOINT)", action="store_true"),
    _o("--allow-profile-change", None, None,
       "with --resume: continue an identical-mode checkpoint written under an older arithmetic "
       "profile (its next steps then follow this version's arithmetic, not the original run's "
       "bits)", action="store_true"),
    _o("--plot", "PNG", None,
       "write a PNG of train and test loss per step (needs matplotlib: pip install matplotlib)"),
    _o("--json", None, None, "print one JSON object per report line on stdout",
       action="store_true"),
    _o("--log-every", "N", _POSITIVE, "report every N steps (default: about 20 reports per run)"),
    _o("--eval-every", "N", _POSITIVE,
       "with --text: print the train and validation losses every N steps and at the last step "
       f"(default {TEXT_DEFAULTS['eval_every']})"),
    _o("--eval-batches", "N", _int_in(1, MAX_EVAL_BATCHES, f"in [1, {MAX_EVAL_BATCHES}]"),
       "with --text: each loss is the mean over N batches of its split, the same windows at "
       f"every evaluation (drawn apart from the training ones; default "
       f"{TEXT_DEFAULTS['eval_batches']}, nanoGPT's eval_iters)"),
)

INFO_OPTIONS = (
    _o("--mode", None, None, "load this mode's binding", choices=_MODES),
    _o("--json", None, None, "print one JSON object", action="store_true"),
)

PREDICT_DESCRIPTION = (
    "Apply a `mojolearn train` checkpoint to the raw rows of a CSV: the columns are checked "
    "as train checks them and against the checkpoint's (by name under a header row, else by "
    "position), standardized with the training rows' means and standard deviations the "
    "checkpoint records, and each row's class is printed by name (with --proba, also the "
    "probability of each class), or a regressor's prediction in the target's units. The "
    "label column may be there or not: with it, the accuracy (a regressor's MSE and R²) is "
    "reported too. Exit codes: 0 done, 2 bad input."
)

PREDICT_OPTIONS = (
    _o("checkpoint", "CHECKPOINT", None, "a checkpoint written by mojolearn train"),
    _o("--data", "CSV", None,
       "the rows: the checkpoint's feature columns, and its label column or not", required=True),
    _o("--proba", None, None, "also write each class's probability (one column each)",
       action="store_true"),
    _o("--out", "CSV", None,
       "write the predictions to this CSV file (replaced atomically) instead of stdout"),
)

SAMPLE_DESCRIPTION = (
    "Generate text with a `mojolearn train --text` checkpoint: the prompt's characters (each "
    "in the checkpoint's vocabulary), then --tokens sampled ones, printed to stdout. The same "
    "checkpoint, prompt, settings and --seed print the same text on every machine "
    "(Trainer.generate's pinned arithmetic and draws). Exit codes: 0 done, 2 bad input."
)

SAMPLE_OPTIONS = (
    _o("checkpoint", "CHECKPOINT", None, "a checkpoint written by mojolearn train --text"),
    _o("--prompt", "TEXT", None,
       "the text to continue (default: a newline when the vocabulary has one, else its first "
       "character)"),
    _o("--tokens", "N", _int_in(1, 1 << 20, "in [1, 2**20]"),
       "characters to generate (default 500)", default=500),
    _o("--temperature", "T", _temperature,
       "divides the logits: below 1 sharper, above 1 flatter (default 1.0)", default=1.0),
    _o("--top-k", "K", _int_in(1, 1 << 20, "in [1, 2**20]"),
       "sample among the K most likely characters only, K in [1, vocabulary size] (default: "
       "all)"),
    _o("--seed", "S", _int_in(0, (1 << 64) - 1, "in [0, 2**64)"),
       "seed of the draws (default 0)", default=0),
)

VERIFY_OPTIONS = (
    ("checkpoint", dict(metavar="CHECKPOINT")),
    _o("--json", None, None, "print one JSON object", action="store_true"),
)
# command -> (help line, description or None, epilog or None, options, function)
COMMANDS = {
    "train": ("train an MLP or a --model on bundled data (wine, digits) or your CSV, or a gpt "
              "on a --text, with exact resume",
              TRAIN_DESCRIPTION, TRAIN_EPILOG, TRAIN_OPTIONS, cmd_train),
    "predict": ("predict each row of a CSV (its class, or a regressor's value) with a train "
                "checkpoint",
                PREDICT_DESCRIPTION, None, PREDICT_OPTIONS, cmd_predict),
    "sample": ("generate text with a train --text checkpoint (the same for the same --seed)",
               SAMPLE_DESCRIPTION, None, SAMPLE_OPTIONS, cmd_sample),
    "info": ("version, vendor, numeric mode and build flags", None, None, INFO_OPTIONS, cmd_info),
    "verify": ("check a checkpoint file; print its step, schema, profile and state hash (exit 1 "
               "when invalid)", None, None, VERIFY_OPTIONS, cmd_verify),
}
# fmt: on
del d


def _add(parser, rows):
    for row in rows:
        if isinstance(row, _Exclusive):
            _add(parser.add_mutually_exclusive_group(), row)
        else:
            flag, keywords = row
            parser.add_argument(flag, **keywords)


def build_parser():
    """The `mojolearn` parser: `--version` and one subparser per entry of `COMMANDS`."""
    parser = _Parser(
        prog="mojolearn",
        formatter_class=_Formatter,
        description="Bit-reproducible training of MLPs with AdamW: any layer sizes (train "
        "--layers) or models (train --model SPEC); the default run trains the 8 -> 16 -> 3 "
        "network on the bundled wine data. `train --text [FILE] --model gpt:layers=4,heads=4,"
        "embd=128,block=64` trains a character-level transformer, `sample` generates text "
        "with it.",
    )
    parser.add_argument(
        "--version",
        action=_Version,
        help="print the version (the one `mojolearn info` prints) and exit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name, (line, description, epilog, options, func) in COMMANDS.items():
        command = sub.add_parser(
            name, help=line, description=description, epilog=epilog, formatter_class=_Formatter
        )
        _add(command, options)
        command.set_defaults(func=func)
    return parser
