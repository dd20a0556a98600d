"""Benchmark: ms per AdamW training step of nanoGPT's smallest CPU configuration (issue 38: 4
layers, 4 heads, 128 wide, block 64, vocabulary 65) as `nn.gpt` on mojolearn.Trainer, beside
torch eager and the matmul floor, all measured in the same run.

    python tools/bench_gpt.py                  # batch 12, 1 and 2 threads (a few minutes)
    python tools/bench_gpt.py --quick          # a smoke run
    python tools/bench_gpt.py --batches 12,32  # other batch sizes

Every contender takes the same weights (Trainer's seeded initialization, through `to_torch`)
and the same (B, 64) batch of token ids with next-token targets, and runs forward,
cross-entropy over every position, backward and AdamW (lr 1e-3, weight decay 0.01):
- mojolearn: `Trainer.train_step`, identical and fast mode, MOJOLEARN_NUM_THREADS=1 and 2;
- torch eager: `Trainer.to_torch()` (torch's Embedding; nanoGPT's attention with torch's
  causal scaled_dot_product_attention), F.cross_entropy, torch.optim.AdamW(fused=True),
  torch.set_num_threads(1 and 2);
- floor: the step's matmul FLOPs x3 (every Linear, and attention's q·kᵀ and att·v over the
  full T × T) at NumPy's float32 1024³ matmul rate on one thread (tools/bench_models.py's
  `floor_peer`).
Each contender runs in its own process, once per pass, in an order that rotates from pass to
pass; a figure is the median over the passes' rounds (tools/bench_models.py's
`timed_together`). A profile line follows (identical, one thread): the forward alone
(`predict_logits`) and the step of the same model without its attention blocks, so the
attention blocks' share (c_attn, the kernel, c_proj, their LayerNorm and Residual) is the
difference. Trainer's default `max_rows` (2 GiB of activations and their gradients) allows
about 330 examples of this model: a batch above it is reported as refused.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_models import GEMM, floor_peer, timed_together  # noqa: E402

VOCAB, T, LAYERS, HEADS, WIDTH = 65, 64, 4, 4, 128
LR, WD = 1e-3, 0.01


def step_flops(batch, attention=True):
    d, rows = WIDTH, batch * T
    per_layer = (d * 3 * d + d * d if attention else 0) + 2 * d * 4 * d
    linear = 2 * rows * (LAYERS * per_layer + d * VOCAB)
    att = 2 * 2 * batch * HEADS * T * T * (d // HEADS) * LAYERS if attention else 0
    return 3 * (linear + att)


def _model(attention=True):
    from mojolearn import nn

    model = nn.gpt(VOCAB, T, LAYERS, HEADS, WIDTH)
    if attention:
        return model
    keep = [layer for layer in model.layers if not _is_attention(layer)]
    return nn.Sequential(*keep)


def _is_attention(layer):
    from mojolearn import nn

    inner = getattr(layer, "layers", ())
    return any(isinstance(x, nn.CausalSelfAttention) for x in inner)


def _batch(batch):
    from mojolearn._mlp.rng import SplitMix64

    rng = SplitMix64(11 + batch)
    ids = [[rng.randbelow(VOCAB) for _ in range(T + 1)] for _ in range(batch)]
    return [r[:-1] for r in ids], [r[1:] for r in ids]


def _trainer(attention=True):
    import mojolearn as ml

    return ml.Trainer(
        _model(attention), input_shape=(T,), seed=1, lr=LR, weight_decay=WD, max_rows=None
    )


def ours(batch, rounds, budget):
    import mojolearn as ml

    trainer = _trainer()
    xs, ys = _batch(batch)
    X, Y = ml.Array.from_list(xs, "<i4"), ml.Array.from_list(ys, "<i4")
    if batch > trainer.max_rows:
        return {"refused": f"batch {batch} > max_rows {trainer.max_rows}"}
    first = trainer.train_step(X, Y)["loss"]
    fns = {"step": lambda: trainer.train_step(X, Y)}
    if os.environ.get("BENCH_GPT_PROFILE") == "1":
        plain = _trainer(attention=False)
        fns["forward"] = lambda: trainer.predict_logits(X)
        fns["step without attention blocks"] = lambda: plain.train_step(X, Y)
    return {**timed_together(fns, rounds, budget), "_loss": first}


def torch_peer(batch, rounds, budget):
    import torch

    torch.set_num_threads(int(os.environ["BENCH_GPT_THREADS"]))
    net = _trainer().to_torch()
    opt = torch.optim.AdamW(net.parameters(), lr=LR, weight_decay=WD, fused=True)
    xs, ys = _batch(batch)
    X, Y = torch.tensor(xs), torch.tensor(ys)
    F = torch.nn.functional

    def step():
        opt.zero_grad(set_to_none=True)
        value = F.cross_entropy(net(X).reshape(-1, VOCAB), Y.reshape(-1))
        value.backward()
        opt.step()
        return value.item()

    first = step()
    return {"step": timed_together({"": step}, rounds, budget)[""], "_loss": first}


def child(kind, batches, rounds, budget):
    if kind == "floor":
        return floor_peer(rounds, budget)
    peer = ours if kind == "ours" else torch_peer
    return {str(b): peer(b, rounds, budget) for b in batches}


def run_child(kind, env, batches, rounds, budget):
    full = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **env)
    for key in [k for k, v in env.items() if v is None]:
        full.pop(key)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind]
    cmd += ["--batches", ",".join(map(str, batches)), "--rounds", str(rounds)]
    cmd += ["--budget", str(budget)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full)
    if proc.returncode != 0:
        return None, (proc.stderr.strip().splitlines() or ["failed"])[-1]
    return json.loads(proc.stdout.strip().splitlines()[-1]), None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batches", default="12")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=1.0)
    parser.add_argument("--child", choices=("ours", "torch", "floor"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.child:
        print(json.dumps(child(args.child, batches, args.rounds, args.budget)))
        return
    if args.quick:
        args.passes, args.rounds, args.budget = 1, 1, 0.3
    contenders = []
    for threads in ("1", "2"):
        for mode in ("identical", "fast"):
            env = {"MOJOLEARN_NUM_THREADS": threads, "MOJOLEARN_NUMERIC_MODE": mode}
            if threads == "1" and mode == "identical":
                env["BENCH_GPT_PROFILE"] = "1"
            contenders.append((f"ours {mode} {threads}t", "ours", env))
        contenders.append((f"torch {threads}t", "torch", {"BENCH_GPT_THREADS": threads}))
    contenders.append(("floor", "floor", {"OPENBLAS_CORETYPE": None, "OPENBLAS_L2_SIZE": None}))
    runs: dict = {}
    for p in range(args.passes):
        k = p % len(contenders)
        for title, kind, env in contenders[k:] + contenders[:k]:
            res, err = run_child(kind, env, batches, args.rounds, args.budget)
            if err:
                print(f"{title}: {err}", file=sys.stderr)
                continue
            runs.setdefault(title, []).append(res)
    rate = None
    if "floor" in runs:
        us = statistics.median(v for r in runs["floor"] for v in r["sgemm"])
        rate = 2 * GEMM**3 / (us * 1e-6)
        print(f"floor: sgemm 1024³ at {rate / 1e9:.1f} GFLOP/s ({runs['floor'][0]['blas']})")
    for b in batches:
        floor_ms = step_flops(b) / rate * 1e3 if rate else None
        print(f"\nbatch {b} (ms per step, median of rounds; floor {floor_ms or 0:.1f} ms):")
        for title, _, _ in contenders[:-1]:
            cells = [r[str(b)] for r in runs.get(title, [])]
            if cells and "refused" in cells[0]:
                print(f"  {title:22s} refused: {cells[0]['refused']}")
                continue
            for name in sorted({n for c in cells for n in c if not n.startswith("_")}):
                ms = statistics.median(v for c in cells for v in c[name]) / 1e3
                extra = f"  ({ms / floor_ms:.2f}x the floor)" if floor_ms and name == "step" else ""
                label = title if name == "step" else f"{title} {name}"
                print(f"  {label:45s} {ms:8.1f}{extra}")
            if cells:
                print(f"  {'':45s} first loss {cells[0]['_loss']:.6f}")


if __name__ == "__main__":
    main()
