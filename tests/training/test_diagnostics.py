"""Optimizers against the max-margin limit of each norm (the NTP paper's App. B.2)."""

import warnings

import numpy as np
import pytest

from skntp import NTPDecoderClassifier
from skntp.datasets import make_ntp_data
from skntp.diagnostics import compare_optimizers, normalized_margin
from skntp.svm import ntp_svm_problem, solve_max_margin


@pytest.fixture(scope="module")
def comparison():
    X, y = make_ntp_data(n_samples=2000, n_contexts=20, n_features=30, n_tokens=8,
                         support_size=(1, 4), random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compare_optimizers(NTPDecoderClassifier(max_iter=3000, random_state=0), X, y)


def test_table_shape_and_the_optimality_of_each_limit(comparison):
    assert comparison["solvers"] == ["GD", "NGD", "Adam"]
    assert comparison["norms"] == ["fro", "max", "l1"]
    A, F = comparison["alignment"], comparison["margin_fraction"]
    assert A.shape == F.shape == (3, 3)
    # no W that meets the equalities has a larger normalized margin than the solution of
    # that norm (W - W* meets them as the finite part converges)
    assert np.all(F <= 1 + 1e-8) and np.all(F > 0)
    # gradient descent (GD, NGD) is closest to the Frobenius limit, as its theory says
    assert np.all(A[:2, 0] > A[:2, 1]) and np.all(A[:2, 0] > A[:2, 2])
    # normalized GD gets further along than GD at the same budget (App. B.2)
    assert F[1, 0] > F[0, 0]


def test_margin_fraction_is_one_at_each_limit_and_checked_by_hand(comparison):
    est = comparison["estimators"]["GD"]
    for norm, L in comparison["limits"].items():
        problem = ntp_svm_problem(est.contexts_, _support(est), norm=norm)
        size = {"fro": np.linalg.norm, "max": lambda w: np.abs(w).max(),
                "l1": lambda w: np.abs(w).sum()}[norm]
        assert normalized_margin(problem, L, norm) * size(L) == pytest.approx(1.0, abs=1e-8)
    # the Frobenius margin of GD's W - W*, from the paper's constraints (every pair)
    W = est.coef_ - est.finite_component_
    S = _support(est)
    logits = est.contexts_ @ W.T
    gaps = [logits[j, a] - logits[j, v] for j in range(len(S))
            for a in np.flatnonzero(S[j]) for v in np.flatnonzero(~S[j])]
    L = comparison["limits"]["fro"]
    expected = min(gaps) / np.linalg.norm(W) * np.linalg.norm(L)
    assert comparison["margin_fraction"][0, 0] == pytest.approx(expected, rel=1e-9)


def _support(est):
    probs = est._prepare(*_data(), None)["probs"]
    return np.asarray((probs > 0).todense() if hasattr(probs, "todense") else probs > 0)


def _data():
    return make_ntp_data(n_samples=2000, n_contexts=20, n_features=30, n_tokens=8,
                         support_size=(1, 4), random_state=0)


def test_custom_solvers_and_norms():
    X, y = _data()
    out = compare_optimizers(NTPDecoderClassifier(max_iter=50, random_state=0), X, y,
                             solvers={"big step": {"solver": "gd", "lr": 1.0}},
                             norms=("max",))
    assert out["alignment"].shape == (1, 1) and out["solvers"] == ["big step"]
    assert solve_max_margin(ntp_svm_problem(*_problem_data(), norm="max")).gap <= 1e-8


def _problem_data():
    est = NTPDecoderClassifier(max_iter=1, random_state=0)
    data = est._prepare(*_data(), None)
    return data["contexts"], (data["probs"] > 0)


def test_plot_optimizer_norms(comparison):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from skntp.plotting import plot_optimizer_norms

    axes = plot_optimizer_norms(comparison)
    assert len(axes) == 2 and len(axes[0].texts) == 9
    with pytest.raises(ValueError, match="must have shape"):
        plot_optimizer_norms({**comparison, "alignment": np.zeros((2, 2))})
