"""NTPDecoderClassifier against the theory of Thrampoulidis (2024)."""

import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.svm import LinearSVC
from sklearn.utils.estimator_checks import parametrize_with_checks

from skntp import NTPDecoderClassifier
from skntp.datasets import make_ntp_2d_example, make_ntp_data, ntp_from_sequences
from skntp.decoder import aggregate_contexts
from skntp.metrics import alignment
from skntp.svm import NotSeparableError, finite_component, ntp_svm, ntp_svm_problem
from skntp.svm._core import constraint_violation

SEEDS = [0, 1, 2]


def _small(seed, m=12, d=16, V=7, s=(1, 4), n=400):
    return make_ntp_data(n_samples=n, n_contexts=m, n_features=d, n_tokens=V,
                         support_size=s, random_state=seed)


def _aggregated(seed, **kw):
    X, y = _small(seed, **kw)
    classes, inv = np.unique(y, return_inverse=True)
    Y = sp.csr_matrix((np.ones(len(y)), (np.arange(len(y)), inv)))
    H, pi, P, _ = aggregate_contexts(X, Y)
    return X, y, H, pi, P


@pytest.mark.parametrize("seed", SEEDS)
def test_mm_direction_matches_independent_cvxpy(seed):
    import cvxpy as cp

    X, y, H, pi, P = _aggregated(seed)
    est = NTPDecoderClassifier(solver="svm").fit(X, y)
    S = P.toarray() > 0
    m, V = S.shape
    W = cp.Variable((V, H.shape[1]))
    cons = []
    for j in range(m):
        z = np.flatnonzero(S[j])[0]
        for v in range(V):
            diff = (W[z] - W[v]) @ H[j]
            if S[j, v] and v != z:
                cons.append(diff == 0)
            elif not S[j, v]:
                cons.append(diff >= 1)
    cp.Problem(cp.Minimize(cp.sum_squares(W)), cons).solve(solver=cp.CLARABEL)
    ref = W.value / np.linalg.norm(W.value)
    assert alignment(est.mm_direction_, ref) >= 0.9999
    assert np.isclose(np.linalg.norm(est.mm_direction_), 1.0)
    assert np.isclose(est.mm_margin_, 1 / np.linalg.norm(W.value), rtol=1e-4)


@pytest.mark.parametrize("seed", SEEDS)
def test_one_hot_matches_crammer_singer(seed):
    rng = np.random.default_rng(seed)
    m, d, V = 40, 30, 5
    X = rng.standard_normal((m, d))
    y = rng.integers(0, V, m)
    y[:V] = np.arange(V)
    est = NTPDecoderClassifier(solver="svm").fit(X, y)
    svc = LinearSVC(multi_class="crammer_singer", fit_intercept=False, C=1e6,
                    tol=1e-10, max_iter=200_000).fit(X, y)
    # Crammer-Singer is invariant to adding a common vector to every row;
    # the NTP-SVM picks the minimum-norm representative (rows sum to zero).
    cs = svc.coef_ - svc.coef_.mean(axis=0)
    assert alignment(est.mm_direction_, cs) >= 0.999
    assert est.finite_component_ is not None
    assert np.allclose(est.finite_component_, 0)  # F = {0} for one-hot data
    assert est.entropy_ == 0.0


@pytest.mark.parametrize("seed", SEEDS)
def test_finite_component_is_min_norm_solution_in_F(seed):
    X, y, H, pi, P = _aggregated(seed)
    Pd = P.toarray()
    Wstar = finite_component(H, Pd)
    L = H @ Wstar.T
    # eq. (3): log-odds are matched on every support
    for j in range(H.shape[0]):
        s = np.flatnonzero(Pd[j])
        lo = L[j, s] - L[j, s].mean()
        lp = np.log(Pd[j, s]) - np.log(Pd[j, s]).mean()
        assert np.allclose(lo, lp, atol=1e-8)
    # lies in F: orthogonal to F-perp, which contains W^mm (eq. (4a))
    Wmm = ntp_svm(H, Pd > 0)
    assert abs(np.sum(Wstar * Wmm)) <= 1e-8 * np.linalg.norm(Wstar) * np.linalg.norm(Wmm)
    # minimum norm: independent pseudo-inverse solution of the same equations
    rows, rhs = [], []
    V, d = Pd.shape[1], H.shape[1]
    for j in range(H.shape[0]):
        s = np.flatnonzero(Pd[j])
        for z in s[1:]:
            a = np.zeros((V, d))
            a[z] += H[j]
            a[s[0]] -= H[j]
            rows.append(a.ravel())
            rhs.append(np.log(Pd[j, z] / Pd[j, s[0]]))
    ref = (np.linalg.pinv(np.array(rows)) @ np.array(rhs)).reshape(V, d)
    assert np.allclose(Wstar, ref, atol=1e-8)


@pytest.mark.parametrize("seed", SEEDS)
def test_mm_direction_lies_in_F_perp(seed):
    X, y, H, pi, P = _aggregated(seed)
    est = NTPDecoderClassifier(solver="svm").fit(X, y)
    L = H @ est.mm_direction_.T
    S = P.toarray() > 0
    for j in range(H.shape[0]):
        assert np.ptp(L[j, S[j]]) <= 1e-7  # (4a): equal logits on the support
    prob = ntp_svm_problem(H, S)
    assert constraint_violation(prob, est.mm_direction_ / est.mm_margin_) <= 1e-6


def test_gd_paper_settings_follow_theorem():
    X, y = make_ntp_data(random_state=3)  # App. B.2: n=5000, m=50, d=60, V=10, |S|=6
    est = NTPDecoderClassifier(solver="gd", lr=0.5, max_iter=10_000, record_every=100,
                               random_state=0).fit(X, y)
    h = est.history_
    gap = h["excess_loss"]
    assert gap[-1] < 0.2 * gap[10] < gap[1]  # CE - H decreases toward 0
    assert np.all(np.diff(h["norm"][5:]) > 0)  # ||W_k|| grows
    assert h["finite_distance"][-1] < 0.5 * h["finite_distance"][10]  # P_F(W_k) -> W*
    assert h["alignment_corrected"][-1] >= 0.9
    assert est.alignment_ == pytest.approx(h["alignment_corrected"][-1])
    assert est.is_ntp_separable_ and est.is_ntp_compatible_


def test_ngd_and_adam_converge_faster():
    X, y = make_ntp_data(random_state=4)
    for solver in ("ngd", "adam"):
        est = NTPDecoderClassifier(solver=solver, lr=0.01, max_iter=3000,
                                   record_every=100, random_state=0).fit(X, y)
        assert est.history_["alignment_corrected"][-1] >= 0.9
        assert est.history_["excess_loss"][-1] < 0.05


def test_regularization_path_direction_approaches_mm():
    X, y = _small(5, m=10, d=14, V=6, s=(2, 4))
    est = NTPDecoderClassifier(solver="regpath", max_iter=300,
                               path_radii=np.geomspace(1, 300, 10)).fit(X, y)
    al = est.history_["alignment_corrected"]
    assert al[-1] > al[0]
    assert al[-1] >= 0.97
    assert np.all(est.history_["norm"] <= est.history_["radius"] * (1 + 1e-9))
    assert est.n_iter_ == 10


def test_svm_solver_sets_documented_coef():
    X, y = _small(6)
    est = NTPDecoderClassifier(solver="svm", svm_radius=7.5).fit(X, y)
    assert np.allclose(est.coef_, est.finite_component_ + 7.5 * est.mm_direction_)
    auto = NTPDecoderClassifier(solver="svm").fit(X, y)
    assert auto.svm_radius_ > 0
    assert auto.history_["excess_loss"][0] < 1e-6  # near the entropy bound
    # the SVM limit and long GD agree on predictions and probabilities
    gd = NTPDecoderClassifier(solver="ngd", lr=0.05, max_iter=4000, random_state=0).fit(X, y)
    assert gd.alignment_ > 0.95


def test_soft_and_hard_labels_give_same_model():
    X, y = _small(7)
    hard = NTPDecoderClassifier(solver="gd", max_iter=50, random_state=0).fit(X, y)
    H, P = hard.contexts_, hard.next_token_probs_
    soft = NTPDecoderClassifier(solver="gd", max_iter=50, random_state=0).fit(
        H, P, sample_weight=hard.context_weights_ * 37.0
    )
    assert np.allclose(hard.coef_, soft.coef_, atol=1e-12)
    assert np.allclose(hard.mm_direction_, soft.mm_direction_, atol=1e-6)
    assert soft.entropy_ == pytest.approx(hard.entropy_)
    # permuting and duplicating rows does not change the aggregated data
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    perm = NTPDecoderClassifier(solver="gd", max_iter=50, random_state=0).fit(X[idx], y[idx])
    assert np.allclose(perm.coef_, hard.coef_, atol=1e-12)


def test_vocabulary_tokens_never_seen_are_out_of_support():
    X, y = _small(8, V=5)
    est = NTPDecoderClassifier(solver="svm", vocabulary=8).fit(X, y)
    assert est.coef_.shape == (8, X.shape[1])
    assert list(est.classes_) == list(range(8))
    assert np.all(est.predict_proba(X)[:, 5:] < 1e-6)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        NTPDecoderClassifier(vocabulary=3).fit(X, y)


def test_not_separable():
    # d = 1 and m = 3 one-hot contexts on a line with alternating labels
    X = np.array([[1.0], [2.0], [3.0]])
    y = np.array([0, 1, 0])
    with pytest.raises(NotSeparableError, match="not NTP-separable"):
        NTPDecoderClassifier(solver="svm").fit(X, y)
    with pytest.warns(UserWarning, match="no max-margin direction"):
        est = NTPDecoderClassifier(solver="gd", max_iter=200).fit(X, y)
    assert est.mm_direction_ is None and est.is_ntp_separable_ is False
    assert np.all(np.isfinite(est.coef_))


def test_large_norm_is_finite():
    X, y = _small(9)
    est = NTPDecoderClassifier(solver="svm", svm_radius=1e4).fit(X, y)
    assert np.linalg.norm(est.coef_) > 1e3
    for arr in (est.predict_proba(X), est.predict_log_proba(X)):
        assert not np.isnan(arr).any()
    assert np.allclose(est.predict_proba(X).sum(axis=1), 1.0)


@pytest.mark.parametrize(
    "X, y, match",
    [
        (np.array([[np.nan, 1.0], [1.0, 2.0]]), [0, 1], "NaN"),
        (np.array([[np.inf, 1.0], [1.0, 2.0]]), [0, 1], "infinity"),
        (np.ones((3, 2, 2)), [0, 1, 0], "2D|2-D|dim"),
        (np.ones((3, 2)), [0, 1], "samples|inconsistent"),
        (np.eye(3), [1, 1, 1], "at least 2 classes"),
        (np.eye(2), np.array([[0.5, -0.5], [0.5, 0.5]]), "non-negative"),
        (np.eye(2), np.array([[0.0, 0.0], [0.5, 0.5]]), "sums to 0"),
    ],
)
def test_bad_input(X, y, match):
    with pytest.raises(ValueError, match=match):
        NTPDecoderClassifier(solver="gd", max_iter=5).fit(X, y)


def test_bad_sample_weight():
    with pytest.raises(ValueError, match="sample_weight|shape"):
        NTPDecoderClassifier().fit(np.eye(3), [0, 1, 2], sample_weight=[1.0, 2.0])


def test_pipeline_gridsearch_pickle():
    X, y = _small(10)
    pipe = make_pipeline(FunctionTransformer(), NTPDecoderClassifier(max_iter=100))
    grid = GridSearchCV(pipe, {"ntpdecoderclassifier__solver": ["gd", "ngd", "svm"]},
                        cv=2, scoring="neg_log_loss")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grid.fit(X, y)
    assert grid.best_params_["ntpdecoderclassifier__solver"] in {"gd", "ngd", "svm"}
    est = clone(NTPDecoderClassifier(solver="ngd", lr=0.05, max_iter=50,
                                     random_state=0)).fit(X, y)
    loaded = pickle.loads(pickle.dumps(est))
    assert np.array_equal(loaded.predict_proba(X), est.predict_proba(X))
    again = clone(est).fit(X, y)
    assert np.array_equal(again.coef_, est.coef_)


def test_ntp_from_sequences_and_2d_example():
    seqs = [[0, 1, 2, 1], [0, 1, 3], [2, 1, 2]]
    table = np.eye(4)
    X, y = ntp_from_sequences(seqs, table, context_size=2, pooling="concat")
    assert X.shape == (7, 8) and list(y) == [1, 2, 1, 1, 3, 1, 2]
    X2, y2 = ntp_from_sequences(seqs, lambda p: np.array([len(p), p[-1]], float))
    assert X2.shape == (7, 2)
    H, P, w = make_ntp_2d_example()
    est = NTPDecoderClassifier(solver="svm").fit(H, P, sample_weight=w)
    # words 0 and 4 follow the same contexts: same W^mm row, different W* rows
    assert np.allclose(est.mm_direction_[0], est.mm_direction_[4], atol=1e-7)
    assert not np.allclose(est.finite_component_[0], est.finite_component_[4])


@parametrize_with_checks(
    [NTPDecoderClassifier(max_iter=50, random_state=0)],
    expected_failed_checks=lambda est: {},
)
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(estimator)
