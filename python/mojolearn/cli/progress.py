"""Progress output for `mojolearn train`.

Three forms, chosen once per run: `--json` prints one JSON object per line (machines);
a tqdm bar when tqdm is installed (the `progress` extra) and stdout is a terminal; otherwise
plain lines every `every` steps. Messages for people go to stderr when `--json` is on, so
stdout stays parseable.
"""

import json
import sys
import time


def printable(text, stream):
    """`text` as `stream` can write it whatever its encoding and error handler (a name that is
    not valid UTF-8 under PYTHONIOENCODING=utf-8:strict, say): what it cannot encode, escaped."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        return text.encode(encoding, "backslashreplace").decode(encoding)
    except LookupError:
        return text.encode("ascii", "backslashreplace").decode("ascii")


def _fmt_acc(value):
    return "n/a" if value is None else f"{value:.3f}"


class Progress:
    """Reports step, loss, running accuracy (over the steps since the last report) and steps/s."""

    def __init__(self, start_step, end_step, every, json_lines=False, stream=None, bar=None):
        self.stream = stream or sys.stdout
        self.json = json_lines
        self.start_step = start_step
        self.end_step = end_step
        self.every = max(1, every)
        self.bar = None
        if bar is None:
            bar = not json_lines and self.stream.isatty()
        if bar:
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(
                    total=end_step,
                    initial=start_step,
                    unit="step",
                    file=self.stream,
                    dynamic_ncols=True,
                )
        self._t0 = self._t_last = time.perf_counter()
        self._step_last = start_step
        self._correct = 0
        self._seen = 0

    def message(self, text):
        """A line for people: stderr under --json, else through the bar or stdout."""
        if self.json:
            print(printable(text, sys.stderr), file=sys.stderr, flush=True)
        elif self.bar is not None:
            self.bar.write(printable(text, self.stream), file=self.stream)
        else:
            print(printable(text, self.stream), file=self.stream, flush=True)

    def emit(self, record):
        """A JSON line under --json (no-op otherwise)."""
        if self.json:
            print(json.dumps(record, sort_keys=True, allow_nan=False), file=self.stream, flush=True)

    def update(self, step, loss, correct, rows):
        self._correct += correct
        self._seen += rows
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            if step % self.every == 0 or step == self.end_step:
                self.bar.set_postfix(
                    loss=f"{loss:.4f}", acc=_fmt_acc(self._accuracy()), refresh=False
                )
                self._reset_window(step)
            return
        if step % self.every == 0 or step == self.end_step:
            now = time.perf_counter()
            rate = (step - self._step_last) / max(now - self._t_last, 1e-9)
            acc = self._accuracy()
            if self.json:
                self.emit(
                    {
                        "event": "progress",
                        "step": step,
                        "end_step": self.end_step,
                        "loss": loss,
                        "accuracy": acc,
                        "steps_per_s": round(rate, 1),
                    }
                )
            else:
                print(
                    f"step {step:>6}/{self.end_step}  loss {loss:.4f}  acc {_fmt_acc(acc)}  "
                    f"{rate:,.0f} steps/s",
                    file=self.stream,
                    flush=True,
                )
            self._reset_window(step)

    def _accuracy(self):
        return self._correct / self._seen if self._seen else None

    def _reset_window(self, step):
        self._t_last = time.perf_counter()
        self._step_last = step
        self._correct = 0
        self._seen = 0

    def elapsed(self):
        return time.perf_counter() - self._t0

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
