"""Helpers shared by the tests: reference programs written from the papers' equations,
instances and checks."""

import functools
import itertools
import warnings

import cvxpy as cp
import networkx as nx
import numpy as np

from skntp.datasets import load_text_ntp, make_ntp_data, make_token_priority_data
from skntp.graphs import (
    is_acyclic,
    strongly_connected_components,
    token_priority_graphs,
)
from skntp.svm import (
    Constraints,
    KeyScores,
    MaxMarginProblem,
    QueryKeyScores,
)


def tight_cvxpy(problem):
    """An independent reference for ``problem``: the NTP-SVM from its data by hand
    (:func:`tight_ntp_svm`) when the test built it from ``H, S``
    (``problem.info["by_hand"]``), otherwise the test's constraints on rows written
    from the score map's definition."""
    if "by_hand" in problem.info:
        return tight_ntp_svm(*problem.info["by_hand"])
    c = problem.constraints
    return tight_qp(rows_by_definition(problem), c.rhs, c.equality, problem.shape)


def tight_ntp_svm(H, S):
    """The NTP-SVM of contexts ``H`` and supports ``S``, from (4a)-(4b) by hand."""
    return ntp_svm_all_pairs(H, S, tight=True)


def tight_qp(rows, rhs, equality, shape):
    """``min ||w||^2`` on the rows, by cvxpy/Clarabel to 1e-11; None if it cannot."""
    return min_norm_on_rows(rows, rhs, equality, shape, tight=True)


def rows_by_definition(problem):
    """Dense rows ``S[b, a] - S[b, r]`` (``S[b, a]`` for ``r = -1``) on ``w.ravel()``,
    written from the definitions, not through ``problem.constraint_matrix()``."""
    c, sc = problem.constraints, problem.scores
    return np.array([
        score_gradient(sc, b, a) - (score_gradient(sc, b, r) if r >= 0 else 0.0)
        for b, a, r in zip(c.block, c.pos, c.ref)
    ]).reshape(len(c), -1)


def rel_err(a, b):
    # w* = 0 (all right-hand sides 0): compare absolutely (solver noise ~1e-6)
    nb = max(np.linalg.norm(a), np.linalg.norm(b))
    return np.linalg.norm(a - b) / nb if nb > 1e-4 else np.linalg.norm(a - b)


# --------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------
def assert_kkt(problem, res, tol=1e-7):
    """Stationarity, dual feasibility, complementary slackness, feasibility."""
    c = problem.constraints
    A = problem.constraint_matrix()
    w = res.primal.ravel()
    lam = res.dual
    scale = max(1.0, np.linalg.norm(w))
    # stationarity: w = A^T lam
    assert np.linalg.norm(A.T @ lam - w) <= tol * scale * max(1.0, np.abs(lam).max())
    # dual feasibility
    assert np.all(lam[~c.equality] >= -tol * max(1.0, np.abs(lam).max()))
    slack = A @ w - c.rhs
    # primal feasibility
    assert np.all(slack[~c.equality] >= -tol)
    assert np.all(np.abs(slack[c.equality]) <= tol)
    # complementary slackness
    assert np.all(np.abs(lam[~c.equality] * slack[~c.equality]) <= tol * scale**2)


def check_ntp_constraints(H, S, W, tol):
    """(4a)-(4b) on ``W``, every pair: equal in-support logits, in-support at least 1
    above out-of-support ones, up to ``tol``."""
    logits = H @ W.T
    for j in range(S.shape[0]):
        ins, outs = np.flatnonzero(S[j]), np.flatnonzero(~S[j])
        assert np.ptp(logits[j, ins]) <= tol
        if outs.size:
            assert logits[j, ins].min() - logits[j, outs].max() >= 1 - tol


def ntp_svm_all_pairs(H, S, objective=cp.sum_squares, tight=False):
    """Eq. (4) with every pair (:func:`ntp_pairs_by_hand`): the ``W`` minimizing
    ``objective(W)`` (``||W||_F^2``, or another norm), by cvxpy/Clarabel with the
    tolerances of :func:`min_norm_on_rows`; None unless optimal.  The logits are a
    variable ``Z = H W^T`` of their own, so that each pair is a row with two entries
    (written on ``W``, each row would couple ``2d`` entries, and Clarabel's
    factorizations fill in: 11 s against 0.4 s at ``m, d, V = 30, 40, 80``)."""
    j, a, b, rhs, eq = ntp_pairs_by_hand(S)
    (m, V), d = S.shape, H.shape[1]
    W, Z = cp.Variable((V, d)), cp.Variable(m * V)
    gaps = Z[j * V + a] - Z[j * V + b]
    cons = [Z == cp.vec(H @ W.T, order="C")]
    if (~eq).any():
        cons.append(gaps[np.flatnonzero(~eq)] >= rhs[~eq])
    if eq.any():
        cons.append(gaps[np.flatnonzero(eq)] == rhs[eq])
    return _solve_reference(cp.Problem(cp.Minimize(objective(W)), cons), W, tight)


def min_norm_on_rows(rows, rhs, equality, shape, objective=cp.sum_squares, tight=False):
    """``argmin objective(W)`` s.t. ``rows W.ravel() >= rhs`` (``= rhs`` where
    ``equality``), ``W`` of ``shape``, by cvxpy/Clarabel; None unless Clarabel reports
    it optimal.  ``tight``: to 1e-11 (the core's cvxpy path stops at a relative gap
    ~1e-8, i.e. a relative error up to ~1e-4 in ``W``), and None where Clarabel cannot
    reach that."""
    w = cp.Variable(rows.shape[1])
    cons = []
    if (~equality).any():
        cons.append(rows[~equality] @ w >= rhs[~equality])
    if equality.any():
        cons.append(rows[equality] @ w == rhs[equality])
    W = cp.reshape(w, shape, order="C") if len(shape) > 1 else w
    return _solve_reference(cp.Problem(cp.Minimize(objective(W)), cons), W, tight)


def _solve_reference(prob, W, tight):
    if not tight:
        prob.solve(solver=cp.CLARABEL)
    else:
        try:
            prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11,
                       tol_feas=1e-11, max_iter=500)
        except cp.error.SolverError:
            return None
    return np.asarray(W.value) if prob.status == "optimal" else None


def log_odds_equations(H, P):
    """Eq. (3) as a dense system on ``W.ravel()``: ``(e_z - e_a)^T W h_j =
    log(p_jz / p_ja)`` for ``z`` in ``S_j``, ``a`` the first token of ``S_j``."""
    V, d = P.shape[1], H.shape[1]
    A, b = [], []
    for j in range(H.shape[0]):
        S = np.flatnonzero(P[j] > 0)
        for z in S[1:]:
            row = np.zeros((V, d))
            row[z] += H[j]
            row[S[0]] -= H[j]
            A.append(row.ravel())
            b.append(np.log(P[j, z] / P[j, S[0]]))
    return np.array(A).reshape(-1, V * d), np.array(b)


def numerical_grad(f, W, h=1e-6):
    g = np.zeros_like(W)
    for idx in np.ndindex(W.shape):
        e = np.zeros_like(W)
        e[idx] = h
        g[idx] = (f(W + e) - f(W - e)) / (2 * h)
    return g


def ntp_instance(seed, m=8, d=12, V=6):
    X, y = make_ntp_data(n_samples=300, n_contexts=m, n_features=d, n_tokens=V,
                         support_size=(1, 3), random_state=seed)
    H, inverse = np.unique(X, axis=0, return_inverse=True)
    S = np.zeros((len(H), V), dtype=bool)
    S[inverse.ravel(), y] = True
    return H, S


def head_from_rows(X, rhs=None, name="head SVM"):
    """Binary SVM without bias with signed rows ``X``: ``X_i v >= rhs_i``."""
    n = X.shape[0]
    rhs = np.ones(n) if rhs is None else rhs
    return MaxMarginProblem(
        KeyScores(np.asarray(X, float)[:, None, :]),
        Constraints(np.arange(n), np.zeros(n), -np.ones(n), rhs, np.zeros(n, bool)),
        name=name, infeasible_message="the labelled points are not separable")


def rows_of(problem):
    c = problem.constraints
    return {(int(j), int(p), int(r), float(b), bool(e))
            for j, p, r, b, e in zip(c.block, c.pos, c.ref, c.rhs, c.equality)}


def att_program(rng, n, T, d, relaxed=0.0):
    """ATT-SVM-like: every other token below the teacher's choice (some rhs 0)."""
    K = rng.standard_normal((n, T, d))
    sel = np.argmax(K @ rng.standard_normal(d), axis=1)
    i, t = np.nonzero(np.arange(T)[None, :] != sel[:, None])
    rhs = np.where(rng.random(n) < relaxed, 0.0, 1.0)[i]
    return MaxMarginProblem(
        KeyScores(K), Constraints(i, sel[i], t, rhs, np.zeros(i.size, bool)),
        name="ATT-SVM")


def key_query_margins(W, X, Z, selected):
    n, T, _ = X.shape
    logits = np.einsum("itd,kd,ik->it", X, W, Z)
    gaps = logits[np.arange(n), selected][:, None] - logits
    gaps[np.arange(n), selected] = np.inf
    return gaps.min()


def key_query_instance(seed, n=8, T=5, d=6, k=None, self_attention=False):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, T, d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    if self_attention:
        Z = X[:, 0].copy()
    else:
        Z = rng.standard_normal((n, k or d))
        Z /= np.linalg.norm(Z, axis=-1, keepdims=True)
    v = rng.standard_normal(d)
    y = np.where(rng.standard_normal(n) > 0, 1.0, -1.0)
    selected = np.argmax(y[:, None] * (X @ v), axis=1)
    return X, Z, selected


def kq_instance(seed, n=7, T=4, d=5, k=3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, T, d))
    Z = rng.standard_normal((n, k))
    sel = np.argmax(np.einsum("itd,kd,ik->it", X, rng.standard_normal((k, d)), Z), axis=1)
    return X, Z, sel


# --------------------------------------------------------------------------
# instances
# --------------------------------------------------------------------------
def att_instance(seed, n=8, T=5, k=6):
    rng = np.random.default_rng(seed)
    K = rng.standard_normal((n, T, k))
    return K, np.argmax(K @ rng.standard_normal(k), axis=1)  # separable by construction


def key_problem(keys, block, pos, ref, rhs, equality, name="toy"):
    return MaxMarginProblem(KeyScores(np.asarray(keys, float)),
                            Constraints(block, pos, ref, rhs, equality), name=name,
                            infeasible_message="the toy data are not separable")


def joint_instance(seed, n=4, T=3, d=3, relax=False):
    """Random data satisfying Thm. 5 (``relax=False``) or Thm. 6 (``relax=True``).

    The optimal token of input ``i`` is ``(Y_i c_i a, 1)`` with ``a`` a unit
    vector, the others ``(z, u)`` with ``||z|| < 0.7`` and ``|u| <= 0.5``.
    ``v^mm = (a, 0)``: the label margin of any other choice is below 1.  The
    last coordinate lets attention select the optimal tokens (ATT-SVM is
    feasible).  With ``relax=True`` inputs 2.. get ``c_i in [1.5, 2.5]`` and
    are not support vectors (Sec. 3.2), so ``p^relax != p^mm``.
    """
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(d)
    a /= np.linalg.norm(a)
    y = np.resize([1.0, -1.0], n)
    rng.shuffle(y)
    y[:2] = [1.0, -1.0]
    Z = rng.standard_normal((n, T, d))
    Z /= np.linalg.norm(Z, axis=2, keepdims=True)
    X = np.zeros((n, T, d + 1))
    X[..., :d] = Z * rng.uniform(0.1, 0.7, (n, T, 1))
    X[..., d] = rng.uniform(-0.5, 0.5, (n, T))
    pos = rng.integers(0, T, n)
    c = np.ones(n)
    if relax:
        c[2:] = rng.uniform(1.5, 2.5, n - 2)
    X[np.arange(n), pos, :d] = (y * c)[:, None] * a
    X[np.arange(n), pos, d] = 1.0
    return X, y, pos, np.append(a, 0.0), c == 1


def att_svm_by_hand(seqs_keys, selected, rhs=None, norm=2):
    """(ATT-SVM) / (10): ``min ||p||`` s.t. ``p^T (k_{i alpha_i} - k_it) >= r_i``
    (``||p||^2`` in the Euclidean norm, ``cp.norm(p, norm)`` in another)."""
    p = cp.Variable(seqs_keys[0].shape[1])
    cons = []
    for i, (K, a) in enumerate(zip(seqs_keys, selected)):
        r = 1.0 if rhs is None else rhs[i]
        cons += [(K[a] - K[t]) @ p >= r for t in range(len(K)) if t != a]
    objective = cp.sum_squares(p) if norm == 2 else cp.norm(p, norm)
    prob = cp.Problem(cp.Minimize(objective), cons)
    prob.solve(solver=cp.CLARABEL)
    return None if prob.status != cp.OPTIMAL else p.value


def margin(X, y, W, norm):
    L = X @ W.T
    true = L[np.arange(len(y)), y]
    L[np.arange(len(y)), y] = -np.inf
    size = {"fro": np.linalg.norm(W), "max": np.abs(W).max(),
            "spectral": np.linalg.norm(W, 2)}[norm]
    return float((true - L.max(axis=1)).min() / size)


def onehot_optimum(X, y, V, norm):
    """``1 / min ||W||`` s.t. ``(e_y - e_c)^T W x_i >= 1``: the best normalized margin."""
    W = cp.Variable((V, X.shape[1]))
    L = X @ W.T
    cons = [L[i, y[i]] - L[i, c] >= 1 for i in range(len(y)) for c in range(V) if c != y[i]]
    objective = {"fro": cp.norm(W, "fro"), "max": cp.max(cp.abs(W)),
                 "spectral": cp.sigma_max(W)}[norm]
    prob = cp.Problem(cp.Minimize(objective), cons)
    with warnings.catch_warnings():
        # Clarabel stalls near the spectral optimum of some seeds ("optimal_inaccurate",
        # value right to 2e-8); SCS at 1e-10 then decides
        warnings.filterwarnings("ignore", message="Solution may be inaccurate")
        prob.solve(solver=cp.CLARABEL)
    if prob.status != cp.OPTIMAL:
        prob.solve(solver=cp.SCS, eps=1e-10, max_iters=200_000)
    assert prob.status == cp.OPTIMAL, prob.status
    return 1.0 / prob.value


def cyclic_instance(seed, K=6, d=8, n=6, T=4):
    """Draw App. D general data until the graphs have a cycle (Fig. 4 is about those)."""
    rs = seed
    while True:
        X, y, E = make_token_priority_data(K, d, n, T, acyclic=False, random_state=rs)
        if not is_acyclic(token_priority_graphs(X, y)):
            return X, y, E
        rs += 10_000


def graphs_by_hand(seqs, y):
    """Sec. 3.1: for each last token k, edges y_i -> x_it (x_it != y_i)."""
    graphs = {}
    for seq, label in zip(seqs, y):
        g = graphs.setdefault(int(seq[-1]), nx.DiGraph())
        g.add_node(int(label))
        for x in seq:
            g.add_node(int(x))
            if x != label:
                g.add_edge(int(label), int(x))
    return graphs


def graph_svm_constraints(E, X, y, W):
    """The Graph-SVM's constraints on the cvxpy variable ``W``, written from the paper's
    formula (without the core's builders): ``= 0`` within an SCC, ``>= 1`` on edges."""
    graphs = token_priority_graphs(X, y)
    sccs = strongly_connected_components(graphs)
    cons = []
    for k, g in graphs.items():
        where = {v: ci for ci, c in enumerate(sccs[k]) for v in c}
        for i, j in itertools.permutations(g.nodes, 2):
            lhs = E[i] @ W @ E[k] - E[j] @ W @ E[k]
            if where[i] == where[j]:
                cons.append(lhs == 0)
            elif g.has_edge(i, j):
                cons.append(lhs >= 1)
    return cons


def score_gradient(scores, b, t):
    """``d S[b, t] / d w`` flattened, from the score maps' definitions: ``k_bt^T p``
    (KeyScores), ``e_t^T W q_b`` (BilinearScores; ``e_t = s_t`` times the t-th unit
    vector without outputs) and ``z_b^T W x_bt`` (QueryKeyScores)."""
    if isinstance(scores, KeyScores):
        return scores.keys[b, t]
    if isinstance(scores, QueryKeyScores):
        return np.outer(scores.queries[b], scores.tokens[b, t]).ravel()
    if scores.outputs is not None:
        e = scores.outputs[t]
    else:
        e = np.zeros(scores.n_positions)
        e[t] = 1.0 if scores.output_scale is None else scores.output_scale[t]
    return np.outer(e, scores.queries[b]).ravel()


def ntp_pairs_by_hand(S):
    """Eq. (4a)-(4b) as pairs of logits of context ``j``: ``l[j, a] - l[j, b] = 0`` for
    consecutive ``a < b`` in ``S_j`` (the other pairs of (4b) follow) and
    ``l[j, a] - l[j, v] >= 1`` for every ``a`` in ``S_j`` and ``v`` not in ``S_j`` (not
    the package's anchored form).  Returns ``j, a, b, rhs, equality``."""
    pairs = []
    for j in range(S.shape[0]):
        ins, outs = np.flatnonzero(S[j]), np.flatnonzero(~S[j])
        pairs += [(j, a, b, 0.0, True) for a, b in zip(ins[:-1], ins[1:])]
        pairs += [(j, a, v, 1.0, False) for a in ins for v in outs]
    j, a, b, rhs, eq = zip(*pairs)
    return (np.array(j), np.array(a), np.array(b), np.array(rhs), np.array(eq, bool))


def relu_setup(seed, n=3, T=4, d=4):
    """The public code's ReLU setup: unit tokens and queries, a random value matrix of
    unit Frobenius norm, the head v = 1."""
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((d, d))
    V /= np.linalg.norm(V)
    X = rng.standard_normal((n, T, d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    y = np.where(rng.standard_normal(n) > 0, 1, -1)
    Z = rng.standard_normal((n, d))
    Z /= np.linalg.norm(Z, axis=-1, keepdims=True)
    return np.concatenate([X, Z[:, None]], axis=1), y, V


def key_query_setup(seed, n=6, T=8, d=10):
    """Unit tokens and queries, a unit head and random labels (the public code's set-up)."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(d)
    v /= np.linalg.norm(v)
    y = np.where(rng.standard_normal(n) > 0, 1, -1)
    X = rng.standard_normal((n, T, d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    Z = rng.standard_normal((n, d))
    Z /= np.linalg.norm(Z, axis=-1, keepdims=True)
    return X, y, Z, v


def partially_separable_instance(seed, d_a=4, m_a=3, d_b=2, m_b=25, t_a=3, t_b=3, t_0=1):
    """NTP data with ``d < m`` whose margin rows are partly separable.

    Every context has a bias coordinate 1.  Group A: ``m_a < d_a`` contexts on
    their own coordinates, supports among tokens ``0..t_a-1``; group B:
    ``m_b >> d_b`` contexts on theirs, supports among the next ``t_b`` tokens;
    ``t_0`` tokens are never next.  Supports have 1 or 2 tokens with Dirichlet
    probabilities.  Returns ``(H, P)``, contexts (m, d) and next-token
    probabilities (m, V).
    """
    rng = np.random.default_rng(seed)
    d, V, m = 1 + d_a + d_b, t_a + t_b + t_0, m_a + m_b
    H = np.zeros((m, d))
    H[:, 0] = 1.0
    H[:m_a, 1:1 + d_a] = rng.standard_normal((m_a, d_a))
    H[m_a:, 1 + d_a:] = rng.standard_normal((m_b, d_b))
    P = np.zeros((m, V))
    for j in range(m):
        tokens = np.arange(t_a) if j < m_a else t_a + np.arange(t_b)
        k = int(rng.integers(1, 3))
        P[j, rng.choice(tokens, k, replace=False)] = rng.dirichlet(np.ones(k))
    return H, P


def separable_rows_by_lp(H, S):
    """The separable margin rows, by the LP of their definition, written here in cvxpy.

    ``max sum s`` over ``W`` and ``s`` with ``(Wh_j)_z = (Wh_j)_z'`` on each support
    and ``(Wh_j)_z - (Wh_j)_v >= s_{jv} in [0, 1]`` for ``z in S_j``, ``v not in S_j``.
    """
    m, d = H.shape
    V = S.shape[1]
    W = cp.Variable((V, d))
    s = cp.Variable((m, V))
    L = H @ W.T
    cons = [s >= 0, s <= 1]
    for j in range(m):
        inside = np.flatnonzero(S[j])
        for z in inside[1:]:
            cons.append(L[j, z] == L[j, inside[0]])
        for v in np.flatnonzero(~S[j]):
            cons.append(L[j, inside[0]] - L[j, v] >= s[j, v])
    cp.Problem(cp.Maximize(cp.sum(cp.multiply(~S, s))), cons).solve(solver=cp.HIGHS)
    return (s.value > 0.5) & ~S


def finite_side_rows(H, S, separable):
    """Rows ``(e_a - e_b) h_j^T`` (flattened ``W``) spanning ``F_I``: ``a, b`` in the
    support or the non-separable tokens of context ``j``."""
    m, d = H.shape
    V = S.shape[1]
    rows = []
    for j in range(m):
        allowed = np.flatnonzero(~separable[j])
        for b in allowed[1:]:
            row = np.zeros((V, d))
            row[allowed[0]] = H[j]
            row[b] = -H[j]
            rows.append(row.ravel())
    return np.array(rows).reshape(-1, V * d)


def projector_onto_rows(rows):
    """The orthogonal projector onto the span of ``rows`` (an explicit matrix)."""
    if rows.size == 0:
        return np.zeros((0, 0))
    u, sv, vt = np.linalg.svd(rows, full_matrices=False)
    basis = vt[sv > sv[0] * 1e-10]
    return basis.T @ basis


def regularized_ntp_fit(H, P, lam, W0=None, tol=1e-11, max_iter=300):
    """``argmin CE(W) + lam/2 ||W||^2`` (uniform context weights), by damped Newton
    steps on the explicit Hessian: the regularization path of the NTP loss."""
    m, d = H.shape
    V = P.shape[1]
    w = np.zeros(V * d) if W0 is None else W0.ravel().copy()

    def parts(w):
        Z = H @ w.reshape(V, d).T
        Z = Z - Z.max(axis=1, keepdims=True)
        E = np.exp(Z)
        S = E / E.sum(axis=1, keepdims=True)
        loss = np.mean(np.log(E.sum(axis=1)) - np.sum(P * Z, axis=1)) + lam / 2 * w @ w
        grad = ((S - P).T @ H).ravel() / m + lam * w
        return loss, grad, S

    loss, grad, S = parts(w)
    for _ in range(max_iter):
        if np.linalg.norm(grad) <= tol:
            break
        # Hessian: sum_j (diag(s_j) - s_j s_j^T) kron h_j h_j^T / m + lam I
        hess = np.zeros((V * d, V * d))
        for j in range(m):
            C = np.diag(S[j]) - np.outer(S[j], S[j])
            hess += np.kron(C, np.outer(H[j], H[j]))
        hess = hess / m + lam * np.eye(V * d)
        step = -np.linalg.solve(hess, grad)
        t = 1.0
        while True:
            new = parts(w + t * step)
            if new[0] <= loss + 1e-4 * t * (grad @ step) or t < 1e-10:
                break
            t /= 2
        w = w + t * step
        loss, grad, S = new
    return w.reshape(V, d)


def random_supports(seed, m=6, V=8, density=0.3):
    """A fresh random (m, V) bool support pattern: every context has at least one
    in-support token and at least one out-of-support token."""
    rng = np.random.default_rng(seed)
    S = rng.random((m, V)) < density
    S[np.arange(m), rng.integers(0, V, m)] = True
    full = S.all(axis=1)
    S[full, rng.integers(0, V, int(full.sum()))] = False
    return S


def logit_margins(S, L):
    """(largest tie violation within the supports, smallest in-out margin) of the
    logits ``L`` (V x m) of the logit NTP-SVM, by hand; ``S`` the (m, V) supports."""
    Lt = L.T
    inside = np.where(S, Lt, np.nan)
    ties = np.nanmax(inside, axis=1) - np.nanmin(inside, axis=1)
    worst_out = np.max(np.where(S, -np.inf, Lt), axis=1)
    return float(ties.max()), float(np.min(np.nanmin(inside, axis=1) - worst_out))


@functools.cache
def _python_text_40():
    from skntp.decoder import aggregate_contexts

    X, y = load_text_ntp(corpus="python", context_size=2, n_words=100, n_features=8,
                         n_sentences=40, embedding="words", return_X_y=True)
    labels, codes = np.unique(y, return_inverse=True)
    H, pi, P, _ = aggregate_contexts(X, np.eye(labels.size)[codes])
    return X, y, H, pi, P.toarray()


def python_text_40():
    """Real text where ``d < m``: the first 40 sentences of the Python documentation,
    2-word contexts of 8-dimensional word vectors (d = 16; 161 distinct contexts, 86
    next words, 13,642 margin rows).  Returns copies of ``(X, y, H, pi, P)``: the
    samples, and the distinct contexts with their weights and dense next-token
    probabilities."""
    return tuple(a.copy() for a in _python_text_40())


def word_contexts(seed, n_words=(6, 6), widths=(3, 3), n_contexts=24, V=5, max_support=2):
    """Contexts that concatenate one vector per position (the loader's
    ``embedding="words"``), on distinct word tuples, with small random supports."""
    rng = np.random.default_rng(seed)
    vectors = [rng.standard_normal((n, w)) for n, w in zip(n_words, widths)]
    tuples = np.stack([rng.integers(0, n, 4 * n_contexts) for n in n_words], axis=1)
    tuples = np.unique(tuples, axis=0)[:n_contexts]
    H = np.hstack([vec[tuples[:, k]] for k, vec in enumerate(vectors)])
    S = np.zeros((len(H), V), dtype=bool)
    for j in range(len(H)):
        S[j, rng.choice(V, rng.integers(1, max_support + 1), replace=False)] = True
    return H, S


def lp_separable(H, S):
    """The rows some direction of the recession cone makes positive: maximize the sum
    of ``s_jv in [0, 1]`` with ``(w_z - w_v)^T h_j >= s_jv`` (``z`` in ``S_j``), the
    logits of ``S_j`` equal; a cone, so ``s = 1`` exactly on the separable rows."""
    m, V = S.shape
    W = cp.Variable((V, H.shape[1]))
    s = cp.Variable((m, V))
    L = H @ W.T
    cons = [s >= 0, s <= 1]
    for j in range(m):
        sup = np.flatnonzero(S[j])
        z = sup[0]
        cons += [L[j, sup] == L[j, z]]
        off = np.flatnonzero(~S[j])
        if off.size:
            cons += [L[j, z] - L[j, off] >= s[j, off]]
    problem = cp.Problem(cp.Maximize(cp.sum(cp.multiply(s, ~S))), cons)
    problem.solve(solver=cp.HIGHS)
    assert problem.status == cp.OPTIMAL
    return (s.value > 0.5) & ~S
