"""Token-priority graphs, SCCs, the cyclic sub-dataset, Graph-SVM and W^cyc."""

import itertools

import numpy as np
import pytest
import scipy.linalg
from helpers import graph_svm_constraints

from skntp._backend import get_backend
from skntp._optim import minimize
from skntp.datasets import make_token_priority_data
from skntp.graphs import (
    check_token_sequences,
    cyclic_subdataset,
    cyclic_subspace_basis,
    draw_token_priority_graph,
    graph_relations,
    is_acyclic,
    pseudo_token_priority_graphs,
    strongly_connected_components,
    token_priority_graphs,
)
from skntp.losses.self_attention import SelfAttentionRisk
from skntp.svm import (
    NotSeparableError,
    cyclic_correction,
    graph_svm,
    graph_svm_problem,
)


def _random_instance(seed, K=6, d=8, n=6, T=4, acyclic=False):
    return make_token_priority_data(K, d, n, T, acyclic=acyclic, random_state=seed)


def _brute_edges(X, y):
    """Edges (k, label, token) by plain Python loops over the samples."""
    edges = set()
    for seq, lab in zip(X, y):
        seq = list(seq)
        for tok in seq:
            if tok != lab:
                edges.add((seq[-1], lab, tok))
    return edges


def _reachability(nodes, edges):
    """Transitive closure by repeated boolean matrix products (no graph library)."""
    idx = {v: i for i, v in enumerate(nodes)}
    R = np.eye(len(nodes), dtype=bool)
    for i, j in edges:
        R[idx[i], idx[j]] = True
    while True:
        R2 = (R.astype(int) @ R.astype(int)) > 0
        if (R2 == R).all():
            return R, idx
        R = R2


@pytest.mark.parametrize("seed", range(12))
def test_graphs_and_sccs_match_brute_force(seed):
    rng = np.random.RandomState(seed)
    K, n, T = 7, 9, 4
    X = np.stack([rng.permutation(K)[:T] for _ in range(n)])
    y = np.where(rng.rand(n) < 0.7, X[np.arange(n), rng.randint(T, size=n)],
                 rng.randint(K, size=n))
    graphs = token_priority_graphs(X, y)
    brute = _brute_edges(X, y)
    got = {(k, i, j) for k, g in graphs.items() for i, j in g.edges}
    assert got == brute
    assert set(graphs) == set(X[:, -1].tolist())
    sccs = strongly_connected_components(graphs)
    for k, g in graphs.items():
        nodes = sorted(g.nodes)
        R, idx = _reachability(nodes, [(i, j) for kk, i, j in brute if kk == k])
        same = R & R.T
        for c in sccs[k]:
            for a, b in itertools.product(c, c):
                assert same[idx[a], idx[b]]
        # every mutually reachable pair lies in one SCC
        where = {v: ci for ci, c in enumerate(sccs[k]) for v in c}
        for a, b in itertools.product(nodes, nodes):
            assert same[idx[a], idx[b]] == (where[a] == where[b])
        assert sorted(v for c in sccs[k] for v in c) == nodes
    strict, tied = graph_relations(graphs, sccs)
    for k, i, j in strict:  # (i => j): an edge i -> j and j cannot reach i
        g = graphs[k]
        nodes = sorted(g.nodes)
        R, idx = _reachability(nodes, list(g.edges))
        assert g.has_edge(i, j) and not R[idx[j], idx[i]]
    acyclic = all(len(c) == 1 for cs in sccs.values() for c in cs)
    assert is_acyclic(graphs) == acyclic
    assert (len(tied) == 0) == acyclic


def test_acyclic_recipe_gives_dags_and_realizable_labels():
    for seed in range(10):
        X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=True, random_state=seed)
        assert X.shape == (4, 6) and E.shape == (8, 8)
        assert all(len(set(row)) == 6 for row in X)  # without replacement
        assert (X == y[:, None]).any(axis=1).all()
        np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0)
        assert is_acyclic(token_priority_graphs(X, y))
    X, y, _ = make_token_priority_data(6, 8, 200, 4, acyclic=False, random_state=0)
    assert (X == y[:, None]).any(axis=1).all()
    assert not is_acyclic(token_priority_graphs(X, y))
    with pytest.raises(ValueError, match="without replacement"):
        make_token_priority_data(4, 8, 3, 5)


def test_cyclic_subdataset_matches_definition():
    for seed in range(20):
        X, y, _ = _random_instance(seed)
        graphs = token_priority_graphs(X, y)
        sccs = strongly_connected_components(graphs)
        ids, mask, query, labels, index = cyclic_subdataset(X, y, sccs)
        expected = []
        for i, (seq, lab) in enumerate(zip(X, y)):
            comp = next(c for c in sccs[seq[-1]] if lab in c)
            kept = [t for t in seq if t in comp]  # drop x with (y => x)
            if len(set(kept)) > 1:
                expected.append((i, sorted(kept)))
        assert index.tolist() == [i for i, _ in expected]
        for row, (i, kept) in enumerate(expected):
            assert sorted(ids[row][mask[row]].tolist()) == kept
            assert query[row] == X[i, -1] and labels[row] == y[i]


def test_cyclic_subspace_equals_span_of_tied_differences():
    # Proof of Lemma 2: S_cyc = span{(e_j - e_j') e_k^T : j ~ j'}.
    for seed in range(15):
        X, y, E = _random_instance(seed)
        sccs = strongly_connected_components(token_priority_graphs(X, y))
        rows = cyclic_subspace_basis(E, sccs)
        pair_rows = [np.outer(E[a] - E[b], E[k]).ravel()
                     for k, cs in sccs.items() for c in cs
                     for a, b in itertools.combinations(sorted(c), 2)]
        if not pair_rows:
            assert rows.shape[0] == 0
            continue
        P = np.asarray(pair_rows)
        r1 = np.linalg.matrix_rank(rows)
        assert r1 == np.linalg.matrix_rank(P) == np.linalg.matrix_rank(np.vstack([rows, P]))


def _graph_svm_cvxpy_independent(E, X, y):
    """Graph-SVM written from the paper's formula, without the core's builders."""
    import cvxpy as cp

    W = cp.Variable((E.shape[1], E.shape[1]))
    prob = cp.Problem(cp.Minimize(cp.sum_squares(W)), graph_svm_constraints(E, X, y, W))
    prob.solve(solver=cp.CLARABEL)
    return W.value


@pytest.mark.parametrize("acyclic", [True, False])
def test_graph_svm_matches_independent_cvxpy(acyclic):
    for seed in range(6):
        X, y, E = _random_instance(seed, K=6, d=8, n=6, T=4, acyclic=acyclic)
        graphs = token_priority_graphs(X, y)
        ref = _graph_svm_cvxpy_independent(E, X, y)
        for method in ("cvxpy", "graph-ldp", "auto"):
            W, res = graph_svm(E, graphs, method=method, return_result=True)
            np.testing.assert_allclose(W, ref, atol=2e-5 * max(1, np.abs(ref).max()))
            assert res.max_violation < 1e-6
            if method != "cvxpy":
                assert res.method == "graph-ldp" and abs(res.gap) < 1e-8


def test_graph_svm_problem_structure_and_infeasible():
    X, y, E = _random_instance(3)
    graphs = token_priority_graphs(X, y)
    problem = graph_svm_problem(E, graphs)
    assert problem.name == "Graph-SVM"
    assert problem.scores.shape == (8, 8)
    W = graph_svm(E, graphs, method="cvxpy")
    # the score map is S[k, i] = e_i^T W e_k
    q = problem.info["query_tokens"]
    np.testing.assert_allclose(problem.scores.forward(np.asarray, W), (E @ W @ E[q].T).T)
    # Two tokens with the same embedding cannot be separated.
    E2 = np.vstack([E[:2], E[:1]])  # token 2 duplicates token 0
    Xb = np.array([[0, 2, 1]])  # 0 => 2 needs (e_0 - e_2)^T W e_1 >= 1
    yb = np.array([0])
    for method in ("cvxpy", "graph-ldp"):
        with pytest.raises(NotSeparableError, match="Graph-SVM"):
            graph_svm(E2, token_priority_graphs(Xb, yb), method=method)
    with pytest.raises(ValueError, match="embeddings has"):
        graph_svm_problem(E[:3], graphs)


def test_cyclic_correction_second_method_orthogonality_and_stationarity():
    be = get_backend()
    n_cyclic = 0
    for seed in range(30):
        X, y, E = _random_instance(seed)
        graphs = token_priority_graphs(X, y)
        sccs = strongly_connected_components(graphs)
        W_cyc, info = cyclic_correction(E, X, y, sccs, return_info=True)
        W_mm = graph_svm(E, graphs, sccs, method="cvxpy")
        # Lemma 2: <W^cyc, W^mm> = 0 and W^cyc in S_cyc
        assert abs(np.sum(W_cyc * W_mm)) <= 1e-6 * max(1.0, np.linalg.norm(W_mm))
        B = info["basis"]
        np.testing.assert_allclose(B @ (B.T @ W_cyc.ravel()), W_cyc.ravel(), atol=1e-10)
        if np.linalg.norm(W_cyc) == 0:
            continue
        n_cyclic += 1
        # second method: plain GD from zero with the shared loop (App. D's recipe),
        # on the full d x d matrix (the gradient stays in S_cyc)
        ids, mask, q, lab, _ = cyclic_subdataset(X, y, sccs)
        risk = SelfAttentionRisk(be, E, np.eye(E.shape[0]), ids, mask, q, lab)
        res = minimize(risk, (np.zeros_like(W_cyc),), xp=be.xp, solver="gd", lr=2.0,
                       max_iter=50_000, tol=1e-12)
        np.testing.assert_allclose(res.params[0], W_cyc, atol=1e-8)
        assert info["grad_norm"] < 1e-9
        # a random move orthogonal to S_cyc leaves the cyclic risk unchanged
        Z = np.random.RandomState(seed).standard_normal(W_cyc.size)
        Z -= B @ (B.T @ Z)
        assert abs(risk((W_cyc + Z.reshape(W_cyc.shape),))[0] - risk((W_cyc,))[0]) < 1e-10
    assert n_cyclic >= 3


def test_acyclic_data_have_zero_cyclic_correction():
    X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=True, random_state=1)
    sccs = strongly_connected_components(token_priority_graphs(X, y))
    assert cyclic_subspace_basis(E, sccs).shape[0] == 0
    np.testing.assert_array_equal(cyclic_correction(E, X, y, sccs), 0.0)


def test_pseudo_graphs_from_selected_tokens():
    X = np.array([[0, 1, 2], [2, 1, 0], [1, 3, 2]])
    selected = np.array([[True, False, False], [True, True, False], [False, True, False]])
    graphs = pseudo_token_priority_graphs(X, selected)
    assert set(graphs[2].edges) == {(0, 1), (0, 2), (3, 1), (3, 2)}
    assert set(graphs[0].edges) == {(2, 1), (2, 0), (1, 2), (1, 0)}
    sccs = strongly_connected_components(graphs)
    assert {1, 2} in sccs[0]
    with pytest.raises(ValueError, match="selected"):
        pseudo_token_priority_graphs(X, np.zeros_like(selected))


def test_token_sequence_validation():
    ids, mask, last = check_token_sequences([[1, 2, 3], [4], [0, 5]])
    assert ids.shape == (3, 3) and mask.sum() == 6 and last.tolist() == [3, 4, 5]
    # a tuple of three sequences is three sequences (not a padded triple)
    graphs = token_priority_graphs(([1, 2], [3], [4, 5]), [1, 3, 4])
    assert {k: set(g.edges) for k, g in graphs.items()} == {2: {(1, 2)}, 3: set(),
                                                             5: {(4, 5)}}
    ids, _, _ = check_token_sequences(np.array([[1.0, 2.0]]))
    assert ids.dtype == np.int64
    with pytest.raises(ValueError, match="non-integer"):
        check_token_sequences(np.array([[1.5, 2.0]]))
    with pytest.raises(ValueError, match="empty sequence"):
        check_token_sequences([[1, 2], []])
    with pytest.raises(ValueError, match="out of range"):
        check_token_sequences([[1, 9]], n_tokens=5)
    with pytest.raises(ValueError, match="Negative"):
        check_token_sequences([[1, -1]])
    with pytest.raises(ValueError, match="0 sequences"):
        check_token_sequences(np.zeros((0, 3), dtype=int))
    with pytest.raises(ValueError, match="Reshape"):
        check_token_sequences(np.arange(3))


def test_draw_token_priority_graph():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    X, y, _ = _random_instance(2)
    graphs = token_priority_graphs(X, y)
    sccs = strongly_connected_components(graphs)
    import matplotlib.pyplot as plt
    from matplotlib.collections import PathCollection
    from matplotlib.patches import FancyArrowPatch

    k = max(graphs, key=lambda key: graphs[key].number_of_edges())
    graph, components = graphs[k], sccs[k]
    ax = draw_token_priority_graph(graph, components)
    # one marker per token, one label per token, one arrow per edge; edges inside an
    # SCC dashed and red, edges i => j solid
    nodes = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert len(nodes) == 1 and len(nodes[0].get_offsets()) == graph.number_of_nodes()
    assert sorted(t.get_text() for t in ax.texts) == sorted(str(v) for v in graph.nodes)
    arrows = [a for a in ax.patches if isinstance(a, FancyArrowPatch)]
    assert len(arrows) == graph.number_of_edges()
    scc_of = {v: i for i, c in enumerate(components) for v in c}
    n_inner = sum(scc_of[i] == scc_of[j] for i, j in graph.edges)
    dashed = [a for a in arrows if a.get_linestyle() in ("--", "dashed")]
    assert len(dashed) == n_inner
    red = matplotlib.colors.to_rgba("tab:red")
    assert all(np.allclose(a.get_edgecolor(), red) for a in dashed)
    # colors: grey for singleton SCCs, a palette color otherwise
    colors = nodes[0].get_facecolors()
    for color, v in zip(colors, graph.nodes):
        grey = len(components[scc_of[v]]) == 1
        assert np.allclose(color, (0.75, 0.75, 0.75, 1.0)) == grey
    assert not ax.axison
    plt.close("all")


def test_orthonormal_basis_dimension_counts_scc_sizes():
    # dim S_cyc = sum over non-singleton SCCs of (|C| - 1) for independent embeddings
    for seed in range(10):
        X, y, E = _random_instance(seed)
        sccs = strongly_connected_components(token_priority_graphs(X, y))
        rows = cyclic_subspace_basis(E, sccs)
        expected = sum(len(c) - 1 for cs in sccs.values() for c in cs)
        rank = scipy.linalg.orth(rows.T).shape[1] if rows.shape[0] else 0
        assert rank == expected
