"""Learning-rate schedules: `lr_at(t)` for the one-based step `t`, as a float32 value.

`ConstantLR`, `WarmupLinearLR` and `WarmupCosineLR` take `(peak_lr, warmup_steps=0,
total_steps=None, min_lr=0.0)`; the optimizers (`lr_schedule=`) and both trainers
(`lr_schedule=`) take them, or any object with `lr_at(t)`. They live with the optimizers'
machinery (`mojolearn._optim.schedules`, whose docstring gives the exact arithmetic), so the
trainers' core can rebuild them from a checkpoint's record; this module is their public face.
They are immutable values (read-only attributes; equal and hashable by value).

Example:
    >>> schedule = mojolearn.WarmupCosineLR(1e-3, warmup_steps=100, total_steps=1000)
    >>> opt = mojolearn.AdamW(params, lr_schedule=schedule)
"""

from __future__ import annotations

from ._optim.schedules import ConstantLR, WarmupCosineLR, WarmupLinearLR

__all__ = ["ConstantLR", "WarmupCosineLR", "WarmupLinearLR"]
