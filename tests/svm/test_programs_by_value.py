"""The max-margin programs and the dispatcher (``skntp/svm/``), value by value.

Each test checks a value against an independent reference (a program or risk
written here from the papers' equations, a closed form, a hand computation) and
kills the survivors of the run named in its comment; see ``docs/mutation.md``,
"Run 3".
"""

import importlib.util
import itertools
import re
import warnings

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest
from helpers import cyclic_instance, graphs_by_hand, margin, numerical_grad, onehot_optimum, rows_of
from helpers import key_query_instance as _key_query_instance
from helpers import key_query_margins as _key_query_margins
from scipy.special import logsumexp
from sklearn.exceptions import ConvergenceWarning

import skntp.svm._problem as _problem
import skntp.svm.solvers.highs as highs
import skntp.svm.solvers.least_distance as least_distance
from skntp.datasets import make_token_priority_data
from skntp.graphs import is_acyclic, strongly_connected_components, token_priority_graphs
from skntp.svm import (
    NotSeparableError,
    cyclic_correction,
    graph_svm,
    graph_svm_problem,
)
from skntp.svm._graph import pseudo_limits

# ------------------------------------------------------------ references


def _relations_by_hand(graphs):
    """``{(k, i, j, tied)}``: ``i => j`` (an edge across SCCs) and ``j ~ min(SCC)``."""
    out = set()
    for k, g in graphs.items():
        comps = [sorted(c) for c in nx.strongly_connected_components(g)]
        where = {v: c[0] for c in comps for v in c}
        out |= {(k, i, j, False) for i, j in g.edges if where[i] != where[j]}
        out |= {(k, j, c[0], True) for c in comps for j in c[1:]}
    return out


def _graph_svm_by_hand(E, graphs):
    """(Graph-SVM) in cvxpy: ``(e_i - e_j)^T W e_k >= 1`` for i => j, ``= 0`` for i ~ j."""
    d = E.shape[1]
    W = cp.Variable((d, d))
    cons = []
    for k, i, j, tied in _relations_by_hand(graphs):
        lhs = (E[i] - E[j]) @ W @ E[k]
        cons.append(lhs == 0 if tied else lhs >= 1)
    cp.Problem(cp.Minimize(cp.sum_squares(W)), cons).solve(solver=cp.CLARABEL)
    return W.value


def _attention(E, W, seq, query):
    logits = E[seq] @ W @ E[query]
    s = np.exp(logits - logits.max())
    return s / s.sum()


def _risk(E, gamma, W, seqs, y, queries, loss, weights=None):
    """(ERM): ``sum_i w_i l_i / sum_i w_i`` with ``u = sum_t s_t gamma[y, x_t]``."""
    values = []
    for seq, label, query in zip(seqs, y, queries):
        s = _attention(E, W, seq, query)
        if loss == "log":
            values.append(-np.log(s @ gamma[label, seq]))
        elif loss == "squared":
            values.append((1.0 - s @ gamma[label, seq]) ** 2)
        else:
            yhat = gamma[:, seq] @ s
            values.append(logsumexp(yhat) - yhat[label])
    w = np.ones(len(values)) if weights is None else np.asarray(weights, float)
    return float(np.dot(w, values) / w.sum())


def _cyclic_by_hand(E, seqs, y, graphs):
    """Def. 1 and Def. 3: the cyclic sub-dataset (with sample indices) and S_cyc."""
    sub = []
    rows = []
    for k, g in graphs.items():
        for comp in nx.strongly_connected_components(g):
            if len(comp) > 1:
                mean = E[sorted(comp)].mean(axis=0)
                rows += [np.outer(E[j] - mean, E[k]).ravel() for j in comp]
    for i, (seq, label) in enumerate(zip(seqs, y)):
        g = graphs[int(seq[-1])]
        same = [x for x in seq if x == label
                or (nx.has_path(g, x, label) and nx.has_path(g, label, x))]
        if len(set(same)) > 1:
            sub.append((i, np.array(same), int(label), int(seq[-1])))
    _, sv, Vt = np.linalg.svd(np.array(rows), full_matrices=False)
    return sub, Vt[sv > 1e-10 * sv[0]].T


def _cyclic_instance(seed):
    rs = seed
    while True:
        X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=rs)
        graphs = token_priority_graphs(X, y)
        if not is_acyclic(graphs):
            return X, y, E, graphs
        rs += 10_000


# ------------------------------------------------------------ svm/_graph.py


def test_graph_ldp_multipliers_satisfy_the_kkt_conditions():
    # _solve_graph_ldp 46, 47, 91, 93, 107-109: the multipliers, the equality ones
    # included, and the result's figures.
    # For min 1/2 ||W||^2 s.t. <G_c, W> >= 1 (i => j) or = 0 (i ~ j), with
    # G_c = (e_i - e_j) e_k^T: W = sum_c lam_c G_c, lam >= 0 on the inequalities,
    # lam_c (<G_c, W> - 1) = 0, and the gap ||W||^2 - sum_{i => j} lam_c vanishes.
    X, y, E, graphs = _cyclic_instance(1)
    ref = _graph_svm_by_hand(E, graphs_by_hand(list(X), y))
    W, res = graph_svm(E, graphs, method="graph-ldp", return_result=True)
    np.testing.assert_allclose(W, ref, atol=1e-6 * np.abs(ref).max())
    problem = graph_svm_problem(E, graphs)
    c = problem.constraints
    k = problem.info["query_tokens"][c.block]
    assert {(int(a), int(b), int(r), bool(t)) for a, b, r, t
            in zip(k, c.pos, c.ref, c.equality)} == _relations_by_hand(graphs)
    assert c.equality.any() and (~c.equality).any()
    G = np.stack([np.outer(E[i] - E[j], E[q]) for q, i, j in zip(k, c.pos, c.ref)])
    lam = res.dual
    np.testing.assert_allclose(np.einsum("c,cab->ab", lam, G), W, atol=1e-9)
    assert np.all(lam[~c.equality] >= -1e-12)
    slack = np.einsum("cab,ab->c", G, W) - 1.0
    np.testing.assert_allclose((lam * slack)[~c.equality], 0.0, atol=1e-9)
    assert abs(np.sum(W * W) - lam[~c.equality].sum()) < 1e-9 * np.sum(W * W)
    # the result's figures: exact method, no iterations, certified
    assert res.method == "graph-ldp" and res.status == "optimal" and res.n_iter == 0
    assert 0.0 <= res.max_violation < 1e-9 and abs(res.gap) < 1e-12


def test_graph_svm_with_ties_only_gives_zero():
    # every graph one SCC (no i => j pair): W^mm = 0, with a zero gap and zero multipliers
    # (answered by solve_max_margin for any method: every right-hand side is 0)
    X = np.array([[0, 1, 2], [1, 0, 2], [0, 1, 2]])
    y = np.array([0, 1, 2])
    graphs = token_priority_graphs(X, y)
    assert [len(c) for c in nx.strongly_connected_components(graphs[2])] == [3]
    E = np.random.default_rng(0).standard_normal((3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0/0 in the gap
        W, res = graph_svm(E, graphs, method="graph-ldp", return_result=True)
    np.testing.assert_array_equal(W, np.zeros((4, 4)))
    assert res.method == "trivial" and res.gap == 0.0 and res.max_violation == 0.0
    np.testing.assert_array_equal(res.dual, np.zeros(2))


def test_graph_ldp_ties_that_leave_only_zero_are_infeasible():
    # _solve_graph_ldp 25: d = 1, W = w: the tie 0 ~ 1 in G^(2) says
    # (1 - 2) * w * 3 = 0, so w = 0, and 0 => 2 needs (1 - 3) * w * 3 >= 1.
    E = np.array([[1.0], [2.0], [3.0]])
    graphs = token_priority_graphs(np.array([[0, 1, 2], [1, 0, 2]]), np.array([0, 1]))
    with pytest.raises(NotSeparableError, match=r"the equalities \(ties\) leave W = 0 only"):
        graph_svm(E, graphs, method="graph-ldp")
    with pytest.raises(NotSeparableError, match="Graph-SVM"):
        graph_svm(E, graphs, method="cvxpy")


def test_graph_ldp_declines_problems_above_its_size_limit(monkeypatch):
    # _solve_graph_ldp 10, 11: the dense method declines len(constraints) * d^2 above
    # LDP_MAX_ENTRIES and accepts it at the limit.
    X, y, E, graphs = _cyclic_instance(2)
    problem = graph_svm_problem(E, graphs)
    size = len(problem.constraints) * E.shape[1] ** 2
    be = None
    monkeypatch.setattr(least_distance, "LDP_MAX_ENTRIES", size)
    assert least_distance.solve(problem, 1e-8, 100, be, 0) is not None
    monkeypatch.setattr(least_distance, "LDP_MAX_ENTRIES", size - 1)
    assert least_distance.solve(problem, 1e-8, 100, be, 0) is None
    # the core then answers with another method, the same W^mm
    ref = _graph_svm_by_hand(E, graphs_by_hand(list(X), y))
    W, res = graph_svm(E, graphs, return_result=True)
    assert res.method != "graph-ldp"
    np.testing.assert_allclose(W, ref, atol=1e-5 * np.abs(ref).max())


def test_graph_ldp_declines_a_solution_that_fails_its_feasibility_check(monkeypatch):
    # _solve_graph_ldp 49, 65, 71, 76: an NNLS answer short of the margins by 1.5e-7
    # (more than the check's 1e-7) or by 1/2 is declined, not returned.
    X, y, E, graphs = _cyclic_instance(1)
    problem = graph_svm_problem(E, graphs)
    exact = least_distance.solve_ldp
    for shrink in (1.5e-7, 0.5):
        def short(G, h, shrink=shrink):
            z, lam = exact(G, h)
            return z * (1.0 - shrink), lam

        monkeypatch.setattr(least_distance, "solve_ldp", short)
        assert least_distance.solve(problem, 1e-8, 100, None, 0) is None
    monkeypatch.setattr(least_distance, "solve_ldp", exact)
    assert least_distance.solve(problem, 1e-8, 100, None, 0) is not None


def test_graph_ldp_reports_the_duality_gap_of_its_pair(monkeypatch):
    # _solve_graph_ldp 82, 84, 88: the reported gap is (||W||^2 - r^T lam) / ||W||^2
    # of the returned pair.  With half the multipliers it is 1/2, here where
    # ||W||^2 < 1 (embeddings of norm 10).
    X, y, E, graphs = _cyclic_instance(1)
    E = 10.0 * E
    exact = least_distance.solve_ldp
    monkeypatch.setattr(least_distance, "solve_ldp",
                        lambda G, h: (exact(G, h)[0], 0.5 * exact(G, h)[1]))
    # the method's own figures (solve_max_margin recomputes a scale-free certificate)
    res = least_distance.solve(graph_svm_problem(E, graphs), 1e-8, 100, None, 0)
    W = res.primal
    sq = np.sum(W * W)
    assert sq < 1.0
    c = graph_svm_problem(E, graphs).constraints
    assert res.gap == pytest.approx((sq - res.dual[~c.equality].sum()) / sq, rel=1e-9)
    assert res.gap == pytest.approx(0.5, rel=1e-6)


def test_graph_svm_problem_refuses_tokens_outside_the_embeddings():
    # graph_svm_problem 26: a graph that names token K (one past the last row)
    E = np.eye(3)
    for X, y in (([[0, 1, 2]], [3]), ([[0, 3, 1]], [0]), ([[0, 1, 3]], [0])):
        with pytest.raises(ValueError, match="embeddings has 3 rows"):
            graph_svm_problem(E, token_priority_graphs(np.array(X), np.array(y)))
    graphs = token_priority_graphs(np.array([[0, 1, 2]]), np.array([0]))
    graphs[2].add_edge(0, -1)
    with pytest.raises(ValueError, match="embeddings has"):
        graph_svm_problem(E, graphs)


def test_graph_svm_without_graphs_is_zero():
    # graph_svm_problem 22, 29, 31: no graph at all: no constraint, W^mm = 0
    E = np.random.default_rng(1).standard_normal((4, 3))
    W, res = graph_svm(E, {}, return_result=True)
    np.testing.assert_array_equal(W, np.zeros((3, 3)))
    assert graph_svm_problem(E, {}).info["query_tokens"].shape == (0,)


def test_graph_svm_uses_the_requested_method_and_backend():
    # graph_svm 22: method= and the backend options reach the core
    X, y, E, graphs = _cyclic_instance(1)
    _, res = graph_svm(E, graphs, method="cvxpy", return_result=True)
    assert res.method == "cvxpy"
    with pytest.raises(ValueError, match="backend must be"):
        graph_svm(E, graphs, backend="bogus")


def test_embeddings_of_one_token_or_one_dimension():
    # _check_embeddings 6, 7, 10, 11, 12, 14, 15: (K, d) with K = 1 or d = 1 is valid;
    # no row, no column, or not 2-D is refused
    W = graph_svm(np.ones((1, 2)), token_priority_graphs(np.array([[0]]), np.array([0])))
    np.testing.assert_array_equal(W, np.zeros((2, 2)))
    # d = 1: W = w, 0 => 1 in G^(2) needs (1 - 2) * w * 3 >= 1: w = -1/3
    E = np.array([[1.0], [2.0], [3.0]])
    graphs = token_priority_graphs(np.array([[0, 1, 2]]), np.array([0]))
    np.testing.assert_allclose(graph_svm(E, graphs), [[-1.0 / 3.0]], rtol=1e-9)
    for bad in (np.zeros((0, 2)), np.zeros((2, 0)), np.ones(3), np.ones((1, 1, 1))):
        with pytest.raises(ValueError, match=r"embeddings must be a 2-D \(K, d\) array"):
            graph_svm_problem(bad, {})
    with pytest.raises(ValueError, match="embeddings contain NaN"):
        graph_svm_problem(np.array([[1.0, np.nan]]), {})


def test_cyclic_correction_of_one_sample_in_closed_form():
    # cyclic_correction 65: a cyclic sub-dataset of one sample.  E = I, sequence
    # (0, 1, 2), label 0, SCC {0, 1} in G^(2); squared loss with gamma[0, 0] = 4,
    # gamma[0, 1] = 0: the risk (1 - 4 s_0)^2 is zero at s_0 = 1/4, i.e.
    # W[0, 2] - W[1, 2] = -log 3, and W^cyc in S_cyc = span{(e_0 - e_1) e_2^T}.
    gamma = np.zeros((3, 3))
    gamma[0, 0] = 4.0
    W, info = cyclic_correction(np.eye(3), np.array([[0, 1, 2]]), np.array([0]),
                                {2: [{0, 1}, {2}]}, gamma=gamma, loss="squared",
                                return_info=True)
    expected = np.zeros((3, 3))
    expected[0, 2], expected[1, 2] = -np.log(3) / 2, np.log(3) / 2
    np.testing.assert_allclose(W, expected, atol=1e-9)
    assert info["n_samples"] == 1 and info["loss"] < 1e-18


def test_cyclic_correction_with_sample_weights():
    # cyclic_correction 27 (and 29, 92, 124, not reached): the weighted risk
    # sum_i w_i l_i / sum_i w_i of the cyclic sub-dataset is stationary at W^cyc inside
    # S_cyc, and info["loss"] is it
    X, y, E, _ = _cyclic_instance(0)
    graphs = graphs_by_hand(list(X), y)
    sub, basis = _cyclic_by_hand(E, list(X), y, graphs)
    w = np.random.default_rng(0).uniform(0.2, 3.0, len(X))
    sccs = strongly_connected_components(token_priority_graphs(X, y))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # cyclic_correction 129: np.finfo(None) warns
        W, info = cyclic_correction(E, X, y, sccs, sample_weight=w, return_info=True)
    seqs, labels, queries = ([s[k] for s in sub] for k in (1, 2, 3))
    ws = w[[s[0] for s in sub]]
    f = lambda M: _risk(E, np.eye(6), M, seqs, labels, queries, "log", ws)  # noqa: E731
    assert info["loss"] == pytest.approx(f(W), rel=1e-10)
    np.testing.assert_allclose(basis @ (basis.T @ W.ravel()), W.ravel(), atol=1e-9)
    assert np.linalg.norm(basis.T @ numerical_grad(f, W, h=1e-5).ravel()) < 1e-7
    # the weights matter: the unweighted minimizer is not stationary here
    W1 = cyclic_correction(E, X, y, sccs)
    assert np.linalg.norm(basis.T @ numerical_grad(f, W1, h=1e-5).ravel()) > 1e-4


def _two_token_cycle():
    # E = I, query 3, SCC {0, 1} of G^(3): two samples want token 0, one token 1, so
    # the cyclic risk -(2/3) log s_0 - (1/3) log s_1 is minimal at s_0 = 2/3, i.e.
    # W[0, 3] - W[1, 3] = log 2, with W^cyc = (log 2 / 2) (e_0 - e_1) e_3^T in S_cyc
    X = [np.array([0, 1, 3]), np.array([0, 1, 3]), np.array([1, 0, 3])]
    expected = np.zeros((4, 4))
    expected[0, 3], expected[1, 3] = np.log(2) / 2, -np.log(2) / 2
    entropy = -(2 / 3) * np.log(2 / 3) - (1 / 3) * np.log(1 / 3)
    return X, np.array([0, 0, 1]), {3: [{0, 1}, {2}, {3}]}, expected, entropy


def test_cyclic_correction_leaves_out_labels_without_mass_on_the_selection():
    # cyclic_correction 73-75, 83, 86, 95-98: with selected positions (keep), a sample
    # whose label is not among the kept tokens has loss -log 0 under loss="log", a
    # constant; it is left out of the risk, not allowed to make it infinite
    X, y, sccs, expected, entropy = _two_token_cycle()
    X = [*X, np.array([0, 1, 2, 3])]  # label 2; the selected token 0 keeps {0, 1}
    y = np.append(y, 2)
    keep = np.zeros((4, 4), bool)
    keep[:, 0] = True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        W, info = cyclic_correction(np.eye(4), X, y, sccs, keep=keep, return_info=True)
    np.testing.assert_allclose(W, expected, atol=1e-9)
    assert info["n_samples"] == 3 and info["loss"] == pytest.approx(entropy, rel=1e-12)
    # without the selection the fourth sample's label is alone in its SCC (dropped too)
    np.testing.assert_allclose(cyclic_correction(np.eye(4), X, y, sccs), expected,
                               atol=1e-9)
    # every label outside the selection: nothing is left, and W^cyc is zero
    W, info = cyclic_correction(np.eye(4), X[3:], y[3:], sccs, keep=keep[3:],
                                return_info=True)
    np.testing.assert_array_equal(W, np.zeros((4, 4)))
    assert info["n_samples"] == 0 and info["loss"] == 0.0 and info["n_iter"] == 0
    W = cyclic_correction(np.eye(4), X[3:], y[3:], sccs, keep=keep[3:])
    assert isinstance(W, np.ndarray)
    np.testing.assert_array_equal(W, np.zeros((4, 4)))


def test_cyclic_correction_when_the_cyclic_subspace_is_zero():
    # cyclic_correction 63 (rewritten since): tokens 0 and 1 share an embedding, so
    # S_cyc = span{(E^T (e_0 - e_1)) (E^T e_3)^T} = {0}; W^cyc is zero, but the cyclic
    # sub-dataset is not empty and info reports its risk there: s_0 = s_1 = 1/2
    X, y, sccs, _, _ = _two_token_cycle()
    E = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        W, info = cyclic_correction(E, X, y, sccs, return_info=True)
    np.testing.assert_array_equal(W, np.zeros((3, 3)))
    assert info["basis"].shape == (9, 0) and info["n_samples"] == 3
    assert info["loss"] == pytest.approx(np.log(2), rel=1e-12)
    assert info["grad_norm"] == 0.0


def test_cyclic_correction_with_a_tolerance_below_the_noise_floor():
    # cyclic_correction 231: tol=1e-30 is below the noise floor, so the Newton polish
    # stops when its step no longer lowers the gradient (here after L-BFGS's 1e-11 and
    # two Newton steps to about 1e-17); the minimizer is still returned, and no warning
    # is due.  Where the floor lies depends on the platform's rounding: a step can even
    # land on a gradient that rounds to exactly 0 (OPENBLAS_CORETYPE=Prescott with
    # NumPy's baseline kernels), which meets tol.  So the reported figure is checked
    # against the gradient of the risk on the cyclic sub-dataset at the returned W,
    # projected on the returned basis, recomputed here
    from skntp._backend import get_backend
    from skntp.graphs import cyclic_subdataset
    from skntp.losses.self_attention import SelfAttentionRisk

    for seed in (1, 2):
        X, y, E = cyclic_instance(seed)
        sccs = strongly_connected_components(token_priority_graphs(X, y))
        W = cyclic_correction(E, X, y, sccs)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            W30, info = cyclic_correction(E, X, y, sccs, tol=1e-30, return_info=True)
        np.testing.assert_allclose(W30, W, atol=1e-9)
        ids, mask, query, labels, _ = cyclic_subdataset(X, y, sccs)
        risk = SelfAttentionRisk(get_backend("numpy"), E, np.eye(E.shape[0]), ids, mask,
                                 query, labels, loss="log")
        grad = info["basis"].T @ risk((W30,))[1][0].ravel()
        assert info["grad_norm"] < 1e-15
        assert info["grad_norm"] == pytest.approx(np.linalg.norm(grad), rel=1e-6, abs=1e-30)


def test_cyclic_correction_warns_when_stopped_far_from_stationarity():
    # cyclic_correction 250, 252: the squared loss with the identity head has no finite
    # minimizer (s_0 -> 1); one L-BFGS iteration and the Newton polish end at a
    # gradient norm between 1e-7 and 1, which the warning reports
    args = (np.eye(3), np.array([[0, 1, 2]]), np.array([0]), {2: [{0, 1}, {2}]})
    with pytest.warns(ConvergenceWarning, match="minimized to a gradient norm of"):
        _, info = cyclic_correction(*args, loss="squared", max_iter=1, return_info=True)
    assert 1e-6 < info["grad_norm"] < 1e-1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, info = cyclic_correction(*args, loss="squared", return_info=True)
    assert info["grad_norm"] <= 1e-8


def _pseudo_by_hand(E, X, selected):
    """Sec. 6: in G^(k) every selected position's token points to every token."""
    graphs = {}
    for seq, sel in zip(X, selected):
        g = graphs.setdefault(int(seq[-1]), nx.DiGraph())
        g.add_nodes_from(int(x) for x in seq)
        for a, b in itertools.product(seq[sel], seq):
            if a != b:
                g.add_edge(int(a), int(b))
    return graphs


def test_pseudo_limits_against_hand_written_programs():
    # pseudo_limits 7, 20, 21, 39-41, 46-48, 76, 80: the pseudo graphs, the (Graph-SVM)
    # direction on them, the pseudo cyclic correction (the risk of the true labels on
    # the tokens of the selected tokens' SCC, with the given head and loss, stationary
    # inside the pseudo S_cyc)
    X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=3)
    gamma = E @ E.T
    selected = np.zeros(X.shape, bool)
    selected[:, 0] = True
    selected[::2, 1] = True
    out = pseudo_limits(E, X, y, selected, gamma=gamma, loss="ce", method="cvxpy")
    graphs = _pseudo_by_hand(E, X, selected)
    assert {k: set(g.edges) for k, g in out.graphs.items()} == \
        {k: set(g.edges) for k, g in graphs.items()}
    ref = _graph_svm_by_hand(E, graphs)
    np.testing.assert_allclose(out.mm_direction, ref / np.linalg.norm(ref), atol=1e-6)
    assert out.is_acyclic is False
    sub_seqs, sub_y, queries, rows = [], [], [], []
    for k, g in graphs.items():
        for comp in nx.strongly_connected_components(g):
            if len(comp) > 1:
                mean = E[sorted(comp)].mean(axis=0)
                rows += [np.outer(E[j] - mean, E[k]).ravel() for j in comp]
    for seq, label, sel in zip(X, y, selected):
        g = graphs[int(seq[-1])]
        a = seq[sel][0]
        same = [x for x in seq if nx.has_path(g, x, a) and nx.has_path(g, a, x)]
        if len(set(same)) > 1:
            sub_seqs.append(np.array(same))
            sub_y.append(int(label))
            queries.append(int(seq[-1]))
    _, sv, Vt = np.linalg.svd(np.array(rows), full_matrices=False)
    basis = Vt[sv > 1e-10 * sv[0]].T
    Wc = out.finite_component
    assert np.abs(Wc).max() > 1e-3
    np.testing.assert_allclose(basis @ (basis.T @ Wc.ravel()), Wc.ravel(), atol=1e-9)
    f = lambda M: _risk(E, gamma, M, sub_seqs, sub_y, queries, "ce")  # noqa: E731
    assert np.linalg.norm(basis.T @ numerical_grad(f, Wc, h=1e-5).ravel()) < 1e-7
    # the projector onto the pseudo S_cyc
    Z = np.random.default_rng(0).standard_normal((8, 8))
    np.testing.assert_allclose(out.projector.project(Z).ravel(),
                               basis @ (basis.T @ Z.ravel()), atol=1e-10)
    # the options reach the solvers
    with pytest.raises(ValueError, match="'bogus'"):
        pseudo_limits(E, X, y, selected, method="bogus")
    with pytest.raises(ValueError, match="backend must be"):
        pseudo_limits(E, X, y, selected, backend="bogus")


def test_pseudo_limits_without_a_strict_pair():
    # pseudo_limits 71, 73-75: every pseudo graph one SCC: W^mm = 0, direction zero
    X = np.array([[0, 1, 2], [1, 0, 2]])
    selected = np.ones(X.shape, bool)
    out = pseudo_limits(np.eye(3), X, np.array([0, 1]), selected)
    np.testing.assert_array_equal(out.mm_direction, np.zeros((3, 3)))
    # a tiny W^mm (norm < 1) is still normalized
    E = 100.0 * np.eye(3)
    out = pseudo_limits(E, np.array([[0, 1, 2]]), np.array([0]),
                        np.array([[True, False, False]]))
    assert np.linalg.norm(out.mm_direction) == pytest.approx(1.0, rel=1e-9)


def test_pseudo_limits_defaults_on_the_label_positions():
    # pseudo_limits 1-4, 54, 55, 60, 61, 66: with the label positions selected the pseudo
    # graphs are the token-priority graphs; by default (log-loss, identity head,
    # method="auto") the limits are W^mm of (Graph-SVM) and W^cyc of Def. 3
    X, y, E, _ = _cyclic_instance(0)
    graphs = graphs_by_hand(list(X), y)
    out = pseudo_limits(E, X, y, X == y[:, None])
    assert {k: set(g.edges) for k, g in out.graphs.items()} == \
        {k: set(g.edges) for k, g in graphs.items()}
    assert {k: sorted(map(sorted, c)) for k, c in out.sccs.items()} == \
        {k: sorted(map(sorted, nx.strongly_connected_components(g)))
         for k, g in graphs.items()}
    assert out.is_acyclic is False
    ref = _graph_svm_by_hand(E, graphs)
    np.testing.assert_allclose(out.mm_direction, ref / np.linalg.norm(ref), atol=1e-6)
    sub, basis = _cyclic_by_hand(E, list(X), y, graphs)
    Wc = out.finite_component
    np.testing.assert_allclose(basis @ (basis.T @ Wc.ravel()), Wc.ravel(), atol=1e-9)
    seqs, labels, queries = ([s[k] for s in sub] for k in (1, 2, 3))
    f = lambda M: _risk(E, np.eye(6), M, seqs, labels, queries, "log")  # noqa: E731
    assert np.abs(Wc).max() > 1e-3
    assert np.linalg.norm(basis.T @ numerical_grad(f, Wc, h=1e-5).ravel()) < 1e-7


# ------------------------------------------------- run 5: the NTP programs (_ntp.py)


def _anchored_ntp_rows(S):
    """(4a)-(4b) with the first in-support token of each context as its anchor:
    ``{(j, z, anchor, 0, True)}`` for ``z in S_j``, ``{(j, anchor, v, 1, False)}`` else."""
    rows = set()
    for j, s in enumerate(S):
        a = int(np.flatnonzero(s)[0])
        for v in range(S.shape[1]):
            if v != a:
                rows.add((j, v, a, 0.0, True) if s[v] else (j, a, v, 1.0, False))
    return rows


def test_ntp_svm_problem_rows_are_4a_4b_dense_and_sparse_with_stored_zeros():
    import scipy.sparse as sp

    from skntp.svm import ntp_svm_problem

    rng = np.random.default_rng(5)
    S = rng.random((7, 6)) < 0.4
    S[np.arange(7), rng.integers(0, 6, 7)] = True
    ref = _anchored_ntp_rows(S)
    assert rows_of(ntp_svm_problem(rng.standard_normal((7, 3)), S)) == ref
    # a sparse support with explicitly stored False entries: they are out of support
    coo = sp.coo_matrix(S)
    extra = np.argwhere(~S)[:4]
    data = np.concatenate([coo.data, np.zeros(len(extra), bool)])
    rows = np.concatenate([coo.row, extra[:, 0]])
    cols = np.concatenate([coo.col, extra[:, 1]])
    S_stored = sp.csr_matrix((data, (rows, cols)), shape=S.shape)
    assert S_stored.nnz == S.sum() + 4
    assert rows_of(ntp_svm_problem(rng.standard_normal((7, 3)), S_stored)) == ref
    problem = ntp_svm_problem(rng.standard_normal((7, 3)), S, norm="max")
    assert problem.norm == "max" and problem.shape == (6, 3)


@pytest.mark.parametrize("rows_per_chunk", [1, 2, 3, 7, None])
def test_out_of_support_in_chunks_is_every_pair_outside(rows_per_chunk):
    import scipy.sparse as sp

    from skntp.svm._ntp import _out_of_support

    rng = np.random.default_rng(6)
    S = rng.random((7, 9)) < 0.3
    j, v = _out_of_support(sp.csr_matrix(S), rows_per_chunk=rows_per_chunk)
    want_j, want_v = np.nonzero(~S)
    np.testing.assert_array_equal(j, want_j)
    np.testing.assert_array_equal(v, want_v)


def _one_token_supports(seed, m, d, V, tokens):
    """Contexts ``(m, d)`` and supports of one token each, drawn from the first ``tokens``."""
    rng = np.random.default_rng(seed)
    H = rng.standard_normal((m, d))
    S = np.zeros((m, V), bool)
    S[np.arange(m), rng.integers(0, tokens, m)] = True
    return H, S


def _spy_on_the_core(monkeypatch, module="_ntp"):
    """Record ``(problem, options, result)`` of every call of a module's ``solve_max_margin``."""
    import importlib

    svm_module = importlib.import_module(f"skntp.svm.{module}")
    calls = []
    real = svm_module.solve_max_margin

    def spy(problem, **kwargs):
        calls.append((problem, kwargs, real(problem, **kwargs)))
        return calls[-1][2]

    monkeypatch.setattr(svm_module, "solve_max_margin", spy)
    return calls


@pytest.mark.parametrize("norm", ["fro", "max"])
def test_ntp_svm_passes_its_options_and_returns_what_it_promises(norm, monkeypatch):
    from skntp.svm import ntp_svm

    H, S = _one_token_supports(8, 8, 5, 6, 6)
    S[0, 5] = True
    calls = _spy_on_the_core(monkeypatch)
    method = "cvxpy"
    W = ntp_svm(H, S, norm=norm, method=method, tol=1e-7, max_iter=777, dtype="float64")
    assert isinstance(W, np.ndarray) and W.shape == (6, 5)
    assert calls[-1][1] == dict(method=method, tol=1e-7, max_iter=777, dtype="float64")
    W2, result = ntp_svm(H, S, norm=norm, method=method, return_result=True)
    np.testing.assert_array_equal(W2, result.primal)
    assert result.method == "cvxpy" and result.status == "optimal"
    np.testing.assert_allclose(W2, W, atol=1e-6 * np.abs(W).max())
    with pytest.raises(ValueError, match="backend must be"):
        ntp_svm(H, S, norm=norm, backend="no-such-backend")


def test_log_odds_problem_names_itself_in_its_errors_and_is_a_min_norm_program():
    from skntp.svm import NotSeparableError, finite_component, log_odds_problem
    from skntp.svm import solve_max_margin as solve

    # three contexts, two tokens, d = 1: (w_1 - w_0) h_j = log(p_j1 / p_j0) has no solution
    H = np.array([[1.0], [2.0], [3.0]])
    P = np.array([[0.5, 0.5], [0.2, 0.8], [0.6, 0.4]])
    with pytest.raises(NotSeparableError, match="NTP log-odds equations.*not NTP_H-compatible"):
        solve(log_odds_problem(H, P), method="cvxpy")
    # compatible (m = d): the equalities' max-margin program is their min-norm solution,
    # (w_1 - w_0) = H^-1 log-odds split evenly between the two rows
    H = np.array([[1.0, 0.5], [-0.3, 2.0]])
    P = np.array([[0.25, 0.75], [0.9, 0.1]])
    diff = np.linalg.solve(H, np.log(P[:, 1] / P[:, 0]))
    want = np.stack([-diff / 2, diff / 2])
    np.testing.assert_allclose(finite_component(H, P), want, atol=1e-10)
    np.testing.assert_allclose(solve(log_odds_problem(H, P), method="cvxpy").primal, want,
                               atol=1e-6)
    with pytest.raises(FloatingPointError, match="NTP log-odds equations"):
        finite_component(H * 1e-308, P)  # W* about 1e308: beyond float64


def test_solve_ntp_svm_in_the_max_norm_and_the_sign_descent_decoders_limit():
    from skntp import NTPDecoderClassifier
    from skntp.svm import exchangeable_tokens, solve_ntp_svm

    rng = np.random.default_rng(9)
    X = rng.standard_normal((10, 12))
    y = rng.integers(0, 4, 10)
    # V = 6: tokens 4 and 5 never follow a context, so they are exchangeable (the
    # Frobenius reduction must not be used in the max norm)
    S = np.eye(6, dtype=bool)[y]
    assert exchangeable_tokens(S)[0].size < 6
    best = 1 / onehot_optimum(X, y, 6, "max")  # min ||W||_max, in cvxpy
    problem, result = solve_ntp_svm(X, S, norm="max", method="cvxpy")
    assert problem.norm == "max" and result.method == "cvxpy"
    assert np.abs(result.primal).max() == pytest.approx(best, rel=1e-6)
    with pytest.raises(ValueError, match="backend must be"):
        solve_ntp_svm(X, S, norm="max", backend="no-such-backend")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = NTPDecoderClassifier(solver="signgd", max_iter=50, vocabulary=6).fit(X, y)
    assert est.limit_norm_ == "max"
    assert est.mm_margin_ == pytest.approx(1 / best, rel=1e-6)
    assert margin(X, y, est.mm_direction_.copy(), "max") == pytest.approx(1 / best, rel=1e-6)


def test_solve_ntp_svm_merges_exchangeable_tokens_by_default(monkeypatch):
    from skntp.svm import exchangeable_tokens, solve_ntp_svm

    H, S = _one_token_supports(10, 6, 8, 9, 3)  # tokens 3..8 never in any support
    n_classes = exchangeable_tokens(S)[0].size
    assert n_classes < 9
    calls = _spy_on_the_core(monkeypatch)
    merged = solve_ntp_svm(H, S)[1].primal
    full = solve_ntp_svm(H, S, merge_exchangeable=False)[1].primal
    assert [problem.shape for problem, _, _ in calls] == [(n_classes, 8), (9, 8)]
    np.testing.assert_allclose(merged, full, atol=1e-7 * np.abs(full).max())


@pytest.mark.parametrize("sparse", [False, True])
def test_exchangeable_tokens_of_probabilities_group_by_support(sparse):
    # the public helper reads nonzeros as the support, whatever the dtype
    import scipy.sparse as sp

    from skntp.svm import exchangeable_tokens

    rng = np.random.default_rng(11)
    P = rng.random((5, 7)) * (rng.random((5, 7)) < 0.5)
    P[:, 6] = P[:, 2] * 3.0  # the same support, other values
    given = sp.csr_matrix(P) if sparse else P
    for a, b in zip(exchangeable_tokens(given), exchangeable_tokens(P > 0)):
        np.testing.assert_array_equal(a, b)
    assert exchangeable_tokens(given)[1][6] == exchangeable_tokens(given)[1][2]


def test_solve_ntp_svm_reports_the_reduced_solves_status_gap_and_violation(monkeypatch):
    from skntp.svm import solve_ntp_svm

    H, S = _one_token_supports(12, 6, 8, 9, 3)
    S[0, 1] = True
    calls = _spy_on_the_core(monkeypatch)
    problem, result = solve_ntp_svm(H, S, method="accelerated-dual", max_iter=5000)
    ((_, _, reduced),) = calls
    assert reduced.primal.shape[0] < 9  # the merged program was solved
    assert (result.method, result.status, result.n_iter) == (
        reduced.method, reduced.status, reduced.n_iter) == (
        "accelerated-dual", "optimal", reduced.n_iter)
    assert result.n_iter > 0 and result.gap == reduced.gap <= 1e-8
    # the violation of the full program (4a)-(4b) at the mapped solution, by hand
    W = result.primal
    worst = 0.0
    for j in range(6):
        a = np.flatnonzero(S[j])[0]
        for v in range(9):
            diff = (W[a] - W[v]) @ H[j]
            worst = max(worst, abs(diff) if S[j, v] else 1.0 - diff)
    assert result.max_violation == reduced.max_violation
    assert abs(result.max_violation - worst) <= 1e-9


def test_a_too_large_ntp_svm_is_named_in_its_error(monkeypatch):
    from skntp.svm import ProgramTooLargeError, ntp_svm_problem

    monkeypatch.setattr(_problem, "available_memory", lambda: 1000)
    S = np.eye(5, dtype=bool)[[0, 1, 2, 3]]
    with pytest.raises(ProgramTooLargeError, match=r"^NTP-SVM: the program has 16 constraints"):
        ntp_svm_problem(np.eye(4), S)


# -------------------------------------------- run 7: the joint model's programs (_joint.py)


def _padded(seed, lengths, d=3, pad=50.0):
    """Ragged inputs padded with large tokens, labels alternating +1, -1."""
    rng = np.random.default_rng(seed)
    X = np.full((len(lengths), max(lengths), d), pad)
    mask = np.zeros(X.shape[:2], bool)
    for i, t in enumerate(lengths):
        X[i, :t], mask[i, :t] = rng.standard_normal((t, d)), True
    return X, np.where(np.arange(len(lengths)) % 2 == 0, 1.0, -1.0), mask


def _joint_heuristic_by_hand(X, y, mask, n_starts):
    """joint_svm's alternating maximization as its docstring states it (Sec. 3.1), step by
    step; the head SVMs and the ATT-SVM feasibility by the package's solvers, which other
    tests check against cvxpy."""
    from skntp.svm import NotSeparableError, head_svm, relaxed_att_svm

    n, T, _ = X.shape
    solved = {}

    def margin_of(alpha):
        key = tuple(int(a) for a in alpha)
        if key not in solved:
            try:
                v = head_svm(X[np.arange(n), alpha], y)
                solved[key] = (v, 1.0 / np.linalg.norm(v))
            except NotSeparableError:
                solved[key] = (None, 0.0)
        return solved[key]

    def ascend(v):  # alpha_i = argmax_t Y_i v^T x_it, v = v^mm(alpha), until no gain
        best = None
        for _ in range(100):
            alpha = np.array([max((t for t in range(T) if mask[i, t]),
                                  key=lambda t, i=i: (y[i] * X[i, t] @ v, -t))
                              for i in range(n)])
            if best is not None and (alpha == best[0]).all():
                break
            v_new, margin = margin_of(alpha)
            if v_new is None or (best is not None and margin <= best[2]):
                break
            best, v = (alpha, v_new, margin), v_new
        return best

    # the class-mean head, then Y_i x_it for the n_starts real tokens of largest norm
    starts = [sum(y[i] * X[i][mask[i]].mean(axis=0) for i in range(n))]
    largest = sorted((-np.linalg.norm(X[i, t]), i, t) for i in range(n) for t in range(T)
                     if mask[i, t])[:n_starts]
    starts += [y[i] * X[i, t] for _, i, t in largest]
    finals = {}
    for v0 in starts:
        found = ascend(v0)
        if found is not None:
            finals.setdefault(tuple(found[0]), found)
    for alpha, v, margin_ in sorted(finals.values(), key=lambda f: -f[2]):
        try:
            relaxed_att_svm(X, alpha, mask=mask)
        except NotSeparableError:
            continue
        return alpha, v, margin_, len(solved)
    return None


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("n_starts", [0, 2, 32])
def test_joint_svm_heuristic_follows_its_documented_algorithm(seed, n_starts):
    from skntp.svm import UndecidedError, joint_svm

    X, y, mask = _padded(seed, (4, 3, 4, 2, 4, 3), d=5)  # 1 152 choices: the heuristic
    by_hand = _joint_heuristic_by_hand(X, y, mask, n_starts)
    if by_hand is None:  # no fixed point is selectable by attention (6 of the 24 cases)
        # undecided, not "not separable": in each of these 6 cases some choice the
        # heuristic did not reach is both separable and selectable
        with pytest.raises(UndecidedError, match="alternating heuristic"):
            joint_svm(X, y, mask=mask, n_starts=n_starts)
        assert joint_svm(X, y, mask=mask, max_enumeration=1152).label_margin > 0
        return
    alpha, v, margin, n_solved = by_hand
    res = joint_svm(X, y, mask=mask, n_starts=n_starts)
    assert res.exhaustive is False
    np.testing.assert_array_equal(res.selected, alpha)
    np.testing.assert_allclose(res.head, v, rtol=1e-12)
    assert res.label_margin == pytest.approx(margin, rel=1e-12)
    assert res.n_candidates == n_solved


def test_joint_svm_passes_its_options_to_every_program(monkeypatch):
    from skntp.svm import joint_svm

    X, y, mask = _padded(1, (3, 2, 3, 2))
    calls = _spy_on_the_core(monkeypatch, "_joint")
    res = joint_svm(X, y, mask=mask, support_tol=-1.0)  # no support vector: p^relax solved
    assert not res.support.any()
    names = [c[0].name for c in calls]  # separable choices' head SVMs, ATT-SVMs, p^relax
    assert set(names) == {"head SVM", "ATT-SVM", "relaxed ATT-SVM (10)"}
    assert names.count("relaxed ATT-SVM (10)") == 1
    assert all(c[1] == dict(method="auto", tol=None, max_iter=100_000) for c in calls)
    calls.clear()
    for max_enumeration in (256, 1):
        joint_svm(X, y, mask=mask, support_tol=-1.0, max_enumeration=max_enumeration,
                  method="cvxpy", tol=1e-7, max_iter=5000, dtype="float64")
    assert calls and all(
        c[1] == dict(method="cvxpy", tol=1e-7, max_iter=5000, dtype="float64") for c in calls)


def test_joint_svm_reports_its_starts_and_refuses_no_inputs():
    from skntp.svm import NotSeparableError, UndecidedError, joint_svm

    # every token the same: no head separates the two labels; 1 + 32 starting heads,
    # which prove nothing (undecided); the exhaustive search proves it
    X = np.ones((2, 20, 3))
    with pytest.raises(UndecidedError, match="from 33 starting heads"):
        joint_svm(X, [1.0, -1.0], max_enumeration=1)
    with pytest.raises(UndecidedError, match="from 4 starting heads"):
        joint_svm(X, [1.0, -1.0], max_enumeration=1, n_starts=3)
    with pytest.raises(NotSeparableError, match="among all 400 choices"):
        joint_svm(X, [1.0, -1.0], max_enumeration=400)
    for shape in [(0, 3, 2), (2, 0, 2)]:
        with pytest.raises(ValueError, match="at least one input of one token"):
            joint_svm(np.zeros(shape), np.ones(shape[0]))


def test_head_and_relaxed_att_svm_pass_their_options_and_defaults(monkeypatch):
    from skntp.svm import head_svm, relaxed_att_svm

    X, y, mask = _padded(1, (3, 2, 3, 2))
    alpha = np.array([0, 1, 0, 1])
    calls = _spy_on_the_core(monkeypatch, "_joint")
    head_svm(X[np.arange(4), alpha], y)
    relaxed_att_svm(X, alpha, mask=mask)
    assert [c[1] for c in calls] == [dict(method="auto", tol=None, max_iter=100_000)] * 2
    calls.clear()
    options = dict(method="cvxpy", tol=1e-7, max_iter=5000, dtype="float64")
    head_svm(X[np.arange(4), alpha], y, **options)
    relaxed_att_svm(X, alpha, np.array([True, False, True, False]), mask=mask, **options)
    assert [c[1] for c in calls] == [options] * 2


def test_support_vectors_include_the_boundary_margin():
    # i is a support vector when Y_i v^T r_i <= 1 + tol (Sec. 3.2): exactly 1 + tol counts
    from skntp.svm import support_vectors

    tokens = np.array([[1.5, 0.0], [0.0, -1.0], [2.0, 0.0]])
    support = support_vectors(tokens, [1.0, -1.0, 1.0], np.array([1.0, 1.0]), tol=0.5)
    np.testing.assert_array_equal(support, [True, True, False])


def test_relaxed_att_svm_takes_a_support_of_zeros_and_ones():
    # eq. (10) with S given as 0/1 integers is the program with S as booleans
    from skntp.svm import relaxed_att_svm

    X, _, mask = _padded(2, (3, 2, 3, 2))
    alpha = np.array([0, 1, 2, 0])
    want = relaxed_att_svm(X, alpha, np.array([True, False, True, False]), mask=mask)
    got = relaxed_att_svm(X, alpha, [1, 0, 1, 0], mask=mask)
    np.testing.assert_array_equal(got, want)
    assert np.any(want != relaxed_att_svm(X, alpha, mask=mask))  # S matters here


# ------------------------------------------ run 7 (continued): the max-margin core (_core.py)


def _spy_on_linprog(monkeypatch):
    """The ``method`` of every ``scipy.optimize.linprog`` call, in order."""
    methods = []
    real = highs.linprog

    def spy(*args, **kwargs):
        methods.append(kwargs.get("method"))
        return real(*args, **kwargs)

    monkeypatch.setattr(highs, "linprog", spy)
    return methods


@pytest.mark.parametrize("scale", [1.0, 0.01])  # margins gamma above and below 1
def test_highs_answers_a_homogeneous_max_norm_program_by_its_fast_formulation(scale,
                                                                              monkeypatch):
    # every skntp program is homogeneous (rhs >= 0 on inequalities, 0 on equalities):
    # HiGHS solves max gamma over the box |w_i| <= 1 (highs-ipm) and only hands a program it
    # cannot answer that way to the general LP, which would hide a broken fast path
    from skntp.svm import ntp_svm_problem, solve_max_margin

    H, S = _one_token_supports(3, 8, 10, 5, 5)  # Crammer-Singer, d > m: separable
    H = scale * H
    y = S.argmax(axis=1)
    methods = _spy_on_linprog(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = solve_max_margin(ntp_svm_problem(H, S, norm="max"), method="highs", tol=1e-9)
    assert methods == ["highs-ipm"]
    W = res.primal
    assert np.abs(W).max() == pytest.approx(1 / onehot_optimum(H, y, 5, "max"), rel=1e-6)
    # every margin-1 row met exactly (to one rounding), not to HiGHS's tolerance / gamma
    L = H @ W.T
    gaps = L[np.arange(8), y][:, None] - np.delete(L, y + 5 * np.arange(8)).reshape(8, 4)
    assert gaps.min() >= 1 - 2e-16
    assert res.status == "optimal" and res.gap <= 1e-9 and res.n_iter > 0


@pytest.mark.parametrize("scale", [1e-7, 1e7])
def test_a_badly_scaled_program_keeps_its_solution_and_multipliers(scale):
    # solved at unit magnitude and scaled back: w by alpha, the Frobenius multipliers by
    # alpha^2 (KKT of min 1/2 ||v||^2 s.t. Y_i v^T r_i >= 1: v = sum_i lam_i Y_i r_i)
    from skntp.svm import head_svm

    rng = np.random.default_rng(4)
    y = np.where(np.arange(6) % 2 == 0, 1.0, -1.0)
    tokens = y[:, None] * (np.array([1.0, 0.0, 0.0]) + 0.3 * rng.standard_normal((6, 3)))
    v1, r1 = head_svm(tokens, y, return_result=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vs, rs = head_svm(scale * tokens, y, return_result=True)
    np.testing.assert_allclose(vs, v1 / scale, rtol=1e-8)
    np.testing.assert_allclose(vs, (rs.dual * y) @ (scale * tokens), rtol=1e-7)
    np.testing.assert_allclose(rs.dual, r1.dual / scale**2, rtol=1e-7,
                               atol=1e-9 * np.abs(r1.dual).max() / scale**2)


def test_multipliers_beyond_float64_give_one_warning_and_an_exact_solution():
    from skntp.svm import head_svm

    y = np.array([1.0, -1.0, 1.0])
    tokens = y[:, None] * np.array([[1.0, 0.2], [1.0, -0.1], [2.0, 0.5]])
    v1 = head_svm(tokens, y)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        v, res = head_svm(1e-200 * tokens, y, return_result=True)  # lam ~ 1e400; max 2e-200
    assert [str(w.message) for w in rec] == [
        "head SVM: the multipliers overflow float64 at this data scale (2e-200); they are "
        "reported as inf, the solution is exact."]
    np.testing.assert_allclose(v, v1 * 1e200, rtol=1e-10)
    assert np.isinf(res.dual).any()


@pytest.mark.parametrize("seed", [1, 3])  # instances whose >= 0 rows end active
def test_highs_meets_the_margin_rows_of_a_relaxed_program_exactly(seed, monkeypatch):
    # eq. (10) in the max norm: rows >= 1 (support) and >= 0 (the others).  The answer is
    # scaled so that every row >= 1 holds to one rounding; an active row >= 0, which sits
    # at 0 to rounding, must not stop that scaling.
    from skntp.svm import relaxed_att_svm_problem, solve_max_margin

    X, _, mask = _padded(seed, (3, 3, 3, 3), d=4)
    problem = relaxed_att_svm_problem(X, np.zeros(4, int), [True, True, False, False],
                                      mask=mask, norm="max")
    methods = _spy_on_linprog(monkeypatch)
    res = solve_max_margin(problem, method="highs", tol=1e-9)
    assert methods == ["highs-ipm"]  # rows >= 0 are homogeneous too
    vals = problem.constraint_matrix() @ res.primal.ravel()
    rhs = problem.constraints.rhs
    assert np.abs(vals[rhs == 0]).min() < 1e-12  # an active >= 0 row
    assert vals[rhs == 1].min() >= 1 - 2e-16
    assert vals[rhs == 0].min() >= -1e-12 and res.gap <= 1e-9


def _ntp_svm_value_by_cvxpy(H, S, norm):
    """``min ||W||`` s.t. (4a)-(4b) with the first token of each support as anchor."""
    V = S.shape[1]
    W = cp.Variable((V, H.shape[1]))
    L = H @ W.T
    cons = []
    for j in range(len(H)):
        support = np.flatnonzero(S[j])
        cons += [L[j, support[0]] - L[j, v] >= 1 for v in range(V) if not S[j, v]]
        cons += [L[j, support[0]] - L[j, z] == 0 for z in support[1:]]
    objective = {"max": cp.max(cp.abs(W)), "l1": cp.sum(cp.abs(W))}[norm]
    problem = cp.Problem(cp.Minimize(objective), cons)
    problem.solve(solver=cp.CLARABEL)
    return problem.value


@pytest.mark.parametrize("norm", ["max", "l1"])
def test_highs_general_formulations_against_cvxpy(norm, monkeypatch):
    # the LPs over (w, t), -t <= w_i <= t (max: HiGHS's formulation when the fast one gives
    # nothing) and over w = u - v (l1), on an NTP-SVM with equality rows (two-token
    # supports); the reported violation recomputed from the problem's rows
    from skntp.svm import ntp_svm_problem, solve_max_margin

    H, S = _one_token_supports(5, 8, 10, 5, 5)
    S[0, (S[0].argmax() + 1) % 5] = S[3, (S[3].argmax() + 2) % 5] = True
    if norm == "max":
        monkeypatch.setattr(highs, "_solve_max_homogeneous", lambda *args: None)
    problem = ntp_svm_problem(H, S, norm=norm)
    eq = problem.constraints.equality
    assert eq.sum() == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = solve_max_margin(problem, method="highs", tol=1e-9)
    W = res.primal
    value = np.abs(W).max() if norm == "max" else np.abs(W).sum()
    assert value == pytest.approx(_ntp_svm_value_by_cvxpy(H, S, norm), rel=1e-6)
    vals = problem.constraint_matrix() @ W.ravel() - problem.constraints.rhs
    violation = max(np.abs(vals[eq]).max(), np.maximum(-vals[~eq], 0.0).max())
    assert violation <= 1e-9
    # recomputed by the certificate (another summation order: equal to rounding)
    assert res.max_violation == pytest.approx(violation, rel=1e-12, abs=1e-14)
    assert res.status == "optimal" and res.gap <= 1e-9 and res.n_iter > 0


def test_highs_answers_are_certified_by_their_gap(monkeypatch):
    # HiGHS's own tolerances are on feasibility: the gap decides.  A tol below the
    # floor of float64 (1000 ulps) is met at that floor ...
    from sklearn.exceptions import ConvergenceWarning

    from skntp.svm import ntp_svm_problem, solve_max_margin

    H, S = _one_token_supports(3, 8, 10, 5, 5)
    problem = ntp_svm_problem(H, S, norm="max")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = solve_max_margin(problem, method="highs", tol=1e-18)
    assert res.status == "optimal" and abs(res.gap) <= 1e3 * np.finfo(float).eps
    # ... and an answer 1 % above the optimum is feasible but not certified
    exact = highs._solve_max_homogeneous
    monkeypatch.setattr(highs, "_solve_max_homogeneous",
                        lambda *a: (1.01 * exact(*a)[0],) + exact(*a)[1:])
    with pytest.warns(ConvergenceWarning, match=r"\('highs': optimal_inaccurate\)") as rec:
        res = solve_max_margin(problem, method="highs")
    assert len(rec) == 1
    assert res.status == "optimal_inaccurate"
    assert res.gap == pytest.approx(1 - 1 / 1.01, rel=1e-6) and res.max_violation == 0.0


@pytest.mark.parametrize("scaled", [False, True])
def test_bilinear_pair_values_and_sparse_adjoint_against_the_score_table(scaled, monkeypatch):
    # S[b, t] = s_t e_t^T W Q[b] (the decoder's scores, with the output scales of the
    # exchangeable-token reduction): pair values S[b, pos] - has_ref S[b, ref] and the
    # adjoint of a sparse table, against the dense table, in one, two and three chunks
    from skntp.svm._problem import BilinearScores

    rng = np.random.default_rng(0)
    B, T, q = 4, 5, 3
    Q, W = rng.standard_normal((B, q)), rng.standard_normal((T, q))
    s = rng.uniform(0.5, 2.0, T) if scaled else None
    scores = BilinearScores(Q, None, n_outputs=T, output_scale=s)
    S = Q @ (W * (1.0 if s is None else s[:, None])).T
    block, pos, ref = rng.integers(0, B, 6), rng.integers(0, T, 6), rng.integers(0, T, 6)
    has_ref = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    want = S[block, pos] - has_ref * S[block, ref]
    for chunk in (None, 3 * q, 2 * q):  # 6 pairs: one chunk, two, three
        if chunk is not None:
            monkeypatch.setattr(_problem, "CHUNK_ELEMENTS", chunk)
        np.testing.assert_allclose(scores.pair_values(np, W, block, pos, ref, has_ref), want,
                                   rtol=1e-13)
    one = scores.pair_values(np, W, block[:1], pos[:1], ref[:1], has_ref[:1])
    np.testing.assert_allclose(one, want[:1], rtol=1e-13)
    for dtype in (np.float64, np.float32):
        none = scores.pair_values(np, W.astype(dtype), block[:0], pos[:0], ref[:0],
                                  has_ref[:0])
        assert none.shape == (0,) and none.dtype == dtype
    table = np.zeros((B, T))
    np.add.at(table, (block, pos), has_ref + 1.0)
    np.testing.assert_allclose(scores.sparse_adjoint(np, block, pos, has_ref + 1.0),
                               scores.adjoint(np, table), rtol=1e-13)
    want_adjoint = table.T @ Q * (1.0 if s is None else s[:, None])
    np.testing.assert_allclose(scores.adjoint(np, table), want_adjoint, rtol=1e-13)


def test_cvxpy_reference_path_reports_its_violation_gap_and_matrix_order():
    from skntp.svm import att_svm_w, ntp_svm_problem, solve_max_margin

    # the Frobenius NTP-SVM with equality rows: the violation from the problem's rows
    H, S = _one_token_supports(5, 8, 10, 5, 5)
    S[0, (S[0].argmax() + 1) % 5] = S[3, (S[3].argmax() + 2) % 5] = True
    problem = ntp_svm_problem(H, S)
    res = solve_max_margin(problem, method="cvxpy")
    eq = problem.constraints.equality
    vals = problem.constraint_matrix() @ res.primal.ravel() - problem.constraints.rhs
    violation = max(np.abs(vals[eq]).max(), np.maximum(-vals[~eq], 0.0).max())
    assert 0 < res.max_violation == pytest.approx(violation, rel=1e-12)
    assert res.status == "optimal" and res.gap <= 1e-6 and res.n_iter > 0
    # the nuclear program on a non-square W (k = 3, d = 5): the cvxpy answer meets the
    # rows and is our interior-point method's answer, entry by entry
    X, Z, sel = _key_query_instance(7, n=6, T=4, d=5, k=3)
    W1 = att_svm_w(X, Z, sel, norm="nuclear")
    W2, res = att_svm_w(X, Z, sel, norm="nuclear", method="cvxpy", return_result=True)
    assert W2.shape == (3, 5) and _key_query_margins(W2, X, Z, sel) >= 1 - 1e-7
    assert res.status == "optimal"
    nuc = np.linalg.svd(W1, compute_uv=False).sum()
    assert np.linalg.svd(W2, compute_uv=False).sum() == pytest.approx(nuc, rel=2e-8)
    # the nuclear norm is not strongly convex: two answers certified to a gap of 1e-8
    # lie O(sqrt(1e-8)) apart, not O(1e-8)
    np.testing.assert_allclose(W2, W1, atol=2e-4 * np.abs(W1).max())


def test_norm_value_dual_norm_and_check_norm_against_their_definitions():
    from skntp.svm import check_norm, dual_norm
    from skntp.svm._norms import norm_value

    W = np.random.default_rng(0).standard_normal((3, 4))
    want = {"fro": np.linalg.norm(W), "nuclear": np.linalg.norm(W, "nuc"),
            "spectral": np.linalg.norm(W, 2), "max": np.abs(W).max(), "l1": np.abs(W).sum(),
            ("lp", 3.0): np.sum(np.abs(W) ** 3) ** (1 / 3)}
    for norm, value in want.items():
        assert norm_value(W, norm) == pytest.approx(value, rel=1e-13)
        assert norm_value(np.zeros((2, 3)), norm) == 0.0
        assert norm_value(-W, norm) == norm_value(W, norm)
    for norm in want:  # empty parameters
        assert norm_value(np.zeros((0, 3)), norm) == 0.0
    for scale in (1e200, 1e-200):  # |w|^p would overflow or underflow: scaled by max |w|
        assert norm_value(scale * W, ["lp", 3]) == pytest.approx(scale * want[("lp", 3.0)],
                                                                rel=1e-13, abs=0)
    assert [dual_norm(n) for n in ("fro", "nuclear", "spectral", "max", "l1")] == [
        "fro", "spectral", "nuclear", "l1", "max"]
    assert dual_norm(("lp", 3)) == ("lp", 1.5) and dual_norm(["lp", 1.5]) == ("lp", 3.0)
    # the dual pair (lp 3, lq 1.5): W* = sign(V) |V|^(q-1) / ||V||_q^(q-1) has unit p-norm
    # and <W*, V> = ||V||_q, the largest value of <W, V> over the unit p-ball (Hoelder)
    q = dual_norm(("lp", 3))[1]
    V = W[::-1, ::-1]
    W_star = np.sign(V) * np.abs(V) ** (q - 1) / norm_value(V, ("lp", q)) ** (q - 1)
    assert norm_value(W_star, ("lp", 3)) == pytest.approx(1.0, rel=1e-13)
    assert np.sum(W_star * V) == pytest.approx(norm_value(V, ("lp", q)), rel=1e-13)
    assert check_norm(["lp", np.int64(4)]) == ("lp", 4.0)
    assert check_norm("nuclear") == "nuclear"
    for bad, match in [(("lp", 1), "use norm='l1'"), (("lp", np.inf), "use norm='max'"),
                       (("lp", 0.5), "finite number > 1"), (("lp", np.nan), "finite number"),
                       (("lp", True), "must be a real number"), (("lp", "3"), "real number"),
                       ("l2", "norm must be one of"), (("lq", 3), "norm must be one of"),
                       (("lp", 3, 1), "norm must be one of")]:
        with pytest.raises(ValueError, match=match):
            check_norm(bad)


@pytest.mark.parametrize("scale", [1.0, 1e7, 1e-7])
def test_min_norm_solution_of_one_equation_in_closed_form(scale):
    # one context h with p = (1/4, 3/4, 0): the log-odds equation (3) is
    # (e_0 - e_1)^T W h = -log 3, whose minimum-norm solution is
    # W* = (e_0 - e_1) h^T (-log 3) / (2 ||h||^2); scaled data scale W* by 1 / scale
    from skntp.svm import finite_component

    h = np.array([1.0, 2.0])
    W = finite_component(scale * h[None, :], np.array([[0.25, 0.75, 0.0]]))
    want = np.outer([1.0, -1.0, 0.0], h) * (-np.log(3.0)) / (2 * 5.0) / scale
    np.testing.assert_allclose(W, want, rtol=1e-10, atol=1e-14 * np.abs(want).max())


def test_bilinear_scores_keep_their_output_scales_on_another_backend():
    from skntp._backend import get_backend
    from skntp.svm._problem import BilinearScores

    rng = np.random.default_rng(1)
    Q, W, s = rng.standard_normal((3, 2)), rng.standard_normal((4, 2)), np.arange(1.0, 5.0)
    scores = BilinearScores(Q, None, n_outputs=4, output_scale=s)
    np.testing.assert_allclose(scores.to_backend(get_backend()).forward(np, W),
                               Q @ (W * s[:, None]).T, rtol=1e-14)
    torch = pytest.importorskip("torch")
    be = get_backend("torch", "cpu")
    moved = scores.to_backend(be)
    assert isinstance(moved.output_scale, torch.Tensor)
    np.testing.assert_allclose(moved.forward(be.xp, be.asarray(W)).numpy(),
                               Q @ (W * s[:, None]).T, rtol=1e-14)


# ------------------------------------------ run 8: the rest of the max-margin core (_core.py)
@pytest.mark.parametrize("argument", ["queries", "outputs", "output_scale"])
def test_bilinear_scores_name_the_array_that_is_not_finite(argument):
    from skntp.svm._problem import BilinearScores

    arrays = {"queries": np.ones((2, 3)), "outputs": np.ones((4, 3))}
    if argument == "output_scale":
        with pytest.raises(ValueError, match="^output_scale must be finite"):
            BilinearScores(arrays["queries"], None, n_outputs=3,
                           output_scale=[1.0, np.nan, 1.0])
        return
    arrays[argument][1, 1] = np.nan
    with pytest.raises(ValueError, match=f"^{argument} must be finite"):
        BilinearScores(arrays["queries"], arrays["outputs"])


def test_bilinear_scores_magnitude_at_zero_one_and_the_end_of_float64():
    from skntp.svm._problem import BilinearScores

    big = np.finfo(np.float64).max
    # an all-zero factor is an empty map; a factor of exactly 1 changes nothing
    assert BilinearScores(np.zeros((2, 3)), None, n_outputs=4).magnitude() == 0.0
    assert BilinearScores(np.ones((2, 3)), 2.0 * np.ones((4, 3))).magnitude() == 2.0
    # a product of exactly float64's largest number is still finite
    mag = BilinearScores(np.array([[big]]), None, n_outputs=2).magnitude()
    assert np.isfinite(mag) and mag == pytest.approx(big, rel=1e-12)
    assert BilinearScores(np.array([[big]]), 2.0 * np.ones((2, 1))).magnitude() == np.inf


def _equations(keys, rhs):
    """``k_b^T w = rhs_b`` (one position per block, ``ref = -1``)."""
    from skntp.svm import Constraints, KeyScores, MaxMarginProblem

    n = len(rhs)
    return MaxMarginProblem(KeyScores(np.asarray(keys, float)[:, None, :]), Constraints(
        np.arange(n), np.zeros(n), -np.ones(n), rhs, np.ones(n, bool)), name="equations")


def test_min_norm_relative_residual_of_an_inconsistent_system_in_closed_form():
    from skntp.svm import solve_min_norm

    # w_0 = 0.3 and w_0 = -0.3: the least-squares w is 0, the residual (-0.3, 0.3); with
    # ||rhs|| < 1 it is divided by 1, not by ||rhs||
    w, res = solve_min_norm(_equations([[1.0, 0.0], [1.0, 0.0]], np.array([0.3, -0.3])))
    np.testing.assert_allclose(w, 0.0, atol=1e-15)
    assert res == pytest.approx(0.3 * np.sqrt(2), rel=1e-12)
    w, res = solve_min_norm(_equations([[1.0, 0.0], [1.0, 0.0]], np.array([3.0, -3.0])))
    assert res == pytest.approx(1.0, rel=1e-12)  # ||rhs|| > 1: relative to it


def test_min_norm_passes_its_iteration_limit_and_tolerance_to_lsqr(monkeypatch):
    from skntp.svm import _solve, solve_min_norm

    calls = []
    lsqr = _solve.lsqr

    def spy(A, b, **kw):
        calls.append(kw)
        return lsqr(A, b, **kw)

    monkeypatch.setattr(_solve, "lsqr", spy)
    rng = np.random.default_rng(3)
    keys, rhs = rng.standard_normal((4, 6)), rng.standard_normal(4)
    for scale in (1.0, 1e-9):  # 1e-9: solved at unit scale, then scaled back
        calls.clear()
        solve_min_norm(_equations(scale * keys, rhs))
        assert calls == [{"atol": 1e-13, "btol": 1e-13, "iter_lim": 20 * 6}]
        calls.clear()
        solve_min_norm(_equations(scale * keys, rhs), tol=1e-3, max_iter=2)
        assert calls == [{"atol": 1e-3, "btol": 1e-3, "iter_lim": 2}]


def test_min_norm_says_whether_lsqr_stopped_on_a_tolerance():
    from skntp.svm import solve_min_norm

    rng = np.random.default_rng(4)
    keys = rng.standard_normal((30, 20)) @ np.diag(np.geomspace(1, 1e-4, 20))
    rhs = rng.standard_normal(30)  # 30 equations in 20 unknowns: not solvable
    w, res, converged = solve_min_norm(_equations(keys, rhs), return_converged=True)
    assert converged and res > 0.1
    exact = np.linalg.lstsq(keys, rhs, rcond=None)[0]
    assert res == pytest.approx(np.linalg.norm(keys @ exact - rhs) / np.linalg.norm(rhs),
                                rel=1e-10)
    _, early, converged = solve_min_norm(_equations(keys, rhs), max_iter=2,
                                         return_converged=True)
    assert not converged and early > res
    _, res, converged = solve_min_norm(_equations(keys[:10], rhs[:10]),
                                       return_converged=True)
    assert converged and res <= 1e-10  # solvable
    assert solve_min_norm(_equations(keys[:0], rhs[:0]), return_converged=True)[2]


def test_bilinear_scores_take_output_scales_as_a_column():
    from skntp.svm._problem import BilinearScores

    rng = np.random.default_rng(2)
    Q, W, s = rng.standard_normal((3, 2)), rng.standard_normal((4, 2)), np.arange(1.0, 5.0)
    scores = BilinearScores(Q, None, n_outputs=4, output_scale=s[:, None])
    assert scores.output_scale.shape == (4,)
    np.testing.assert_allclose(scores.forward(np, W), Q @ (W * s[:, None]).T, rtol=1e-14)


def test_score_maps_count_the_multiply_adds_of_one_forward_product():
    from skntp.svm._problem import BilinearScores, KeyScores, QueryKeyScores

    B, T, p, q = 2, 3, 5, 7
    # S = Q W^T (q p multiply-adds per entry of the B x p product), then E: B T p more
    assert BilinearScores(np.ones((B, q)), None, n_outputs=p).work_size == B * p * q
    assert BilinearScores(np.ones((B, q)), np.ones((T, p))).work_size == B * p * q + B * T * p
    assert KeyScores(np.ones((B, T, q))).work_size == B * T * q
    # Q W (B k d), then the tokens (B T d)
    assert QueryKeyScores(np.ones((B, T, q)), np.ones((B, p))).work_size == B * T * q + B * p * q


def _random_constraints(rng, B, T, n, equality_frac=0.3):
    """``n`` rows on random blocks and positions, some against 0 (``ref = -1``), some ties."""
    from skntp.svm import Constraints

    block, pos = rng.integers(0, B, n), rng.integers(0, T, n)
    ref = np.where(rng.random(n) < 0.25, -1, (pos + rng.integers(1, T, n)) % T)
    return Constraints(block, pos, ref, rng.choice([0.0, 1.0, 2.5], n),
                       rng.random(n) < equality_frac)


def _score_maps(rng, B, T):
    from skntp.svm._problem import BilinearScores, KeyScores, QueryKeyScores

    return {
        "keys": KeyScores(rng.standard_normal((B, T, 3))),
        "decoder": BilinearScores(rng.standard_normal((B, 4)), None, n_outputs=T),
        "decoder-scaled": BilinearScores(rng.standard_normal((B, 4)), None, n_outputs=T,
                                         output_scale=rng.random(T) + 0.5),
        "bilinear": BilinearScores(rng.standard_normal((B, 4)), rng.standard_normal((T, 3))),
        "query-key": QueryKeyScores(rng.standard_normal((B, T, 3)), rng.standard_normal((B, 2))),
    }


@pytest.mark.parametrize("kind", ["keys", "decoder", "decoder-scaled", "bilinear", "query-key"])
@pytest.mark.parametrize("n_rows", [3, 40])  # 3: the sparse-decoder path (4 n < B T)
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_constraint_rows_operators_and_class_against_the_definitions(kind, n_rows, backend):
    from helpers import rows_by_definition

    from skntp._backend import get_backend, to_numpy
    from skntp.svm import MaxMarginProblem
    from skntp.svm._problem import constraint_operator
    from skntp.svm._solve import program_class

    if backend == "torch":
        pytest.importorskip("torch")
    rng = np.random.default_rng(n_rows)
    B, T = 4, 5
    scores = _score_maps(rng, B, T)[kind]
    problem = MaxMarginProblem(scores, _random_constraints(rng, B, T, n_rows))
    assert problem.shape == scores.shape
    A = rows_by_definition(problem)  # S[b, a] - S[b, r] from the map's definition
    np.testing.assert_allclose(problem.constraint_matrix().toarray(), A, rtol=1e-13,
                               atol=1e-14)
    assert problem._is_sparse_decoder() == (kind.startswith("decoder") and n_rows == 3)
    be = get_backend(backend)
    values, dual_to_primal = problem.operators(be)
    w = rng.standard_normal(problem.shape)
    lam = rng.standard_normal(n_rows)
    np.testing.assert_allclose(to_numpy(values(be.asarray(w))), A @ w.ravel(),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(to_numpy(dual_to_primal(be.asarray(lam))).ravel(),
                               A.T @ lam, rtol=1e-12, atol=1e-12)
    op = constraint_operator(problem)
    assert op.shape == A.shape
    np.testing.assert_allclose(op.matvec(w.ravel()), A @ w.ravel(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(op.rmatvec(lam), A.T @ lam, rtol=1e-12, atol=1e-12)
    want = {"keys": "keys", "decoder": "decoder", "decoder-scaled": "decoder",
            "bilinear": "bilinear", "query-key": "bilinear"}[kind]
    assert program_class(problem) == want


def test_constraints_validate_concatenate_and_count():
    from skntp.svm import Constraints

    c = Constraints([0, 1], [1, 0], [-1, 2], [1, 0], [False, True])
    assert len(c) == 2 and isinstance(len(c), int)
    assert c.block.dtype == c.pos.dtype == c.ref.dtype == np.int64
    small = Constraints(*(np.array(a, dtype=np.int32) for a in ([0], [1], [-1], [1], [0])))
    assert [a.dtype for a in (small.block, small.pos, small.ref, small.rhs, small.equality)] \
        == [np.int64, np.int64, np.int64, np.float64, bool]
    assert c.rhs.dtype == np.float64 and c.equality.dtype == bool
    for name in ("pos", "ref", "rhs", "equality"):
        args = {"block": [0, 1], "pos": [1, 0], "ref": [-1, 2], "rhs": [1, 0],
                "equality": [False, True]}
        args[name] = args[name][:1]
        with pytest.raises(ValueError, match=rf"^constraint array '{name}' must have shape \(2,\)"):
            Constraints(**args)
    empty = Constraints.concatenate([Constraints([], [], [], [], [])])
    assert len(empty) == 0
    assert [a.dtype for a in (empty.block, empty.pos, empty.ref, empty.rhs, empty.equality)] \
        == [np.int64, np.int64, np.int64, np.float64, bool]
    d = Constraints([3], [2], [0], [2.5], [False])
    both = Constraints.concatenate([c, Constraints([], [], [], [], []), d])
    np.testing.assert_array_equal(both.block, [0, 1, 3])
    np.testing.assert_array_equal(both.pos, [1, 0, 2])
    np.testing.assert_array_equal(both.ref, [-1, 2, 0])
    np.testing.assert_array_equal(both.rhs, [1.0, 0.0, 2.5])
    np.testing.assert_array_equal(both.equality, [False, True, False])


def test_score_maps_refuse_bad_arrays_and_measure_their_magnitude():
    from skntp.svm import Constraints, MaxMarginProblem
    from skntp.svm._problem import KeyScores, QueryKeyScores

    with pytest.raises(ValueError, match=r"^keys must be 3-D .* got shape \(2, 3\)"):
        KeyScores(np.ones((2, 3)))
    with pytest.raises(ValueError, match="^keys must be finite"):
        KeyScores(np.full((1, 2, 3), np.inf))
    with pytest.raises(ValueError, match=r"^keys must be real; got complex values \(dtype "
                                         r"complex128\)"):
        KeyScores(np.ones((1, 2, 3)) + 1e-3j)
    with pytest.raises(ValueError, match="^keys must be numeric: "):
        KeyScores(np.full((1, 2, 3), "a"))
    assert KeyScores(np.ones((1, 2, 3), dtype=int)).keys.dtype == np.float64
    X, Z = np.arange(24.0).reshape(2, 3, 4) - 10.0, np.array([[0.5, -3.0], [2.0, 1.0]])
    with pytest.raises(ValueError, match="^tokens must be finite"):
        QueryKeyScores(np.full((2, 3, 4), np.nan), Z)
    with pytest.raises(ValueError, match="^queries must be finite"):
        QueryKeyScores(X, np.full((2, 2), np.nan))
    for tokens, queries in [(X[0], Z), (X, Z[0]), (X, Z[:1])]:
        shapes = re.escape(f"got shapes {tokens.shape} and {queries.shape}.")
        with pytest.raises(ValueError, match=rf"^tokens must be 3-D .* blocks, {shapes}$"):
            QueryKeyScores(tokens, queries)
    # a map without entries has magnitude 0
    assert KeyScores(np.zeros((0, 2, 3))).magnitude() == 0.0
    assert QueryKeyScores(np.zeros((0, 2, 3)), np.zeros((0, 2))).magnitude() == 0.0
    qk = QueryKeyScores(X, Z)
    assert qk.shape == (2, 4) and (qk.n_blocks, qk.n_positions) == (2, 3)
    assert qk.magnitude() == 13.0 * 3.0  # max |x| max |z|
    assert KeyScores(X).magnitude() == 13.0
    # the lifted keys vec(z_b x_bt^T): <vec(W), key> = z_b^T W x_bt
    W = np.random.default_rng(0).standard_normal((2, 4))
    lifted = qk.lifted()
    assert lifted.shape == (2, 3, 8)
    np.testing.assert_allclose(lifted @ W.ravel(), np.einsum("bk,kd,btd->bt", Z, W, X),
                               rtol=1e-13)
    # a matrix norm of a vector parameter is refused by name
    one = Constraints([0], [0], [1], [1.0], [False])
    for norm in ("nuclear", "spectral"):
        with pytest.raises(ValueError, match=rf"^norm='{norm}' needs a matrix parameter .*"
                                             r"got shape \(4,\)"):
            MaxMarginProblem(KeyScores(X), one, norm=norm)
    assert MaxMarginProblem(qk, one, norm="nuclear").norm == "nuclear"
    assert MaxMarginProblem(KeyScores(X), one, norm=["lp", 3]).norm == ("lp", 3.0)


def test_norm_kinds_and_labels():
    from skntp.svm._norms import norm_kind, norm_label

    assert [norm_kind(n) for n in ("fro", "max", ("lp", 1.5))] == ["fro", "max", "lp"]
    assert [norm_label(n) for n in ("fro", "nuclear", ("lp", 1.5), ("lp", 3.0))] == [
        "fro", "nuclear", "l1.5", "l3"]


def _fake_methods(monkeypatch, results, **attrs):
    """Register methods ``m0, m1, ...`` returning ``results`` in order; return the calls."""
    from skntp.svm import _problem, solvers

    calls = []
    names = []
    for k, result in enumerate(results):
        name = f"m{k}"

        def method(problem, tol, max_iter, be, verbose, callback, name=name, result=result):
            calls.append((name, tol, max_iter, be.name, verbose, be.dtype))
            return None if result is None else _problem.MaxMarginResult(**result)

        for key, value in attrs.get(name, {}).items():
            setattr(method, key, value)
        monkeypatch.setitem(solvers.METHODS, name, solvers.Method(method))
        names.append(name)
    monkeypatch.setitem(solvers.AUTO_ORDER, "keys", tuple(names))
    return calls


def _one_row():
    from skntp.svm import Constraints, KeyScores, MaxMarginProblem

    return MaxMarginProblem(KeyScores(np.array([[[1.0, 0.0], [0.0, 1.0]]])),
                            Constraints([0], [0], [1], [1.0], [False]), name="toy SVM")


def _answer(scale=1.0, status="optimal", method="m", dual=0.5):
    """An answer to :func:`_one_row` (``w = scale (1/2, -1/2)``, optimum at scale 1:
    below 1 it violates the row, above 1 it is feasible with a positive gap); the
    figures the method claims are deliberately wrong (gap 1e-3, no violation)."""
    return dict(primal=scale * np.array([0.5, -0.5]), dual=np.array([dual]), method=method,
                status=status, n_iter=7, gap=1e-3, max_violation=0.0)


def test_auto_passes_over_uncertified_answers_to_the_next_method(monkeypatch):
    from skntp.svm import solve_max_margin

    # m0 declines; m1 claims "optimal" at a point that violates the row and lies below
    # the dual bound (negative gap); m2 is feasible but 20 % above the optimum; m3 is
    # exact although it says max_iter
    calls = _fake_methods(
        monkeypatch, [None, _answer(0.8), _answer(1.2, "optimal"),
                      _answer(1.0, "max_iter", "m3")])
    seen = []
    res = solve_max_margin(_one_row(), tol=1e-6, max_iter=9, verbose=2,
                           callback=lambda *a: seen.append(a))
    assert [c[0] for c in calls] == ["m0", "m1", "m2", "m3"]
    assert calls[0][1:] == (1e-6, 9, "numpy", 2, np.float64)
    assert res.method == "m3" and res.status == "optimal"  # the certificate decides
    assert res.gap == pytest.approx(0.0, abs=1e-15) and res.max_violation == 0.0
    assert res.objective == pytest.approx(np.sqrt(0.5), rel=1e-15)
    assert res.bound == pytest.approx(np.sqrt(0.5), rel=1e-15)
    assert seen == [(7, res.gap, 0.0)]  # the returned result's figures, once
    assert isinstance(res.primal, np.ndarray) and isinstance(res.dual, np.ndarray)
    # the first certified answer ends the search, with the documented defaults
    calls = _fake_methods(monkeypatch, [_answer(1.0, "max_iter", "m0"), _answer(1.0)])
    assert solve_max_margin(_one_row()).method == "m0" and len(calls) == 1
    assert calls[0][1:3] == (1e-8, 100_000)
    # every method declines
    _fake_methods(monkeypatch, [None, None])
    with pytest.raises(ValueError, match="^no max-margin method accepts the problem toy SVM"):
        solve_max_margin(_one_row())


def test_the_certificate_decides_the_status_whatever_the_method_says(monkeypatch):
    from skntp.svm import solve_max_margin

    cases = [(_answer(0.8), "infeasible_point", -0.25, 0.2),       # below the dual bound
             (_answer(1.2), "optimal_inaccurate", 1 - 1 / 1.2, 0.0),
             (_answer(1.2, "max_iter"), "max_iter", 1 - 1 / 1.2, 0.0),
             (_answer(1.0, dual=-0.5), "optimal_inaccurate", 1.0, 0.0)]  # lam < 0 clipped
    for answer, status, gap, violation in cases:
        _fake_methods(monkeypatch, [answer])
        with pytest.warns(ConvergenceWarning,
                          match=rf"^toy SVM: no answer could be certified \('m': {status}\)"):
            res = solve_max_margin(_one_row(), method="m0", tol=1e-5)
        assert res.status == status
        assert res.gap == pytest.approx(gap, rel=1e-12)
        assert res.max_violation == pytest.approx(violation, rel=1e-12)


def test_auto_returns_the_least_uncertain_answer_when_none_is_certified(monkeypatch):
    from skntp.svm import solve_max_margin

    calls = _fake_methods(monkeypatch, [_answer(0.5, method="a"), _answer(1.01, method="b"),
                                        _answer(1.5, method="c")])
    with pytest.warns(ConvergenceWarning, match=r"\('a': infeasible_point, 'b': "
                      r"optimal_inaccurate, 'c': optimal_inaccurate\); returning the one of "
                      r"method 'b'"):
        res = solve_max_margin(_one_row())
    assert len(calls) == 3 and res.method == "b" and res.status == "optimal_inaccurate"


def test_methods_own_convergence_warnings_give_way_to_the_certificate(monkeypatch):
    from skntp.svm import _problem, solve_max_margin, solvers

    def noisy(problem, tol, max_iter, be, verbose, callback):
        warnings.warn("inner convergence warning", ConvergenceWarning, stacklevel=2)
        warnings.warn("inner user warning", UserWarning, stacklevel=2)
        return _problem.MaxMarginResult(**_answer(1.0))

    monkeypatch.setitem(solvers.METHODS, "noisy", solvers.Method(noisy))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert solve_max_margin(_one_row(), method="noisy").status == "optimal"
    assert [str(w.message) for w in caught] == ["inner user warning"]


@pytest.mark.parametrize("own, pool", [(False, "size"), (1, 0), (None, np.inf)])
def test_methods_run_under_the_blas_threads_they_ask_for(own, pool, monkeypatch):
    from skntp.svm import _solve, solve_max_margin

    sizes = []
    real = _solve.blas_threads

    def spy(size, be=None):
        sizes.append((size, be.name))
        return real(size, be)

    monkeypatch.setattr(_solve, "blas_threads", spy)
    attrs = {} if own is False else {"blas_threads": own}
    _fake_methods(monkeypatch, [_answer()], m0=attrs)  # the optimum: certified, no warning
    problem = _one_row()
    solve_max_margin(problem)
    assert sizes == [(problem.scores.work_size if pool == "size" else pool, "numpy")]
    if pool == "size":  # a score map that does not count its work: the library's pool
        from dataclasses import replace

        class Uncounted:
            def __init__(self, base):
                self._base = base

            def __getattr__(self, name):
                if name == "work_size":
                    raise AttributeError(name)
                return getattr(self._base, name)

        sizes.clear()
        solve_max_margin(replace(problem, scores=Uncounted(problem.scores)), method="m0")
        assert sizes == [(np.inf, "numpy")]
        if importlib.util.find_spec("torch") is not None:
            sizes.clear()
            solve_max_margin(problem, backend="torch")
            assert sizes == [(problem.scores.work_size, "torch")]


def test_solve_max_margin_validates_the_array_layer_and_upcasts_float32(monkeypatch):
    from skntp.svm import solve_max_margin

    calls = _fake_methods(monkeypatch, [_answer()])  # the optimum: certified, no warning
    solve_max_margin(_one_row(), dtype="float32")
    assert calls[0][3:] == ("numpy", 0, np.float64)  # explicit programs run in float64
    with pytest.raises(ValueError, match="dtype"):
        solve_max_margin(_one_row(), dtype="int8")
    # a method that does not minimize the program's norm: the message lists those that do
    from skntp.svm import MaxMarginProblem

    max_norm = MaxMarginProblem(_one_row().scores, _one_row().constraints, norm="max")
    with pytest.raises(ValueError, match=r"method 'dcd' minimizes the fro norm, not the max "
                                         r"norm of .*; use one of \[(.*)\]\.$") as info:
        solve_max_margin(max_norm, method="dcd")
    able = re.search(r"use one of \[(.*)\]", str(info.value)).group(1)
    assert {"'highs'", "'lp-ipm'", "'cvxpy'", "'auto'"} <= set(able.split(", "))
    assert not {"'dcd'", "'accelerated-dual'", "'nnls'"} & set(able.split(", "))
    with pytest.raises(ValueError, match="backend"):
        solve_max_margin(_one_row(), backend="jax")


def test_unit_scale_at_the_ends_of_the_well_scaled_range():
    from skntp.svm._problem import BilinearScores, KeyScores
    from skntp.svm._solve import _unit_scale

    def keys(mag):
        return KeyScores(np.array([[[mag, -0.5 * mag]]]))

    tiny = np.finfo(np.float64).smallest_normal
    assert _unit_scale(keys(0.0)) == 1.0
    assert _unit_scale(keys(1e-4)) == 1.0 and _unit_scale(keys(1e4)) == 1.0
    assert _unit_scale(keys(2e4)) == 1 / 2e4 and _unit_scale(keys(5e-5)) == 1 / 5e-5
    assert _unit_scale(keys(-3e5)) == 1 / 3e5  # the magnitude is of |k|
    assert _unit_scale(keys(tiny)) == 1 / tiny
    assert _unit_scale(object()) == 1.0  # a map without a magnitude is taken as is
    with pytest.raises(FloatingPointError, match="^toy: the data make scores of magnitude "
                                                 "beyond float64"):
        _unit_scale(keys(tiny / 2), "toy")
    big = np.full((1, 1), 1e200)
    with pytest.raises(FloatingPointError, match="^the program: the data make scores"):
        _unit_scale(BilinearScores(big, big))


def test_available_memory_reads_memavailable_and_falls_back(monkeypatch):
    import builtins
    import io
    import os

    from skntp.svm import _problem

    real_open = builtins.open
    meminfo = "MemTotal:       8000 kB\nMemFree:        1000 kB\nMemAvailable:   2048 kB\n"

    def fake_open(path, *args, **kwargs):
        if path == "/proc/meminfo":
            return io.StringIO(meminfo)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    assert _problem.available_memory() == 2048 * 1024
    meminfo = "MemTotal:       8000 kB\n"  # no MemAvailable line: the physical memory

    def no_meminfo(path, *args, **kwargs):
        if path == "/proc/meminfo":
            raise OSError("no /proc")
        return real_open(path, *args, **kwargs)

    for opener in (fake_open, no_meminfo):
        monkeypatch.setattr(builtins, "open", opener)
        assert _problem.available_memory() == os.sysconf("SC_PAGE_SIZE") * os.sysconf(
            "SC_PHYS_PAGES")

    def no_sysconf(name):
        raise ValueError(name)

    monkeypatch.setattr(os, "sysconf", no_sysconf)
    assert _problem.available_memory() == 1 << 62


def test_check_program_size_at_four_fifths_of_the_memory(monkeypatch):
    from skntp.svm import ProgramTooLargeError, _problem

    monkeypatch.setattr(_problem, "available_memory", lambda: 2**30)
    per = 0.8 * 2**30 / 1000
    _problem.check_program_size("toy", 1000, "Use less.", bytes_per_constraint=per)  # fits
    with pytest.raises(ProgramTooLargeError,
                       match=r"^toy: the program has 1e\+03 constraints and needs about 0\.801 "
                             r"GiB of memory to build and solve; 1 GiB are available\. Use "
                             r"less\.$"):
        _problem.check_program_size("toy", 1001, "Use less.", bytes_per_constraint=per)
    n = int(0.8 * 2**30 // _problem.BYTES_PER_CONSTRAINT)  # the default per-constraint cost
    _problem.check_program_size("toy", n, "Use less.")
    with pytest.raises(ProgramTooLargeError):
        _problem.check_program_size("toy", n + 1, "Use less.")


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_operators_of_one_position_and_rows_against_zero(backend):
    # one position per block (T = 1): a row without a reference must not gather another
    from skntp._backend import get_backend, to_numpy
    from skntp.svm import Constraints, MaxMarginProblem
    from skntp.svm._problem import BilinearScores, KeyScores

    if backend == "torch":
        pytest.importorskip("torch")
    be = get_backend(backend)
    rng = np.random.default_rng(4)
    Q = rng.standard_normal((5, 3))
    cases = [
        (BilinearScores(Q, None, n_outputs=1), Constraints([2], [0], [-1], [1.0], [False])),
        (KeyScores(Q[:1, None, :]), Constraints([0], [0], [-1], [1.0], [False])),
        (BilinearScores(Q, None, n_outputs=2),  # sparse path, one row against 0
         Constraints([4, 1], [1, 0], [-1, 1], [1.0, 1.0], [False, False])),
    ]
    for scores, cons in cases:
        problem = MaxMarginProblem(scores, cons)
        A = problem.constraint_matrix().toarray()
        values, dual_to_primal = problem.operators(be)
        w = rng.standard_normal(problem.shape)
        lam = rng.standard_normal(len(cons))
        np.testing.assert_allclose(to_numpy(values(be.asarray(w))), A @ w.ravel(), rtol=1e-12)
        np.testing.assert_allclose(to_numpy(dual_to_primal(be.asarray(lam))).ravel(),
                                   A.T @ lam, rtol=1e-12)
    assert MaxMarginProblem(*cases[0])._is_sparse_decoder()
    assert MaxMarginProblem(*cases[2])._is_sparse_decoder()


def test_norm_gap_by_hand_and_at_zero():
    from skntp.svm import Constraints, MaxMarginProblem
    from skntp.svm._norms import norm_gap
    from skntp.svm._problem import KeyScores

    rng = np.random.default_rng(6)
    K = rng.standard_normal((4, 3, 5))
    c = Constraints([0, 1, 2, 3, 3], [0, 1, 2, 0, 1], [1, -1, 0, 2, 2], [1.0, 2.0, 1.0, 0.0, 1.0],
                    [False, False, True, False, False])
    A = np.array([K[b, a] - (K[b, r] if r >= 0 else 0) for b, a, r in
                  zip(c.block, c.pos, c.ref)])
    for norm, dual in [("max", "l1"), ("l1", "max")]:
        problem = MaxMarginProblem(KeyScores(K), c, norm=norm)
        W, lam = rng.standard_normal(5), np.array([0.7, -0.2, -0.4, 1.1, 0.3])
        gap, scaled = norm_gap(problem, W, lam)  # A from the problem
        clipped = np.array([0.7, 0.0, -0.4, 1.1, 0.3])  # >= 0 except on the equality
        size = np.abs(W).max() if norm == "max" else np.abs(W).sum()
        dual_size = np.abs(A.T @ clipped).sum() if dual == "l1" else np.abs(A.T @ clipped).max()
        np.testing.assert_allclose(scaled, clipped / dual_size, rtol=1e-13)
        assert gap == pytest.approx((size - c.rhs @ clipped / dual_size) / size, rel=1e-12)
        # W = 0: no gap whatever the multipliers; multipliers 0 (or only negative ones on
        # inequalities) with W != 0: the whole of it
        assert norm_gap(problem, np.zeros(5), lam)[0] == 0.0
        assert norm_gap(problem, W, np.zeros(5))[0] == 1.0
        assert norm_gap(problem, W / size, -np.abs(lam) * ~c.equality)[0] == 1.0
        assert norm_gap(problem, np.zeros(5), np.zeros(5))[0] == 0.0


def test_solve_max_margin_keeps_the_requested_device_and_names_the_program(monkeypatch):
    from skntp.svm import Constraints, MaxMarginProblem, _solve, solve_max_margin
    from skntp.svm._problem import BilinearScores, KeyScores

    pytest.importorskip("torch")
    requests = []
    real = _solve.get_backend

    def spy(backend="numpy", device=None, dtype="float64"):
        requests.append((backend, device, dtype))
        return real(backend, device, dtype)

    monkeypatch.setattr(_solve, "get_backend", spy)
    calls = _fake_methods(monkeypatch, [_answer(), _answer(0.0)])  # m0: the optimum
    small = MaxMarginProblem(KeyScores(1e-7 * np.array([[[1.0, 0.0], [0.0, 1.0]]])),
                             Constraints([0], [0], [1], [1.0], [False]))
    seen = []
    for problem in (_one_row(), small):  # small: solved at unit scale, then scaled back
        requests.clear()
        calls.clear()
        seen.clear()
        res = solve_max_margin(problem, method="m0", tol=1e-5, max_iter=3, verbose=1,
                               backend="torch", device="cpu", dtype="float32",
                               callback=lambda *a: seen.append(a))
        assert requests and {r[:2] for r in requests} == {("torch", "cpu")}
        assert requests[-1][2] == "float64"
        # the named method, with every option, and the callback's final figures
        assert [c[:5] for c in calls] == [("m0", 1e-5, 3, "torch", 1)]
        assert seen == [(7, res.gap, res.max_violation)] and res.method == "m"
    big = np.full((1, 1), 1e200)
    overflow = MaxMarginProblem(BilinearScores(big, big), Constraints([0], [0], [-1], [1.0],
                                                                      [False]), name="toy")
    with pytest.raises(FloatingPointError, match="^toy: the data make scores of magnitude"):
        solve_max_margin(overflow)


def test_solver_options_accepted_and_refused():
    from skntp.svm._solve import _check_solver_options

    for tol in (0, 0.0, np.float32(1e-3), np.int64(0), 1e-8):
        _check_solver_options(tol, 1)
    for max_iter in (1, np.int64(3), 100_000):
        _check_solver_options(1e-8, max_iter)
    for tol in (-1e-9, np.inf, np.nan, "1e-3", None, True + 0j):
        with pytest.raises(ValueError, match="^tol must be a finite number >= 0, got"):
            _check_solver_options(tol, 1)
    for max_iter in (0, -1, True, 2.5, "3", None):
        with pytest.raises(ValueError, match="^max_iter must be an integer >= 1, got"):
            _check_solver_options(1e-8, max_iter)
