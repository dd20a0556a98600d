"""torch tensors as inputs everywhere an input buffer is (issue 17): X, targets, gradients,
`matmul`, `cross_entropy`, `clip_grad_norm_` operands, and optimizer parameters updated in
place; the same bits as the same values in Arrays. `MLPTrainer.from_torch` / `to_torch` round
trips. Skipped with a printed reason where torch is not installed."""

import random

import mojolearn as ml
import pytest
from mojolearn._mlp import spec as _spec

torch = pytest.importorskip("torch")


def _arrays(X, y):
    return ml.Array.from_list(X.tolist(), "<f4"), ml.Array.from_list(y.tolist(), "<i4")


@pytest.mark.parametrize(
    "make",
    [
        lambda: ml.SmallMLPTrainer(*_spec.init_small_mlp(3), data_schedule={"a": 1}),
        lambda: ml.MLPTrainer([8, 12, 12, 3], seed=3, data_schedule={"a": 1}),
    ],
)
def test_torch_batches_give_the_bits_of_array_batches(seed, make):
    g = torch.Generator().manual_seed(seed % (1 << 63))
    a, b = make(), make()
    for _ in range(4):
        X = torch.rand(7, 8, generator=g) * 2 - 1
        y = torch.randint(0, 3, (7,), generator=g)
        ra = a.train_step(X, y, return_input_grad=True)
        rb = b.train_step(*_arrays(X, y), return_input_grad=True)
        assert ra["loss"] == rb["loss"] and ra["input_grad"].tobytes() == rb["input_grad"].tobytes()
    stacked = torch.rand(14, 8, generator=g)
    labels = torch.randint(0, 3, (14,), generator=g, dtype=torch.int32)
    a.train_steps(stacked, labels, 2)
    b.train_steps(*_arrays(stacked, labels), 2)
    loss_a, grads_a = a.loss_and_grads(X, y)
    a.apply_gradients([torch.from_dlpack(gr) for gr in grads_a])
    loss_b, grads_b = b.loss_and_grads(*_arrays(X, y))
    b.apply_gradients(grads_b)
    assert a.state_hash() == b.state_hash()
    assert a.predict_logits(X).tobytes() == b.predict_logits(_arrays(X, y)[0]).tobytes()


def test_optimizers_update_torch_parameters_in_place_with_the_bits_of_arrays(seed):
    rng = random.Random(seed)
    values = [[rng.uniform(-1, 1) for _ in range(12)], [rng.uniform(-1, 1) for _ in range(5)]]
    grads = [
        [[rng.uniform(-1, 1) for _ in range(12)], [rng.uniform(-1, 1) for _ in range(5)]]
        for _ in range(3)
    ]
    for kind in (ml.AdamW, ml.Adam, ml.SGD):
        tp = [torch.tensor(values[0]).reshape(3, 4), torch.tensor(values[1])]
        ap = [ml.Array.from_list(values[0], "<f4").reshape((3, 4)), ml.Array.from_list(values[1])]
        ot, oa = kind(tp, lr=0.05), kind(ap, lr=0.05)
        for g in grads:
            ot.step([torch.tensor(g[0]).reshape(3, 4), torch.tensor(g[1])], max_norm=1.0)
            oa.step(
                [ml.Array.from_list(g[0], "<f4").reshape((3, 4)), ml.Array.from_list(g[1])],
                max_norm=1.0,
            )
        for t_, a_ in zip(tp, ap):
            assert ml.from_dlpack(t_).tobytes() == a_.tobytes(), kind.__name__


def test_matmul_cross_entropy_and_clipping_take_torch_tensors():
    a, b = torch.rand(3, 5), torch.rand(5, 2)
    assert (
        ml.matmul(a, b).tobytes()
        == ml.matmul(*(ml.Array.from_list(t.tolist(), "<f4") for t in (a, b))).tobytes()
    )
    logits, y = torch.randn(4, 6), torch.tensor([0, 5, 2, 1])
    assert ml.cross_entropy(logits, y) == ml.cross_entropy(
        ml.Array.from_list(logits.tolist(), "<f4"), ml.Array.from_list(y.tolist(), "<i4")
    )
    g = [torch.full((4,), 3.0)]
    assert ml.clip_grad_norm_(g, 1.0) == 6.0
    assert torch.allclose(g[0], torch.full((4,), 0.5), atol=1e-6)  # scaled in place


def test_refusals_name_the_tensor_problem():
    # A leaf that requires grad (a model's parameter) is updated through p.detach(); the result
    # of an operation is not a parameter (tests/test_optim_torch.py trains a model).
    with pytest.raises(ValueError, match=r"params\[0\]: can't optimize a non-leaf tensor"):
        ml.AdamW([torch.ones(3, requires_grad=True) + 1])
    with pytest.raises(
        TypeError,
        match=r"grads\[0\]: from_dlpack: Tensor refused to export .*require gradient.*p.detach",
    ):
        ml.AdamW([torch.ones(3, requires_grad=True)]).step([torch.ones(3, requires_grad=True)])
    with pytest.raises(TypeError, match=r"X must be float32, got float64"):
        ml.SmallMLPTrainer(*ml.init_small_mlp(0), data_schedule={"a": 1}).train_step(
            torch.ones(2, 4, dtype=torch.float64), torch.tensor([0, 1])
        )
    # MLPTrainer rounds a float64 tensor once to float32, as torch's .float() does.
    x64 = torch.randn(2, 4, dtype=torch.float64)
    a, b = (ml.MLPTrainer([4, 2], data_schedule={"a": 1}) for _ in range(2))
    got = a.train_step(x64, torch.tensor([0, 1]))["loss"]
    assert got == b.train_step(x64.float(), torch.tensor([0, 1]))["loss"]
    # A strided tensor is copied into C order, as a strided NumPy array is (issue 30 row 4).
    a = torch.arange(12.0).reshape(4, 3)
    assert ml.matmul(a.t(), torch.ones(4, 2)).tobytes() == (
        ml.matmul(a.t().contiguous(), torch.ones(4, 2)).tobytes()
    )


def test_from_torch_and_to_torch_round_trip():
    torch.manual_seed(1)
    seq = torch.nn.Sequential(
        torch.nn.Linear(6, 10),
        torch.nn.ReLU(),
        torch.nn.Linear(10, 7),
        torch.nn.ReLU(),
        torch.nn.Linear(7, 3),
    )
    t = ml.MLPTrainer.from_torch(seq, lr=0.01)
    assert t.layer_sizes == [6, 10, 7, 3] and t.data_schedule == {"source": "torch"}
    X = torch.randn(9, 6)
    ours = torch.from_dlpack(t.predict_logits(X))
    assert torch.allclose(ours, seq(X), atol=1e-5)  # torch's own summation order differs
    back = t.to_torch()
    assert torch.equal(back(X), seq(X))  # the very weights: the same torch computation
    for p, q in zip(back.parameters(), seq.parameters()):
        assert torch.equal(p, q) and p.data_ptr() != q.data_ptr()  # copied, not shared
    t.train_step(X, torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2]))
    trained = t.to_torch()
    assert torch.allclose(torch.from_dlpack(t.predict_logits(X)), trained(X), atol=1e-5)
    assert not torch.equal(trained[0].weight, seq[0].weight)


@pytest.mark.parametrize(
    "module,message",
    [
        (lambda: torch.nn.Linear(3, 2), r"must be a torch.nn.Sequential"),
        (
            lambda: torch.nn.Sequential(
                torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)
            ),
            r"module\[1\] must be a ReLU",
        ),
        (
            lambda: torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()),
            r"must end with a Linear layer",
        ),
        (
            lambda: torch.nn.Sequential(torch.nn.Linear(3, 4, bias=False)),
            r"module\[0\] has no bias",
        ),
        (
            lambda: torch.nn.Sequential(
                torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(5, 2)
            ),
            r"takes 5 inputs but the layer before gives 4",
        ),
        (
            lambda: torch.nn.Sequential(torch.nn.Linear(3, 4).double()),
            r"weight1 must be float32, got float64",
        ),
    ],
)
def test_from_torch_refusals(module, message):
    with pytest.raises((TypeError, ValueError), match=message):
        ml.MLPTrainer.from_torch(module())
