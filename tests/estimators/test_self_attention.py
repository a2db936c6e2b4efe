"""NTPAttentionClassifier: theorems of the self-attention NTP paper on fresh instances."""

import warnings

import numpy as np
import pytest
from helpers import cyclic_instance
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

from skntp._backend import get_backend
from skntp.datasets import make_token_priority_data
from skntp.graphs import (
    check_token_sequences,
    label_scc_positions,
)
from skntp.losses.self_attention import SelfAttentionRisk
from skntp.metrics import alignment
from skntp.self_attention import NTPAttentionClassifier
from skntp.sweeps import fit_ntp_trials


@pytest.mark.parametrize("loss,head", [("log", "identity"), ("log", "embeddings"),
                                       ("ce", "embeddings"), ("squared", "embeddings"),
                                       ("squared", "identity"), ("ce", "identity")])
def test_risk_gradient_matches_finite_differences(loss, head):
    X, y, E = make_token_priority_data(6, 8, 7, 4, acyclic=False, random_state=3)
    ids, mask, last = check_token_sequences([row[: 2 + i % 3] for i, row in enumerate(X)])
    y = np.array([row[mask[i]][0] for i, row in enumerate(ids)])  # realizable
    gamma = np.eye(6) if head == "identity" else E @ E.T
    if loss == "log" and head != "identity":  # the log-loss needs c_y^T e_x >= 0
        with pytest.raises(ValueError, match="c_y\\^T e_x >= 0"):
            SelfAttentionRisk(get_backend(), E, gamma, ids, mask, last, y, loss=loss)
        gamma = (gamma + 1.0) / 2.0
    risk = SelfAttentionRisk(get_backend(), E, gamma, ids, mask, last, y, loss=loss)
    rng = np.random.RandomState(0)
    W = rng.standard_normal((8, 8))
    f, (g,) = risk((W,))
    for _ in range(3):
        D = rng.standard_normal((8, 8))
        h = 1e-6
        fd = (risk((W + h * D,))[0] - risk((W - h * D,))[0]) / (2 * h)
        assert abs(fd - np.sum(g * D)) < 1e-6 * max(1, abs(fd))
    torch = pytest.importorskip("torch")
    risk_t = SelfAttentionRisk(get_backend("torch"), E, gamma, ids, mask, last, y, loss=loss)
    ft, (gt,) = risk_t((torch.as_tensor(W),))
    np.testing.assert_allclose(float(ft), float(f), rtol=1e-12)
    np.testing.assert_allclose(gt.numpy(), g, rtol=1e-10, atol=1e-13)


def test_gradient_direction_survives_saturation():
    # At a huge norm the label takes all attention: the gradient is tiny but its
    # direction must still push the suppressed tokens down (not rounding noise).
    # Gamma = E E^T of unit embeddings has the exact diagonal 1; E @ E.T rounds it to
    # 1 +- 2e-16, an error of the data (not of the risk) that would swamp the squared
    # loss's 1 - u (about 1e-82 at norm 300) and decide the gradient's sign by the
    # platform's rounding, so the exact diagonal is written in.  The squared loss's
    # gradient is of order (1 - u) s_t, below float64 at norm 600 (1e-328), so it is
    # checked at norm 300, still saturated far past float64 (1 - u << 1e-16).
    X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=True, random_state=0)
    clfs = {R: NTPAttentionClassifier(E, solver="svm", svm_radius=R).fit(X, y)
            for R in (300.0, 600.0)}
    unit_gamma = E @ E.T
    np.fill_diagonal(unit_gamma, 1.0)
    for loss, head, R in [("log", "identity", 600.0), ("squared", "embeddings", 300.0),
                          ("ce", "embeddings", 600.0)]:
        clf = clfs[R]
        gamma = np.eye(8) if head == "identity" else unit_gamma
        ids, mask, last = check_token_sequences(X)
        risk = SelfAttentionRisk(get_backend(), E, gamma, ids, mask, last, y, loss=loss)
        _, (g,) = risk((clf.coef_,))
        assert np.abs(g).max() > 0
        assert alignment(-g / np.abs(g).max(), clf.mm_direction_) > 0.8, loss


def test_fig3_acyclic_small():
    """Fig. 3 (5 of the 100 trials): NGD lr 0.01, 4000 iterations, correlation > 0.99."""
    corr = []
    for seed in range(5):
        X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=True, random_state=seed)
        clf = NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=4000,
                                     record_every=4000).fit(X, y)
        assert clf.is_acyclic_
        np.testing.assert_array_equal(clf.finite_component_, 0.0)
        corr.append(clf.history_["alignment"][-1])
        assert clf.history_["norm"][-1] > 30
    assert np.mean(corr) > 0.99


def test_fig4_cyclic_small():
    """Fig. 4 (3 trials): correlation ~0.987 and ||Pi_Scyc(W) - W^cyc|| < 0.01."""
    corr, dist = [], []
    for seed in range(3):
        X, y, E = cyclic_instance(seed)
        clf = NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=4000,
                                     record_every=4000).fit(X, y)
        assert not clf.is_acyclic_
        assert abs(np.sum(clf.finite_component_ * clf.mm_direction_)) < 1e-8  # Lemma 2
        corr.append(clf.history_["alignment"][-1])
        dist.append(clf.history_["finite_distance"][-1])
    assert np.mean(corr) > 0.97
    assert max(dist) < 0.01


def test_svm_solver_is_the_limit():
    X, y, E = cyclic_instance(1)
    svm = NTPAttentionClassifier(E, solver="svm").fit(X, y)
    np.testing.assert_allclose(svm.coef_,
                               svm.finite_component_ + svm.svm_radius_ * svm.mm_direction_)
    assert svm.alignment_ == pytest.approx(1.0)
    assert svm.history_["finite_distance"][0] < 1e-10
    # every token outside the label's SCC gets at most e^-20 of the attention
    s = svm.attention_weights(X)
    ids, mask, last = check_token_sequences(X)
    inside = label_scc_positions(svm.sccs_, ids, mask, last, np.asarray(y), E.shape[0])
    assert s[~inside].max() <= np.exp(-20) * (1 + 1e-9)
    # GD moves toward the same limit: its loss approaches the SVM fit's from above
    gd = NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=3000,
                                record_every=3000).fit(X, y)
    assert gd.history_["loss"][-1] >= svm.history_["loss"][0] - 1e-6
    assert gd.history_["loss"][-1] - svm.history_["loss"][0] < 1e-3
    # and its next-token probabilities approach the limit's
    assert np.abs(gd.predict_proba(X) - svm.predict_proba(X)).max() < 0.02


def test_regularization_path_direction():
    X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=True, random_state=4)
    clf = NTPAttentionClassifier(E, solver="regpath", path_radii=np.geomspace(1, 100, 8),
                                 max_iter=500).fit(X, y)
    a = clf.history_["alignment"]
    assert a[-1] > 0.99 and a[-1] >= a[0]
    # the constraint is active until the loss is flat at machine precision
    assert clf.history_["norm"][3] == pytest.approx(clf.history_["radius"][3], rel=1e-6)
    assert clf.history_["norm"][-1] > 30


def test_predict_proba_is_attention_mass_per_token():
    X, y, E = make_token_priority_data(8, 8, 5, 6, acyclic=True, random_state=2)
    clf = NTPAttentionClassifier(E, solver="ngd", lr=0.05, max_iter=200).fit(X, y)
    P = clf.predict_proba(X)
    s = clf.attention_weights(X)
    expected = np.zeros_like(P)
    for i in range(len(X)):
        np.add.at(expected[i], X[i], s[i])
    np.testing.assert_allclose(P, expected, atol=1e-12)
    np.testing.assert_array_equal(clf.predict(X), y)
    assert clf.score(X, y) == 1.0
    assert clf.classes_.tolist() == list(range(8))
    np.testing.assert_allclose(clf.head_ @ E.T, np.eye(8), atol=1e-10)  # Assumption 4


def test_ragged_sequences_and_torch_backend():
    X, y, E = make_token_priority_data(8, 8, 6, 6, acyclic=True, random_state=5)
    seqs = [row[i % 3:] for i, row in enumerate(X)]
    y = np.array([s[np.argmax(np.isin(s, y[i]))] if np.isin(s, y[i]).any() else s[0]
                  for i, s in enumerate(seqs)])
    clf = NTPAttentionClassifier(E, solver="gd", lr=1.0, max_iter=50).fit(seqs, y)
    # eq. (1) by hand, one unpadded sequence at a time: with C E^T = I the output is the
    # attention mass s_t = softmax_t(e_{x_t}^T W e_{x_last}) summed per token id
    W = clf.coef_
    mass = np.zeros((len(seqs), 8))
    for i, seq in enumerate(seqs):
        logits = E[seq] @ W @ E[seq[-1]]
        att = np.exp(logits - logits.max())
        np.add.at(mass[i], seq, att / att.sum())
    np.testing.assert_allclose(clf.predict_proba(seqs), mass, atol=1e-12)
    np.testing.assert_array_equal(clf.predict(seqs), np.argmax(mass, axis=1))
    pytest.importorskip("torch")
    clf_t = NTPAttentionClassifier(E, solver="gd", lr=1.0, max_iter=50,
                                   backend="torch").fit(seqs, y)
    np.testing.assert_allclose(clf_t.coef_, clf.coef_, atol=1e-10)
    np.testing.assert_allclose(clf_t.history_["alignment"], clf.history_["alignment"],
                               atol=1e-10)


def test_pipeline_and_grid_search_over_solver():
    X, y, E = make_token_priority_data(8, 8, 40, 5, acyclic=True, random_state=0)
    pipe = make_pipeline(FunctionTransformer(),
                         NTPAttentionClassifier(E, lr=0.05, max_iter=100))
    # KFold: a next token seen once (token 5 here, normal in NTP data) cannot be stratified
    grid = GridSearchCV(pipe, {"ntpattentionclassifier__solver": ["ngd", "svm"]},
                        cv=KFold(2, shuffle=True, random_state=0))
    grid.fit(X, y)
    assert grid.best_score_ > 0.4  # chance is 1/5 (the label is one of 5 tokens)
    assert set(grid.cv_results_["param_ntpattentionclassifier__solver"]) == {"ngd", "svm"}


def test_bad_input_messages():
    X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=True, random_state=0)
    clf = NTPAttentionClassifier(E, max_iter=5).fit(X, y)
    with pytest.raises(ValueError, match="out of range"):
        clf.predict(np.array([[0, 1, 6]]))
    with pytest.raises(ValueError, match="out of range"):
        NTPAttentionClassifier(E).fit(X, np.where(y == y[0], 7, y))
    with pytest.raises(ValueError, match="empty sequence"):
        NTPAttentionClassifier(E).fit([[0, 1], []], [0, 1])
    with pytest.raises(ValueError, match="non-integer"):
        NTPAttentionClassifier(E).fit(X + 0.5, y)
    with pytest.raises(ValueError, match="impossible with K=10 tokens"):
        NTPAttentionClassifier(n_tokens=10, embedding_dim=4).fit(X, y)
    with pytest.raises(ValueError, match="linearly dependent"):
        NTPAttentionClassifier(np.vstack([E[:5], E[:1]])).fit(X, y)
    with pytest.raises(ValueError, match="head must have shape"):
        NTPAttentionClassifier(E, head=np.ones((3, 3))).fit(X, y)
    y_bad = y.copy()
    y_bad[0] = next(t for t in range(6) if t not in X[0])
    with pytest.warns(UserWarning, match="carry no gradient"):
        fit = NTPAttentionClassifier(E, max_iter=5).fit(X, y_bad)
    assert fit.realizable_.sum() == len(y) - 1
    # the left-out sample changes nothing: same fit as without it
    ref = NTPAttentionClassifier(E, max_iter=5).fit(X[1:], y[1:])
    np.testing.assert_allclose(fit.coef_, ref.coef_)
    # K > d is fine with a general head (Sec. 6) but not with the identity head
    E_wide = make_token_priority_data(10, 4, 1, 1, random_state=0)[2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        NTPAttentionClassifier(E_wide, head="embeddings", loss="ce", max_iter=5).fit(X, y)


def test_pseudo_graphs_equal_global_ones_under_assumption_4():
    # With C E^T = I and the log-loss (Thm. 3) GD selects the label's SCC, so the
    # pseudo graphs give back the global Graph-SVM direction.
    X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=True, random_state=7)
    clf = NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=3000,
                                 record_every=3000).fit(X, y)
    p = clf.pseudo_graphs(X, y)
    np.testing.assert_array_equal(p.selected, X == y[:, None])
    np.testing.assert_allclose(p.mm_direction, clf.mm_direction_, atol=1e-6)
    assert p.is_acyclic and p.finite_distance == 0.0


def test_general_head_follows_pseudo_graph_small():
    """Figs. 5-6 in miniature: with a general head GD aligns with the pseudo Graph-SVM."""
    better = []
    for seed in (1, 3, 9):  # 3 and 9: GD leaves the global SVM direction
        X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=False, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf = NTPAttentionClassifier(E, head="embeddings", loss="ce", solver="ngd",
                                         lr=0.1, max_iter=3000, record_every=3000).fit(X, y)
            p = clf.pseudo_graphs(X, y)
        assert p.alignment > 0.99
        better.append(p.alignment - clf.history_["alignment"][-1])
    assert min(better) > -1e-9 and max(better) > 0.5


def _figure_trials(kind, trials):
    # the trials in one batched run (fit_ntp_trials: each as alone, checked in
    # tests/training/test_backends.py): 2-4 s for 100 where one by one took 110 s
    runs = []
    for seed in range(trials):
        if kind == "fig3":
            X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=True, random_state=seed)
            est = NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=4000,
                                         record_every=4000)
        elif kind == "fig4":
            X, y, E = cyclic_instance(seed)
            est = NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=4000,
                                         record_every=4000)
        else:
            X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=False, random_state=seed)
            est = NTPAttentionClassifier(E, head="embeddings",
                                         loss="squared" if kind == "fig5" else "ce",
                                         solver="ngd", lr=0.1, max_iter=4000,
                                         record_every=4000)
        runs.append((X, y, est))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits = fit_ntp_trials([est for *_, est in runs], [(X, y) for X, y, _ in runs])
        pseudo = ([] if kind in ("fig3", "fig4") else
                  [clf.pseudo_graphs(X, y) for clf, (X, y, _) in zip(fits, runs)])
    corr_g = [clf.history_["alignment"][-1] for clf in fits]
    dist_g = [clf.history_["finite_distance"][-1] for clf in fits]
    corr_p = [p.alignment for p in pseudo]
    dist_p = [p.finite_distance for p in pseudo]
    return [np.asarray(v) for v in (corr_g, corr_p, dist_g, dist_p)]


@pytest.mark.slow
def test_fig3_full():
    corr, _, _, _ = _figure_trials("fig3", 100)
    print(f"Fig. 3: mean correlation {corr.mean():.4f} (min {corr.min():.4f})")
    assert corr.mean() > 0.99


@pytest.mark.slow
def test_fig4_full():
    corr, _, dist, _ = _figure_trials("fig4", 100)
    print(f"Fig. 4: mean correlation {corr.mean():.4f}, max distance {dist.max():.2e}")
    assert corr.mean() > 0.98
    assert np.mean(dist) < 0.01


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fig5", "fig6"])
def test_fig5_fig6_full(kind):
    corr_g, corr_p, dist_g, dist_p = _figure_trials(kind, 100)
    print(f"{kind}: correlation global {corr_g.mean():.4f} pseudo {corr_p.mean():.4f}; "
          f"distance global {np.median(dist_g):.3g} pseudo {np.median(dist_p):.3g} (median)")
    assert corr_p.mean() > corr_g.mean()


def test_user_start_and_recorded_weight_trajectory(monkeypatch):
    X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=True, random_state=0)
    rng = np.random.default_rng(0)
    W0 = rng.standard_normal((8, 8))
    clf = NTPAttentionClassifier(embeddings=E, solver="ngd", lr=0.1, max_iter=40, init=W0,
                                 record_every=5, record_weights=True).fit(X, y)
    traj = clf.trajectory_
    np.testing.assert_array_equal(traj["iteration"], clf.history_["iteration"])
    assert traj["weights"].shape == (len(traj["iteration"]), 8, 8)
    np.testing.assert_array_equal(traj["weights"][0], W0)
    np.testing.assert_allclose(traj["weights"][-1], clf.coef_)
    # normalized GD moves W by lr per step: consecutive records are 5 steps apart
    steps = np.linalg.norm(np.diff(traj["weights"], axis=0), axis=(1, 2))
    assert np.all(steps <= 5 * 0.1 + 1e-12) and steps[0] > 0.25
    assert "weights" not in clf.history_
    # off by default, and the start is not modified in place
    assert not hasattr(NTPAttentionClassifier(embeddings=E, max_iter=5).fit(X, y),
                       "trajectory_")
    np.testing.assert_array_equal(W0, np.random.default_rng(0).standard_normal((8, 8)))
    # the explicit limit: one record, the limit itself
    svm = NTPAttentionClassifier(embeddings=E, solver="svm", record_weights=True).fit(X, y)
    np.testing.assert_array_equal(svm.trajectory_["weights"][0], svm.coef_)
    # refused before the run when the records would not fit in memory
    monkeypatch.setattr("skntp._base.available_memory", lambda: 10_000)
    with pytest.raises(ValueError, match="raise record_every"):
        clf.fit(X, y)
    np.testing.assert_allclose(clf.trajectory_["weights"][-1], clf.coef_)
