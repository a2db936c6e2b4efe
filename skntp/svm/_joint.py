"""The programs of the joint head/attention model (Tarzanagh et al. 2023, Sec. 3).

For the attention model ``f(X) = v^T X^T softmax(X W^T p)`` trained jointly in
``(v, p)`` with the logistic loss, the limit directions are

* the **head SVM** (``SVM`` of Sec. 3): ``v^mm = argmin ||v||`` s.t.
  ``Y_i v^T r_i >= 1`` with ``r_i = x_{i alpha_i}`` the selected tokens; a
  binary hard-margin SVM without bias, whose label margin is ``1/||v^mm||``;
* the **relaxed ATT-SVM** (eq. (10)): ``p^relax = argmin ||p||`` s.t.
  ``p^T (k_{i alpha_i} - k_it) >= 1`` for the support vectors ``i in S`` of the
  head SVM and ``>= 0`` for the others (``i not in S``), ``t != alpha_i``.  When
  every selected token is a support vector it is the ATT-SVM ``p^mm(alpha)``
  (Thm. 5); otherwise Thm. 6 says ``p`` converges to ``p^relax``.

Both are instances of the shared max-margin core: the head SVM is the
:class:`~skntp.svm.KeyScores` map with one position per input and keys
``Y_i r_i`` compared with 0; the relaxed ATT-SVM is the attention score map
with anchored constraints.  :func:`joint_svm` chooses the selected tokens
``alpha`` by maximizing the label margin (Sec. 3.1: optimal tokens are "those
that maximize the downstream label margin when selected") and returns all
directions.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ._att_svm import att_svm_problem
from ._problem import (
    Constraints,
    KeyScores,
    MaxMarginProblem,
    NotSeparableError,
    UndecidedError,
    real_array,
)
from ._solve import solve_max_margin

__all__ = [
    "JointSVMResult",
    "head_svm",
    "head_svm_problem",
    "joint_svm",
    "relaxed_att_svm",
    "relaxed_att_svm_problem",
    "support_vectors",
]

#: Largest number of token choices ``prod_i T_i`` that :func:`joint_svm`
#: enumerates exhaustively by default.
MAX_ENUMERATION = 256


def _check_tokens(tokens, y):
    tokens = real_array(tokens, "tokens")
    y = np.asarray(y, dtype=float).ravel()
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be 2-D (n, d), got shape {tokens.shape}.")
    if y.shape != (tokens.shape[0],):
        raise ValueError(
            f"y must have shape ({tokens.shape[0]},), got {y.shape}."
        )
    if not np.all(np.isin(y, (-1.0, 1.0))):
        raise ValueError("y must contain labels -1 and +1 only.")
    if not np.all(np.isfinite(tokens)):
        raise ValueError("tokens contain NaN or infinity.")
    return tokens, y


def head_svm_problem(tokens, y, *, norm="fro"):
    """Build the head SVM (Sec. 3, program (SVM)).

    ``min 1/2 ||v||^2`` s.t. ``Y_i v^T r_i >= 1``: the :class:`KeyScores` map
    with one position per input and key ``Y_i r_i``, each score compared
    with 0 (``ref = -1``).

    Parameters
    ----------
    tokens : array-like of shape (n, d)
        The selected tokens ``r_i = x_{i alpha_i}``.
    y : array-like of shape (n,)
        Labels in {-1, +1}.
    norm : {"fro", "max", "l1"} or ("lp", p), default="fro"
        The norm of ``v`` minimized (:class:`~skntp.svm.MaxMarginProblem`).

    Returns
    -------
    MaxMarginProblem
    """
    tokens, y = _check_tokens(tokens, y)
    n = tokens.shape[0]
    keys = (y[:, None] * tokens)[:, None, :]
    cons = Constraints(np.arange(n), np.zeros(n), -np.ones(n), np.ones(n),
                       np.zeros(n, dtype=bool))
    return MaxMarginProblem(
        KeyScores(keys),
        cons,
        name="head SVM",
        infeasible_message="the selected tokens are not linearly separable by a head "
        "through the origin (no v with Y_i v^T r_i >= 1)",
        norm=norm,
    )


def head_svm(tokens, y, *, method="auto", tol=None, max_iter=100_000,
             return_result=False, norm="fro", **backend):
    """Solve the head SVM: ``v^mm = argmin ||v||`` s.t. ``Y_i v^T r_i >= 1``.

    The binary hard-margin SVM without bias of Sec. 3 (program (SVM)); its
    label margin is ``1 / ||v^mm||``.  It equals the limit of
    ``LinearSVC(loss="hinge", fit_intercept=False, C)`` as ``C -> inf``.

    Parameters
    ----------
    tokens : array-like of shape (n, d)
    y : array-like of shape (n,), labels in {-1, +1}
    method : str, default="auto"
        Max-margin core method (see :func:`skntp.svm.solve_max_margin`).
    tol, max_iter :
        The certificate's tolerance (``None``: the norm's default, see
        :func:`~skntp.svm.solve_max_margin`) and the iteration cap.
    return_result : bool, default=False
        Also return the :class:`~skntp.svm.MaxMarginResult`.
    norm : {"fro", "max", "l1"} or ("lp", p), default="fro"
        The norm of ``v`` minimized under the same constraints.
    **backend :
        ``backend``, ``device``, ``dtype`` of iterative methods.

    Returns
    -------
    v_mm : ndarray of shape (d,)
        The solution with margin 1 (not normalized).

    Raises
    ------
    NotSeparableError
        If no head through the origin separates the tokens.
    """
    problem = head_svm_problem(tokens, y, norm=norm)
    res = solve_max_margin(problem, method=method, tol=tol, max_iter=max_iter, **backend)
    return (res.primal, res) if return_result else res.primal


def support_vectors(tokens, y, v_mm, *, tol=1e-6):
    """Support vectors of the head SVM: inputs whose constraint is active.

    Parameters
    ----------
    tokens : array-like of shape (n, d)
    y : array-like of shape (n,)
    v_mm : array-like of shape (d,)
        The head SVM solution (margin 1, not normalized).
    tol : float, default=1e-6
        ``i`` is a support vector when ``Y_i v_mm^T r_i <= 1 + tol``.

    Returns
    -------
    support : ndarray of shape (n,), bool
        The set ``S`` of Sec. 3.2.
    """
    tokens, y = _check_tokens(tokens, y)
    margins = y * (tokens @ np.asarray(v_mm, dtype=float))
    return margins <= 1.0 + tol


def relaxed_att_svm_problem(keys, selected, support=None, *, mask=None, norm="fro"):
    """Build the relaxed ATT-SVM (eq. (10)); ``support=None`` gives the ATT-SVM.

    Constraints ``p^T (k_{i alpha_i} - k_it) >= 1`` for ``i`` in ``support``
    and ``>= 0`` for the other inputs, for every real token ``t != alpha_i``;
    built by :func:`skntp.svm.att_svm_problem` with ``relaxed = ~support``.

    Parameters
    ----------
    keys : array-like of shape (n, T, k)
        Keys ``K_i = X_i W^T`` (padded rows are ignored through ``mask``).
    selected : array-like of shape (n,), int
        Selected token indices ``alpha_i``.
    support : array-like of shape (n,), bool, optional
        The support set ``S`` of the head SVM; ``None`` means every input
        (the ATT-SVM of Sec. 2, whose solution is ``p^mm(alpha)``).
    mask : array-like of shape (n, T), bool, optional
        Real tokens (all by default).
    norm : {"fro", "max", "l1"} or ("lp", p), default="fro"
        The norm of ``p`` minimized (:class:`~skntp.svm.MaxMarginProblem`).

    Returns
    -------
    MaxMarginProblem
    """
    relaxed = None
    if support is not None:
        support = np.asarray(support, dtype=bool)
        relaxed = ~support
    return att_svm_problem(keys, np.asarray(selected).astype(np.int64), relaxed,
                           mask=mask, norm=norm)


def relaxed_att_svm(keys, selected, support=None, *, mask=None, method="auto",
                    tol=None, max_iter=100_000, return_result=False, norm="fro",
                    **backend):
    """Solve the relaxed ATT-SVM (eq. (10)): ``p^relax``.

    With ``support=None`` (or every input a support vector) this is the
    ATT-SVM ``p^mm(alpha)`` of Sec. 2.  See :func:`relaxed_att_svm_problem`
    (``norm=``: the norm of ``p`` minimized, ``"fro"`` by default).

    Returns
    -------
    p : ndarray of shape (d,)
        The solution (margin 1 on the support vectors, not normalized).

    Raises
    ------
    NotSeparableError
        If the program is infeasible.
    """
    problem = relaxed_att_svm_problem(keys, selected, support, mask=mask, norm=norm)
    res = solve_max_margin(problem, method=method, tol=tol, max_iter=max_iter, **backend)
    return (res.primal, res) if return_result else res.primal


@dataclass
class JointSVMResult:
    """Limit directions of the joint model (Thms. 5 and 6).

    Attributes
    ----------
    selected : ndarray of shape (n,), int
        Selected tokens ``alpha``.
    head : ndarray of shape (d,)
        ``v^mm`` (margin 1, not normalized).
    label_margin : float
        ``1 / ||v^mm||``.
    support : ndarray of shape (n,), bool
        Support vectors ``S`` of the head SVM.
    relaxed : ndarray of shape (d_k,)
        ``p^relax`` of eq. (10).
    att_svm : ndarray of shape (d_k,)
        ``p^mm(alpha)`` of (ATT-SVM).
    exhaustive : bool
        ``alpha`` was found by enumerating every choice (``False``: by the
        alternating heuristic of :func:`joint_svm`).
    n_candidates : int
        Token choices whose head SVM was solved.
    """

    selected: np.ndarray
    head: np.ndarray
    label_margin: float
    support: np.ndarray
    relaxed: np.ndarray
    att_svm: np.ndarray
    exhaustive: bool
    n_candidates: int


def _label_margin(tokens, y, solve):
    try:
        v = solve(tokens, y)
    except NotSeparableError:
        return None, 0.0
    return v, 1.0 / float(np.linalg.norm(v))  # v != 0: it meets Y_i v^T r_i >= 1


def joint_svm(X, y, keys=None, *, mask=None, max_enumeration=MAX_ENUMERATION,
              n_starts=32, support_tol=1e-6, method="auto", tol=None, max_iter=100_000, **backend):
    """Choose the selected tokens and solve both programs of the joint model.

    The selected tokens ``alpha`` maximize the *label margin*
    ``1/||v^mm(alpha)||`` of the head SVM (Sec. 3.1, Assumption C) among
    the choices that attention can select, i.e. whose ATT-SVM is feasible
    (Thm. 5 assumes it):

    * **exhaustively** when the number of choices ``prod_i T_i`` is at most
      ``max_enumeration``: choices are ranked by label margin (ties: first in
      lexicographic order of ``alpha``) and the first one with a feasible
      ATT-SVM is kept;
    * otherwise by **alternating maximization** (a heuristic): from a
      starting head ``v``, repeat ``alpha_i = argmax_t Y_i v^T x_it`` (the best
      token of every input for the current head) and ``v = v^mm(alpha)``
      until ``alpha`` repeats.  Each round cannot decrease the label margin
      (``v^mm(alpha)`` stays feasible for the new choice with the same norm),
      so it stops at a choice that no head improves by itself, not
      necessarily at the global maximum.  It runs from ``1 + n_starts`` heads:
      the class-mean head ``sum_i Y_i mean_t x_it`` and ``Y_i x_it`` for the
      ``n_starts`` tokens of largest norm; the fixed points are ranked by label
      margin and the first with a feasible ATT-SVM is kept.

    Then ``S`` is the support set of ``v^mm(alpha)``, ``p^relax`` solves
    eq. (10) and ``p^mm`` the ATT-SVM.

    Parameters
    ----------
    X : array-like of shape (n, T, d)
        Token vectors (padded; see ``mask``).
    y : array-like of shape (n,)
        Labels in {-1, +1}.
    keys : array-like of shape (n, T, d_k), optional
        Keys ``K_i = X_i W^T``; ``None`` means ``W = I`` (keys are ``X``).
    mask : array-like of shape (n, T), bool, optional
        Real tokens.
    max_enumeration : int, default=256
        Largest number of choices enumerated exhaustively.
    n_starts : int, default=32
        Extra starting heads of the heuristic.
    support_tol : float, default=1e-6
        Tolerance of :func:`support_vectors`.
    method, tol, max_iter, **backend :
        Passed to :func:`skntp.svm.solve_max_margin`.

    Returns
    -------
    JointSVMResult

    Raises
    ------
    NotSeparableError
        If no choice of one token per input is both separable by a head
        through the origin and selectable by attention: the joint problem is
        not separable (the loss has no direction along which it vanishes
        while attention selects one token per input).  Only from the exhaustive
        search, each choice's programs certified infeasible.
    UndecidedError
        If the heuristic finds no such choice (it does not search them all, so
        the problem may still be separable), or a program is undecided.
    """
    X = np.asarray(X, dtype=float)
    if X.ndim != 3:
        raise ValueError(f"X must be 3-D (n, T, d), got shape {X.shape}.")
    n, T, _ = X.shape
    if n == 0 or T == 0:
        raise ValueError(f"X must hold at least one input of one token, got shape {X.shape}.")
    keys = X if keys is None else np.asarray(keys, dtype=float)
    mask = np.ones((n, T), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    y = np.asarray(y, dtype=float).ravel()
    kw = dict(method=method, tol=tol, max_iter=max_iter, **backend)
    rows = np.arange(n)

    def solve_head(tokens, labels):
        return head_svm(tokens, labels, **kw)

    def att_feasible(alpha):
        try:
            return relaxed_att_svm(keys, alpha, mask=mask, **kw)
        except NotSeparableError:
            return None

    lengths = mask.sum(axis=1)
    n_choices = float(np.prod(lengths.astype(float)))
    chosen = None
    if n_choices <= max_enumeration:
        exhaustive = True
        choices = [np.flatnonzero(m) for m in mask]
        scored = []
        for alpha in itertools.product(*choices):
            alpha = np.asarray(alpha, dtype=np.int64)
            v, margin = _label_margin(X[rows, alpha], y, solve_head)
            if v is not None:
                scored.append((-margin, len(scored), alpha, v))
        n_candidates = int(n_choices)
        scored.sort(key=lambda s: (s[0], s[1]))
        for neg_margin, _, alpha, v in scored:
            p_mm = att_feasible(alpha)
            if p_mm is not None:
                chosen = (alpha, v, -neg_margin, p_mm)
                break
        if chosen is None:
            raise NotSeparableError(
                "joint SVM is infeasible: no choice of one token per input is both "
                "linearly separable by a head through the origin (head SVM) and "
                f"selectable by attention (ATT-SVM), among all {n_candidates} choices; "
                "the joint problem is not separable."
            )
    else:
        exhaustive = False
        cache = {}

        def margin_of(alpha):
            key = alpha.tobytes()
            if key not in cache:
                cache[key] = _label_margin(X[rows, alpha], y, solve_head)
            return cache[key]

        def ascend(v):
            """Alternate alpha <- best tokens of v, v <- v^mm(alpha) to a fixed point."""
            best = None
            for _ in range(100):
                s = np.where(mask, y[:, None] * (X @ v), -np.inf)
                alpha = np.argmax(s, axis=1)
                if best is not None and np.array_equal(alpha, best[0]):
                    break
                v_new, margin = margin_of(alpha)
                if v_new is None or (best is not None and margin <= best[2]):
                    break
                best, v = (alpha, v_new, margin), v_new
            return best

        masked = np.where(mask[..., None], X, 0.0)
        starts = [(y[:, None] * (masked.sum(axis=1) / lengths[:, None])).sum(axis=0)]
        norms = np.where(mask, np.linalg.norm(X, axis=2), -np.inf)
        order = np.argsort(-norms, axis=None, kind="stable")[:n_starts]
        for i, t in zip(*np.unravel_index(order, mask.shape)):
            if mask[i, t]:
                starts.append(y[i] * X[i, t])
        finals = {}
        for v0 in starts:
            found = ascend(v0)
            if found is not None:
                finals[found[0].tobytes()] = found
        n_candidates = len(cache)
        for alpha, v, margin in sorted(finals.values(), key=lambda f: -f[2]):
            p_mm = att_feasible(alpha)
            if p_mm is not None:
                chosen = (alpha, v, margin, p_mm)
                break
        if chosen is None:
            # a search that is not exhaustive proves nothing: some choice it did not
            # reach may be both separable and selectable
            raise UndecidedError(
                "joint SVM: undecided. The alternating heuristic (used above "
                f"max_enumeration={max_enumeration} token choices) found no choice of one "
                "token per input that is both separable by a head through the origin "
                "(head SVM) and selectable by attention (ATT-SVM), from "
                f"{len(starts)} starting heads; it does not search every choice, so the "
                "joint problem may still be separable. Raise max_enumeration to "
                f"{n_choices:.0f} to search exhaustively, or pass more starts (n_starts)."
            )
    alpha, v, margin, p_mm = chosen
    support = support_vectors(X[rows, alpha], y, v, tol=support_tol)
    p_relax = p_mm if support.all() else relaxed_att_svm(keys, alpha, support, mask=mask,
                                                         **kw)
    return JointSVMResult(selected=alpha, head=v, label_margin=float(margin),
                          support=support, relaxed=p_relax, att_svm=p_mm,
                          exhaustive=exhaustive, n_candidates=n_candidates)
