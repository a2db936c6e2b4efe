"""Self-attention for NTP against references written here (Li et al. 2024).

``ntp-self-attention-mechanics.md``: the model (1) ``y_hat = C X^T softmax(X W x_bar)``
and its risks (log, squared, cross-entropy), the token-priority graphs of Sec. 3.1
(edges label -> every token of the sequence, one graph per last token), (Graph-SVM)
with every tied pair of an SCC, and the cyclic correction of Def. 3 through its
optimality conditions (it lies in ``S_cyc`` and the risk of the cyclic sub-dataset of
Def. 1 is stationary there, where it is strictly convex).  The graphs and SCCs are
built with networkx directly, the programs with cvxpy, gradients by finite
differences of the hand-written risk.
"""

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest
from helpers import cyclic_instance, graphs_by_hand, numerical_grad
from scipy.special import logsumexp

from skntp._backend import get_backend
from skntp.datasets import make_token_priority_data
from skntp.graphs import check_token_sequences, token_priority_graphs
from skntp.losses.self_attention import SelfAttentionRisk
from skntp.self_attention import NTPAttentionClassifier
from skntp.svm import cyclic_correction, graph_svm


def attention(E, W, seq, query=None):
    """``softmax(X W x_bar)``; the query is the last token unless given."""
    logits = E[seq] @ W @ E[seq[-1] if query is None else query]
    s = np.exp(logits - logits.max())
    return s / s.sum()


def risk(E, gamma, W, seqs, y, loss, queries=None):
    """(ERM) with ``u = sum_t s_t gamma[y, x_t]`` and ``y_hat = sum_t s_t gamma[:, x_t]``."""
    total = 0.0
    queries = [None] * len(seqs) if queries is None else queries
    for seq, label, query in zip(seqs, y, queries):
        s = attention(E, W, seq, query)
        if loss == "log":
            total += -np.log(s @ gamma[label, seq])
        elif loss == "squared":
            total += (1.0 - s @ gamma[label, seq]) ** 2
        else:
            yhat = gamma[:, seq] @ s
            total += logsumexp(yhat) - yhat[label]
    return total / len(seqs)


def graph_svm_by_hand(E, graphs):
    """(Graph-SVM): ``(e_i - e_j)^T W e_k >= 1`` for ``i => j``, ``= 0`` for ``i ~ j``."""
    d = E.shape[1]
    W = cp.Variable((d, d))
    cons = []
    for k, g in graphs.items():
        components = [sorted(c) for c in nx.strongly_connected_components(g)]
        where = {v: c[0] for c in components for v in c}
        for i, j in g.edges:
            if where[i] != where[j]:  # j cannot reach i
                cons.append((E[i] - E[j]) @ W @ E[k] >= 1)
        for comp in components:
            cons += [(E[i] - E[j]) @ W @ E[k] == 0
                     for a, i in enumerate(comp) for j in comp[a + 1:]]
    prob = cp.Problem(cp.Minimize(cp.sum_squares(W)), cons)
    prob.solve(solver=cp.CLARABEL)
    return W.value


def cyclic_by_hand(E, seqs, y, graphs):
    """Def. 1 and Def. 3: the cyclic sub-dataset and an orthonormal basis of S_cyc."""
    sub_seqs, sub_y, last = [], [], []
    rows = []
    d = E.shape[1]
    for k, g in graphs.items():
        for comp in nx.strongly_connected_components(g):
            if len(comp) > 1:
                mean = E[sorted(comp)].mean(axis=0)
                rows += [np.outer(E[j] - mean, E[k]).ravel() for j in comp]
    for seq, label in zip(seqs, y):
        g = graphs[int(seq[-1])]
        comp = nx.node_connected_component(g.to_undirected(), label)  # superset
        same = [x for x in seq if x == label or (nx.has_path(g, x, label) and x in comp)]
        if len(set(same)) > 1:  # the label alone carries a constant loss
            sub_seqs.append(np.array(same))
            sub_y.append(label)
            last.append(int(seq[-1]))
    if not rows:
        return sub_seqs, sub_y, last, np.zeros((d * d, 0))
    _, sv, Vt = np.linalg.svd(np.array(rows), full_matrices=False)
    return sub_seqs, sub_y, last, Vt[sv > 1e-10 * sv[0]].T


# --------------------------------------------------------------------------
# the risk and its gradient
# --------------------------------------------------------------------------
@pytest.mark.parametrize("loss, head", [("log", "identity"), ("log", "shifted"),
                                        ("squared", "embeddings"), ("ce", "embeddings"),
                                        ("ce", "identity")])
def test_risk_and_gradient_match_the_hand_written_risk(loss, head):
    X, y, E = make_token_priority_data(6, 8, 7, 4, acyclic=False, random_state=3)
    seqs = [row[: 2 + i % 3] for i, row in enumerate(X)]
    y = np.array([s[0] for s in seqs])  # realizable: the label is in the sequence
    gamma = {"identity": np.eye(6), "embeddings": E @ E.T,
             "shifted": (E @ E.T + 1.0) / 2.0}[head]
    ids, mask, last = check_token_sequences(seqs)
    obj = SelfAttentionRisk(get_backend(), E, gamma, ids, mask, last, y, loss=loss)
    W = np.random.default_rng(0).standard_normal((8, 8))
    value, (grad,) = obj((W,))
    f = lambda M: risk(E, gamma, M, seqs, y, loss)  # noqa: E731
    assert float(value) == pytest.approx(f(W), rel=1e-12)
    np.testing.assert_allclose(grad, numerical_grad(f, W), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(obj.attention(W)[mask],
                               np.concatenate([attention(E, W, s) for s in seqs]),
                               rtol=1e-12)


# --------------------------------------------------------------------------
# graphs, (Graph-SVM) and the cyclic correction
# --------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_graphs_and_graph_svm_match_the_hand_written_program(seed):
    X, y, E = cyclic_instance(seed)
    seqs = list(X)
    ref_graphs = graphs_by_hand(seqs, y)
    graphs = token_priority_graphs(X, y)
    assert set(graphs) == set(ref_graphs)
    for k, g in ref_graphs.items():
        assert set(graphs[k].edges) == set(g.edges)
    ref = graph_svm_by_hand(E, ref_graphs)
    np.testing.assert_allclose(graph_svm(E, graphs), ref, atol=1e-5 * np.linalg.norm(ref))
    clf = NTPAttentionClassifier(E, solver="svm").fit(X, y)
    np.testing.assert_allclose(clf.mm_direction_, ref / np.linalg.norm(ref), atol=1e-5)
    assert clf.mm_margin_ == pytest.approx(1 / np.linalg.norm(ref), rel=1e-5)


@pytest.mark.parametrize("seed", range(3))
def test_cyclic_correction_satisfies_its_optimality_conditions(seed):
    X, y, E = cyclic_instance(seed)
    graphs = graphs_by_hand(list(X), y)
    sub_seqs, sub_y, queries, basis = cyclic_by_hand(E, list(X), y, graphs)
    assert basis.shape[1] > 0 and len(sub_seqs) > 0
    clf = NTPAttentionClassifier(E, solver="svm").fit(X, y)
    Wc = clf.finite_component_
    d = E.shape[1]
    # in S_cyc (Lemma 2) ...
    np.testing.assert_allclose(basis @ (basis.T @ Wc.ravel()), Wc.ravel(), atol=1e-9)
    # ... and a stationary point of the cyclic risk there (strictly convex: the minimizer)
    # (the query stays the original last token, even where Def. 1 drops it)
    f = lambda M: risk(E, np.eye(len(E)), M, sub_seqs, sub_y, "log", queries)  # noqa: E731
    g = numerical_grad(f, Wc, h=1e-5).ravel()
    assert np.linalg.norm(basis.T @ g) < 1e-7
    # moving inside S_cyc raises the risk (a minimum, not a saddle)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        D = (basis @ rng.standard_normal(basis.shape[1])).reshape(d, d)
        assert f(Wc + 1e-2 * D) > f(Wc) and f(Wc - 1e-2 * D) > f(Wc)
    np.testing.assert_allclose(cyclic_correction(E, X, y, clf.sccs_), Wc, atol=1e-12)
    # Lemma 2: W^cyc and W^mm are orthogonal
    assert abs(np.sum(Wc * clf.mm_direction_)) < 1e-8


def test_svm_limit_suppresses_every_token_outside_the_label_scc():
    X, y, E = cyclic_instance(1)
    clf = NTPAttentionClassifier(E, solver="svm").fit(X, y)
    graphs = graphs_by_hand(list(X), y)
    R = clf.svm_radius_
    np.testing.assert_allclose(clf.coef_, clf.finite_component_ + R * clf.mm_direction_)
    worst = np.inf
    for seq, label in zip(X, y):
        g = graphs[int(seq[-1])]
        inside = np.array([x == label or (nx.has_path(g, x, label)
                                          and nx.has_path(g, label, x)) for x in seq])
        logits = E[seq] @ clf.coef_ @ E[seq[-1]]
        if (~inside).any():
            worst = min(worst, logits[inside].min() - logits[~inside].max())
    # svm_radius="auto": at least 20 nats between the label's SCC and the rest
    assert worst >= 20.0 - 1e-7
    s = clf.attention_weights(X)
    assert clf.history_["loss"][0] == pytest.approx(
        risk(E, np.eye(len(E)), clf.coef_, list(X), y, "log"), rel=1e-10)
    assert np.all(np.isfinite(s))


# --------------------------------------------------------------------------
# training runs
# --------------------------------------------------------------------------
@pytest.mark.parametrize("solver, lr", [("gd", 1.0), ("ngd", 0.05)])
def test_runs_follow_textbook_updates(solver, lr):
    X, y, E = make_token_priority_data(6, 6, 5, 4, acyclic=True, random_state=2)
    clf = NTPAttentionClassifier(E, solver=solver, lr=lr, max_iter=15).fit(X, y)
    gamma = np.eye(6)
    W = np.zeros((6, 6))  # init="zeros"
    f = lambda M: risk(E, gamma, M, list(X), y, "log")  # noqa: E731
    for _ in range(15):
        g = numerical_grad(f, W)
        W = W - lr * (g if solver == "gd" else g / np.linalg.norm(g))
    np.testing.assert_allclose(clf.coef_, W, rtol=1e-6, atol=1e-8)
    assert clf.history_["loss"][-1] == pytest.approx(f(W), rel=1e-8)
    assert clf.history_["norm"][-1] == pytest.approx(np.linalg.norm(W), rel=1e-8)


def test_cyclic_correction_info_and_newton_polish():
    import warnings

    X, y, E = cyclic_instance(1)
    graphs = graphs_by_hand(list(X), y)
    sub_seqs, sub_y, queries, basis = cyclic_by_hand(E, list(X), y, graphs)
    sccs = NTPAttentionClassifier(E, max_iter=1).fit(X, y).sccs_
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no solver option is unknown, nothing unfinished
        W, info = cyclic_correction(E, X, y, sccs, return_info=True)
    assert set(info) == {"basis", "grad_norm", "n_iter", "loss", "n_samples"}
    assert info["n_samples"] == len(sub_seqs) and info["n_iter"] > 0
    f = lambda M: risk(E, np.eye(len(E)), M, sub_seqs, sub_y, "log", queries)  # noqa: E731
    assert info["loss"] == pytest.approx(f(W), rel=1e-12)
    assert info["grad_norm"] <= 1e-8
    B = info["basis"]
    np.testing.assert_allclose(B.T @ B, np.eye(B.shape[1]), atol=1e-12)
    np.testing.assert_allclose(B @ (B.T @ basis), basis, atol=1e-10)  # the same S_cyc
    assert B.shape[1] == basis.shape[1]
    # three L-BFGS iterations stop far from the minimum; the Newton polish (Hessian
    # by finite differences of the exact gradient) reaches it
    W3, info3 = cyclic_correction(E, X, y, sccs, max_iter=3, tol=1e-12, return_info=True)
    assert info3["n_iter"] <= 3
    assert info3["grad_norm"] <= 1e-9
    np.testing.assert_allclose(W3, W, atol=1e-7)


def test_cyclic_correction_without_a_cyclic_part_is_zero():
    X, y, E = make_token_priority_data(6, 8, 4, 6, acyclic=True, random_state=0)
    sccs = NTPAttentionClassifier(E, max_iter=1).fit(X, y).sccs_
    W, info = cyclic_correction(E, X, y, sccs, return_info=True)
    np.testing.assert_array_equal(W, np.zeros((8, 8)))
    assert info["n_samples"] == 0 and info["grad_norm"] == 0.0 and info["loss"] == 0.0
    assert info["n_iter"] == 0 and info["basis"].shape == (64, 0)
    np.testing.assert_array_equal(cyclic_correction(E, X, y, sccs), np.zeros((8, 8)))


def test_cyclic_correction_with_a_general_head_and_selected_positions():
    # loss="ce" with the head C = E (gamma = E E^T), and "labels" given by selected
    # positions (the pseudo graphs of Sec. 6): the result is stationary for the
    # cyclic risk of that selection
    X, y, E = cyclic_instance(2)
    gamma = E @ E.T
    sccs = NTPAttentionClassifier(E, max_iter=1).fit(X, y).sccs_
    Wc, info = cyclic_correction(E, X, y, sccs, gamma=gamma, loss="ce", return_info=True)
    graphs = graphs_by_hand(list(X), y)
    sub_seqs, sub_y, queries, basis = cyclic_by_hand(E, list(X), y, graphs)
    f = lambda M: risk(E, gamma, M, sub_seqs, sub_y, "ce", queries)  # noqa: E731
    assert info["loss"] == pytest.approx(f(Wc), rel=1e-10)
    g = numerical_grad(f, Wc, h=1e-5).ravel()
    assert np.linalg.norm(basis.T @ g) < 1e-7
    W_log = cyclic_correction(E, X, y, sccs)
    assert np.abs(Wc - W_log).max() > 1e-3  # the head and the loss are used
    # selecting the first token of each sequence instead of the label's positions
    keep = np.zeros(X.shape, bool)
    keep[:, 0] = True
    W_keep = cyclic_correction(E, X, y, sccs, keep=keep)
    assert np.abs(W_keep - W_log).max() > 1e-3


def test_risk_with_sample_weights_single_samples_and_tiny_label_mass():
    X, y, E = make_token_priority_data(6, 8, 5, 4, acyclic=True, random_state=6)
    ids, mask, last = check_token_sequences(X)
    gamma = np.eye(6)
    W = np.random.default_rng(1).standard_normal((8, 8))
    w = np.array([0.1, 0.4, 0.2, 0.2, 0.1])
    obj = SelfAttentionRisk(get_backend(), E, gamma, ids, mask, last, y, sample_weight=w)
    per = [risk(E, gamma, W, [s], [label], "log") for s, label in zip(X, y)]
    assert float(obj((W,))[0]) == pytest.approx(np.dot(w, per), rel=1e-12)
    one = SelfAttentionRisk(get_backend(), E, gamma, ids[:1], mask[:1], last[:1], y[:1])
    assert float(one((W,))[0]) == pytest.approx(per[0], rel=1e-12)  # weight 1/n = 1
    # the label gets ~e^-60 of the attention: the loss is ~60, computed exactly
    seq, label = X[0], y[0]
    other = next(t for t in seq if t != label)
    W_away = 60.0 * np.outer(np.linalg.pinv(E)[:, other], np.linalg.pinv(E)[:, seq[-1]])
    W_away -= 60.0 * np.outer(np.linalg.pinv(E)[:, label], np.linalg.pinv(E)[:, seq[-1]])
    value = float(one((W_away,))[0])
    assert np.isfinite(value) and value > 50
    assert value == pytest.approx(risk(E, gamma, W_away, [seq], [label], "log"), rel=1e-9)


def test_log_risk_refuses_a_label_absent_from_its_sequence():
    X, y, E = make_token_priority_data(6, 8, 3, 4, acyclic=True, random_state=6)
    ids, mask, last = check_token_sequences(X)
    y = y.copy()
    y[1] = next(t for t in range(6) if t not in X[1])  # one sample only
    with pytest.raises(ValueError, match="loss='log' is infinite on a sample"):
        SelfAttentionRisk(get_backend(), E, np.eye(6), ids, mask, last, y)
