# Benchmark: the AdamW update the trainers' steps run (training/optim.mojo `adam_update_into`,
# the build's numeric mode) against a pass with the same loads and stores and next to no
# arithmetic (read p, g, m, v; write p, m, v), at the parameter counts of the MLPs of
# tools/bench_mlp.py and at one far larger than the caches. A ratio near 1 means the update is
# bound by memory; well above 1, by its arithmetic (identical mode: a square root and two
# divisions per element, which its bits need).
#
#   mojo run -I mojo --fp-mode contract=off -D MOJOLEARN_MODE=identical tools/bench_adam.mojo
#   mojo run -I mojo -D MOJOLEARN_MODE=fast tools/bench_adam.mojo
#
# The buffers are laid out as a session's (training/mlp_resident.mojo): p, m, v one after the
# other in a bank, the new p, m, v in the other bank. Medians of interleaved repetitions.
from std.time import perf_counter_ns

from training.config import F32P, MODE
from training.optim import adam_scalars, adam_update_into

comptime REPEATS = 41


@no_inline
def stream(p: F32P, g: F32P, m: F32P, v: F32P, p_out: F32P, m_out: F32P, v_out: F32P, n: Int):
    var i = 0
    while i + 8 <= n:
        var gi = g.unsafe_load[width=8](i)
        p_out.unsafe_offset(i).unsafe_store(p.unsafe_load[width=8](i) + gi)
        m_out.unsafe_offset(i).unsafe_store(m.unsafe_load[width=8](i) + gi)
        v_out.unsafe_offset(i).unsafe_store(v.unsafe_load[width=8](i) + gi)
        i += 8


def median(mut xs: List[Float64]) -> Float64:
    sort(xs)
    return xs[len(xs) // 2]


def main():
    print("AdamW update, numeric mode", MODE, "(µs per update, medians of", REPEATS, "rounds)")
    print("  params      update    stream    update/stream   ns/param")
    for n in [9610, 81659, 203530, 1 << 22]:
        var stride = (n + 15) // 16 * 16
        var bank = List[Float32](length=6 * stride, fill=0.0)
        var g = List[Float32](length=stride, fill=0.0)
        for i in range(n):
            g[i] = Float32((i * 37) % 211 - 105) * 1e-3
            bank[i] = Float32((i * 11) % 97 - 48) * 1e-2
            bank[2 * stride + i] = Float32((i * 13) % 89) * 1e-4
        var at = Int(bank.unsafe_ptr())

        def f(k: Int) capturing -> F32P:
            return F32P(unsafe_from_address=at + 4 * k * stride)

        var gp = F32P(unsafe_from_address=Int(g.unsafe_ptr()))
        var s = adam_scalars(1e-3, 0.9, 0.999, 1e-8, 0.01, True, False, 10)
        var t_adam = List[Float64]()
        var t_stream = List[Float64]()
        for r in range(REPEATS + 1):
            var t0 = perf_counter_ns()
            # In and out of alternate banks, as the steps go.
            var src = 3 * (r % 2)
            _ = adam_update_into(f(src), gp, f(src + 1), f(src + 2), f(3 - src), f(4 - src),
                                 f(5 - src), n, s)
            var t1 = perf_counter_ns()
            stream(f(src), gp, f(src + 1), f(src + 2), f(3 - src), f(4 - src), f(5 - src), n)
            var t2 = perf_counter_ns()
            if r > 0:
                t_adam.append(Float64(t1 - t0) / 1e3)
                t_stream.append(Float64(t2 - t1) / 1e3)
        var a = median(t_adam)
        var b = median(t_stream)
        print(String("  ", n).ascii_ljust(12), String(round(a, 1)).ascii_rjust(8),
              String(round(b, 1)).ascii_rjust(10), String(round(a / b, 2)).ascii_rjust(14),
              String(round(a * 1e3 / Float64(n), 3)).ascii_rjust(11))
        _ = len(bank) + len(g)
