"""The key-query model of "Transformers as Support Vector Machines" (Tarzanagh,
Li, Thrampoulidis, Oymak 2023): :class:`KeyQuerySelector`.

Every input has its own query ``z_i``; the logits are ``z_i^T W x_it`` and the
key-query matrix ``W`` is trained directly or as factors ``W = Q K^T``.  Gradient
descent converges in direction to the Frobenius-norm ATT-SVM (W-SVM, Thm. 1), the
factors to the nuclear-norm one (KQ-SVM, Thm. 2); with a nonlinear value head
(Sec. 5) ``W -> W^fin + R W^dir``.  The selection, the head and the diagnosis are
those of :class:`~skntp.AttentionSelector` (:mod:`skntp.attention`); the risk is
:class:`skntp.losses.key_query.KeyQueryProblem`.
"""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from ._backend import check_score_scale, lifted_keys, softmax
from ._base import (
    BACKEND_CONSTRAINTS,
    TRAINING_CONSTRAINTS,
    Limits,
    Training,
    cosine,
    default_radii,
    descent_parameters_doc,
    norm_name,
    unit,
)
from ._optim import SCALE_FREE
from ._sequences import check_attention_input, checked_parameter
from ._warnings import user_stacklevel
from .attention import (
    _LOSS,
    _fixed_query,
    _head_vector,
    _selection,
    _TokenSelector,
)
from .losses.attention import attention_weights
from .losses.key_query import ACTIVATIONS, KeyQueryProblem, head_activation
from .metrics import numerical_rank
from .svm import (
    Constraints,
    KeyScores,
    MaxMarginProblem,
    NotSeparableError,
    QueryKeyScores,
    att_svm_w,
    norm_value,
    solve_max_margin,
    solve_min_norm,
)
from .svm._problem import check_program_size

__all__ = ["KeyQuerySelector"]


def _input_queries(query_index, X, mask):
    """``(Z, mask)``: the query ``z_i`` of every input and the tokens it attends to.

    ``query_index`` an int ``q``: ``z_i = x_{i q}`` (self-attention; negative
    ``q`` counts from the end of each input's real tokens).  ``"extra-row"``:
    the last real row of every input is its query (cross-attention) and gets
    no attention.
    """
    n = X.shape[0]
    lengths = mask.sum(axis=1)
    if isinstance(query_index, str):  # "extra-row"
        if (lengths < 2).any():
            raise ValueError(
                "query_index='extra-row' reads the last row of every input as its query: "
                f"inputs {np.flatnonzero(lengths < 2)[:10].tolist()} have fewer than 2 rows "
                "(a token and the query).")
        idx = lengths - 1
        mask = mask.copy()
        mask[np.arange(n), idx] = False
    else:
        q = int(query_index)
        idx = q if q >= 0 else lengths + q
        idx = np.broadcast_to(idx, (n,))
        bad = np.flatnonzero((idx < 0) | (idx >= lengths))
        if bad.size:
            raise ValueError(
                f"query_index={q} is not a token of inputs {bad[:10].tolist()} (of "
                f"{lengths[bad[:10]].tolist()} tokens).")
    return X[np.arange(n), idx], mask


def _value_matrix(value, d):
    """The value matrix ``V`` of shape ``(d_v, d)``, or ``None``."""
    if value is None:
        return None
    return checked_parameter(value, "value", (None, d), f"(d_v, {d}) (d the token dimension)")


def _value_head_vector(head, d_v):
    """The head ``v`` of a value head: given (shape ``(d_v,)``), or ``1 / sqrt(d_v)``."""
    if head is None:
        return np.full(d_v, 1.0 / np.sqrt(d_v))
    return checked_parameter(head, "head", (d_v,), f"({d_v},) (the rows of value)",
                             ravel=True)


def _kept_token_limit(est, data, q, kept, norm):
    """``(W^fin, W^dir)`` (flattened) of the kept tokens ``O_i`` of a nonlinear head.

    ``W^fin``: the minimum-norm solution of ``z_i^T W (x_o - x_o') = log(s_o / s_o')``
    for kept ``o, o'`` (Frobenius norm); ``W^dir``: ``min ||W||`` (``norm``) s.t.
    ``z_i^T W (x_o - x_o') = 0`` and ``z_i^T W (x_o - x_t) >= 1`` for kept ``o`` and
    the other tokens ``t``, ``None`` (with a warning) when infeasible.
    """
    keys, mask = data["keys"], data["mask"]
    T = keys.shape[1]
    scores = keys @ q  # log(s_o / s_o') = scores_o - scores_o'
    first = np.argmax(kept, axis=1)
    i_eq, o_eq = np.nonzero(kept & (np.arange(T)[None, :] != first[:, None]))
    # every kept token o against every other real token t of its input
    i_ge, o_ge, t_ge = np.nonzero(kept[:, :, None] & (mask & ~kept)[:, None, :])
    equal = np.ones(i_eq.size, dtype=bool)
    fin = np.zeros(keys.shape[2])
    if i_eq.size:
        log_odds = scores[i_eq, o_eq] - scores[i_eq, first[i_eq]]
        fin, _ = solve_min_norm(MaxMarginProblem(
            KeyScores(keys), Constraints(i_eq, o_eq, first[i_eq], log_odds, equal),
            name="the log-odds of the kept tokens"))
    constraints = Constraints.concatenate([
        Constraints(i_eq, o_eq, first[i_eq], np.zeros(i_eq.size), equal),
        Constraints(i_ge, o_ge, t_ge, np.ones(i_ge.size), np.zeros(i_ge.size, dtype=bool))])
    problem = MaxMarginProblem(
        KeyScores(keys) if norm == "fro" else QueryKeyScores(data["X"], data["Z"]),
        constraints, name="ATT-SVM of the kept tokens", norm=norm,
        infeasible_message="the kept tokens are not separable from the others by a "
                           "common key-query matrix W")
    res, _ = est._solve_limit(
        "ATT-SVM of the kept tokens",
        lambda cb: solve_max_margin(problem, method=est.svm_method, callback=cb),
        "mm_direction_ is None.", required=False)
    return np.ravel(fin), None if res is None else np.ravel(res.primal)


def _matrix_limit(est, data, selected, norm):
    """``(W, failure)``: the key-query ATT-SVM solution (margin 1) in ``norm``, or
    ``None`` and why: certified infeasible (:class:`~skntp.svm.NotSeparableError`,
    which the selection's diagnosis reports), not certified or too large for memory
    (with a warning)."""
    W, failure = est._solve_limit(
        f"key-query ATT-SVM of the selected tokens ({norm_name(norm)} norm)",
        lambda cb: att_svm_w(data["X"], data["Z"], selected, mask=data["mask"], norm=norm,
                             method=est._svm_method(norm), callback=cb),
        f"The {norm}-norm limit is None.", required=False, quiet=(NotSeparableError,))
    return (W if W is not None and W.any() else None), failure  # zero: one token per input


def _diagnosis_input(W, failure):
    """What :func:`~skntp.attention.diagnose_selection` gets of :func:`_matrix_limit`'s
    answer: the solution, ``"infeasible"`` (certified, or ``W = 0``: one token per
    input) or ``"undecided"`` (not certified, or too large)."""
    if W is not None:
        return W.ravel()
    undecided = failure is not None and not isinstance(failure, NotSeparableError)
    return "undecided" if undecided else "infeasible"


def _factors(W, rank):
    """``(Q, K)`` with ``Q K^T`` the best rank-``rank`` approximation of ``W``, balanced."""
    U, sv, Vt = np.linalg.svd(W, full_matrices=False)
    r = min(rank, sv.size)
    root = np.sqrt(sv[:r])
    Q, K = U[:, :r] * root, Vt[:r].T * root
    if r < rank:  # pad with zero columns to the requested rank
        Q = np.hstack([Q, np.zeros((Q.shape[0], rank - r))])
        K = np.hstack([K, np.zeros((K.shape[0], rank - r))])
    return Q, K


def _check_options(est):
    """Refuse the combinations of options that have no model."""
    if est._has_value_head() and est.solver == "svm":
        raise ValueError("solver='svm' is not available with a value matrix or a "
                         "nonlinear head: its limit W^fin + R W^dir depends on the "
                         "tokens the trained attention keeps; use a gradient solver.")
    if est.rank is not None and est.parameterization != "KQ":
        raise ValueError("rank is the inner dimension of W = Q K^T: it needs "
                         "parameterization='KQ'.")


def _add_queries(data, query_index, fixed_query, rank):
    """Add the queries ``Z`` (``z_i``), the lifted keys ``vec(z_i x_it^T)``, the fixed
    query ``u`` (``None`` with per-input queries) and the rank of the factors."""
    Xp, W = data["X"], data["W"]
    n, T, d = Xp.shape
    if query_index is None:
        data["u"] = _fixed_query(fixed_query, W.shape[0], data["rng"], owner="query_index=None")
        Z = np.tile(data["u"], (n, 1))
    else:
        data["u"] = None
        Z, data["mask"] = _input_queries(query_index, Xp, data["mask"])
        if W.shape[0] != d:
            raise ValueError(
                f"with per-input queries z_i (rows of X, dimension {d}) the key-query "
                f"matrix must be ({d}, {d}), got key_query of shape {W.shape}.")
    k = Z.shape[1]
    top_z, top_x = float(np.abs(Z).max(initial=0.0)), float(np.abs(Xp).max(initial=0.0))
    if top_z > 0 and top_x > 0:  # (zero data: refused by name where it is fitted)
        check_score_scale(top_z * top_x, f"the queries and the tokens have entries of "
                                         f"magnitude {top_z:.3g} and {top_x:.3g}")
    check_program_size("the lifted keys vec(z_i x_it^T)", n * T,
                       "use fewer or shorter inputs, or a smaller token dimension.",
                       bytes_per_constraint=8 * k * d * 3)
    data["Z"], data["keys"] = Z, lifted_keys(np, Xp, Z)
    data["rank"] = min(k, d) if rank is None else int(rank)


def _path(gmm, shape, factored, path_radii, rank):
    """``(radii, starts)`` of the regularization path of Thms. 1-2: ``||W||_F <= R``, or
    ``||Q||_F, ||K||_F <= sqrt(R)`` (at the optimum the factors are balanced, so that is
    ``||Q K^T||_* <= R``), every radius also started from the unit GMM direction."""
    if gmm is None:
        return default_radii(path_radii), None
    gmm_W = gmm.reshape(shape)
    size = norm_value(gmm_W, "nuclear" if factored else "fro")
    if path_radii is None:
        radii = np.geomspace(0.1, 30.0, 16) * size
        radii = np.sqrt(radii) if factored else radii
    else:
        radii = default_radii(path_radii)
    unit_W = gmm_W / size
    return radii, ((_factors(unit_W, rank) if factored else (unit_W,)),)


@descent_parameters_doc
class KeyQuerySelector(_TokenSelector):
    """Softmax attention with a trained key-query matrix, ``f(X_i) = v^T X_i^T S(X_i W^T z_i)``.

    The model of "Transformers as Support Vector Machines" (Tarzanagh, Li,
    Thrampoulidis, Oymak, 2023): every input has its own query ``z_i``
    (``query_index``), the logits are ``z_i^T W x_it`` (eq. (1), whose ``W`` is the
    transpose of this one), the head ``v`` (and the value matrix ``V``) is fixed
    and the key-query matrix ``W`` is trained on the risk (ERM), directly
    (``parameterization="W"``) or as factors ``W = Q K^T`` (``"KQ"``), or set to
    its max-margin limit (``solver="svm"``).  Gradient descent converges in
    direction to the Frobenius-norm ATT-SVM of the selected tokens (W-SVM,
    Thm. 1) or, with factors, to the nuclear-norm one (KQ-SVM, Thm. 2); with a
    nonlinear value head (Sec. 5) the attention may keep several tokens per input
    and ``W -> W^fin + R W^dir``.  After fitting, the estimator reports the
    selected tokens, their max-margin directions (matrices of shape ``(k, d)``),
    their SVM-neighbors and the diagnosis of Fig. 9, as
    :class:`~skntp.AttentionSelector` does for the query model.

    Parameters
    ----------
    head : array-like of shape (d,) or (d_v,), default=None
        The fixed head ``v``.  ``None`` uses the normalized difference of the
        class means of the mean-pooled tokens (``e_1`` if that is zero); with a
        value matrix or a nonlinear head, ``1 / sqrt(d_v)`` in every entry.
    key_query : array-like of shape (k, d), default=None
        The initial ``W(0)`` (``None``: see ``init``); ``(d, d)`` with per-input
        queries.

    loss : {"log_loss", "exponential", "correlation"}, default="log_loss"
        ``l(u) = log(1 + e^{-u})`` (the logistic loss), ``e^{-u}`` or ``-u``
        (Assumption A).
    solver : str, default="ngd"
        One of "gd", "ngd", "adam", "signgd", "nsd", "mirror", "nmirror",
        "regpath", "svm".
        ``"gd"``: gradient descent (3); ``"ngd"``: normalized GD (App. E);
        ``"adam"``: Adam;
        ``"regpath"``: the regularization path (2), ``argmin_{||W|| <= R}``
        over ``path_radii`` (``||W||_F <= R``, or ``||Q||_F, ||K||_F <= sqrt(R)``
        for ``"KQ"``, Thms. 1-2), each radius solved by the shared loop
        from two starts (the previous solution and ``R`` times the GMM
        direction) keeping the lower risk, since (2) is non-convex; ``"svm"``: the explicit limit
        ``W = svm_radius * gmm_direction_`` (Thm. 1/2; the best rank-``rank``
        approximation for ``"KQ"``).
        ``"signgd"``: sign descent; ``"nsd"``: normalized steepest descent in
        ``descent_norm``; ``"mirror"``, ``"nmirror"``: lp mirror descent with
        ``p = mirror_p``, plain or normalized.  Each fit records the norm that
        theory names for its solver's limit, ``limit_norm_``.
    init : None, "zeros", "random" or array-like, default=None
        The start of the gradient solvers.  ``parameterization="W"``: ``W(0)`` of
        shape (k, d) (``None``: ``key_query``; without ``key_query``, "random":
        ``N(0, 1/(3d))`` entries, the variance of ``torch.nn.Linear``'s default
        start).  ``parameterization="KQ"``: a pair ``(Q(0), K(0))``, "random" (both
        ``N(0, 1/(3d))``), or ``None`` (the balanced factors of ``key_query``,
        or "random" without it); "zeros" is a saddle point and is refused.
    fixed_query : None, "random" or array-like of shape (k,), default=None
        ``query_index=None`` only: the query ``u`` of every input (``None``:
        ``1/sqrt(k)`` in every entry; "random": a ``N(0, I/k)`` draw).
    query_index : int, "extra-row" or None, default=None
        Give every input its own query ``z_i``, so that the
        logits are ``z_i^T W x_it`` ("Transformers as Support Vector Machines",
        Tarzanagh, Li, Thrampoulidis, Oymak, 2023, eq. (1), whose ``W`` is the
        transpose of this one).  An int ``q``: ``z_i = x_{i q}``, the input's
        own token ``q`` (self-attention; negative counts from the end of each
        input).  ``"extra-row"``: the last row of every input is its query
        (cross-attention), not a token.  ``None``: one fixed query for all
        inputs (``fixed_query``).  The limits are key-query matrices:
        ``mm_direction_`` has shape ``(k, d)``.
    parameterization : {"W", "KQ"}, default="W"
        ``"W"``: train ``W`` itself; gradient descent
        converges in direction to the Frobenius-norm ATT-SVM (W-SVM, Thm. 1).
        ``"KQ"``: train the factors of ``W = Q K^T`` (``Q`` of shape
        ``(k, rank)``, ``K`` of shape ``(d, rank)``), normalized GD moving
        each factor along its own normalized gradient; the limit is the
        nuclear-norm ATT-SVM (KQ-SVM, Thm. 2), of lower rank.
    rank : int, default=None
        The inner dimension of ``W = Q K^T`` (``parameterization="KQ"``);
        ``None``: ``min(k, d)``.  The theorem needs it at least the rank of the
        nuclear-norm solution.
    value : array-like of shape (d_v, d), default=None
        A fixed value matrix ``V``, the head becomes
        ``f(X_i) = v^T sigma(V X_i^T softmax(X_i W^T z_i))`` (the nonlinear heads
        of "Transformers as Support Vector Machines", Sec. 5), ``head`` of
        shape ``(d_v,)`` (``None``: ``1 / sqrt(d_v)`` in every entry).  ``None``:
        ``V = I``.
    activation : {"identity", "relu"}, default="identity"
        ``sigma`` of the head, elementwise.  With a nonlinear head the attention
        may keep several tokens per input; the limit is ``W^fin + R W^dir`` (``finite_component_``,
        ``mm_radius_``, ``mm_direction_``).
    selection_threshold : float, default=1e-3
        With a value matrix or a nonlinear head: the attention above which a
        token counts as kept (``kept_tokens_``), as in the paper's code.
    lr : float, default=0.1
        Step size (the paper's normalized GD uses 0.1 in Fig. 1-4 and 1 in
        Fig. 9).
    %(descent_parameters)s
    max_iter : int, default=1000
        Iterations (inner iterations per radius for ``"regpath"``).
    tol : float, default=0.0
        Stop when the gradient norm falls to ``tol``.  On separable
        selections ``||W||`` diverges by design, so ``max_iter`` is the horizon.
    svm_radius : "auto" or float, default="auto"
        ``R`` of ``solver="svm"``.  "auto" takes ``R = (20 + log T)
        ||W^mm*||``: the max-margin constraints (logit gaps ``>= 1`` at
        ``W^mm*``) then put every non-optimal logit at least ``20 + log T``
        below the optimal one, so the attention on the optimal tokens is at
        least ``1 - e^{-20}`` in every input.
    path_radii : array-like, default=None
        Increasing radii of the regularization path.  ``None``: 16 radii from
        0.1 to 30 times ``||W^mm*||`` (the margin-1 GMM solution; its nuclear
        norm for ``"KQ"``, the factors' radii their square roots), i.e. up to
        logit gaps of about 30; beyond that the risk differs from its infimum
        by less than float64 resolves (``e^{-36}``), so larger radii
        cannot be solved meaningfully.  Without a GMM direction:
        ``geomspace(0.5, 200, 24)``.
    max_enumeration : int, default=4096
        With tied optimal tokens, (ATT-SVM') of App. D is solved by
        enumerating up to this many choices of one optimal token per input.
    compute_limits : bool, default=True
        Solve (ATT-SVM) for the optimal and the selected tokens during ``fit``
        (needed for ``solver="svm"``, the directions and the diagnosis).
    classes : array-like of 2 labels, default=None
        The two labels (sorted; the first is ``Y = -1``).  ``None`` takes
        them from ``y``, which must then hold both; naming them lets ``y``
        hold one label only (e.g. a single input, Thm. 2).
    svm_method : str, default="auto"
        Method of the max-margin core for the program in the limit norm
        (``limit_norm_``); the Frobenius program beside it always uses ``"auto"``.
    %(record_every)s
    backend : {"numpy", "torch"}, default="numpy"
    device : str, default=None
    dtype : {"float64", "float32"}, default="float64"
    random_state : int, RandomState instance or None, default=None
        Seeds the random starts (``init``, ``fixed_query``).
    verbose : int, default=0

    Attributes
    ----------
    query_ : ndarray of shape (k,) or None
        The fixed query ``u`` (``query_index=None``); ``None`` with per-input queries.
    head_ : ndarray of shape (d,) or (d_v,)
        ``v``.
    value_ : ndarray of shape (d_v, d) or None
        The value matrix ``V``
        (``None``: the identity).
    key_query_ : ndarray of shape (k, d)
        The trained ``W`` (``Q K^T`` for ``"KQ"``).
    query_factor_, key_factor_ : ndarray of shape (k, rank) and (d, rank)
        ``parameterization="KQ"``: the trained factors, ``key_query_ =
        query_factor_ @ key_factor_.T``.
    limit_norm_ : str or tuple
        The norm of the max-margin limit that theory names for the solver
        (:func:`skntp.diagnostics.limit_norm`): the parameterization's (``"fro"``,
        ``"nuclear"`` for ``"KQ"``) for GD, normalized GD, the path, ``"svm"``
        and Adam with ``eps > 0``; ``"max"`` for sign descent and Adam with
        ``eps = 0``; ``descent_norm`` for ``"nsd"``; ``("lp", mirror_p)`` for
        mirror descent.  ``mm_direction_`` and ``gmm_direction_`` are the ATT-SVM
        solutions in this norm; the SVM-neighbors, local optimality and
        ``convergence_`` are those of the Frobenius ATT-SVM (Def. 2).
    limit_directions_ : dict
        The unit ATT-SVM solutions of the selected tokens in ``limit_norm_``
        and in the Frobenius norm (and in the
        nuclear norm: ``{"fro": W^fro, "nuclear": W^nuc, ...}``), ``None``
        where infeasible; ``mm_direction_`` is the one of ``limit_norm_``.
        ``history_["alignment_<norm>"]`` is the cosine of the iterates with
        each (``alignment_l3`` for ``("lp", 3)``).
    limit_alignments_ : dict
        The cosine of ``key_query_`` with each of ``limit_directions_``.
    limit_ranks_ : dict
        The rank of each of ``limit_directions_``
        (:func:`skntp.metrics.numerical_rank`, relative tolerance 1e-6).
    kept_tokens_ : ndarray of bool, shape (n, T)
        With a value matrix or a nonlinear head: the tokens whose attention is
        at least ``selection_threshold``, ``O_i``.
    finite_component_ : ndarray of shape (k, d) or None
        With a value matrix or a nonlinear head: ``W^fin``, the minimum-norm
        ``W`` with ``z_i^T W (x_o - x_o') = log(s_o / s_o')`` for the kept
        tokens ``o, o'`` of every input (their trained log-odds).
    mm_direction_ (nonlinear head) : ndarray of shape (k, d) or None
        The unit ``W^dir``: the minimum-norm ``W`` with ``z_i^T W (x_o - x_o')
        = 0`` between kept tokens and ``z_i^T W (x_o - x_t) >= 1`` from every
        kept token ``o`` to every other token ``t`` (Frobenius norm; nuclear
        for ``"KQ"``).
    mm_radius_ : float
        With a nonlinear head: ``R`` of the least-squares fit
        ``key_query_ ~ finite_component_ + R * mm_direction_``.
    limit_alignment_ : float
        With a nonlinear head: the cosine of ``key_query_`` with
        ``finite_component_ + mm_radius_ * mm_direction_``.
    classes_ : ndarray of shape (2,)
        ``classes_[0]`` is mapped to ``Y = -1``, ``classes_[1]`` to ``+1``.
    token_scores_ : ndarray of shape (n, T)
        ``gamma_it = Y_i v^T x_it`` (Def. 1); ``-inf`` at padding.
    optimal_tokens_ : ndarray of int, shape (n,)
        ``opt_i = argmax_t gamma_it`` (the first on ties).
    optimal_sets_ : ndarray of bool, shape (n, T)
        All optimal tokens (ties within 1e-12 relative).
    selected_tokens_ : ndarray of int, shape (n,)
        ``alpha_i = argmax_t S(X_i W^T z_i)_t`` on the training inputs.
    mm_direction_ : ndarray of shape (k, d) or None
        Unit ``W^mm(alpha)`` of the selected tokens (ATT-SVM); ``None`` when
        they are not separable, or without constraints (one token per input).
        In a norm that is not strictly convex (``limit_norm_`` max, l1,
        nuclear or spectral) one minimizer of possibly several.
    gmm_direction_ : ndarray of shape (k, d) or None
        Unit ``W^mm*`` of the optimal tokens (Def. 1; ATT-SVM' of App. D
        when some input has several); ``None`` when infeasible.
    svm_neighbors_ : ndarray of bool, shape (n, T) or None
        SVM-neighbors ``T_i`` of the selected tokens (Def. 2).
    is_locally_optimal_ : bool or None
        The selected tokens are locally optimal (Def. 2); ``None``: their ATT-SVM is undecided.
    min_score_gap_ : float
        ``min_{i, t in T_i} gamma_{i alpha_i} - gamma_it`` (Fig. 9(b)).
    convergence_ : {"global", "local", "other", "not-saturated", "undecided"}
        The bars of Fig. 9: softmax not saturated (mean selected probability ``< 1 - 1e-5``,
        App. E); saturated on the optimal tokens (GMM), on locally optimal tokens (LMM),
        otherwise, or with no certified answer of the selected tokens' ATT-SVM.
    attention_saturation_ : float
        ``mean_i max_t S(X_i W^T z_i)_t``.
    mm_margin_ : float
        ``1 / ||W^mm(alpha)||`` (in ``limit_norm_``) (nan without a direction).
    alignment_ : float
        Cosine of ``key_query_`` (minus ``finite_component_`` with a value head)
        with ``mm_direction_`` (nan when it is None).
    history_ : dict of ndarray
        ``iteration``, ``loss``, ``grad_norm``, ``norm``, ``saturation``,
        ``gmm_alignment`` (cosine with ``gmm_direction_``), ``alignment``
        (with ``mm_direction_``), ``time``; ``radius`` for the path.  Every
        entry is one value per record (``pandas.DataFrame(history_)`` works).
    trajectory_ : dict of ndarray
        ``key_query``, of shape (n_records, k, d): the recorded iterates of ``W``.
    svm_result_ : MaxMarginResult or None
        The (ATT-SVM) solve of ``mm_direction_``.
    n_iter_ : int
    n_features_in_ : int
        Token dimension ``d``; for 2-D input ``(n, T)`` (read as ``n``
        sequences of ``T`` scalar tokens, the form scikit-learn's generic
        checks use) the number of columns ``T``.

    Raises
    ------
    FloatingPointError
        From ``fit``, when the largest entry of the queries times the largest
        entry of the tokens lies outside ``[1e-290, 1e290]``
        (:data:`skntp._backend.SCORE_MAGNITUDES`; e.g. tokens of magnitude
        1e-150 with ``query_index=0``): the scores ``z_i^T W x_it`` multiply
        two data factors, and the key-query matrices of the limits (about their
        inverse) would leave float64.  Inside that range the selections and
        predictions do not depend on the units of the data.

    Examples
    --------
    >>> from skntp import KeyQuerySelector
    >>> from skntp.datasets import make_key_query_data
    >>> data = make_key_query_data(random_state=0)
    >>> est = KeyQuerySelector(head=data.head, query_index=data.query_index,
    ...                        max_iter=300).fit(data.X, data.y)
    >>> est.key_query_.shape == est.mm_direction_.shape
    True
    """

    _parameter_constraints = {
        "head": [None, "array-like"],
        "key_query": [None, "array-like"],
        "loss": [StrOptions(set(_LOSS))],
        "init": [None, StrOptions({"zeros", "random"}), "array-like"],
        "fixed_query": [None, StrOptions({"random"}), "array-like"],
        "query_index": [None, Integral, StrOptions({"extra-row"})],
        "value": [None, "array-like"],
        "activation": [StrOptions(set(ACTIVATIONS))],
        "selection_threshold": [Interval(Real, 0, 1, closed="neither")],
        "parameterization": [StrOptions({"W", "KQ"})],
        "rank": [None, Interval(Integral, 1, None, closed="left")],
        "max_enumeration": [Interval(Integral, 1, None, closed="left")],
        "classes": [None, "array-like"],
        **TRAINING_CONSTRAINTS,
        **BACKEND_CONSTRAINTS,
    }

    def __init__(self, head=None, key_query=None, *, loss="log_loss", solver="ngd",
                 init=None, fixed_query=None, query_index=None, parameterization="W",
                 rank=None, value=None, activation="identity", selection_threshold=1e-3,
                 lr=0.1, power_t=0.0, eps=1e-8, descent_norm="fro", mirror_p=2.0,
                 max_iter=1000, tol=0.0,
                 svm_radius="auto", path_radii=None, max_enumeration=4096, classes=None,
                 compute_limits=True, svm_method="auto", record_every=10, backend="numpy",
                 device=None, dtype="float64", random_state=None, verbose=0):
        self.head = head
        self.key_query = key_query
        self.query_index = query_index
        self.parameterization = parameterization
        self.rank = rank
        self.value = value
        self.activation = activation
        self.selection_threshold = selection_threshold
        self.loss = loss
        self.solver = solver
        self.init = init
        self.fixed_query = fixed_query
        self.lr = lr
        self.power_t = power_t
        self.eps = eps
        self.descent_norm = descent_norm
        self.mirror_p = mirror_p
        self.max_iter = max_iter
        self.tol = tol
        self.svm_radius = svm_radius
        self.path_radii = path_radii
        self.max_enumeration = max_enumeration
        self.classes = classes
        self.compute_limits = compute_limits
        self.svm_method = svm_method
        self.record_every = record_every
        self.backend = backend
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------- the model
    def _has_value_head(self):
        return self.value is not None or self.activation != "identity"

    def _prepare(self, X, y, sample_weight):
        if self.fixed_query is not None and self.query_index is not None:
            raise ValueError(f"fixed_query={self.fixed_query!r} is not used: query_index "
                             "gives every input its own query. Leave fixed_query=None.")
        data = self._labelled(X, y, sample_weight)
        _check_options(self)
        Xp, mask = data["X"], data["mask"]
        V = data["value"] = _value_matrix(self.value, Xp.shape[2])
        v = data["v"] = (_head_vector(self.head, Xp, mask, data["Y"]) if V is None else
                         _value_head_vector(self.head, V.shape[0]))
        _add_queries(data, self.query_index, self.fixed_query, self.rank)
        # v^T sigma(V x_it): the output if the attention selects x_it alone
        a = Xp if V is None else Xp @ V.T
        return self._scored(data, head_activation(np, self.activation, a)[0] @ v
                            if self._has_value_head() else Xp @ v)

    def _parameter_norm(self):
        return "nuclear" if self.parameterization == "KQ" else "fro"

    def _gmm_in_norm(self, data, selected, norm, callback):
        return att_svm_w(data["X"], data["Z"], selected, mask=data["mask"], norm=norm,
                         method=self.svm_method, callback=callback).ravel()

    def _limit_parameters(self, data, limits):
        W = self._limit_point(data, limits).reshape(data["Z"].shape[1], data["X"].shape[2])
        if self.parameterization == "W":
            return (W,)
        rank = numerical_rank(W)
        if rank > data["rank"]:
            warnings.warn(
                f"the nuclear-norm limit has rank {rank} > rank={data['rank']}: "
                f"key_query_ is its best rank-{data['rank']} approximation.",
                UserWarning, stacklevel=user_stacklevel())
        return _factors(W, data["rank"])

    def _start(self, data):
        """``W(0)``, or ``(Q(0), K(0))`` for ``"KQ"``."""
        k, d = data["Z"].shape[1], data["X"].shape[2]
        init, rng = data["init"], data["rng"]
        default = data["W"] if self.key_query is not None else "random"
        # "random": N(0, 1/(3d)) entries, the variance of torch.nn.Linear's default start
        scale = np.sqrt(3.0 * d)
        if self.parameterization == "W":
            return (self._initial(init, (k, d), rng, default=default, divisor=scale),)
        r = data["rank"]
        if isinstance(init, str) and init == "zeros":
            raise ValueError("parameterization='KQ' cannot start at zero factors: (0, 0) is "
                             "a saddle point of the risk, whose gradient vanishes there; use "
                             "init='random' or a pair (Q0, K0).")
        if init is None and self.key_query is not None:
            return _factors(data["W"], r)
        if init is None or isinstance(init, str):
            return (self._initial("random", (k, r), rng, default=None, divisor=scale),
                    self._initial("random", (d, r), rng, default=None, divisor=scale))
        if not (isinstance(init, (tuple, list)) and len(init) == 2):
            raise ValueError("with parameterization='KQ', init must be None, 'random' or a "
                             "pair (Q0, K0) of arrays of shapes "
                             f"({k}, {r}) and ({d}, {r}).")
        return (self._initial(init[0], (k, r), rng, default=None, divisor=1.0, name="init[0]"),
                self._initial(init[1], (d, r), rng, default=None, divisor=1.0, name="init[1]"))

    def _training(self, data, limits, be):
        """Gradient descent on ``W`` or on its factors, with the lifted keys."""
        # normalized GD follows the direction of the gradient, exact at any saturation
        problem = KeyQueryProblem(be, data["X"], data["Y"], data["v"], data["Z"],
                                  self.parameterization, mask=data["mask"],
                                  sample_weight=data["sw"], loss=_LOSS[self.loss],
                                  saturation_scale=self.solver in SCALE_FREE,
                                  value=data["value"], activation=self.activation)
        gmm = None if limits.direction is None else be.asarray(limits.direction)
        radii = starts = None
        if self.solver == "regpath":
            radii, starts = _path(limits.attributes.get("gmm"), problem.shape,
                                  self.parameterization == "KQ", self.path_radii,
                                  data["rank"])
            starts = starts and (tuple(be.asarray(p) for p in starts[0]),)
        metrics = self._metrics(be.xp, problem, gmm, log_grad_scale=True)
        return Training(problem, self._start(data), metrics, lr=self.lr, radii=radii,
                        starts=starts or (), rescale=True)

    def _matrix(self, params):
        return params[0] if self.parameterization == "W" else params[0] @ params[1].T

    def _trained_limits(self, data, limits, params):
        """The ATT-SVMs of the selected tokens in the limit norm, Frobenius and nuclear;
        with a value head, ``W^fin`` and ``W^dir`` of the kept tokens."""
        mask, keys = data["mask"], data["keys"]
        W = self._matrix(params)
        q = W.ravel()
        own = self._limit_norm()
        solutions = dict.fromkeys([own, "fro", "nuclear"])
        mm = None
        if self.compute_limits or self.solver == "svm":
            selected = _selection(keys, q, mask)["selected"]
            solved = {norm: _matrix_limit(self, data, selected, norm) for norm in solutions}
            solutions = {norm: W for norm, (W, _) in solved.items()}
            mm = _diagnosis_input(*solved[own])
        rep = self._diagnosed(data, q, mm)
        # (unit: the norm of a solution of tiny entries underflows, its direction not)
        directions = {n: None if w is None else unit(w)[0] for n, w in solutions.items()}
        out = Limits(limits.direction, **limits.attributes, selection=rep,
                     mm_direction=directions[own], limit_directions=directions,
                     mm_margin=(float("nan") if solutions[own] is None else
                                1.0 / norm_value(solutions[own], own)))
        if self._has_value_head():  # it may keep several tokens per input: W^fin + R W^dir
            s = attention_weights(np, keys, q, mask)
            kept = out.attributes["kept"] = mask & (s >= self.selection_threshold)
            out.finite, out.attributes["mm_direction"] = None, None
            if self.compute_limits:
                fin, D = _kept_token_limit(self, data, q, kept, own)
                out.finite = fin.reshape(W.shape)
                if D is not None and np.any(D):
                    out.attributes["mm_direction"] = unit(D.reshape(W.shape))[0]
        return out

    def _fitted(self, data, limits, params, result):
        W = self._matrix(params)
        if self.parameterization == "KQ":
            self.query_factor_, self.key_factor_ = params
        self.query_, self.key_query_, self.value_ = data["u"], W, data["value"]
        directions = limits.attributes["limit_directions"]
        self.limit_alignments_ = {n: cosine(W, w) for n, w in directions.items()}
        self.limit_ranks_ = {n: (None if w is None else numerical_rank(w))
                             for n, w in directions.items()}
        self.gmm_direction_ = (None if limits.direction is None else
                               limits.direction.reshape(W.shape))
        finite = 0.0
        if self._has_value_head():
            self.kept_tokens_, self.finite_component_ = limits.attributes["kept"], limits.finite
            self.mm_radius_, self.limit_alignment_ = float("nan"), float("nan")
            D = limits.attributes["mm_direction"]
            if D is not None:
                self.mm_radius_ = float(np.sum((W - self.finite_component_) * D))
                self.limit_alignment_ = cosine(W, self.finite_component_ + self.mm_radius_ * D)
            finite = 0.0 if limits.finite is None else limits.finite.ravel()
        self._publish(data, limits, W.ravel(), result, keys=data["keys"], query=W.ravel(),
                      finite=finite, shape=W.shape)

    # ---------------------------------------------------------------- predict
    def _forward(self, X):
        Xp, mask = check_attention_input(self, X, reset=False)
        if self.query_index is None and self.parameterization == "W":
            s = attention_weights(np, Xp @ self.key_query_.T, self.query_,
                                  None if mask.all() else mask)
            return Xp, s
        if self.query_index is None:
            Z = np.broadcast_to(self.query_, (Xp.shape[0], self.query_.shape[0]))
        else:
            Z, mask = _input_queries(self.query_index, Xp, mask)
        logits = (Xp @ (Z @ self.key_query_)[:, :, None])[..., 0]  # z_i^T W x_it
        logits = np.where(mask, logits, -np.inf)
        return Xp, softmax(np, logits, axis=-1)

    def decision_function(self, X):
        """``f(X_i) = v^T sigma(V X_i^T S(X_i W^T z_i))``, shape (n,); positive means
        ``classes_[1]``."""
        features = self.transform(X)
        if self.value_ is None and self.activation == "identity":
            return features @ self.head_
        a = features if self.value_ is None else features @ self.value_.T
        return head_activation(np, self.activation, a)[0] @ self.head_
