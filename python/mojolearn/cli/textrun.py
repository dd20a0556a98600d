"""`mojolearn train --text [FILE]`: a gpt on a character-level text (issue 38).

`cmd_train` is the train command: a run with `--text`, a `--model gpt...` or `--resume` of a
text run's checkpoint is a text run, any other `run.cmd_train`'s run on rows. A text run is
`run.py`'s command (the paths checked, the lock, the loop, its saves and signals, the resume
hint) with this module's setup, steps, evaluation and report: each step trains on the
TextData's next `(B, T)` windows (the position, `TextData.state()`, goes into the checkpoint's
data_schedule: `textrecord`). Every `--eval-every` steps and at the run's last step, the train
and validation losses are the mean (binary64, `math.fsum`, as nanoGPT's mean of its
`eval_iters` losses) of `Trainer.evaluate`'s loss over `--eval-batches` batches of each split,
drawn once per process from a TextData of its own seed (`eval_seed`): evaluation never moves
the training position (resume stays exact), and every evaluation scores the same windows.
"""

from __future__ import annotations

import hashlib
import math
import os
from types import SimpleNamespace

from .._runtime import files as _files
from . import history as _history
from . import run as _run
from .progress import Progress
from .resume import peek_checkpoint, resolve_options
from .textrecord import (
    GPT_DEFAULTS,
    GPT_GRAMMAR,
    SHIPPED,
    TEXT_DEFAULTS,
    TEXT_FORMAT,
    build_gpt,
    gpt_text,
    is_gpt,
    parse_gpt,
    text_record,
)
from .trainers import lr_schedule_for
from .usage import EXIT_OK, UsageError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

_shown = _files.shown
# Options of a run on rows, refused by name in a text run.
_ROWS_ONLY = (
    ("data", "--data"),
    ("dataset", "--dataset"),
    ("layers", "--layers"),
    ("image_shape", "--image-shape"),
    ("classification", "--classification"),
    ("label_column", "--label-column"),
    ("epochs", "--epochs"),
    ("test_fraction", "--test-fraction"),
    ("val_fraction", "--val-fraction"),
    ("patience", "--patience"),
    ("microbatches", "--microbatches"),
    ("plot", "--plot"),
)

_EVAL = (("eval_every", "--eval-every"), ("eval_batches", "--eval-batches"))


def cmd_train(args: Any, out: Any) -> Any:
    """`mojolearn train`: a text run (`--text`, a gpt `--model`, or `--resume` of a text
    run's checkpoint), else a run on rows (`run.cmd_train`); the exit code."""
    text = args.text is not None or (args.model is not None and is_gpt(args.model))
    if not text and args.resume:  # the checkpoint says which kind of run it continues
        text = (_run._schedule_of(args.checkpoint) or {}).get("format") == TEXT_FORMAT
    if not text:
        for key, flag in _EVAL:
            if getattr(args, key) is not None:
                raise UsageError(f"{flag} applies only to a text run (--text [FILE])")
        return _run.cmd_train(args, out)
    _refuse_options(args)
    return _run.cmd_train(args, out, (setup, report))


def _refuse_options(args: Any) -> Any:
    """Refuse a gpt --model without --text, --text with a layer-list --model, and the options
    of runs on rows."""
    model = args.model
    if model is not None and not is_gpt(model):
        raise UsageError(
            f"--text trains a gpt: --model {GPT_GRAMMAR}, or no --model (got --model {model!r}; "
            f"layer lists train on rows: --data or --dataset)"
        )
    if args.text is None and not args.resume:
        raise UsageError(
            f"--model {model} needs --text FILE (a UTF-8 text), or --text alone for the shipped "
            f"text"
        )
    if args.loss not in (None, "cross_entropy"):
        raise UsageError(f"--loss {args.loss}: a text run's loss is cross_entropy")
    for key, flag in _ROWS_ONLY:
        if getattr(args, key) is not None:
            raise UsageError(
                f"{flag} does not apply to a text run (--text, --model gpt): its data are the "
                f"text's windows and it runs --steps (default {TEXT_DEFAULTS['steps']})"
            )


def eval_seed(seed: Any) -> Any:
    """The seed of the TextData whose windows a run with `seed` evaluates on: apart from the
    training windows' (`TextData`'s batch k of a split is seeded by (seed, split, k))."""
    tag = f"mojolearn.text-eval.v1:{seed}".encode("ascii")
    return int.from_bytes(hashlib.sha256(tag).digest()[:8], "little")


# -- setup ---------------------------------------------------------------------------------


def setup(args: Any, group: Any) -> Any:
    """Options, text and trainer of a fresh text run (step 0 saved at once) or a resumed one;
    every refusal a UsageError before anything is written."""
    source = args.resume_from
    stored = peek_checkpoint(source, args.allow_profile_change) if args.resume else None
    if stored is not None and stored.get("format") != TEXT_FORMAT:
        raise UsageError(
            f"--resume: {_shown(source)} is not a text run's checkpoint (it trained on "
            f"{stored.get('dataset')}); resume it without --text and --model gpt"
        )
    if stored is None:
        for key in ("batch_size", "lr"):
            if getattr(args, key) is None:
                setattr(args, key, TEXT_DEFAULTS[key])
        args.model = args.model or gpt_text(GPT_DEFAULTS)
    opts = resolve_options(args, stored)
    opts.update(_eval_options(args, stored))
    opts["end_step"] = args.steps or (stored or {}).get("end_step") or TEXT_DEFAULTS["steps"]
    import mojolearn

    mojolearn.set_numeric_mode(opts["mode"])  # before any binding use
    name, data, evals = _load_text(args, opts, stored)
    history = _history.History(args.checkpoint)
    if stored is not None:
        try:
            trainer = mojolearn.Trainer.from_checkpoint(source)
        except ValueError as exc:
            raise UsageError(f"--resume: {_shown(source)}: {exc}") from None
        opts["end_step"] = _run._scheduled_end(args, trainer, opts["end_step"])
        if group.root:
            history.resume_at(trainer.step_)
    else:
        trainer = _new_trainer(data, name, opts)
    _fits(trainer, opts)
    run = SimpleNamespace(
        ckpt=args.checkpoint,
        opts=opts,
        start=trainer.step_,
        end=opts["end_step"],
        history=history,
        trainer=trainer,
        saved=trainer.step_,
        group=group,
        stopping=None,
        data=data,
        name=name,
        evals=evals,
        evaluated=None,
        announce=_announce,
        take_step=_step,
        after_step=_after_step,
        record=lambda run: text_record(run.data, run.name, run.opts),
    )
    if stored is None:
        if group.root:
            history.start_fresh()
        _run.save(run)  # step 0 on disk at once, as every run's
    return run


def _eval_options(args: Any, stored: Any) -> Any:
    """--eval-every and --eval-batches: given, else the checkpoint's, else the defaults; on
    --resume a given one that differs from the checkpoint's is refused (the history's
    evaluation points are the run's)."""
    opts = {}
    for key, flag in _EVAL:
        given = getattr(args, key)
        if stored is None:
            opts[key] = TEXT_DEFAULTS[key] if given is None else given
            continue
        if given is not None and given != stored[key]:
            raise UsageError(
                f"--resume: options conflict with the checkpoint: {flag} {given} (checkpoint: "
                f"{stored[key]}) (leave it out or pass the saved value)"
            )
        opts[key] = stored[key]
    return opts


def _load_text(args: Any, opts: Any, stored: Any) -> Any:
    """(name, the training TextData at the run's position, the evaluation windows of each
    split): --text FILE, the shipped text, or on --resume the run's own text (found by name
    and SHA-256 beside the checkpoint or in the current folder), refused when it is not."""
    from ..text import TextData, shipped_text

    path = args.text if isinstance(args.text, str) else None
    if stored is not None and args.text is None and stored["text"] != SHIPPED:
        recorded = dict(dataset=stored["text"], dataset_sha256=stored["data"]["sha256"])
        path = _run._recorded_csv(args, recorded, "--text")
    name = SHIPPED if path is None else os.path.basename(path)
    text = shipped_text() if path is None else None
    settings = dict(block_size=parse_gpt(opts["model"])["block"], batch_size=opts["batch_size"])

    def load(seed: Any) -> Any:
        if text is not None:
            return TextData.from_string(text, seed=seed, **settings)
        return TextData(path or "", seed=seed, **settings)  # a path when no text

    shown = "the shipped text" if path is None else f"--text {_shown(path)}"
    try:
        data = load(opts["seed"])
        if stored is not None:
            _same_text(data, stored, shown)
            data = TextData.from_state(path, stored["data"], text=text)
        evals = load(eval_seed(opts["seed"]))
    except OSError as exc:
        raise UsageError(f"{shown}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{shown}: {exc}") from None
    n = opts["eval_batches"]
    windows = [[evals.batch(split) for _ in range(n)] for split in ("train", "val")]
    return name, data, windows


def _same_text(data: Any, stored: Any, shown: Any) -> Any:
    """Refuse, on --resume, a text other than the checkpoint's (its vocabulary or content)."""
    from .textrecord import vocab_of

    vocab, recorded = data.vocab, vocab_of(stored)
    if vocab != recorded:
        extra = sorted(set(vocab) ^ set(recorded))[:5]
        raise UsageError(
            f"--resume: {shown} has another vocabulary than the checkpoint's ({len(vocab)} "
            f"characters, the checkpoint's {len(recorded)}; in one only: {''.join(extra)!r}): "
            f"not the text the run trained on"
        )
    sha, want = data.state()["sha256"], stored["data"]["sha256"]
    if sha != want:
        raise UsageError(
            f"--resume: {shown} differs from the text the run trained on (SHA-256 "
            f"{sha[:16]}..., the checkpoint's {want[:16]}...)"
        )


def _new_trainer(data: Any, name: Any, opts: Any) -> Any:
    """A fresh text run's Trainer: the gpt on the text's vocabulary, seeded, the run's AdamW
    settings and learning-rate schedule (over its end step)."""
    from .._model.trainer import Trainer

    _run._warmup_fits(opts, opts["end_step"])
    block = parse_gpt(opts["model"])["block"]
    try:
        return Trainer(
            build_gpt(opts["model"], data.vocab_size),
            input_shape=(block,),
            loss="cross_entropy",
            seed=opts["seed"],
            data_schedule=text_record(data, name, opts),
            lr=opts["lr"],
            weight_decay=opts["weight_decay"],
            lr_schedule=lr_schedule_for(opts, opts["end_step"]),
        )
    except ValueError as exc:
        raise UsageError(f"--model {opts['model']}: {exc}") from None


def _fits(trainer: Any, opts: Any) -> Any:
    """Refuse a batch larger than the trainer's activations allow (its `max_rows`)."""
    if opts["batch_size"] > trainer.max_rows:
        raise UsageError(
            f"--batch-size {opts['batch_size']}: the model {opts['model']} takes at most "
            f"{trainer.max_rows} windows per step (its activations and their gradients in 2 GiB);"
            f" pass a smaller --batch-size or model"
        )


# -- the loop ------------------------------------------------------------------------------


def _announce(args: Any, run: Any, out: Any) -> Any:
    """The run's progress reporter, after its first lines: the start record and what trains."""
    opts, data, end = run.opts, run.data, run.end
    every = args.log_every or max(1, (end - run.start) // 20)
    progress = Progress(run.start, end, every, stream=out, json_lines=args.json)
    shown = {k: v for k, v in opts.items() if v is not None and k != "end_step"}
    progress.emit(
        {
            "event": "start",
            "text": run.name,
            "text_sha256": data.state()["sha256"],
            "vocab_size": data.vocab_size,
            "n_train": data.n_train,
            "n_val": data.n_val,
            "start_step": run.start,
            "end_step": end,
            "checkpoint": _shown(run.ckpt),
            **shown,
        }
    )
    progress.message(
        f"{'resuming' if run.start else 'training'} {opts['model']} on {run.name} "
        f"({data.vocab_size} characters; {data.n_train} train / {data.n_val} validation): "
        f"step {run.start} -> {end}, batch {opts['batch_size']}, {_run.lr_text(opts, end)}, "
        f"weight decay "
        f"{opts['weight_decay']}, seed {opts['seed']}, mode {opts['mode']}; losses every "
        f"{opts['eval_every']} steps on {opts['eval_batches']} batches of each split"
    )
    if run.start >= end:
        progress.message(
            f"the checkpoint is at step {run.start} already (--steps ends at {end}); nothing "
            f"to train"
        )
    return progress


def _step(run: Any) -> Any:
    """One step on the text's next windows: (the step's history record, 0, 0)."""
    x, y = run.data.batch()
    result = run.trainer.train_step(x, y)
    return {"step": result["step"], "loss": float(result["loss"])}, 0, 0


def _after_step(run: Any, record: Any, step: Any) -> Any:
    """Every --eval-every steps and at the run's end: both losses into the step's record."""
    if step % run.opts["eval_every"] == 0 or step == run.end:
        record.update(_evaluate(run, step))


def _evaluate(run: Any, step: Any) -> Any:
    """{train_loss, val_loss}: each split's mean loss over its evaluation windows, reported."""
    losses = {}
    for split, windows in zip(("train", "val"), run.evals):
        values = []
        for x, y in windows:
            try:
                values.append(run.trainer.evaluate(x, y)["loss"])
            except ValueError as exc:
                raise UsageError(f"the {split} loss at step {step}: {exc}") from None
        losses[f"{split}_loss"] = math.fsum(values) / len(values)
    run.evaluated = (step, losses)
    run.progress.emit({"event": "eval", "step": step, **losses})
    run.progress.message(
        f"step {step}: train loss {losses['train_loss']:.4f}, val loss {losses['val_loss']:.4f}"
    )
    return losses


# -- the report ----------------------------------------------------------------------------


def report(args: Any, run: Any, outcome: Any) -> Any:
    """The closing lines: how to resume after a signal, else both losses at the end, the
    state hash and how to sample."""
    hit, step, loss = outcome
    trainer, progress, ckpt = run.trainer, run.progress, run.ckpt
    if hit and step < run.end:
        return _run._interrupted(args, run, hit, step)
    if run.evaluated is None or run.evaluated[0] != trainer.step_:
        _evaluate(run, trainer.step_)
    losses = run.evaluated[1]
    history = run.history.path
    if loss is None:  # nothing trained in this process: the last recorded step's loss
        loss = next((r["loss"] for r in reversed(_history.read(history))), None)
    summary = {
        "event": "done",
        "step": trainer.step_,
        "final_loss": loss,
        **losses,
        "state_hash": trainer.state_hash(),
        "checkpoint": _shown(ckpt),
        "history": _shown(history),
        "seconds": round(progress.elapsed(), 3),
    }
    progress.emit(summary)
    final = "n/a" if loss is None else f"{loss:.4f}"
    progress.message(
        f"done: step {trainer.step_} in {progress.elapsed():.2f} s\n"
        f"  train loss {losses['train_loss']:.4f}, val loss {losses['val_loss']:.4f} (the "
        f"mean over {run.opts['eval_batches']} batches of each split)\n"
        f"  final step loss {final}\n"
        f"  state hash {summary['state_hash']}\n"
        f"  checkpoint {_shown(ckpt)}\n"
        f"  history {_shown(history)}\n"
        f"  sample with: mojolearn sample {_shown(ckpt)}"
    )
    return EXIT_OK
