"""Tests of bnnzoo.data: built-in data sets, the csv loader and check_data."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
import torch

from bnnzoo.data import DATASETS, Dataset, check_data, load

BUILTIN = ["cosine", "linear_p1000", "digits", "group_sparse_regression", "group_sparse_classification", "diabetes",
           "breast_cancer", "wine"]


# ----------------------------------------------------------------------------
# registry and load()


def test_registry_names():
    assert sorted(DATASETS) == ["breast_cancer", "cosine", "csv", "diabetes", "digits", "group_sparse_classification",
                               "group_sparse_regression", "linear_p1000", "wine"]


def test_unknown_name_lists_valid_names():
    msg = ("dataset 'cosin': unknown name; choose one of breast_cancer, cosine, csv, diabetes, digits, "
           "group_sparse_classification, group_sparse_regression, linear_p1000, wine")
    with pytest.raises(ValueError, match=re.escape(msg)):
        load("cosin")


def test_unknown_keyword_is_named():
    with pytest.raises(ValueError, match=r"dataset 'cosine': unknown keyword 'n_trian'.*n_train"):
        load("cosine", n_trian=10)


@pytest.mark.parametrize("seed", [-1, 1.5, "0", True])
def test_bad_seed(seed):
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        load("cosine", seed=seed)


@pytest.mark.parametrize(
    "name, kw, match",
    [
        ("cosine", {"n_train": 0}, r"n_train must be a positive integer; got 0"),
        ("cosine", {"noise": -0.1}, r"noise must be in \[0.0, inf\); got -0.1"),
        ("linear_p1000", {"rho": 1.0}, r"rho must be in \(-1.0, 1.0\); got 1.0"),
        ("linear_p1000", {"p": 2}, r"p must be >= 3"),
        ("digits", {"test_fraction": 1.0}, r"test_fraction must be in \(0.0, 1.0\)"),
        ("digits", {"n_train": 5000}, r"n_train=5000 exceeds the 1437 training images"),
        ("digits", {"classes": (3, 3)}, r"classes must be >= 2 distinct digits"),
        ("digits", {"classes": (1, 10)}, r"got \(1, 10\)"),
        ("group_sparse_regression", {"p": 4}, r"p must be >= 5"),
        ("group_sparse_classification", {"n_test": 0}, r"n_test must be a positive integer"),
        ("diabetes", {"test_fraction": 0.0}, r"dataset 'diabetes': test_fraction must be in \(0.0, 1.0\); got 0.0"),
        ("breast_cancer", {"test_fraction": 1.5}, r"dataset 'breast_cancer': test_fraction must be in"),
        ("wine", {"test_fraction": "a"}, r"dataset 'wine': test_fraction"),
        ("wine", {"test_fraction": 0.005}, r"dataset 'wine': cannot split with test_fraction=0.005"),
    ],
)
def test_bad_option_values(name, kw, match):
    with pytest.raises(ValueError, match=match):
        load(name, **kw)


# ----------------------------------------------------------------------------
# shapes, dtypes, reproducibility (all built-in data sets)


@pytest.mark.parametrize(
    "name, task, n_train, n_test, d, num_classes",
    [
        ("cosine", "regression", 100, 100, 1, None),
        ("linear_p1000", "regression", 100, 50, 1000, None),
        ("digits", "classification", 1437, 360, 64, 10),
        ("group_sparse_regression", "regression", 10240, 1024, 1000, None),
        ("group_sparse_classification", "classification", 10240, 1024, 1000, 2),
        ("diabetes", "regression", 353, 89, 10, None),
        ("breast_cancer", "classification", 455, 114, 30, 2),
        ("wine", "classification", 142, 36, 13, 3),
    ],
)
def test_shapes_and_dtypes(name, task, n_train, n_test, d, num_classes):
    data = load(name)
    assert isinstance(data, Dataset)
    assert (data.name, data.task, data.num_classes) == (name, task, num_classes)
    assert data.x_train.shape == (n_train, d) and data.x_test.shape == (n_test, d)
    assert data.y_train.shape == (n_train,) and data.y_test.shape == (n_test,)
    assert data.input_dim == d and (data.n_train, data.n_test) == (n_train, n_test)
    assert data.x_train.dtype == data.x_test.dtype == torch.float32
    y_dtype = torch.int64 if task == "classification" else torch.float32
    assert data.y_train.dtype == data.y_test.dtype == y_dtype
    assert data.describe().startswith(f"{name}: {task}")
    assert f"{n_train} train / {n_test} test, input_dim={d}" in data.describe()
    assert repr(data) == f"Dataset({data.describe()})"


def test_default_dtype_is_followed():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        data = load("cosine")
    finally:
        torch.set_default_dtype(old)
    assert data.x_train.dtype == data.y_train.dtype == torch.float64


def _tensors(data: Dataset) -> list[torch.Tensor]:
    return [data.x_train, data.y_train, data.x_test, data.y_test]


@pytest.mark.parametrize("name", BUILTIN)
def test_same_seed_same_data_other_seed_other_data(name):
    a, b, c = load(name, seed=3), load(name, seed=3), load(name, seed=4)
    for ta, tb in zip(_tensors(a), _tensors(b)):
        assert torch.equal(ta, tb)
    assert not torch.equal(a.x_train, c.x_train)
    assert not torch.equal(a.x_test, c.x_test)


@pytest.mark.parametrize("name", BUILTIN)
def test_global_rngs_untouched(name):
    torch_state = torch.random.get_rng_state()
    np_state = np.random.get_state()[1].copy()
    load(name, seed=1)
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    assert np.array_equal(np.random.get_state()[1], np_state)


# ----------------------------------------------------------------------------
# cosine


def test_cosine_range_and_noise_level():
    n, noise = 20000, 0.1
    data = load("cosine", seed=0, n_train=n, n_test=10, noise=noise)
    x, y = data.x_train[:, 0].double(), data.y_train.double()
    assert x.min() >= 0.0 and x.max() <= 4.0
    assert x.min() < 0.01 and x.max() > 3.99  # covers the interval
    resid_std = float((y - torch.cos(x)).std())
    se = noise / math.sqrt(2 * (n - 1))  # standard error of a Gaussian sample std
    assert abs(resid_std - noise) < 5 * se
    assert data.meta["noise"] == noise


def test_cosine_noiseless_and_independent_test_stream():
    data = load("cosine", n_train=50, n_test=50, noise=0.0)
    torch.testing.assert_close(data.y_train, torch.cos(data.x_train[:, 0]))
    assert not torch.equal(data.x_train, data.x_test)


# ----------------------------------------------------------------------------
# linear_p1000


def test_linear_p1000_beta():
    data = load("linear_p1000")
    beta = torch.as_tensor(data.meta["beta"])
    assert beta.shape == (1000,)
    assert beta[:3].tolist() == [3.0, 2.0, 1.0] and not beta[3:].any()
    assert data.meta["support"] == [0, 1, 2]


def test_linear_p1000_covariance_and_noise():
    n, p, rho, noise_var = 20000, 6, 0.6, 3.0
    data = load("linear_p1000", seed=1, n_train=n, n_test=5, p=p, rho=rho, noise_var=noise_var)
    x = data.x_train.double().numpy()
    corr = np.corrcoef(x, rowvar=False)
    se_rho = (1 - rho**2) / math.sqrt(n)  # s.e. of a sample correlation
    for j in range(p - 1):
        assert abs(corr[j, j + 1] - rho) < 5 * se_rho
        assert abs(x[:, j].var() - 1.0) < 5 * math.sqrt(2 / n)
    lag2 = np.diagonal(corr, offset=2)
    assert np.all(np.abs(lag2 - rho**2) < 5 * (1 - rho**4) / math.sqrt(n))
    beta = torch.as_tensor(data.meta["beta"], dtype=torch.float64)
    resid = data.y_train.double() - data.x_train.double() @ beta
    assert abs(float(resid.var()) - noise_var) < 5 * noise_var * math.sqrt(2 / n)


# ----------------------------------------------------------------------------
# group-sparse problems (paper 004)


def test_group_sparse_inputs_targets_and_labels():
    n = 20000
    data = load("group_sparse_regression", seed=2, n_train=n, n_test=5, p=8, noise=1.0)
    x = data.x_train.double().numpy()
    corr = np.corrcoef(x, rowvar=False)
    off = corr[~np.eye(8, dtype=bool)]
    assert np.all(np.abs(off - 0.5) < 5 * 0.75 / math.sqrt(n))  # every pair correlated 0.5
    assert np.all(np.abs(x.var(0) - 1.0) < 5 * math.sqrt(2 / n))
    f = (np.tanh(2 * np.tanh(2 * x[:, 0] - x[:, 1])) + 2 * np.tanh(np.tanh(x[:, 2] - 2 * x[:, 3]))
         - np.tanh(2 * x[:, 4]))
    resid = data.y_train.double().numpy() - f
    assert abs(resid.var() - 1.0) < 5 * math.sqrt(2 / n) and abs(resid.mean()) < 5 / math.sqrt(n)
    assert data.meta["support"] == [0, 1, 2, 3, 4]
    cls = load("group_sparse_classification", seed=2, n_train=2000, n_test=5, p=8)
    xc = cls.x_train.double().numpy()
    label = np.exp(xc[:, 0]) + xc[:, 1] ** 2 + 5 * np.sin(xc[:, 2] * xc[:, 3]) - 3 > 0
    assert np.array_equal(cls.y_train.numpy(), label.astype(np.int64))
    assert 0.3 < label.mean() < 0.7 and cls.meta["support"] == [0, 1, 2, 3]


# ----------------------------------------------------------------------------
# digits


def test_digits_standardised_on_train():
    data = load("digits")
    x = data.x_train.double()
    const = torch.as_tensor(data.meta["std"]) == 1.0
    assert x.shape[1] == 64 and const.any()  # the digits have blank border pixels
    torch.testing.assert_close(x.mean(0), torch.zeros(64, dtype=torch.float64), atol=1e-5, rtol=0)
    std = x.std(0, unbiased=False)
    varying = std > 0
    torch.testing.assert_close(std[varying], torch.ones_like(std[varying]), atol=1e-4, rtol=0)
    assert data.meta["image_shape"] == (1, 8, 8)
    assert data.x_test.mean(0).abs().max() > 1e-3  # test set not standardised by itself


def test_digits_stratified_split_and_subsample():
    data = load("digits", seed=2)
    assert set(data.y_train.tolist()) == set(data.y_test.tolist()) == set(range(10))
    assert data.n_test == math.ceil(0.2 * 1797)
    small = load("digits", seed=2, n_train=50)
    assert small.n_train == 50 and small.n_test == data.n_test
    assert torch.bincount(small.y_train, minlength=10).tolist() == [5] * 10


def test_digits_class_subset_relabels_in_given_order():
    from sklearn.datasets import load_digits

    data = load("digits", classes=(7, 1))
    assert data.num_classes == 2 and data.meta["classes"] == (7, 1)
    assert set(data.y_train.tolist()) == {0, 1}
    images, labels = load_digits(return_X_y=True)
    pixels = data.x_train.double().numpy() * data.meta["std"] + data.meta["mean"]
    pixels = np.round(pixels).astype(int)
    for label, digit in enumerate((7, 1)):
        originals = {tuple(row) for row in images[labels == digit].astype(int)}
        rows = pixels[data.y_train.numpy() == label]
        assert all(tuple(row) in originals for row in rows)


# ----------------------------------------------------------------------------
# scikit-learn's tabular data sets


def _assert_standardised(x: torch.Tensor) -> None:
    x = x.double()
    torch.testing.assert_close(x.mean(0), torch.zeros(x.shape[1], dtype=torch.float64), atol=1e-5, rtol=0)
    torch.testing.assert_close(x.std(0, unbiased=False), torch.ones(x.shape[1], dtype=torch.float64), atol=1e-4,
                               rtol=0)


def test_diabetes_standardised_with_its_scaling_recorded():
    from sklearn.datasets import load_diabetes

    data = load("diabetes")
    _assert_standardised(data.x_train)
    _assert_standardised(data.y_train[:, None])
    raw_x, raw_y = load_diabetes(return_X_y=True, scaled=False)
    # back in the original units, every row is one of scikit-learn's
    y = data.y_test.double().numpy() * data.meta["y_std"] + data.meta["y_mean"]
    x = data.x_test.double().numpy() * data.meta["std"] + data.meta["mean"]
    raw, back = np.column_stack([raw_x, raw_y]), np.column_stack([x, y])
    nearest = np.abs(back[:, None, :] - raw[None, :, :]).max(-1).min(1)  # float32 round-off only
    assert nearest.max() < 1e-3
    assert data.n_train + data.n_test == len(raw_y)


@pytest.mark.parametrize("name, counts", [("breast_cancer", (212, 357)), ("wine", (59, 71, 48))])
def test_tabular_classification_stratified_and_standardised(name, counts):
    data = load(name, seed=1)
    _assert_standardised(data.x_train)
    total = torch.bincount(torch.cat([data.y_train, data.y_test]), minlength=len(counts))
    assert total.tolist() == list(counts)
    share_train = torch.bincount(data.y_train).double() / data.n_train
    share_test = torch.bincount(data.y_test).double() / data.n_test
    assert (share_train - share_test).abs().max() < 0.05  # stratified
    assert len(data.meta["class_names"]) == data.num_classes == len(counts)
    assert data.x_test.double().mean(0).abs().max() > 1e-3  # test set scaled by the training split's statistics


# ----------------------------------------------------------------------------
# csv


@pytest.fixture
def regression_csv(tmp_path):
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.normal(size=40), "b": rng.integers(0, 5, size=40)})
    df["target"] = 2.0 * df["a"] - df["b"] + 0.5  # float, > 20 distinct values
    path = tmp_path / "reg.csv"
    df.to_csv(path, index=False)
    return path, df


def _rows(x: torch.Tensor, y: torch.Tensor) -> list[tuple[float, ...]]:
    return sorted(tuple(r) for r in torch.cat([x, y[:, None].to(x.dtype)], 1).tolist())


def test_csv_regression_round_trip(regression_csv):
    path, df = regression_csv
    data = load("csv", seed=0, path=path, target="target")
    assert data.task == "regression" and data.num_classes is None
    assert data.meta["feature_names"] == ["a", "b"] and data.meta["target"] == "target"
    assert (data.n_train, data.n_test) == (32, 8)
    expected = torch.as_tensor(df[["a", "b", "target"]].to_numpy(), dtype=torch.float32)
    got = torch.cat([data.x_train, data.x_test])
    got = torch.cat([got, torch.cat([data.y_train, data.y_test])[:, None]], 1)
    assert sorted(map(tuple, got.tolist())) == sorted(map(tuple, expected.tolist()))
    again = load("csv", seed=0, path=path, target="target")
    other = load("csv", seed=1, path=path, target="target")
    assert torch.equal(again.x_test, data.x_test) and not torch.equal(other.x_test, data.x_test)


def test_csv_with_test_file_keeps_order(tmp_path, regression_csv):
    path, df = regression_csv
    test_path = tmp_path / "test.csv"
    df.iloc[:5][["target", "b", "a"]].to_csv(test_path, index=False)  # columns reordered
    data = load("csv", path=path, target="target", test_path=test_path)
    assert (data.n_train, data.n_test) == (40, 5)
    expected = torch.as_tensor(df[["a", "b"]].to_numpy()[:5], dtype=torch.float32)
    assert torch.equal(data.x_test, expected)
    all_x = torch.as_tensor(df[["a", "b"]].to_numpy(), dtype=torch.float32)
    assert torch.equal(data.x_train, all_x)


def test_csv_classification_with_text_labels(tmp_path):
    df = pd.DataFrame({"u": np.arange(30.0), "species": ["setosa", "virginica", "versicolor"] * 10})
    df.to_csv(tmp_path / "c.csv", index=False)
    data = load("csv", path=tmp_path / "c.csv", target="species", test_fraction=0.3)
    assert data.task == "classification" and data.num_classes == 3
    assert data.meta["classes"] == ["setosa", "versicolor", "virginica"]
    assert data.y_train.dtype == torch.int64 and data.n_test == 9
    # u = 0, 3, 6, ... is setosa (label 0); u = 1, 4, ... virginica (label 2)
    u = torch.cat([data.x_train, data.x_test])[:, 0].long()
    y = torch.cat([data.y_train, data.y_test])
    assert torch.equal(y, torch.tensor([0, 2, 1])[u % 3])


def test_csv_task_inference_for_integer_targets(tmp_path):
    df = pd.DataFrame({"u": np.arange(60.0), "k": np.arange(60) % 4 + 10, "n": np.arange(60)})
    df.to_csv(tmp_path / "i.csv", index=False)
    few = load("csv", path=tmp_path / "i.csv", target="k")
    assert few.task == "classification" and few.meta["classes"] == [10, 11, 12, 13]
    assert few.num_classes == 4 and set(few.y_train.tolist()) <= {0, 1, 2, 3}
    many = load("csv", path=tmp_path / "i.csv", target="n")  # 60 distinct integers
    assert many.task == "regression" and many.y_train.dtype == torch.float32
    forced = load("csv", path=tmp_path / "i.csv", target="k", task="regression")
    assert forced.task == "regression"


def test_csv_missing_file(tmp_path):
    path = tmp_path / "absent.csv"
    with pytest.raises(FileNotFoundError, match=re.escape(str(path))):
        load("csv", path=path)


def test_csv_missing_target_column(regression_csv):
    path, _ = regression_csv
    match = r"target column 'y' not found.*available columns: 'a', 'b', 'target'"
    with pytest.raises(ValueError, match=match):
        load("csv", path=path)


def test_csv_non_numeric_feature(tmp_path):
    df = pd.DataFrame({"a": [1.0, 2.0, 3.0], "colour": ["red", "blue", "red"]})
    df["y"] = [0.1, 0.2, 0.3]
    df.to_csv(tmp_path / "s.csv", index=False)
    with pytest.raises(ValueError, match=r"column 'colour' .* is not numeric"):
        load("csv", path=tmp_path / "s.csv")


def test_csv_nan_names_columns(tmp_path):
    df = pd.DataFrame(
        {"a": [1.0, np.nan, 3.0, 4.0], "b": [1.0, 2.0, 3.0, 4.0], "y": [0.5, 1.5, np.nan, np.nan]}
    )
    df.to_csv(tmp_path / "n.csv", index=False)
    match = r"NaN/missing .* column\(s\) 'a' \(1 row\), 'y' \(2 rows\)"
    with pytest.raises(ValueError, match=match):
        load("csv", path=tmp_path / "n.csv")


def test_csv_requires_path():
    with pytest.raises(ValueError, match="path is required"):
        load("csv")


# ----------------------------------------------------------------------------
# check_data


def test_check_data_converts():
    x, y = check_data(np.arange(6).reshape(3, 2), [[1], [2], [3]], task="regression")
    assert x.dtype == y.dtype == torch.float32 and x.shape == (3, 2) and y.shape == (3,)
    x, y = check_data(
        [0.5, 1.0], np.array([1.0, 0.0]), task="classification", input_dim=1, num_classes=2
    )
    assert x.shape == (2, 1) and y.dtype == torch.int64 and y.tolist() == [1, 0]


def test_check_data_returns_conforming_tensors_unchanged():
    x, y = torch.randn(4, 2), torch.randn(4)
    x2, y2 = check_data(x, y, task="regression", input_dim=2)
    assert x2 is x and y2 is y


@pytest.mark.parametrize(
    "x, y, kw, match",
    [
        (
            np.where(np.arange(20).reshape(10, 2) % 7 == 0, np.nan, 1.0),
            np.zeros(10),
            {},
            r"^train: x has 3 non-finite values \(first at row 0, column 0\)$",
        ),
        (
            np.ones((4, 2)),
            [0.0, 1.0, np.inf, 2.0],
            {},
            r"train: y has 1 non-finite value \(first at row 2\)",
        ),
        (np.ones((100, 1)), np.ones(99), {}, r"train: x has 100 rows but y has 99"),
        (
            np.ones((5, 3)),
            np.ones(5),
            {"input_dim": 1},
            r"x has 3 columns but the model expects input_dim=1",
        ),
        (np.ones(5), np.ones(5), {"input_dim": 2}, r"x must be 2-D \[N, d\]; got shape \(5,\)"),
        (np.ones((5, 2, 2)), np.ones(5), {}, r"x must be 2-D \[N, d\]; got shape \(5, 2, 2\)"),
        (np.ones((0, 2)), np.ones(0), {}, r"x is empty \(shape \(0, 2\)\)"),
        (np.ones((3, 2)), np.ones((3, 2)), {}, r"y must have shape \[N\] or \[N, 1\]; got \(3,"),
        (np.ones((2, 2)), ["a", "b"], {}, r"y must be numeric"),
    ],
)
def test_check_data_refuses_regression(x, y, kw, match):
    with pytest.raises(ValueError, match=match):
        check_data(x, y, task="regression", name="train", **kw)


@pytest.mark.parametrize(
    "y, match",
    [
        ([0, 3, 11, 2], r"train: labels must be in \[0, 10\); found 11"),
        ([0, -1, 12, 13], r"labels must be in \[0, 10\); found -1, 12, 13"),
        ([0.0, 1.5, 2.0, 1.0], r"labels must be integers; found 1.5 \(row 1\)"),
        ([0.0, np.nan, 2.0, 1.0], r"y has 1 non-finite value \(first at row 1\)"),
    ],
)
def test_check_data_refuses_labels(y, match):
    with pytest.raises(ValueError, match=match):
        check_data(np.ones((4, 2)), y, task="classification", num_classes=10, name="train")


def test_check_data_negative_labels_without_num_classes():
    with pytest.raises(ValueError, match=r"labels must be non-negative; found -2"):
        check_data(np.ones((2, 1)), [0, -2], task="classification")


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"task": "regresion"}, r"task must be one of regression, classification; got 'regresion'"),
        ({"task": "regression", "input_dim": 0}, r"input_dim must be a positive integer; got 0"),
        ({"task": "classification", "num_classes": 2.5}, r"num_classes must be a positive integer"),
    ],
)
def test_check_data_refuses_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        check_data(np.ones((2, 1)), [0, 1], **kw)


def test_dataset_validates_fields():
    x, y = torch.zeros(3, 2), torch.zeros(3)
    with pytest.raises(ValueError, match="classification requires num_classes"):
        Dataset("toy", "classification", x, y.long(), x, y.long())
    match = r"toy/test: x has 1 columns but the model expects input_dim=2"
    with pytest.raises(ValueError, match=match):
        Dataset("toy", "regression", x, y, torch.zeros(3, 1), y)
    data = Dataset("toy", "classification", x, [0, 1, 1], x, [1, 0, 0], num_classes=2)
    assert data.y_train.dtype == torch.int64
    assert data.describe() == "toy: classification, 2 classes, 3 train / 3 test, input_dim=2"


def test_data_far_from_unit_scale_get_a_one_line_warning():
    import warnings

    import torch

    from bnnzoo.data.checks import scale_warning
    from bnnzoo.inference import run
    from bnnzoo.models import zoo

    g = torch.Generator().manual_seed(0)
    x = torch.rand(30, 1, generator=g) * 4
    y = torch.cos(x[:, 0])
    assert scale_warning(x, y, "regression") is None
    raw = 300 + 77 * y / y.std()  # a target on its raw scale, sd 77
    message = scale_warning(x, raw, "regression", "data 'user'")
    assert message.startswith("data 'user': far from unit scale (the target has mean 2") and "and sd 77)" in message
    assert "\n" not in message
    assert "input column(s) (0)" in scale_warning(x * 1000, y, "regression")
    assert scale_warning(x, torch.zeros(30, dtype=torch.long), "classification") is None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = run(zoo.cosine_mlp(hidden=2), (x, raw), engine="rwmh", num_samples=3, warmup_steps=3, progress=False)
    assert [str(w.message) for w in caught if "far from unit scale" in str(w.message)] == [r.notes["data_scale"]]
