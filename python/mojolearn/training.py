"""Training building blocks in one namespace: the optimizers, the learning-rate schedules and
the mini-batches and the loop over them (`mojolearn.training.AdamW`,
`mojolearn.training.WarmupCosineLR`, `mojolearn.training.Batches`, `mojolearn.training.fit`, ...)."""

from .batches import Batches
from .fitting import fit
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
    "fit",
]
