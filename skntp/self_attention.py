"""1-layer self-attention for next-token prediction (Li et al., self-attention NTP paper)."""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.utils import Bunch, column_or_1d
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, check_random_state

from ._backend import get_backend, softmax, to_numpy
from ._base import (
    BACKEND_CONSTRAINTS,
    TRAINING_CONSTRAINTS,
    backend_kwargs,
    backend_of,
    limit_progress,
    train,
)
from ._data_graphs import random_unit_embeddings
from ._progress import close_progress
from .graphs import (
    PaddedSequences,
    _component_index,
    check_token_labels,
    check_token_sequences,
    cyclic_subspace_basis,
    is_acyclic,
    pseudo_token_priority_graphs,
    strongly_connected_components,
    token_priority_graphs,
)
from .metrics import SubspaceProjector, alignment, history_metrics
from .svm._core import NotSeparableError, solve_max_margin
from .svm._graph import SelfAttentionRisk, cyclic_correction, graph_svm_problem

__all__ = ["NTPAttentionClassifier"]

_SATURATION_NATS = 20.0
_ORTHOGONALITY_TOL = 1e-6


def _identity_head(E):
    """``C = (E E^T)^{-1} E``: the minimum-norm head with ``C E^T = I_K`` (Assumption 4)."""
    K, d = E.shape
    if K > d:
        raise ValueError(
            f"head='identity' needs C E^T = I_K (Assumption 4), which is impossible with "
            f"K={K} tokens embedded in d={d} < K dimensions (E E^T is singular). Use "
            f"embedding_dim >= n_tokens, or pass head='embeddings' or a (K, d) head array."
        )
    gram = E @ E.T
    s = np.linalg.svd(E, compute_uv=False)
    if s[-1] <= 1e-10 * s[0]:
        raise ValueError(
            "head='identity' needs C E^T = I_K (Assumption 4), which is impossible: the "
            "token embeddings are linearly dependent (E has rank < K)."
        )
    return np.linalg.solve(gram, E)


class NTPAttentionClassifier(ClassifierMixin, BaseEstimator):
    """Next-token prediction with 1-layer self-attention over token embeddings.

    The model (eq. (1)) predicts ``y_hat = C X^T softmax(X W x_bar)`` for a
    sequence of token embeddings ``X`` (rows of the fixed embedding table
    ``E``) with last token ``x_bar``; only the combined key-query weight
    ``W`` (``d x d``) is trained, the head ``C`` is fixed.  Fitted
    *implicitly* (GD, normalized GD, Adam or the regularization path, Algo-GD
    and Algo-RP) or *explicitly* by the limit of Theorems 2-3:
    ``W ~ W^cyc + R W^mm/||W^mm||`` with ``W^mm`` the (Graph-SVM) solution on
    the token-priority graphs of the data and ``W^cyc`` the cyclic
    correction (Def. 3).

    Input sequences are token ids: a 2-D integer array ``(n, T)`` or a list
    of 1-D integer sequences of different lengths.  Float arrays are accepted
    only if every value is an integer (they are cast without rounding);
    non-integer values raise a ``ValueError``.

    Parameters
    ----------
    embeddings : array-like of shape (K, d), default=None
        The embedding table ``E``.  ``None`` draws ``K`` rows uniformly on
        the unit sphere of ``R^d`` with ``random_state`` (App. D), with
        ``K = n_tokens`` and ``d = embedding_dim``.
    n_tokens : int, default=None
        Vocabulary size ``K`` when ``embeddings`` is None (default: the
        largest id seen in ``X`` or ``y``, plus one).
    embedding_dim : int, default=None
        ``d`` when ``embeddings`` is None (default: ``K``).
    head : {"identity", "embeddings"} or array-like of shape (K, d), default="identity"
        The head ``C``.  ``"identity"``: ``C = (E E^T)^{-1} E`` so that
        ``C E^T = I_K`` (Assumption 4; needs ``K <= d`` and independent
        embeddings); then ``y_hat_k`` is the attention mass on the tokens
        equal to ``k``.  ``"embeddings"``: the tied head ``C = E``, a general
        head satisfying Assumption 3 for distinct unit-norm embeddings
        (Sec. 6).  An array is used as given (a warning is raised if it
        violates Assumption 3, ``argmax_k c_y^T e_k = y``).
    loss : {"log", "ce", "squared"}, default="log"
        ``"log"``: ``-log(c_y^T f(X))``, the attention mass on the label under
        Assumption 4, convex in ``W`` (Lemma 3, Sec. 5); ``"ce"``: the
        cross-entropy of ``y_hat`` (Fig. 6); ``"squared"``:
        ``(1 - c_y^T f(X))^2`` (Fig. 5).
    solver : {"gd", "ngd", "adam", "regpath", "svm"}, default="gd"
        ``"gd"``: Algo-GD; ``"ngd"``: normalized GD (App. D, the paper's
        figures); ``"adam"``; ``"regpath"``: Algo-RP over ``path_radii``;
        ``"svm"``: ``coef_ = finite_component_ + svm_radius * mm_direction_``.
    lr : float, default=0.5
        Step size (the paper's figures use normalized GD with 0.01 or 0.1).
    max_iter : int, default=1000
        Iterations (inner iterations per radius for ``"regpath"``).
    tol : float, default=0.0
        Stop when the gradient norm falls to ``tol``.  With ``W^mm != 0``
        the iterates diverge in norm by design, so ``max_iter`` is the horizon.
    init : {"zeros", "normal"}, default="zeros"
        ``W(0) = 0`` or ``W(0) ~ N(0, 1/d^2)`` entrywise (seeded by ``random_state``).
    svm_radius : "auto" or float, default="auto"
        ``R`` for ``solver="svm"``.  ``"auto"``: the smallest ``R`` for which,
        in every sequence, every token outside the label's SCC scores at least
        20 nats below every token of that SCC (so the attention it gets is at
        most ``T e^{-20}``).
    path_radii : array-like, default=None
        Radii of the regularization path (``geomspace(0.5, 200, 24)`` by default).
    compute_limits : bool, default=True
        Solve (Graph-SVM) and the cyclic correction during ``fit``.
    selection_threshold : float, default=1e-3
        Attention probability above which a token counts as *selected* when
        building pseudo token-priority graphs (:meth:`pseudo_graphs`, Sec. 6).
    svm_method : str, default="auto"
        Method of the max-margin core.
    record_every : int, default=10
        Record the history every that many iterations (and always the first
        and the last).  Each record evaluates the metrics of ``history_``
        (alignment, projection onto the finite subspace, ...), which cost
        about one gradient step or more; every 10 iterations keeps that
        overhead under 20 % of the descent (``benchmarks/record_every.py``).
        Use 1 to record every iteration.
    backend : {"numpy", "torch"}, default="numpy"
    device : str, default=None
    dtype : {"float64", "float32"}, default="float64"
    random_state : int, RandomState instance or None, default=None
        Seeds the embeddings (when drawn) and the ``"normal"`` initialization.
    verbose : int, default=0
        ``> 0`` shows a progress bar of the gradient solvers on stderr.

    Attributes
    ----------
    coef_ : ndarray of shape (d, d)
        The attention weight ``W``.
    embeddings_ : ndarray of shape (K, d)
    head_ : ndarray of shape (K, d)
        ``C``.
    classes_ : ndarray of shape (K,)
        The token ids ``0..K-1``.
    graphs_ : dict of int to networkx.DiGraph
        Token-priority graph ``G^(k)`` per last token ``k`` (edges label -> token).
    sccs_ : dict of int to list of set
        Strongly connected components of every graph.
    is_acyclic_ : bool
        Every SCC is a singleton (Def. 2).
    realizable_ : ndarray of shape (n_samples,), bool
        The label occurs in its sequence (Assumption 2).  With the identity
        head the other samples carry no gradient and are left out of the
        loss and the graphs.
    mm_direction_ : ndarray of shape (d, d) or None
        ``W^mm / ||W^mm||`` (zero when no graph has an ``i => j`` pair; None
        when (Graph-SVM) is infeasible or ``compute_limits=False``).
    mm_margin_ : float
        ``1 / ||W^mm||``.
    finite_component_ : ndarray of shape (d, d) or None
        ``W^cyc`` (Def. 3), in ``S_cyc`` and orthogonal to ``W^mm`` (Lemma 2).
    cyclic_basis_ : ndarray of shape (d * d, r)
        Orthonormal basis of ``S_cyc`` (``r = 0`` for acyclic data).
    alignment_ : float
        Cosine of ``coef_ - finite_component_`` with ``mm_direction_``.
    history_ : dict of ndarray
        ``iteration``, ``loss``, ``grad_norm``, ``norm``, ``alignment``
        (``<W, W^mm>/(||W|| ||W^mm||)``, the paper's correlation),
        ``alignment_corrected``, ``finite_distance``
        (``||Pi_Scyc(W) - W^cyc||``), ``time``.
    n_iter_ : int
    svm_result_ : MaxMarginResult or None
    svm_radius_ : float
        ``R`` used by ``solver="svm"``.

    See Also
    --------
    skntp.metrics.make_vocabulary_log_loss_scorer : The log-loss scorer for
        ``GridSearchCV`` (``scoring="neg_log_loss"`` gives NaN when a test
        fold lacks some of the ``K`` tokens).
    skntp.datasets.TokenEncoder : Words to token ids.

    Examples
    --------
    >>> from skntp.self_attention import NTPAttentionClassifier
    >>> from skntp.datasets import make_token_priority_data
    >>> X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=True, random_state=0)
    >>> clf = NTPAttentionClassifier(embeddings=E, solver="ngd", lr=0.01,
    ...                              max_iter=4000).fit(X, y)
    >>> clf.is_acyclic_, bool(clf.history_["alignment"][-1] > 0.99)
    (True, True)
    """

    _parameter_constraints = {
        "embeddings": ["array-like", None],
        "n_tokens": [Interval(Integral, 1, None, closed="left"), None],
        "embedding_dim": [Interval(Integral, 1, None, closed="left"), None],
        "head": [StrOptions({"identity", "embeddings"}), "array-like"],
        "loss": [StrOptions({"log", "ce", "squared"})],
        "solver": [StrOptions({"gd", "ngd", "adam", "regpath", "svm"})],
        "init": [StrOptions({"zeros", "normal"})],
        "svm_radius": [StrOptions({"auto"}), Interval(Real, 0, None, closed="left")],
        "compute_limits": ["boolean"],
        "selection_threshold": [Interval(Real, 0, 1, closed="neither")],
        **TRAINING_CONSTRAINTS,
        **BACKEND_CONSTRAINTS,
    }

    def __init__(
        self,
        embeddings=None,
        *,
        n_tokens=None,
        embedding_dim=None,
        head="identity",
        loss="log",
        solver="gd",
        lr=0.5,
        max_iter=1000,
        tol=0.0,
        init="zeros",
        svm_radius="auto",
        path_radii=None,
        compute_limits=True,
        selection_threshold=1e-3,
        svm_method="auto",
        record_every=10,
        backend="numpy",
        device=None,
        dtype="float64",
        random_state=None,
        verbose=0,
    ):
        self.embeddings = embeddings
        self.n_tokens = n_tokens
        self.embedding_dim = embedding_dim
        self.head = head
        self.loss = loss
        self.solver = solver
        self.lr = lr
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.svm_radius = svm_radius
        self.path_radii = path_radii
        self.compute_limits = compute_limits
        self.selection_threshold = selection_threshold
        self.svm_method = svm_method
        self.record_every = record_every
        self.backend = backend
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    # ---------------------------------------------------------------- setup
    def _embedding_table(self, ids, mask, y, rng):
        if self.embeddings is not None:
            E = np.asarray(self.embeddings, dtype=float)
            if E.ndim != 2 or E.shape[0] < 2 or E.shape[1] < 1:
                raise ValueError(
                    f"embeddings must be a 2-D (K, d) array with K >= 2 tokens, got shape "
                    f"{E.shape}."
                )
            if not np.all(np.isfinite(E)):
                raise ValueError("embeddings contain NaN or infinity.")
            if self.n_tokens is not None and self.n_tokens != E.shape[0]:
                raise ValueError(
                    f"n_tokens={self.n_tokens} but embeddings has {E.shape[0]} rows."
                )
            return E
        K = self.n_tokens
        if K is None:
            K = int(max(ids[mask].max(), y.max())) + 1
        if K < 2:
            raise ValueError(
                f"the vocabulary needs at least 2 tokens; got n_tokens={K}. Pass "
                "n_tokens or embeddings."
            )
        d = K if self.embedding_dim is None else self.embedding_dim
        return random_unit_embeddings(K, d, rng)

    def _head(self, E):
        K, d = E.shape
        if isinstance(self.head, str):
            if self.head == "identity":
                return _identity_head(E), np.eye(K), True
            C = E.copy()
        else:
            C = np.asarray(self.head, dtype=float)
            if C.shape != (K, d):
                raise ValueError(f"head must have shape (K, d) = {(K, d)}, got {C.shape}.")
            if not np.all(np.isfinite(C)):
                raise ValueError("head contains NaN or infinity.")
        gamma = C @ E.T
        if np.any(np.argmax(gamma, axis=1) != np.arange(K)):
            warnings.warn(
                "the head violates Assumption 3 (argmax_k c_y^T e_k = y for every token "
                "y): attention cannot reach the minimal risk by selecting the label.",
                UserWarning,
                stacklevel=3,
            )
        return C, gamma, False

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit the attention weight ``W`` by the chosen solver.

        Parameters
        ----------
        X : array-like of shape (n_samples, T) or list of 1-D sequences
            Token ids (sequences may have different lengths).
        y : array-like of shape (n_samples,)
            Next-token ids.

        Returns
        -------
        self
        """
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None."
            )
        ids, mask, last = check_token_sequences(X)
        y = check_token_labels(column_or_1d(y, warn=True), ids.shape[0])
        rng = check_random_state(self.random_state)
        E = self._embedding_table(ids, mask, y, rng)
        K, d = E.shape
        if ids[mask].max() >= K or y.max() >= K:
            bad = int(max(ids[mask].max(), y.max()))
            raise ValueError(
                f"token ids out of range: found id {bad} but the vocabulary has {K} "
                f"tokens (ids 0..{K - 1})."
            )
        C, gamma, identity = self._head(E)
        self.embeddings_, self.head_, self.classes_ = E, C, np.arange(K)
        self._gamma, self._identity = gamma, identity
        realizable = ((ids == y[:, None]) & mask).any(axis=1)
        self.realizable_ = realizable
        used = np.ones(ids.shape[0], dtype=bool)
        if not realizable.all():
            bad = np.flatnonzero(~realizable)
            if identity:
                used = realizable
                warnings.warn(
                    f"{bad.size} sample(s) (e.g. {bad[:5].tolist()}) are not realizable: "
                    "the label does not occur in the sequence (Assumption 2). With "
                    "head='identity' (C E^T = I) their prediction y_hat_y is 0 for every "
                    "W, so they carry no gradient; they are left out of the loss and the "
                    "token-priority graphs."
                    + (" No sample is left: W stays at its initialization." if not
                       realizable.any() else ""),
                    UserWarning,
                    stacklevel=2,
                )
            else:
                warnings.warn(
                    f"{bad.size} sample(s) (e.g. {bad[:5].tolist()}) are not realizable "
                    "(the label does not occur in the sequence, Assumption 2); the "
                    "theory's limits do not describe them.",
                    UserWarning,
                    stacklevel=2,
                )
        self._data = (ids[used], mask[used], last[used], y[used])
        self.graphs_ = token_priority_graphs(PaddedSequences(ids[used], mask[used], last[used]),
                                            y[used])
        self.sccs_ = strongly_connected_components(self.graphs_)
        self.is_acyclic_ = is_acyclic(self.graphs_, self.sccs_)
        be = backend_of(self)
        risk = SelfAttentionRisk(be, E, gamma, *self._data, loss=self.loss)
        self._fit_limits(E, gamma)
        if self.solver == "svm":
            self._fit_svm(be, risk)
        else:
            self._fit_gradient(be, risk, rng, d)
        if self.mm_direction_ is not None:
            r = self.coef_ - (self.finite_component_ if self.finite_component_ is not None
                              else 0.0)
            self.alignment_ = alignment(r, self.mm_direction_)
        else:
            self.alignment_ = float("nan")
        return self

    def _fit_limits(self, E, gamma):
        d = E.shape[1]
        self.svm_result_ = None
        self.mm_direction_ = None
        self.mm_margin_ = float("nan")
        self.finite_component_ = None
        self.cyclic_basis_ = None
        self._projector = None
        if not self.compute_limits and self.solver != "svm":
            return
        ids, mask, last, y = self._data
        wc, info = cyclic_correction(E, PaddedSequences(ids, mask, last), y, self.sccs_,
                                     gamma=gamma, loss=self.loss, return_info=True)
        self.finite_component_ = wc
        self.cyclic_basis_ = info["basis"]
        rows = cyclic_subspace_basis(E, self.sccs_)
        self._projector = SubspaceProjector(rows if rows.shape[0] else None, (d, d))
        problem = graph_svm_problem(E, self.graphs_, self.sccs_)
        progress = limit_progress(self, "Graph-SVM")
        try:
            res = solve_max_margin(problem, method=self.svm_method, callback=progress,
                                   **backend_kwargs(self))
        except NotSeparableError as exc:
            if self.solver == "svm":
                raise
            warnings.warn(f"{exc} mm_direction_ is None.", UserWarning, stacklevel=3)
            return
        finally:
            close_progress(progress)
        self.svm_result_ = res
        nrm = float(np.linalg.norm(res.primal))
        if nrm == 0:
            self.mm_direction_ = np.zeros((d, d))
            self.mm_margin_ = float("inf")
        else:
            self.mm_direction_ = res.primal / nrm
            self.mm_margin_ = 1.0 / nrm
            cos = alignment(wc, self.mm_direction_)
            if abs(cos) > _ORTHOGONALITY_TOL:
                warnings.warn(
                    f"W^cyc and W^mm are not orthogonal (cosine {cos:.2e}), against "
                    "Lemma 2: a limit was solved inaccurately.",
                    RuntimeWarning,
                    stacklevel=3,
                )

    def _label_scc_mask(self):
        """Positions of every used sequence in its label's SCC (the sets R_i of App. A)."""
        ids, mask, last, y = self._data
        comp = _component_index(self.sccs_, self.embeddings_.shape[0])
        inside = np.zeros_like(mask)
        for k, arr in comp.items():
            sel = last == k
            inside[sel] = mask[sel] & (arr[ids[sel]] == arr[y[sel]][:, None])
        return inside

    def _auto_radius(self, risk_np):
        if self.svm_radius != "auto":
            return float(self.svm_radius)
        if not np.any(self.mm_direction_):
            return 0.0
        # W^mm != 0 needs a strict edge (y => x), i.e. some token outside its
        # label's SCC, so ``has`` is never empty here
        _, mask, _, _ = self._data
        inside = self._label_scc_mask()
        outside = mask & ~inside
        has = outside.any(axis=1)
        a_c = risk_np.scores(self.finite_component_)
        a_u = risk_np.scores(self.mm_direction_)
        lo_c = np.where(inside, a_c, np.inf).min(axis=1)
        hi_c = np.where(outside, a_c, -np.inf).max(axis=1)
        gap_u = np.where(inside, a_u, np.inf).min(axis=1) - np.where(
            outside, a_u, -np.inf).max(axis=1)
        need = (_SATURATION_NATS + hi_c[has] - lo_c[has]) / gap_u[has]
        return float(max(0.0, need.max()))

    def _fit_svm(self, be, risk):
        risk_np = SelfAttentionRisk(get_backend(), self.embeddings_, self._gamma,
                                    *self._data, loss=self.loss)
        R = self._auto_radius(risk_np)
        self.svm_radius_ = R
        self.coef_ = self.finite_component_ + R * self.mm_direction_
        self.n_iter_ = self.svm_result_.n_iter
        loss, (grad,) = risk_np((self.coef_,))
        proj = self._projector.project(self.coef_)
        self.history_ = {
            "iteration": np.array([0.0]),
            "loss": np.array([float(loss)]),
            "grad_norm": np.array([float(np.linalg.norm(grad))]),
            "norm": np.array([float(np.linalg.norm(self.coef_))]),
            "alignment": np.array([alignment(self.coef_, self.mm_direction_)]),
            "alignment_corrected": np.array([1.0 if R > 0 else 0.0]),
            "finite_distance": np.array([float(np.linalg.norm(proj - self.finite_component_))]),
        }

    def _fit_gradient(self, be, risk, rng, d):
        if self.init == "normal":
            W0 = rng.standard_normal((d, d)) / d
        else:
            W0 = np.zeros((d, d))
        metrics = history_metrics(be, 0, self.mm_direction_, self.finite_component_,
                                  self._projector)
        result = train(self, risk, (W0,), be, metrics)
        self.coef_ = np.asarray(to_numpy(result.params[0]), dtype=np.float64)
        self.n_iter_ = result.n_iter
        self.history_ = result.history

    # -------------------------------------------------------------- predict
    def _check_X(self, X):
        check_is_fitted(self)
        return check_token_sequences(X, self.embeddings_.shape[0])

    def attention_weights(self, X):
        """Softmax attention ``S(X W x_bar)`` of every sequence.

        Returns
        -------
        s : ndarray of shape (n_samples, T_max)
            Zero at padding positions (list input of different lengths).
        """
        return self._attention(*self._check_X(X))

    def _outputs(self, X):
        ids, mask, last = self._check_X(X)
        s = self._attention(ids, mask, last)
        # y_hat = C X^T s = sum_t s_t Gamma[:, x_t]
        return np.einsum("nt,ntk->nk", s, self._gamma.T[ids])

    def predict_proba(self, X):
        """Next-token probabilities over the ``K`` tokens.

        With ``head="identity"`` these are the model outputs ``y_hat``
        themselves: the attention mass on each token (eq. (1) under
        Assumption 4).  With another head, ``softmax(y_hat)`` (the
        probabilities of the cross-entropy loss).

        Returns
        -------
        proba : ndarray of shape (n_samples, K)
        """
        out = self._outputs(X)
        if self._identity:
            return np.clip(out, 0.0, None) / np.clip(out, 0.0, None).sum(axis=1, keepdims=True)
        return softmax(np, out, axis=1)

    def decision_function(self, X):
        """Model outputs ``y_hat = C X^T softmax(X W x_bar)`` of shape (n_samples, K)."""
        return self._outputs(X)

    def predict(self, X):
        """Most likely next token id (``argmax_k y_hat_k``)."""
        out = self._outputs(X)
        return self.classes_[np.argmax(out, axis=1)]

    # ------------------------------------------------------ local analysis
    def pseudo_graphs(self, X, y, *, threshold=None):
        """Pseudo token-priority graphs of the fitted attention (Sec. 6, App. D).

        Positions whose attention at ``coef_`` exceeds ``threshold`` are
        *selected*; in ``G^(k)`` every selected token points to every token
        of its sequence.  The pseudo (Graph-SVM) direction and cyclic
        correction are the local limits that GD with a general head or the
        squared loss follows (Figs. 5-6).  The pseudo ``W^cyc`` minimizes the
        model's loss (with the true labels) on the pseudo cyclic sub-dataset
        (the tokens in the selected tokens' SCC) inside the pseudo ``S_cyc``,
        from zero; with a general head this need not be a global or finite
        minimizer (the paper defers its rigorous definition).

        Parameters
        ----------
        X : array-like of shape (n_samples, T) or list of sequences
        y : array-like of shape (n_samples,)
        threshold : float, optional
            Defaults to ``selection_threshold``.

        Returns
        -------
        Bunch
            ``graphs``, ``sccs``, ``is_acyclic``, ``selected`` ((n, T) bool),
            ``mm_direction`` (unit, or zero), ``finite_component`` (pseudo
            ``W^cyc``), ``alignment`` (cosine of ``coef_`` with
            ``mm_direction``), ``finite_distance``
            (``||Pi(coef_) - W^cyc||`` on the pseudo ``S_cyc``).
        """
        ids, mask, last = self._check_X(X)
        y = check_token_labels(y, ids.shape[0], self.embeddings_.shape[0])
        thr = self.selection_threshold if threshold is None else float(threshold)
        s = self._attention(ids, mask, last)
        selected = (s > thr) & mask
        top = np.argmax(np.where(mask, s, -1.0), axis=1)
        selected[np.arange(ids.shape[0]), top] = True
        graphs = pseudo_token_priority_graphs(PaddedSequences(ids, mask, last), selected)
        sccs = strongly_connected_components(graphs)
        E = self.embeddings_
        d = E.shape[1]
        W_mm = solve_max_margin(graph_svm_problem(E, graphs, sccs), method=self.svm_method,
                                **backend_kwargs(self)).primal
        nrm = np.linalg.norm(W_mm)
        direction = W_mm / nrm if nrm > 0 else np.zeros((d, d))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            W_cyc = cyclic_correction(E, PaddedSequences(ids, mask, last), y, sccs,
                                      gamma=self._gamma, loss=self.loss, keep=selected)
        rows = cyclic_subspace_basis(E, sccs)
        proj = SubspaceProjector(rows if rows.shape[0] else None, (d, d)).project(self.coef_)
        return Bunch(
            graphs=graphs,
            sccs=sccs,
            is_acyclic=is_acyclic(graphs, sccs),
            selected=selected,
            mm_direction=direction,
            finite_component=W_cyc,
            alignment=alignment(self.coef_, direction),
            finite_distance=float(np.linalg.norm(proj - W_cyc)),
        )

    def _attention(self, ids, mask, last):
        risk = SelfAttentionRisk(get_backend(), self.embeddings_, self._gamma, ids, mask,
                                 last, np.zeros(ids.shape[0], np.int64), loss="squared")
        return risk.attention(self.coef_)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = True
        tags.input_tags.categorical = True
        tags.input_tags.positive_only = True  # token ids are non-negative
        return tags
