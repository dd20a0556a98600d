"""`mojolearn sample CHECKPOINT`: text from a `train --text` checkpoint.

The checkpoint is checked whole (a text run's, its data_schedule fitting its state), the prompt
encoded with the vocabulary it records (every character must be in it), and
`Trainer.generate(prompt_ids, --tokens, temperature, top_k, seed)` samples: the same
checkpoint, prompt, settings and seed print the same text on every machine (docs/ARITHMETIC.md
"Sampling"). The default prompt is a newline when the vocabulary has one, else its first
character. stdout gets the prompt followed by the generated text, and a newline.
"""

from __future__ import annotations

import os

from .._runtime import files as _files
from .progress import printable
from .resume import run_schedule_problem
from .textrecord import TEXT_FORMAT, vocab_of
from .trainers import load_state
from .usage import EXIT_OK, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any


_shown = _files.shown


def default_prompt(vocab: Any) -> Any:
    """The prompt without --prompt: a newline when the vocabulary has one, else its first
    character."""
    return "\n" if "\n" in vocab else vocab[0]


def cmd_sample(args: Any, out: Any) -> Any:
    """`mojolearn sample`: print the prompt and `--tokens` sampled characters."""
    path = args.checkpoint
    state = _text_state(path)
    vocab = vocab_of(state["data_schedule"])
    prompt = default_prompt(vocab) if args.prompt is None else args.prompt
    if not prompt:
        raise UsageError("--prompt needs at least one character (leave it out for the default)")
    index = {c: i for i, c in enumerate(vocab)}
    for pos, c in enumerate(prompt):
        if c not in index:
            raise UsageError(
                f"--prompt: the character {c!r} (at position {pos}) is not in the checkpoint's "
                f"vocabulary of {len(vocab)} characters (the training text's)"
            )
    if args.top_k is not None and not 1 <= args.top_k <= len(vocab):
        raise UsageError(
            f"--top-k {args.top_k} must be in [1, {len(vocab)}] (the vocabulary's size)"
        )
    import mojolearn

    mojolearn.set_numeric_mode(state["numeric_mode"])  # the run's mode, before the binding
    try:
        trainer = mojolearn.Trainer.from_checkpoint(path)
        ids = trainer.generate(
            [index[c] for c in prompt],
            args.tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            seed=args.seed,
        )
    except ValueError as exc:
        raise UsageError(f"{_shown(path)}: {exc}") from None
    text = "".join(vocab[i] for i in ids)
    print(printable(text, out), file=out, flush=True)
    return EXIT_OK


def _text_state(path: Any) -> Any:
    """The checked state of a `train --text` checkpoint (UsageError naming what is wrong)."""
    if not os.path.isfile(path):
        raise UsageError(f"no checkpoint at {_shown(path)}")
    try:
        state = load_state(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{_shown(path)} is not a valid mojolearn checkpoint: {exc}") from None
    schedule = state["data_schedule"]
    if schedule.get("format") != TEXT_FORMAT:
        trained = schedule.get("model") or schedule.get("layers") or "the MLP"
        raise UsageError(
            f"{_shown(path)} is not a text model's checkpoint (`mojolearn train --text`): its "
            f"model is {trained} on {schedule.get('dataset', 'other data')}"[:300]
        )
    problem = run_schedule_problem(state)
    if problem:
        raise UsageError(f"{_shown(path)}: {problem}")
    return state
