"""Quality check (issue 38): nanoGPT's CPU configuration trained by mojolearn and by torch from
the same initial weights on the same windows, both loss curves printed side by side, and
whether the final validation losses agree within 2 %.

    python tools/gpt_quality.py                      # the shipped text, 2000 steps (minutes)
    python tools/gpt_quality.py --text input.txt     # any UTF-8 text (nanoGPT's Shakespeare)
    python tools/gpt_quality.py --steps 200 --every 50   # a shorter run

Both take the model `nn.gpt(vocab, 64, 4, 4, 128)` (dropout 0), ours as `mojolearn.Trainer`
(identical mode unless MOJOLEARN_NUMERIC_MODE says otherwise), torch's as
`Trainer.to_torch()` of the same seeded trainer (torch's Embedding, nanoGPT's attention), each
with AdamW (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01 on every parameter, as
ours), batch 12, one `TextData` stream of windows fed to both in the same order. Every
`--every` steps and at the end, each model's mean cross-entropy over the same 20 validation
batches (a TextData of another seed, drawn once) and over 20 training batches is printed.
The exit status is 1 when the final validation losses differ by more than 2 % of torch's.
torch runs on one thread (its float32 sums depend on the thread count; ours do not).
"""

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

T, LAYERS, HEADS, WIDTH, BATCH = 64, 4, 4, 128, 12
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.01


def _data(args, seed):
    import mojolearn as ml

    if args.text:
        return ml.TextData(args.text, block_size=T, batch_size=BATCH, seed=seed)
    return ml.TextData.shipped(block_size=T, batch_size=BATCH, seed=seed)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", help="a UTF-8 text file (default: the shipped text)")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--every", type=int, default=250, help="steps between evaluations")
    parser.add_argument("--eval-batches", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import mojolearn as ml
    import torch
    from mojolearn import nn

    torch.set_num_threads(1)
    data, held = _data(args, args.seed), _data(args, args.seed + 1)
    evals = {
        split: [held.batch(split) for _ in range(args.eval_batches)] for split in ("train", "val")
    }
    ours = ml.Trainer(
        nn.gpt(data.vocab_size, T, LAYERS, HEADS, WIDTH),
        input_shape=(T,),
        seed=args.seed,
        lr=LR,
        betas=BETAS,
        eps=EPS,
        weight_decay=WD,
    )
    net = ours.to_torch()
    opt = torch.optim.AdamW(net.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    F = torch.nn.functional

    def torch_loss(X, Y):
        logits = net(torch.tensor(X.tolist(), dtype=torch.long))
        target = torch.tensor(Y.tolist(), dtype=torch.long).reshape(-1)
        return F.cross_entropy(logits.reshape(-1, data.vocab_size), target)

    def losses():
        row = {}
        for split, batches in evals.items():
            mine = statistics.fmean(ours.evaluate(X, Y)["loss"] for X, Y in batches)
            with torch.no_grad():
                theirs = statistics.fmean(torch_loss(X, Y).item() for X, Y in batches)
            row[split] = (mine, theirs)
        return row

    print(
        f"text: {args.text or 'the shipped text'} ({data.n_train + data.n_val} characters, "
        f"vocabulary {data.vocab_size}); gpt {LAYERS}x{HEADS}x{WIDTH}, block {T}, batch {BATCH}"
    )
    print(
        f"{'step':>6} {'train ours':>11} {'torch':>8} {'val ours':>10} {'torch':>8} {'val ratio':>10}"
    )
    spent = {"ours": 0.0, "torch": 0.0}
    row = {}
    for step in range(1, args.steps + 1):
        X, Y = data.batch()
        t0 = time.perf_counter()
        ours.train_step(X, Y)
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        torch_loss(X, Y).backward()
        opt.step()
        spent["ours"] += t1 - t0
        spent["torch"] += time.perf_counter() - t1
        if step % args.every == 0 or step == args.steps:
            row = losses()
            (tr, tt), (vr, vt) = row["train"], row["val"]
            print(f"{step:>6} {tr:>11.4f} {tt:>8.4f} {vr:>10.4f} {vt:>8.4f} {vr / vt:>10.4f}")
    (vr, vt) = row["val"]
    gap = abs(vr - vt) / vt
    print(
        f"final validation loss: ours {vr:.4f}, torch {vt:.4f} ({100 * gap:.2f} % apart; "
        f"goal 2 %); training time ours {spent['ours']:.0f} s, torch {spent['torch']:.0f} s"
    )
    sys.exit(0 if gap <= 0.02 else 1)


if __name__ == "__main__":
    main()
