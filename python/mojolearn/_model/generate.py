"""`Trainer.generate`: sampling tokens from a model whose input is token ids (its first layer
an `nn.Embedding`) and whose output is `(T, vocab)` logits, the same ids on every machine.

Per new token (docs/ARITHMETIC.md "Sampling"): the context is the sequence so far cropped to
its last T (the trainer's `input_shape`) ids; one forward of it alone (a program for its
length: the parameters do not depend on T) gives the last position's logits z; then
- `z_i / f32(temperature)`, one binary32 division (none at 1.0: the same values);
- top-k: the k largest by value, ties to the lower id; the rest take no part;
- their softmax in ascending id order, the `softmax` entry's arithmetic ("Probabilities");
- u = the (p+1)-th draw of a SplitMix64 seeded with `seed`, p the new token's position in the
  whole sequence (counter-based: position p draws the same u whatever came before it), as
  `(draw >> 40) / 2**24`, 24 bits in [0, 1);
- the inverse CDF: `c = +0.0`, then over the kept ids ascending `c = f32(c + p_i)`, the first
  id with `u < c`, or the last kept id when rounding leaves c ≤ u.
"""

from __future__ import annotations

from .._buffers.alloc import empty
from .._buffers.array import Array
from .._buffers.intake import input_labels
from .._mlp.rng import SplitMix64, _check_seed
from .._runtime import backend as _backend
from .._runtime import threads as _threads
from .._runtime.portable import round_f32
from .program import Program
from .spec import ModelSpec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_GAMMA, _MASK = 0x9E3779B97F4A7C15, (1 << 64) - 1
MAX_NEW = 1 << 20


class ModelGeneration:
    """`Trainer`'s `generate` (a mixin: the trainer gives `_spec`, `_state`, `_config`,
    `_lock` and `_API`)."""

    __slots__ = ()

    def generate(
        self: Any,
        prompt_ids: Any,
        n: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int = 0,
    ) -> list[int]:
        """Sample `n` tokens after a prompt, one forward per token, reproducibly: the same
        prompt, weights, settings and seed give the same ids on every machine (the module
        docstring of `mojolearn._model.generate` pins every step).

        Args:
            prompt_ids: the prompt's token ids (a list of ints or a 1-D integer buffer), at
                least one, each in [0, vocab); only its last T (`input_shape[0]`) are seen.
            n: how many tokens to add, an int in [0, 2**20].
            temperature: divides the logits, a finite float > 0 (below 1 sharper).
            top_k: None (every id), or an int in [1, vocab]: sample among the k largest
                logits only.
            seed: an int in [0, 2**64): the draws (independent of the trainer's seed).

        Returns:
            The prompt followed by the `n` new ids, as a list of ints.

        Raises:
            TypeError: a model without token inputs and `(T, vocab)` logits over the same
                vocabulary, or an argument of the wrong type.
            ValueError: an argument out of range (an id naming its position).
        """
        api = f"{self._API}.generate"
        spec: ModelSpec = self._spec
        vocab = spec.vocabulary
        if not vocab or spec.loss != "cross_entropy" or spec.output_shape[-1] != vocab:
            raise TypeError(
                f"{api}: needs a model whose first layer is an Embedding and whose output is "
                f"(T, vocab) logits over the same ids, this one maps {spec.input_shape} to "
                f"{spec.output_shape}"
            )
        ids = _prompt(prompt_ids, vocab, api)
        n = _count(n, api)
        t32 = _temperature(temperature, api)
        k = vocab if top_k is None else _count(top_k, api, "top_k", 1, vocab)
        seed = _check_seed(seed)
        programs: dict[int, Program] = {}
        with self._lock:
            params = self._state[0]
            for _ in range(n):
                context = ids[-spec.input_shape[0] :]
                z = _last_logits(self, params, context, programs)
                ids.append(_pick(z, t32, k, _uniform(seed, len(ids))))
        return ids


def _prompt(value: Any, vocab: int, api: str) -> list[int]:
    if isinstance(value, (list, tuple)):
        ids = list(value)
        if not all(type(i) is int for i in ids):
            raise TypeError(f"{api}: prompt_ids must be ints (token ids), got {value!r}"[:200])
    else:
        arr = input_labels(value, 1, "prompt_ids", api)
        ids = [int(i) for i in arr._mv]
    if not ids:
        raise ValueError(f"{api}: prompt_ids needs at least one token id")
    for pos, i in enumerate(ids):
        if not 0 <= i < vocab:
            raise ValueError(f"{api}: prompt_ids[{pos}] = {i} is not a token id in [0, {vocab})")
    return ids


def _count(value: object, api: str, name: str = "n", low: int = 0, high: int = MAX_NEW) -> int:
    if isinstance(value, bool) or type(value) is not int:
        raise TypeError(f"{api}: {name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{api}: {name} must be in [{low}, {high}], got {value}")
    return value


def _temperature(value: object, api: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{api}: temperature must be a float, got {type(value).__name__}")
    t32 = round_f32(float(value), "none")
    if t32 is None or not t32 > 0:
        raise ValueError(f"{api}: temperature must be a finite float > 0, got {value!r}")
    return float(t32)


def _uniform(seed: int, position: int) -> float:
    """The (position+1)-th draw of SplitMix64(seed) as 24 bits in [0, 1)."""
    rng = SplitMix64((seed + _GAMMA * position) & _MASK)
    return float(rng.uniform())


def _last_logits(
    trainer: Any, params: Array, context: list[int], programs: dict[int, Program]
) -> list[float]:
    """The logits at the last position of `context` alone (a forward of a program for its
    length, made once per length)."""
    spec: ModelSpec = trainer._spec
    length = len(context)
    if length not in programs:
        programs[length] = Program(ModelSpec(spec.model, (length,), spec.loss), 0)
    program = programs[length]
    x = Array.from_list(context, "<i4")
    out = empty((program.outputs,))
    scratch = empty((2 * program.arena + program.positions,))
    c = trainer._config
    p = params._addr
    addrs = [program.address, x._addr, x._addr, p, p, p, p, p, p, out._addr, out._addr]
    addrs += [out._addr, scratch._addr]
    head = [1, 0, 1, 1, c["lr"], c["beta1"], c["beta2"], c["eps"], c["weight_decay"]]
    try:
        _backend.binding().model_step(addrs, head + [spec.total, 0, 0, _threads.pool()])
    except RuntimeError as exc:
        raise ValueError(f"{trainer._API}.generate: the logits overflow float32 ({exc})") from None
    vocab = spec.output_shape[-1]
    return list(out._mv[(length - 1) * vocab :])


def _pick(z: list[float], t32: float, k: int, u: float) -> int:
    if t32 != 1.0:
        z = [round_f32(v / t32) for v in z]
    kept = sorted(sorted(range(len(z)), key=lambda i: (-z[i], i))[:k])
    if len(kept) == 1:
        return kept[0]
    logits = Array.from_list([z[i] for i in kept], "<f4")
    probs = empty((len(kept),))
    _backend.binding().softmax([logits._addr, probs._addr], [1, len(kept)])
    c = 0.0
    for i, p in zip(kept, probs._mv):
        c = round_f32(c + p)
        if u < c:
            return i
    return kept[-1]
