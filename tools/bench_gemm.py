"""Benchmark `mojolearn.matmul` per numeric mode against NumPy's `@` (OpenBLAS), same run.

    python tools/bench_gemm.py            # table: GFLOP/s and µs per call, ratios to OpenBLAS
    python tools/bench_gemm.py --quick    # fewer repetitions

Each (mode, thread count) runs in its own process (the mode is fixed per process). NumPy runs
single-threaded (OPENBLAS_NUM_THREADS=1) twice: with the environment as given (OPENBLAS_CORETYPE
and OPENBLAS_L2_SIZE, when set, pin OpenBLAS to a kernel such as Haswell/AVX2, the ISA of our
default x86-64-v3 build) and with those two variables removed (OpenBLAS picks the host's best
kernel, e.g. AVX-512). Times are the best of several repeats; a busy machine lowers all numbers.
The header names the binding module each mode loaded: on an AVX-512 CPU the fast rows run the
x86-64-v4 module (MOJOLEARN_CPU_LEVEL=v3 in the environment measures the portable one).
"""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SQUARES = [64, 256, 1024]
MLP = []  # (label, m, n, k, transpose_a, transpose_b): the 8→16→3 MLP's products
for _b in (1, 32, 256):
    MLP += [
        (f"X·W1ᵀ   n={_b}", _b, 16, 8, False, True),
        (f"H·W2ᵀ   n={_b}", _b, 3, 16, False, True),
        (f"dLᵀ·H   n={_b}", 3, 16, _b, True, False),
        (f"dL·W2   n={_b}", _b, 16, 3, False, False),
        (f"dHᵀ·X   n={_b}", 16, 8, _b, True, False),
        (f"dH·W1   n={_b}", _b, 8, 16, False, False),
    ]
# The products of one training step at batch 256 of bench_mlp.py's larger networks (GFLOP/s):
# forward A·Wᵀ per layer, then dW = Gᵀ·A and dA = G·W from the last layer down.
for _sizes in ([64, 128, 10], [54, 256, 256, 7], [784, 256, 10]):
    _tag = "-".join(map(str, _sizes))
    for _l in range(len(_sizes) - 1):
        MLP.append((f"{_tag} fwd{_l + 1}", 256, _sizes[_l + 1], _sizes[_l], False, True))
    for _l in reversed(range(len(_sizes) - 1)):
        MLP.append((f"{_tag} dW{_l + 1}", _sizes[_l + 1], _sizes[_l], 256, True, False))
        if _l > 0:
            MLP.append((f"{_tag} dA{_l}", 256, _sizes[_l], _sizes[_l + 1], False, False))


def cases():
    out = [(f"{s}³", s, s, s, False, False) for s in SQUARES]
    return out + MLP


def best_seconds(fn, quick):
    """Best per-call time over repeats of a loop sized to ~20 ms (~5 ms quick)."""
    fn()
    n, t = 1, 0.0
    target = 0.005 if quick else 0.02
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - start
        if t >= target:
            break
        n *= 2 if t * 4 < target else 1
        n = max(n, int(n * target / max(t, 1e-9)))
    best = t / n
    for _ in range(3 if quick else 7):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n)
    return best


def operands(m, n, k, ta, tb, make):
    import random

    rng = random.Random(1)
    a = make([rng.uniform(-1, 1) for _ in range(m * k)], (k, m) if ta else (m, k))
    b = make([rng.uniform(-1, 1) for _ in range(k * n)], (n, k) if tb else (k, n))
    return a, b


def worker_mojolearn(quick):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import mojolearn

    out = {}
    for label, m, n, k, ta, tb in cases():
        a, b = operands(
            m, n, k, ta, tb, lambda v, s: mojolearn.Array.from_list(v, "<f4").reshape(s)
        )
        out[label] = best_seconds(
            lambda: mojolearn.matmul(a, b, transpose_a=ta, transpose_b=tb), quick
        )
    out["_mode"] = mojolearn.numeric_mode_used()
    from mojolearn._runtime import backend as _backend

    b = _backend.binding()
    out["_binding"] = f"{b.name} ({b.target_cpu})"
    return out


def worker_numpy(quick):
    import numpy as np

    out = {}
    for label, m, n, k, ta, tb in cases():
        a, b = operands(m, n, k, ta, tb, lambda v, s: np.array(v, np.float32).reshape(s))
        fa = (
            (lambda: a.T @ b.T)
            if ta and tb
            else (lambda: a.T @ b)
            if ta
            else (lambda: a @ b.T)
            if tb
            else (lambda: a @ b)
        )
        out[label] = best_seconds(fa, quick)
    return out


def run_worker(kind, env, quick):
    full = dict(os.environ)
    for key, value in env.items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    args = [sys.executable, os.path.abspath(__file__), "--worker", kind] + (
        ["--quick"] if quick else []
    )
    proc = subprocess.run(args, capture_output=True, text=True, env=full)
    if proc.returncode != 0:
        return None, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"
    return json.loads(proc.stdout), None


def main():
    quick = "--quick" in sys.argv
    if "--worker" in sys.argv:
        kind = sys.argv[sys.argv.index("--worker") + 1]
        print(json.dumps(worker_numpy(quick) if kind == "numpy" else worker_mojolearn(quick)))
        return
    columns = []  # (title, results)
    for mode in ("identical", "fast"):
        for threads in (1, 2):
            res, err = run_worker(
                "mojolearn",
                {"MOJOLEARN_NUMERIC_MODE": mode, "MOJOLEARN_NUM_THREADS": str(threads)},
                quick,
            )
            if err:
                sys.exit(f"mojolearn {mode} failed: {err}")
            columns.append((f"{mode} t{threads}", res))
    blas_env = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    one = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    np_env, err = run_worker("numpy", one, quick)
    baselines = []
    if err:
        print(f"NumPy not available ({err}): no OpenBLAS baseline")
    else:
        baselines.append(("BLAS env", np_env))
        np_host, _ = run_worker(
            "numpy", dict(one, OPENBLAS_CORETYPE=None, OPENBLAS_L2_SIZE=None), quick
        )
        if np_host:
            baselines.append(("BLAS host", np_host))
    print(
        f"mojolearn.matmul vs NumPy @ (OpenBLAS, 1 thread). 'BLAS env': environment as given "
        f"({', '.join(f'{k}={v}' for k, v in blas_env.items()) or 'nothing set'}); "
        f"'BLAS host': those variables removed."
    )
    ran = {}
    for title, res in columns:
        ran.setdefault(title.split()[0], res.get("_binding", "?"))
    print("Modules: " + "; ".join(f"{mode}: {name}" for mode, name in ran.items()) + ".")
    print(
        "GFLOP/s for the squares and every product of at least 2^20 multiply-adds, µs per "
        "call from Python for the smaller ones; ratio = "
        "mojolearn t1 / BLAS (>1 is faster for GFLOP/s, <1 is faster for µs); t1/t2: threads.\n"
    )
    titles = [t for t, _ in columns] + [t for t, _ in baselines]
    ratio_titles = [
        f"{t.split()[0][:4]}/{bt.split()[1]}"
        for t, _ in columns
        if t.endswith("t1")
        for bt, _ in baselines
    ]
    head = f"{'shape':<16}" + "".join(f"{t:>13}" for t in titles + ratio_titles)
    print(head)
    print("-" * len(head))
    for label, m, n, k, _ta, _tb in cases():
        square = label.endswith("³") or m * n * k >= 1 << 20

        def value(res):
            sec = res[label]
            return 2.0 * m * n * k / sec / 1e9 if square else sec * 1e6

        vals = [value(r) for _, r in columns] + [value(r) for _, r in baselines]
        ratios = [
            value(r) / value(br) for t, r in columns if t.endswith("t1") for _, br in baselines
        ]
        unit = "" if square else " µs"
        print(
            f"{label:<16}"
            + "".join(f"{v:>13.2f}" for v in vals)
            + "".join(f"{x:>13.2f}" for x in ratios)
            + unit
        )


if __name__ == "__main__":
    main()
