"""Training building blocks in one namespace: the optimizers and the learning-rate schedules
(`mojolearn.training.AdamW`, `mojolearn.training.WarmupCosineLR`, ...)."""

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
]
