"""Learning-rate schedules: `lr_at(t)` for the one-based step `t`, as a float32 value.

Each takes `(peak_lr, warmup_steps=0, total_steps=None, min_lr=0.0)`:

- warmup, 1 <= t <= warmup_steps: `peak_lr * t / warmup_steps` (linear from 0; peak at
  t = warmup_steps);
- then `ConstantLR`: `peak_lr`; `WarmupLinearLR`: linear decay; `WarmupCosineLR`: cosine decay,
  reaching `min_lr` exactly at `total_steps`;
- t >= total_steps: `min_lr`.

`total_steps=None` means: `ConstantLR` stays at `peak_lr` forever; `WarmupLinearLR` and
`WarmupCosineLR` refuse it (ValueError), because a decay needs an end. Given, `total_steps` must
exceed `warmup_steps`.

Schedules are immutable values: their four numbers are read-only attributes (assigning or
deleting one raises AttributeError; make a new schedule instead), and schedules of the same
class and numbers are equal and hash alike. They copy and pickle (a pickle is checked as the
constructor checks its arguments).

Values are computed in Python double with `+ - * /` only (the cosine is
`mojolearn._runtime.portable.cospi`, never `math.cos`) from the float32-rounded `peak_lr` and `min_lr`,
then rounded to float32, so every platform gets the same bits. Note: torch's
`torch.optim.lr_scheduler.ConstantLR` multiplies the lr by a factor for a number of steps; this
`ConstantLR` is a warmup-then-constant schedule (see DEVIATIONS.md).

Example:
    >>> schedule = mojolearn.WarmupCosineLR(1e-3, warmup_steps=100, total_steps=1000)
    >>> opt = mojolearn.AdamW(params, lr_schedule=schedule)
"""

from __future__ import annotations

import math
import numbers

from .._runtime.portable import cospi, round_f32


def _nonneg_lr(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not (math.isfinite(v) and v >= 0.0):
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    r = round_f32(v)
    if not math.isfinite(r):
        raise ValueError(f"{name} {value!r} overflows float32")
    return r  # type: ignore[no-any-return]  # _portable is not annotated yet


def _steps(name: str, value: object, allow_none: bool) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


_FIELDS = ("peak_lr", "warmup_steps", "total_steps", "min_lr")


class _Schedule:
    """A schedule is a value: its four numbers are checked once, here, and never change.

    A writable `peak_lr` let a trainer run on, and record, a schedule its own loader refuses;
    so assigning or deleting any attribute raises AttributeError, and two schedules of the
    same class and numbers are equal (and hash alike). A subclass that keeps more state sets
    it with `object.__setattr__` in its `__init__`.
    """

    __slots__ = _FIELDS
    _needs_total = True
    peak_lr: float
    min_lr: float
    warmup_steps: int
    total_steps: int | None

    def __init__(
        self,
        peak_lr: float,
        warmup_steps: int = 0,
        total_steps: int | None = None,
        min_lr: float = 0.0,
    ) -> None:
        """Check and keep the schedule's four numbers.

        Args:
            peak_lr: the rate at the end of the warmup, >= 0 (rounded to float32).
            warmup_steps: steps of linear warmup from 0 (0: none).
            total_steps: the step where the rate reaches `min_lr` and stays; required by
                the decaying schedules, and then greater than `warmup_steps`.
            min_lr: the final rate, in [0, peak_lr] (rounded to float32).

        Raises:
            TypeError: a rate that is not a real number, a step count that is not an int.
            ValueError: a negative or non-finite value, `min_lr > peak_lr`, a missing
                `total_steps` (decaying schedules) or one not above `warmup_steps`.
        """
        peak = _nonneg_lr("peak_lr", peak_lr)
        low = _nonneg_lr("min_lr", min_lr)
        warmup = _steps("warmup_steps", warmup_steps, False)
        total = _steps("total_steps", total_steps, True)
        if low > peak:
            raise ValueError(f"min_lr ({min_lr!r}) must not exceed peak_lr ({peak_lr!r})")
        name = type(self).__name__
        if total is None and self._needs_total:
            raise ValueError(
                f"{name} needs total_steps (the step where the decay reaches "
                f"min_lr); use ConstantLR for no decay"
            )
        if total is not None and warmup is not None and total <= warmup:
            raise ValueError(f"total_steps ({total}) must exceed warmup_steps ({warmup})")
        for field, value in zip(_FIELDS, (peak, warmup, total, low)):
            object.__setattr__(self, field, value)

    def _refuse(self, name: str, verb: str) -> AttributeError:
        cls = type(self).__name__
        return AttributeError(
            f"{cls}.{name} cannot be {verb}: schedules are immutable (make a new one, "
            f"e.g. {cls}(peak_lr, warmup_steps, total_steps, min_lr))"
        )

    def __setattr__(self, name: str, value: object) -> None:
        raise self._refuse(name, "assigned")

    def __delattr__(self, name: str) -> None:
        raise self._refuse(name, "deleted")

    def _values(self) -> tuple[float, int, int | None, float]:
        return (self.peak_lr, self.warmup_steps, self.total_steps, self.min_lr)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    # Slots without a __dict__ need their own pickle state, and a pickle is input: it is
    # checked as the constructor checks its arguments (a subclass's own attributes follow).
    def __getstate__(self) -> dict[str, object]:
        state: dict[str, object] = dict(zip(_FIELDS, self._values()))
        state.update(getattr(self, "__dict__", {}))
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        if type(state) is not dict or not set(_FIELDS) <= set(state):
            raise ValueError(f"{type(self).__name__}: a pickled schedule holds {_FIELDS}")
        _Schedule.__init__(self, *(state[f] for f in _FIELDS))  # type: ignore[arg-type]
        for key, value in state.items():
            if key not in _FIELDS:
                object.__setattr__(self, key, value)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(peak_lr={self.peak_lr!r}, warmup_steps="
            f"{self.warmup_steps!r}, total_steps={self.total_steps!r}, "
            f"min_lr={self.min_lr!r})"
        )

    def lr_at(self, t: int) -> float:
        """The learning rate of a step.

        Args:
            t: the one-based step (t = 1 is the first step).

        Returns:
            The rate, a float32 value (the same bits on every platform).

        Raises:
            TypeError: `t` is not an int.
            ValueError: `t` < 1.
        """
        if isinstance(t, bool) or not isinstance(t, int):
            raise TypeError(f"lr_at(t): t must be an int, got {type(t).__name__}")
        if t < 1:
            raise ValueError(f"lr_at(t): t is one-based (the first step is t=1), got {t}")
        w, total = self.warmup_steps, self.total_steps
        if t <= w:
            return round_f32(self.peak_lr * t / w)  # type: ignore[no-any-return]
        if total is not None and t >= total:
            return self.min_lr
        if total is None:
            return self.peak_lr
        return round_f32(self._decay((t - w) / (total - w)))  # type: ignore[no-any-return]

    def _decay(self, progress: float) -> float:
        raise NotImplementedError


class ConstantLR(_Schedule):
    """Linear warmup to `peak_lr`, then constant; `min_lr` from `total_steps` on (if given)."""

    _needs_total = False

    def _decay(self, progress: float) -> float:
        return self.peak_lr


class WarmupLinearLR(_Schedule):
    """Linear warmup, then linear decay from `peak_lr` to `min_lr` at `total_steps`:
    `min_lr + (peak_lr - min_lr) * (1 - progress)`, progress = (t - warmup) / (total - warmup)."""

    def _decay(self, progress: float) -> float:
        return self.min_lr + (self.peak_lr - self.min_lr) * (1.0 - progress)


class WarmupCosineLR(_Schedule):
    """Linear warmup, then cosine decay: `min_lr + (peak_lr - min_lr) * 0.5 * (1 +
    cospi(progress))`, progress = (t - warmup) / (total - warmup)."""

    def _decay(self, progress: float) -> float:
        return self.min_lr + (self.peak_lr - self.min_lr) * 0.5 * (1.0 + cospi(progress))  # type: ignore[no-any-return]
