"""`Trainer`'s state as data (the mixin `ModelPersistence`): `load_state_dict`, the state hash,
checkpoint files, and the checks every way in goes through.

Format `mojolearn.model-checkpoint.v1`: the envelope, hashes, canonical form, size bound before
parsing, duplicate-key refusal and atomic write of `mojolearn._mlp.codec` (its docstring is the
specification), with both `arithmetic_profile` and `envelope_sha256` required. The payload is
the state, schema `mojolearn.model-state.v1`, with exactly:

- `model`: {input_shape, loss, model} (`ModelSpec.record()`: the layers as `nn` JSON records);
- `seed` (int in [0, 2**64)), `step` (int in [0, 2**31-1]), `config` {lr, beta1, beta2, eps,
  weight_decay} (JSON floats, as given), `data_schedule` (a bounded JSON object, `{}` for none),
  `lr_schedule` (null, or the record `mojolearn._mlp.lr_schedule` writes);
- `params`, `m`, `v`: {torch name: tensor} for exactly the model's tensors, each
  {"dtype": "<f4", "shape": [...], "hex": ...} of finite float32 values (v >= 0).

The payload's SHA-256 is `Trainer.state_hash()`. A reader builds the model from its record
first (so a Linear(2**20, 2**20) is refused by its parameter count, before any tensor is
decoded or allocated), holds the file to that model's bound (`file_bound`), then checks every
tensor's name, shape and hex length before decoding it, and refuses any field that is not what
the writer writes for the state it holds (a `1` where `1.0` is written, a bare int for
`input_shape`): a file holds one state, and that state's hash is the file's.
"""

from __future__ import annotations

import os

from .._mlp import codec as _codec
from .._mlp import lr_schedule as _lrs
from .._mlp import state as S
from .._mlp.rng import _check_seed
from .._runtime import backend as _backend
from .program import Program
from .spec import MAX_PARAMS, ModelSpec

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    from .._buffers.array import Array
    from .._buffers.types import LRSchedule
    from .trainer import Trainer

    _T = TypeVar("_T", bound=Trainer)

SCHEMA = "mojolearn.model-state.v1"
FILE_SCHEMA = _codec.MODEL_FILE_SCHEMA
KEYS = frozenset(
    (
        "schema",
        "model",
        "numeric_mode",
        "seed",
        "step",
        "config",
        "lr_schedule",
        "data_schedule",
        "params",
        "m",
        "v",
    )
)
TENSORS = ("params", "m", "v")
# Beside the tensors' hex (3 tensors of 8 digits a value): names, shapes, the model record (at
# most 1024 layers), the config and the data schedule fit in 1 MiB at every admissible size.
SLACK = 1 << 20
MAX_BYTES = _codec.MODEL_MAX_BYTES
assert MAX_BYTES >= 3 * 8 * MAX_PARAMS + SLACK


def file_bound(spec: ModelSpec) -> int:
    """The most bytes a checkpoint of this model may have."""
    return min(MAX_BYTES, 3 * 8 * spec.total + SLACK)


def payload(state: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint payload of a `state_dict()`: its tensors encoded (`encode_tensor`)."""
    out = dict(state)
    for key in TENSORS:
        out[key] = {n: _codec.encode_tensor(a) for n, a in state[key].items()}
    return out


def check_state(
    state: object, api: str, tensor: Callable[[Any, tuple[int, ...], str], Any] | None = None
) -> tuple[ModelSpec, dict[str, Any]]:
    """Check a whole `state_dict()`-form state and copy it, touching nothing else.

    Args:
        state: the state (tensors as float32 buffers by torch name).
        api: the name in messages.
        tensor: turns a field's tensor into a buffer before it is checked (the file's hex
            decoder), None for buffers.

    Returns:
        The model's spec and the checked state: `params`, `m`, `v` flat owned float32 Arrays,
        every other field as `state_dict()` has it (`lr_schedule` the checked record).

    Raises:
        ValueError: anything refused, named (missing or unknown fields, the model record, a
            tensor's name, shape or value, the step, config, seed or schedules).
        TypeError: a tensor that is not a float32 buffer.
    """
    S._fields(state, KEYS, "state", api)
    assert isinstance(state, dict)
    if state["schema"] != SCHEMA:
        raise ValueError(f"{api}: state schema must be {SCHEMA!r}, got {state['schema']!r}"[:300])
    # The record first: its parameter count is checked before any tensor is looked at.
    spec = ModelSpec.from_record(state["model"], api)
    try:
        seed = _check_seed(state["seed"])
    except TypeError as exc:
        raise ValueError(f"{api}: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"{api}: {exc}") from None
    cfg = state["config"]
    S._fields(cfg, S.CONFIG_KEYS, "state config", api)
    if state["numeric_mode"] not in S.MODES:
        raise ValueError(
            f"{api}: numeric_mode must be one of {S.MODES}, got {state['numeric_mode']!r}"[:300]
        )
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "model": spec.record(),
        "numeric_mode": state["numeric_mode"],
        "seed": seed,
        "step": S.check_step(state["step"], api),
        "config": S.check_config(
            cfg["lr"], (cfg["beta1"], cfg["beta2"]), cfg["eps"], cfg["weight_decay"], api
        ),
        # `{}` is a trainer's "no schedule given" (the constructor's None).
        "data_schedule": {}
        if type(state["data_schedule"]) is dict and not state["data_schedule"]
        else _check_schedule(state["data_schedule"], api),
        "lr_schedule": None
        if state["lr_schedule"] is None
        else _lrs.check_record(state["lr_schedule"], api),
    }
    for key in TENSORS:
        group = state[key]
        S._fields(group, spec.names, f"state {key}", api)
        parts = []
        for name, shape in zip(spec.names, spec.shapes):
            label = f"{key}[{name!r}]"
            value = group[name] if tensor is None else tensor(group[name], shape, label)
            parts.append(S._tensor(value, shape, label, api))
        out[key] = S.flat(parts)
    v = out["v"]
    if v._size and min(v._mv) < 0:
        bad = next(i for i, x in enumerate(v._mv) if x < 0)
        raise ValueError(f"{api}: v (second moments) must be >= 0, element {bad} is {v._mv[bad]!r}")
    return spec, out


def _check_schedule(value: object, api: str) -> Any:
    """`check_schedule` at a Trainer's bounds whoever reads it (a checkpoint's reader calls
    itself "checkpoint", which the MLP's small default bound would otherwise apply to: a
    `train` record of 40 columns' standardization is past 128 values), named by `api`."""
    try:
        return S.check_schedule(value, "Trainer")
    except ValueError as exc:
        raise ValueError(f"{api}: {str(exc).removeprefix('Trainer: ')}") from None


def decode_payload(value: object, size: int) -> dict[str, Any]:
    """The state (`state_dict()` form) of a model checkpoint's parsed payload, every field
    checked (`check_state`, the model's file bound for `size` bytes, and the writer's exact
    form of every field); ValueError naming what is refused."""
    api = "checkpoint"
    if type(value) is not dict:
        raise ValueError(f"{api}: payload must be an object")
    S._fields(value, KEYS, "payload", api)
    spec = ModelSpec.from_record(value["model"], api)
    if size > file_bound(spec):
        raise ValueError(
            f"{api}: {size} bytes exceed the {file_bound(spec)}-byte bound of its model "
            f"({spec.total} parameters)"
        )

    def tensor(desc: Any, shape: tuple[int, ...], label: str) -> Array:
        return _codec._decode_tensor(desc, shape, "<f4", label)

    spec, checked = check_state(value, api, tensor)
    for key in sorted(KEYS - set(TENSORS)):  # the tensors' hex is exact by `_decode_tensor`
        if S.canonical(checked[key]) != S.canonical(value[key]):
            raise ValueError(
                f"{api}: {key} is not what mojolearn writes for it (got {value[key]!r})"[:300]
            )
    return _state_dict(spec, checked)


def _state_dict(spec: ModelSpec, checked: dict[str, Any]) -> dict[str, Any]:
    out = dict(checked)
    for key in TENSORS:
        out[key] = spec.split(checked[key])
    return out


def dumps(state: dict[str, Any]) -> bytes:
    """The checkpoint bytes of a `Trainer.state_dict()`.

    Raises:
        ValueError: the file would not load (the loader's checks run on its payload first) or
            is over its model's bound; nothing is made.
    """
    data = payload(state)
    try:
        spec = ModelSpec.from_record(state["model"], "checkpoint")
        body = _codec.envelope_bytes(FILE_SCHEMA, data)
        decode_payload(data, len(body))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint: not written, the file would not load: {exc}") from None
    assert len(body) <= file_bound(spec)
    return body


class ModelPersistence:
    """`Trainer`'s state as data: `load_state_dict`, `state_hash`, checkpoint files."""

    __slots__ = ()

    def load_state_dict(  # type: ignore[misc]  # self: the Trainer this mixes into
        self: _T, state: dict[str, Any], *, lr_schedule: LRSchedule | None = None
    ) -> _T:
        """Restore a `state_dict()` of the same model, input shape and loss.

        The whole state is checked and copied before anything changes; then the parameters,
        moments, step, hyperparameters, seed (every Dropout mask's key) and both schedules
        are replaced at once.

        Args:
            state: a `Trainer.state_dict()` (its tensors may be any float32 buffers of the
                right shapes).
            lr_schedule: the state's learning-rate schedule again, needed when it is a custom
                one (a project schedule must equal the record; with no record, refused).

        Returns:
            self.

        Raises:
            ValueError: a missing or unknown field, another model, input shape or loss, a
                tensor of the wrong name, shape or value (NaN, infinity, v < 0), a refused
                step, config, seed or schedule, or an `lr_schedule` that is not the state's;
                the trainer is unchanged.
            TypeError: a tensor that is not a float32 buffer, or an `lr_schedule` without
                `lr_at`.
        """
        api = "Trainer"
        # Any: the Trainer's fields are inferred from its constructor, which mypy reaches only
        # through this module (an import cycle).
        t: Any = self
        if isinstance(state, dict) and "model" in state:
            # Another model is refused before its tensors are looked at.
            other = ModelSpec.from_record(state["model"], api)
            if other != t._spec:
                raise ValueError(
                    f"{api}: the state's model {other.record()!r} is not this trainer's "
                    f"{t._spec.record()!r}"[:600]
                )
        _, st = check_state(state, api)
        running = _backend.binding().mode
        if st["numeric_mode"] != running:  # its next steps could not be the run's
            raise ValueError(
                f"{api}: the state was saved in numeric mode {st['numeric_mode']!r} but this "
                f"process runs {running!r}"
            )
        with t._lock:
            sched = _lrs.resolve(st["lr_schedule"], lr_schedule, t._lr_schedule, api)
            seed = st["seed"]
            program = t._program if seed == t._seed else Program(t._spec, seed)
            (
                t._state,
                t._step,
                t._config,
                t._schedule,
                t._lr_schedule,
                t._seed,
                t._program,
            ) = (
                (st["params"], st["m"], st["v"]),
                st["step"],
                st["config"],
                st["data_schedule"],
                sched,
                seed,
                program,
            )
        return t  # type: ignore[no-any-return]

    def state_hash(  # type: ignore[misc]  # self: the Trainer this mixes into
        self: Trainer,
    ) -> str:
        """A digest of the whole state: equal hashes mean bit-equal states.

        Returns:
            The SHA-256 (hex) of the canonical JSON of this state's checkpoint payload (the
            `payload_sha256` that `save_checkpoint` records): 64 hex digits, equal for equal
            states on every machine.
        """
        return _codec.state_hash(payload(self.state_dict()))

    def save_checkpoint(  # type: ignore[misc]  # self: the Trainer this mixes into
        self: Trainer, path: str | os.PathLike[str]
    ) -> None:
        """Write the whole state to `path` atomically (`mojolearn.model-checkpoint.v1`).

        The bytes go to a temporary file in the same folder, fsynced, which then replaces
        `path`: a reader sees the old file or the new one, never part of one.

        Args:
            path: the checkpoint file (replaced if it exists).

        Raises:
            ValueError: `path` names something other than a regular file, or the file would
                not load (the loader's checks run on what is about to be written); nothing
                is written.
            FileNotFoundError: `path`'s folder does not exist; nothing is made.
            OSError: the file cannot be written.
        """
        with self._lock:
            data = dumps(self.state_dict())
        _codec.write_atomic(path, data)

    @classmethod
    def _load(  # type: ignore[misc]  # cls: the Trainer this mixes into
        cls: type[_T],
        path: str | os.PathLike[str],
        allow_profile_change: bool,
        max_bytes: int | None,
    ) -> dict[str, Any]:
        """The checked state (`state_dict()` form) of a model checkpoint file, no trainer
        built: what `mojolearn.fit` reads to check a run before it touches the trainer (the
        MLP trainers' `_load` has the same signature)."""
        return _codec.load_resumable(path, allow_profile_change, FILE_SCHEMA, max_bytes)

    @classmethod
    def from_checkpoint(  # type: ignore[misc]  # cls: the Trainer this mixes into
        cls: type[_T],
        path: str | os.PathLike[str],
        *,
        allow_profile_change: bool = False,
        max_bytes: int | None = None,
        lr_schedule: LRSchedule | None = None,
    ) -> _T:
        """A trainer restored from a `save_checkpoint` file: the same state, bit for bit
        (the same `state_hash()`), continuing as the saved one would have.

        The file is checked whole (size bound before parsing, canonical form, hashes,
        arithmetic profile, the model record, every tensor) before a trainer is made.

        Args:
            path: the checkpoint file.
            allow_profile_change: accept a file written under another arithmetic profile (a
                migration: bits then follow this mojolearn's arithmetic); a bool.
            max_bytes: the bound applied before parsing (default
                `mojolearn.checkpoint.MODEL_MAX_BYTES`).
            lr_schedule: the file's learning-rate schedule again, needed for a custom one.

        Returns:
            A new `Trainer`.

        Raises:
            ValueError: the file is refused, with the reason (malformed or unknown layers,
                shapes that do not chain, too many parameters, wrong tensor names or shapes,
                non-finite values, a hash mismatch, another profile, a size over the bound).
            TypeError: `allow_profile_change` is not a bool, or `lr_schedule` has no `lr_at`.
            OSError: the file cannot be read.
        """
        state = _codec.load(path, allow_profile_change, FILE_SCHEMA, max_bytes)
        spec = ModelSpec.from_record(state["model"], "checkpoint")
        cfg = state["config"]
        trainer = cls(
            spec.model,
            input_shape=spec.input_shape,
            loss=spec.loss,
            weights=state["params"],
            seed=state["seed"],
            data_schedule=state["data_schedule"] or None,
            lr=cfg["lr"],
            betas=(cfg["beta1"], cfg["beta2"]),
            eps=cfg["eps"],
            weight_decay=cfg["weight_decay"],
        )
        return trainer.load_state_dict(state, lr_schedule=lr_schedule)


_codec.register_model_payload(decode_payload)
