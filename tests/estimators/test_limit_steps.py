"""The estimators' limit step (``solver="svm"``) attribute by attribute.

For each estimator: the documented ``coef_``/``query_``/``head_`` built from the
limit directions, the auto radius against the promise it documents (a gap of
20 nats, exactly 20 where the documented bound is tight: one out-of-support
token per context, acyclic graphs, one-hot data), radius 0 when there is no
direction to grow, and every entry of the one-row ``history_`` against its
definition.
"""

import warnings

import numpy as np
import pytest
from scipy.special import expit

from skntp import AttentionSelector, JointAttentionSVM, NTPAttentionClassifier, NTPDecoderClassifier
from skntp.datasets import make_attention_fig1c, make_ntp_data, make_token_priority_data
from skntp.metrics import alignment
from skntp.svm import att_svm, joint_svm


def logit_gaps(H, S, W):
    L = H @ W.T
    gaps = np.where(S, L, np.inf).min(axis=1) - np.where(~S, L, -np.inf).max(axis=1)
    return gaps[~S.all(axis=1)]


# --------------------------------------------------------------------------
# NTPDecoderClassifier
# --------------------------------------------------------------------------
@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_decoder_auto_radius_is_exact_with_one_out_of_support_token(scale):
    # |S_j| = V - 1: the one out-of-support token is the maximum of both W* and W^mm,
    # so the documented bound is exact and the smallest gap is 20 nats; scaling the
    # contexts by 100 makes the radius smaller than 1
    X, y = make_ntp_data(n_samples=400, n_contexts=8, n_features=12, n_tokens=5,
                         support_size=(4, 4), random_state=0)
    est = NTPDecoderClassifier(solver="svm").fit(scale * X, y)
    S = est.next_token_probs_ > 0
    assert np.all(S.sum(axis=1) == 4) and np.any(est.finite_component_)
    assert logit_gaps(est.contexts_, S, est.coef_).min() == pytest.approx(20.0, abs=1e-8)
    assert (est.svm_radius_ < 1.0) == (scale == 100.0)
    h = est.history_
    assert set(h) == {"iteration", "loss", "excess_loss", "norm", "alignment",
                      "alignment_uncorrected", "finite_distance"}
    np.testing.assert_array_equal(h["iteration"], [0.0])
    assert h["norm"][0] == pytest.approx(np.linalg.norm(est.coef_), rel=1e-14)
    assert h["alignment_uncorrected"][0] == pytest.approx(
        alignment(est.coef_, est.mm_direction_))
    assert h["alignment"][0] == pytest.approx(1.0, rel=1e-14) and h["finite_distance"][0] == 0.0
    assert h["excess_loss"][0] == pytest.approx(h["loss"][0] - est.entropy_, abs=1e-15)
    assert est.n_iter_ == est.svm_result_.n_iter
    assert est.alignment_ == pytest.approx(1.0)


def test_decoder_full_supports_need_no_radius():
    # every context followed by every token: F-perp is {0}, W^mm = 0, coef_ = W*
    X, y = make_ntp_data(n_samples=400, n_contexts=8, n_features=12, n_tokens=5,
                         support_size=(5, 5), random_state=0)
    est = NTPDecoderClassifier(solver="svm").fit(X, y)
    assert est.svm_radius_ == 0.0 and est.mm_margin_ == np.inf
    np.testing.assert_array_equal(est.mm_direction_, 0.0)
    np.testing.assert_array_equal(est.coef_, est.finite_component_)
    assert est.history_["alignment"][0] == 0.0
    assert est.history_["excess_loss"][0] < 1e-10  # W* attains the entropy


# --------------------------------------------------------------------------
# AttentionSelector
# --------------------------------------------------------------------------
@pytest.mark.parametrize("fixed_query", [None, "random", [0.5, -1.0]])
def test_selector_svm_with_trained_key_query(fixed_query):
    # train="W": W = u (R p^mm*)^T / ||u||^2, so W^T u = R p^mm* (Lemma 1), for the
    # default fixed query (1/sqrt(k) each), a random one and a given one; k != d here
    D = make_attention_fig1c()
    W0 = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, -0.5]])  # k = 2, d = 3
    est = AttentionSelector(D.head, W0, train="W", solver="svm", fixed_query=fixed_query,
                            random_state=3, classes=[-1, 1]).fit(D.X, D.y)
    if fixed_query is None:
        u = np.full(2, 1 / np.sqrt(2))
    elif fixed_query == "random":
        u = np.random.RandomState(3).standard_normal(2) / np.sqrt(2)
    else:
        u = np.array(fixed_query)
    np.testing.assert_allclose(est.query_, u, rtol=1e-15)
    pmm = att_svm(D.X, [2, 2, 2])  # W trained: the effective query acts on X
    R = (20 + np.log(3)) * np.linalg.norm(pmm)
    assert est.svm_radius_ == pytest.approx(R, rel=1e-9)
    np.testing.assert_allclose(est.key_query_.T @ u, R * pmm / np.linalg.norm(pmm),
                               rtol=1e-7)
    assert est.key_query_.shape == (2, 3)
    h = est.history_
    assert set(h) == {"iteration", "norm", "gmm_alignment", "loss", "saturation",
                      "alignment", "alignment_fro"}  # (fro: the limit norm of "svm")
    assert h["alignment_fro"][0] == pytest.approx(h["alignment"][0])
    np.testing.assert_array_equal(h["iteration"], [0.0])
    assert h["norm"][0] == pytest.approx(R, rel=1e-9)
    np.testing.assert_array_equal(h["gmm_alignment"], [1.0])
    np.testing.assert_allclose(est.trajectory_["query"], [est.key_query_.T @ u], rtol=1e-12)
    assert h["alignment"][0] == pytest.approx(1.0)
    assert h["saturation"][0] == pytest.approx(est.attention_saturation_)
    assert est.n_iter_ == 0


# --------------------------------------------------------------------------
# JointAttentionSVM
# --------------------------------------------------------------------------
def _joint_data(seed=3):
    # random ragged data with a planted token per input (tests/estimators/test_joint.py's recipe)
    rng = np.random.default_rng(seed)
    n, T, d = 5, 4, 3
    a = rng.standard_normal(d)
    a /= np.linalg.norm(a)
    y = np.array([1.0, -1.0, 1.0, -1.0, 1.0])
    X = np.zeros((n, T, d + 1))
    X[..., :d] = rng.standard_normal((n, T, d)) * 0.3
    X[..., d] = rng.uniform(-0.5, 0.5, (n, T))
    pos = rng.integers(0, 3, n)
    c = np.where(np.arange(n) < 2, 1.0, 2.0)  # inputs 2.. are not support vectors
    X[np.arange(n), pos, :d] = (y * c)[:, None] * a
    X[np.arange(n), pos, d] = 1.0
    lengths = [4, 3, 4, 3, 4]
    return [X[i, :t] for i, t in enumerate(lengths)], y


def test_joint_svm_limit_on_ragged_data():
    seqs, y = _joint_data()
    est = JointAttentionSVM(solver="svm").fit(seqs, y)
    T = max(len(s) for s in seqs)
    Xp = np.zeros((len(seqs), T, seqs[0].shape[1]))
    mask = np.zeros((len(seqs), T), bool)
    for i, s in enumerate(seqs):
        Xp[i, :len(s)], mask[i, :len(s)] = s, True
    res = joint_svm(Xp, y, mask=mask)
    np.testing.assert_array_equal(est.selected_tokens_, res.selected)
    np.testing.assert_array_equal(est.svm_result_.selected, res.selected)
    np.testing.assert_array_equal(est.support_, np.flatnonzero(res.support))
    assert 0 < est.support_.size < len(y)  # Thm. 6's case: p^relax != p^mm
    np.testing.assert_allclose(est.mm_direction_, res.relaxed / np.linalg.norm(res.relaxed),
                               atol=1e-9)
    np.testing.assert_allclose(est.att_svm_direction_,
                               res.att_svm / np.linalg.norm(res.att_svm), atol=1e-9)
    # the promised margins: label margin 20, smallest positive logit gap 20 (over the
    # real tokens only; padding has no logit)
    rows = np.arange(len(y))
    tokens = Xp[rows, res.selected]
    assert (y * (tokens @ est.head_)).min() == pytest.approx(20.0, rel=1e-7)
    gaps = [(s[a] - np.delete(s, a, axis=0)) @ est.query_ for s, a in zip(seqs, res.selected)]
    gaps = np.concatenate(gaps)
    assert gaps[gaps > 1e-6].min() == pytest.approx(20.0, rel=1e-7)
    R_v, R_p = est.svm_radius_
    assert R_v == pytest.approx(np.linalg.norm(est.head_)) and R_v == pytest.approx(
        20.0 / est.head_mm_margin_, rel=1e-9)
    assert R_p == pytest.approx(np.linalg.norm(est.query_))
    assert est.n_iter_ == 0
    # every history entry from its definition
    h = est.history_
    assert set(h) == {"iteration", "loss", "norm", "head_norm", "attention_saturation",
                      "label_probability", "alignment", "head_alignment",
                      "att_svm_alignment"}
    assert set(est.trajectory_) == {"query", "head"}
    s = est.attention_weights(seqs)
    f = est.decision_function(seqs)
    np.testing.assert_array_equal(h["iteration"], [0.0])
    assert h["norm"][0] == pytest.approx(R_p) and h["head_norm"][0] == pytest.approx(R_v)
    assert h["attention_saturation"][0] == pytest.approx(s.max(axis=1).mean(), rel=1e-14)
    assert h["label_probability"][0] == pytest.approx(expit(y * f).mean(), rel=1e-14)
    assert h["loss"][0] == pytest.approx(np.mean(np.logaddexp(0, -y * f)), rel=1e-12)
    np.testing.assert_allclose(h["alignment"], [1.0], rtol=1e-14)
    np.testing.assert_array_equal(h["head_alignment"], [1.0])
    assert h["att_svm_alignment"][0] == pytest.approx(
        alignment(est.query_, est.att_svm_direction_))
    np.testing.assert_array_equal(est.trajectory_["query"], est.query_[None])
    np.testing.assert_array_equal(est.trajectory_["head"], est.head_[None])


def test_joint_fixed_radius_and_enumeration_limit():
    seqs, y = _joint_data()
    est = JointAttentionSVM(solver="svm", svm_radius=2.5, max_enumeration=1).fit(seqs, y)
    assert est.svm_radius_ == (2.5, 2.5)
    assert not est.svm_result_.exhaustive  # max_enumeration reaches joint_svm
    assert np.linalg.norm(est.query_) == pytest.approx(2.5)
    h = est.history_
    np.testing.assert_allclose(h["alignment"], [1.0], rtol=1e-14)
    np.testing.assert_array_equal(h["head_alignment"], [1.0])


# --------------------------------------------------------------------------
# NTPAttentionClassifier
# --------------------------------------------------------------------------
@pytest.mark.parametrize("scale", [1.0, 6.0])
def test_self_attention_auto_radius_is_exact_on_acyclic_data(scale):
    # acyclic graphs: W^cyc = 0, so the bound of the auto radius is exact: the smallest
    # gap between the label's SCC and the other tokens is 20 nats; scaled embeddings
    # (scores scale by 36) need a radius below 1
    X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=True, random_state=0)
    est = NTPAttentionClassifier(scale * E, solver="svm").fit(X, y)
    np.testing.assert_array_equal(est.finite_component_, 0.0)
    Es = scale * E
    worst = np.inf
    for seq, label in zip(X, y):
        logits = Es[seq] @ est.coef_ @ Es[seq[-1]]
        inside = seq == label  # acyclic: the label's SCC is the label alone
        if (~inside).any():
            worst = min(worst, logits[inside].min() - logits[~inside].max())
    assert worst == pytest.approx(20.0, abs=1e-8)
    assert (est.svm_radius_ < 1.0) == (scale == 6.0)
    h = est.history_
    assert set(h) == {"iteration", "loss", "grad_norm", "norm", "alignment",
                      "alignment_uncorrected", "finite_distance"}
    np.testing.assert_array_equal(h["iteration"], [0.0])
    assert h["norm"][0] == pytest.approx(np.linalg.norm(est.coef_), rel=1e-14)
    assert h["alignment_uncorrected"][0] == pytest.approx(
        alignment(est.coef_, est.mm_direction_))
    np.testing.assert_allclose(h["alignment"], [1.0], rtol=1e-14)
    assert h["finite_distance"][0] == 0.0
    assert est.n_iter_ == est.svm_result_.n_iter


def test_self_attention_single_scc_needs_no_radius():
    # one graph, one SCC ({0, 1}): no (i => j) pair, W^mm = 0, coef_ = W^cyc
    E = np.linalg.qr(np.random.default_rng(0).standard_normal((4, 4)))[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = NTPAttentionClassifier(E, solver="svm").fit([[0, 1], [0, 1]], [0, 1])
    assert est.svm_radius_ == 0.0 and est.mm_margin_ == np.inf
    np.testing.assert_array_equal(est.mm_direction_, 0.0)
    np.testing.assert_array_equal(est.coef_, est.finite_component_)
    np.testing.assert_array_equal(est.history_["alignment"], [0.0])


@pytest.mark.parametrize("loss", ["ce", "squared"])
def test_self_attention_svm_history_uses_the_chosen_loss(loss):
    X, y, E = make_token_priority_data(6, 6, 5, 4, acyclic=True, random_state=1)
    est = NTPAttentionClassifier(E, head="embeddings", loss=loss, solver="svm",
                                 svm_radius=3.0).fit(X, y)
    gamma = E @ E.T
    total = 0.0
    for seq, label in zip(X, y):
        logits = E[seq] @ est.coef_ @ E[seq[-1]]
        s = np.exp(logits - logits.max())
        s /= s.sum()
        if loss == "squared":
            total += (1 - s @ gamma[label, seq]) ** 2
        else:
            yhat = gamma[:, seq] @ s
            total += np.log(np.sum(np.exp(yhat - yhat.max()))) + yhat.max() - yhat[label]
    assert est.history_["loss"][0] == pytest.approx(total / len(y), rel=1e-10)
    assert est.svm_radius_ == 3.0


def test_self_attention_without_limits_and_with_a_general_head():
    X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=4)
    est = NTPAttentionClassifier(E, max_iter=5, compute_limits=False).fit(X, y)
    assert est.mm_direction_ is None and est.finite_component_ is None
    assert est.svm_result_ is None and est.cyclic_basis_ is None
    assert np.isnan(est.mm_margin_) and np.isnan(est.alignment_)
    # solver="svm" always computes them
    svm = NTPAttentionClassifier(E, solver="svm", compute_limits=False).fit(X, y)
    assert svm.mm_direction_ is not None and svm.cyclic_basis_ is not None
    # a general head: W^cyc minimizes the cyclic risk of that head (gamma = C E^T)
    from skntp.svm import cyclic_correction

    gen = NTPAttentionClassifier(E, head="embeddings", loss="ce", solver="svm",
                                 svm_radius=1.0).fit(X, y)
    np.testing.assert_allclose(gen.finite_component_,
                               cyclic_correction(E, X, y, gen.sccs_, gamma=E @ E.T,
                                                 loss="ce"), atol=1e-9)
    with pytest.raises(ValueError, match="unknown max-margin method 'magic'"):
        NTPAttentionClassifier(E, svm_method="magic", max_iter=2).fit(X, y)


def test_self_attention_warns_when_the_limits_are_not_orthogonal(monkeypatch):
    # Lemma 2: W^cyc is orthogonal to W^mm; an inaccurate solve is reported
    import skntp.self_attention as module

    X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=4)
    real = module.cyclic_correction

    def skewed(*args, **kwargs):
        W, info = real(*args, **kwargs)
        return W + 0.1 * np.eye(W.shape[0]), info

    monkeypatch.setattr(module, "cyclic_correction", skewed)
    with pytest.warns(RuntimeWarning, match=r"W\^cyc and W\^mm are not orthogonal "
                      r"\(cosine"):
        NTPAttentionClassifier(E, solver="svm").fit(X, y)


def test_the_one_policy_of_a_failed_limit_solve():
    # ImplicitBiasEstimator._solve_limit: every limit program of every estimator goes
    # through it; required -> the error names the program, optional -> a warning at the
    # user's line with the consequence, quiet -> None without a warning, and an error
    # that is not a failure of the program propagates unchanged
    from skntp.svm import NotSeparableError, ProgramTooLargeError

    def failing(exc):
        def solve(callback):
            raise exc
        return solve

    est = AttentionSelector(solver="svm")
    with pytest.raises(NotSeparableError, match="solver='svm' needs the P solution: no"):
        est._solve_limit("P", failing(NotSeparableError("no")), "C.")
    est = AttentionSelector(solver="gd")
    with pytest.warns(UserWarning, match=r"^too big\. x_ is None\.$") as caught:
        res, failure = est._solve_limit("P", failing(ProgramTooLargeError("too big.")),
                                        "x_ is None.")
    assert res is None and isinstance(failure, ProgramTooLargeError)
    assert caught.list[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res, failure = est._solve_limit("P", failing(NotSeparableError("no")), "C.",
                                        quiet=(NotSeparableError,))
    assert res is None and isinstance(failure, NotSeparableError)
    with pytest.raises(RuntimeError, match="a bug"):
        est._solve_limit("P", failing(RuntimeError("a bug")), "C.")
    with pytest.raises(ValueError, match="ties"):
        est._solve_limit("P", failing(ValueError("ties")), "C.")
    with pytest.warns(UserWarning, match="ties. C."):
        est._solve_limit("P", failing(ValueError("ties")), "C.",
                         failures=(ValueError,))
    est = AttentionSelector(solver="svm")
    with pytest.warns(UserWarning, match="no. C."):  # the trained limits: never required
        assert est._solve_limit("P", failing(NotSeparableError("no")), "C.",
                                required=False)[0] is None
    assert est._solve_limit("P", lambda callback: 3.0, "C.") == (3.0, None)
