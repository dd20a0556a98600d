"""The loss-history side file of a checkpoint: `CHECKPOINT.history.jsonl` beside the file the
checkpoint's path really leads to (symlinks followed, as the run lock and the checkpoint's
writes follow them), one JSON object per trained step (`step`, `loss`, `accuracy`;
`test_loss`, `test_accuracy` on evaluation steps).

It moves in lockstep with the checkpoint: the records since the last save are appended and
fsynced BEFORE the checkpoint is replaced, so after any crash the file holds at least every
step the checkpoint holds; on resume it is cut back to the checkpoint's step (records past it,
and a torn last line from a `kill -9`, are dropped), so a resumed run's trace is the trace of an
uninterrupted one.
"""

import json
import os
import stat as _stat

from .._runtime import files as _files

SUFFIX = ".history.jsonl"


def path_for(checkpoint, suffix=SUFFIX):
    """The history of `checkpoint` (or its other side file named by `suffix`): named after the
    file the path really leads to, beside it (the resolution the run lock and the checkpoint's
    own writes use), so a checkpoint reached through a symlink keeps one history. A path with
    no symlink in it keeps its spelling."""
    path = _files.fspath(checkpoint, "--checkpoint")
    real = os.path.realpath(path)
    return (path if os.path.abspath(path) == real else real) + suffix


def _line(record):
    return (
        json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"
    ).encode("ascii")


def read(path):
    """The records of a history file in order; a torn or unparsable line ends the read."""
    records = []
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except FileNotFoundError:
        return records
    for raw in blob.split(b"\n"):
        if not raw:
            continue
        try:
            record = json.loads(raw)
        except ValueError:
            break
        if not isinstance(record, dict) or type(record.get("step")) is not int:
            break
        records.append(record)
    return records


class History:
    """Buffers records and writes them to the side file when the checkpoint is saved."""

    def __init__(self, checkpoint):
        self.path = path_for(checkpoint)
        self.pending = []

    def start_fresh(self):
        """A new run: an empty history (replaces any old file)."""
        self._replace([])

    def resume_at(self, step):
        """Keep the records of steps 1..step (those the checkpoint holds); drop the rest."""
        kept = [r for r in read(self.path) if r["step"] <= step]
        self._replace(kept)
        return kept

    def add(self, record):
        self.pending.append(record)

    def flush(self):
        """Append and fsync the pending records (call right before saving the checkpoint)."""
        if not self.pending:
            return
        blob = b"".join(_line(r) for r in self.pending)
        # Non-blocking and checked after opening: a FIFO put there mid-run is refused, not
        # waited on. (The file itself exists: `start_fresh` / `resume_at` wrote it.)
        fd = os.open(
            self.path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        )
        try:
            st = os.fstat(fd)
            if not _stat.S_ISREG(st.st_mode):
                raise ValueError(
                    f"history: {_files.shown(self.path)!r} is "
                    f"{_files.kind(st.st_mode)}, not a regular file"
                )
            _files.write_all(fd, blob)
            _files.retry(os.fsync, fd)
        finally:
            os.close(fd)
        self.pending = []

    def _replace(self, records):
        # Through a unique temporary: two runs racing on one path never share a name.
        _files.write_atomic(self.path, b"".join(_line(r) for r in records), what="history")
        self.pending = []
