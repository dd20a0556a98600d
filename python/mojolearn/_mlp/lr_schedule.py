"""A trainer's learning-rate schedule: its check, the rates it gives, its record in the state.

`lr_schedule` is one of the project's schedules (`ConstantLR`, `WarmupLinearLR`,
`WarmupCosineLR`) or any object with a one-based `lr_at(t)` (checked as the optimizers check
theirs: `_optim.base._lr_schedule`). The step being taken, t = step_ + 1, runs at `lr_at(t)`, checked as
the optimizers check a scheduled rate (`_optim.base._f32_hyper`: a real number, finite and >= 0 both
as given and rounded to float32; 0 is a step that moves the moments, not the weights) and
then used as given (binary64, profile v2). What `lr_at` itself raises reaches the caller
unchanged. Either way the step is not taken and nothing changes.

The record (`state_dict()["lr_schedule"]`, a checkpoint payload's `lr_schedule`; present only
while a schedule is set, so a trainer without one writes what it always wrote):

- the project's schedules (exactly these classes): `{"kind": "constant" | "warmup_linear" |
  "warmup_cosine", "peak_lr": float, "warmup_steps": int, "total_steps": int | null, "min_lr":
  float}`, the rates their float32 values as JSON floats. A load rebuilds the schedule from it.
- anything else (a subclass included: it may override `lr_at`): `{"kind": "custom", "class":
  "<module>.<qualname>"}`. Its rates cannot be written down, so a load needs the object
  again: `lr_schedule=` (or, loading into a trainer, the trainer's own schedule), of the
  recorded class; anything else is refused by name.
"""

from __future__ import annotations

import math

from .._optim.base import _f32_hyper, _lr_schedule
from .._optim.schedules import ConstantLR, WarmupCosineLR, WarmupLinearLR
from .._runtime.portable import round_f32

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

    from .._buffers.types import LRSchedule

_KINDS: dict[str, type[ConstantLR | WarmupLinearLR | WarmupCosineLR]] = {
    "constant": ConstantLR,
    "warmup_linear": WarmupLinearLR,
    "warmup_cosine": WarmupCosineLR,
}
_KIND_OF = {cls: kind for kind, cls in _KINDS.items()}
_FIELDS = frozenset(("kind", "peak_lr", "warmup_steps", "total_steps", "min_lr"))
_CUSTOM_FIELDS = frozenset(("kind", "class"))
_MAX_NAME = 256  # characters of a custom schedule's class name kept in the record
# Binary64 values at or above this round to +inf in binary32 (as `_mlp.state._F32_OVERFLOW`).
_F32_OVERFLOW = 3.4028235677973366e38


def checked(value: object, api: str) -> LRSchedule | None:
    """`value` as a trainer's `lr_schedule`: None, or an object with a callable `lr_at`.

    Raises:
        TypeError: anything else, named.
    """
    try:
        return _lr_schedule(value)  # type: ignore[arg-type]  # what it checks
    except TypeError as exc:
        raise TypeError(f"{api}: {exc}") from None


def rate(schedule: LRSchedule, t: int, api: str) -> float:
    """The checked rate of the one-based step `t` (what `lr_at` raises propagates)."""
    value = schedule.lr_at(t)
    # `_f32_hyper`'s rule for a float, in one comparison (it costs ~0.8 µs, a scheduled
    # step's ~3): what fails it gets the full check and its message.
    if type(value) is float and 0.0 <= value < _F32_OVERFLOW:
        return value
    try:
        return _f32_hyper(f"lr_schedule.lr_at({t})", value)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{api}: {exc}") from None


def rates(schedule: LRSchedule, t0: int, k: int, api: str) -> list[float]:
    """The checked rates of the steps t0, t0 + 1, ..., t0 + k - 1."""
    return [rate(schedule, t0 + i, api) for i in range(k)]


def _class_name(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"[:_MAX_NAME]


def record(schedule: LRSchedule) -> dict[str, Any]:
    """The schedule's record (a fresh JSON-ready dict; see the module docstring)."""
    cls: Any = type(schedule)  # any class: the project's are looked up, the rest miss
    kind = _KIND_OF.get(cls)
    if kind is None:
        return {"kind": "custom", "class": _class_name(schedule)}
    s: Any = schedule
    return {
        "kind": kind,
        "peak_lr": s.peak_lr,
        "warmup_steps": s.warmup_steps,
        "total_steps": s.total_steps,
        "min_lr": s.min_lr,
    }


def check_record(value: object, api: str) -> dict[str, Any]:
    """A state's `lr_schedule` record, checked whole (a fresh copy).

    The project's kinds must be exactly what `record` writes for the schedule they rebuild
    (JSON floats holding float32 values, JSON ints, the constructor's rules), so that the
    rebuilt trainer's state, and hash, is the record's.

    Raises:
        ValueError: anything else, named.
    """
    if type(value) is not dict:
        raise ValueError(
            f"{api}: lr_schedule must be a dict (a schedule record), got {value!r}"[:300]
        )
    kind = value.get("kind")
    if kind == "custom":
        name = value.get("class")
        if set(value) != _CUSTOM_FIELDS or type(name) is not str or not 0 < len(name) <= _MAX_NAME:
            raise ValueError(
                f"{api}: a custom lr_schedule record holds exactly kind and class (a class "
                f"name of 1 to {_MAX_NAME} characters), got {value!r}"[:300]
            )
        return {"kind": "custom", "class": name}
    if type(kind) is not str or kind not in _KINDS or set(value) != _FIELDS:
        raise ValueError(
            f"{api}: lr_schedule must be a record of kind {sorted(_KINDS) + ['custom']} with "
            f"exactly its fields ({sorted(_FIELDS)} or kind and class), got {value!r}"[:300]
        )
    for key in ("peak_lr", "min_lr"):
        x = value[key]
        if type(x) is not float or not math.isfinite(x) or round_f32(x) != x:
            raise ValueError(
                f"{api}: lr_schedule {key} must be a float32 value written as a JSON float, "
                f"got {x!r}"[:300]
            )
    for key in ("warmup_steps", "total_steps"):
        if type(value[key]) is not int and not (key == "total_steps" and value[key] is None):
            raise ValueError(
                f"{api}: lr_schedule {key} must be a JSON integer, got {value[key]!r}"[:300]
            )
    try:
        rebuilt = rebuild(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{api}: lr_schedule: {exc}") from None
    return record(rebuilt)


def rebuild(rec: dict[str, Any]) -> LRSchedule:
    """The project's schedule a checked record of a project kind describes."""
    cls = _KINDS[rec["kind"]]
    return cls(rec["peak_lr"], rec["warmup_steps"], rec["total_steps"], rec["min_lr"])


def resolve(rec: dict[str, Any] | None, given: object, current: object, api: str) -> Any:
    """The schedule a trainer loading a state with the checked record `rec` runs.

    Args:
        rec: the state's record, or None (the state has no schedule).
        given: the caller's `lr_schedule=` (None: not given).
        current: the loading trainer's own schedule (None for a new trainer).
        api: the name in messages.

    Returns:
        None, the rebuilt project schedule (or `given`, when it equals the record), or the
        custom schedule object (`given`, else `current`) of the recorded class.

    Raises:
        ValueError: `given` for a state without a schedule, or one that is not the recorded
            schedule; a custom record with no object of its class to run.
        TypeError: `given` has no `lr_at`.
    """
    given = checked(given, api)
    if rec is None:
        if given is not None:
            raise ValueError(
                f"{api}: lr_schedule= was given, but the state has no schedule; load it, "
                f"then set the trainer's lr_schedule to start one"
            )
        return None
    if rec["kind"] != "custom":
        if given is None:
            return rebuild(rec)
        if record(given) != rec:
            raise ValueError(
                f"{api}: lr_schedule= must be the state's schedule {rec!r}, got {record(given)!r}"[
                    :400
                ]
            )
        return given
    candidate: Any = given if given is not None else current
    if candidate is None:
        raise ValueError(
            f"{api}: the state's lr_schedule is a custom schedule ({rec['class']}), which a "
            f"state cannot hold: pass lr_schedule=<the same {rec['class']} schedule> to load it"
        )
    if record(candidate) != rec:
        raise ValueError(
            f"{api}: the state's lr_schedule is a custom schedule of class {rec['class']}; "
            f"lr_schedule= must be one too, got {_class_name(candidate)}"[:400]
        )
    return candidate
