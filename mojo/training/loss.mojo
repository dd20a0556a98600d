"""Cross-entropy over logits (rows × classes), with torch's ignore_index and label smoothing.

Spec: torch.nn.functional.cross_entropy (https://pytorch.org/docs/stable/generated/
torch.nn.functional.cross_entropy.html), class-index targets, no class weights.

Dimensions: n rows, C classes; logits z (n, C) row-major, targets y (n) int32, per-row losses
(n), dlogits (n, C). Entry points:
    mean_cross_entropy(logits, targets, rows, classes, dlogits, want_grad) -> Float32
        the mean loss of ARITHMETIC.md (no smoothing, no ignore_index); when `want_grad`,
        writes dlogits = d(mean loss)/d(logits). Targets must be in [0, classes), rows >= 1.
        The fused MLP step calls this.
    cross_entropy(logits, targets, rows, classes, ignore_index, label_smoothing, reduction,
                  losses, dlogits, want_grad, count) -> Float32
        the general form behind the `cross_entropy` binding entry; `count` is the number of
        rows whose target is not ignore_index (`count_kept`), >= 1.
    first_bad_target(targets, rows, classes, ignore_index) -> Int   (-1 when all valid)
    softmax_rows(logits, rows, classes, probs)
        probs = p_j of the gradient below for every row (the trainers' `predict_proba`).
    argmax_rows(logits, rows, classes, labels)
        labels (int32) = each row's first index of its maximum (the trainers' `predict`).

Identical mode, every target (ARITHMETIC.md "Cross-entropy"); per kept row, j ascending:
    mx   = max_j z_j                         (first-wins scan; max is exact)
    e_j  = exp32(z_j − mx);  s = Σ_j e_j      (sequential from +0.0)
    ls   = log32(s)
    nll  = ls − (z_y − mx)
    with label smoothing ε > 0:   keep = 1 − ε,  spread = ε / C   (float32 scalars)
        smooth = Σ_j (ls − (z_j − mx))       (sequential from +0.0)
        loss_r = keep·nll + spread·smooth
    else loss_r = nll
    gradient of loss_r: p_j = e_j / s;  q_j = (keep + spread) if j == y else spread
        (keep = 1, spread = 0 without smoothing);  g_j = p_j − q_j
Ignored rows (y == ignore_index): loss_r = +0.0, gradient row +0.0, left out of the sums.
Reductions: sum = Σ loss_r over kept rows ascending from +0.0; mean = sum / float32(count);
dlogits = g / float32(count) for 'mean' (a division, not a multiply by 1/count), g for 'sum'
and 'none' (the gradient of the summed per-row losses, as torch).
Without smoothing and ignore_index, 'mean' is exactly mean_cross_entropy's bits.
Softmax (ARITHMETIC.md "Probabilities"): per row, mx, e_j and s as above (`_row_max`,
`_exp_sum`, shared with `_row`), then p_j = e_j / s: the p_j of the gradient, bit for bit.
"""
from training.config import F32P, I32P
from training.portable_math import exp32, exp32_scalar, log32_scalar

# SIMD width of the elementwise parts of a row (exp, the gradient); any width gives the same
# bits because every lane is an independent output.
comptime W = 8
comptime REDUCTION_NONE = 0
comptime REDUCTION_SUM = 1
comptime REDUCTION_MEAN = 2
# No int32 target equals this, so "nothing is ignored".
comptime IGNORE_NOTHING = -(1 << 31) - 1


def first_bad_target(targets: I32P, rows: Int, classes: Int, ignore_index: Int) -> Int:
    """Index of the first target outside [0, classes) that is not ignore_index, or -1."""
    for r in range(rows):
        var y = Int(targets[unsafe_offset=r])
        if y != ignore_index and (y < 0 or y >= classes):
            return r
    return -1


def count_kept(targets: I32P, rows: Int, ignore_index: Int) -> Int:
    """Number of rows whose target is not ignore_index."""
    var kept = 0
    for r in range(rows):
        if Int(targets[unsafe_offset=r]) != ignore_index:
            kept += 1
    return kept


@always_inline
def _row_max(z: F32P, classes: Int) -> Float32:
    """mx = max_j z_j: a scan from z_0, replaced only when strictly greater."""
    var mx = z[unsafe_offset=0]
    for j in range(1, classes):
        if z[unsafe_offset=j] > mx:
            mx = z[unsafe_offset=j]
    return mx


@always_inline
def _exp_sum(z: F32P, classes: Int, mx: Float32, e_out: F32P, store: Bool) -> Float32:
    """s = Σ_j exp32(z_j − mx), j ascending from +0.0; each e_j also into e_out when `store`."""
    # exp runs W lanes at a time (each lane has the scalar bits); s is still summed one
    # term at a time, j ascending.
    var s = Float32(0.0)
    var j = 0
    while j + W <= classes:
        var e = exp32[W](z.unsafe_load[width=W](j) - mx)
        if store:
            e_out.unsafe_offset(j).unsafe_store(e)
        comptime for k in range(W):
            s = s + e[k]
        j += W
    while j < classes:
        var e = exp32_scalar(z[unsafe_offset=j] - mx)
        if store:
            e_out[unsafe_offset=j] = e
        s = s + e
        j += 1
    return s


def _row(z: F32P, y: Int, classes: Int, keep: Float32, spread: Float32, smoothing: Bool,
         g: F32P, want_grad: Bool, divisor: Float32, divide: Bool) -> Float32:
    """Loss of one row; when `want_grad`, its gradient row in g (divided by `divisor` when
    `divide`). g doubles as the store for e_j so exp runs once per logit."""
    var mx = _row_max(z, classes)
    var s = _exp_sum(z, classes, mx, g, want_grad)
    var j = 0
    var ls = log32_scalar(s)
    var loss = ls - (z[unsafe_offset=y] - mx)
    if smoothing:
        var smooth = Float32(0.0)
        for j in range(classes):
            smooth = smooth + (ls - (z[unsafe_offset=j] - mx))
        loss = keep * loss + spread * smooth
    if want_grad:
        var on = keep + spread
        j = 0
        while j + W <= classes:
            var q = SIMD[DType.float32, W](spread)
            if y >= j and y < j + W:
                q[y - j] = on
            var d = g.unsafe_load[width=W](j) / s - q
            if divide:
                d = d / divisor
            g.unsafe_offset(j).unsafe_store(d)
            j += W
        while j < classes:
            var d = g[unsafe_offset=j] / s - (on if j == y else spread)
            if divide:
                d = d / divisor
            g[unsafe_offset=j] = d
            j += 1
    return loss


def cross_entropy(logits: F32P, targets: I32P, rows: Int, classes: Int, ignore_index: Int,
                  label_smoothing: Float32, reduction: Int, losses: F32P, dlogits: F32P,
                  want_grad: Bool, count: Int) -> Float32:
    """Per-row losses into `losses` (n), dlogits when `want_grad`; returns the mean for
    REDUCTION_MEAN, else the sum. Preconditions (the entry checks them): targets valid
    (`first_bad_target` == -1), count == count_kept(...) >= 1, classes >= 1."""
    var smoothing = label_smoothing > 0.0
    var keep = Float32(1.0)
    var spread = Float32(0.0)
    if smoothing:
        keep = Float32(1.0) - label_smoothing
        spread = label_smoothing / Float32(classes)
    var mean = reduction == REDUCTION_MEAN
    var divisor = Float32(count)
    var total = Float32(0.0)
    for r in range(rows):
        var y = Int(targets[unsafe_offset=r])
        var g = dlogits.unsafe_offset(r * classes)
        if y == ignore_index:
            losses[unsafe_offset=r] = 0.0
            if want_grad:
                for j in range(classes):
                    g[unsafe_offset=j] = 0.0
            continue
        var loss = _row(logits.unsafe_offset(r * classes), y, classes, keep, spread, smoothing,
                        g, want_grad, divisor, mean)
        losses[unsafe_offset=r] = loss
        total = total + loss
    if mean:
        return total / divisor
    return total


@fieldwise_init
struct RowLosses(ImplicitlyCopyable):
    """`mean_cross_entropy` of rows × classes logits, a block of rows at a time
    (`cross_entropy_rows`, as a GEMM's epilogue computes them): the addresses of the logits,
    the int32 targets, dlogits and the per-row losses, and the mean's divisor."""

    var logits: Int
    var targets: Int
    var dlogits: Int
    var losses: Int
    var classes: Int
    var divisor: Float32


def cross_entropy_rows(t: RowLosses, row_begin: Int, row_end: Int):
    """Rows [row_begin, row_end) of `mean_cross_entropy`: each row's loss into t.losses and
    its gradient row (divided by t.divisor) into t.dlogits. `mean_of_rows` then gives the mean."""
    var z = F32P(unsafe_from_address=t.logits)
    var g = F32P(unsafe_from_address=t.dlogits)
    var y = I32P(unsafe_from_address=t.targets)
    var losses = F32P(unsafe_from_address=t.losses)
    for r in range(row_begin, row_end):
        losses[unsafe_offset=r] = _row(z.unsafe_offset(r * t.classes), Int(y[unsafe_offset=r]),
                                       t.classes, 1.0, 0.0, False,
                                       g.unsafe_offset(r * t.classes), True, t.divisor, True)


def mean_of_rows(t: RowLosses, rows: Int) -> Float32:
    """`mean_cross_entropy`'s result from the row losses: summed rows ascending from +0.0,
    then divided by t.divisor."""
    var losses = F32P(unsafe_from_address=t.losses)
    var total = Float32(0.0)
    for r in range(rows):
        total = total + losses[unsafe_offset=r]
    return total / t.divisor


def mean_cross_entropy(logits: F32P, targets: I32P, rows: Int, classes: Int, dlogits: F32P,
                       want_grad: Bool, divide_by: Int = 0) -> Float32:
    """Mean cross-entropy of ARITHMETIC.md (no smoothing, nothing ignored); dlogits (rows ×
    classes) = d(mean)/d(logits) when `want_grad`. Targets in [0, classes), rows >= 1.
    `divide_by` > 0 divides by that count instead of `rows` (a microbatch of a larger batch:
    its rows' summed losses over the whole batch's count, ARITHMETIC.md "Data parallel")."""
    var divisor = Float32(divide_by if divide_by > 0 else rows)
    var total = Float32(0.0)
    for r in range(rows):
        var loss = _row(logits.unsafe_offset(r * classes), Int(targets[unsafe_offset=r]),
                        classes, 1.0, 0.0, False, dlogits.unsafe_offset(r * classes),
                        want_grad, divisor, True)
        total = total + loss
    return total / divisor


def softmax_rows(logits: F32P, rows: Int, classes: Int, probs: F32P):
    """probs (rows × classes) = the softmax of each row of logits: p_j = e_j / s with `_row`'s
    mx, e_j and s, so each p_j has the bits of the cross-entropy gradient's p_j. Rows >= 1,
    classes >= 1, logits finite (the entry checks them)."""
    for r in range(rows):
        var z = logits.unsafe_offset(r * classes)
        var p = probs.unsafe_offset(r * classes)
        var s = _exp_sum(z, classes, _row_max(z, classes), p, True)
        var j = 0
        while j + W <= classes:
            p.unsafe_offset(j).unsafe_store(p.unsafe_load[width=W](j) / s)
            j += W
        while j < classes:
            p[unsafe_offset=j] = p[unsafe_offset=j] / s
            j += 1


def argmax_rows(logits: F32P, rows: Int, classes: Int, labels: I32P):
    """labels[r] = the index of row r's maximum, scanned as `_row_max` scans (j ascending,
    replaced only when strictly greater): the lowest index wins a tie, as torch.argmax. Rows
    >= 1, 1 <= classes < 2^31, logits finite (the entry checks them)."""
    for r in range(rows):
        var z = logits.unsafe_offset(r * classes)
        var best = 0
        var mx = z[unsafe_offset=0]
        for j in range(1, classes):
            if z[unsafe_offset=j] > mx:
                mx = z[unsafe_offset=j]
                best = j
        labels[unsafe_offset=r] = Int32(best)
