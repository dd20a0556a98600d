"""The bad-input table: every public entry point called with each class of bad argument
(wrong type, dtype, shape, ndim, NaN/Inf, negative, empty, huge, read-only, aliasing): the
exception type and a message naming the argument, and nothing changed - trainer state,
optimizer state and parameters, and every buffer passed in, byte for byte."""

import array
import math
import os

import mojolearn as ml
import pytest
from mojolearn import checkpoint, cli, optim, schedules
from mojolearn._mlp import spec as _spec
from mojolearn._mlp import state as S
from mojolearn._runtime import files as _files

from ._util import record

NAN, INF = math.nan, math.inf


def A(values, *shape, dtype="<f4"):
    arr = ml.Array.from_list(list(values), dtype)
    return arr.reshape(*shape) if shape else arr


def zeros32(*shape):
    return A([0.25] * math.prod(shape), *shape)


def readonly(*shape):
    return (
        memoryview(array.array("f", [0.25] * math.prod(shape)))
        .toreadonly()
        .cast("B")
        .cast("f", shape)
    )


class Env:
    """Fresh objects for one row; `inputs` are the buffers whose bytes must not change."""

    def __init__(self):
        w = _spec.init_small_mlp(3)
        self.trainer = ml.SmallMLPTrainer(*w, data_schedule={"seed": 3})
        self.X, self.y = A([0.5] * 32, 4, 8), A([0, 1, 2, 1], dtype="<i4")
        self.trainer.train_step(self.X, self.y)
        self.params = [A([0.1 * i for i in range(6)], 2, 3), A([0.5] * 4, 4)]
        self.opt = optim.AdamW(self.params, lr=1e-2, accumulation_steps=2)
        self.grads = [A([0.01] * 6, 2, 3), A([0.02] * 4, 4)]
        self.opt.step(self.grads)
        self.logits, self.targets = A([0.1, 0.2, 0.3] * 2, 2, 3), A([0, 2], dtype="<i4")
        self.weights = [zeros32(*s) for s in S.SHAPES]
        self.inputs = [
            self.X,
            self.y,
            *self.params,
            *self.grads,
            self.logits,
            self.targets,
            *self.weights,
        ]

    def snapshot(self):
        sd = self.opt.state_dict()
        return (
            checkpoint.dumps(self.trainer.state_dict()),
            sd["t"],
            sd["exp_avg"].tobytes(),
            sd["exp_avg_sq"].tobytes(),
            self.opt.lr,
            tuple(
                bytes(memoryview(x).cast("B")) if not isinstance(x, ml.Array) else x.tobytes()
                for x in self.inputs
            ),
        )


def _state(e, edit):
    st = e.trainer.state_dict()
    edit(st)
    return st


def _grads4(e, j=None, value=None):
    g = [zeros32(*s) for s in S.SHAPES]
    if j is not None:
        g[j] = value
    return g


# (id, call(e), exception type(s), regex the message must match)
ROWS = [
    # -- SmallMLPTrainer constructor
    (
        "trainer/weight1 list",
        lambda e: ml.SmallMLPTrainer([[0.0] * 8] * 16, *e.weights[1:], data_schedule={"a": 1}),
        TypeError,
        r"weight1 must be a float32 buffer",
    ),
    (
        "trainer/weight1 float64",
        lambda e: ml.SmallMLPTrainer(
            array.array("d", [0.0] * 128), *e.weights[1:], data_schedule={"a": 1}
        ),
        TypeError,
        r"weight1 must be float32, got float64",
    ),
    (
        "trainer/weight1 shape",
        lambda e: ml.SmallMLPTrainer(zeros32(8, 16), *e.weights[1:], data_schedule={"a": 1}),
        ValueError,
        r"weight1 must have shape \(16, 8\)",
    ),
    (
        "trainer/bias1 ndim",
        lambda e: ml.SmallMLPTrainer(
            e.weights[0], zeros32(4, 4), *e.weights[2:], data_schedule={"a": 1}
        ),
        ValueError,
        r"bias1 must have shape \(16,\)",
    ),
    (
        "trainer/bias2 NaN",
        lambda e: ml.SmallMLPTrainer(*e.weights[:3], A([0, NAN, 0]), data_schedule={"a": 1}),
        ValueError,
        r"bias2 must be finite",
    ),
    (
        "trainer/weight2 Inf",
        lambda e: ml.SmallMLPTrainer(
            e.weights[0], e.weights[1], A([INF] * 48, 3, 16), e.weights[3], data_schedule={"a": 1}
        ),
        ValueError,
        r"weight2 must be finite",
    ),
    (
        "trainer/weight1 empty",
        lambda e: ml.SmallMLPTrainer(zeros32(0, 8), *e.weights[1:], data_schedule={"a": 1}),
        ValueError,
        r"weight1 must have shape",
    ),
    (
        "trainer/lr negative",
        lambda e: ml.SmallMLPTrainer(*e.weights, data_schedule={"a": 1}, lr=-1.0),
        ValueError,
        r"invalid learning rate",
    ),
    (
        "trainer/lr huge",
        lambda e: ml.SmallMLPTrainer(*e.weights, data_schedule={"a": 1}, lr=1e39),
        ValueError,
        r"lr must be a finite float32",
    ),
    (
        "trainer/lr NaN",
        lambda e: ml.SmallMLPTrainer(*e.weights, data_schedule={"a": 1}, lr=NAN),
        ValueError,
        r"lr must be a finite float32",
    ),
    (
        "trainer/lr str",
        lambda e: ml.SmallMLPTrainer(*e.weights, data_schedule={"a": 1}, lr="0.1"),
        ValueError,
        r"lr must be a real number",
    ),
    (
        "trainer/betas short",
        lambda e: ml.SmallMLPTrainer(*e.weights, data_schedule={"a": 1}, betas=(0.9,)),
        ValueError,
        r"betas must be a pair",
    ),
    (
        "trainer/beta2 one",
        lambda e: ml.SmallMLPTrainer(*e.weights, data_schedule={"a": 1}, betas=(0.9, 1.0)),
        ValueError,
        r"invalid beta at index 1",
    ),
    (
        "trainer/eps zero",
        lambda e: ml.SmallMLPTrainer(*e.weights, data_schedule={"a": 1}, eps=0.0),
        ValueError,
        r"invalid eps",
    ),
    (
        "trainer/weight_decay negative",
        lambda e: ml.SmallMLPTrainer(*e.weights, data_schedule={"a": 1}, weight_decay=-0.1),
        ValueError,
        r"invalid weight_decay",
    ),
    (
        "trainer/data_schedule empty",
        lambda e: ml.SmallMLPTrainer(*e.weights, data_schedule={}),
        ValueError,
        r"data_schedule must be a non-empty JSON object",
    ),
    (
        "trainer/data_schedule type",
        lambda e: ml.SmallMLPTrainer(*e.weights, data_schedule=[1]),
        ValueError,
        r"data_schedule must be a non-empty JSON object",
    ),
    (
        "trainer/data_schedule huge",
        lambda e: ml.SmallMLPTrainer(*e.weights, data_schedule={"a": "x" * 5000}),
        ValueError,
        r"data_schedule string longer",
    ),
    (
        "trainer/data_schedule surrogate",
        lambda e: ml.SmallMLPTrainer(*e.weights, data_schedule={"a": "\ud800"}),
        ValueError,
        r"data_schedule string holds a lone surrogate",
    ),
    (
        "trainer/data_schedule NaN",
        lambda e: ml.SmallMLPTrainer(*e.weights, data_schedule={"a": NAN}),
        ValueError,
        r"data_schedule numbers must be finite",
    ),
    # -- train_step / train_steps / predict / loss_and_grads
    (
        "train_step/X list",
        lambda e: e.trainer.train_step([[0.0] * 8], e.y[:1] if False else A([0], dtype="<i4")),
        TypeError,
        r"X must be a float32 buffer",
    ),
    (
        "train_step/X float64",
        lambda e: e.trainer.train_step(array.array("d", [0.0] * 8), A([0], dtype="<i4")),
        TypeError,
        r"X must be float32",
    ),
    (
        "train_step/X ndim",
        lambda e: e.trainer.train_step(zeros32(8), A([0], dtype="<i4")),
        ValueError,
        r"X must have shape \(batch, 8\)",
    ),
    (
        "train_step/X empty",
        lambda e: e.trainer.train_step(zeros32(0, 8), A([], dtype="<i4")),
        ValueError,
        r"X must have",
    ),
    (
        "train_step/X huge",
        lambda e: e.trainer.train_step(zeros32(257, 8), A([0] * 257, dtype="<i4")),
        ValueError,
        r"X must have 1 to 256 rows",
    ),
    (
        "train_step/X NaN",
        lambda e: e.trainer.train_step(A([NAN] + [0.0] * 7, 1, 8), A([0], dtype="<i4")),
        ValueError,
        r"X must be finite",
    ),
    (
        "train_step/X Inf",
        lambda e: e.trainer.train_step(A([0.0] * 7 + [-INF], 1, 8), A([0], dtype="<i4")),
        ValueError,
        r"X must be finite",
    ),
    (
        "train_step/targets range",
        lambda e: e.trainer.train_step(e.X, A([0, 1, 2, 3], dtype="<i4")),
        ValueError,
        r"targets must be classes 0..2",
    ),
    (
        "train_step/targets negative",
        lambda e: e.trainer.train_step(e.X, A([0, -1, 2, 1], dtype="<i4")),
        ValueError,
        r"targets must be classes 0..2",
    ),
    (
        "train_step/targets float",
        lambda e: e.trainer.train_step(e.X, A([0.0] * 4)),
        TypeError,
        r"targets must hold integers",
    ),
    (
        "train_step/targets shape",
        lambda e: e.trainer.train_step(e.X, A([0, 1], dtype="<i4")),
        ValueError,
        r"targets must have shape \(4,\)",
    ),
    (
        "train_step/targets huge int",
        lambda e: e.trainer.train_step(e.X, A([0, 1, 2, 1 << 40], dtype="<i8")),
        ValueError,
        r"targets",
    ),
    (
        "train_step/return_input_grad",
        lambda e: e.trainer.train_step(e.X, e.y, return_input_grad=1),
        TypeError,
        r"return_input_grad must be a bool",
    ),
    (
        "train_steps/k zero",
        lambda e: e.trainer.train_steps(e.X, e.y, 0),
        ValueError,
        r"k must be a positive int",
    ),
    (
        "train_steps/k bool",
        lambda e: e.trainer.train_steps(e.X, e.y, True),
        ValueError,
        r"k must be a positive int",
    ),
    (
        "train_steps/k uneven",
        lambda e: e.trainer.train_steps(e.X, e.y, 3),
        ValueError,
        r"X must stack k=3 equal batches",
    ),
    (
        "train_steps/X NaN",
        lambda e: e.trainer.train_steps(A([0.0] * 15 + [NAN], 2, 8), A([0, 1], dtype="<i4"), 2),
        ValueError,
        r"X must be finite",
    ),
    (
        "predict_logits/X dtype",
        lambda e: e.trainer.predict_logits(A([0] * 8, 1, 8, dtype="<i4")),
        TypeError,
        r"X must be float32",
    ),
    (
        "loss_and_grads/targets",
        lambda e: e.trainer.loss_and_grads(e.X, A([5] * 4, dtype="<i4")),
        ValueError,
        r"targets must be classes",
    ),
    (
        "predict_logits_sessions/empty",
        lambda e: e.trainer.predict_logits_sessions([]),
        ValueError,
        r"inputs must hold at least one batch",
    ),
    (
        "predict_logits_sessions/type",
        lambda e: e.trainer.predict_logits_sessions(5),
        TypeError,
        r"inputs must be a list",
    ),
    # -- apply_gradients / load_state_dict / checkpoints
    (
        "apply_gradients/dict",
        lambda e: e.trainer.apply_gradients({"weight1": 0}),
        TypeError,
        r"gradients must be a sequence",
    ),
    (
        "apply_gradients/count",
        lambda e: e.trainer.apply_gradients(_grads4(e)[:3]),
        ValueError,
        r"gradients must hold exactly 4",
    ),
    (
        "apply_gradients/dtype",
        lambda e: e.trainer.apply_gradients(_grads4(e, 1, array.array("d", [0.0] * 16))),
        TypeError,
        r"bias1 gradient must be float32",
    ),
    (
        "apply_gradients/shape",
        lambda e: e.trainer.apply_gradients(_grads4(e, 2, zeros32(16, 3))),
        ValueError,
        r"weight2 gradient must have shape \(3, 16\)",
    ),
    (
        "apply_gradients/NaN",
        lambda e: e.trainer.apply_gradients(_grads4(e, 3, A([0, NAN, 0]))),
        ValueError,
        r"bias2 gradient must be finite",
    ),
    (
        "apply_gradients/overflow",
        lambda e: e.trainer.apply_gradients(_grads4(e, 0, A([3e38] * 128, 16, 8))),
        RuntimeError,
        r"non-finite result and was not applied",
    ),
    (
        "load_state_dict/type",
        lambda e: e.trainer.load_state_dict([1]),
        ValueError,
        r"state must be a dict",
    ),
    (
        "load_state_dict/missing",
        lambda e: e.trainer.load_state_dict(_state(e, lambda s: s.pop("config"))),
        ValueError,
        r"missing fields \['config'\]",
    ),
    (
        "load_state_dict/step negative",
        lambda e: e.trainer.load_state_dict(_state(e, lambda s: s["optimizer"].update(step=-1))),
        ValueError,
        r"optimizer step must be in",
    ),
    (
        "load_state_dict/step huge",
        lambda e: e.trainer.load_state_dict(
            _state(e, lambda s: s["optimizer"].update(step=1 << 31))
        ),
        ValueError,
        r"optimizer step must be in",
    ),
    (
        "load_state_dict/m dtype",
        lambda e: e.trainer.load_state_dict(
            _state(e, lambda s: s["optimizer"].update(m=array.array("d", [0.0] * 195)))
        ),
        TypeError,
        r"optimizer m must be float32",
    ),
    (
        "load_state_dict/v negative",
        lambda e: e.trainer.load_state_dict(
            _state(e, lambda s: s["optimizer"].update(v=A([-1.0] * 195)))
        ),
        ValueError,
        r"optimizer v \(second moments\) must be >= 0",
    ),
    (
        "load_state_dict/weights NaN",
        lambda e: e.trainer.load_state_dict(
            _state(e, lambda s: s["weights"].update(bias1=A([NAN] * 16)))
        ),
        ValueError,
        r"bias1 must be finite",
    ),
    (
        "load_state_dict/mode",
        lambda e: e.trainer.load_state_dict(
            _state(
                e,
                lambda s: s.update(
                    numeric_mode="fast" if s["numeric_mode"] == "identical" else "identical"
                ),
            )
        ),
        ValueError,
        r"saved in numeric mode",
    ),
    (
        "save_checkpoint/folder missing",
        lambda e: e.trainer.save_checkpoint(os.path.join(e.tmp, "no", "ck")),
        FileNotFoundError,
        r"no",
    ),
    (
        "save_checkpoint/path is folder",
        lambda e: e.trainer.save_checkpoint(e.tmp),
        ValueError,
        r"checkpoint: '.*' is a folder, not a regular file",
    ),
    (
        "save_checkpoint/path is /dev/null",
        lambda e: e.trainer.save_checkpoint("/dev/null"),
        ValueError,
        r"checkpoint: '/dev/null' is a character device, not a regular file",
    ),
    (
        "save_checkpoint/path empty",
        lambda e: e.trainer.save_checkpoint(""),
        ValueError,
        r"checkpoint: the path is empty",
    ),
    (
        "from_checkpoint/folder",
        lambda e: ml.SmallMLPTrainer.from_checkpoint(e.tmp),
        ValueError,
        r"is a folder, not a regular file",
    ),
    (
        "from_checkpoint/device",
        lambda e: ml.SmallMLPTrainer.from_checkpoint("/dev/zero"),
        ValueError,
        r"is a character device",
    ),
    (
        "from_checkpoint/flag type",
        lambda e: ml.SmallMLPTrainer.from_checkpoint(None),
        TypeError,
        r"checkpoint: path must be a str, bytes or os.PathLike, got NoneType",
    ),
    (
        "save_checkpoint/path type",
        lambda e: e.trainer.save_checkpoint(3.5),
        TypeError,
        r"checkpoint: path must be a str, bytes or os.PathLike, got float",
    ),
    # -- optimizers
    ("AdamW/params empty", lambda e: optim.AdamW([]), ValueError, r"params is an empty list"),
    (
        "AdamW/params list",
        lambda e: optim.AdamW([[0.0, 1.0]]),
        TypeError,
        r"params\[0\] must be a float32 buffer",
    ),
    (
        "AdamW/params float64",
        lambda e: optim.AdamW([array.array("d", [0.0])]),
        TypeError,
        r"params\[0\] must be float32",
    ),
    (
        "AdamW/params read-only",
        lambda e: optim.AdamW([readonly(3)]),
        ValueError,
        r"params\[0\] is read-only",
    ),
    (
        "AdamW/params aliasing",
        lambda e: optim.AdamW([e.params[0], e.params[0]]),
        ValueError,
        r"params\[0\] and params\[1\] share memory",
    ),
    (
        "AdamW/lr negative",
        lambda e: optim.AdamW(e.params, lr=-1e-3),
        ValueError,
        r"Invalid learning rate",
    ),
    ("AdamW/lr NaN", lambda e: optim.AdamW(e.params, lr=NAN), ValueError, r"Invalid learning rate"),
    (
        "AdamW/lr str",
        lambda e: optim.AdamW(e.params, lr="1"),
        TypeError,
        r"learning rate must be a real number",
    ),
    (
        "AdamW/beta1 one",
        lambda e: optim.AdamW(e.params, betas=(1.0, 0.9)),
        ValueError,
        r"Invalid beta parameter at index 0",
    ),
    (
        "AdamW/eps zero",
        lambda e: optim.AdamW(e.params, eps=0.0),
        ValueError,
        r"Invalid epsilon value",
    ),
    (
        "AdamW/eps underflow",
        lambda e: optim.AdamW(e.params, eps=1e-50),
        ValueError,
        r"Invalid epsilon value.*rounds to 0.0",
    ),
    (
        "AdamW/foreach",
        lambda e: optim.AdamW(e.params, foreach=True),
        TypeError,
        r"'foreach' is not supported",
    ),
    (
        "AdamW/accumulation",
        lambda e: optim.AdamW(e.params, accumulation_steps=3),
        ValueError,
        r"Invalid accumulation_steps",
    ),
    (
        "SGD/momentum negative",
        lambda e: optim.SGD(e.params, momentum=-0.5),
        ValueError,
        r"Invalid momentum value",
    ),
    (
        "SGD/nesterov",
        lambda e: optim.SGD(e.params, nesterov=True),
        ValueError,
        r"Nesterov momentum requires",
    ),
    (
        "Adam/weight_decay Inf",
        lambda e: optim.Adam(e.params, weight_decay=INF),
        ValueError,
        r"Invalid weight_decay value",
    ),
    ("step/count", lambda e: e.opt.step(e.grads[:1]), ValueError, r"grads: expected 2 gradients"),
    (
        "step/dtype",
        lambda e: e.opt.step([e.grads[0], array.array("d", [0.0] * 4)]),
        TypeError,
        r"grads\[1\] must be float32",
    ),
    (
        "step/shape",
        lambda e: e.opt.step([e.grads[0], zeros32(2, 2)]),
        ValueError,
        r"grads\[1\] has shape \(2, 2\), but params\[1\] has shape \(4,\)",
    ),
    (
        "step/NaN",
        lambda e: e.opt.step([e.grads[0], A([0, 0, NAN, 0])]),
        ValueError,
        r"gradient 1 is not finite",
    ),
    (
        "step/Inf",
        lambda e: e.opt.step([A([INF] * 6, 2, 3), e.grads[1]]),
        ValueError,
        r"gradient 0 is not finite",
    ),
    (
        "step/max_norm negative",
        lambda e: e.opt.step(e.grads, max_norm=-1.0),
        ValueError,
        r"Invalid max_norm",
    ),
    (
        "step/read-only with clipping",
        lambda e: e.opt.step([readonly(2, 3), readonly(4)], max_norm=1.0),
        ValueError,
        r"grads\[0\] is read-only",
    ),
    ("step/grads type", lambda e: e.opt.step(5), TypeError, r"grads"),
    (
        "step_accumulated/count",
        lambda e: e.opt.step_accumulated([e.grads], 4),
        ValueError,
        r"expected accumulation_steps=2 gradient lists",
    ),
    (
        "step_accumulated/tokens",
        lambda e: e.opt.step_accumulated([e.grads, e.grads], 3),
        ValueError,
        r"Invalid tokens",
    ),
    (
        "step_accumulated/dict",
        lambda e: e.opt.step_accumulated({"a": e.grads}, 4),
        TypeError,
        r"microbatch_grads must be a list",
    ),
    (
        "step_accumulated/NaN",
        lambda e: e.opt.step_accumulated([e.grads, [A([NAN] * 6, 2, 3), e.grads[1]]], 4),
        ValueError,
        r"not finite",
    ),
    (
        "optim.load_state_dict/type",
        lambda e: e.opt.load_state_dict([]),
        TypeError,
        r"state must be a dict",
    ),
    (
        "optim.load_state_dict/t",
        lambda e: e.opt.load_state_dict({**e.opt.state_dict(), "t": -1}),
        ValueError,
        r"state\['t'\] must be an int in \[0, ",
    ),
    (
        "optim.load_state_dict/length",
        lambda e: e.opt.load_state_dict({**e.opt.state_dict(), "exp_avg": [0.0] * 9}),
        ValueError,
        r"state\['exp_avg'\] holds 9 values, expected 10",
    ),
    (
        "optim.load_state_dict/NaN",
        lambda e: e.opt.load_state_dict({**e.opt.state_dict(), "exp_avg": [NAN] * 10}),
        ValueError,
        r"state\['exp_avg'\] holds a NaN",
    ),
    (
        "optim.load_state_dict/negative v",
        lambda e: e.opt.load_state_dict({**e.opt.state_dict(), "exp_avg_sq": [-1.0] * 10}),
        ValueError,
        r"exp_avg_sq'\] holds a negative value",
    ),
    (
        "optim.load_state_dict/flags",
        lambda e: e.opt.load_state_dict({**e.opt.state_dict(), "buf_initialized": [2, 0]}),
        ValueError,
        r"buf_initialized'\] flags must be 0 or 1",
    ),
    (
        "zero_grad/read-only",
        lambda e: e.opt.zero_grad([readonly(2, 3), readonly(4)]),
        ValueError,
        r"grads\[0\] is read-only",
    ),
    (
        "clip_grad_norm_/max_norm",
        lambda e: ml.clip_grad_norm_(e.grads, -1.0),
        ValueError,
        r"Invalid max_norm",
    ),
    (
        "clip_grad_norm_/max_norm zero",
        lambda e: ml.clip_grad_norm_(e.grads, 0.0),
        ValueError,
        r"Invalid max_norm: 0.0; expected a finite value in \(0",
    ),
    (
        "step/max_norm zero",
        lambda e: e.opt.step(e.grads, max_norm=0),
        ValueError,
        r"Invalid max_norm: 0; expected a finite value in \(0",
    ),
    (
        "clip_grad_norm_/norm_type",
        lambda e: ml.clip_grad_norm_(e.grads, 1.0, norm_type=0.5),
        ValueError,
        r"Invalid norm_type: 0.5; expected a p-norm order p >= 1",
    ),
    (
        "clip_grad_norm_/norm_type NaN",
        lambda e: ml.clip_grad_norm_(e.grads, 1.0, norm_type=NAN),
        ValueError,
        r"Invalid norm_type: nan",
    ),
    (
        "clip_grad_norm_/norm_type str",
        lambda e: ml.clip_grad_norm_(e.grads, 1.0, norm_type="inf"),
        TypeError,
        r"norm_type must be a real number",
    ),
    (
        "clip_grad_norm_/read-only",
        lambda e: ml.clip_grad_norm_([readonly(3)], 1.0),
        ValueError,
        r"grads\[0\] is read-only",
    ),
    (
        "clip_grad_norm_/NaN",
        lambda e: ml.clip_grad_norm_([e.grads[0], A([NAN] * 4)], 1e-3),
        ValueError,
        r"not finite|non-finite|NaN",
    ),
    (
        "clip_grad_norm_/flag",
        lambda e: ml.clip_grad_norm_(e.grads, 1.0, error_if_nonfinite=1),
        TypeError,
        r"error_if_nonfinite must be a bool",
    ),
    # -- schedules
    (
        "ConstantLR/peak_lr negative",
        lambda e: schedules.ConstantLR(-1.0),
        ValueError,
        r"peak_lr must be finite and >= 0",
    ),
    (
        "ConstantLR/peak_lr NaN",
        lambda e: schedules.ConstantLR(NAN),
        ValueError,
        r"peak_lr must be finite",
    ),
    (
        "ConstantLR/peak_lr huge",
        lambda e: schedules.ConstantLR(1e39),
        ValueError,
        r"peak_lr 1e\+39 overflows float32",
    ),
    (
        "ConstantLR/peak_lr str",
        lambda e: schedules.ConstantLR("1"),
        TypeError,
        r"peak_lr must be a real number",
    ),
    (
        "WarmupLinearLR/total missing",
        lambda e: schedules.WarmupLinearLR(1e-3),
        ValueError,
        r"needs total_steps",
    ),
    (
        "WarmupCosineLR/warmup negative",
        lambda e: schedules.WarmupCosineLR(1e-3, warmup_steps=-1, total_steps=5),
        ValueError,
        r"warmup_steps must be >= 0",
    ),
    (
        "WarmupCosineLR/total float",
        lambda e: schedules.WarmupCosineLR(1e-3, total_steps=5.0),
        TypeError,
        r"total_steps must be an int",
    ),
    (
        "WarmupCosineLR/min_lr",
        lambda e: schedules.WarmupCosineLR(1e-3, total_steps=5, min_lr=1.0),
        ValueError,
        r"min_lr .* must not exceed peak_lr",
    ),
    (
        "lr_at/zero",
        lambda e: schedules.ConstantLR(1e-3).lr_at(0),
        ValueError,
        r"lr_at\(t\): t is one-based",
    ),
    (
        "lr_at/float",
        lambda e: schedules.ConstantLR(1e-3).lr_at(1.0),
        TypeError,
        r"lr_at\(t\): t must be an int",
    ),
    # -- Array
    ("Array/dtype", lambda e: ml.Array((1,), "<f2"), TypeError, r"dtype must be one of"),
    ("Array.from_list/dtype", lambda e: ml.Array.from_list([1.0], "<f2"), TypeError, r"dtype"),
    (
        "Array.from_list/ragged",
        lambda e: ml.Array.from_list([[1.0, 2.0], [3.0]]),
        ValueError,
        r"nested lists must be rectangular",
    ),
    (
        "Array/values",
        lambda e: ml.Array([1.5, 2.0]),
        TypeError,
        r"shape must be an int or a sequence of ints, got \[1\.5, 2\.0\]; .*Array\.from_list",
    ),
    (
        "Array/shape negative",
        lambda e: ml.Array((2, -1)),
        ValueError,
        r"shape must hold non-negative ints",
    ),
    (
        "Array/values type",
        lambda e: ml.Array(object()),
        TypeError,
        r"shape must be an int or a sequence of ints, got <object.*Array\.from_list",
    ),
    (
        "Array.from_buffer/values type",
        lambda e: ml.Array.from_buffer(object()),
        TypeError,
        r"buffer-protocol or DLPack object",
    ),
    (
        "Array.take/index",
        lambda e: e.X.take([0, 4]),
        IndexError,
        r"indices\[1\] = 4 is out of bounds for axis 0 with size 4",
    ),
    (
        "Array.take/axis",
        lambda e: e.X.take([0], axis=2),
        ValueError,
        r"axis must be in \[-2, 2\)",
    ),
    (
        "Array.take/float index",
        lambda e: e.X.take([0.5]),
        TypeError,
        r"indices must be ints, got float at indices\[0\]",
    ),
    ("Array/reshape", lambda e: e.X.reshape(5, 5), ValueError, r"cannot reshape size 32"),
    ("Array/index", lambda e: e.X[4], IndexError, r"index 4 is out of bounds for axis 0"),
    ("Array/index type", lambda e: e.X[1.0], TypeError, r"Array indices must be ints"),
    (
        "Array/from_buffer strided",
        lambda e: ml.Array.from_buffer(memoryview(array.array("f", [0.0] * 4))[::2]),
        ValueError,
        r"C-contiguous",
    ),
    # -- matmul
    (
        "matmul/a list",
        lambda e: ml.matmul([[1.0]], e.logits),
        TypeError,
        r"^a must be a float32 buffer",
    ),
    (
        "matmul/b float64",
        lambda e: ml.matmul(e.logits, array.array("d", [0.0] * 3)),
        TypeError,
        r"^b must be",
    ),
    (
        "matmul/a ndim",
        lambda e: ml.matmul(zeros32(3), e.logits),
        ValueError,
        r"^a must have 2 dimensions",
    ),
    (
        "matmul/shapes",
        lambda e: ml.matmul(e.logits, e.logits),
        ValueError,
        r"contracted dimensions disagree",
    ),
    (
        "matmul/flag",
        lambda e: ml.matmul(e.logits, e.logits, transpose_b=1),
        TypeError,
        r"transpose_b must be True or False",
    ),
    (
        "matmul/NaN",
        lambda e: ml.matmul(A([NAN, 0, 0], 1, 3), e.logits, transpose_b=True),
        RuntimeError,
        r"not finite",
    ),
    # -- cross_entropy
    (
        "cross_entropy/logits float64",
        lambda e: ml.cross_entropy(array.array("d", [0.0] * 3), e.targets),
        TypeError,
        r"logits",
    ),
    (
        "cross_entropy/logits ndim",
        lambda e: ml.cross_entropy(zeros32(3), e.targets),
        ValueError,
        r"logits must have 2 dimensions",
    ),
    (
        "cross_entropy/logits empty",
        lambda e: ml.cross_entropy(zeros32(0, 3), A([], dtype="<i4")),
        ValueError,
        r"logits must have at least one row",
    ),
    (
        "cross_entropy/targets shape",
        lambda e: ml.cross_entropy(e.logits, A([0], dtype="<i4")),
        ValueError,
        r"targets must have shape \(2,\)",
    ),
    (
        "cross_entropy/targets range",
        lambda e: ml.cross_entropy(e.logits, A([0, 3], dtype="<i4")),
        ValueError,
        r"target",
    ),
    (
        "cross_entropy/targets float",
        lambda e: ml.cross_entropy(e.logits, A([0.0, 1.0])),
        TypeError,
        r"targets",
    ),
    (
        "cross_entropy/reduction",
        lambda e: ml.cross_entropy(e.logits, e.targets, reduction="avg"),
        ValueError,
        r"reduction must be 'mean', 'sum' or 'none'",
    ),
    (
        "cross_entropy/label_smoothing",
        lambda e: ml.cross_entropy(e.logits, e.targets, label_smoothing=1.5),
        ValueError,
        r"label_smoothing must be in \[0, 1\]",
    ),
    (
        "cross_entropy/label_smoothing NaN",
        lambda e: ml.cross_entropy(e.logits, e.targets, label_smoothing=NAN),
        ValueError,
        r"label_smoothing must be in",
    ),
    (
        "cross_entropy/ignore_index",
        lambda e: ml.cross_entropy(e.logits, e.targets, ignore_index="x"),
        TypeError,
        r"ignore_index must be an int",
    ),
    (
        "cross_entropy/all ignored",
        lambda e: ml.cross_entropy(e.logits, A([-100, -100], dtype="<i4")),
        ValueError,
        r"ignore",
    ),
    (
        "cross_entropy/-inf target logit",
        lambda e: ml.cross_entropy(A([-INF, 0, 0], 1, 3), A([0], dtype="<i4")),
        RuntimeError,
        r"not finite",
    ),
]

CLI_ROWS = [
    (
        "cli/steps zero",
        ["train", "--steps", "0"],
        r"--steps: expected an integer in \[1, 2\*\*31\), got 0",
    ),
    ("cli/steps text", ["train", "--steps", "ten"], r"--steps: expected an integer .* got 'ten'"),
    (
        "cli/batch huge",
        ["train", "--batch-size", "257"],
        r"--batch-size: expected an integer in \[1, 256\], got 257",
    ),
    ("cli/batch empty", ["train", "--batch-size", ""], r"--batch-size: expected an integer"),
    ("cli/lr NaN", ["train", "--lr", "nan"], r"--lr: expected a finite number > 0, got 'nan'"),
    ("cli/lr negative", ["train", "--lr", "-1"], r"--lr: expected a finite number > 0"),
    ("cli/lr huge", ["train", "--lr", "1e39"], r"--lr: expected a finite number > 0"),
    (
        "cli/weight decay Inf",
        ["train", "--weight-decay", "inf"],
        r"--weight-decay: expected a finite number >= 0",
    ),
    (
        "cli/seed negative",
        ["train", "--seed", "-1"],
        r"--seed: expected an integer in \[0, 2\*\*64\)",
    ),
    (
        "cli/checkpoint-every zero",
        ["train", "--checkpoint-every", "0"],
        r"--checkpoint-every: expected an integer >= 1",
    ),
    ("cli/mode", ["train", "--mode", "exact"], r"--mode: invalid choice: 'exact'"),
    (
        "cli/resume missing",
        ["train", "--resume", "--checkpoint", "absent.ckpt"],
        r"--resume: no checkpoint at absent.ckpt",
    ),
    (
        "cli/label-column alone",
        ["train", "--label-column", "x"],
        r"--label-column applies only with --data",
    ),
    ("cli/verify missing", ["verify", "absent.ckpt"], r"verify: no file at absent.ckpt"),
    ("cli/verify folder", ["verify", "."], r"verify: no file at \."),
    ("cli/unknown command", ["fly"], r"invalid choice: 'fly'"),
    # Round 2 (issue 14, item 3 and 9): these passed the argument checks and then raised.
    (
        "cli/lr rounds to 0",
        ["train", "--lr", "1e-50"],
        r"--lr: expected a finite number > 0 in float32, got '1e-50' \(it rounds to 0\)",
    ),
    (
        "cli/checkpoint folder",
        ["train", "--checkpoint", "."],
        r"--checkpoint: '\.' is a folder, not a regular file",
    ),
    ("cli/checkpoint empty", ["train", "--checkpoint", ""], r"--checkpoint: the path is empty"),
    (
        "cli/checkpoint no folder",
        ["train", "--checkpoint", "nodir/x.ckpt"],
        r"--checkpoint nodir/x.ckpt: the folder .*nodir does not exist",
    ),
    (
        "cli/checkpoint in /proc",
        ["train", "--checkpoint", "/proc/x.ckpt"],
        r"--checkpoint /proc/x.ckpt: (cannot write in its folder|the folder /proc is not writable)",
    ),
    (
        "cli/checkpoint /dev/null",
        ["train", "--checkpoint", "/dev/null"],
        r"--checkpoint: '/dev/null' is a character device, not a regular file",
    ),
    (
        "cli/checkpoint FIFO",
        ["train", "--checkpoint", "p.ckpt"],
        r"--checkpoint: 'p.ckpt' is a FIFO",
        lambda d: os.mkfifo(d / "p.ckpt"),
    ),
    (
        "cli/history FIFO",
        ["train", "--checkpoint", "h.ckpt"],
        r"history: 'h.ckpt.history.jsonl' is a FIFO",
        lambda d: os.mkfifo(d / "h.ckpt.history.jsonl"),
    ),
    (
        "cli/history folder",
        ["train", "--checkpoint", "h.ckpt"],
        r"history: 'h.ckpt.history.jsonl' is a folder",
        lambda d: os.mkdir(d / "h.ckpt.history.jsonl"),
    ),
    (
        "cli/checkpoint link to FIFO",
        ["train", "--checkpoint", "l.ckpt"],
        r"--checkpoint: 'l.ckpt' is a FIFO",
        lambda d: (os.mkfifo(d / "p"), os.symlink("p", d / "l.ckpt")),
    ),
    (
        "cli/plot FIFO",
        ["train", "--plot", "p.png"],
        r"--plot: 'p.png' is a FIFO",
        lambda d: os.mkfifo(d / "p.png"),
    ),
    ("cli/plot folder", ["train", "--plot", "."], r"--plot: '\.' is a folder"),
    (
        "cli/plot no folder",
        ["train", "--plot", "no/p.png"],
        r"--plot no/p.png: the folder .*no does not exist",
    ),
    (
        "cli/data /dev/zero",
        ["train", "--data", "/dev/zero"],
        r"--data /dev/zero is a character device, not a regular file",
    ),
    (
        "cli/data FIFO",
        ["train", "--data", "d.csv"],
        r"--data d.csv is a FIFO, not a regular file",
        lambda d: os.mkfifo(d / "d.csv"),
    ),
    ("cli/data folder", ["train", "--data", "."], r"--data \. is a folder, not a regular file"),
    (
        "cli/data missing, not UTF-8",
        ["train", "--data", os.fsdecode(b"\xff.csv")],
        r"cannot read --data \\xff.csv",
    ),
    (
        "cli/checkpoint in use",
        ["train", "--checkpoint", "busy.ckpt"],
        r"--checkpoint busy.ckpt is in use by another `mojolearn train` run",
        "lock",
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input(row, tmp_path):
    name, call, exc, pattern = row
    e = Env()
    e.tmp = str(tmp_path)
    before = e.snapshot()
    listing = sorted(os.listdir(tmp_path))
    with pytest.raises(exc) as info:
        call(e)
    import re

    assert re.search(pattern, str(info.value)), f"{name}: message {info.value!s:.300}"
    assert e.snapshot() == before, f"{name}: something changed"
    assert sorted(os.listdir(tmp_path)) == listing, f"{name}: files changed"


@pytest.mark.parametrize("row", CLI_ROWS, ids=[r[0] for r in CLI_ROWS])
def test_bad_cli_input(row, tmp_path, monkeypatch, capsys):
    name, argv, pattern, *setup = row
    monkeypatch.chdir(tmp_path)
    lock = None
    if setup == ["lock"]:  # another run holds the checkpoint
        lock = _files.RunLock(tmp_path / "busy.ckpt")
    elif setup:
        setup[0](tmp_path)
    listing = sorted(os.listdir(tmp_path))
    try:
        code = cli.main(argv)
    except SystemExit as exit_:  # argparse refusals
        code = exit_.code
    finally:
        if lock is not None:
            lock.release()
    err = capsys.readouterr().err
    import re

    assert code == 2, f"{name}: exit {code}"
    assert re.search(pattern, err), f"{name}: stderr {err[-300:]}"
    assert err.count("\n") == 1 and "Traceback" not in err, f"{name}: not one line: {err!r}"
    assert sorted(os.listdir(tmp_path)) == listing or lock, f"{name}: files written"
    assert not lock or os.listdir(tmp_path) == [], f"{name}: files written"


def test_bad_cli_verify_invalid_file(tmp_path, capsys):
    path = tmp_path / "bad.ckpt"
    path.write_bytes(b"{}\n")
    assert cli.main(["verify", str(path)]) == 1
    assert "INVALID: checkpoint: envelope fields must be" in capsys.readouterr().out
    assert path.read_bytes() == b"{}\n"


def test_record_table():
    paths = [
        r
        for r in CLI_ROWS
        if r[0].startswith(("cli/checkpoint", "cli/history", "cli/plot", "cli/data"))
    ]
    record(
        "bad_inputs",
        rows=len(ROWS),
        cli_rows=len(CLI_ROWS) + 1,
        cli_path_rows=len(paths),
        entry_points=len({r[0].split("/")[0] for r in ROWS + CLI_ROWS}),
    )


def test_grads_aliasing_params_refused():
    params = [A([0.5] * 4)]
    opt = optim.AdamW(params)
    with pytest.raises(ValueError, match="share memory|alias"):
        opt.step(params, max_norm=1e-3)
