"""Pure-Python mirror of a whole model step in identical mode (docs/ARITHMETIC.md "Models"):
the layers of tests/reference/layers.py walked as the engine walks a model's program.

- Forward: layers in order, depth first into containers; a Residual's output is `x + f(x)`.
  Dropout draws its mask in training steps (`train`), keyed by the trainer's seed, the step `t`
  and the layer's index in the model's pre-order walk (containers included, the model's own
  Sequential at 0); Flatten is the identity on the flat row-major values.
- Loss: mean cross-entropy over every position (`loss.py`), or MSE over every element.
- Backward: layers last first. A Residual's skip writes its input's gradient first, then the
  backward of f adds into it: a Linear's input gradient continues its fma chain from the value
  already there, any other layer adds its value to it (`existing + value`).
- AdamW over the flat buffer (tests/reference/optim.py), t = step + 1.
"""

import math

from mojolearn._model.layers import (
    GELU,
    AvgPool2d,
    CausalSelfAttention,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    LayerNorm,
    Linear,
    MaxPool2d,
    PositionEmbedding,
    ReLU,
    Residual,
    Sequential,
    Sigmoid,
    Tanh,
)

from . import attention as A
from . import conv as C
from . import layers as L
from .f32 import f32, fma32
from .loss import cross_entropy


class _Walk:
    def __init__(self, spec, params, rows, seed, t, train):
        self.spec, self.p, self.rows = spec, params, rows
        self.seed, self.t, self.train = seed, t, train
        self.offsets = dict(zip(spec.names, spec.offsets))
        self.grads = [0.0] * spec.total
        self.index = 0  # the pre-order position of the next layer

    def tensor(self, name, size):
        at = self.offsets[name]
        return self.p[at : at + size]

    def spec_shape(self, name):
        return self.spec.shapes[self.spec.names.index(name)]

    def _linear_tensors(self, name, n_in, n_out, bias):
        w = self.tensor(f"{name}.weight", n_in * n_out)
        return w, self.tensor(f"{name}.bias", n_out) if bias else None

    def _linear_back(self, name, g, x, rows, w, n_in, n_out, bias, into):
        """A Linear's backward: its tensors' gradients put, the input's returned (its fma
        chain continuing from `into`'s values when given)."""
        _, dw, db = L.linear_backward(g, x, rows, w, n_in, n_out, bias)
        self.put(f"{name}.weight", dw)
        if bias:
            self.put(f"{name}.bias", db)
        dx = []
        for r in range(rows):
            gr = g[r * n_out : (r + 1) * n_out]
            for k in range(n_in):
                acc = 0.0 if into is None else into[r * n_in + k]
                for o in range(n_out):
                    acc = fma32(gr[o], w[o * n_in + k], acc)
                dx.append(acc)
        return dx

    def put(self, name, values):
        at = self.offsets[name]
        self.grads[at : at + len(values)] = values

    # -- forward: returns (output, cache) -----------------------------------------------------
    def forward(self, layer, path, shape, x):
        at = self.index
        self.index += 1
        n = math.prod(shape)
        if isinstance(layer, (Sequential, Residual)):
            caches, y = [], x
            for i, child in enumerate(layer.layers):
                sub = f"{path}.{i}" if path else str(i)
                y, cache, shape_out = self.forward(child, sub, shape, y)
                caches.append((child, sub, shape, cache))
                shape = shape_out
            if isinstance(layer, Residual):
                y = L.residual_forward(x, y)
            return y, caches, shape
        if isinstance(layer, Flatten):
            return x, None, (n,)
        if isinstance(layer, Linear):
            lead = n // layer.in_features
            w = self.tensor(f"{path}.weight", layer.in_features * layer.out_features)
            b = self.tensor(f"{path}.bias", layer.out_features) if layer.bias else None
            y = L.linear_forward(x, self.rows * lead, w, b, layer.in_features, layer.out_features)
            return y, (x, w), shape[:-1] + (layer.out_features,)
        if isinstance(layer, Conv2d):
            d = conv_dims(layer, shape)
            w = self.tensor(f"{path}.weight", math.prod(self.spec_shape(f"{path}.weight")))
            b = self.tensor(f"{path}.bias", layer.out_channels) if layer.bias else None
            y = C.conv2d_forward(x, self.rows, w, b, d)
            return y, (x, w, d), layer._output_shape(shape, path)
        if isinstance(layer, (MaxPool2d, AvgPool2d)):
            d = (*shape, *layer.kernel_size, *layer.stride)
            pool = C.maxpool2d_forward if isinstance(layer, MaxPool2d) else C.avgpool2d_forward
            return pool(x, self.rows, d), (x, d), layer._output_shape(shape, path)
        if isinstance(layer, ReLU):
            y = L.relu_forward(x)
            return y, y, shape
        if isinstance(layer, LayerNorm):
            d = layer.normalized_shape
            w = self.tensor(f"{path}.weight", d) if layer.elementwise_affine else None
            b = self.tensor(f"{path}.bias", d) if layer.elementwise_affine else None
            y, means, rstds = L.layernorm_forward(x, self.rows * (n // d), d, w, b, layer.eps)
            return y, (x, w, means, rstds), shape
        if isinstance(layer, Dropout):
            if not self.train or layer.p == 0:
                return x, None, shape
            y, kept = L.dropout_forward(x, layer.p, L.dropout_key(self.seed, self.t, at), 0)
            return y, kept, shape
        if isinstance(layer, GELU):
            return L.gelu_forward(x, layer.approximate), x, shape
        if isinstance(layer, Tanh):
            y = L.tanh_forward(x)
            return y, y, shape
        if isinstance(layer, Embedding):
            d = layer.embedding_dim
            w = self.tensor(f"{path}.weight", layer.num_embeddings * d)
            return A.embedding_forward(x, w, d), x, shape + (d,)
        if isinstance(layer, PositionEmbedding):
            w = self.tensor(f"{path}.weight", n)
            return A.position_forward(x, w, self.rows, n), None, shape
        if isinstance(layer, CausalSelfAttention):
            t, d = shape
            wa, ba = self._linear_tensors(f"{path}.c_attn", d, 3 * d, layer.bias)
            wp, bp = self._linear_tensors(f"{path}.c_proj", d, d, layer.bias)
            qkv = L.linear_forward(x, self.rows * t, wa, ba, d, 3 * d)
            y, att = A.attention_forward(qkv, self.rows, t, d, layer.num_heads)
            out = L.linear_forward(y, self.rows * t, wp, bp, d, d)
            return out, (x, qkv, att, y, wa, wp), shape
        if isinstance(layer, Sigmoid):
            y = L.sigmoid_forward(x)
            return y, y, shape
        raise TypeError(layer)

    # -- backward: the input's gradient (added to `into` when given) --------------------------
    def backward(self, layer, path, shape, cache, g, into):
        n = math.prod(shape)
        if isinstance(layer, (Sequential, Residual)):
            if isinstance(layer, Residual):
                skip = list(g) if into is None else L.residual_backward(g, into)
                return self._stack_back(cache, g, skip)
            return self._stack_back(cache, g, into)
        if isinstance(layer, Flatten) or (isinstance(layer, Dropout) and cache is None):
            return list(g) if into is None else [f32(a + b) for a, b in zip(into, g)]
        if isinstance(layer, Linear):
            x, w = cache
            n_in, n_out = layer.in_features, layer.out_features
            rows = self.rows * (n // n_in)
            return self._linear_back(path, g, x, rows, w, n_in, n_out, layer.bias, into)
        if isinstance(layer, Embedding):  # token ids have no gradient
            d = layer.embedding_dim
            self.put(f"{path}.weight", A.embedding_backward(cache, g, d, layer.num_embeddings))
            return None
        if isinstance(layer, CausalSelfAttention):
            x, qkv, att, y, wa, wp = cache
            t, d = shape
            r, bias = self.rows * t, layer.bias
            dy = self._linear_back(f"{path}.c_proj", g, y, r, wp, d, d, bias, None)
            dqkv = A.attention_backward(qkv, att, dy, self.rows, t, d, layer.num_heads)
            return self._linear_back(f"{path}.c_attn", dqkv, x, r, wa, d, 3 * d, bias, into)
        if isinstance(layer, Conv2d):
            x, w, d = cache
            dx, dw, db = C.conv2d_backward(g, x, self.rows, w, d, layer.bias, into)
            self.put(f"{path}.weight", dw)
            if layer.bias:
                self.put(f"{path}.bias", db)
            return dx
        if isinstance(layer, (MaxPool2d, AvgPool2d)):
            x, d = cache
            v = C.pool2d_backward(g, x, self.rows, d, isinstance(layer, MaxPool2d))
        elif isinstance(layer, ReLU):
            v = L.relu_backward(g, cache)
        elif isinstance(layer, LayerNorm):
            x, w, means, rstds = cache
            d = layer.normalized_shape
            v, dw, db = L.layernorm_backward(g, x, self.rows * (n // d), d, w, means, rstds)
            if w is not None:
                self.put(f"{path}.weight", dw)
                self.put(f"{path}.bias", db)
        elif isinstance(layer, Dropout):
            v = L.dropout_backward(g, layer.p, cache)
        elif isinstance(layer, GELU):  # the cache is the input
            v = L.gelu_backward(g, cache, layer.approximate)
        elif isinstance(layer, Tanh):  # the cache is the output
            v = L.tanh_backward(g, cache)
        elif isinstance(layer, Sigmoid):
            v = L.sigmoid_backward(g, cache)
        elif isinstance(layer, PositionEmbedding):
            table = layer.max_len * layer.dim
            self.put(f"{path}.weight", A.position_backward(g, self.rows, n, table))
            v = list(g)
        else:
            raise TypeError(layer)
        return v if into is None else [f32(a + b) for a, b in zip(into, v)]

    def _stack_back(self, caches, g, into):
        # Flatten and an inactive Dropout run no op (the engine reads their input's buffer),
        # so the gradient already there is added to by the first layer that runs one.
        real = [i for i, (child, _, _, cache) in enumerate(caches) if not _passes(child, cache)]
        first = real[0] if real else None
        for i in range(len(caches) - 1, -1, -1):
            child, sub, shape, cache = caches[i]
            if i == first or first is None and i == 0:
                g = self.backward(child, sub, shape, cache, g, into)
            elif _passes(child, cache):
                continue
            else:
                g = self.backward(child, sub, shape, cache, g, None)
        return g


def conv_dims(layer, shape):
    """A Conv2d's sizes as tests/reference/conv.py takes them."""
    return (*shape, layer.out_channels, *layer.kernel_size, *layer.stride, *layer.padding)


def _passes(layer, cache):
    return isinstance(layer, Flatten) or (isinstance(layer, Dropout) and cache is None)


def step(spec, params, x, targets, rows, seed=0, t=1, train=True):
    """(loss, outputs, grads) of one batch: x is rows examples (flat), targets the class ids
    (cross-entropy: rows × positions) or the float32 targets (MSE: like the outputs)."""
    walk = _Walk(spec, params, rows, seed, t, train)
    walk.index = 1  # the model's own Sequential is step 0
    caches, y, shape = [], x, spec.input_shape
    for i, child in enumerate(spec.model.layers):
        y, cache, shape_out = walk.forward(child, str(i), shape, y)
        caches.append((child, str(i), shape, cache))
        shape = shape_out
    if spec.loss == "mse":
        loss, g = L.mse(y, targets)
    else:
        classes = spec.output_shape[-1]
        logits = [y[r * classes : (r + 1) * classes] for r in range(len(y) // classes)]
        loss, _, grows = cross_entropy(logits, targets, ignore_index=-(1 << 40), reduction="mean")
        g = [v for row in grows for v in row]
    walk._stack_back(caches, g, None)
    return loss, y, walk.grads
