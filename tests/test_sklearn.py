"""`mojolearn.sklearn` (issue 36): scikit-learn estimators over `Trainer` that pass
`check_estimator`, work in Pipeline and GridSearchCV, take float64 and lists, and repeat their
bits for the same random_state. Skipped without scikit-learn (an optional extra)."""

import pickle
import warnings

import pytest

from tests.helpers import run_python

sklearn = pytest.importorskip("sklearn")
np = pytest.importorskip("numpy")

import mojolearn as ml  # noqa: E402
from mojolearn.sklearn import MLPClassifier, MLPRegressor  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.model_selection import GridSearchCV, train_test_split  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import check_estimator  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


@pytest.mark.parametrize("make", [MLPClassifier, MLPRegressor])
def test_check_estimator_passes_every_check(make):
    # No expected failures: every check scikit-learn runs passes (max_iter as scikit-learn's
    # own test suite sets it for its MLP estimators).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(make(max_iter=100), on_fail=None)
    failed = [(r["check_name"], str(r["exception"])) for r in results if r["status"] == "failed"]
    assert len(results) > 40 and failed == []


def test_importing_the_package_does_not_import_scikit_learn():
    out = run_python(
        "import sys, mojolearn\n"
        "mojolearn.Trainer, mojolearn.fit, mojolearn.nn\n"
        "print('sklearn' in sys.modules)\n"
    )
    assert out.strip() == "False"


def test_iris_with_string_labels_through_pipeline_and_grid_search():
    X, y = load_iris(return_X_y=True)
    names = load_iris().target_names[y]  # strings: classes_ maps them
    Xtr, Xte, ytr, yte = train_test_split(X, names, test_size=0.2, random_state=0, stratify=y)
    pipe = make_pipeline(StandardScaler(), MLPClassifier(max_iter=300, random_state=0))
    grid = {
        "mlpclassifier__hidden_layer_sizes": [(16,), (32, 16)],
        "mlpclassifier__alpha": [0, 1e-2],
    }
    search = GridSearchCV(pipe, grid, cv=3).fit(Xtr, ytr)
    best = search.best_estimator_[-1]
    assert list(best.classes_) == ["setosa", "versicolor", "virginica"]
    assert best.n_features_in_ == 4 and isinstance(best.trainer_, ml.Trainer)
    assert search.score(Xte, yte) >= 0.9
    proba = search.predict_proba(Xte)
    assert proba.shape == (len(Xte), 3) and np.allclose(proba.sum(axis=1), 1, atol=1e-6)
    assert set(search.predict(Xte)) <= set(best.classes_)
    assert len(best.loss_curve_) == best.n_iter_ and best.loss_curve_[-1] < best.loss_curve_[0]


def test_breast_cancer_through_pipeline_and_grid_search_and_cross_val_score():
    from sklearn.model_selection import cross_val_score

    X, y = load_breast_cancer(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)
    pipe = make_pipeline(StandardScaler(), MLPClassifier(max_iter=40, random_state=0))
    grid = {
        "mlpclassifier__activation": ["relu", "gelu"],
        "mlpclassifier__layer_norm": [False, True],
    }
    search = GridSearchCV(pipe, grid, cv=3).fit(Xtr, ytr)
    assert search.score(Xte, yte) >= 0.93
    scores = cross_val_score(clone(pipe), X, y, cv=3)
    assert len(scores) == 3 and min(scores) >= 0.9


def test_diabetes_r2_is_not_below_scikit_learns_mlp_on_the_same_split():
    from sklearn.neural_network import MLPRegressor as SkMLPRegressor

    X, y = load_diabetes(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=0)
    params = dict(learning_rate_init=1e-2, max_iter=200, random_state=0)
    ours = make_pipeline(StandardScaler(), MLPRegressor(**params)).fit(Xtr, ytr)
    theirs = make_pipeline(StandardScaler(), SkMLPRegressor(**params)).fit(Xtr, ytr)
    assert ours.score(Xte, yte) >= theirs.score(Xte, yte) > 0.2
    # And in a grid search over the regressor's parameters (R², scikit-learn's default score).
    pipe = make_pipeline(StandardScaler(), MLPRegressor(max_iter=50, random_state=0))
    grid = {
        "mlpregressor__learning_rate_init": [1e-3, 1e-2],
        "mlpregressor__activation": ["relu", "tanh"],
    }
    search = GridSearchCV(pipe, grid, cv=3).fit(Xtr, ytr)
    assert search.best_params_["mlpregressor__learning_rate_init"] == 1e-2
    assert search.predict(Xte).shape == (len(Xte),)


def test_the_same_random_state_gives_the_same_bits_and_float64_lists_float32_agree():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)[:200]
    y = y[:200]
    make = lambda rs: MLPClassifier((32,), max_iter=20, random_state=rs, activation="gelu")  # noqa: E731
    a, b = make(7).fit(X, y), make(7).fit(X.tolist(), y.tolist())
    c = make(7).fit(X.astype(np.float32), y)
    for other in (b, c):
        assert other.predict_proba(X).tobytes() == a.predict_proba(X).tobytes()
        assert other.loss_curve_ == a.loss_curve_
        assert other.trainer_.state_hash() == a.trainer_.state_hash()
    assert make(8).fit(X, y).trainer_.state_hash() != a.trainer_.state_hash()
    assert make(None).fit(X, y).trainer_.state_hash() == make(0).fit(X, y).trainer_.state_hash()
    twin = clone(a)
    assert twin.get_params() == a.get_params() and not hasattr(twin, "trainer_")
    assert twin.fit(X, y).predict_proba(X).tobytes() == a.predict_proba(X).tobytes()
    back = pickle.loads(pickle.dumps(a))
    assert back.predict_proba(X).tobytes() == a.predict_proba(X).tobytes()


def test_regressor_takes_2d_targets_and_the_options_build_the_network():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 5))
    Y = np.stack([X[:, 0] + X[:, 1], X[:, 2] * 2], axis=1)
    r = MLPRegressor((8, 8), layer_norm=True, dropout=0.1, max_iter=30, random_state=1).fit(X, Y)
    assert r.predict(X).shape == (60, 2) and r.predict(X).dtype == np.float64
    layers = [type(layer).__name__ for layer in r.trainer_.model]
    assert layers == ["Linear", "LayerNorm", "ReLU", "Dropout"] * 2 + ["Linear"]
    assert r.trainer_.loss == "mse" and r.trainer_.weight_decay == r.alpha


def test_early_stopping_keeps_the_best_epoch_and_stops_on_no_change():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    c = MLPClassifier(
        (16,), early_stopping=True, n_iter_no_change=3, max_iter=200, random_state=0
    ).fit(X, y)
    scores = c.validation_scores_
    assert c.n_iter_ < 200 and len(scores) == c.n_iter_
    assert c.best_validation_score_ == max(scores)
    c2 = MLPClassifier((16,), tol=1e9, n_iter_no_change=2, max_iter=50, random_state=0).fit(X, y)
    assert c2.n_iter_ == 4  # as scikit-learn's: the first epoch, then n_iter_no_change + 1 more


def test_bad_parameters_and_another_numeric_mode_are_refused():
    X, y = [[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], [0, 1, 1]
    other = "fast" if ml.numeric_mode_used() == "identical" else "identical"
    with pytest.raises(ValueError, match=f"mode='{other}': the numeric mode is fixed"):
        MLPClassifier(mode=other).fit(X, y)
    for bad, words in (
        (dict(activation="softplus"), "activation must be one of"),
        (dict(mode="exact"), "mode must be 'identical' or 'fast'"),
        (dict(batch_size=0), "batch_size must be 'auto' or an int >= 1"),
        (dict(hidden_layer_sizes=(4, 0)), "hidden_layer_sizes must be ints >= 1"),
        (dict(alpha=-1.0), "alpha is out of range"),
    ):
        with pytest.raises(ValueError, match=words):
            MLPClassifier(**bad).fit(X, y)
    with pytest.raises(ValueError, match="X must fit in float32"):
        MLPRegressor(max_iter=1).fit([[1e39, 0.0], [0.0, 1.0]], [0.0, 1.0])
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        MLPClassifier(max_iter=1).fit(X, y)


def test_partial_fit_runs_one_epoch_a_call_and_repeats_its_bits():
    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    names = load_iris().target_names[y]
    make = lambda: MLPClassifier((16,), random_state=3, batch_size=32)  # noqa: E731
    with pytest.raises(ValueError, match="classes must be passed on the first call"):
        make().partial_fit(X, names)
    a, b = make(), make()
    for start in range(0, 150, 50):  # the rows come in three chunks, twice over
        for est in (a, b):
            est.partial_fit(X[start : start + 50], names[start : start + 50], classes=names)
    a.partial_fit(X, names)
    b.partial_fit(X.tolist(), names.tolist())
    assert a.n_iter_ == len(a.loss_curve_) == 4 and list(a.classes_) == sorted(set(names))
    assert a.trainer_.state_hash() == b.trainer_.state_hash()
    assert a.trainer_.step_ == 3 * 2 + 5  # 50 rows: 2 batches of 32; 150 rows: 5
    with pytest.raises(ValueError, match="y holds labels not in classes"):
        a.partial_fit(X[:2], ["setosa", "rose"])
    with pytest.raises(ValueError, match="X has 3 features"):
        a.partial_fit(X[:, :3], names)
    r = MLPRegressor((8,), random_state=0).partial_fit(X, y.astype(float))
    r.partial_fit(X, y.astype(float))
    assert r.n_iter_ == 2 and r.predict(X).shape == (150,)
    with pytest.raises(ValueError, match="y has 2 outputs, the fitted network 1"):
        r.partial_fit(X, np.stack([y, y], axis=1).astype(float))
