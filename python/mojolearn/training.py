"""Training building blocks in one namespace: the optimizers, the learning-rate schedules and
the mini-batches (`mojolearn.training.AdamW`, `mojolearn.training.WarmupCosineLR`,
`mojolearn.training.Batches`, ...)."""

from .batches import Batches
from .optim import SGD, Adam, AdamW, DeviceArray, clip_grad_norm_
from .schedules import ConstantLR, WarmupCosineLR, WarmupLinearLR

__all__ = [
    "Adam",
    "AdamW",
    "SGD",
    "DeviceArray",
    "clip_grad_norm_",
    "ConstantLR",
    "WarmupLinearLR",
    "WarmupCosineLR",
    "Batches",
]
