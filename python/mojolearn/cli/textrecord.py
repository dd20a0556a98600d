"""`train --text`: the `gpt` SPEC and what a text run records in its checkpoint.

    gpt[:KEY=N[,KEY=N...]]    KEY: layers, heads, embd, block (each at most once)

`--model gpt` is nanoGPT's CPU configuration, `gpt:layers=4,heads=4,embd=128,block=64`; a key
left out keeps that default, the vocabulary comes from the text. N is an integer in [1, 2**20]
and embd must be divisible by heads. The canonical text (what a checkpoint records) names every
key in the order above.

A text run's data_schedule (format `TEXT_FORMAT`) holds the text's name (its file's base name,
or `SHIPPED` for the text that ships with the package), the vocabulary (a list of strings of at
most `VOCAB_CHUNK` characters, joined: a data_schedule string is bounded), the canonical gpt
SPEC, the options that fix the bits (seed, batch size, lr, weight decay, mode, a warmup
schedule's name and warmup), the run's end step, its evaluation settings and, under "data",
the `TextData.state()` of the next batch (its text's SHA-256 and length, and the batches drawn:
the trainer's step). `resume.run_schedule_problem` checks it against the state.
"""

from __future__ import annotations

from .._model.layers import MAX_FEATURES
from .spec import SpecError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

TEXT_FORMAT = "mojolearn.text-schedule.v1"
GPT_KEYS = ("layers", "heads", "embd", "block")
GPT_DEFAULTS = {"layers": 4, "heads": 4, "embd": 128, "block": 64}  # nanoGPT's CPU config
GPT_GRAMMAR = (
    "gpt[:KEY=N,...] with KEY layers, heads, embd or block, each at most once, N an integer "
    f"in [1, {MAX_FEATURES}], embd divisible by heads (defaults: nanoGPT's CPU configuration "
    "gpt:layers=4,heads=4,embd=128,block=64; the vocabulary is the text's)"
)

SHIPPED = "pydoc-topics (shipped)"  # the name a run on the shipped text records
VOCAB_CHUNK = 2048  # the most characters of a data_schedule string
TEXT_DEFAULTS = dict(batch_size=12, lr=1e-3, steps=2000, eval_every=250, eval_batches=20)


def is_gpt(text: Any) -> Any:
    """Whether a --model value is a gpt SPEC (rather than a layer list)."""
    return text == "gpt" or text.startswith("gpt:")


def parse_gpt(text: Any) -> Any:
    """The settings {layers, heads, embd, block} of a gpt SPEC (SpecError naming the bad
    key or value)."""
    given = {}
    for item in text[4:].split(",") if text != "gpt" else ():
        key, eq, value = item.strip().partition("=")
        if key not in GPT_KEYS or not eq:
            raise SpecError(
                f"gpt: {item.strip()[:40]!r} is not KEY=N with KEY one of {', '.join(GPT_KEYS)}"
            )
        if key in given:
            raise SpecError(f"gpt: the key {key!r} is given twice")
        value = value.strip()
        if not (value.isascii() and value.isdigit() and len(value) < 9):
            raise SpecError(
                f"gpt: {key}={value[:40]!r}: expected an integer in [1, {MAX_FEATURES}]"
            )
        if not 1 <= int(value) <= MAX_FEATURES:
            raise SpecError(f"gpt: {key}={int(value)}: expected an integer in [1, {MAX_FEATURES}]")
        given[key] = int(value)
    settings = {**GPT_DEFAULTS, **given}
    if settings["embd"] % settings["heads"]:
        raise SpecError(
            f"gpt: embd={settings['embd']} is not divisible by heads={settings['heads']} (each "
            f"head takes embd / heads of the width)"
        )
    return settings


def gpt_text(settings: Any) -> Any:
    """The canonical gpt SPEC of `settings` (every key, in `GPT_KEYS` order)."""
    return "gpt:" + ",".join(f"{key}={settings[key]}" for key in GPT_KEYS)


def build_gpt(text: Any, vocab_size: Any) -> Any:
    """The `nn.gpt` of a gpt SPEC over a vocabulary of `vocab_size` characters."""
    from .. import nn

    s = parse_gpt(text)
    return nn.gpt(vocab_size, s["block"], s["layers"], s["heads"], s["embd"])


def text_record(data: Any, name: Any, opts: Any) -> Any:
    """The data_schedule of a text run on TextData `data` (named `name`) at its position."""
    vocab = data.vocab
    record = {
        "format": TEXT_FORMAT,
        "text": name,
        "vocab": [vocab[i : i + VOCAB_CHUNK] for i in range(0, len(vocab), VOCAB_CHUNK)],
        "model": opts["model"],
        "seed": opts["seed"],
        "batch_size": opts["batch_size"],
        "lr": opts["lr"],
        "weight_decay": opts["weight_decay"],
        "mode": opts["mode"],
        "end_step": opts["end_step"],
        "eval_every": opts["eval_every"],
        "eval_batches": opts["eval_batches"],
        "data": data.state(),
    }
    if opts["schedule"] != "constant":
        record.update(schedule=opts["schedule"], warmup=opts["warmup"])
    return record


def vocab_of(schedule: Any) -> Any:
    """The vocabulary a checked text run's data_schedule records, as one str."""
    return "".join(schedule["vocab"])
