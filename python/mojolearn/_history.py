"""The loss-history side file of a checkpoint: `CHECKPOINT.history.jsonl`, one JSON object per
trained step (`step`, `loss`, `accuracy`; `test_loss`, `test_accuracy` on evaluation steps).

It moves in lockstep with the checkpoint: the records since the last save are appended and
fsynced BEFORE the checkpoint is replaced, so after any crash the file holds at least every
step the checkpoint holds; on resume it is cut back to the checkpoint's step (records past it,
and a torn last line from a `kill -9`, are dropped), so a resumed run's trace is the trace of an
uninterrupted one.
"""
import json
import os


def path_for(checkpoint):
    return str(checkpoint) + ".history.jsonl"


def _line(record):
    return (json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=False)
            + "\n").encode("ascii")


def _fsync_dir(path):
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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
        with open(self.path, "ab") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        self.pending = []

    def _replace(self, records):
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"".join(_line(r) for r in records))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path)
        self.pending = []
