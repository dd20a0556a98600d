"""`mojolearn train --model SPEC` with conv and pool layers (issue 37): the bundled digits as
1x8x8 images train a CNN to >= 98 % test accuracy in about a second, a CSV of flattened
images takes `--image-shape C,H,W`, a run stopped by SIGKILL or SIGINT at a random step resumes
to the bits of an uninterrupted one, `mojolearn predict` reads flat rows, and bad SPECs and
image shapes are refused in one line (exit 2) with nothing written."""

import gzip
import json
import random
import signal

import pytest
from mojolearn.cli.data import DIGITS_FILE

from tests.test_cli import (
    _stop_at,
    assert_one_line_error,
    done_record,
    ok,
    run_cli,
)

CNN = "conv:16:3:1:1,relu,maxpool:2,conv:32:3:1:1,relu,maxpool:2,flatten,linear:10"
DIGITS = ["--dataset", "digits", "--model", CNN]
# Strides above 1 (im2col), both pools, overlapping windows: every path of the layers.
SMALL = "conv:6:3:2:1,relu,maxpool:2:1,conv:8:1,avgpool:2,flatten,linear:10"


def _digits_rows():
    """The bundled digits' rows as text: 64 pixel counts, then the digit."""
    with open(DIGITS_FILE, "rb") as f:
        return gzip.decompress(f.read()).decode("ascii").splitlines()


def _payload(path):
    return json.loads(path.read_bytes())["payload"]


def test_the_digits_cnn_reaches_98_percent_then_predict_reads_flat_rows(tmp_path):
    args = [*DIGITS, "--epochs", "20", "--batch-size", "32", "--lr", "0.002", "--json"]
    done = done_record(run_cli(["train", *args], tmp_path))
    assert done["step"] == 920 and done["test_accuracy"] >= 0.98, done
    state = _payload(tmp_path / "mojolearn-run.ckpt")
    assert state["model"]["input_shape"] == [1, 8, 8]
    assert state["data_schedule"]["model"] == CNN and "image_shape" not in state["data_schedule"]
    # Raw (unstandardized) flat rows, the label column there: the checkpoint standardizes them.
    rows = _digits_rows()[:300]
    (tmp_path / "new.csv").write_text("\n".join(rows) + "\n")
    proc = ok(run_cli(["predict", "mojolearn-run.ckpt", "--data", "new.csv", "--proba"], tmp_path))
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("prediction,proba_0,") and len(lines) == 301
    predicted = [int(line.split(",")[0]) for line in lines[1:]]
    right = sum(p == int(r.split(",")[64]) for p, r in zip(predicted, rows))
    assert right >= 0.98 * len(rows) and f"({right} of 300 rows)" in proc.stderr
    # The library's Trainer on the same checkpoint gives the same classes.
    import mojolearn as ml

    trainer = ml.Trainer.from_checkpoint(str(tmp_path / "mojolearn-run.ckpt"))
    flat = [[float(v) for v in r.split(",")[:64]] for r in rows]
    assert trainer.predict(flat).tolist() == predicted


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT"])
def test_a_cnn_run_resumes_after_a_signal_to_the_bits_of_one_run(tmp_path, seed, how):
    rng = random.Random(seed)
    # More steps after any stop than the pipe holds (a progress line a step): the child is
    # still running when the signal comes.
    end, every = 1200, rng.choice((7, 11, 16))
    common = [*DIGITS, "--steps", str(end), "--batch-size", "32", "--seed", str(seed % 1000)]
    common += ["--checkpoint-every", str(every)]
    full = done_record(run_cli(["train", *common, "--checkpoint", "full.ckpt", "--json"], tmp_path))
    seen, child = _stop_at(tmp_path, common, "run.ckpt", rng.randint(20, 400), getattr(signal, how))
    killed = how == "SIGKILL"
    assert child.returncode == (-signal.SIGKILL if killed else 128 + signal.SIGINT)
    stopped = _payload(tmp_path / "run.ckpt")["step"]
    assert stopped < end and (stopped % every == 0 if killed else stopped >= seen)
    resumed = run_cli(["train", "--resume", "--checkpoint", "run.ckpt", "--json"], tmp_path)
    assert done_record(resumed)["state_hash"] == full["state_hash"], f"seed {seed}: {how}"
    history = (tmp_path / "run.ckpt.history.jsonl").read_bytes()
    assert history == (tmp_path / "full.ckpt.history.jsonl").read_bytes()


def test_a_csv_of_flattened_images_with_image_shape_resumes_and_predicts(tmp_path):
    rows = _digits_rows()[:400]
    (tmp_path / "img.csv").write_text("\n".join(rows) + "\n")
    common = ["--data", "img.csv", "--model", SMALL, "--image-shape", "1,8,8", "--seed", "3"]
    full = done_record(
        run_cli(["train", *common, "--steps", "60", "--checkpoint", "f.ckpt", "--json"], tmp_path)
    )
    schedule = _payload(tmp_path / "f.ckpt")["data_schedule"]
    assert schedule["image_shape"] == [1, 8, 8] and schedule["model"] == SMALL
    assert _payload(tmp_path / "f.ckpt")["model"]["input_shape"] == [1, 8, 8]
    ok(run_cli(["train", *common, "--steps", "25", "--checkpoint", "r.ckpt"], tmp_path))
    before = (tmp_path / "r.ckpt").read_bytes()
    # Another shape on resume is refused by name, nothing changed; the recorded one is taken.
    other = ["train", "--resume", "--checkpoint", "r.ckpt", "--image-shape", "1,4,16"]
    assert_one_line_error(run_cli(other, tmp_path), "--image-shape [1, 4, 16] (checkpoint: ")
    assert (tmp_path / "r.ckpt").read_bytes() == before
    again = ["train", "--resume", "--checkpoint", "r.ckpt", "--steps", "60", "--json"]
    assert done_record(run_cli(again, tmp_path))["state_hash"] == full["state_hash"]
    (tmp_path / "flat.csv").write_text("\n".join(r.rsplit(",", 1)[0] for r in rows[:20]) + "\n")
    proc = ok(run_cli(["predict", "f.ckpt", "--data", "flat.csv"], tmp_path))
    assert proc.stdout.splitlines()[0] == "prediction" and len(proc.stdout.splitlines()) == 21


@pytest.mark.parametrize(
    "args,parts",
    [
        (["--image-shape", "1,8,7"], ["--image-shape 1,8,7 makes images of 56 values", "64"]),
        (["--image-shape", "1,8,8", "--model", "linear:10"], ["needs a --model SPEC with conv"]),
        (["--image-shape", "1,8,8", "--layers", "64,10"], ["needs a --model SPEC with conv"]),
        (["--image-shape", "1,8"], ["--image-shape", "expected C,H,W"]),
        (["--image-shape", "0,8,8"], ["--image-shape", "each in [1, 2**20]"]),
        (["--image-shape", "a,b,c"], ["--image-shape", "expected C,H,W"]),
    ],
)
def test_bad_image_shapes_are_refused_by_name_and_nothing_is_written(tmp_path, args, parts):
    (tmp_path / "img.csv").write_text("\n".join(_digits_rows()[:100]) + "\n")
    spec = [] if "--model" in args or "--layers" in args else ["--model", SMALL]
    proc = run_cli(["train", "--data", "img.csv", *spec, *args], tmp_path)
    assert_one_line_error(proc, *parts)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["img.csv"]


@pytest.mark.parametrize(
    "data,spec,parts",
    [
        (["--dataset", "digits"], "conv:8:9,flatten,linear:10", ["at character 1", "kernel 9x9"]),
        (["--dataset", "digits"], "conv:8:3,linear:10", ["at character 10", "one vector"]),
        ([], "conv:8:3,flatten,linear:3", ["at character 1", "image input (C, H, W)", "(8,)"]),
        (["--dataset", "digits"], "flatten,maxpool:2,linear:10", ["at character 9", "(64,)"]),
        (["--dataset", "digits"], "conv:8,flatten,linear:10", ["'conv:8'", "conv:OUT:K[:S[:P]]"]),
        (["--dataset", "digits"], "conv:8:3,maxpool:2:0,flatten,linear:10", ["maxpool:K[:S]"]),
        (
            ["--dataset", "digits"],
            "conv:8:3:1:1,residual(conv:4:1),flatten,linear:10",
            [
                "at character 14",
                "keep the shape (8, 8, 8) (they give shape (4, 8, 8))",
            ],
        ),
        (["--dataset", "digits", "--image-shape", "1,8,8"], CNN, ["applies to a --data CSV"]),
    ],
)
def test_bad_specs_are_refused_by_position_and_nothing_is_written(tmp_path, data, spec, parts):
    assert_one_line_error(run_cli(["train", *data, "--model", spec], tmp_path), *parts)
    assert list(tmp_path.iterdir()) == []


def test_a_spec_without_image_layers_reads_the_digits_as_vectors(tmp_path):
    """The digits' image shape is the input of a SPEC with conv or pool layers only: an MLP
    SPEC takes the 64 values as one vector, as before conv layers existed."""
    args = ["--dataset", "digits", "--model", "linear:32,relu,linear:10", "--steps", "5"]
    ok(run_cli(["train", *args], tmp_path))
    assert _payload(tmp_path / "mojolearn-run.ckpt")["model"]["input_shape"] == [64]


def test_a_cnn_checkpoints_onnx_export_standardizes_raw_images(tmp_path):
    """The standardization's per-pixel constants take the image's shape in the graph, so the
    exported CNN takes raw (n, 1, 8, 8) images and gives the trainer's outputs on raw rows."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import mojolearn as ml

    ok(run_cli(["train", "--dataset", "digits", "--model", SMALL, "--steps", "30"], tmp_path))
    trainer = ml.Trainer.from_checkpoint(str(tmp_path / "mojolearn-run.ckpt"))
    trainer.export_onnx(str(tmp_path / "cnn.onnx"))
    rows = [[float(v) for v in r.split(",")[:64]] for r in _digits_rows()[:50]]
    images = np.array(rows, dtype=np.float32).reshape(50, 1, 8, 8)
    session = ort.InferenceSession(str(tmp_path / "cnn.onnx"))
    got = session.run(None, {"input": images})[0]
    want = np.array(trainer.predict_logits(rows).tolist(), dtype=np.float32)
    assert got.shape == (50, 10) and np.allclose(got, want, rtol=1e-4, atol=1e-4)
