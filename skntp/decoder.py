"""Next-token prediction with a linear decoder (Thrampoulidis, 2024)."""

from __future__ import annotations

import logging
import math
import sys
import time
import warnings
from numbers import Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import (
    check_is_fitted,
    check_random_state,
    validate_data,
)

from ._backend import log_softmax
from ._base import (
    BACKEND_CONSTRAINTS,
    TRAINING_CONSTRAINTS,
    ImplicitBiasEstimator,
    Limits,
    Training,
    backend_kwargs,
    cosine,
    descent_parameters_doc,
    other_limit_directions,
    saturation_radius,
    unit,
)
from ._progress import close_progress, make_limit_progress
from ._sequences import reject_token_sequences
from ._warnings import user_stacklevel
from .losses.decoder import (
    CrossEntropy,
    aggregate_contexts,
    next_token_data,
    ntp_cross_entropy,
    ntp_logit_gaps,
)
from .metrics import SubspaceProjector, history_metrics
from .svm import (
    NotSeparableError,
    NTPSeparability,
    ProgramTooLargeError,
    UndecidedError,
    analytic_center_separability,
    complete_stationary_split,
    far_point_split,
    log_odds_problem,
    log_odds_solvable,
    norm_value,
    ntp_separability,
    partial_finite_component,
    partial_ntp_svm_problem,
    separable_row_gaps,
    solve_max_margin,
    solve_min_norm,
    solve_ntp_svm,
    stationary_separability,
)
from .svm._ntp import COMPATIBLE_RESIDUAL
from .svm._ntp_center import center_fits
from .svm._ntp_partial import (
    MAX_LP_ROWS,
    _partial_program,
    _program_rows,
    side_passes,
    support_mask,
)

__all__ = ["NTPDecoderClassifier", "aggregate_contexts", "ntp_cross_entropy"]

_log = logging.getLogger("skntp")


def _phase(est, message, start=None):
    """Say what a phase of the limits did: printed at ``verbose >= 1``, logged at INFO
    on the ``skntp`` logger otherwise (a program of minutes says what it is doing)."""
    if start is not None:
        message = f"{message} ({time.perf_counter() - start:.1f} s)"
    _log.info(message)
    if est.verbose:
        print(f"[NTPDecoderClassifier] {message}", file=sys.stderr, flush=True)


def _separability(contexts, probs, stationary_route):
    """``(separability, why)``: the separable rows by :func:`~skntp.svm.ntp_separability`
    when certified both ways (``why`` None); ``(None, "rank")`` when the contexts are
    linearly independent (every row is separable: the NTP-SVM decides); ``(None,
    reason)`` when the program is too large, HiGHS fails on it, or the split is
    undecided (the log of ``skntp.svm`` says which, and an undecided split warns).
    With ``stationary_route`` (``W_fin`` over every row follows where the program is
    too large, :func:`_stationary_split`) its stationary point is not tried there: its
    Newton solve would be the same, twice."""
    m, d = contexts.shape
    if m <= d and np.linalg.matrix_rank(contexts) == m:
        return None, "rank"
    try:
        found = ntp_separability(contexts, probs, max_rows=MAX_LP_ROWS, stationary_point=not (
            stationary_route and _program_rows(probs) > MAX_LP_ROWS))
    except (ProgramTooLargeError, RuntimeError) as exc:  # too large, or HiGHS failed
        return None, str(exc)
    if found.status != "certified":
        return None, f"the split is undecided ({found.n_undecided} rows)"
    return found, None


#: Above this ``m V d`` an NTP-SVM of every row is not solved when the diagnosis could
#: not decide: the finite part's stationary point decides instead (its table certifies
#: that no row is separable), or the fit reports "undecided" (the NTP-SVM of the
#: Python documentation at d = 768, 2.3e7 rows, ran for more than 8 minutes).
MAX_FALLBACK_WORK = 200_000_000


_DENSE_PROBS_MAX = 1_000_000


@descent_parameters_doc
class NTPDecoderClassifier(ClassifierMixin, ImplicitBiasEstimator):
    """Next-token prediction with a linear decoder ``W`` on fixed context embeddings.

    The model predicts ``softmax(W h)`` for a context embedding ``h`` and is
    trained on the NTP cross-entropy (Thrampoulidis 2024, eq. (2)) over the
    *distinct* contexts of the data.  It can be fitted *implicitly*, by a
    gradient method, or *explicitly*, by its limit (Thm. 4.1 and Thm. A.3):
    ``W_k ~ W* + R_k W^mm / ||W^mm||`` with ``W*`` the finite component (the
    solution in ``F`` of eq. (3)) and ``W^mm`` the NTP-SVM solution.

    Parameters
    ----------
    solver : str, default="gd"
        One of "gd", "ngd", "adam", "signgd", "nsd", "mirror", "nmirror",
        "regpath", "svm".
        ``"gd"``: constant-step gradient descent; ``"ngd"``: normalized GD;
        ``"adam"``: Adam; ``"regpath"``: the regularization path
        ``argmin_{||W|| <= B} CE(W)`` over ``path_radii``; ``"svm"``: the
        explicit limit ``coef_ = finite_component_ + svm_radius * mm_direction_``.
        ``"signgd"``: sign descent; ``"nsd"``: normalized steepest descent in
        ``descent_norm``; ``"mirror"``, ``"nmirror"``: lp mirror descent with
        ``p = mirror_p``, plain or normalized.  Each fit records the norm that
        theory names for its solver's limit, ``limit_norm_``.
    lr : float, default=0.5
        Step size (the paper uses 0.5 for GD and 0.01 for NGD and Adam).
    %(descent_parameters)s
    max_iter : int, default=1000
        Iterations of the gradient solvers; inner iterations per radius for
        ``"regpath"``.
    tol : float, default=0.0
        Stop when the gradient norm falls to ``tol``.  On NTP-separable data
        the iterates diverge in norm by design, so ``max_iter`` is the horizon
        and no :class:`~sklearn.exceptions.ConvergenceWarning` is raised for
        reaching it.
    vocabulary : None, int or array-like, default=None
        The token set ``V``: ``None`` for the labels seen (or the columns of
        soft labels), an int ``V`` for tokens ``0..V-1``, or an array of
        tokens.  Tokens never seen as a next token are out of support everywhere.
    svm_radius : "auto" or float, default="auto"
        ``R`` in ``coef_ = W* + R W^mm/||W^mm||`` for ``solver="svm"``.  "auto"
        takes the smallest ``R`` for which every out-of-support logit lies at
        least 20 nats below every in-support logit of its context (so every
        out-of-support probability is below ``exp(-20)``); on data that are
        not NTP-separable, every separable row (the others stay finite).
    path_radii : array-like, default=None
        Increasing radii ``B`` of the regularization path; ``None`` uses
        ``geomspace(0.5, 200, 24)``.
    init : None, "zeros", "random" or array-like of shape (V, d), default=None
        The start ``W_0`` of the gradient solvers: ``None`` or "random" draws
        the LeCun-normal ``N(0, 1/d)`` from ``random_state``.
    compute_limits : bool, default=True
        Solve the NTP-SVM and the finite component during ``fit`` (needed for
        ``solver="svm"``, ``mm_direction_`` and the alignment history).
    svm_method : str, default="auto"
        Method of the max-margin core (``"auto"``, ``"cvxpy"``, ...) for the program in
        the limit norm (``limit_norm_``); the Frobenius program beside it
        (``alignment_fro``) always uses ``"auto"``.
    record_every : int, default=10
        Record the history every that many iterations (and always the first
        and the last).  Each record evaluates the metrics of ``history_``
        (alignment, distance of the projected iterate to the finite
        component, ...).  The projection goes through an orthonormal basis
        of the finite subspace (or of its complement, the smaller), computed
        once per fit, so a record costs about ``min(r, V d - r) V d``
        multiply-adds (``r`` the subspace's dimension) plus some 0.1 ms of
        Python, against ``2 m V d`` for a gradient step.  Measured
        (``benchmarks/record_every.py``): 0.1-0.3 steps on real text that is
        not NTP-separable (m = 970, V = 79, d = 16), so every 10 iterations
        adds a few per cent to the descent; about 2 steps on a small problem
        (NTP App. B.2, m = 50: a step of 0.06 ms), where every 10 iterations
        adds 20-35 % and 50 keeps it under 10 %.  Beyond the dense budget
        ``skntp.metrics.SubspaceProjector.MAX_DENSE`` (``V d`` above about
        5,500 and more than ``MAX_DENSE / (V d)`` rows spanning the subspace)
        each record solves a least-squares problem (LSQR, hundreds of steps):
        raise ``record_every`` there.  Use 1 to record every iteration.
    backend : {"numpy", "torch"}, default="numpy"
        The array layer of the descent, of the max-margin solvers' iterations and of
        the finite part's Newton-CG (its loss, gradient and Hessian products, in
        float64 whatever ``dtype``); the certificates are checked in NumPy.
    device : str, default=None
        Torch device (``"cpu"``, ``"cuda"``); only with ``backend="torch"``.
    dtype : {"float64", "float32"}, default="float64"
    random_state : int, RandomState instance or None, default=None
        Seeds the random start ``init``.
    verbose : int, default=0

    Attributes
    ----------
    coef_ : ndarray of shape (V, d)
        The decoder ``W`` (rows are the learned word embeddings).
    classes_ : ndarray of shape (V,)
    contexts_ : ndarray of shape (m, d)
        Distinct context embeddings ``h_j``.
    context_weights_ : ndarray of shape (m,)
        Empirical context probabilities ``pi_j``.
    next_token_probs_ : ndarray or scipy.sparse.csr_matrix of shape (m, V)
        ``p_j`` (sparse when ``m * V`` exceeds one million).
    entropy_ : float
        The entropy lower bound ``H`` of the loss (Sec. 2).
    finite_component_ : ndarray of shape (V, d)
        ``W*``, the minimum-norm solution of eq. (3); lies in ``F`` (eq. (5)).
        On data that are not NTP-separable (and a Frobenius limit), ``W_fin``:
        the minimizer in ``F_I`` of the loss with the separable tokens dropped
        (:func:`skntp.svm.partial_finite_component`; user guide, "Data that are
        not NTP-separable").
    mm_direction_ : ndarray of shape (V, d) or None
        ``W^mm/||W^mm||_F`` (unit Frobenius norm), the NTP-SVM solution in
        ``limit_norm_``.  On data that are not NTP-separable, with the
        Frobenius limit: ``W^mm_I``, the NTP-SVM of the separable rows
        (``separable_rows_``), ``None`` when no row is separable (the loss then
        has a minimizer, ``finite_component_``) or in another limit norm.  In the
        Frobenius and lp norms the solution is unique; in the max, l1 and
        spectral norms (not strictly convex) it need not be, and this is one
        minimizer, the one the method found (its value is certified, the
        point may change with the data's units or the method).
    mm_margin_ : float
        ``1/||W^mm||`` (in ``limit_norm_``), the NTP-margin (0 when not separable, nan when not
        computed).
    limit_norm_ : str or tuple
        The norm of the max-margin limit that theory names for the solver
        (:func:`skntp.diagnostics.limit_norm`): ``"fro"`` for GD, normalized GD, the
        path, ``"svm"`` and Adam with ``eps > 0``; ``"max"`` for sign descent
        and Adam with ``eps = 0``;
        ``descent_norm`` for ``"nsd"``; ``("lp", mirror_p)`` for mirror descent.
        ``mm_direction_`` is the solution in this norm.
    limit_directions_ : dict
        Norm -> unit-Frobenius direction of the max-margin solution in that
        norm, for ``limit_norm_`` and ``"fro"`` (``None`` where infeasible); the
        history's ``alignment_fro`` is the cosine with the Frobenius one.
    is_ntp_compatible_ : bool or None
        Eq. (3) has a solution (Def. 3.1): its LSQR reaches a relative residual of
        1e-8, or, where it does not or only the verdict is needed (data not
        NTP-separable, whose finite part is ``W_fin``), the equivalent least squares
        in one constant per context do
        (:func:`skntp.svm.log_odds_solvable`).  ``None`` (unknown) where those stop
        on their iterations above that residual, or reach it only through a
        direction of the contexts weaker than 1e-8.
    is_ntp_separable_ : bool or None
        The NTP-SVM is feasible (Def. 3.2); ``None`` when unknown (too large, or the
        split undecided with no row certified not separable).
    separable_rows_ : ndarray of shape (m, V), bool, or None
        The margin rows ``(j, v)``, ``v not in S_j``, that some direction of the
        recession cone separates (:func:`skntp.svm.ntp_separability`); ``None``
        when the diagnosis did not run (linearly independent contexts, where all
        rows are separable, or a program above its size limit).
    separable_fraction_ : float
        The fraction of margin rows that are separable: 1.0 on NTP-separable
        data, nan when unknown.
    loss_infimum_ : float
        The infimum of the loss (2) that gradient descent approaches: ``entropy_``
        on NTP-separable and NTP_H-compatible data, the loss of the non-separable
        rows at ``W_fin`` on data that are not NTP-separable, nan otherwise.
    alignment_ : float
        Cosine of ``coef_ - finite_component_`` with ``mm_direction_``.
    history_ : dict of ndarray
        ``iteration``, ``loss``, ``excess_loss`` (``loss - entropy_``),
        ``grad_norm``, ``norm``, ``alignment`` (cosine of ``W_k - W*`` with
        ``mm_direction_``, so its last value is ``alignment_``),
        ``alignment_uncorrected`` (cosine of ``W_k``), ``finite_distance``
        (``||P_F(W_k) - W*||``) and ``time``.
    n_iter_ : int
        The iterations run: gradient steps of the descent for an iterative
        ``solver``; with ``solver="svm"``, the iterations of the method that
        solved the NTP-SVM (``svm_result_.n_iter``, e.g. passes over the
        contexts of ``method="dcd"``), not gradient steps; 0 when no program
        was solved.
    svm_result_ : MaxMarginResult or None
        Duals, gap and iterations of the NTP-SVM solve.
    svm_radius_ : float
        ``R`` of ``solver="svm"``.
    n_features_in_ : int

    Examples
    --------
    >>> from skntp import NTPDecoderClassifier
    >>> from skntp.datasets import make_ntp_data
    >>> X, y = make_ntp_data(n_samples=500, n_contexts=10, n_features=12,
    ...                      n_tokens=6, support_size=3, random_state=0)
    >>> gd = NTPDecoderClassifier(solver="ngd", lr=0.1, max_iter=2000,
    ...                           random_state=0).fit(X, y)
    >>> round(gd.alignment_, 2) > 0.9
    True
    """

    _parameter_constraints = {
        "vocabulary": [None, Interval(Real, 2, None, closed="left"), "array-like"],
        "init": [None, StrOptions({"zeros", "random"}), "array-like"],
        **TRAINING_CONSTRAINTS,
        **BACKEND_CONSTRAINTS,
    }

    def __init__(self, solver="gd", *, lr=0.5, power_t=0.0, eps=1e-8, descent_norm="fro",
                 mirror_p=2.0, max_iter=1000, tol=0.0, vocabulary=None,
                 init=None, svm_radius="auto", path_radii=None, compute_limits=True,
                 svm_method="auto", record_every=10, backend="numpy", device=None,
                 dtype="float64", random_state=None, verbose=0):
        self.solver = solver
        self.lr = lr
        self.power_t = power_t
        self.eps = eps
        self.descent_norm = descent_norm
        self.mirror_p = mirror_p
        self.max_iter = max_iter
        self.tol = tol
        self.vocabulary = vocabulary
        self.init = init
        self.svm_radius = svm_radius
        self.path_radii = path_radii
        self.compute_limits = compute_limits
        self.svm_method = svm_method
        self.record_every = record_every
        self.backend = backend
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Fit the decoder by the chosen solver.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Context embeddings; identical rows are one distinct context.
        y : array-like of shape (n_samples,) or (n_samples, V)
            Next tokens, or non-negative next-token weights per row (soft
            labels, normalized per row).
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of each row (for soft labels: the context's weight).

        Returns
        -------
        self
        """
        return self._fit(X, y, sample_weight)

    # ------------------------------------------------------------- the model
    def _prepare(self, X, y, sample_weight):
        return next_token_data(self, X, y, sample_weight)

    def _explicit_limits(self, data):
        return _ntp_limits(self, data)

    def _limit_parameters(self, data, limits):
        if limits.direction is None:  # no separable row: the loss has a minimizer
            self.svm_radius_ = 0.0
            return (limits.finite,)
        rows = limits.attributes.get("separable_rows_")
        if (self.svm_radius == "auto" and rows is not None
                and limits.attributes.get("is_ntp_separable_") is False):
            # only the separable rows diverge: saturate those
            base, direction = separable_row_gaps(data["contexts"], support_mask(data["probs"]),
                                                 rows, limits.finite, limits.direction)
            R = saturation_radius(direction, base)
        elif self.svm_radius == "auto":
            base, direction = ntp_logit_gaps(data["contexts"], data["probs"],
                                             limits.finite, limits.direction)
            R = saturation_radius(direction, base)
        else:
            R = float(self.svm_radius)
        self.svm_radius_ = R
        return (limits.finite + R * limits.direction,)

    def _training(self, data, limits, be):
        V, d = data["probs"].shape[1], data["contexts"].shape[1]
        rng = check_random_state(self.random_state)
        W0 = self._initial(self.init, (V, d), rng, default="random", divisor=np.sqrt(d))
        objective = CrossEntropy(be, data["contexts"], data["weights"], data["probs"])
        metrics = history_metrics(be, 0, limits.direction, limits.finite, limits.projector,
                                  other_directions=other_limit_directions(limits))
        return Training(objective, (W0,), metrics)

    @classmethod
    def _batched_objective(cls, datas, be, max_elements=None):
        """The trials stacked: contexts padded with zero-weight rows to the largest ``m``."""
        shapes = {(data["probs"].shape[1], data["contexts"].shape[1]) for data in datas}
        if len(shapes) != 1:
            raise ValueError(
                "all trials need the same vocabulary size and number of features; got "
                f"(V, d) in {sorted(shapes)}. Pass vocabulary=V to the template.")
        m = max(data["contexts"].shape[0] for data in datas)
        contexts = np.stack([np.pad(data["contexts"], ((0, m - data["contexts"].shape[0]),
                                                       (0, 0))) for data in datas])
        weights = np.stack([np.pad(data["weights"], (0, m - data["weights"].shape[0]))
                            for data in datas])
        probs = sp.vstack([sp.vstack([data["probs"], sp.csr_matrix(
            (m - data["probs"].shape[0], data["probs"].shape[1]))]) for data in datas]).tocsr()
        return CrossEntropy(be, contexts, weights, probs, max_elements=max_elements)

    def _fitted(self, data, limits, params, result):
        self.classes_ = data["classes"]
        self.contexts_ = data["contexts"]
        self.context_weights_ = data["weights"]
        probs = data["probs"]
        m, V = probs.shape
        self.next_token_probs_ = probs if m * V > _DENSE_PROBS_MAX else probs.toarray()
        self.entropy_ = data["entropy"]
        self._set_limit_attributes(limits, params[0],
                                   ("is_ntp_compatible_", "is_ntp_separable_",
                                    "separable_rows_", "separable_fraction_",
                                    "loss_infimum_"))
        if result is None:  # solver="svm"
            loss = ntp_cross_entropy(self.coef_, data["contexts"], data["weights"], probs)
            self.n_iter_ = 0 if self.svm_result_ is None else self.svm_result_.n_iter
            self.history_ = self._svm_history(
                loss, params, excess_loss=loss - self.entropy_,
                alignment=self.alignment_,
                alignment_uncorrected=cosine(self.coef_, limits.direction),
                finite_distance=0.0)
            return
        self.n_iter_ = result.n_iter
        self.history_ = dict(result.history, excess_loss=result.history["loss"] - self.entropy_)
        if (self.is_ntp_separable_ is False and self.separable_fraction_ == 0
                and not result.converged
                and self.solver != "regpath" and self.history_["grad_norm"][-1] > 1e-8):
            warnings.warn(
                f"solver={self.solver!r} stopped after max_iter={self.max_iter} "
                f"iterations with gradient norm {self.history_['grad_norm'][-1]:.3g} > "
                f"tol={self.tol}; no margin row of the data is separable, so the loss "
                "has a finite minimizer that was not reached. Increase max_iter.",
                ConvergenceWarning, stacklevel=user_stacklevel())

    # ------------------------------------------------------------- predict
    def _logits(self, X):
        check_is_fitted(self)
        reject_token_sequences(X, self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return X @ self.coef_.T

    def decision_function(self, X):
        """Logits ``W h`` of shape (n, V); for two tokens the logit difference (n,)."""
        L = self._logits(X)
        return L[:, 1] - L[:, 0] if L.shape[1] == 2 else L

    def predict_log_proba(self, X):
        """Log-softmax of the logits (max-shifted: finite at any norm)."""
        return log_softmax(np, self._logits(X), axis=1)

    def predict_proba(self, X):
        """Next-token probabilities ``softmax(W h)`` of shape (n, V)."""
        return np.exp(self.predict_log_proba(X))

    def predict(self, X):
        """Most likely next token for each context."""
        logits = self._logits(X)
        return self.classes_[np.argmax(logits, axis=1)]

    def score(self, X, y, sample_weight=None):
        """Accuracy of :meth:`predict` (scikit-learn's default).

        For grid searches over NTP data, where several next tokens are
        correct, score the log-loss instead with
        ``scoring=skntp.metrics.make_vocabulary_log_loss_scorer()`` and fit
        with ``vocabulary=`` (the whole vocabulary): scikit-learn's
        ``"neg_log_loss"`` infers the tokens from each test fold, which
        rarely holds them all, and gives NaN.
        """
        return super().score(X, y, sample_weight=sample_weight)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = True
        return tags


def _ntp_limits(est, data):
    """The decoder's limits (Limits): the NTP-SVM where the data are separable, the
    separable rows' W^mm_I and W_fin where some rows are not (Sec. 6), W_fin's certified
    split where the program is out of reach, in the estimator's limit norm."""
    contexts, probs = data["contexts"], data["probs"]
    m, V = probs.shape
    equations = log_odds_problem(contexts, probs)
    start = time.perf_counter()
    _phase(est, f"{m} contexts x {V} tokens (d={contexts.shape[1]}): separability "
           "diagnosis: the contexts' rank, their cones, a stationary point, the linear "
           "program (each certified both ways; where the program is too large, W_fin's "
           "stationary point)")
    separability, why = _separability(contexts, probs, est._limit_norm() == "fro")
    _phase(est, "separability: " + (
        f"{why}" if separability is None else
        f"{separability.n_separable} of {separability.n_rows} margin rows separable, "
        f"certified ({separability.method})"), start)
    stationary = separability is None and why != "rank" and est._limit_norm() == "fro"
    small = m * V * contexts.shape[1] <= MAX_FALLBACK_WORK
    partial = (separability is not None and not separability.is_separable
               and est._limit_norm() == "fro")
    # (W_fin replaces the equations' solution where no row or only some are separable)
    finite, compatible = _log_odds(est, equations, probs,
                                   solution=not (stationary or partial))
    far = None
    if stationary:
        # the far iterate's split first: where it is not certified and m V d is small,
        # the NTP-SVM of every row is tried before "undecided"
        limits, far = _stationary_split(est, data, compatible, why)
        if limits is not None:
            return limits
        if not small or _n_refuted(far[1]):
            # (rows its table certifies not separable make the NTP-SVM of every row
            # infeasible: certified, it is not solved to learn that)
            return _undecided_limits(est, far, why, compatible)
        finite, compatible = _log_odds(est, equations, probs, solution=True)
    if separability is not None and not separability.is_separable:
        if est._limit_norm() == "fro":
            return _partial_limits(est, data, separability, compatible)
        return _limits_without_direction(est, equations, finite, separability, compatible)
    # without a certified split, an infeasible NTP-SVM only says that some row is not
    # separable, not which: the far iterate's evidence is reported, undecided
    undecided = separability is None and why != "rank" and est._limit_norm() == "fro"

    def solve(norm, cb):
        # (astype copies: a comparison would sort probs' indices in place)
        support = probs.astype(bool)
        if not undecided:
            return solve_ntp_svm(contexts, support, norm=norm, method=est._svm_method(norm),
                                 callback=cb, **backend_kwargs(est))[1]
        # the split undecided: a program holding a row that is not separable is
        # infeasible, which first-order methods may not prove in their passes, so the
        # solve has a budget (MAX_SIDE_WORK), and a result not certified optimal there
        # is "undecided"
        passes = side_passes(m * V, contexts.shape[1])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            res = solve_ntp_svm(contexts, support, norm=norm, method=est._svm_method(norm),
                                callback=cb, max_iter=passes, **backend_kwargs(est))[1]
        if res.status != "optimal":
            raise UndecidedError(f"the NTP-SVM of every row was not certified within "
                                 f"{passes} passes ({res.status})")
        return res

    try:
        directions, results, failure = est._limits_in_norms(
            "NTP-SVM", solve,
            "Gradient solvers still fit, but there is no max-margin direction: "
            "mm_direction_ is None.",
            **({"quiet": (NotSeparableError, UndecidedError)} if undecided else {}))
    except (NotSeparableError, UndecidedError):  # (solver="svm" needs it)
        if not undecided:
            raise
        return _undecided_limits(est, far, why, compatible)
    if undecided and isinstance(failure, (NotSeparableError, UndecidedError)):
        return _undecided_limits(est, far, why, compatible)
    limit = est._limit_norm()
    res, direction = results[limit], directions[limit]
    norm = 0.0 if res is None else norm_value(res.primal, limit)
    if failure is None:  # (W^mm = 0 when every context has full support)
        separable, margin = True, 1.0 / norm if norm > 0 else float("inf")
    elif isinstance(failure, NotSeparableError):
        separable, margin = False, 0.0
    else:  # too large to solve here: unknown
        separable, margin = None, float("nan")
    return Limits(direction, finite, SubspaceProjector.from_problem(equations),
                  is_ntp_compatible_=compatible, is_ntp_separable_=separable,
                  mm_margin_=margin, svm_result_=res, limit_directions_=directions,
                  separable_rows_=getattr(separability, "separable", None),
                  separable_fraction_=getattr(separability, "fraction",
                                              1.0 if separable else float("nan")),
                  loss_infimum_=(data["entropy"] if separable and compatible
                                 else float("nan")))


def _log_odds(est, equations, probs, solution):
    """``(finite, compatible)``: the minimum-norm solution of the in-support log-odds
    equations (3) and whether they are solvable.  With ``solution=False`` only the
    verdict is used (``finite`` is ``None``).  The verdict, where the contexts
    themselves leave a residual above :data:`~skntp.svm._ntp.COMPATIBLE_RESIDUAL` or
    with ``solution=False``, is :func:`~skntp.svm._ntp.log_odds_solvable`'s: the
    least squares in one constant per context, on an orthonormal basis of the
    contexts' span (``None``, unknown, where its LSQR stops on its iterations or the
    solution rests on a weak direction)."""
    n_rows = len(equations.constraints)
    start = time.perf_counter()
    _phase(est, f"the in-support log-odds equations ({n_rows} rows): " + (
        "their minimum-norm solution by LSQR, their solvability by one constant per context"
        if solution else "whether they are solvable, by one constant per context (W_fin "
        "replaces their solution)"))
    finite, residual = solve_min_norm(equations) if solution else (None, math.inf)
    compatible = True
    if residual > COMPATIBLE_RESIDUAL:
        # (not solved on the contexts themselves, or only the verdict asked for)
        compatible, residual = log_odds_solvable(equations.scores.queries, probs)
    verdict = ("unknown (LSQR stopped on its iterations, or only a direction of the "
               "contexts weaker than 1e-8 solves them)" if compatible is None else compatible)
    _phase(est, f"NTP_H-compatible: {verdict} (relative residual {residual:.2g})", start)
    return finite, compatible


def _finite_part(est, data, separability, warn=True):
    """``W_fin`` (:func:`~skntp.svm.partial_finite_component`) with a progress bar and,
    with ``warn``, a ConvergenceWarning when it did not converge
    (:func:`_warn_unconverged`)."""
    progress = make_limit_progress(est.verbose, desc="limit W_fin (gap: relative gradient)")
    try:
        fin = partial_finite_component(data["contexts"], data["probs"], separability,
                                       data["weights"], callback=progress,
                                       backend=est.backend, device=est.device)
    finally:
        close_progress(progress)
    if warn:
        _warn_unconverged(fin)
    return fin


def _warn_unconverged(fin):
    """A ConvergenceWarning, at the user's line, when ``W_fin`` did not converge."""
    if not fin.converged:
        warnings.warn(
            f"the finite component of the non-separable rows did not converge (relative "
            f"gradient norm {fin.grad_norm:.3g} after {fin.n_iter} Newton steps): the loss "
            "is nearly flat along rows that are close to separable. finite_component_ is "
            "the last iterate and loss_infimum_ the loss there (an upper bound); "
            "skntp.svm.partial_finite_component(..., max_products=None) runs on to "
            "convergence.", ConvergenceWarning,
            stacklevel=user_stacklevel())


def _stationary_split(est, data, compatible, why):
    """Data too large for the separability program: the finite part over every row,
    whose stationary point certifies that no row is separable
    (:func:`~skntp.svm.stationary_separability`), or, where it converged and its table
    leaves rows open, the analytic center of the margin polytope started from it
    (:func:`~skntp.svm.analytic_center_separability`); or, where ``m V d`` is at most
    :data:`MAX_FALLBACK_WORK`, the split its far iterate marks
    (:func:`~skntp.svm.far_point_split`), or, where the table certifies some rows, the
    NTP-SVM of the others (:func:`~skntp.svm.complete_stationary_split`), each certified
    both ways, and the split's limits.  Returns ``(limits, far)``: ``limits`` None when
    nothing is certified or every row is certified separable (the NTP-SVM of every row
    decides), ``far`` the finite part and its table's split."""
    contexts, probs = data["contexts"], data["probs"]
    support = support_mask(probs)
    _phase(est, f"separability of {probs.shape[0]} contexts x {probs.shape[1]} tokens "
           f"(d={contexts.shape[1]}): {why}; W_fin over every row decides (its stationary "
           "point's table certifies the rows it can)")
    everything = NTPSeparability(np.zeros_like(support), support, "stationary point")
    # (warned about only where it is the answer: on partly separable data it has no
    # minimizer, and the split's own W_fin replaces it)
    fin = _finite_part(est, data, everything, warn=False)
    separability = stationary_separability(contexts, support, fin, probs, data["weights"])
    exact = _n_rows(separability.cycle_rows)
    labelled = _n_rows(separability.label_rows)
    _phase(est, f"the stationary point's table: {separability.status} "
           f"({separability.n_rows - separability.n_undecided} of {separability.n_rows} "
           "rows certified not separable" + (
               "" if not exact else f", {exact} of them by cycles of contexts") + (
               "" if not labelled else f", {labelled} by the program of their labels") +
           "; the smallest probability of an out-of-support "
           f"row at W_fin is {fin.min_prob:.3g})")
    far = (fin, separability)
    if separability.status != "certified" and fin.converged and center_fits(
            *support.shape, contexts.shape[1]):
        # a minimizer of the loss: most likely no row separates, but its table's entries
        # fall exponentially and float64 certifies only the largest
        start = time.perf_counter()
        _phase(est, "W_fin converged, its table leaves rows open: the analytic center of "
               "the margin polytope (a Farkas table of every row, its entries not "
               "exponentially small)")
        progress = make_limit_progress(est.verbose,
                                       desc="analytic center (gap: relative gradient)")
        try:
            center = analytic_center_separability(contexts, support, start=fin.W,
                                                  callback=progress)
        finally:
            close_progress(progress)
        _phase(est, "the analytic center: " + ("every row certified not separable"
                                               if center is not None else "not certified"),
               start)
        if center is not None:
            separability = center
    if separability.status == "certified":
        _warn_unconverged(fin)
        return _partial_limits(est, data, separability, compatible, fin=fin), far
    m, V = support.shape
    if m * V * contexts.shape[1] > MAX_FALLBACK_WORK:
        return None, far
    start = time.perf_counter()
    _phase(est, "the split W_fin's far iterate marks: the rows that keep their "
           "probability, certified by the table of their own loss; the others by the far "
           "iterate less that loss's minimizer, projected onto the cone")
    split = far_point_split(contexts, separability, fin.W, probs, data["weights"])
    done = split is not separability
    _phase(est, "the far iterate's split: " + (
        f"certified both ways ({split.n_separable} of {split.n_rows} rows separable)"
        if done else "not certified"), start)
    if not done and separability.certified.any():
        start = time.perf_counter()
        _phase(est, f"the {separability.n_undecided} rows the table leaves open: their "
               "NTP-SVM with the certified rows held at 0 (a certified optimum proves them "
               "separable)")
        split = complete_stationary_split(contexts, separability)
        done = split is not separability
        _phase(est, "the open rows: " + ("certified separable: the split is certified both "
                                         "ways" if done else "not certified"), start)
    if done and not split.is_separable:
        # W_fin is the minimizer of the loss without them, not the last iterate
        return _partial_limits(est, data, split, compatible), far
    # (every row certified separable: the NTP-SVM of every row is then feasible, and
    # Thm. 4.1's limits follow from it)
    return None, far


def _n_rows(mask):
    """The number of rows of a mask (0 for ``None``)."""
    return 0 if mask is None else int(np.count_nonzero(mask))


def _n_refuted(separability):
    """The number of rows an undecided split certifies not separable."""
    s = separability
    return int(np.count_nonzero(s.certified & ~s.separable & ~s.support))


def _undecided_limits(est, far, why, compatible):
    """No certified split: "undecided", with a warning, and no direction; the finite
    part is the far iterate over every row (``far`` from :func:`_stationary_split`).
    Where its table certifies some rows not separable, the data are certified not
    NTP-separable (``is_ntp_separable_=False``, the NTP-SVM infeasible by those rows'
    Farkas table), though which rows separate is undecided."""
    fin, separability = far
    _warn_unconverged(fin)
    refuted = _n_refuted(separability)
    exact = _n_rows(separability.cycle_rows)
    labelled = _n_rows(separability.label_rows)
    verdict = (
        "The data are not NTP-separable (is_ntp_separable_ is False: those rows' Farkas "
        "tables prove the NTP-SVM infeasible), but which rows separate is undecided: "
        "there is no certified max-margin direction (mm_direction_ is None; "
        "separable_rows_ is None)" if refuted else
        "There is no certified max-margin direction (mm_direction_ is None; "
        "is_ntp_separable_ and separable_rows_ are None)")
    parts = []
    if exact:
        parts.append(f"{exact} exactly, by cycles of contexts that share coordinates "
                     "(skntp.svm.cycle_certificate)")
    if labelled:
        parts.append(f"{labelled} by the program of the contexts' labels "
                     "(skntp.svm.label_certificate)")
    if refuted > exact + labelled or not parts:
        parts.append("the others by the stationary point's table" if parts
                     else "by the stationary point's table")
    how = ", ".join(parts)
    warnings.warn(
        f"the separability of the data is undecided: {why.rstrip('.')}, and the fit "
        f"certifies {refuted} of the {separability.n_rows} margin rows not separable "
        f"({how}). At the last Newton iterate of the loss "
        f"({fin.n_iter} steps, relative gradient {fin.grad_norm:.3g}) the smallest "
        f"probability of an out-of-support row is {fin.min_prob:.3g}: probabilities "
        "that fall toward 0 as Newton goes on are the mark of separable rows (Ji & "
        "Telgarsky 2019), along which the loss has an infimum far out and no minimizer; "
        f"this fit does not certify them. {verdict}; finite_component_ is the loss's "
        "last Newton iterate.", UserWarning, stacklevel=user_stacklevel())
    return Limits(None, fin.W, None, is_ntp_compatible_=compatible,
                  is_ntp_separable_=False if refuted else None,
                  mm_margin_=0.0 if refuted else float("nan"), svm_result_=None,
                  limit_directions_={"fro": None}, separable_rows_=None,
                  separable_fraction_=float("nan"), loss_infimum_=float("nan"))


def _partial_limits(est, data, separability, compatible, fin=None):
    """The limits of data that are not NTP-separable (:mod:`skntp.svm._ntp_partial`):
    ``W^mm_I`` (``None`` when no row is separable) and ``W_fin`` (``fin`` when given)."""
    contexts = data["contexts"]
    res = direction = None
    if separability.n_separable:
        # (built inside the solve: a program too large to build is a failure the
        # estimator reports, as one too large to solve)
        res, _ = est._solve_limit(
            "NTP-SVM of the separable rows",
            lambda cb: solve_max_margin(partial_ntp_svm_problem(contexts, separability),
                                        method=est._svm_method("fro"), callback=cb,
                                        **backend_kwargs(est)),
            "There is no max-margin direction: mm_direction_ is None.")
        direction = None if res is None else unit(res.primal)[0]
    if fin is None:
        fin = _finite_part(est, data, separability)
    finite_side = _partial_program(contexts, separability, separable_rows=False)
    return Limits(direction, fin.W, SubspaceProjector.from_problem(finite_side),
                  is_ntp_compatible_=compatible, is_ntp_separable_=False, mm_margin_=0.0,
                  svm_result_=res, limit_directions_={"fro": direction},
                  separable_rows_=separability.separable,
                  separable_fraction_=separability.fraction, loss_infimum_=fin.loss)


def _limits_without_direction(est, equations, finite, separability, compatible):
    """Data not NTP-separable, in a limit norm other than Frobenius: the limits of the
    separable rows are not derived there, so there is no direction (and no infeasible
    NTP-SVM solve to learn that)."""
    warnings.warn(
        f"the data are not NTP-separable ({separability.fraction:.1%} of the margin rows "
        f"separate); the limits of the separable rows are derived for the Frobenius norm "
        f"only, not for limit_norm_={est._limit_norm()!r}: mm_direction_ is None.",
        UserWarning, stacklevel=user_stacklevel())
    return Limits(None, finite, SubspaceProjector.from_problem(equations),
                  is_ntp_compatible_=compatible, is_ntp_separable_=False, mm_margin_=0.0,
                  svm_result_=None, limit_directions_={est._limit_norm(): None, "fro": None},
                  separable_rows_=separability.separable,
                  separable_fraction_=separability.fraction, loss_infimum_=float("nan"))
