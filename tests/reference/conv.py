"""Pure-Python mirror of the image layers in identical mode (docs/ARITHMETIC.md "Models:
Conv2d", "MaxPool2d, AvgPool2d"), written from the pinned orders, not from the kernels' im2col:
padded and unreached taps are skipped here (the kernels multiply them by +0.0: the tests show
the same bits). Tensors are flat row-major NCHW lists; `d` is a conv's (c, h, w, oc, kh, kw,
sh, sw, ph, pw) or a pool's (c, h, w, kh, kw, sh, sw).
"""

from .f32 import f32, fma32


def _out(n, k, s, p):
    return (n + 2 * p - k) // s + 1


def conv2d_forward(x, rows, w, b, d):
    """`y[b,o,oh,ow] = f32(chain over (ic, kh, kw) ascending of x·w + bias[o])`."""
    c, h, wd, oc, kh, kw, sh, sw, ph, pw = d
    oh_n, ow_n = _out(h, kh, sh, ph), _out(wd, kw, sw, pw)
    y = []
    for r in range(rows):
        for o in range(oc):
            for oh in range(oh_n):
                for ow in range(ow_n):
                    acc = 0.0
                    for ic in range(c):
                        for i in range(kh):
                            ih = oh * sh - ph + i
                            for j in range(kw):
                                iw = ow * sw - pw + j
                                if 0 <= ih < h and 0 <= iw < wd:
                                    xv = x[((r * c + ic) * h + ih) * wd + iw]
                                    acc = fma32(xv, w[((o * c + ic) * kh + i) * kw + j], acc)
                    y.append(f32(acc + b[o]) if b is not None else acc)
    return y


def conv2d_backward(g, x, rows, w, d, has_bias, into=None):
    """(dx, dw, db): dw a chain over (b, oh, ow) ascending, db their sum from +0.0, dx a chain
    over (oc, kh, kw) ascending (from `into`'s value when given, as a Linear's)."""
    c, h, wd, oc, kh, kw, sh, sw, ph, pw = d
    oh_n, ow_n = _out(h, kh, sh, ph), _out(wd, kw, sw, pw)

    def gy(r, o, oh, ow):
        return g[((r * oc + o) * oh_n + oh) * ow_n + ow]

    dw = []
    for o in range(oc):
        for ic in range(c):
            for i in range(kh):
                for j in range(kw):
                    acc = 0.0
                    for r in range(rows):
                        for oh in range(oh_n):
                            ih = oh * sh - ph + i
                            for ow in range(ow_n):
                                iw = ow * sw - pw + j
                                if 0 <= ih < h and 0 <= iw < wd:
                                    xv = x[((r * c + ic) * h + ih) * wd + iw]
                                    acc = fma32(gy(r, o, oh, ow), xv, acc)
                    dw.append(acc)
    db = None
    if has_bias:
        db = []
        for o in range(oc):
            s = 0.0
            for r in range(rows):
                for oh in range(oh_n):
                    for ow in range(ow_n):
                        s = f32(s + gy(r, o, oh, ow))
            db.append(s)
    dx = []
    for r in range(rows):
        for ic in range(c):
            for ih in range(h):
                for iw in range(wd):
                    at = len(dx)
                    acc = 0.0 if into is None else into[at]
                    for o in range(oc):
                        for i in range(kh):
                            th = ih + ph - i
                            if th < 0 or th % sh or th // sh >= oh_n:
                                continue
                            for j in range(kw):
                                tw = iw + pw - j
                                if tw < 0 or tw % sw or tw // sw >= ow_n:
                                    continue
                                wv = w[((o * c + ic) * kh + i) * kw + j]
                                acc = fma32(gy(r, o, th // sh, tw // sw), wv, acc)
                    dx.append(acc)
    return dx, dw, db


def _windows(planes, d):
    """(plane, output index, [input indices of its window in row-major order]) in order."""
    _, h, wd, kh, kw, sh, sw = d
    oh_n, ow_n = _out(h, kh, sh, 0), _out(wd, kw, sw, 0)
    for pl in range(planes):
        for oh in range(oh_n):
            for ow in range(ow_n):
                idx = [
                    pl * h * wd + (oh * sh + i) * wd + ow * sw + j
                    for i in range(kh)
                    for j in range(kw)
                ]
                yield (pl * oh_n + oh) * ow_n + ow, idx


def maxpool2d_forward(x, rows, d):
    """Each window's first largest element (strictly greater replaces)."""
    return [x[_first_max(x, idx)] for _, idx in _windows(rows * d[0], d)]


def _first_max(x, idx):
    best = idx[0]
    for e in idx[1:]:
        if x[e] > x[best]:
            best = e
    return best


def avgpool2d_forward(x, rows, d):
    """`f32(Σ window row-major from +0.0) / f32(kh·kw)`."""
    count = float(d[3] * d[4])
    out = []
    for _, idx in _windows(rows * d[0], d):
        s = 0.0
        for e in idx:
            s = f32(s + x[e])
        out.append(f32(s / count))
    return out


def pool2d_backward(g, x, rows, d, is_max):
    """dx from +0.0: each output's gradient (an AvgPool's divided by f32(kh·kw)) added to its
    window's maximum (MaxPool) or to each element (AvgPool), outputs in order."""
    c, h, wd = d[:3]
    count = float(d[3] * d[4])
    dx = [0.0] * (rows * c * h * wd)
    for o, idx in _windows(rows * c, d):
        if is_max:
            e = _first_max(x, idx)
            dx[e] = f32(dx[e] + g[o])
        else:
            share = f32(g[o] / count)
            for e in idx:
                dx[e] = f32(dx[e] + share)
    return dx
