"""`mojolearn.nn` layer descriptions and a model's spec (issue 35): values that check their
arguments by name, print as code, record as JSON, and give every layer's shapes, the flat
parameter layout under torch's `state_dict` names and the seeded initialization."""

import copy
import json
import math
import pickle
import random

import pytest
from mojolearn import nn
from mojolearn._mlp.spec import LayerSizes
from mojolearn._model.spec import MAX_PARAMS, ModelSpec


def _every_layer():
    return [
        nn.Linear(3, 4),
        nn.Linear(3, 4, bias=False),
        nn.ReLU(),
        nn.GELU(),
        nn.GELU(approximate="tanh"),
        nn.Tanh(),
        nn.Sigmoid(),
        nn.LayerNorm(4),
        nn.LayerNorm(4, eps=1e-6, elementwise_affine=False),
        nn.Dropout(),
        nn.Dropout(0.1),
        nn.Flatten(),
        nn.Sequential(nn.Linear(3, 4), nn.ReLU()),
        nn.Residual(nn.LayerNorm(4), nn.Linear(4, 4)),
    ]


@pytest.mark.parametrize("layer", _every_layer(), ids=repr)
def test_a_description_is_a_value(layer):
    again = nn.from_json(json.loads(json.dumps(layer.to_json())))
    assert again == layer and hash(again) == hash(layer) and again is not layer
    assert eval(repr(layer), vars(nn)) == layer  # prints as the code that makes it
    assert pickle.loads(pickle.dumps(layer)) == layer and copy.deepcopy(layer) == layer
    with pytest.raises(AttributeError, match="immutable"):
        layer.p = 0.3
    with pytest.raises(AttributeError):
        del layer.layers


def test_descriptions_differ_by_every_argument():
    layers = _every_layer()
    assert len(set(layers)) == len(layers)
    assert nn.Linear(3, 4) != nn.Linear(4, 3) and nn.Dropout(0.1) != nn.Dropout(0.2)
    assert nn.Sequential(nn.ReLU()) != nn.Residual(nn.ReLU())


def test_reprs_read_as_the_issue_writes_them():
    assert repr(nn.Linear(64, 10)) == "Linear(64, 10)"
    assert repr(nn.Linear(64, 10, bias=False)) == "Linear(64, 10, bias=False)"
    assert repr(nn.GELU(approximate="tanh")) == "GELU(approximate='tanh')"
    assert repr(nn.LayerNorm(8)) == "LayerNorm(8)"
    assert repr(nn.Dropout(0.1)) == "Dropout(p=0.1)"
    assert repr(nn.Sequential(nn.ReLU(), nn.Flatten())) == "Sequential(ReLU(), Flatten())"


@pytest.mark.parametrize(
    "make, error, words",
    [
        (lambda: nn.Linear(-1, 4), ValueError, "in_features"),
        (lambda: nn.Linear(3, 0), ValueError, "out_features"),
        (lambda: nn.Linear(3.0, 4), TypeError, "in_features"),
        (lambda: nn.Linear(True, 4), TypeError, "in_features"),
        (lambda: nn.Linear(3, 4, bias=1), TypeError, "bias"),
        (lambda: nn.Linear(3, 1 << 21), ValueError, "out_features"),
        (lambda: nn.Dropout(1.0), ValueError, "p must be in \\[0, 1\\)"),
        (lambda: nn.Dropout(-0.1), ValueError, "p must be"),
        (lambda: nn.Dropout(float("nan")), ValueError, "p must be"),
        (lambda: nn.Dropout("0.1"), TypeError, "p must be a float"),
        (lambda: nn.GELU("erf"), ValueError, "approximate"),
        (lambda: nn.LayerNorm(0), ValueError, "normalized_shape"),
        (lambda: nn.LayerNorm((4,)), TypeError, "normalized_shape"),
        (lambda: nn.LayerNorm(4, eps=0.0), ValueError, "eps"),
        (lambda: nn.LayerNorm(4, eps=float("inf")), ValueError, "eps"),
        (lambda: nn.LayerNorm(4, elementwise_affine="yes"), TypeError, "elementwise_affine"),
        (lambda: nn.Sequential(), ValueError, "at least one layer"),
        (lambda: nn.Sequential(nn.ReLU(), "relu"), TypeError, "layer 1 must be"),
        (lambda: nn.Residual(nn.Linear(4, 8)), ValueError, "keep its input's shape"),
        (
            lambda: nn.Residual(nn.Linear(4, 4), nn.LayerNorm(8)),
            ValueError,
            "layer 1 LayerNorm.8. expects a last axis of 8, gets 4",
        ),
    ],
)
def test_bad_arguments_are_refused_by_name(make, error, words):
    with pytest.raises(error, match=words):
        make()


def test_nesting_and_size_are_bounded():
    deep = nn.ReLU()
    for _ in range(8):
        deep = nn.Sequential(deep)
    with pytest.raises(ValueError, match="8 deep"):
        nn.Sequential(deep)
    with pytest.raises(ValueError, match="1024 layers"):
        nn.Sequential(*[nn.ReLU()] * 1024)


def _spec(layers, shape=(10,), loss="cross_entropy"):
    return ModelSpec(nn.Sequential(*layers), shape, loss)


def test_shapes_are_checked_with_the_layers_index():
    with pytest.raises(
        ValueError, match=r"^layer 3 Linear\(64, 10\) expects 64 input features, gets 128"
    ):
        _spec([nn.Linear(10, 128), nn.ReLU(), nn.LayerNorm(128), nn.Linear(64, 10)])
    with pytest.raises(ValueError, match=r"^layer 2\.0 LayerNorm\(8\) normalizes a last axis of 8"):
        _spec([nn.Linear(10, 16), nn.GELU(), nn.Residual(nn.LayerNorm(8), nn.Linear(8, 8))])
    with pytest.raises(ValueError, match=r"^layer 1 LayerNorm\(5\) normalizes"):
        _spec([nn.Linear(10, 4), nn.LayerNorm(5)])
    # A Residual whose layers reshape is checked against the model's shapes.
    with pytest.raises(ValueError, match=r"^layer 0 Residual\(Flatten\(\)\) must keep"):
        _spec([nn.Residual(nn.Flatten()), nn.Linear(12, 3)], shape=(3, 4))


def test_linear_acts_on_the_last_axis_of_any_rank():
    s = _spec([nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 5)], shape=(7, 8))
    assert s.output_shape == (7, 5)
    assert [step[3] for step in s.steps] == [(7, 5), (7, 16), (7, 16), (7, 5)]
    s = _spec([nn.Flatten(), nn.Linear(24, 3)], shape=(2, 3, 4))
    assert s.output_shape == (3,)


@pytest.mark.parametrize(
    "shape, loss, words",
    [
        ((10,), "hinge", "loss must be one of"),
        ((10,), None, "loss must be one of"),
        ((), "mse", "input_shape must be"),
        ((10, 0), "mse", r"input_shape\[1\] must be in"),
        ((1, 2, 3, 4, 5), "mse", "1 to 4 ints"),
        ("10", "mse", "input_shape must be"),
        ((10.0,), "mse", r"input_shape\[0\] must be an int"),
    ],
)
def test_bad_input_shapes_and_losses_are_refused(shape, loss, words):
    with pytest.raises((TypeError, ValueError), match=words):
        _spec([nn.Linear(10, 3)], shape=shape, loss=loss)


def test_a_loss_must_fit_the_output():
    with pytest.raises(ValueError, match="cross_entropy.*classes >= 2"):
        _spec([nn.Linear(10, 1)])
    with pytest.raises(ValueError, match="cross_entropy"):
        _spec([nn.Linear(10, 3)], shape=(2, 3, 10))
    assert _spec([nn.Linear(10, 1)], loss="mse").output_shape == (1,)
    assert _spec([nn.Linear(10, 3)], shape=(6, 10)).output_shape == (6, 3)  # (B, T, C)


def test_a_model_must_be_a_sequential():
    with pytest.raises(TypeError, match=r"wrap it: nn.Sequential\(layer\)"):
        ModelSpec(nn.Linear(3, 4), (3,), "mse")


def test_parameter_names_and_shapes_are_torchs():
    torch = pytest.importorskip("torch")

    class Residual(torch.nn.Sequential):
        def forward(self, x):
            return x + super().forward(x)

    model = nn.Sequential(
        nn.Linear(10, 16),
        nn.GELU(),
        nn.LayerNorm(16),
        nn.Residual(nn.LayerNorm(16), nn.Linear(16, 16, bias=False), nn.Tanh()),
        nn.Dropout(0.1),
        nn.LayerNorm(16, elementwise_affine=False),
        nn.Linear(16, 3),
    )
    reference = torch.nn.Sequential(
        torch.nn.Linear(10, 16),
        torch.nn.GELU(),
        torch.nn.LayerNorm(16),
        Residual(torch.nn.LayerNorm(16), torch.nn.Linear(16, 16, bias=False), torch.nn.Tanh()),
        torch.nn.Dropout(0.1),
        torch.nn.LayerNorm(16, elementwise_affine=False),
        torch.nn.Linear(16, 3),
    )
    s = ModelSpec(model, (10,), "cross_entropy")
    want = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    assert list(s.names) == list(want) and list(s.shapes) == list(want.values())
    assert s.total == sum(p.numel() for p in reference.parameters())
    assert s.offsets == tuple(
        sum(math.prod(sh) for sh in s.shapes[:i]) for i in range(len(s.shapes))
    )


def _flat(values):
    return [v for row in values for v in row] if isinstance(values[0], list) else values


def test_a_relu_mlp_initializes_as_mlp_trainer(seed):
    rng = random.Random(seed)
    sizes = [rng.randrange(1, 20) for _ in range(rng.randrange(1, 5))] + [rng.randrange(2, 6)]
    layers = []
    for i, o in zip(sizes, sizes[1:]):
        layers += [nn.Linear(i, o), nn.ReLU()]
    s = _spec(layers[:-1], shape=(sizes[0],))
    assert s.mlp_sizes() == sizes
    want = [_flat(a.tolist()) for a in LayerSizes(sizes).init(seed)]
    assert s.init(seed) == want


def test_init_follows_torchs_defaults_in_parameter_order(seed):
    s = _spec([nn.LayerNorm(10), nn.Linear(10, 50), nn.LayerNorm(50), nn.Linear(50, 2)])
    values = s.init(seed % (1 << 64))
    assert values[0] == [1.0] * 10 and values[1] == [0.0] * 10  # LayerNorm draws nothing
    assert values[4] == [1.0] * 50 and values[5] == [0.0] * 50
    for tensor, fan_in in ((values[2], 10), (values[3], 10), (values[6], 50), (values[7], 50)):
        bound = 1 / math.sqrt(fan_in)
        assert max(abs(v) for v in tensor) <= bound and len(set(tensor)) == len(tensor)
    # the Linear after the first LayerNorm draws what a model without that LayerNorm draws
    assert (
        _spec([nn.Linear(10, 50), nn.LayerNorm(50), nn.Linear(50, 2)]).init(seed % (1 << 64))[0]
        == values[2]
    )


def test_mlp_sizes_is_only_the_exact_mlp():
    assert _spec([nn.Linear(10, 3)]).mlp_sizes() == [10, 3]
    assert _spec([nn.Linear(10, 3)], loss="mse").mlp_sizes() is None
    assert _spec([nn.Linear(10, 4), nn.GELU(), nn.Linear(4, 3)]).mlp_sizes() is None
    assert _spec([nn.Linear(10, 3, bias=False)]).mlp_sizes() is None
    assert _spec([nn.Linear(10, 3)], shape=(2, 10)).mlp_sizes() is None


def test_a_spec_records_and_reads_back():
    s = _spec(
        [
            nn.Linear(10, 16),
            nn.GELU("tanh"),
            nn.Residual(nn.LayerNorm(16), nn.Dropout(0.25)),
            nn.Linear(16, 1),
        ],
        loss="mse",
    )
    again = ModelSpec.from_record(json.loads(json.dumps(s.record())), "load")
    assert again == s and again.names == s.names and again.total == s.total


@pytest.mark.parametrize(
    "mutate, words",
    [
        (lambda r: r.pop("loss"), "exactly input_shape, loss and model"),
        (lambda r: r.update(extra=1), "exactly input_shape, loss and model"),
        (lambda r: r.update(loss="l1"), "loss must be one of"),
        (lambda r: r.update(input_shape=[-3]), r"input_shape\[0\]"),
        (lambda r: r.update(input_shape=[11]), "expects 10 input features"),
        (lambda r: r["model"].update(layer="Conv9d"), "unknown layer 'Conv9d'"),
        (
            lambda r: r["model"]["layers"][0].update(out_features=-4),
            "layer 0: Linear: out_features",
        ),
        (lambda r: r["model"]["layers"][0].update(bias="yes"), "layer 0: Linear: bias"),
        (lambda r: r["model"]["layers"][1].update(p=2), "layer 1: Dropout: p must be"),
        (lambda r: r["model"]["layers"][0].pop("bias"), "Linear record holds exactly"),
        (lambda r: r["model"]["layers"][2]["layers"].append(7), "layer 2.1: a layer record"),
        (lambda r: r["model"].update(layers={}), "layers must be a list"),
        (lambda r: r["model"].update(layers=[]), "at least one layer"),
        (lambda r: r["model"]["layers"][0].update(in_features=1 << 30), "in_features must be"),
    ],
)
def test_a_malformed_record_is_refused_by_what_is_wrong(mutate, words):
    s = _spec([nn.Linear(10, 16), nn.Dropout(0.1), nn.Residual(nn.ReLU()), nn.Linear(16, 3)])
    record = json.loads(json.dumps(s.record()))
    mutate(record)
    with pytest.raises(ValueError, match=words):
        ModelSpec.from_record(record, "load")


def test_absurd_sizes_are_refused_before_anything_is_allocated():
    with pytest.raises(ValueError, match=r"at most 67,108,864 \(2\*\*26\)"):
        _spec([nn.Linear(1 << 14, 1 << 14)], shape=(1 << 14,), loss="mse")
    assert MAX_PARAMS == 1 << 26
