"""The NTP programs of Thrampoulidis (2024): NTP-SVM and the finite component."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.sparse as sp
import scipy.sparse.linalg

from ._problem import (
    BilinearScores,
    Constraints,
    MaxMarginProblem,
    MaxMarginResult,
    NotSeparableError,
    ProgramTooLargeError,
    check_program_size,
    real_array,
)
from ._solve import solve_max_margin, solve_min_norm

__all__ = ["COMPATIBLE_RESIDUAL", "exchangeable_tokens", "finite_component", "ntp_svm",
           "ntp_svm_problem", "log_odds_problem", "log_odds_solvable", "orthonormal_contexts",
           "positively_spans", "solve_ntp_svm", "spanning_proof"]


def _check_contexts(contexts, support, name="support"):
    """Validate ``contexts`` (m, d) and an (m, V) matrix; a sparse one stays sparse (CSR).

    Complex or non-finite values in either are an error (a NaN would otherwise
    count as an in-support token).
    """
    contexts = real_array(contexts, "contexts")
    support = sp.csr_matrix(support, copy=True) if sp.issparse(support) else np.asarray(support)
    if sp.issparse(support):
        # (duplicate entries that cancel would count as in-support once cast to bool)
        support.sum_duplicates()
        support.eliminate_zeros()
    values = support.data if sp.issparse(support) else support
    if values.dtype != bool:
        real_array(values, name)
    if contexts.ndim != 2:
        raise ValueError(f"contexts must be 2-D (m, d), got shape {contexts.shape}.")
    if support.ndim != 2 or support.shape[0] != contexts.shape[0]:
        raise ValueError(
            f"{name} must be 2-D (m, V) with m={contexts.shape[0]} rows, got shape "
            f"{support.shape}."
        )
    return contexts, support


def orthonormal_contexts(contexts, *, return_condition=False):
    """The contexts on an orthonormal basis of their span: ``Q`` of shape (m, r).

    Separability depends on the contexts only through their span (the rows of ``W H^T``
    are the same set for ``H`` and ``H A``, ``A`` invertible), so the diagnosis runs on
    ``Q``, whose conditioning is 1 whatever that of ``H``.  A column-pivoted QR
    (``H P = Q R``) keeps every direction whose ``|R_ii|`` is above ``max(m, d) eps
    |R_00|`` (the rank convention of :func:`numpy.linalg.matrix_rank`): at condition
    1e8 every direction stays, where a cut-off on ``H^T H`` would drop those below
    1e-8.

    With ``return_condition=True``, also the condition number of the contexts on
    their span (the ratio of the extreme singular values of ``R``'s kept rows): the
    span that float64 represents is known to about ``eps`` times it.
    """
    H = np.asarray(contexts, dtype=float)
    m, d = H.shape
    if m == 0 or d == 0:
        return (np.zeros((m, 0)), 1.0) if return_condition else np.zeros((m, 0))
    Q, R, _ = scipy.linalg.qr(H, mode="economic", pivoting=True)
    diag = np.abs(np.diag(R))
    rank = int(np.count_nonzero(diag > max(m, d) * np.finfo(float).eps * diag[0])) if (
        diag.size and diag[0] > 0) else 0
    Q = np.ascontiguousarray(Q[:, :rank])
    if not return_condition:
        return Q
    sv = np.linalg.svd(R[:rank], compute_uv=False) if rank else np.ones(1)
    return Q, float(sv[0] / sv[-1])



#: The relative residual at or below which the log-odds equations (3) count as solvable.
COMPATIBLE_RESIDUAL = 1e-8

#: Singular values of a token's contexts on the orthonormal basis between the rank
#: cut-off and this bound leave :func:`log_odds_solvable`'s "solvable" unknown: the
#: solution needs a ``W`` of at least ``1 / sigma`` times the log-odds (LSQR's default
#: limit on the condition number, 1e8).
WEAK_DIRECTION = 1e-8

#: Numbers of the stacked contexts of one batch of equal-size tokens in
#: :func:`log_odds_solvable` (their batched SVD).
SVD_ELEMENTS = 2**24


def _token_ranges(Q, rows, sizes, cutoff):
    """Per token (``sizes[k]`` consecutive entries of ``rows``, contexts on the basis
    ``Q``): an orthonormal basis ``U_k`` of the range of ``Q[rows_k]`` in
    ``R^{sizes[k]}`` (the directions of singular value above ``max(n, r) eps`` and
    ``cutoff``), by batched SVDs of the tokens of one size.  Returns the COO entries of
    the block-diagonal matrix of the ``U_k`` of the tokens whose range is not all of
    ``R^{sizes[k]}`` (``None`` when there is none), and whether a direction kept by the
    rank cut-off alone is weak (:data:`WEAK_DIRECTION`)."""
    r = Q.shape[1]
    starts = np.cumsum(sizes) - sizes
    entries, columns, values, weak, n_cols = [], [], [], False, 0
    for n in np.unique(sizes):
        tokens = np.flatnonzero(sizes == n)
        step = max(1, SVD_ELEMENTS // max(1, n * r))
        for a in range(0, tokens.size, step):
            at = starts[tokens[a:a + step]][:, None] + np.arange(n)  # (tokens, n)
            if r == 0:
                s, U = np.zeros((at.shape[0], 0)), np.zeros((at.shape[0], n, 0))
            else:
                U, s, _ = np.linalg.svd(Q[rows[at]], full_matrices=False)
            ranked = s > max(n, r) * np.finfo(float).eps  # (||Q[rows]|| <= 1)
            weak |= bool(np.any(ranked & (s <= WEAK_DIRECTION)))
            keep = ranked & (s > cutoff)
            deficient = keep.sum(axis=1) < n
            if not deficient.any():
                continue
            U, keep, at = U[deficient], keep[deficient], at[deficient]
            per = keep.sum(axis=1)
            cols = (n_cols + np.cumsum(per) - per)[:, None] + np.cumsum(keep, axis=1) - 1
            t, i, k = np.nonzero(np.broadcast_to(keep[:, None, :], U.shape))
            entries.append(at[t, i])
            columns.append(cols[t, k])
            values.append(U[t, i, k])
            n_cols += int(per.sum())
    if not entries:
        return None, weak
    return (np.concatenate(values), np.concatenate(entries), np.concatenate(columns),
            n_cols), weak


def _off_range_residual(ranges, rows, log_p, n_contexts, max_iter):
    """``(min_c ||Pi (c + log p)||, converged)`` for the ranges of
    :func:`_token_ranges` (LSQR; ``Pi = 0`` on the tokens not in ``ranges``)."""
    if ranges is None:  # (every token's contexts independent: any c)
        return 0.0, True
    values, entries, columns, n_cols = ranges
    held, entries = np.unique(entries, return_inverse=True)
    n, rows, log_p = held.size, rows[held], log_p[held]
    U = sp.csr_matrix((values, (entries.ravel(), columns)), shape=(n, n_cols))
    E = sp.csr_matrix((np.ones(n), (np.arange(n), rows)), shape=(n, n_contexts))

    def off_ranges(y):  # (Pi y, token by token)
        return y - U @ (U.T @ y)

    op = scipy.sparse.linalg.LinearOperator(
        (n, n_contexts), matvec=lambda c: off_ranges(E @ c),
        rmatvec=lambda y: E.T @ off_ranges(y), dtype=float)
    target = -off_ranges(log_p)
    limit = max(100, 20 * n_contexts) if max_iter is None else max_iter
    c, istop = scipy.sparse.linalg.lsqr(op, target, atol=1e-14, btol=1e-14,
                                        iter_lim=limit)[:2]
    # (istop 1, 2: a solution or a least-squares solution within the tolerances)
    return float(np.linalg.norm(op.matvec(c) - target)), istop in (1, 2)


def log_odds_solvable(contexts, next_token_probs, *, max_iter=None):
    r"""Whether the log-odds equations (3) have a solution (NTP_H-compatibility, Def. 3.1).

    The equations ``(e_z - e_{z_j})^T W h_j = log(p_{j,z} / p_{j,z_j})`` (``z`` in
    ``S_j``) say that the in-support logits of each context are its
    log-probabilities plus one constant ``c_j`` of its own.  For a fixed ``c`` the
    tokens decouple: token ``t``'s row ``w_t`` must meet ``w_t^T h_j = c_j + log
    p_{j,t}`` on the contexts ``C_t`` whose support holds ``t``, which it can exactly
    when that vector lies in the range of ``H_{C_t}`` (the contexts of ``C_t`` as
    rows).  So the equations are solvable if and only if some ``c`` puts every
    token's vector in its range:

    .. math::

        \min_c \sum_t \|\Pi_t (c_{C_t} + \log p_{C_t, t})\|^2 = 0,

    ``Pi_t`` the projection onto the orthogonal complement of that range.  Only
    contexts with two tokens or more in their support carry an equation, and only
    tokens whose contexts are linearly dependent have ``Pi_t != 0``: on the Python
    documentation at d = 768 (7,753 equations) 59 of 1,669 tokens, and LSQR on the
    2,541 constants takes 92 iterations: the verdict in 3.3 s, against 85 s and
    1,287 iterations of LSQR on the equations themselves
    (``benchmarks/compatibility_verdict.py``).  The ranges are those of
    the contexts on an orthonormal basis of their span (:func:`orthonormal_contexts`;
    solvability depends on the span only, and a direction is weak relative to all the
    contexts), by batched SVDs of the tokens of one size, with the rank convention of
    :func:`numpy.linalg.matrix_rank`.

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    next_token_probs : array-like or sparse matrix of shape (m, V)
        Non-negative, a positive entry per row; rows are normalized.
    max_iter : int, optional
        LSQR's iteration limit (default: 20 times the unknowns, at least 100).

    Returns
    -------
    solvable : bool or None
        ``True`` when the least squares reach a relative residual of at most
        :data:`COMPATIBLE_RESIDUAL` without the weak directions of the contexts (a
        token's contexts of singular value below :data:`WEAK_DIRECTION`); ``False``
        when LSQR converged above it with every direction above the rank cut-off in
        the ranges (the most that can make the equations solvable); ``None``
        (unknown) when LSQR stopped on its iterations above it, or the equations are
        solvable only through a weak direction (by a ``W`` of at least ``1 /
        WEAK_DIRECTION`` times the log-odds).
    relative_residual : float
        ``||Pi (c + log p)|| / max(1, ||log p||)`` at the least-squares ``c``, ``log p``
        the in-support log-probabilities of the contexts that carry equations.
    """
    H, probs = _check_contexts(contexts, next_token_probs, "next_token_probs")
    P = sp.csr_matrix(probs, dtype=float)
    P.eliminate_zeros()
    if P.data.size and (np.any(P.data < 0) or not np.all(np.isfinite(P.data))):
        raise ValueError("next_token_probs must be finite and non-negative.")
    sums = np.asarray(P.sum(axis=1)).ravel()
    if np.any(sums <= 0):
        raise ValueError("every row of next_token_probs needs a positive entry.")
    P = sp.csr_matrix(sp.diags(1.0 / sums) @ P)
    carry = np.flatnonzero(np.diff(P.indptr) >= 2)  # (contexts with an equation)
    if carry.size == 0:
        return True, 0.0
    PJ = P[carry].tocoo()
    order = np.lexsort((PJ.row, PJ.col))
    rows, tokens, log_p = PJ.row[order], PJ.col[order], np.log(PJ.data[order])
    sizes = np.unique(tokens, return_counts=True)[1]
    Q = orthonormal_contexts(H)[carry]
    scale = max(1.0, float(np.linalg.norm(log_p)))
    # every direction above the rank cut-off in the ranges: the most that can solve
    ranges, weak = _token_ranges(Q, rows, sizes, 0.0)
    residual, converged = _off_range_residual(ranges, rows, log_p, carry.size, max_iter)
    if residual > COMPATIBLE_RESIDUAL * scale:
        return (False if converged else None), residual / scale
    if weak:  # (solvable without the weak directions, or only through them)
        strict = _token_ranges(Q, rows, sizes, WEAK_DIRECTION)[0]
        residual, converged = _off_range_residual(strict, rows, log_p, carry.size,
                                                  max_iter)
        if residual > COMPATIBLE_RESIDUAL * scale:
            return None, residual / scale
    return True, residual / scale


def _anchors(weights):
    """Anchor ``z_j``: the in-support token of largest weight (first on ties)."""
    if sp.issparse(weights):
        return np.asarray(weights.argmax(axis=1)).ravel()
    return np.argmax(weights, axis=1)


#: What to do when the NTP-SVM is too large for memory.
_TOO_LARGE_ADVICE = (
    "Solve it on fewer contexts or a smaller vocabulary, or skip the limits "
    "(compute_limits=False in NTPDecoderClassifier); the finite component "
    "(finite_component) stays cheap: it has one equation per in-support token."
)


def ntp_svm_problem(contexts, support, *, norm="fro"):
    """Build the NTP-SVM (Thrampoulidis 2024, Sec. 4, constraints (4a)-(4b)).

    With one anchor ``z_j in S_j`` per context: equalities
    ``(e_z - e_{z_j})^T W h_j = 0`` for ``z in S_j`` and inequalities
    ``(e_{z_j} - e_v)^T W h_j >= 1`` for ``v not in S_j``.

    Parameters
    ----------
    contexts : array-like of shape (m, d)
        Distinct context embeddings ``h_j``.
    support : array-like of shape (m, V), bool
        ``support[j, z]`` is True when ``z`` is in ``S_j``.
    norm : {"fro", "spectral", "max", "l1"} or ("lp", p), default="fro"
        The norm of the program (:class:`~skntp.svm.MaxMarginProblem`):
        Frobenius, spectral (of ``W``), entrywise max, l1 or lp.

    Returns
    -------
    MaxMarginProblem
    """
    contexts, support = _check_contexts(contexts, support)
    support = support.astype(bool)
    m, V = support.shape
    if sp.issparse(support):
        support.eliminate_zeros()
        counts = np.diff(support.indptr)
    else:
        counts = support.sum(axis=1)
    if not np.all(counts > 0):
        raise ValueError("every context needs at least one in-support token.")
    check_program_size("NTP-SVM", m * V - m, _TOO_LARGE_ADVICE)
    anchor = _anchors(support)
    if sp.issparse(support):
        j_eq = np.repeat(np.arange(m), counts)
        z_eq = support.indices.astype(np.int64)
    else:
        j_eq, z_eq = np.nonzero(support)
    keep = z_eq != anchor[j_eq]
    j_eq, z_eq = j_eq[keep], z_eq[keep]
    j_in, v_in = _out_of_support(support)
    cons = Constraints.concatenate(
        [
            Constraints(j_eq, z_eq, anchor[j_eq], np.zeros(j_eq.size), np.ones(j_eq.size, bool)),
            Constraints(j_in, anchor[j_in], v_in, np.ones(j_in.size), np.zeros(j_in.size, bool)),
        ]
    )
    return MaxMarginProblem(
        BilinearScores(contexts, None, n_outputs=V),
        cons,
        infeasibility_proof=(_computed_once(partial(_infeasibility_proof, contexts, support,
                                                    cons))
                             if contexts.shape[0] > contexts.shape[1] else None),
        name="NTP-SVM",
        infeasible_message="data are not NTP-separable (no W in F-perp separates "
        "in-support from out-of-support tokens with a positive margin, "
        "Def. 3.2); skntp.svm.ntp_separability finds the rows that are separable, and "
        "NTPDecoderClassifier computes the limits on them (W^mm_I and W_fin)",
        norm=norm,
    )


def _computed_once(proof):
    """``proof`` (no arguments, returning ``None`` or ``(message, multipliers)``),
    computed at its first call only: each :func:`solve_max_margin` of the same program
    asks for it (a stationary point of the loss, seconds on real text), and the
    program's rows do not change.  Callers get their own copy of the multipliers."""
    kept = []

    def once():
        if not kept:
            kept.append(proof())
        found = kept[0]
        return None if found is None else (found[0], np.array(found[1], copy=True))
    return once


def _infeasibility_proof(contexts, support, constraints):
    """``(message, multipliers)`` when a table proves some margin row of the NTP-SVM not
    separable (the program is then infeasible), else ``None``.

    The loss's stationary point proves that no row is separable
    (:func:`~skntp.svm.no_row_is_separable`); it is computed when the contexts of the
    frequent tokens positively span (a cheap sign that no row is separable,
    :func:`spanning_proof`) or the work is at most
    :data:`~skntp.svm._ntp_partial.MAX_PROOF_WORK`.  Where the loss's Newton converges
    but its table has entries float64 cannot hold, the table of the analytic center
    (:func:`~skntp.svm.analytic_center_separability`, within
    :func:`~skntp.svm._ntp_center.center_fits`) is the certificate.  Where the contexts
    do not positively span, the exact tables of closed walks of contexts that share
    coordinates come first (:func:`~skntp.svm.cycle_certificate`, first round: a
    few seconds on the Python documentation at d = 768, where the rest is out of
    reach); where they span, after the loss's.  Either way the dispatcher checks the
    multipliers against the program's own rows.
    """
    from ._ntp_center import center_after_the_loss
    from ._ntp_partial import (
        MAX_PROOF_WORK,
        _dense_support,
        _stationary_table,
        _table_at_zero,
        orthonormal_contexts,
        table_multipliers,
    )

    try:
        support = _dense_support(support)
    except ProgramTooLargeError:
        return None
    m, V = support.shape
    scale = max(float(np.abs(contexts).max(initial=0.0)), np.finfo(float).tiny)
    H = contexts / scale
    Q = orthonormal_contexts(H)
    if Q.shape[1] == m:
        return None
    if Q.shape[1] == 0:
        return ("No margin row is separable: every context is zero.",
                table_multipliers(constraints, support, _table_at_zero(support)))
    spans = spanning_proof(Q, support)
    if not spans:  # (cheap first: some rows not separable, exactly)
        found = _cycle_proof(H, support, constraints)
        if found is not None or m * V * contexts.shape[1] > MAX_PROOF_WORK:
            return found
    minimizer = {}
    table = _stationary_table(Q, H, support, np.ones_like(support), require="image",
                              minimizer=minimizer)
    certificate = ("the loss has a stationary point, whose table is the Farkas "
                   "certificate (skntp.svm.no_row_is_separable)")
    # (where the loss's minimizer has a table float64 cannot check: the center's)
    found = None if table is not None else center_after_the_loss(H, support, Q.shape[1],
                                                                 minimizer)
    if found is not None:
        table = found.farkas
        certificate = ("the analytic center of the margin polytope has a Farkas "
                       "table (skntp.svm.analytic_center_separability)")
    if table is None:
        return _cycle_proof(H, support, constraints) if spans else None
    why = ("the contexts of the frequent tokens positively span R^d "
           "(skntp.svm.spanning_proof), and " if spans else "")
    return (f"No margin row is separable: {why}{certificate}. "
            "skntp.svm.ntp_separability and NTPDecoderClassifier give the limits of such "
            "data (W_fin, the minimizer of the loss).",
            table_multipliers(constraints, support, table))


def _cycle_proof(H, support, constraints):
    """The first round of :func:`~skntp.svm.cycle_certificate` as ``(message,
    multipliers)``, or ``None`` where it finds no table."""
    from ._ntp_cycles import cycle_certificate
    from ._ntp_partial import table_multipliers

    cycles = cycle_certificate(H, support, max_rounds=1)
    if not len(cycles):
        return None
    n = len(cycles)
    return (f"Some margin rows are not separable: {n} closed walk{'s' * (n != 1)} of "
            "contexts (h_j1 - h_j2 + h_j3 - ... - h_j2k = 0, coordinate by coordinate) "
            f"{'are' if n != 1 else 'is'} an exact Farkas table "
            "(skntp.svm.cycle_certificate). skntp.svm.ntp_separability and "
            "NTPDecoderClassifier give the limits of such data.",
            table_multipliers(constraints, support, cycles.table(support.shape).toarray()))


def _out_of_support(support, rows_per_chunk=None):
    """``(j, v)`` of every token ``v`` outside ``S_j``, row by row (chunks of a sparse matrix)."""
    if not sp.issparse(support):
        return np.nonzero(~support)
    m, V = support.shape
    step = rows_per_chunk or max(1, (1 << 24) // max(V, 1))
    js, vs = [], []
    for a in range(0, m, step):
        j, v = np.nonzero(~support[a:a + step].toarray())
        js.append(j + a)
        vs.append(v)
    return np.concatenate(js), np.concatenate(vs)


def exchangeable_tokens(support):
    """Group the tokens whose support columns are identical.

    Two tokens ``v, v'`` with ``v in S_j <=> v' in S_j`` for every context
    are exchangeable in the NTP-SVM: swapping rows ``v`` and ``v'`` of ``W``
    maps the feasible set of (4a)-(4b) onto itself and keeps ``||W||``, so
    the unique solution has ``w_v = w_v'``.  Typical cases are tokens never
    in any support and tokens that always occur together.

    Parameters
    ----------
    support : array-like or sparse matrix of shape (m, V)
        The supports: ``support[j, v]`` nonzero (or True) when ``v in S_j``;
        next-token probabilities may be passed as they are.

    Returns
    -------
    representative : ndarray of shape (n_classes,)
        The first token of each class, in increasing order.
    token_class : ndarray of shape (V,)
        The class of every token.
    counts : ndarray of shape (n_classes,)
        Class sizes.
    """
    if sp.issparse(support):
        first, inverse = _identical_columns_sparse(sp.csc_matrix(support, dtype=bool))
    else:
        packed = np.ascontiguousarray(np.packbits(np.asarray(support, dtype=bool), axis=0).T)
        _, first, inverse = np.unique(packed, axis=0, return_index=True, return_inverse=True)
        inverse = np.asarray(inverse).ravel()
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    token_class = rank[inverse]
    return first[order], token_class, np.bincount(token_class)


def _identical_columns_sparse(csc):
    """``(first, inverse)``, as ``np.unique`` gives them, over the columns of a sparse
    bool matrix: each column is keyed by the bytes of its sorted row indices."""
    csc.eliminate_zeros()
    csc.sort_indices()
    V = csc.shape[1]
    ptr, idx = csc.indptr, csc.indices
    classes, first = {}, []
    inverse = np.empty(V, dtype=np.int64)
    for v in range(V):
        key = idx[ptr[v]:ptr[v + 1]].tobytes()
        c = classes.setdefault(key, len(classes))
        if c == len(first):
            first.append(v)
        inverse[v] = c
    return np.asarray(first, dtype=np.int64), inverse


def positively_spans(points, *, robustness=None):
    """Prove that the cone of ``points`` is all of ``R^d``, or fail.

    ``cone(C) = R^d`` exactly when ``C`` has rank ``d`` and some weights
    ``lam > 0`` give ``C^T lam = 0`` (Gordan's alternative).  Non-negative least
    squares finds ``lam = 1 + mu``, ``mu >= 0``, with ``C^T lam`` at round-off;
    the minimum-norm correction of that residual, ``||r|| / sigma_min(C)``, must
    then stay below 1/2, which keeps every weight positive (the residual's
    rounding bound is added to ``r``).

    With ``robustness``, the proof must also survive directions that meet the
    cone's points only to a tolerance: for ``u`` with ``u^T c_i >= -eps ||u||
    ||c_i||`` for every point, ``a_i = u^T c_i + eps ||u|| ||c_i|| >= 0`` has
    ``sum_i lam_i a_i <= ||u|| (||r|| + eps L)`` (``r = C^T lam``, ``L = sum_i lam_i
    ||c_i||``), so ``max a`` and ``sum a``, hence ``||a||_2``, are at most
    ``||u|| (||r|| + eps L) / min(lam)``, and ``sigma_min(C) ||u|| <= ||C u|| <=
    ||a|| + eps ||u|| ||(||c_i||)_i||``: ``u = 0`` unless ``eps kappa >= 1`` with
    ``kappa = (L / min(lam) + ||(||c_i||)_i||) / (sigma_min(C) - ||r|| / min(lam))``.
    ``kappa <= robustness`` is asked: a point set that spans only through a direction
    of size ``1 / kappa`` (contexts that reach a direction by rounding) does not prove
    anything at a tolerance above that.

    Parameters
    ----------
    points : ndarray of shape (n, d)
    robustness : float, optional
        The largest ``kappa`` accepted (``None``: any).

    Returns
    -------
    bool
        True: proven, ``cone(points) = R^d``.  False: not proven.
    """
    n, d = points.shape
    if n <= d:
        return False
    eps = np.finfo(float).eps
    gram = np.linalg.eigvalsh(points.T @ points)
    # sigma_min from the Gram matrix, less its rounding
    sigma_min = math.sqrt(max(gram[0] - 1e3 * n * eps * gram[-1], 0.0))
    if not sigma_min > 0:
        return False
    A = points.T
    try:
        mu, _ = scipy.optimize.nnls(A, -A.sum(axis=1), maxiter=10 * n)
    except RuntimeError:  # its iteration limit: not proven
        return False
    lam = 1.0 + mu
    residual = float(np.linalg.norm(A @ lam))
    rounding = 1e3 * n * eps * float(lam @ np.abs(points).max(axis=1))
    if not (residual + math.sqrt(d) * rounding) / sigma_min < 0.5:
        return False
    if robustness is None:
        return True
    norms = np.linalg.norm(points, axis=1)
    least = float(lam.min())
    kappa = ((float(lam @ norms) / least + float(np.linalg.norm(norms)))
             / (sigma_min - (residual + math.sqrt(d) * rounding) / least))
    return bool(kappa <= robustness)


def spanning_proof(contexts, support, *, max_tests=24, robustness=None):
    """Prove that no margin row is separable by contexts that positively span ``R^d``.

    On the recession cone ``K`` of the loss (2) (the directions ``D`` whose logits
    ``D h_j`` are equal on ``S_j`` and at least as large as every other; see
    :mod:`skntp.svm._ntp_partial`), a token ``a`` of ``S_j`` has
    the largest logit at ``h_j``, so ``(w_a - w_b)^T h_j >= 0`` for every token
    ``b`` and every ``h_j`` in ``C_a = {h_j : a in S_j}``.  Tokens already known
    to share their row of every ``D in K`` (a class ``T``, contexts
    ``C_T = union of C_a``) act as one.  Hence:

    * if ``cone(C_T) = R^d``, then ``w_b = w_T`` for every ``b``: every row of
      ``D`` is the same, every margin row is zero on ``K``, and none is
      separable;
    * if ``cone(C_T u -C_b) = R^d``, then ``w_b = w_T`` (``u = w_T - w_b`` is
      ``>= 0`` on ``C_T`` and ``<= 0`` on ``C_b``), and ``b`` joins the class.

    The class starts at the most frequent token of the supports and takes the
    next ones in order of frequency, each test one :func:`positively_spans`.
    Real text with ``d << m`` is proven in a few tests (the contexts of two
    frequent words already span); no linear program over the ``m V`` rows is
    needed.

    Parameters
    ----------
    contexts : ndarray of shape (m, d)
    support : ndarray or sparse matrix of shape (m, V), bool
    max_tests : int, default=24
        The number of cone tests before giving up.
    robustness : float, optional
        Passed to every :func:`positively_spans` (``None``: exact cones).

    Returns
    -------
    bool
        True: proven, no row is separable.  False: not proven (some row may be).
    """
    H = contexts
    support = sp.csc_matrix(support, dtype=bool)
    support.eliminate_zeros()

    def contexts_of(b):
        return support.indices[support.indptr[b]:support.indptr[b + 1]]

    order = np.argsort(-np.diff(support.indptr), kind="stable")
    in_class = np.zeros(H.shape[0], dtype=bool)
    in_class[contexts_of(order[0])] = True
    tests = 1
    if positively_spans(H[in_class], robustness=robustness):
        return True
    for b in order[1:]:
        if tests >= max_tests:
            return False
        rows = contexts_of(b)
        if in_class[rows].all():  # nothing to add to the class
            continue
        tests += 2
        if positively_spans(np.vstack([H[in_class], -H[rows]]), robustness=robustness):
            in_class[rows] = True
            if positively_spans(H[in_class], robustness=robustness):
                return True
    return False


def solve_ntp_svm(contexts, support, *, method="auto", merge_exchangeable=True, norm="fro",
                  **kwargs):
    """Solve the NTP-SVM through the max-margin core, merging exchangeable tokens.

    Tokens with identical support columns share their row of ``W^mm`` (see
    :func:`exchangeable_tokens`).  With ``n_c`` tokens in class ``c`` and the
    common row ``u_c``, ``||W||^2 = sum_c n_c ||u_c||^2``, so the program in
    ``U'`` with rows ``u'_c = sqrt(n_c) u_c`` is an NTP-SVM over the classes
    with scores ``S[j, c] = u'_c^T h_j / sqrt(n_c)`` and the same constraints
    (duplicates dropped): an exact reduction from ``V`` to ``n_classes``
    positions per context.  The solution and the multipliers are mapped back
    to the program of :func:`ntp_svm_problem` (a class's dual table entry is
    shared equally by its tokens), so the returned result is that program's.

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    support : array-like or sparse matrix of shape (m, V), bool
    method : str, default="auto"
        Max-margin core method.
    merge_exchangeable : bool, default=True
        Solve the reduced program when some tokens are exchangeable (Frobenius
        norm only: the reduction's row scaling is that norm's).
    norm : str or tuple, default="fro"
        The norm minimized (:class:`~skntp.svm.MaxMarginProblem`).
    **kwargs :
        ``tol``, ``max_iter``, ``verbose``, ``backend``, ``device``, ``dtype``
        of :func:`~skntp.svm.solve_max_margin`.

    Returns
    -------
    problem : MaxMarginProblem
        The full program (``V`` positions).
    result : MaxMarginResult
        Its solution: ``primal`` of shape (V, d), ``dual`` per constraint.

    Raises
    ------
    NotSeparableError
        Before any solve when the loss's stationary point proves that no margin row
        is separable (``m > d`` only, :func:`~skntp.svm.no_row_is_separable`), or
        when a method's multipliers certify the program infeasible; either way a
        Farkas certificate that the dispatcher has checked (``exc.result``).
    UndecidedError
        When every method tried called the program infeasible without a
        certificate.
    """
    problem = ntp_svm_problem(contexts, support, norm=norm)
    contexts = problem.scores.queries
    if norm != "fro":
        return problem, solve_max_margin(problem, method=method, **kwargs)
    _, support = _check_contexts(contexts, support)  # (sparse: duplicates summed)
    support = (sp.csr_matrix(support, dtype=bool) if sp.issparse(support)
               else np.asarray(support, dtype=bool))
    if merge_exchangeable:
        representative, token_class, counts = exchangeable_tokens(support)
    if not merge_exchangeable or counts.size == support.shape[1]:
        return problem, solve_max_margin(problem, method=method, **kwargs)
    reduced = ntp_svm_problem(contexts, support[:, representative])
    scale = 1.0 / np.sqrt(counts)
    reduced.scores = BilinearScores(contexts, None, n_outputs=counts.size, output_scale=scale)
    c, full = reduced.constraints, problem.constraints
    size = support.shape[0] * counts.size

    def full_dual(dual):
        # the reduced program's table -> the full one: C[j, v] = C'[j, c(v)] / n_c (a
        # Farkas table stays one: its rows still sum to zero and its image vanishes)
        table = (np.bincount(c.block * counts.size + c.pos, dual, minlength=size)
                 - np.bincount(c.block * counts.size + c.ref, dual, minlength=size))
        table = (table.reshape(-1, counts.size) / counts)[:, token_class]
        # equalities (z, anchor) carry C[j, z]; inequalities (anchor, v) carry -C[j, v]
        return np.where(full.equality, table[full.block, full.pos],
                        -table[full.block, full.ref])

    try:
        res = solve_max_margin(reduced, method=method, **kwargs)
    except NotSeparableError as exc:
        if exc.result is not None:
            exc.result.primal = np.zeros(problem.shape)
            exc.result.dual = full_dual(exc.result.dual)
        raise
    primal = (res.primal * scale[:, None])[token_class]
    # the reduction is exact: ||W|| = ||U'||, and the reduced program's bound is the
    # full program's
    return problem, MaxMarginResult(
        primal=primal, dual=full_dual(res.dual), method=res.method, status=res.status,
        n_iter=res.n_iter, gap=res.gap, max_violation=res.max_violation,
        objective=res.objective, bound=res.bound,
    )


def ntp_svm(contexts, support, *, method="auto", tol=None, max_iter=100_000,
            return_result=False, norm="fro", **backend):
    """Solve the NTP-SVM: ``W^mm = argmin ||W||_F`` s.t. (4a) and (4b).

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    support : array-like of shape (m, V), bool
    method : {"auto", "cvxpy", ...}, default="auto"
        Max-margin core method (see :func:`skntp.svm.solve_max_margin`).
    tol, max_iter :
        The certificate's tolerance (``None``: the norm's default, see
        :func:`~skntp.svm.solve_max_margin`) and the iteration cap.
    return_result : bool, default=False
        Also return the :class:`MaxMarginResult` (duals, gap, iterations).
    norm : {"fro", "spectral", "max", "l1"} or ("lp", p), default="fro"
        The norm minimized under the same constraints.  ``"max"`` (the limit of
        sign descent) and ``"l1"``: a linear program, the max norm by the
        structured interior-point method ``"lp-ipm"`` and what it does not
        certify, like the l1 norm, by HiGHS; ``"spectral"``: the barrier method;
        ``("lp", p)``: Clarabel, then the barrier method
        (:data:`skntp.svm.solvers.AUTO_ORDER`).
    **backend :
        ``backend``, ``device``, ``dtype`` for iterative methods.

    Returns
    -------
    W_mm : ndarray of shape (V, d)
        The solution with margin 1 (not normalized); ``1 / ||W_mm||`` is the
        NTP-margin.

    Raises
    ------
    NotSeparableError
        If the data are not NTP-separable.
    """
    _, result = solve_ntp_svm(contexts, support, method=method, norm=norm, tol=tol,
                              max_iter=max_iter, **backend)
    return (result.primal, result) if return_result else result.primal


def log_odds_problem(contexts, next_token_probs):
    """Equalities (3): ``(e_z - e_{z_j})^T W h_j = log(p_{j,z} / p_{j,z_j})``.

    ``next_token_probs`` may be a sparse matrix: the equations are built from
    its nonzeros, one per in-support token, without an ``(m, V)`` array.
    """
    contexts, probs = _check_contexts(contexts, next_token_probs, "next_token_probs")
    if sp.issparse(probs):
        probs = probs.astype(float)
        probs.eliminate_zeros()
        data = probs.data
    else:
        probs = np.asarray(probs, dtype=float)
        data = probs
    if np.any(data < 0) or not np.all(np.isfinite(data)):
        raise ValueError("next_token_probs must be finite and non-negative.")
    sums = np.asarray(probs.sum(axis=1)).ravel()
    if np.any(sums <= 0):
        raise ValueError("every row of next_token_probs needs a positive entry.")
    m, V = probs.shape
    anchor = _anchors(probs)
    if sp.issparse(probs):
        j = np.repeat(np.arange(m), np.diff(probs.indptr))
        z = probs.indices.astype(np.int64)
        p = probs.data
        p_anchor = np.asarray(probs[np.arange(m), anchor]).ravel()[j]
    else:
        j, z = np.nonzero(probs > 0)
        p = probs[j, z]
        p_anchor = probs[j, anchor[j]]
    keep = z != anchor[j]
    j, z = j[keep], z[keep]
    rhs = np.log(p[keep]) - np.log(p_anchor[keep])  # the row sums cancel
    return MaxMarginProblem(
        BilinearScores(contexts, None, n_outputs=V),
        Constraints(j, z, anchor[j], rhs, np.ones(j.size, bool)),
        name="NTP log-odds equations",
        infeasible_message="data are not NTP_H-compatible (Def. 3.1)",
    )


def finite_component(contexts, next_token_probs, *, return_residual=False):
    """The finite component ``W*``: the solution in ``F`` of eq. (3).

    ``W*`` is the minimum-norm solution of the log-odds equations
    ``(e_z - e_z')^T W h_j = log(p_{j,z} / p_{j,z'})`` (Thrampoulidis 2024,
    Def. 3.1 and Sec. 4 (i)); GD iterates projected onto ``F`` converge to it
    (Thm. 4.1).  If the equations have no solution (not NTP_H-compatible)
    the minimum-norm least-squares solution is returned.

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    next_token_probs : array-like or sparse matrix of shape (m, V)
        Rows are normalized to sum to one.
    return_residual : bool, default=False
        Also return the relative residual of the equations (~0 when compatible).

    Returns
    -------
    W_star : ndarray of shape (V, d)
    """
    w, res = solve_min_norm(log_odds_problem(contexts, next_token_probs))
    return (w, res) if return_residual else w
