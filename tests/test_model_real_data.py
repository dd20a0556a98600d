"""`Trainer` on scikit-learn's bundled data (issue 35 "Real data"): a regressor on
`load_diabetes` reaches at least scikit-learn's `MLPRegressor` test R² on the same split, and a
`[Linear, GELU, LayerNorm, Dropout(0.1), Linear]` classifier on `load_breast_cancer` at least
the ReLU MLP's accuracy. Standardized features (training rows' statistics), 80/20 splits, five
seeds: the median is compared (single splits of a few hundred rows are noisy). Targets are
standardized too (R² does not change under the same affine map of predictions and truth)."""

import math
import random
import statistics
import warnings

import mojolearn as ml
import pytest
from mojolearn import nn

sklearn = pytest.importorskip("sklearn", reason="scikit-learn is not installed")
SEEDS = range(5)


def _split(n, seed):
    order = list(range(n))
    random.Random(seed).shuffle(order)
    cut = n - n // 5
    return order[:cut], order[cut:]


def _standardize(rows, train):
    cols = list(zip(*(rows[i] for i in train)))
    mean = [math.fsum(c) / len(c) for c in cols]
    sd = [math.sqrt(math.fsum((v - m) ** 2 for v in c) / len(c)) or 1.0 for c, m in zip(cols, mean)]
    return [[(v - m) / s for v, m, s in zip(r, mean, sd)] for r in rows]


def _fit(trainer, X, y, epochs, batch_size, seed):
    batches = ml.Batches(X, y, batch_size, seed=seed)
    for _ in range(epochs):
        for Xb, yb in batches:
            trainer.train_step(Xb, yb)
    return trainer


def _diabetes(seed):
    from sklearn.datasets import load_diabetes

    data = load_diabetes()
    rows, target = data.data.tolist(), data.target.tolist()
    train, test = _split(len(rows), seed)
    X = _standardize(rows, train)
    mean = math.fsum(target[i] for i in train) / len(train)
    sd = math.sqrt(math.fsum((target[i] - mean) ** 2 for i in train) / len(train))
    t = [(v - mean) / sd for v in target]
    return X, t, train, test


def _r2(pred, truth):
    mean = math.fsum(truth) / len(truth)
    return 1 - math.fsum((p - t) ** 2 for p, t in zip(pred, truth)) / math.fsum(
        (t - mean) ** 2 for t in truth
    )


def test_diabetes_regression_reaches_mlpregressors_r2():
    from sklearn.neural_network import MLPRegressor

    ours, theirs = [], []
    for seed in SEEDS:
        X, t, train, test = _diabetes(seed)
        Xtr = ml.Array.from_list([X[i] for i in train])
        ytr = ml.Array.from_list([[t[i]] for i in train])
        # MLPRegressor's default network (one hidden layer of 100 ReLU units), Adam(W) at its
        # lr; 20 epochs of 32 rows (its default runs 200 epochs of 200 rows)
        model = nn.Sequential(nn.Linear(10, 100), nn.ReLU(), nn.Linear(100, 1))
        trainer = ml.Trainer(model, input_shape=(10,), loss="mse", seed=seed, lr=1e-3)
        _fit(trainer, Xtr, ytr, epochs=20, batch_size=32, seed=seed)
        pred = trainer.predict(ml.Array.from_list([X[i] for i in test])).tolist()
        ours.append(_r2([p[0] for p in pred], [t[i] for i in test]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its ConvergenceWarning at the default max_iter
            reg = MLPRegressor(random_state=seed).fit([X[i] for i in train], [t[i] for i in train])
        theirs.append(_r2(reg.predict([X[i] for i in test]).tolist(), [t[i] for i in test]))
    print(
        f"diabetes test R² per seed: mojolearn {[round(v, 3) for v in ours]}, MLPRegressor {[round(v, 3) for v in theirs]}"
    )
    assert statistics.median(ours) >= statistics.median(theirs)


def _cancer_accuracy(model, seed):
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    rows, target = data.data.tolist(), [int(v) for v in data.target]
    train, test = _split(len(rows), seed)
    X = _standardize(rows, train)
    trainer = ml.Trainer(model, input_shape=(30,), seed=seed, lr=1e-3)
    _fit(
        trainer,
        ml.Array.from_list([X[i] for i in train]),
        ml.Array.from_list([target[i] for i in train], "<i4"),
        epochs=30,
        batch_size=32,
        seed=seed,
    )
    pred = trainer.predict(ml.Array.from_list([X[i] for i in test])).tolist()
    return sum(p == target[i] for p, i in zip(pred, test)) / len(test)


def test_breast_cancer_gelu_layernorm_dropout_matches_the_relu_mlp():
    gelu = [
        _cancer_accuracy(
            nn.Sequential(
                nn.Linear(30, 64), nn.GELU(), nn.LayerNorm(64), nn.Dropout(0.1), nn.Linear(64, 2)
            ),
            s,
        )
        for s in SEEDS
    ]
    relu = [
        _cancer_accuracy(nn.Sequential(nn.Linear(30, 64), nn.ReLU(), nn.Linear(64, 2)), s)
        for s in SEEDS
    ]
    print(f"breast_cancer test accuracy per seed: GELU/LayerNorm/Dropout {gelu}, ReLU MLP {relu}")
    assert statistics.median(gelu) >= statistics.median(relu)
