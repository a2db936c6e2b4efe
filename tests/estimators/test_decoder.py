"""NTPDecoderClassifier against the theory of Thrampoulidis (2024)."""

import pickle
import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import (
    log_odds_equations,
    lp_separable,
    partially_separable_instance,
    python_text_40,
    word_contexts,
)
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import log_loss
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.svm import LinearSVC

from skntp import NTPDecoderClassifier
from skntp.datasets import make_ntp_2d_example, make_ntp_data, ntp_from_sequences
from skntp.decoder import aggregate_contexts
from skntp.metrics import alignment
from skntp.svm import (
    NotSeparableError,
    ProgramTooLargeError,
    finite_component,
    ntp_separability,
    ntp_svm,
    ntp_svm_problem,
    partial_ntp_svm_problem,
)
from skntp.svm._problem import constraint_violation

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
                    tol=1e-10, max_iter=200_000, random_state=0).fit(X, y)
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
    rows, rhs = log_odds_equations(H, Pd)
    ref = (np.linalg.pinv(rows) @ rhs).reshape(Pd.shape[1], H.shape[1])
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
    assert h["alignment"][-1] >= 0.9
    assert est.alignment_ == pytest.approx(h["alignment"][-1])
    assert est.is_ntp_separable_ and est.is_ntp_compatible_


def test_ngd_and_adam_converge_faster_than_gd_at_the_same_budget():
    # App. B.2: GD with lr 0.5, NGD and Adam with lr 0.01, the same number of steps.
    # Measured at 3000 iterations (seed 4): excess loss GD 6.5e-3, NGD 1.5e-3,
    # Adam 5.2e-5; corrected alignment GD 0.934, NGD 0.961, Adam 0.950.
    X, y = make_ntp_data(random_state=4)
    fits = {solver: NTPDecoderClassifier(solver=solver, lr=lr, max_iter=3000,
                                         record_every=100, random_state=0).fit(X, y)
            for solver, lr in (("gd", 0.5), ("ngd", 0.01), ("adam", 0.01))}
    excess = {k: f.history_["excess_loss"][-1] for k, f in fits.items()}
    align = {k: f.history_["alignment"][-1] for k, f in fits.items()}
    assert excess["ngd"] < 0.5 * excess["gd"]
    assert excess["adam"] < 0.05 * excess["gd"]
    assert align["ngd"] > align["gd"] + 0.01
    assert align["adam"] > align["gd"] + 0.01
    for f in fits.values():  # all three go the theorem's way
        assert f.history_["excess_loss"][-1] < f.history_["excess_loss"][1]
        assert f.n_iter_ == 3000


def test_regularization_path_direction_approaches_mm():
    X, y = _small(5, m=10, d=14, V=6, s=(2, 4))
    est = NTPDecoderClassifier(solver="regpath", max_iter=300,
                               path_radii=np.geomspace(1, 300, 10)).fit(X, y)
    al = est.history_["alignment"]
    assert al[-1] > al[0]
    assert al[-1] >= 0.97
    assert np.all(est.history_["norm"] <= est.history_["radius"] * (1 + 1e-9))
    assert est.n_iter_ == 10


def test_svm_solver_sets_documented_coef():
    X, y = _small(6)
    est = NTPDecoderClassifier(solver="svm", svm_radius=7.5).fit(X, y)
    assert np.allclose(est.coef_, est.finite_component_ + 7.5 * est.mm_direction_)
    assert est.svm_radius_ == 7.5
    auto = NTPDecoderClassifier(solver="svm").fit(X, y)
    assert auto.svm_radius_ > 0
    assert auto.history_["excess_loss"][0] < 1e-6  # near the entropy bound
    H, P = auto.contexts_, auto.next_token_probs_
    S = P > 0
    # the limit's probabilities: p_hat on each support (eq. (3) holds exactly for
    # W* + R W^mm, since W^mm is constant on supports) and below e^-20 outside
    p_svm = auto.predict_proba(H)
    within = np.where(S, p_svm, 0.0)
    np.testing.assert_allclose(within / within.sum(axis=1, keepdims=True), P, atol=1e-7)
    assert np.all(p_svm[~S] <= np.exp(-20.0))
    # long GD approaches the limit's probabilities and predictions; measured max
    # difference 0.052 after 1000 and 0.0128 after 4000 iterations (about 1/k)
    gaps = []
    for n_iter in (1000, 4000):
        gd = NTPDecoderClassifier(solver="gd", lr=0.5, max_iter=n_iter,
                                  random_state=0).fit(X, y)
        gaps.append(np.abs(gd.predict_proba(H) - p_svm).max())
    assert gaps[1] < 0.02 and gaps[1] < 0.5 * gaps[0]
    unique = (P == P.max(axis=1, keepdims=True)).sum(axis=1) == 1
    np.testing.assert_array_equal(gd.predict(H)[unique], auto.predict(H)[unique])
    np.testing.assert_array_equal(auto.predict(H)[unique], np.argmax(P, axis=1)[unique])


def _logit_gaps(est):
    """``min_{z in S_j} l_jz - max_{v not in S_j} l_jv`` per context with out-of-support tokens."""
    H, S = est.contexts_, est.next_token_probs_ > 0
    L = H @ est.coef_.T
    gaps = np.where(S, L, np.inf).min(axis=1) - np.where(~S, L, -np.inf).max(axis=1)
    return gaps[~S.all(axis=1)]


def _smallest_radius(est, nats=20.0):
    """The smallest R with every gap of ``W* + R W^mm/||W^mm||`` at least ``nats``.

    The smallest gap is a concave, eventually increasing (so nondecreasing) function of
    R (a minimum of affine functions), so bisection finds the smallest feasible R.
    """
    H, S = est.contexts_, est.next_token_probs_ > 0
    keep = ~S.all(axis=1)
    A, B = H[keep] @ est.finite_component_.T, H[keep] @ est.mm_direction_.T
    Sk = S[keep]

    def gap(R):
        L = A + R * B
        return (np.where(Sk, L, np.inf).min(axis=1)
                - np.where(~Sk, L, -np.inf).max(axis=1)).min()

    lo, hi = 0.0, 1.0
    while gap(hi) < nats:
        hi *= 2
    if gap(lo) >= nats:
        return 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if gap(mid) >= nats else (mid, hi)
    return hi


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("support_size", [(1, 4), (2, 3)])
def test_auto_radius_keeps_the_promised_gap_in_nats(seed, support_size):
    # svm_radius="auto": every out-of-support logit at least 20 nats below every
    # in-support logit of its context (so every out-of-support probability < e^-20)
    X, y = _small(seed, s=support_size)
    est = NTPDecoderClassifier(solver="svm").fit(X, y)
    gaps = _logit_gaps(est)
    assert gaps.size > 0
    assert gaps.min() >= 20.0 - 1e-7
    R_min = _smallest_radius(est)
    assert est.svm_radius_ >= R_min - 1e-9 * R_min
    np.testing.assert_allclose(
        est.coef_, est.finite_component_ + est.svm_radius_ * est.mm_direction_, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_auto_radius_is_tight_on_one_hot_data(seed):
    # one-hot next tokens: W* = 0, every gap is R times the direction's gap, and the
    # smallest of them is exactly 20 nats (R = 20 ||W^mm||, margin 1 at ||W^mm||)
    X, y = _small(seed, s=(1, 1))
    est = NTPDecoderClassifier(solver="svm").fit(X, y)
    np.testing.assert_array_equal(est.finite_component_, 0.0)
    assert _logit_gaps(est).min() == pytest.approx(20.0, abs=1e-7)
    assert est.svm_radius_ == pytest.approx(20.0 / est.mm_margin_, rel=1e-7)
    assert est.svm_radius_ == pytest.approx(_smallest_radius(est), rel=1e-7)


@pytest.mark.xfail(strict=True, reason=(
    "svm_radius='auto' documents 'the smallest R' with a 20-nat gap, but the formula "
    "bounds max_v(W* + R W^mm) by max_v W* + R max_v W^mm term by term, so with soft "
    "labels R can exceed the smallest one (measured gap 20.45 nats on seed 0); the "
    "promise of at least 20 nats holds (test above)"))
def test_auto_radius_is_the_smallest_with_soft_labels():
    X, y = _small(0, s=(2, 3))
    est = NTPDecoderClassifier(solver="svm").fit(X, y)
    assert est.svm_radius_ == pytest.approx(_smallest_radius(est), rel=1e-6)
    assert _logit_gaps(est).min() == pytest.approx(20.0, abs=1e-6)


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
    # d = 1 and m = 3 contexts on a line with alternating labels: no row is separable
    X = np.array([[1.0], [2.0], [3.0]])
    y = np.array([0, 1, 0])
    with pytest.raises(NotSeparableError, match="ntp_separability finds the rows"):
        ntp_svm(X, np.eye(2, dtype=bool)[y])
    # the limit is the loss's minimizer: solver="svm" returns it
    svm = NTPDecoderClassifier(solver="svm").fit(X, y)
    assert svm.mm_direction_ is None and svm.is_ntp_separable_ is False
    assert svm.separable_fraction_ == 0.0 and not svm.separable_rows_.any()
    assert svm.mm_margin_ == 0.0 and svm.svm_radius_ == 0.0  # documented: 0 when not separable
    np.testing.assert_array_equal(svm.coef_, svm.finite_component_)
    gd = NTPDecoderClassifier(solver="gd", max_iter=20_000, tol=1e-9).fit(X, y)
    # (equal up to a row common to all tokens, which no loss sees)
    np.testing.assert_allclose(np.diff(gd.coef_, axis=0), np.diff(svm.coef_, axis=0), atol=1e-6)
    assert gd.history_["loss"][-1] == pytest.approx(svm.loss_infimum_, abs=1e-12)
    assert svm.loss_infimum_ > svm.entropy_ + 0.1
    assert np.all(np.isfinite(gd.coef_))


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
        (np.array([[np.nan, 1.0], [1.0, 2.0]]), [0, 1], "Input X contains NaN"),
        (np.array([[np.inf, 1.0], [1.0, 2.0]]), [0, 1], "Input X contains infinity"),
        (np.ones((3, 2, 2)), [0, 1, 0], "Found array with dim 3, while dim <= 2"),
        (np.ones((3, 2)), [0, 1], "X has 3 samples but y has 2"),
        (np.eye(3), [1, 1, 1], "at least 2 classes"),
        (np.eye(2), np.array([[0.5, -0.5], [0.5, 0.5]]), "soft labels y must be non-negative"),
        (np.eye(2), np.array([[0.0, 0.0], [0.5, 0.5]]), "sums to 0"),
    ],
)
def test_bad_input(X, y, match):
    with pytest.raises(ValueError, match=match):
        NTPDecoderClassifier(solver="gd", max_iter=5).fit(X, y)


def test_bad_sample_weight():
    with pytest.raises(ValueError, match=r"sample_weight\.shape == \(2,\), expected \(3,\)"):
        NTPDecoderClassifier().fit(np.eye(3), [0, 1, 2], sample_weight=[1.0, 2.0])


def test_pipeline_gridsearch_pickle():
    X, y = _small(10)
    pipe = make_pipeline(FunctionTransformer(),
                         NTPDecoderClassifier(max_iter=100, random_state=0))
    grid = GridSearchCV(pipe, {"ntpdecoderclassifier__solver": ["gd", "ngd", "svm"]},
                        cv=2, scoring="neg_log_loss")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grid.fit(X, y)
    # the search's scores are those of each solver refitted by hand on the same folds
    # (StratifiedKFold(2) for a classifier), scored by sklearn's log_loss
    manual = {}
    for solver in ("gd", "ngd", "svm"):
        fold_scores = []
        for train, test in StratifiedKFold(n_splits=2).split(X, y):
            est = clone(pipe).set_params(ntpdecoderclassifier__solver=solver)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(X[train], y[train])
            fold_scores.append(-log_loss(y[test], est.predict_proba(X[test]),
                                         labels=est.classes_))
        manual[solver] = np.mean(fold_scores)
    got = dict(zip(grid.cv_results_["param_ntpdecoderclassifier__solver"],
                   grid.cv_results_["mean_test_score"]))
    for solver, score in manual.items():
        assert got[solver] == pytest.approx(score, rel=1e-10)
    assert grid.best_params_["ntpdecoderclassifier__solver"] == max(manual, key=manual.get)
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


def _partially_separable_samples(seed, repeats=20):
    H, P = partially_separable_instance(seed)
    rng = np.random.default_rng(seed)
    X = np.repeat(H, repeats, axis=0)
    y = np.concatenate([rng.choice(P.shape[1], repeats, p=p) for p in P])
    return X, y, P.shape[1]


def test_partially_separable_data_get_both_limits():
    X, y, V = _partially_separable_samples(3)
    svm = NTPDecoderClassifier(solver="svm", vocabulary=V).fit(X, y)
    assert svm.is_ntp_separable_ is False and 0 < svm.separable_fraction_ < 1
    found = ntp_separability(svm.contexts_, svm.next_token_probs_)
    np.testing.assert_array_equal(svm.separable_rows_, found.separable)
    assert svm.svm_result_.status == "optimal" and svm.alignment_ == pytest.approx(1.0)
    # the separable rows are saturated, the rest sit at the finite minimum
    loss = svm.history_["loss"][-1]
    assert loss == pytest.approx(svm.loss_infimum_, abs=1e-6)
    assert svm.loss_infimum_ > svm.entropy_ + 0.01
    gd = NTPDecoderClassifier(solver="gd", lr=0.5, max_iter=20_000, vocabulary=V,
                              random_state=0).fit(X, y)
    assert gd.alignment_ > 0.98 and gd.history_["finite_distance"][-1] < 0.01
    assert 0 < gd.history_["loss"][-1] - gd.loss_infimum_ < 1e-3
    assert np.all(np.diff(gd.history_["alignment"][5:]) > -1e-9)


def test_a_separable_side_too_large_to_build_is_reported_not_built(monkeypatch):
    # the split is certified, W^mm_I's program would not fit: refused before it is
    # built (check_program_size), reported once, W_fin and the split kept
    from skntp.svm import _problem

    X, y, V = _partially_separable_samples(3)
    full = NTPDecoderClassifier(solver="svm", vocabulary=V).fit(X, y)
    monkeypatch.setattr(_problem, "available_memory", lambda: 1000)
    with pytest.raises(ProgramTooLargeError, match="separable rows.*GiB"):
        partial_ntp_svm_problem(full.contexts_, ntp_separability(
            full.contexts_, full.next_token_probs_))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        est = NTPDecoderClassifier(max_iter=5, vocabulary=V).fit(X, y)
    msgs = [str(w.message) for w in rec if "constraints" in str(w.message)]
    assert len(msgs) == 1 and "compute_limits=False" in msgs[0], msgs
    assert est.mm_direction_ is None and est.is_ntp_separable_ is False
    np.testing.assert_array_equal(est.separable_rows_, full.separable_rows_)
    np.testing.assert_allclose(est.finite_component_, full.finite_component_, rtol=0,
                               atol=1e-9 * np.abs(full.finite_component_).max())
    with pytest.raises(ProgramTooLargeError):
        NTPDecoderClassifier(solver="svm", vocabulary=V).fit(X, y)


def test_the_limits_on_torch_are_those_on_numpy():
    # backend="torch" runs W_fin's products on the estimator's device: the same limits
    # (CPU torch here; device="cuda" where a GPU is)
    pytest.importorskip("torch")
    X, y, V = _partially_separable_samples(3)
    ours = NTPDecoderClassifier(solver="svm", vocabulary=V).fit(X, y)
    theirs = NTPDecoderClassifier(solver="svm", vocabulary=V, backend="torch").fit(X, y)
    np.testing.assert_array_equal(theirs.separable_rows_, ours.separable_rows_)
    top = np.abs(ours.finite_component_).max()
    np.testing.assert_allclose(theirs.finite_component_, ours.finite_component_, rtol=0,
                               atol=1e-8 * top)
    np.testing.assert_allclose(theirs.mm_direction_, ours.mm_direction_, rtol=0, atol=1e-6)
    assert theirs.loss_infimum_ == pytest.approx(ours.loss_infimum_, rel=1e-12)


def test_partial_limits_are_those_of_the_frobenius_norm_only():
    X, y, V = _partially_separable_samples(3)
    with pytest.warns(UserWarning, match="derived for the Frobenius norm only, not for "
                                         "limit_norm_='max'"):
        sign = NTPDecoderClassifier(solver="signgd", lr=0.01, max_iter=50, vocabulary=V).fit(X, y)
    assert sign.mm_direction_ is None and 0 < sign.separable_fraction_ < 1
    assert sign.svm_result_ is None and sign.limit_directions_ == {"max": None, "fro": None}


def test_an_unconverged_finite_part_warns(monkeypatch):
    from skntp import decoder
    from skntp.svm import partial_finite_component

    X, y, V = _partially_separable_samples(3)
    monkeypatch.setattr(decoder, "partial_finite_component",
                        lambda *a, **k: partial_finite_component(*a, **k, max_iter=1))
    with pytest.warns(ConvergenceWarning, match="finite component of the non-separable rows"):
        NTPDecoderClassifier(solver="svm", vocabulary=V).fit(X, y)


def _force_the_corpus_path(monkeypatch, at_corpus_size=True):
    # the path of data too large for the separability program: W_fin over every row,
    # its stationary point's table decides; below corpus size (m V d at most
    # MAX_FALLBACK_WORK) its far iterate's split, the open rows' NTP-SVM and then the
    # NTP-SVM of every row are tried before "undecided"
    from skntp import decoder
    from skntp.svm import ProgramTooLargeError

    def too_large(*args, **kwargs):
        raise ProgramTooLargeError("separability program: too large (forced by the test)")

    monkeypatch.setattr(decoder, "ntp_separability", too_large)
    if at_corpus_size:
        monkeypatch.setattr(decoder, "MAX_FALLBACK_WORK", 0)


def test_where_the_program_is_too_large_the_loss_is_minimized_once(monkeypatch):
    # the stationary point of ntp_separability and W_fin over every row are the same
    # Newton solve: where the program is too large (the stationary route follows),
    # only W_fin runs, and its table certifies as the stationary point's would
    from skntp import decoder
    from skntp.svm import _ntp_partial

    # positive contexts (no positive spanning) and wide supports: no row separable,
    # certified by a stationary point
    rng = np.random.default_rng(0)
    X = np.abs(rng.standard_normal((60, 3)))
    S = rng.random((60, 4)) < 0.6
    S[np.arange(60), rng.integers(0, 4, 60)] = True
    S[S.all(axis=1), 0] = False
    y = S / S.sum(axis=1, keepdims=True)
    calls = {"stationary point": 0, "W_fin": 0}

    def counted(name, func):
        def wrapped(*args, **kwargs):
            calls[name] += 1
            return func(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(_ntp_partial, "_stationary_table",
                        counted("stationary point", _ntp_partial._stationary_table))
    monkeypatch.setattr(decoder, "partial_finite_component",
                        counted("W_fin", decoder.partial_finite_component))
    exact = NTPDecoderClassifier(solver="svm").fit(X, y)
    assert calls == {"stationary point": 1, "W_fin": 1}
    assert exact.is_ntp_separable_ is False and exact.separable_fraction_ == 0.0
    calls.update({"stationary point": 0, "W_fin": 0})
    monkeypatch.setattr(decoder, "MAX_LP_ROWS", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = NTPDecoderClassifier(solver="svm").fit(X, y)
    assert calls == {"stationary point": 0, "W_fin": 1}
    assert est.is_ntp_separable_ is False and est.separable_fraction_ == 0.0
    np.testing.assert_allclose(est.finite_component_, exact.finite_component_, rtol=0,
                               atol=1e-8 * np.abs(exact.finite_component_).max())
    # a limit norm without the stationary route keeps the stationary point
    calls.update({"stationary point": 0, "W_fin": 0})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # (3 steps)
        with pytest.warns(UserWarning, match="Frobenius norm only"):
            NTPDecoderClassifier(solver="nsd", descent_norm="max", max_iter=3).fit(X, y)
    assert calls["stationary point"] == 1


def test_the_corpus_path_certifies_data_with_no_separable_row(monkeypatch):
    from skntp.datasets import load_text_ntp

    X, y = load_text_ntp(corpus="python", n_words=30, embedding="words", n_features=4,
                         return_X_y=True)
    exact = NTPDecoderClassifier(solver="svm").fit(X, y)
    assert exact.is_ntp_separable_ is False and exact.separable_fraction_ == 0.0
    _force_the_corpus_path(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = NTPDecoderClassifier(solver="svm").fit(X, y)
    assert est.is_ntp_separable_ is False and est.separable_fraction_ == 0.0
    assert not est.separable_rows_.any() and est.mm_direction_ is None
    np.testing.assert_allclose(est.finite_component_, exact.finite_component_, rtol=0,
                               atol=1e-6 * np.abs(exact.finite_component_).max())


def test_the_corpus_path_on_partly_separable_data_is_undecided_with_its_evidence(monkeypatch):
    # W_fin over every row has no minimizer: Newton goes far out, where the loss is
    # flat, while the separable rows' probabilities fall toward 0; the fit says so with
    # the smallest of them, and certifies the rows that are not separable, no more
    X, y, V = _partially_separable_samples(3)
    _force_the_corpus_path(monkeypatch)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        est = NTPDecoderClassifier(solver="svm", vocabulary=V).fit(X, y)
    undecided = [w for w in rec if "separability of the data is undecided" in str(w.message)]
    assert len(undecided) == 1 and undecided[0].filename == __file__
    # rows certified not separable: the data are certified not NTP-separable, though
    # which rows separate is undecided
    assert est.is_ntp_separable_ is False and est.mm_margin_ == 0.0
    assert est.separable_rows_ is None
    assert est.mm_direction_ is None and np.isnan(est.separable_fraction_)
    # the figure it reports is the last iterate's, recomputed here
    L = est.contexts_ @ est.finite_component_.T
    probs = np.exp(L - L.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    smallest = probs[~(np.asarray(est.next_token_probs_) > 0)].min()
    message = str(undecided[0].message)
    assert f"an out-of-support row is {smallest:.3g}" in message, message
    # the separable rows' probabilities, far below those of a row that is not
    truth = ntp_separability(est.contexts_, est.next_token_probs_)
    assert truth.status == "certified" and 0 < truth.n_separable < truth.n_rows
    assert probs[truth.separable].max() < 1e-3 * probs[~truth.separable & ~truth.support].min()
    certified = truth.n_rows - truth.n_separable
    assert f"certifies {certified} of the {truth.n_rows} margin rows not separable" in message


def _word_data_on_the_corpus_path(seed, V):
    """Word contexts (``word_contexts(seed, widths=(6, 6), n_contexts=20, V=V)``), each
    support token 5 times, and a fit on them: ``(est, undecided warnings)``."""
    H, S = word_contexts(seed, widths=(6, 6), n_contexts=20, V=V)
    j, v = np.nonzero(S)
    X, y = np.repeat(H[j], 5, axis=0), np.repeat(v, 5)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        est = NTPDecoderClassifier(solver="svm", vocabulary=V).fit(X, y)
    undecided = [str(w.message) for w in rec
                 if "separability of the data is undecided" in str(w.message)]
    return est, undecided


def test_the_corpus_path_certifies_rows_by_cycles_of_word_contexts(monkeypatch):
    # contexts that concatenate word vectors, partly separable: on the corpus path the
    # cycles of contexts certify rows exactly (recomputed here), which makes the
    # data certified not NTP-separable whatever W_fin's table certifies
    from skntp.svm import (
        _ntp_labels,
        _ntp_partial,
        check_cycle_certificate,
        cycle_certificate,
        label_certificate,
    )

    _force_the_corpus_path(monkeypatch)
    est, undecided = _word_data_on_the_corpus_path(6, V=4)
    support = np.asarray(est.next_token_probs_) > 0
    rows = check_cycle_certificate(est.contexts_, support,
                                   cycle_certificate(est.contexts_, support))
    assert rows.sum() >= 10
    assert est.is_ntp_separable_ is False and est.separable_rows_ is None
    assert len(undecided) == 1
    assert f"({rows.sum()} exactly, by cycles of contexts" in undecided[0]
    # without the cycles (and the labels' program), only W_fin's table: fewer rows
    monkeypatch.setattr(_ntp_partial, "cycle_certificate",
                        lambda *a, **k: cycle_certificate(np.eye(4), np.eye(4, 2)))
    monkeypatch.setattr(_ntp_labels, "label_certificate",
                        lambda *a, **k: label_certificate(np.eye(4), np.eye(4, 2)))
    _, without = _word_data_on_the_corpus_path(6, V=4)
    counted = [int(re.search(r"certifies (\d+) of the", m).group(1))
               for m in (undecided[0], without[0])]
    assert counted[0] >= rows.sum() and counted[1] < counted[0]


def test_the_corpus_path_certifies_rows_by_the_program_of_word_labels(monkeypatch):
    # five tokens and independent word vectors: the cycles (tables of two tokens) prove
    # 4 of the 10 rows that are not separable, the program of the words' labels the
    # other 6, each recomputed here against the linear program
    from skntp.svm import (
        check_cycle_certificate,
        check_label_certificate,
        cycle_certificate,
        label_certificate,
    )

    _force_the_corpus_path(monkeypatch)
    est, undecided = _word_data_on_the_corpus_path(3, V=5)
    support = np.asarray(est.next_token_probs_) > 0
    cycles = check_cycle_certificate(est.contexts_, support,
                                     cycle_certificate(est.contexts_, support))
    labels = check_label_certificate(
        est.contexts_, support, label_certificate(est.contexts_, support, equal=cycles),
        equal=cycles)
    not_separable = ~support & ~lp_separable(est.contexts_, support)
    np.testing.assert_array_equal(cycles | labels, not_separable)
    assert cycles.sum() == 4 and labels.sum() == 6
    assert len(undecided) == 1
    assert "certifies 10 of the" in undecided[0]
    assert "6 by the program of the contexts' labels" in undecided[0]


@pytest.mark.parametrize("seed", range(3))
def test_below_corpus_size_the_split_of_word_contexts_is_the_linear_programs(
        monkeypatch, seed):
    # the corpus path below corpus size on word contexts: the far split starts from
    # the rows the cycles certify exactly and certifies the linear program's split
    H, S = word_contexts(seed, widths=(6, 6), n_contexts=20, V=4)
    j, v = np.nonzero(S)
    X, y = np.repeat(H[j], 5, axis=0), np.repeat(v, 5)
    _force_the_corpus_path(monkeypatch, at_corpus_size=False)
    est = NTPDecoderClassifier(solver="svm", vocabulary=4).fit(X, y)
    truth = lp_separable(est.contexts_, np.asarray(est.next_token_probs_) > 0)
    assert est.is_ntp_separable_ is False
    np.testing.assert_array_equal(est.separable_rows_, truth)


def test_where_w_fin_converges_the_analytic_center_certifies_what_its_table_cannot(
        monkeypatch, capsys):
    # real text (the first 40 sentences of the Python documentation, d = 16 < m) on the
    # corpus path: W_fin over every row converges, its table certifies a tenth of the
    # rows (entries pi_j s_jv down to float64's rounding); the analytic center of the
    # margin polytope, started from W_fin, certifies every row: no row separable,
    # certified both ways, with no warning (before: "undecided")
    from skntp.svm import NTPSeparability, partial_finite_component, stationary_separability
    from skntp.svm._ntp_partial import support_mask

    X, y, _, _, _ = python_text_40()
    _force_the_corpus_path(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = NTPDecoderClassifier(solver="svm", verbose=1).fit(X, y)
    assert "the analytic center: every row certified not separable" in capsys.readouterr().err
    S = support_mask(est.next_token_probs_)
    assert est.is_ntp_separable_ is False and est.mm_margin_ == 0.0
    assert est.separable_fraction_ == 0.0 and not est.separable_rows_.any()
    assert est.mm_direction_ is None
    # its W_fin is the loss's minimizer, and that minimizer's table alone is undecided
    H = est.contexts_
    fin = partial_finite_component(H, est.next_token_probs_, NTPSeparability(
        np.zeros_like(S), S, "stationary point"), est.context_weights_)
    assert fin.converged
    np.testing.assert_allclose(H @ est.finite_component_.T, H @ fin.W.T, atol=1e-8)
    table = stationary_separability(H, S, fin, est.next_token_probs_, est.context_weights_)
    assert table.status == "undecided" and table.n_undecided > 0.5 * table.n_rows


@pytest.mark.parametrize("route", ["far point", "open rows"])
@pytest.mark.parametrize("seed", [3, 4])
def test_the_rows_a_stationary_table_leaves_open_are_certified_separable(monkeypatch, seed,
                                                                        route, capsys):
    # below corpus size the far iterate's split is certified (the rows that keep their
    # probability by their loss's table, the others by the far iterate projected onto
    # the cone); where it is not, the open rows' NTP-SVM is solved, and its certified
    # optimum proves them separable. Either way the split is certified both ways, and it
    # is the linear program's, with the limits of the exact path
    from skntp import decoder

    X, y, V = _partially_separable_samples(seed)
    exact = NTPDecoderClassifier(solver="svm", vocabulary=V).fit(X, y)
    assert exact.is_ntp_separable_ is False and 0 < exact.separable_fraction_ < 1
    _force_the_corpus_path(monkeypatch, at_corpus_size=False)
    if route == "open rows":
        monkeypatch.setattr(decoder, "far_point_split", lambda contexts, found, *a: found)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = NTPDecoderClassifier(solver="svm", vocabulary=V, verbose=1).fit(X, y)
    said = capsys.readouterr().err
    if route == "far point":
        assert "the far iterate's split: certified both ways" in said
        assert "the open rows" not in said
    else:
        assert "the far iterate's split: not certified" in said
        assert "the open rows: certified separable" in said
    assert est.is_ntp_separable_ is False
    np.testing.assert_array_equal(est.separable_rows_, exact.separable_rows_)
    np.testing.assert_allclose(est.mm_direction_, exact.mm_direction_, rtol=0, atol=1e-6)
    np.testing.assert_allclose(est.finite_component_, exact.finite_component_, rtol=0,
                               atol=1e-6 * np.abs(exact.finite_component_).max())
    assert est.loss_infimum_ == pytest.approx(exact.loss_infimum_, rel=1e-9)


def test_an_undecided_split_gives_the_ntp_svm_of_every_row_a_bounded_solve(monkeypatch):
    # the split undecided (the far split and the open rows' program not certified), the
    # NTP-SVM of every row is tried within MAX_SIDE_WORK: on partly separable data it is
    # infeasible, which first-order methods may not prove in their passes (on real text
    # at 2,140 contexts x 566 tokens none had in 7 minutes). A result not certified
    # there is the answer "undecided", with its one warning, not a convergence failure
    from skntp import decoder
    from skntp.svm import MaxMarginResult, NTPSeparability, _ntp_partial

    X, y, V = _partially_separable_samples(3)
    _force_the_corpus_path(monkeypatch, at_corpus_size=False)
    monkeypatch.setattr(decoder, "far_point_split", lambda contexts, found, *a: found)
    monkeypatch.setattr(decoder, "complete_stationary_split", lambda contexts, found: found)
    monkeypatch.setattr(_ntp_partial, "MAX_SIDE_WORK", 1.0)
    passes = []
    solve = decoder.solve_ntp_svm

    def recorded(contexts, support, **kwargs):
        passes.append(kwargs.get("max_iter"))
        return solve(contexts, support, **kwargs)

    # the table certifies rows not separable: the NTP-SVM of every row is infeasible,
    # certified, and is not solved to learn that
    monkeypatch.setattr(decoder, "solve_ntp_svm", recorded)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        est = NTPDecoderClassifier(vocabulary=V, max_iter=5).fit(X, y)
    assert passes == [] and est.is_ntp_separable_ is False
    # (and no claim that no row separates: GD's unfinished run is no convergence failure)
    assert [w.category for w in rec] == [UserWarning]
    assert "is_ntp_separable_ is False" in str(rec[0].message)

    # a table that certifies no row: the NTP-SVM of every row is tried, bounded
    def certifies_none(contexts, support, *args):
        return NTPSeparability(np.zeros_like(support), support, "stationary point",
                               status="undecided", certified=np.zeros_like(support))

    monkeypatch.setattr(decoder, "stationary_separability", certifies_none)

    def unfinished(contexts, support, **kwargs):
        passes.append(kwargs.get("max_iter"))
        return None, MaxMarginResult(primal=np.zeros((V, contexts.shape[1])), dual=None,
                                     method="dcd", status="max_iter")

    monkeypatch.setattr(decoder, "solve_ntp_svm", unfinished)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        est = NTPDecoderClassifier(vocabulary=V, max_iter=5).fit(X, y)
    assert passes == [100]
    assert [w.category for w in rec] == [UserWarning]
    assert "separability of the data is undecided" in str(rec[0].message)
    assert rec[0].filename == __file__
    assert est.is_ntp_separable_ is None and est.mm_direction_ is None


def test_the_open_rows_program_has_a_bounded_solve(monkeypatch):
    # a candidate I holding a row that is not separable makes the open rows' program
    # infeasible: it is solved within MAX_SIDE_WORK (passes over its constraints), and
    # an answer not certified there leaves the split as it was
    from skntp.svm import NTPSeparability, _ntp_partial, _solve, complete_stationary_split

    H, P = partially_separable_instance(3)
    truth = ntp_separability(H, P)
    rest = ~truth.support & ~truth.separable
    fewer = rest.copy()
    fewer[tuple(np.argwhere(rest)[0])] = False
    found = NTPSeparability(np.zeros_like(rest), truth.support, "stationary point",
                            status="undecided", farkas=truth.farkas, certified=fewer)
    passes = []
    solve = _solve.solve_max_margin

    def recorded(problem, **kwargs):
        passes.append((kwargs.get("max_iter"), len(problem.constraints)))
        return solve(problem, **kwargs)

    monkeypatch.setattr(_solve, "solve_max_margin", recorded)
    rank = np.linalg.matrix_rank(H)
    monkeypatch.setattr(_ntp_partial, "MAX_SIDE_WORK", 1.0)
    assert complete_stationary_split(H, found) is found
    monkeypatch.setattr(_ntp_partial, "MAX_SIDE_WORK", 3e3 * rank * passes[0][1])
    assert complete_stationary_split(H, found) is found
    assert [n for n, _ in passes] == [100, 3000]


def test_beyond_the_program_separable_data_get_the_limits_of_theorem_4_1(monkeypatch,
                                                                       capsys):
    # d < m and every row separable (w_0 = (1, -5), w_1 = (-5, 1), w_2 = 0 separates the
    # third context, the sum of the other two): the far iterate's split certifies every
    # row separable, and the NTP-SVM of every row gives Thm. 4.1's limits, as on the
    # exact path
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]] * 2)
    y = np.array([0, 1, 2] * 2)
    exact = NTPDecoderClassifier(solver="svm").fit(X, y)
    assert exact.is_ntp_separable_ is True
    _force_the_corpus_path(monkeypatch, at_corpus_size=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = NTPDecoderClassifier(solver="svm", verbose=1).fit(X, y)
    assert "certified both ways (6 of 6 rows separable)" in capsys.readouterr().err
    assert est.is_ntp_separable_ is True and est.separable_fraction_ == 1.0
    assert est.mm_margin_ == pytest.approx(exact.mm_margin_, rel=1e-7)
    np.testing.assert_allclose(est.mm_direction_, exact.mm_direction_, atol=1e-7)


def test_a_candidate_split_with_a_row_that_is_not_separable_is_not_certified():
    from skntp.svm import NTPSeparability, complete_stationary_split

    H, P = partially_separable_instance(3)
    truth = ntp_separability(H, P)
    rest = ~truth.support & ~truth.separable
    # a table that certifies one row fewer than the truth: the candidate I holds a row
    # that is not separable, which no point of the cone makes positive
    fewer = rest.copy()
    fewer[np.argwhere(rest)[0][0], np.argwhere(rest)[0][1]] = False
    found = NTPSeparability(np.zeros_like(rest), truth.support, "stationary point",
                            status="undecided", farkas=truth.farkas, certified=fewer)
    assert complete_stationary_split(H, found) is found
    right = NTPSeparability(np.zeros_like(rest), truth.support, "stationary point",
                            status="undecided", farkas=truth.farkas, certified=rest)
    split = complete_stationary_split(H, right)
    assert split.status == "certified" and split.n_undecided == 0
    np.testing.assert_array_equal(split.separable, truth.separable)
    # its direction is a point of the cone, positive on I and 0 on the other rows, for
    # the contexts divided by their largest entry
    L = (H / np.abs(H).max()) @ split.direction.T
    top = np.where(truth.support, L, -np.inf).max(axis=1, keepdims=True)
    low = np.where(truth.support, L, np.inf).min(axis=1, keepdims=True)
    gaps = top - L
    smallest = gaps[truth.separable].min()
    assert smallest > 0
    assert np.all(np.abs((top - low) / smallest) <= 1e-6)
    assert np.all(np.abs(gaps[rest] / smallest) <= 1e-6)


@pytest.mark.parametrize("condition", [1.0, 1e6, 1e10])
def test_compatibility_is_decided_on_the_contexts_span(condition):
    # 40 linearly independent contexts: the log-odds equations (3) always have a
    # solution (W^T = H^{-1} log P), whatever their condition; LSQR on the contexts of
    # condition 1e6 stopped at a relative residual of 0.13 and said "not compatible".
    # Three contexts with h_3 = h_1 + h_2 and log-odds that do not add up: never
    # compatible, whatever a map of that condition does to them
    rng = np.random.default_rng(0)
    U, _ = np.linalg.qr(rng.standard_normal((40, 40)))
    Vt, _ = np.linalg.qr(rng.standard_normal((40, 40)))
    H = U @ np.diag(np.geomspace(1, 1 / condition, 40)) @ Vt
    P = rng.dirichlet(np.ones(3), size=40)
    W = np.linalg.solve(H, np.log(P)).T
    logits = H @ W.T
    assert np.allclose(logits - logits[:, :1], np.log(P / P[:, :1]), atol=1e-4)
    X, y, w = np.repeat(H, 3, axis=0), np.tile([0, 1, 2], 40), P.ravel()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = NTPDecoderClassifier(solver="gd", max_iter=5).fit(X, y, sample_weight=w)
    assert est.is_ntp_compatible_ is True

    A = U[:2, :2] @ np.diag([1.0, 1 / condition])
    H3 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]) @ A
    P3 = np.array([[0.5, 0.5], [0.5, 0.5], [0.9, 0.1]])  # log-odds 0, 0 and not 0
    X, y, w = np.repeat(H3, 2, axis=0), np.tile([0, 1], 3), P3.ravel()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = NTPDecoderClassifier(solver="gd", max_iter=5).fit(X, y, sample_weight=w)
    assert est.is_ntp_compatible_ is False
