"""tools/bench_models.py's pure helpers: the transformer's floor (its matmul count), the `--cells`
filter, and the hand-written JAX forward against torch's module of the same weights."""

from __future__ import annotations

import importlib.util
import math
import pathlib

import mojolearn as ml
import pytest
from mojolearn import nn
from mojolearn._model.spec import ModelSpec

TOOL = pathlib.Path(__file__).resolve().parent.parent / "tools" / "bench_models.py"
_spec = importlib.util.spec_from_file_location("bench_models", TOOL)
assert _spec and _spec.loader
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.mark.parametrize("config", [(65, 64, 4, 4, 128), (11, 8, 2, 2, 16), (7, 5, 3, 1, 8)])
def test_gpt_macs_counts_every_linear_and_both_attention_products(config):
    vocab, block, n_layer, n_head, width = config
    spec = ModelSpec(nn.gpt(*config), (block,), "cross_entropy")
    # Every 2-D weight but the two embeddings (lookups, not products) is a Linear on `block` rows.
    linears = products(spec)
    attention = n_layer * n_head * 2 * block * block * (width // n_head)
    assert bench.gpt_macs(*config) == block * linears + attention
    without = bench.gpt_without_attention(nn.gpt(*config))
    assert len(without.layers) == len(nn.gpt(*config).layers) - n_layer
    plain = products(ModelSpec(without, (block,), "cross_entropy"))
    assert bench.gpt_macs(*config, attention=False) == block * plain
    # The step: the forward's products and their two backward ones, two FLOPs a multiply-add.
    flops = bench.gemm_flops([("gpt", *config)], 3, (block,))
    assert flops == 3 * 2 * 3 * (block * linears + attention)


def products(spec):
    """Multiply-adds per row of every Linear: each 2-D weight but the embeddings' (lookups)."""
    embeddings = ("0.weight", "1.weight")
    return sum(
        math.prod(s) for n, s in zip(spec.names, spec.shapes) if len(s) == 2 and n not in embeddings
    )


def test_the_floor_of_nanogpts_cpu_configuration_is_issue_38s():
    # Issue 38 measured the floor at 40 / 214 ms for batch 12 / 64 at ~100 GFLOP/s.
    for batch, ms in ((12, 40), (64, 214)):
        gflop = bench.gemm_flops(bench.GPT, batch, (64,)) / 1e9
        assert abs(gflop / 100 * 1e3 - ms) / ms < 0.05


def test_cells_by_index_or_model_name():
    gpt = [i for i, (name, _) in enumerate(bench.CELLS) if name == "GPT"]
    assert len(gpt) == 2
    assert bench.parse_cells("gpt") == gpt
    assert bench.parse_cells("0,GPT,0") == [0, *gpt]
    assert bench.parse_cells("M1") == [0, 1]
    for bad in ("nope", str(len(bench.CELLS))):
        with pytest.raises(SystemExit, match="--cells"):
            bench.parse_cells(bad)


def test_jax_gpt_computes_what_to_torch_computes():
    jax = pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    pytest.importorskip("numpy")
    jnp = jax.numpy
    config = (11, 8, 2, 2, 16)
    trainer = ml.Trainer(nn.gpt(*config), input_shape=(8,), seed=3)
    net = trainer.to_torch()
    ids = [[(7 * b + 3 * t + 1) % 11 for t in range(8)] for b in range(3)]
    want = net(torch.tensor(ids)).detach()
    p = {n: jnp.asarray(v.numpy()) for n, v in net.state_dict().items()}
    got = bench.jax_gpt(jax, jnp, p, jnp.asarray(ids, jnp.int32), config)
    assert got.shape == tuple(want.shape)
    assert float(abs(torch.tensor(got.tolist()) - want).max()) < 1e-4
