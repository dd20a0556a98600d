"""`mojolearn train --schedule constant|warmup-linear|warmup-cosine --warmup N` (issue 29).

The rates a run uses (its final state hash against a Python loop over the same trainer built
with the same schedule object), exact resume after a signal mid-warmup and mid-decay (final
state hash and history equal to an uninterrupted run), the default run unchanged, the data
parallel run under mpiexec, and the refusals (exit 2, one line, nothing written).
"""

import hashlib
import json
import random
import signal
import subprocess
import sys

import pytest

from .distributed.test_data_parallel import MPIEXEC, _mpi_or_skip
from .test_cli import (
    TIMEOUT,
    _env,
    _finish,
    _read_until,
    _start_child,
    _uninterrupted,
    assert_one_line_error,
    done_record,
    json_lines,
    ok,
    run_cli,
)
from .test_profile_v2 import WINE_DEFAULT_HASH

SCHEDULES = ("warmup-linear", "warmup-cosine")


def _python_loop_hash(steps, batch, seed, lr, kind, warmup, layers=None):
    """The final state hash of `steps` steps of the trainer the CLI builds, driven here over
    the CLI's batches, with `lr_schedule=` the project's schedule of `kind` built directly."""
    import mojolearn
    from mojolearn import WarmupCosineLR, WarmupLinearLR
    from mojolearn._buffers.array import Array
    from mojolearn._mlp.spec import init_small_mlp
    from mojolearn.cli import data as cli_data
    from mojolearn.cli.resume import schedule_record

    mojolearn.set_numeric_mode("identical")
    cls = {"warmup-linear": WarmupLinearLR, "warmup-cosine": WarmupCosineLR}[kind]
    schedule = cls(lr, warmup_steps=warmup, total_steps=steps)  # min_lr: the default 0
    sizes = layers or [cli_data.FEATURES, 16, cli_data.CLASSES]
    dataset = cli_data.load(None, None, sizes[0], sizes[-1], None)
    opts = dict(
        seed=seed,
        batch_size=batch,
        lr=lr,
        weight_decay=0.01,
        mode="identical",
        layers=layers,
        microbatches=None,
        val_fraction=None,
        patience=None,
        schedule=kind,
        warmup=warmup,
    )
    record = schedule_record(dataset, opts, 0, 0)
    hyper = dict(data_schedule=record, lr=lr, weight_decay=0.01, lr_schedule=schedule)
    if layers is None:
        trainer = mojolearn.SmallMLPTrainer(*init_small_mlp(seed), **hyper)
    else:
        trainer = mojolearn.MLPTrainer(layers, seed=seed, **hyper)
    stream = cli_data.BatchStream(dataset, seed, batch, 0, 0)
    for _ in range(steps):
        x, y, rows = stream.next_batch()
        X = Array.from_list(list(x), "<f4").reshape((rows, sizes[0]))
        trainer.train_step(X, Array.from_list(list(y), "<i4"))
    trainer.data_schedule = schedule_record(dataset, opts, stream.epoch, stream.cursor)
    return trainer.state_hash()


def _train(tmp_path, name, *args):
    return done_record(run_cli(["train", *args, "--checkpoint", name, "--json"], tmp_path))


@pytest.mark.parametrize("kind", SCHEDULES)
def test_the_run_uses_the_schedules_rates(tmp_path, seed, kind):
    rng = random.Random(seed)
    steps, batch = rng.randint(20, 60), rng.choice((8, 11, 16))
    warmup, lr = rng.randint(0, steps - 1), rng.choice((0.003, 0.01, 0.02))
    common = ["--steps", str(steps), "--batch-size", str(batch), "--seed", str(seed % 1000)]
    common += ["--lr", str(lr), "--schedule", kind, "--warmup", str(warmup)]
    done = _train(tmp_path, "s.ckpt", *common)
    want = _python_loop_hash(steps, batch, seed % 1000, lr, kind, warmup)
    assert done["state_hash"] == want, f"seed {seed}: {kind} warmup {warmup} of {steps}"
    lr_record = json.loads((tmp_path / "s.ckpt").read_bytes())["payload"]["lr_schedule"]
    assert lr_record == {
        "kind": kind.replace("-", "_"),
        "peak_lr": lr_record["peak_lr"],
        "warmup_steps": warmup,
        "total_steps": steps,
        "min_lr": 0.0,
    }
    # Not the constant rate, nor another warmup: the hash tells the rates apart.
    constant = _train(tmp_path, "c.ckpt", *common[:6], "--lr", str(lr))
    assert constant["state_hash"] != want
    other = (warmup + 1) % steps
    assert _python_loop_hash(steps, batch, seed % 1000, lr, kind, other) != want


def test_mlp_trainer_run_uses_the_schedule(tmp_path, seed):
    steps, warmup = 25, random.Random(seed).randint(0, 24)
    args = ["--layers", "8,12,5,3", "--steps", str(steps), "--seed", "3"]
    done = _train(tmp_path, "m.ckpt", *args, "--schedule", "warmup-cosine", "--warmup", str(warmup))
    want = _python_loop_hash(steps, 16, 3, 0.01, "warmup-cosine", warmup, layers=[8, 12, 5, 3])
    assert done["state_hash"] == want, f"warmup {warmup}"


def test_the_default_run_and_explicit_constant_keep_their_bytes(tmp_path):
    default = _train(tmp_path, "d.ckpt")
    assert default["state_hash"] == WINE_DEFAULT_HASH
    explicit = _train(tmp_path, "e.ckpt", "--schedule", "constant")
    assert explicit["state_hash"] == WINE_DEFAULT_HASH
    assert (tmp_path / "d.ckpt").read_bytes() == (tmp_path / "e.ckpt").read_bytes()
    payload = json.loads((tmp_path / "d.ckpt").read_bytes())["payload"]
    assert "lr_schedule" not in payload and "schedule" not in payload["data_schedule"]


# -- exact resume ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "where, how",
    [("warmup", "SIGKILL"), ("warmup", "SIGTERM"), ("decay", "SIGKILL"), ("decay", "SIGINT")],
)
def test_resume_after_a_signal_mid_schedule_matches_uninterrupted(tmp_path, seed, where, how):
    rng = random.Random(seed)
    end, every, kind = 1500, rng.choice((5, 7, 13)), rng.choice(SCHEDULES)
    at = rng.randint(40, 300)  # past a decay run's warmup and one save
    warmup = rng.randint(600, 1400) if where == "warmup" else rng.randint(0, 15)
    common = ["--steps", str(end), "--batch-size", "12", "--seed", str(seed)]
    common += ["--checkpoint-every", str(every), "--schedule", kind, "--warmup", str(warmup)]
    want_hash, want_history = _uninterrupted(tmp_path, common)
    child = _start_child(tmp_path, common, "run.ckpt")
    try:
        seen = _read_until(child, at)
        child.send_signal(getattr(signal, how))
        _finish(child)
    finally:
        if child.poll() is None:
            child.kill()
    report = json.loads(ok(run_cli(["verify", "run.ckpt", "--json"], tmp_path)).stdout)
    assert report["step"] < end and (report["step"] < warmup) == (where == "warmup"), report
    assert report["step"] >= seen - every, (seen, report)
    # Without --steps the run ends where its schedule does (the uninterrupted run's end).
    resume = ["train", "--resume", "--checkpoint", "run.ckpt", "--json"]
    done = done_record(
        run_cli(resume + (["--steps", str(end)] if rng.random() < 0.5 else []), tmp_path)
    )
    assert done["step"] == end
    assert done["state_hash"] == want_hash, f"seed {seed}: {kind} {how} after step {seen}"
    assert (tmp_path / "run.ckpt.history.jsonl").read_bytes() == want_history


def test_data_parallel_run_under_mpiexec_matches_one_process(tmp_path, seed):
    _mpi_or_skip()
    warmup = random.Random(seed).randint(0, 30)
    args = ["--steps", "40", "--microbatches", "2", "--batch-size", "8", "--seed", "5"]
    args += ["--schedule", "warmup-cosine", "--warmup", str(warmup)]
    alone = _train(tmp_path, "one.ckpt", *args)
    cmd = [MPIEXEC, "-n", "2", sys.executable, "-m", "mojolearn", "train", *args]
    cmd += ["--checkpoint", "two.ckpt", "--json"]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=TIMEOUT
    )
    assert json_lines(ok(proc).stdout)[-1]["state_hash"] == alone["state_hash"]
    assert (tmp_path / "one.ckpt").read_bytes() == (tmp_path / "two.ckpt").read_bytes()


# -- refusals --------------------------------------------------------------------------------


def _unchanged(tmp_path, name, args, *parts):
    """`args` is refused (exit 2, one line naming `parts`) and leaves the checkpoint and its
    history as they were."""
    ckpt, history = tmp_path / name, tmp_path / (name + ".history.jsonl")
    before = (ckpt.read_bytes(), history.read_bytes())
    assert_one_line_error(run_cli(["train", *args, "--checkpoint", name], tmp_path), *parts)
    assert (ckpt.read_bytes(), history.read_bytes()) == before


def test_refusals_of_a_fresh_run(tmp_path):
    cases = [
        (["--warmup", "3"], "--warmup 3 applies only with --schedule warmup-linear"),
        (["--schedule", "constant", "--warmup", "0"], "the run's schedule is constant"),
        (["--schedule", "warmup-cosine", "--warmup", "20", "--steps", "20"], "--warmup 20 must"),
        (["--schedule", "warmup-linear", "--warmup", "270"], "below the run's 270 steps"),
        (["--schedule", "cosine"], "--schedule: invalid choice: 'cosine'"),
        (["--schedule", "warmup-cosine", "--warmup", "-1"], "--warmup: expected an integer"),
        (["--schedule", "warmup-cosine", "--warmup", "2.5"], "--warmup: expected an integer"),
    ]
    for args, part in cases:
        assert_one_line_error(run_cli(["train", *args, "--checkpoint", "x.ckpt"], tmp_path), part)
    assert not list(tmp_path.iterdir()), "a refused run wrote something"


def test_resume_refuses_another_schedule_warmup_or_end(tmp_path):
    args = ["--steps", "12", "--schedule", "warmup-cosine", "--warmup", "8"]
    ok(run_cli(["train", *args, "--checkpoint", "sched.ckpt"], tmp_path))
    ok(run_cli(["train", "--steps", "10", "--checkpoint", "const.ckpt"], tmp_path))
    for flags, parts in [
        (["--schedule", "warmup-linear"], ["--schedule warmup-linear (checkpoint: warmup-cosine)"]),
        (["--schedule", "constant"], ["--schedule constant (checkpoint: warmup-cosine)"]),
        (["--warmup", "3"], ["--warmup 3 (checkpoint: 8)"]),
        (["--steps", "30"], ["--steps 30 ends the run at step 30", "ends at step 12"]),
        (["--epochs", "5"], ["--epochs 5 ends the run at step 45", "pass --steps 12"]),
    ]:
        _unchanged(tmp_path, "sched.ckpt", ["--resume", *flags], *parts)
    for flags, part in [
        (["--warmup", "2"], "--warmup 2 applies only with --schedule"),
        (["--schedule", "warmup-cosine"], "--schedule warmup-cosine (checkpoint: constant)"),
    ]:
        _unchanged(tmp_path, "const.ckpt", ["--resume", *flags], part)


def _rewrite(path, change):
    """The checkpoint at `path` with its payload changed by `change` and hashed again (a
    well-formed file whose schedule fields disagree)."""
    envelope = json.loads(path.read_bytes())
    change(envelope["payload"])
    canonical = json.dumps(envelope["payload"], sort_keys=True, separators=(",", ":"))
    envelope["payload_sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
    rest = {k: v for k, v in envelope.items() if k not in ("payload", "envelope_sha256")}
    rest = json.dumps(rest, sort_keys=True, separators=(",", ":"))
    envelope["envelope_sha256"] = hashlib.sha256(rest.encode()).hexdigest()
    path.write_bytes(json.dumps(envelope, sort_keys=True, separators=(",", ":")).encode() + b"\n")


@pytest.mark.parametrize(
    "change, part",
    [
        (lambda p: p["data_schedule"].update(warmup=3), "differs from the state's lr_schedule"),
        (lambda p: p["data_schedule"].update(schedule="warmup-linear"), "differs from the state"),
        (lambda p: p["data_schedule"].update(schedule="cosine"), "data_schedule schedule must"),
        (lambda p: p["data_schedule"].pop("warmup"), "data_schedule schedule must"),
        (lambda p: [p["data_schedule"].pop(k) for k in ("schedule", "warmup")], "lacks"),
        (lambda p: p.pop("lr_schedule"), "differs from the state's lr_schedule None"),
    ],
)
def test_a_checkpoint_whose_schedule_fields_disagree_is_refused(tmp_path, change, part):
    args = ["--steps", "12", "--schedule", "warmup-cosine", "--warmup", "5"]
    ok(run_cli(["train", *args, "--checkpoint", "a.ckpt"], tmp_path))
    ok(run_cli(["train", *args, "--checkpoint", "b.ckpt"], tmp_path))
    _rewrite(tmp_path / "b.ckpt", change)
    assert ok(run_cli(["verify", "a.ckpt"], tmp_path))
    proc = run_cli(["verify", "b.ckpt"], tmp_path)
    assert proc.returncode == 1 and "INVALID" in proc.stdout and part in proc.stdout, proc.stdout
    _unchanged(tmp_path, "b.ckpt", ["--resume"], part)


def test_help_describes_the_options(tmp_path):
    text = " ".join(ok(run_cli(["train", "--help"], tmp_path)).stdout.split())
    for part in ("--schedule {constant,warmup-linear,warmup-cosine}", "--warmup N", "decay to 0"):
        assert part in text, part
