"""`train --plot`: a PNG of the run's train loss per step, its validation loss per epoch (with
--val-fraction) and its test loss at the end."""

import io

from .._runtime import files as _files
from .usage import UsageError

_shown = _files.shown


def require_matplotlib():
    """Refuse --plot (UsageError naming what to install) when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib, which is not installed: pip install matplotlib"
        ) from None


def plot(records, path, title, final_test=None):
    """Write the PNG of the history `records` to `path` atomically (UsageError when it cannot
    be written); `final_test` (step, test loss) adds the end-of-run test point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(
        [r["step"] for r in records], [r["loss"] for r in records], lw=1, label="train loss (batch)"
    )
    val = [(r["step"], r["val_loss"]) for r in records if r.get("val_loss") is not None]
    if val:
        ax.plot([s for s, _ in val], [v for _, v in val], "o-", ms=3, label="validation loss")
    # Histories of runs before the test rows were scored only at the end hold test points.
    test = [(r["step"], r["test_loss"]) for r in records if r.get("test_loss") is not None]
    if final_test and final_test[1] is not None and (not test or test[-1][0] != final_test[0]):
        test.append(final_test)
    if test:
        ax.plot([s for s, _ in test], [v for _, v in test], "s-", ms=4, label="test loss")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.set_title(f"mojolearn train: {title}")
    ax.legend()
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png")
    plt.close(fig)
    try:
        _files.write_atomic(path, png.getvalue(), what="--plot")
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"--plot {_shown(path)}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
