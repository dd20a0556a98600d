"""`MLPTrainer`: any layer sizes [inputs, hidden..., classes], ReLU between layers, mean
cross-entropy, AdamW, with SmallMLPTrainer's API and promises.

It is the MLP trainer core (`_mlp.core.MLPCore`) with MLPTrainer's constructor: the state lives
in a resident session whose scratch grows with the batch, every step is one binding call
(identical mode is docs/ARITHMETIC.md "Any layer sizes" and equals `tests/reference/mlp.py`
bit for bit), a refused or interrupted step changes nothing, calls are serialized by one lock.
Its files are `mojolearn.mlp-checkpoint.v1`. `MLPTrainer([8, 16, 3], weights=w)` gives
SmallMLPTrainer's bits from the same `w`.
"""

from __future__ import annotations

from ._buffers.intake import owned_tensor
from ._mlp import lr_schedule as _lrs
from ._mlp import state as S
from ._mlp.core import MLPCore
from ._mlp.schema import MLP_RECORD
from ._mlp.spec import LayerSizes
from ._mlp.steps import _binding

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    import os
    from collections.abc import Sequence
    from typing import Any

    import torch

    from ._buffers.types import BufferLike, LRSchedule

_API = MLP_RECORD.api  # "MLPTrainer"


class MLPTrainer(MLPCore):
    """Trainer for an MLP of any layer sizes with mean cross-entropy and AdamW.

    Args:
        layer_sizes: [inputs, hidden..., classes], at least 2 ints (2 is softmax regression),
            every width in [1, 65536], classes >= 2, at most 16 layers and 2**26 parameters.
        weights: None, or 2L float32 buffers weight1, bias1, ..., weightL, biasL with torch
            `nn.Linear` shapes (out, in) and (out,), finite; copied, never aliased.
        seed: with weights None, the seed of the initial weights (SplitMix64, torch's default
            `nn.Linear` bounds, layer by layer, weight then bias; the same bits everywhere).
        data_schedule: a non-empty JSON object describing the data order: at most 65536
            values and 512 KiB of canonical JSON (room for what `mojolearn train` records
            of its data; SmallMLPTrainer keeps the reference's 128 and 2048), nesting at most
            8 deep, strings of at most 2048 characters. None (the default) records
            {"source": "unspecified"}; `mojolearn.fit` adds its record under "fit".
        lr, betas, eps, weight_decay: AdamW hyperparameters, kept as given (each step's
            scalars are formed from them in binary64, docs/ARITHMETIC.md profile v2) and
            checked as given and in float32 (lr > 0, eps > 0, weight_decay >= 0, betas in
            [0, 1)).
        lr_schedule: None (every step at `lr`), or a learning-rate schedule giving every
            step's rate: `ConstantLR`, `WarmupLinearLR`, `WarmupCosineLR` or any object with
            a one-based `lr_at(t)` (see the `lr_schedule` property).

    Raises:
        TypeError: a width that is not an int, a weight that is not a float32 buffer, an
            `lr_schedule` without `lr_at`.
        ValueError: bad sizes or bounds, wrong shapes, non-finite values, bad hyperparameters
            or data_schedule. Nothing is allocated for the network before the sizes pass.

    A step either completes or changes nothing; calls from several threads are serialized.
    `lr`, `weight_decay` and `lr_schedule` may be assigned (checked as here; a refused value
    changes nothing; `lr` is refused while a schedule is set): the next step uses the new
    value, and `state_dict`, checkpoints and the state hash record it. Every other public
    attribute is read-only (AttributeError).
    float64 inputs (a NumPy array, array.array("d"), a CPU torch tensor, any strides) and
    Python lists of numbers are taken wherever a batch is (`train_step`, `train_steps`,
    `predict*`, `evaluate`, `fit`, `Batches`): each value is rounded once to the nearest float32
    (ties to even, as `numpy.astype(float32)` and torch's `.float()` round), then trained on
    exactly as those float32 values would be. A NaN or infinity is refused as in float32, and a
    finite value beyond float32's range (|x| >= 2**128 - 2**103, which would round to
    infinity) is refused by name (ValueError) rather than rounded. Class ids may be a list of
    ints.
    (`SmallMLPTrainer` takes float32 buffers only, as its reference does.)
    The most rows a batch may have is `max_rows` (a bound on a step's working memory, and at
    most 2**20); a larger batch is refused with ValueError before anything changes.

    Example:
        >>> trainer = mojolearn.MLPTrainer([8, 32, 32, 3], seed=1, data_schedule={"seed": 1})
        >>> out = trainer.train_step(X, y)  # X: float32 (n, 8), y: integer (n,)
        >>> out["step"], out["loss"]
    """

    __slots__ = ()
    _API = _API
    _SCHEMA_REC = MLP_RECORD

    def __init__(
        self,
        layer_sizes: Sequence[int],
        weights: Sequence[BufferLike] | None = None,
        *,
        seed: int = 0,
        data_schedule: dict[str, Any] | None = None,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        lr_schedule: LRSchedule | None = None,
    ) -> None:
        spec = LayerSizes(layer_sizes, _API)
        config = S.check_config(lr, betas, eps, weight_decay, _API)
        schedule = S.check_schedule(data_schedule, _API)
        lr_sched = _lrs.checked(lr_schedule, _API)
        if weights is None:
            tensors = spec.init(seed)
        else:
            if isinstance(weights, dict) or not isinstance(weights, (list, tuple)):
                raise TypeError(
                    f"{_API}: weights must be None or a list of {2 * spec.layers} "
                    f"buffers (weight1, bias1, ...), got {type(weights).__name__}"
                )
            if len(weights) != 2 * spec.layers:
                raise ValueError(
                    f"{_API}: weights must hold {2 * spec.layers} buffers "
                    f"(weight1, bias1, ..., weight{spec.layers}, "
                    f"bias{spec.layers}), got {len(weights)}"
                )
            tensors = [
                owned_tensor(w, shape, name, _API)
                for w, shape, name in zip(weights, spec.shapes, spec.names)
            ]
        self._init_core(spec, S.flat(tensors), config, schedule, lr_schedule=lr_sched)

    @classmethod
    def from_checkpoint(
        cls,
        path: str | os.PathLike[str],
        *,
        allow_profile_change: bool = False,
        max_bytes: int | None = None,
        lr_schedule: LRSchedule | None = None,
    ) -> MLPTrainer:
        """A trainer restored from `save_checkpoint` output (any layer sizes).

        The size bound is checked before parsing, then schema, hash, arithmetic profile,
        every field and every tensor's length against the declared architecture. A
        learning-rate schedule the file records continues where it stood: the project's
        schedules are rebuilt from the file; a custom one must be passed again.

        Args:
            path: the checkpoint file.
            allow_profile_change: accept a file written under another arithmetic profile (a
                migration: bits then follow this mojolearn's arithmetic).
            max_bytes: the size bound (default `checkpoint.MLP_MAX_BYTES`, from the largest
                admissible model).
            lr_schedule: the file's schedule again: required when it recorded a custom one
                (an object of the recorded class); a project schedule must equal the record;
                refused when the file has none.

        Returns:
            The restored trainer.

        Raises:
            ValueError: the file is refused (named reason), or `lr_schedule` is not the
                file's schedule; nothing is built.
            TypeError: `lr_schedule` has no `lr_at`.
            OSError: the file cannot be read.
        """
        return cls._from_state(cls._load(path, allow_profile_change, max_bytes), lr_schedule)

    @classmethod
    def _from_state(
        cls, state: dict[str, Any], lr_schedule: LRSchedule | None = None
    ) -> MLPTrainer:
        """A trainer holding a `state_dict()` (any layer sizes), validated as
        `load_state_dict` validates it (`lr_schedule` as it takes it)."""
        if type(state) is not dict or type(state.get("architecture")) is not list:
            raise ValueError(f"{_API}: state must be a state_dict() with an architecture list")
        spec = LayerSizes(state["architecture"], _API)
        params, m, v, _, step, config, schedule, _, rec = S.validate_state(
            state, _binding().mode, spec, MLP_RECORD
        )
        lr_sched = _lrs.resolve(rec, lr_schedule, None, _API)
        trainer = cls.__new__(cls)
        trainer._init_core(
            spec, params, config, schedule, m=m, v=v, step=step, lr_schedule=lr_sched
        )
        return trainer

    # ------------------------------------------------------------ torch

    @classmethod
    def from_torch(
        cls,
        module: torch.nn.Sequential,
        *,
        data_schedule: dict[str, Any] | None = None,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        lr_schedule: LRSchedule | None = None,
    ) -> MLPTrainer:
        """A trainer with the weights (copied) of a torch network. torch is imported only here.

        Args:
            module: an `nn.Sequential` of float32 `Linear` layers with biases, a `ReLU`
                between every two of them and none after the last.
            data_schedule: as in the constructor; None means {"source": "torch"}.
            lr, betas, eps, weight_decay, lr_schedule: as in the constructor.

        Returns:
            The new trainer (step 0, fresh AdamW moments).

        Raises:
            TypeError: `module` is not an `nn.Sequential`.
            ValueError: another layer structure, and what the constructor refuses.
        """
        import torch

        if not isinstance(module, torch.nn.Sequential):
            raise TypeError(
                f"{_API}.from_torch: module must be a torch.nn.Sequential of Linear "
                f"and ReLU layers, got {type(module).__name__}"
            )
        sizes, weights = _torch_layers(module)
        return cls(
            sizes,
            weights,
            data_schedule=data_schedule or {"source": "torch"},
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            lr_schedule=lr_schedule,
        )

    def to_torch(self) -> torch.nn.Sequential:
        """The same network in torch. torch is imported only here.

        Returns:
            A new `nn.Sequential` (Linear, ReLU, ..., Linear) holding a copy of the current
            weights (float32, on the CPU).
        """
        import torch

        sizes = self._spec.sizes
        modules: list[torch.nn.Module] = []
        w = self.weights_
        with torch.no_grad():
            for l in range(len(sizes) - 1):
                layer = torch.nn.Linear(sizes[l], sizes[l + 1])
                # torch's stubs do not re-export from_dlpack: hence the ignores.
                layer.weight.copy_(torch.from_dlpack(w[f"weight{l + 1}"]))  # type: ignore[attr-defined]
                layer.bias.copy_(torch.from_dlpack(w[f"bias{l + 1}"]))  # type: ignore[attr-defined]
                modules.append(layer)
                if l < len(sizes) - 2:
                    modules.append(torch.nn.ReLU())
        return torch.nn.Sequential(*modules)

    # ------------------------------------------------------------ safetensors

    @classmethod
    def from_safetensors(
        cls,
        path: str | os.PathLike[str],
        *,
        data_schedule: dict[str, Any] | None = None,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        lr_schedule: LRSchedule | None = None,
    ) -> MLPTrainer:
        """A trainer with the weights of a safetensors file (needs safetensors; no torch).

        The file is `save_safetensors` output or any file of torch's names for an
        `nn.Sequential` of Linear and ReLU layers (`0.weight`, `0.bias`, `2.weight`, ...,
        e.g. `safetensors.torch.save_file(model.state_dict(), path)`): the layer sizes come
        from the shapes and, when the metadata has `layer_sizes`, must agree with it. Like
        `from_torch`, the trainer starts at step 0 with fresh AdamW moments.

        Args:
            path: the safetensors file.
            data_schedule: as in the constructor; None means {"source": "safetensors"}.
            lr, betas, eps, weight_decay, lr_schedule: as in the constructor.

        Returns:
            The new trainer.

        Raises:
            ImportError: the safetensors package is not installed (`pip install safetensors`).
            ValueError: a file that is not safetensors, missing or extra tensors, a tensor
                that is not float32, of the wrong shape or not finite, layer sizes that
                disagree with the metadata (each named), and what the constructor refuses;
                nothing is built.
            OSError: the file cannot be read.
        """
        from ._mlp import export as _export

        sizes, weights = _export.load_safetensors(path, f"{_API}.from_safetensors")
        return cls(
            sizes,
            weights,
            data_schedule=data_schedule or {"source": "safetensors"},
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            lr_schedule=lr_schedule,
        )


def _torch_layers(module: Any) -> tuple[list[int], list[Any]]:
    """(layer sizes, detached CPU weights in parameter order) of an nn.Sequential of Linear and
    ReLU layers, its structure checked (`MLPTrainer.from_torch`)."""
    import torch

    layers = list(module)
    sizes: list[int]
    weights: list[Any]
    layer: Any  # a Linear or a ReLU, checked below
    sizes, weights = [], []
    for i, layer in enumerate(layers):
        want_linear = i % 2 == 0
        if want_linear and not isinstance(layer, torch.nn.Linear):
            raise ValueError(
                f"{_API}.from_torch: module[{i}] must be a Linear layer, got {type(layer).__name__}"
            )
        if not want_linear and not isinstance(layer, torch.nn.ReLU):
            raise ValueError(
                f"{_API}.from_torch: module[{i}] must be a ReLU (one between "
                f"every two Linear layers), got {type(layer).__name__}"
            )
        if want_linear:
            if layer.bias is None:
                raise ValueError(
                    f"{_API}.from_torch: module[{i}] has no bias (Linear layers "
                    f"with bias=True only)"
                )
            if sizes and layer.in_features != sizes[-1]:
                raise ValueError(
                    f"{_API}.from_torch: module[{i}] takes {layer.in_features} "
                    f"inputs but the layer before gives {sizes[-1]}"
                )
            sizes = sizes or [layer.in_features]
            sizes.append(layer.out_features)
            weights += [
                layer.weight.detach().cpu().contiguous(),
                layer.bias.detach().cpu().contiguous(),
            ]
    if not layers or len(layers) % 2 == 0:
        raise ValueError(
            f"{_API}.from_torch: module must end with a Linear layer (no ReLU "
            f"after the last), got {len(layers)} modules"
        )
    return sizes, weights
