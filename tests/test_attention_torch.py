"""The text layers beside torch (issue 38): `to_torch` gives torch's Embedding and this
package's torch PositionEmbedding / CausalSelfAttention (nanoGPT's, with torch's causal SDPA)
under our names, computing `predict_logits`; `from_torch` reads them back; and a small GPT's
AdamW steps (lr 1e-2) from the same weights and batches stay as close to torch float64 as torch
float32 does (tests/test_model_accuracy.py's measure: the median over seeds of max |ours −
float64| / max |float64| for the weights, the outputs and the per-position losses, within 2x
of torch float32's)."""

import copy
import pickle
import statistics

import mojolearn as ml
import pytest
from mojolearn import nn

from tests.test_model_accuracy import FLOOR, MEASURES

VOCAB, T, ROWS, STEPS, SEEDS, LR = 11, 8, 6, 4, 7, 1e-2
MODEL = nn.gpt(VOCAB, T, 2, 2, 16)


def _torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("numpy")  # torch.optim needs it
    return torch


def _trainer(**kw):
    return ml.Trainer(MODEL, input_shape=(T,), loss="cross_entropy", **kw)


def test_to_torch_has_our_names_and_computes_predict_logits(seed):
    torch = _torch()
    trainer = _trainer(seed=seed)
    module = trainer.to_torch()
    assert list(module.state_dict()) == list(trainer._spec.names)
    assert type(module[0]) is torch.nn.Embedding
    X = torch.randint(0, VOCAB, (3, T), generator=torch.Generator().manual_seed(seed % 1000))
    with torch.no_grad():
        want = module(X)
    got = torch.tensor(trainer.predict_logits(X.to(torch.int32)).tolist())
    assert float((got - want).abs().max()) < 1e-4 * float(want.abs().max())
    again = pickle.loads(pickle.dumps(module))
    assert torch.equal(again(X), want)


def test_from_torch_of_to_torch_is_the_same_model_and_weights(seed):
    torch = _torch()
    trainer = _trainer(seed=seed)
    back = ml.Trainer.from_torch(trainer.to_torch(), input_shape=(T,))
    assert back.model == MODEL
    mine, theirs = trainer.weights_, back.weights_
    assert all(mine[k].tolist() == theirs[k].tolist() for k in mine)
    padded = torch.nn.Sequential(torch.nn.Embedding(5, 4, padding_idx=0), torch.nn.Linear(4, 5))
    with pytest.raises(ValueError, match="layer 0 .*padding_idx"):
        ml.Trainer.from_torch(padded, input_shape=(3,))


def test_export_onnx_refuses_the_text_layers_by_name(tmp_path):
    pytest.importorskip("onnx")
    with pytest.raises(ValueError, match="layer 0 Embedding.* no ONNX export"):
        _trainer().export_onnx(tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


def _run(torch, seed):
    """{measure: (identical mode's distance from float64, torch float32's)} for one seed."""
    F = torch.nn.functional
    start = _trainer(seed=seed).to_torch()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # LayerNorm off its 1 / 0 start, so its arithmetic counts at once
        for p in start.parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
    weights = {k: ml.Array.from_list(v.tolist(), "<f4") for k, v in start.state_dict().items()}
    ours = _trainer(weights=weights, lr=LR)
    t32, t64 = copy.deepcopy(start), copy.deepcopy(start).double()
    opts = [(net, torch.optim.AdamW(net.parameters(), lr=LR)) for net in (t32, t64)]

    def batch(n):
        return (torch.randint(0, VOCAB, (n, T), generator=g) for _ in range(2))

    def rows(z, y):
        return F.cross_entropy(z.reshape(-1, VOCAB), y.reshape(-1), reduction="none")

    for _ in range(STEPS):
        X, y = batch(ROWS)
        ours.train_step(X, y.to(torch.int32))  # int64 ids go in as they are
        for net, opt in opts:
            opt.zero_grad()
            rows(net(X), y).mean().backward()
            opt.step()
    Xe, ye = batch(32)
    with torch.no_grad():
        out64, out32 = t64(Xe), t32(Xe)
    out = torch.tensor(ours.predict_logits(Xe).tolist(), dtype=torch.float64)

    def dist(a, b):
        b = b.double()
        return max(float((a.double() - b).abs().max()) / float(b.abs().max()), FLOOR)

    sd64 = t64.state_dict()
    flat64 = torch.cat([v.reshape(-1) for v in sd64.values()])
    flat32 = torch.cat([v.reshape(-1) for v in t32.state_dict().values()])
    mine = ours.weights_
    flat = torch.cat([torch.tensor(mine[k].tolist()).reshape(-1) for k in sd64])
    r64 = rows(out64, ye)
    return {
        "weights": (dist(flat, flat64), dist(flat32, flat64)),
        "outputs": (dist(out, out64), dist(out32, out64)),
        "row losses": (dist(rows(out, ye), r64), dist(rows(out32.double(), ye), r64)),
    }


@pytest.mark.skipif(ml.numeric_mode_used() != "identical", reason="identical mode's arithmetic")
def test_gpt_adamw_steps_within_2x_of_torch_float32(seed):
    torch = _torch()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = [_run(torch, seed % (1 << 31) + i) for i in range(SEEDS)]
    finally:
        torch.set_num_threads(threads)
    cells, failures = [], []
    for measure in MEASURES:
        pairs = [r[measure] for r in runs]
        ratio = statistics.median(a / b for a, b in pairs)
        cells.append(f"{measure} {statistics.median(a for a, _ in pairs):.3g}={ratio:.2f}x")
        if not ratio <= 2.0:
            failures.append(f"{measure}: {ratio:.2f}x ({[f'{a:.3g}/{b:.3g}' for a, b in pairs]})")
    print("\ngpt vs torch float64: " + "; ".join(cells))
    assert not failures, failures
