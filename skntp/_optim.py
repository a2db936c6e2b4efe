"""The training loop shared by every estimator.

One loop runs full-batch gradient descent (``"gd"``), normalized GD
(``"ngd"``), Adam (``"adam"``), sign descent (``"signgd"``), normalized
steepest descent in a chosen norm (``"nsd"``), lp mirror descent
(``"mirror"`` and its normalized variant ``"nmirror"``) and the
regularization path (``"regpath"``) over an *objective*: a function of a
tuple of parameter blocks that returns ``(loss, gradients)``.  Every
estimator records the same history through a ``metrics`` callback.

Each optimizer names the norm of its implicit bias (:func:`limit_norm`): on
separable data steepest descent in a norm converges in direction to the
max-margin solution in that norm, and lp mirror descent to the lp max-margin
solution (see :func:`limit_norm` for the statements and their assumptions).

The arrays are those of the estimator's backend (NumPy or torch); the loop
only uses operators and Array-API functions, so it runs unchanged on both.
"""

from __future__ import annotations

import math
import time
import warnings
from numbers import Real

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ._backend import blas_threads, to_numpy
from ._warnings import user_stacklevel
from .svm import check_norm

__all__ = ["DESCENT_NORMS", "SCALE_FREE", "SOLVERS", "OptimResult", "check_descent_norm",
           "limit_norm", "minimize", "steepest_direction"]

SOLVERS = ("gd", "ngd", "adam", "signgd", "nsd", "mirror", "nmirror", "regpath")
#: the descent solvers: those that :func:`minimize` runs step by step
DESCENT_SOLVERS = ("gd", "ngd", "adam", "signgd", "nsd", "mirror", "nmirror")
#: solvers whose step depends on the gradient only through its direction: they
#: may run on any positive multiple of the loss (e.g. ``log L``, or a gradient
#: scaled out of float64 underflow) and take exactly the same steps
SCALE_FREE = ("ngd", "signgd", "nsd", "nmirror")
#: the norms of ``solver="nsd"`` (``("lp", p)`` too, for ``1 < p < inf``)
DESCENT_NORMS = ("fro", "max", "l1", "spectral")


def check_descent_norm(descent_norm):
    """The canonical form of a descent norm: one of :data:`DESCENT_NORMS` or ``("lp", p)``.

    Validated as the norms of the max-margin core
    (:func:`skntp.svm.check_norm`); ``("lp", 2)`` is ``"fro"``, and the nuclear
    norm is not a descent norm here.
    """
    try:
        canonical = check_norm(descent_norm)
    except ValueError as exc:
        raise ValueError(f"descent_norm: {exc}") from None
    if canonical == "nuclear":
        raise ValueError(f"descent_norm must be one of {DESCENT_NORMS} or ('lp', p) with "
                         "1 < p < inf, got 'nuclear'.")
    return "fro" if canonical == ("lp", 2.0) else canonical


def _check_real(value, name, above, closed=False):
    """A finite real ``> above`` (``>= above`` when ``closed``), else a ValueError."""
    ok = (isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)
          and (value >= above if closed else value > above))
    if not ok:
        raise ValueError(f"{name} must be a finite real {'>=' if closed else '>'} {above:g}, "
                         f"got {value!r}.")
    return float(value)


def limit_norm(solver, descent_norm="fro", mirror_p=2.0, parameter_norm="fro", eps=1e-8):
    """The norm of the max-margin limit that theory names for ``solver``.

    * ``"gd"``, ``"ngd"``, ``"regpath"`` and ``"svm"``: the Frobenius norm
      (``parameter_norm``, e.g. ``"nuclear"`` for factored attention ``Q K^T``);
    * ``"signgd"``: the entrywise max norm;
    * ``"adam"`` with ``eps = 0``: the entrywise max norm too (Adam without a
      stability constant, Zhang, Zou, Cao 2024; Fan, Schmidt, Thrampoulidis
      2025, for separable multiclass data); with ``eps > 0`` the Frobenius
      norm: on separable data the gradient vanishes, ``eps`` comes to dominate
      the root of the second moment and Adam becomes GD with a constant
      preconditioner (Wang et al. 2021).  Before that, while the gradient's
      entries are large against ``eps``, Adam moves like sign descent, so on a
      finite horizon it can be closer to the max-norm limit;
    * ``"nsd"``: ``descent_norm`` (normalized steepest descent in a norm goes to
      the max-margin solution in that norm; ``"spectral"``: Muon-style
      orthogonalized updates);
    * ``"mirror"`` and ``"nmirror"``: ``("lp", mirror_p)`` (mirror descent with
      the potential ``(1/p) ||w||_p^p``; Julistiono, Tarzanagh, Azizan,
      "Optimizing Attention with Mirror Descent", 2024).

    The theorems assume separable data and small or decaying steps; for NTP
    data with several tokens in a support, and for the joint and
    self-attention models, the norm is the conjecture the package measures
    against, not a theorem.
    """
    if solver in ("gd", "ngd", "regpath", "svm"):
        return parameter_norm
    if solver == "signgd" or (solver == "adam" and eps == 0):
        return "max"
    if solver == "adam":
        return parameter_norm
    if solver == "nsd":
        return check_descent_norm(descent_norm)
    if solver in ("mirror", "nmirror"):
        return check_descent_norm(("lp", _check_real(mirror_p, "mirror_p", above=1.0)))
    raise ValueError(f"solver must be one of {SOLVERS + ('svm',)}, got {solver!r}.")


class OptimResult:
    """What :func:`minimize` returns.

    Attributes
    ----------
    params : tuple of arrays
        Final parameter blocks (backend arrays).
    n_iter : int
        Iterations run (grid points for ``"regpath"``).
    converged : bool
        The gradient norm reached ``tol`` (or, for the path, every grid point
        was solved to tolerance).
    stop_reason : str
        ``"tol"``, ``"max_iter"``, ``"zero-gradient"`` or ``"non-finite"``.
    history : dict of ndarray
        Per-record NumPy arrays: ``iteration``, ``loss``, ``grad_norm``,
        ``time`` and whatever ``metrics`` returned; for the path also
        ``radius``.  With ``batched=True`` the per-trial entries have shape
        ``(n_records, n_trials)``.
    """

    def __init__(self, params, n_iter, converged, stop_reason, history):
        self.params = params
        self.n_iter = n_iter
        self.converged = converged
        self.stop_reason = stop_reason
        self.history = history


class _Recorder:
    def __init__(self, metrics, record_every):
        self.metrics = metrics
        self.record_every = max(1, int(record_every))
        self.rows = {}
        self.last = {}

    def record(self, k, params, loss, grad_norm, t0, force=False, **extra):
        if not force and k % self.record_every:
            return
        row = {"iteration": k, "loss": loss, "grad_norm": grad_norm,
               "time": time.perf_counter() - t0, **extra}
        if self.metrics is not None:
            row.update(self.metrics(params))
        self.last = row
        for key, value in row.items():
            self.rows.setdefault(key, []).append(_record_value(value))

    def history(self):
        return {k: np.asarray(v, dtype=float) for k, v in self.rows.items()}


def _record_value(value):
    """A float, or a NumPy array for per-trial values (batched runs) and weights."""
    if isinstance(value, (int, float)):
        return float(value)
    arr = np.asarray(to_numpy(value), dtype=float)
    return float(arr) if arr.ndim == 0 else arr.copy()


def _block_norms(xp, grads, batched):
    """Each block's Frobenius norm: a float, or with ``batched`` a NumPy vector per trial."""
    if not batched:
        return [_norm(xp, g) for g in grads]
    return [np.asarray(to_numpy(_scaled_norms(xp, g, 2.0, True)[:, 0]), dtype=float)
            for g in grads]


_F64 = np.finfo(np.float64)
# the smallest sum of squares whose square root is accurate (see _scaled_norms)
_F64_FINE = float(_F64.smallest_normal) / float(_F64.eps) ** 2


def _norm(xp, a):
    """The Frobenius norm of one array, as a float (see :func:`_scaled_norms`).

    A float64 NumPy array takes the same plain ``sqrt(sum a^2)`` branch without the
    namespace's wrappers (the hot path of every descent iteration); others, and sums
    outside that branch's range, go through :func:`_scaled_norms`.
    """
    if isinstance(a, np.ndarray) and a.dtype == np.float64:
        flat = a.reshape(1, -1)
        with np.errstate(over="ignore", under="ignore"):
            squares = np.sum(flat * flat, axis=1, keepdims=True)
        if _F64_FINE < squares[0, 0] <= _F64.max:
            return float(np.sqrt(squares)[0, 0])
    return float(_scaled_norms(xp, a, 2.0, False)[0, 0])


def _norm_of_blocks(xp, blocks):
    """The Frobenius norm of a tuple of arrays taken together, as a float."""
    return _total_norm([_norm(xp, b) for b in blocks])


def _total_norm(norms):
    """``sqrt(sum_b n_b^2)`` of block norms (floats or per-trial vectors), without
    squaring them (``math.hypot``): norms below 1e-154 would square to 0."""
    if isinstance(norms[0], np.ndarray):
        return np.hypot.reduce(np.stack(norms), axis=0)
    return math.hypot(*norms)


def _per_trial(xp, scale, like):
    """A per-trial NumPy vector as a backend array broadcasting over ``like``."""
    s = xp.asarray(scale, dtype=like.dtype, device=getattr(like, "device", None))
    return xp.reshape(s, (-1,) + (1,) * (like.ndim - 1))


def _close_progress(progress):
    """End a progress bar's line when the run stopped (``progress.close()`` if any)."""
    close = getattr(progress, "close", None)
    if close is not None:
        close()


def _flat(xp, a, batched):
    """``a`` as rows of one problem each: ``(1, size)``, or ``(n_trials, size)``."""
    return xp.reshape(a, (a.shape[0] if batched else 1, -1))


def _row_scale(xp, values, like, batched):
    """Per-problem values of shape ``(rows, 1)`` broadcast over the block ``like``."""
    return xp.reshape(values, ((like.shape[0],) if batched else ()) + (1,) * (
        like.ndim - (1 if batched else 0)))


def steepest_direction(xp, g, descent_norm, batched=False):
    """The unit step of steepest descent in ``descent_norm``: ``argmax_{||s|| <= 1} <g, s>``.

    Every problem's block (each trial's, with ``batched``) gets its own:

    * ``"fro"``: ``g / ||g||_F``; ``"max"``: ``sign(g)`` (sign descent);
    * ``"l1"``: ``sign(g_i)`` on the entries of largest ``|g_i|`` (shared
      equally between ties), 0 elsewhere (greedy coordinate descent);
    * ``("lp", p)``: ``sign(g) |g|^(q-1) / ||g||_q^(q-1)`` with ``1/p + 1/q = 1``;
    * ``"spectral"``: ``U V^T`` of the thin SVD ``g = U S V^T`` over the
      singular values above ``1e-12 s_max`` (the polar factor, Muon's
      orthogonalized update); a vector block, whose spectral norm is its
      Euclidean norm, gets ``g / ||g||``.

    ``<g, s>`` is then the dual norm of ``g``.  A zero block gets a zero step.
    The lp and fro directions are computed from ``g / max|g|``, so they are
    exact for gradients of any magnitude (also near underflow).
    """
    vector = g.ndim == (2 if batched else 1)
    if descent_norm == "spectral" and not vector:
        U, S, Vh = xp.linalg.svd(g, full_matrices=False)
        top = xp.max(S, axis=-1, keepdims=True)
        keep = xp.astype(S > 1e-12 * top, g.dtype)
        return xp.matmul(U * keep[..., None, :], Vh)
    if descent_norm == "spectral":
        descent_norm = "fro"
    if descent_norm == "max":
        return xp.sign(g)
    flat = _flat(xp, xp.abs(g), batched)
    top = xp.max(flat, axis=1, keepdims=True)
    safe = xp.where(top > 0, top, xp.ones_like(top))
    if descent_norm == "l1":
        at_top = xp.astype((flat == top) & (top > 0), g.dtype)
        share = at_top / xp.maximum(xp.sum(at_top, axis=1, keepdims=True), 1.0)
        return xp.sign(g) * xp.reshape(share, g.shape)
    q = 2.0 if descent_norm == "fro" else descent_norm[1] / (descent_norm[1] - 1.0)
    a = flat / safe  # in [0, 1]: no overflow or underflow of the powers below
    size = xp.sum(a**q, axis=1, keepdims=True) ** (1.0 / q)
    size = xp.where(size > 0, size, xp.ones_like(size))
    return xp.sign(g) * xp.reshape((a / size) ** (q - 1.0), g.shape)


def _scaled_norms(xp, g, q, batched):
    """``||g||_q`` of each problem's block, of shape ``(rows, 1)``.

    Computed as ``max|g| ||g / max|g|||_q``, so that it neither underflows nor
    overflows: the squares of entries below 1e-154 are 0 in float64, while a
    gradient that small still points somewhere.  For ``q = 2`` the plain
    ``sqrt(sum g^2)`` is kept where the sum is finite and above
    ``tiny / eps^2`` (4.5e-277 in float64): no square overflowed there, and
    those that underflowed weigh less than ``size * eps^2`` of it.  A zero
    block has norm 0, a block with an infinite entry ``inf`` and one with a
    NaN ``nan``.  Every block has an entry (parameter blocks are never empty).
    """
    flat = _flat(xp, g, batched)
    plain = None
    if q == 2.0:
        info = xp.finfo(flat.dtype)
        with np.errstate(over="ignore", under="ignore"):
            squares = xp.sum(flat * flat, axis=1, keepdims=True)
        fine = (squares > float(info.smallest_normal) / float(info.eps) ** 2) & (
            squares <= float(info.max))
        plain = xp.sqrt(squares)
        if bool(xp.all(fine)):
            return plain
    flat = xp.abs(flat)
    top = xp.max(flat, axis=1, keepdims=True)
    safe = xp.where((top > 0) & (top < math.inf), top, xp.ones_like(top))
    scaled = top * xp.sum((flat / safe) ** q, axis=1, keepdims=True) ** (1.0 / q)
    return scaled if plain is None else xp.where(fine, plain, scaled)


def _dual_norm_rows(xp, g, p, batched):
    """``||g||_q`` (``1/p + 1/q = 1``) of each problem's block, shaped to broadcast on it."""
    return _row_scale(xp, _scaled_norms(xp, g, p / (p - 1.0), batched), g, batched)


def _mirror_map(xp, w, power):
    """``sign(w) |w|^power``: the gradient of the lp potential (``power = p - 1``) and
    its inverse (``power = 1 / (p - 1)``)."""
    return xp.sign(w) * xp.abs(w) ** power


def _step(xp, solver, params, grads, lr, ngd_norms, state, k, options, batched):
    """One update of every block, with the step ``lr`` of iteration ``k``.

    ``"gd"``; ``"ngd"``, ``w <- w - lr (g / ||g||)`` with ``ngd_norms`` the norms
    ``||g||`` per block or per trial (1 for a zero gradient; ``g / ||g||``, not
    ``(lr / ||g||) g``, whose factor overflows for norms below ``lr / 1.8e308``);
    ``"adam"`` (moments in ``state`` updated in place); ``"signgd"`` and
    ``"nsd"``, ``w <- w - lr s`` with ``s`` the unit steepest direction of
    :func:`steepest_direction`; ``"mirror"``, ``grad psi(w) <- grad psi(w) -
    lr g`` with ``psi = (1/p) ||w||_p^p`` entrywise, and ``"nmirror"``, the same
    with ``g / ||g||_q`` (normalized, as in AttentionMD).
    """
    if solver == "gd":
        return tuple(p - lr * g for p, g in zip(params, grads))
    if solver == "ngd":
        return tuple(p - lr * (g / n) for p, g, n in zip(params, grads, ngd_norms))
    if solver in ("signgd", "nsd"):
        dn = "max" if solver == "signgd" else options["descent_norm"]
        return tuple(p - lr * steepest_direction(xp, g, dn, batched)
                     for p, g in zip(params, grads))
    if solver in ("mirror", "nmirror"):
        p_ = options["mirror_p"]
        new = []
        for w, g in zip(params, grads):
            if solver == "nmirror":
                size = _dual_norm_rows(xp, g, p_, batched)
                g = g / xp.where(size > 0, size, xp.ones_like(size))
            theta = _mirror_map(xp, w, p_ - 1.0) - lr * g
            new.append(_mirror_map(xp, theta, 1.0 / (p_ - 1.0)))
        return tuple(new)
    b1, b2 = options["betas"]
    eps = options["eps"]
    m1, m2 = state
    new = []
    for i, (p, g) in enumerate(zip(params, grads)):
        m1[i] = b1 * m1[i] + (1 - b1) * g
        m2[i] = b2 * m2[i] + (1 - b2) * g * g
        mhat = m1[i] / (1 - b1**k)
        vhat = m2[i] / (1 - b2**k)
        denom = xp.sqrt(vhat) + eps
        # eps = 0: an entry whose gradient was always 0 has mhat = vhat = 0 and stays
        new.append(p - lr * (mhat / denom if eps > 0 else
                             xp.where(denom > 0, mhat, 0.0) / xp.where(denom > 0, denom, 1.0)))
    return tuple(new)


def minimize(
    objective,
    params0,
    *,
    xp,
    solver="gd",
    lr=0.5,
    max_iter=1000,
    tol=0.0,
    metrics=None,
    record_every=1,
    betas=(0.9, 0.99),
    eps=1e-8,
    descent_norm="fro",
    mirror_p=2.0,
    power_t=0.0,
    radii=None,
    inner_max_iter=200,
    project=None,
    progress=None,
    batched=False,
    starts=(),
    rescale=False,
):
    """Minimize ``objective`` from ``params0`` with a first-order method.

    The one training loop of skntp: every estimator, the batched trials of
    :mod:`skntp.sweeps` and the regularization path run through it.

    Parameters
    ----------
    objective : callable
        ``objective(params) -> (loss, grads)``; ``params`` and ``grads`` are
        tuples of arrays, ``loss`` a float or 0-d array.  An objective with a
        ``work_size`` attribute (the multiply-adds of its largest product)
        runs on one BLAS/OpenMP thread when that is small
        (:func:`skntp._backend.blas_threads`): a loop of small products gains
        nothing from a thread pool and loses badly on a busy machine.
    params0 : tuple of arrays
        Initial parameter blocks.
    xp : namespace
        Array namespace of the blocks.
    solver : {"gd", "ngd", "adam", "signgd", "nsd", "mirror", "nmirror", "regpath"}
        ``"gd"``: ``w <- w - lr g``. ``"ngd"``: each block moves by
        ``lr g_b / ||g_b||`` (normalized GD as in both papers).
        ``"adam"``: Adam with ``betas`` and ``eps``. ``"signgd"``:
        ``w <- w - lr sign(g)``. ``"nsd"``: each block moves by ``lr`` times
        its unit steepest direction in ``descent_norm``
        (:func:`steepest_direction`; ``"spectral"`` is Muon's orthogonalized
        step). ``"mirror"``: lp mirror descent, ``grad psi(w_+) = grad psi(w)
        - lr g`` with ``psi(w) = (1/p) ||w||_p^p`` entrywise (``p = mirror_p``);
        ``"nmirror"``: the same with ``g / ||g||_q`` per block (the normalized
        variant of Julistiono, Tarzanagh, Azizan 2024). ``"regpath"``:
        ``argmin_{||w_b|| <= r_b} loss`` for each row of ``radii`` (the
        regularization path, Thm. A.3 of the NTP paper, Thm. 1 of the
        max-margin paper), solved by accelerated projected gradient with
        backtracking, each point warm-started from the last.
    lr : float
        The step; at iteration ``k`` (from 1) the step is ``lr / k**power_t``.
    max_iter : int
        Iterations (ignored by ``"regpath"``, which runs ``inner_max_iter``
        per radius).
    tol : float
        Stop when the gradient norm is ``<= tol``.
    metrics : callable, optional
        ``metrics(params) -> dict`` recorded in the history: floats, or
        arrays (per-trial values, or an iterate to keep its trajectory).
    record_every : int
        Record every that many iterations (and always the first and last).
    betas, eps : tuple of float, float
        Adam's moment decays and the constant added to the root of the second
        moment.
    descent_norm : {"fro", "max", "l1", "spectral"} or ("lp", p), default="fro"
        The norm of ``"nsd"``.
    mirror_p : float, default=2.0
        ``p > 1`` of the mirror map of ``"mirror"`` and ``"nmirror"`` (2 is GD
        and normalized GD).
    power_t : float, default=0.0
        Decay of the step of the descent solvers, ``lr / k**power_t`` (0:
        constant; 0.5: ``1/sqrt(k)``, the schedule of sign and spectral descent
        in Fan et al. 2025).
    radii : array of shape (n_radii,) or (n_radii, n_blocks)
        The path's radii (``"regpath"`` only).
    project : callable, optional
        ``project(params) -> params`` applied after every step (keeps fixed
        blocks fixed, e.g. the head of a model trained in ``p`` only).
    progress : callable, optional
        ``progress(k, loss, history_row)`` after every iteration, with
        ``loss`` a float (with ``batched``, the per-trial loss array) and
        ``history_row`` the last recorded row (``dict``; see
        :func:`skntp._progress.make_progress`); ``progress.close()`` is
        called when the run stops, if it exists.
    batched : bool, default=False
        The leading axis of every block indexes independent problems
        (*trials*, e.g. the 100- and 1000-trial sweeps of the papers) whose
        losses add up in ``objective`` (which may return the per-trial loss
        vector or its sum).  Every solver then runs each trial exactly as
        it would run alone: ``"ngd"`` normalizes each trial's slice of each
        block, a trial whose gradient norm reached ``tol`` stops moving, and
        ``loss``, ``grad_norm`` (and any per-trial ``metrics``) are recorded
        per trial.  The run stops when every trial has stopped, or for all
        trials when any becomes non-finite.  Not available for ``"regpath"``.
    starts : sequence of tuples of arrays, default=()
        ``"regpath"`` only: unit-norm parameter tuples ``e``; every radius is
        also solved from ``r e`` and the solution of lowest loss is kept (the
        previous solution's on ties; the
        path of a non-convex loss is the *global* minimizer at every radius,
        which a local method from the previous solution cannot certify).
        With ``starts``, the previous solution is scaled onto the sphere of
        radius ``r`` (Thm. 1: the solutions lie on the boundary).
    rescale : bool, default=False
        ``"regpath"`` only: divide the objective by its gradient norm at each
        start (a constant factor per solve, so the constrained minimizer is
        unchanged, while the stopping rule becomes relative to the
        gradient's scale, which is ``exp(-R * margin)`` at large radii).

    Returns
    -------
    OptimResult
    """
    size = getattr(objective, "work_size", None)
    with blas_threads(math.inf if size is None else size, xp):
        if solver == "regpath":
            if batched:
                raise ValueError("batched=True is not available for solver='regpath'.")
            return _regpath(objective, params0, xp=xp, radii=radii, tol=tol,
                            inner_max_iter=inner_max_iter, metrics=metrics, starts=starts,
                            rescale=rescale)
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}.")
        _check_real(mirror_p, "mirror_p", above=1.0)
        _check_real(power_t, "power_t", above=0.0, closed=True)
        _check_real(eps, "eps", above=0.0, closed=True)
        return _descend(objective, params0, xp=xp, solver=solver, lr=lr, max_iter=max_iter,
                        tol=tol, metrics=metrics, record_every=record_every,
                        options={"betas": betas, "eps": eps,
                                 "descent_norm": check_descent_norm(descent_norm),
                                 "mirror_p": float(mirror_p)},
                        power_t=power_t, project=project, progress=progress,
                        batched=batched)


def _finite(a):
    if isinstance(a, (int, float)):
        return math.isfinite(a)
    if isinstance(a, np.ndarray):
        return bool(np.isfinite(a).all())
    return bool(np.all(np.isfinite(to_numpy(a))))


def _descend(objective, params0, *, xp, solver, lr, max_iter, tol, metrics, record_every,
             options, power_t, project, progress, batched):
    """The descent solvers (:data:`DESCENT_SOLVERS`), for one problem or a batch of trials.

    Without a batch every per-trial quantity (gradient norms, the active
    flag) is a scalar, and the loop is the plain one.
    """
    params = tuple(params0)
    rec = _Recorder(metrics, record_every)
    t0 = time.perf_counter()

    def total_norm(gn):
        total = _total_norm(gn)
        return total if batched else float(total)

    def scalar(loss):  # what the history and the progress bar see
        return loss if batched else float(loss)

    loss, grads = objective(params)
    gn = _block_norms(xp, grads, batched)
    rec.record(0, params, scalar(loss), total_norm(gn), t0, force=True)
    loss0 = np.asarray(to_numpy(loss), dtype=float).copy()
    state = (([xp.zeros_like(p) for p in params], [xp.zeros_like(p) for p in params])
             if solver == "adam" else None)
    stop_reason, k = "max_iter", 0
    for k in range(1, max_iter + 1):
        total = total_norm(gn)  # a float, or per trial a NumPy vector
        active = total > tol
        if not (active.any() if batched else active):  # all zero first: tol=0 must not
            stop_reason, k = (  # hide a saturation
                "zero-gradient" if np.all(total == 0.0) else "tol"), k - 1
            break
        lr_k = lr / k**power_t if power_t else lr
        if solver != "ngd":
            norms = None
        elif batched:
            norms = [_per_trial(xp, np.where(n > 0, n, 1.0), g) for g, n in zip(grads, gn)]
        else:
            norms = [n if n > 0 else 1.0 for n in gn]
        # overflow is caught below and reported once, as one ConvergenceWarning
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            new = _step(xp, solver, params, grads, lr_k, norms, state, k, options, batched)
        if batched and not active.all():  # trials that reached tol stay where they are
            new = tuple(xp.where(_per_trial(xp, active, p) > 0, q, p)
                        for q, p in zip(new, params))
        if project is not None:
            new = project(new)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            new_loss, new_grads = objective(new)
        if not (_finite(new_loss) and all(_finite(a) for a in new)
                and all(_finite(g) for g in new_grads)):
            stop_reason, k = "non-finite", k - 1
            which = ("of a trial became non-finite at iteration {}; stopped every trial "
                     "and kept the last finite iterate" if batched else
                     "became non-finite at iteration {}; stopped and kept the last finite "
                     "iterate").format(k + 1)
            warnings.warn(
                f"{solver}: the loss, parameters or gradients {which}. lr={lr!r} is too "
                "large for this data's scale (the curvature of the loss grows with the "
                "square of the scale of the embeddings): lower lr, rescale the data, or "
                "use float64.",
                ConvergenceWarning,
                stacklevel=user_stacklevel(),
            )
            break
        params, loss, grads = new, new_loss, new_grads
        gn = _block_norms(xp, grads, batched)
        rec.record(k, params, scalar(loss), total_norm(gn), t0, force=(k == max_iter))
        if progress is not None:
            progress(k, scalar(loss), rec.last)
    else:
        k = max_iter
    _close_progress(progress)
    saturated = np.asarray(total_norm(gn)) == 0.0
    if k > 0 and saturated.any() and stop_reason != "non-finite":
        if batched:
            _warn_saturated(solver, k, None, params, n_trials=int(saturated.sum()))
        else:
            _warn_saturated(solver, k, float(loss), params)
    elif k == 0 and stop_reason == "zero-gradient" and np.all(loss0 > 0):
        warnings.warn(
            f"{solver}: the gradient is exactly zero at the initial point (loss "
            f"{float(np.max(loss0)):.3g}), so no first-order method can leave it: the data "
            "give every candidate the same score there, or the data are so small in "
            "scale that the gradient underflowed. Start elsewhere (init='random' or an "
            "array), or check and rescale the data.",
            ConvergenceWarning, stacklevel=user_stacklevel())
    if stop_reason == "max_iter" and k > 0 and solver != "adam":
        _warn_lr(solver, lr, k, loss0, np.asarray(to_numpy(loss), dtype=float))
    if rec.rows["iteration"][-1] != k:
        rec.record(k, params, scalar(loss), total_norm(gn), t0, force=True)
    return OptimResult(params, k, stop_reason in ("tol", "zero-gradient"), stop_reason,
                       rec.history())


def _warn_lr(solver, lr, k, loss0, loss):
    """ConvergenceWarning for a run whose loss rose, or did not move at all.

    Both mean that ``lr`` does not fit the curvature of the loss, which grows
    with the square of the data's scale: a rising loss (overshoot) for a step
    too long, an unchanged one (to the last digits) for a step so short that
    the run went nowhere.
    """
    risen = loss > loss0 * (1 + 1e-9) + 1e-300
    still = (np.abs(loss - loss0) <= 1e-12 * np.abs(loss0)) & (loss0 > 0)
    if risen.any():
        warnings.warn(
            f"{solver}: the loss rose from {float(np.max(loss0[risen])):.6g} to "
            f"{float(np.max(loss[risen])):.6g} over {k} iterations: lr={lr!r} is too "
            "large for the curvature of this loss (which grows with the square of the "
            "data's scale). Lower lr, or rescale the data.",
            ConvergenceWarning, stacklevel=user_stacklevel())
    elif still.any():
        warnings.warn(
            f"{solver}: the loss did not change over {k} iterations (it stayed at "
            f"{float(np.max(loss[still])):.6g}): lr={lr!r} is far too small for this "
            "loss (whose gradient shrinks with the data's scale). Raise lr, or rescale "
            "the data.",
            ConvergenceWarning, stacklevel=user_stacklevel())


def _warn_saturated(solver, k, loss, params, n_trials=None):
    """ConvergenceWarning for a gradient that underflowed to exactly zero.

    On separable data the iterates diverge in norm (the implicit-bias
    regime); once the softmax saturates at the working precision the
    gradient rounds to exactly zero and no solver can move any more.
    """
    dtype = str(getattr(params[0], "dtype", "float")).replace("torch.", "")
    advice = ("use dtype='float64' to go further" if "32" in dtype
              else "the iterate is at the limit of this precision")
    where = (f"for {n_trials} trial(s) by iteration {k}" if n_trials is not None
             else f"at iteration {k} (loss {loss:.3g})")
    warnings.warn(
        f"{solver}: the gradient underflowed to exactly zero {where}: the softmax is "
        f"saturated in {dtype}, so the iterates cannot move. Stopped; {advice}.",
        ConvergenceWarning,
        stacklevel=user_stacklevel(),
    )


def _project_ball(xp, params, radii):
    out = []
    for p, r in zip(params, radii):
        n = _norm(xp, p)
        out.append(p * (r / n) if n > r else p)
    return tuple(out)


def _solve_ball(objective, x, r, *, xp, tol, inner_max_iter, step):
    """``argmin_{||x_b|| <= r_b} objective`` from ``x``: accelerated projected gradient
    (FISTA with adaptive restart and backtracking).  Returns ``(x, converged, step)``.

    FISTA (Beck & Teboulle 2009): ``t_{k+1} = (1 + sqrt(1 + 4 t_k^2)) / 2`` and
    momentum ``(t_k - 1) / t_{k+1}``.  The step halves until the projected point
    ``c`` passes ``f(c) <= f(y) + <g, c - y> + ||c - y||^2 / (2 step)`` (ties and
    roundoff of ``1e-12 |f(y)|`` pass; the halving stops below ``1e-12``) and grows
    1.5x after each accepted step, so it can carry over between calls.  A step that
    raises ``f`` restarts the momentum from the last iterate (O'Donoghue & Candes
    2015).  Converged when the gradient mapping ``||c - y|| / step`` is at most
    ``max(tol, 1e-10)``.
    """
    y, t = x, 1.0
    fx = float(objective(x)[0])
    for _ in range(inner_max_iter):
        fy, gy = objective(y)
        fy = float(fy)
        while True:  # backtracking on the projected step
            cand = _project_ball(xp, tuple(a - step * g for a, g in zip(y, gy)), r)
            diff = tuple(c - a for c, a in zip(cand, y))
            fc = float(objective(cand)[0])
            quad = fy + sum(float(xp.sum(g * d)) for g, d in zip(gy, diff)) + sum(
                float(xp.sum(d * d)) for d in diff) / (2 * step)
            if fc <= quad + 1e-12 * abs(fy) or step < 1e-12:
                break
            step *= 0.5
        move = _norm_of_blocks(xp, diff) / step
        if fc > fx:  # adaptive restart
            y, t = x, 1.0
            if move <= max(tol, 1e-10):
                return x, True, step
            continue
        t_new = (1 + math.sqrt(1 + 4 * t * t)) / 2
        y = tuple(c + ((t - 1) / t_new) * (c - a) for c, a in zip(cand, x))
        x, fx, t = cand, fc, t_new
        step *= 1.5
        if move <= max(tol, 1e-10):
            return x, True, step
    return x, False, step


def _rescaled(objective, params, xp):
    """The objective divided by its gradient norm at ``params`` (1 if that is 0).

    The factor is at most ``2^1000``: ``1 / gn`` is infinite for gradient norms
    below 5.6e-309, which are representable (subnormal).
    """
    _, g = objective(params)
    gn = _norm_of_blocks(xp, g)
    scale = 1.0 / max(gn, 2.0**-1000) if gn > 0 else 1.0

    def scaled(ps):
        loss, grads = objective(ps)
        return loss * scale, tuple(x * scale for x in grads)

    return scaled


def _regpath(objective, params0, *, xp, radii, tol, inner_max_iter, metrics, starts,
             rescale):
    """The regularization path: :func:`_solve_ball` at each radius, warm-started."""
    if radii is None:
        raise ValueError("solver='regpath' needs radii.")
    radii = np.asarray(radii, dtype=float)
    if radii.ndim == 1:
        radii = radii[:, None]
    if radii.shape[1] == 1 and len(params0) > 1:
        radii = np.repeat(radii, len(params0), axis=1)
    rec = _Recorder(metrics, 1)
    t0 = time.perf_counter()
    params = _project_ball(xp, tuple(params0), radii[0])
    step = 1.0
    all_ok = True
    for i, r in enumerate(radii):
        if not starts and not rescale:  # one warm start; the step carries over
            params, ok, step = _solve_ball(objective, _project_ball(xp, params, r), r, xp=xp,
                                           tol=tol, inner_max_iter=inner_max_iter, step=step)
        else:
            nrm = _norm_of_blocks(xp, params)
            candidates = [tuple(p * (r[0] / nrm) for p in params) if nrm > 0 else params]
            candidates += [tuple(p * r[0] for p in e) for e in starts]
            best = None
            for start in candidates:
                obj = _rescaled(objective, start, xp) if rescale else objective
                x, ok_x, _ = _solve_ball(obj, _project_ball(xp, start, r), r, xp=xp, tol=tol,
                                         inner_max_iter=inner_max_iter, step=1.0)
                value = float(objective(x)[0])
                if best is None or value < best[0]:
                    best = (value, x, ok_x)
            _, params, ok = best
        all_ok &= ok
        loss, grads = objective(params)
        gn = _norm_of_blocks(xp, grads)
        rec.record(i, params, float(loss), gn, t0, force=True, radius=float(r[0]),
                   **({f"radius_{b}": float(rb) for b, rb in enumerate(r)} if len(r) > 1 else {}))
    return OptimResult(params, len(radii), all_ok, "tol" if all_ok else "max_iter",
                       rec.history())
