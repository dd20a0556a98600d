"""`MLPTrainer`: any layer sizes [inputs, hidden..., classes], ReLU between layers, mean
cross-entropy, AdamW, with SmallMLPTrainer's API and promises.

It is the MLP trainer core (`_mlp_core.MLPCore`) with MLPTrainer's constructor: the state lives
in a resident session whose scratch grows with the batch, every step is one binding call
(identical mode is docs/ARITHMETIC.md "Any layer sizes" and equals `tests/reference/mlp.py`
bit for bit), a refused or interrupted step changes nothing, calls are serialized by one lock.
Its files are `mojolearn.mlp-checkpoint.v1`. `MLPTrainer([8, 16, 3], weights=w)` gives
SmallMLPTrainer's bits from the same `w`.
"""

from . import _mlp_state as S
from . import checkpoint as _ckpt
from ._layers import LayerSizes
from ._mlp_core import MLPCore, _binding

_API = "MLPTrainer"


class MLPTrainer(MLPCore):
    """Trainer for an MLP of any layer sizes with mean cross-entropy and AdamW.

    Args:
        layer_sizes: [inputs, hidden..., classes], at least 2 ints (2 is softmax regression),
            every width in [1, 65536], classes >= 2, at most 16 layers and 2**26 parameters.
        weights: None, or 2L float32 buffers weight1, bias1, ..., weightL, biasL with torch
            `nn.Linear` shapes (out, in) and (out,), finite; copied, never aliased.
        seed: with weights None, the seed of the initial weights (SplitMix64, torch's default
            `nn.Linear` bounds, layer by layer, weight then bias; the same bits everywhere).
        data_schedule: a non-empty, bounded JSON object describing the data order.
        lr, betas, eps, weight_decay: AdamW hyperparameters, rounded once to float32, then
            checked (lr > 0, eps > 0, weight_decay >= 0, betas in [0, 1)).

    Raises:
        TypeError: a width that is not an int, a weight that is not a float32 buffer.
        ValueError: bad sizes or bounds, wrong shapes, non-finite values, bad hyperparameters
            or data_schedule. Nothing is allocated for the network before the sizes pass.

    A step either completes or changes nothing; calls from several threads are serialized.
    The most rows a batch may have is `max_rows` (a bound on a step's working memory).
    """

    _API = _API
    _SCHEMA = S.MLP_SCHEMA
    _FILE_SCHEMA = _ckpt.MLP_FILE_SCHEMA

    def __init__(
        self,
        layer_sizes,
        weights=None,
        *,
        seed=0,
        data_schedule,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0.01,
    ):
        spec = LayerSizes(layer_sizes, _API)
        config = S.check_config(lr, betas, eps, weight_decay, _API)
        schedule = S.check_schedule(data_schedule, _API)
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
                S.tensor(w, shape, name, api=_API)
                for w, shape, name in zip(weights, spec.shapes, spec.names)
            ]
        self._init_core(spec, S.flat(tensors), config, schedule)

    @classmethod
    def from_checkpoint(cls, path, *, allow_profile_change=False, max_bytes=None):
        """A trainer restored from `save_checkpoint` output (any layer sizes), after checking
        the size bound (`max_bytes`, default `checkpoint.MLP_MAX_BYTES`, from the largest
        admissible model) before parsing, then schema, hash, arithmetic profile, every field
        and every tensor's length against the declared architecture."""
        return cls._from_state(cls._load(path, allow_profile_change, max_bytes))

    @classmethod
    def _from_state(cls, state):
        """A trainer holding a `state_dict()` (any layer sizes), validated as
        `load_state_dict` validates it."""
        if type(state) is not dict or type(state.get("architecture")) is not list:
            raise ValueError(f"{_API}: state must be a state_dict() with an architecture list")
        spec = LayerSizes(state["architecture"], _API)
        params, m, v, _, step, config, schedule, _ = S.validate_state(
            state, _binding().mode, spec, _API, S.MLP_SCHEMA
        )
        trainer = cls.__new__(cls)
        trainer._init_core(spec, params, config, schedule, m=m, v=v, step=step)
        return trainer

    # ------------------------------------------------------------ torch

    @classmethod
    def from_torch(
        cls, module, *, data_schedule=None, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01
    ):
        """A trainer with the weights (copied) of a torch `nn.Sequential` of `Linear` layers
        with biases, float32, a `ReLU` between every two of them and none after the last.
        torch is imported only here. `data_schedule` defaults to {"source": "torch"}."""
        import torch

        if not isinstance(module, torch.nn.Sequential):
            raise TypeError(
                f"{_API}.from_torch: module must be a torch.nn.Sequential of Linear "
                f"and ReLU layers, got {type(module).__name__}"
            )
        layers = list(module)
        sizes, weights = [], []
        for i, layer in enumerate(layers):
            want_linear = i % 2 == 0
            if want_linear and not isinstance(layer, torch.nn.Linear):
                raise ValueError(
                    f"{_API}.from_torch: module[{i}] must be a Linear layer, got "
                    f"{type(layer).__name__}"
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
        return cls(
            sizes,
            weights,
            data_schedule=data_schedule or {"source": "torch"},
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
        )

    def to_torch(self):
        """The same network as a new torch `nn.Sequential` (Linear, ReLU, ..., Linear) holding
        a copy of the current weights (float32, on the CPU). torch is imported only here."""
        import torch

        sizes = self._spec.sizes
        modules = []
        w = self.weights_
        with torch.no_grad():
            for l in range(len(sizes) - 1):
                layer = torch.nn.Linear(sizes[l], sizes[l + 1])
                layer.weight.copy_(torch.from_dlpack(w[f"weight{l + 1}"]))
                layer.bias.copy_(torch.from_dlpack(w[f"bias{l + 1}"]))
                modules.append(layer)
                if l < len(sizes) - 2:
                    modules.append(torch.nn.ReLU())
        return torch.nn.Sequential(*modules)
