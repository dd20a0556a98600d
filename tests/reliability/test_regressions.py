"""One regression test per defect the reliability suites found (see the report in
tools/reliability_report.py's docstring for the list)."""

import json
import os
import random
import signal
import sys

import mojolearn as ml
import pytest
from mojolearn import checkpoint
from mojolearn._runtime import files as _files

from ._util import random_state
from .attacks import generate


def _sealed(edit, base=generate.base_envelope):
    env = base()
    edit(env["payload"])
    return generate.canon(generate.seal(env)) + b"\n"


def test_d1_upper_case_hex_with_a_matching_hash_is_refused():
    # Was accepted: the canonical check keeps the string as written and the hash covered it.
    data = _sealed(lambda p: p["weights"]["bias2"].update(hex=p["weights"]["bias2"]["hex"].upper()))
    with pytest.raises(ValueError, match="bias2 is upper-case hexadecimal"):
        checkpoint.loads(data)


@pytest.mark.parametrize(
    "edit, base",
    [
        (lambda p: p.update(architecture=[8.0, 16, 3]), generate.base_envelope),
        (lambda p: p["config"].update(lr=1), generate.base_envelope),
        (lambda p: p["config"].update(lr=1), generate.v1_envelope),
        # not a float32: a profile-v1 trainer would have rounded it (v2 keeps it as given)
        (lambda p: p["config"].update(beta1=0.9), generate.v1_envelope),
    ],
)
def test_d2_values_the_writer_cannot_write_are_refused(edit, base):
    # Were accepted, and the loaded trainer's state hash then differed from the file's.
    with pytest.raises(
        ValueError,
        match="architecture entries must be JSON integers|"
        "must be a float32 value written as a JSON float|must be a JSON float",
    ):
        checkpoint.loads(_sealed(edit, base))


def test_d3_lone_surrogates_in_the_data_schedule_are_refused():
    with pytest.raises(ValueError, match="lone surrogate"):
        checkpoint.loads(_sealed(lambda p: p["data_schedule"].update(note="a\udc80b")))
    # A valid pair (escaped in the file) stays accepted.
    state = checkpoint.loads(_sealed(lambda p: p["data_schedule"].update(note="\U0001f600")))
    assert state["data_schedule"]["note"] == "\U0001f600"


def test_d4_parser_hook_refusals_keep_their_own_message():
    # Was "checkpoint: not valid ASCII JSON (checkpoint: duplicate key 'schema')".
    data = generate.valid_bytes().replace(
        b'{"arithmetic_profile"', b'{"schema":"x","arithmetic_profile"', 1
    )
    with pytest.raises(ValueError, match=r"^checkpoint: duplicate key 'schema'$"):
        checkpoint.loads(data)


def test_d5_fifo_folder_and_devices_are_value_errors_without_blocking(tmp_path):
    # A FIFO blocked `load` forever; a folder raised IsADirectoryError.
    fifo = tmp_path / "p.ckpt"
    os.mkfifo(fifo)
    old = signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(TimeoutError("blocked")))
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    try:
        for path, kind in (
            (fifo, "a FIFO"),
            (tmp_path, "a folder"),
            ("/dev/zero", "a character device"),
        ):
            with pytest.raises(ValueError, match=f"is {kind}, not a regular file"):
                checkpoint.load(path)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_d6_stale_temporaries_are_removed_by_the_next_save(tmp_path):
    # A save killed before its replace left its temporary behind for good.
    target = tmp_path / "ck.ckpt"
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    stale = tmp_path / _files.temporary_name(target, dead, "0123456789ab")
    stale.write_bytes(b"half a checkpoint")
    live = tmp_path / _files.temporary_name(target, os.getppid(), "0123456789ab")
    live.write_bytes(b"a save in progress elsewhere")
    other = tmp_path / _files.temporary_name(tmp_path / "other.ckpt", dead, "0123456789ab")
    other.write_bytes(b"another target's")
    checkpoint.write_atomic(target, generate.valid_bytes())
    assert sorted(os.listdir(tmp_path)) == sorted(["ck.ckpt", live.name, other.name])


def test_d7_a_bad_path_type_names_the_path():
    with pytest.raises(
        TypeError, match="checkpoint: path must be a str, bytes or os.PathLike, got int"
    ):
        checkpoint.load(3)
    with pytest.raises(TypeError, match="checkpoint: path must be"):
        checkpoint.write_atomic(None, b"x")


@pytest.mark.parametrize(
    "base,loader",
    [
        (generate.base_envelope, ml.SmallMLPTrainer.from_checkpoint),
        (generate.mlp_base_envelope, ml.MLPTrainer.from_checkpoint),
    ],
)
def test_d8_nesting_just_under_the_parser_limit_is_a_value_error(tmp_path, base, loader):
    # Was a RecursionError: the file parses, and the re-encoding after it recursed deeper. The
    # depth that crashed moved with the caller's stack, so every depth near the limit is tried.
    path = tmp_path / "deep.ckpt"
    limit = sys.getrecursionlimit()
    for depth in range(900, 1010, 3):
        env = base()
        sys.setrecursionlimit(limit + 2000)  # the writer of the attack needs the room
        try:
            env["payload"]["schema"] = json.loads("[" * depth + "]" * depth)
            path.write_bytes(generate.canon(generate.seal(env)) + b"\n")
        finally:
            sys.setrecursionlimit(limit)
        with pytest.raises(ValueError):
            loader(path)


def test_accepted_files_reproduce_their_hash_in_the_trainer(tmp_path):
    # The invariant D1-D3 broke: whatever loads, the trainer holding it hashes to the file's hash.
    state = random_state(random.Random(5), ml.numeric_mode_used())
    data = checkpoint.dumps(state)
    path = tmp_path / "ok.ckpt"
    path.write_bytes(data)
    assert (
        ml.SmallMLPTrainer.from_checkpoint(path).state_hash() == json.loads(data)["payload_sha256"]
    )
