"""The estimator base: one fit, one limits step, one training call.

Every estimator of skntp fits a model two ways, *implicitly* (a first-order
method on the model's loss, through the one training loop
:func:`skntp._optim.minimize`) or *explicitly* (``solver="svm"``: the
max-margin limit that theory says the implicit fit converges to).  The
flow is the same for every model, and it is written here once:

1. ``_prepare(X, y, sample_weight)``: validate and shape the data (model);
2. ``_explicit_limits(data)``: solve the max-margin programs and the finite
   part (model), through :meth:`ImplicitBiasEstimator._solve_limit`, which
   shows the solve's progress and turns "not separable" and "too large for
   memory" into a warning (an error for ``solver="svm"``);
3. ``solver="svm"``: ``_limit_parameters(data, limits)``, the parameters at
   the limit at radius ``svm_radius`` (model; ``"auto"`` through
   :func:`saturation_radius`); otherwise ``_training(data, limits, be)``:
   the objective, start and metrics (model), run by :meth:`_train`;
4. ``_trained_limits(data, limits, params)``: the limits of what the parameters
   select (model; e.g. the max-margin directions of the tokens the trained
   attention selects), solved here through ``_solve_limit(..., required=False)``
   and returned in the limits, never in ``_fitted``; the default keeps ``limits``;
5. ``_fitted(data, limits, params, result)``: the fitted attributes (model),
   from the data and the limits only (no program is solved there).

:meth:`ImplicitBiasEstimator._fit` runs these steps *atomically*: the
estimator's previous fit is kept until the new one has succeeded, and
restored in full if it fails or is interrupted; a new fit replaces every
fitted attribute (none is left over from an earlier fit).
"""

from __future__ import annotations

import contextlib
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions

from ._backend import get_backend, scaled_norm, to_numpy
from ._optim import DESCENT_SOLVERS, OptimResult, check_descent_norm, limit_norm, minimize
from ._progress import close_progress, make_limit_progress, make_progress
from ._warnings import reemit, user_stacklevel
from .metrics import alignment, history_metrics
from .svm import NotSeparableError, ProgramTooLargeError, UndecidedError
from .svm._certificate import STATUSES
from .svm._problem import available_memory

__all__ = [
    "BACKEND_CONSTRAINTS",
    "SATURATION_NATS",
    "TRAINING_CONSTRAINTS",
    "ImplicitBiasEstimator",
    "Limits",
    "Training",
    "backend_of",
    "descent_parameters_doc",
    "finite_radius",
    "norm_name",
    "other_limit_directions",
    "saturation_radius",
]

#: Logit gap (nats) of ``svm_radius="auto"``: every non-selected output is at
#: least this far below the selected ones, so its probability is below ``e^-20``.
SATURATION_NATS = 20.0

BACKEND_CONSTRAINTS = {
    "backend": [StrOptions({"numpy", "torch"})],
    "device": [str, None],
    "dtype": [StrOptions({"float64", "float32"})],
    "svm_method": [str],
    "random_state": ["random_state"],
    "verbose": ["verbose"],
}

TRAINING_CONSTRAINTS = {
    "solver": [StrOptions({"gd", "ngd", "adam", "signgd", "nsd", "mirror", "nmirror",
                           "regpath", "svm"})],
    "lr": [Interval(Real, 0, None, closed="neither")],
    "power_t": [Interval(Real, 0, None, closed="left")],
    "eps": [Interval(Real, 0, None, closed="left")],
    "descent_norm": [StrOptions({"fro", "max", "l1", "spectral"}), tuple, list],
    "mirror_p": [Interval(Real, 1, None, closed="neither")],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "tol": [Interval(Real, 0, None, closed="left")],
    "record_every": [Interval(Integral, 1, None, closed="left")],
    "path_radii": ["array-like", None],
    "svm_radius": [StrOptions({"auto"}), Interval(Real, 0, None, closed="left")],
    "compute_limits": ["boolean"],
}


#: The docstring of the descent solvers' parameters, shared by every estimator
#: (:func:`descent_parameters_doc` puts it at the ``%(descent_parameters)s`` marker).
DESCENT_PARAMETERS_DOC = """    power_t : float, default=0.0
        Decay of the step of the descent solvers: ``lr / k**power_t`` at
        iteration ``k`` (0: constant; 0.5: ``lr / sqrt(k)``, the schedule of
        sign and spectral descent in Fan, Schmidt, Thrampoulidis 2025).
    eps : float, default=1e-8
        Adam's constant added to the root of the second moment.  ``eps = 0``
        is Adam without it, whose limit is the max-norm solution; with
        ``eps > 0`` the vanishing gradient lets ``eps`` dominate and the limit
        is the Frobenius one (:func:`skntp.diagnostics.limit_norm`).
    descent_norm : {"fro", "max", "l1", "spectral"} or ("lp", p), default="fro"
        The norm of ``solver="nsd"`` (normalized steepest descent):
        ``"spectral"`` is Muon's orthogonalized step ``U V^T``, ``"max"`` is
        sign descent, ``("lp", p)`` for ``1 < p < inf``.
    mirror_p : float, default=2.0
        ``p > 1`` of ``solver="mirror"`` and ``"nmirror"``: mirror descent with
        the potential ``(1/p) ||w||_p^p`` (2: GD and normalized GD).
"""


#: The docstring of ``record_every`` shared by the attention estimators, whose records
#: cost alike (:func:`descent_parameters_doc` puts it at the ``%(record_every)s``
#: marker; the decoder documents its own).
RECORD_EVERY_DOC = """    record_every : int, default=10
        Record the history every that many iterations (and always the first
        and the last).  Each record evaluates the metrics of ``history_``
        (alignment, projection onto the finite subspace, saturation, ...):
        0.4-1 gradient steps on the papers' small problems (measured for
        ``AttentionSelector``, ``JointAttentionSVM`` and
        ``NTPAttentionClassifier`` by ``benchmarks/record_every.py``), so
        every 10 iterations adds 10-20 % to the descent and every 50 under
        10 %.  Use 1 to record every iteration.
"""


def descent_parameters_doc(cls):
    """Class decorator: the estimator's docstring with :data:`DESCENT_PARAMETERS_DOC`
    (and :data:`RECORD_EVERY_DOC` where it has that marker)."""
    marker = "    %(descent_parameters)s\n"
    if cls.__doc__ is not None:  # (python -OO strips docstrings)
        if marker not in cls.__doc__:
            raise ValueError(f"{cls.__name__}'s docstring has no {marker.strip()} marker.")
        cls.__doc__ = (cls.__doc__.replace(marker, DESCENT_PARAMETERS_DOC)
                       .replace("    %(record_every)s\n", RECORD_EVERY_DOC))
    return cls


def backend_of(estimator):
    """The :class:`~skntp._backend.Backend` an estimator's parameters ask for."""
    return get_backend(estimator.backend, estimator.device, estimator.dtype)


def backend_kwargs(estimator):
    """``backend``, ``device``, ``dtype`` keywords for the max-margin core."""
    return {"backend": estimator.backend, "device": estimator.device,
            "dtype": estimator.dtype}


def default_radii(path_radii, start=0.5, stop=200.0, num=24):
    """The regularization path's grid: the user's radii or a geometric grid."""
    if path_radii is None:
        return np.geomspace(start, stop, num)
    radii = np.asarray(path_radii, dtype=float)
    if radii.ndim == 0:
        radii = radii[None]
    if radii.size == 0 or not np.all(np.isfinite(radii)) or np.any(radii <= 0):
        raise ValueError("path_radii must be a non-empty array of positive numbers.")
    if radii.ndim == 1 and np.any(np.diff(radii) < 0):
        raise ValueError("path_radii must be increasing.")
    if radii.ndim == 2 and np.any(np.diff(radii, axis=0) < 0):
        raise ValueError("path_radii must be increasing in every column.")
    return radii


def saturation_radius(direction_gaps, base_gaps=0.0, nats=SATURATION_NATS):
    """Smallest ``R`` with ``base + R * direction >= nats`` for every gap.

    ``svm_radius="auto"`` of every estimator: ``direction_gaps`` are the
    logit gaps (selected minus non-selected) of the unit max-margin
    direction, ``base_gaps`` those of the finite part (0 where the model has
    none), so at ``R`` every non-selected output is at least ``nats`` below
    the selected ones.  Gaps the direction does not separate (``<= 0``,
    e.g. ties it keeps) and infinite ones (nothing to separate) are ignored;
    ``0.0`` when none is left.

    The gaps have the data's units (``R`` their inverse): a radius beyond float64
    (gaps below about ``20 / 1.8e308``) raises ``FloatingPointError``, never an
    ``inf`` radius.
    """
    d = np.asarray(direction_gaps, dtype=float)
    b = np.broadcast_to(np.asarray(base_gaps, dtype=float), d.shape)
    keep = (d > 0) & np.isfinite(d) & np.isfinite(b)
    if not keep.any():
        return 0.0
    with np.errstate(over="ignore"):
        radius = float(max(0.0, np.max((nats - b[keep]) / d[keep])))
    return finite_radius(radius, f"the gaps of the unit direction (down to "
                                 f"{float(d[keep].min()):.3g})")


def finite_radius(radius, cause):
    """``radius`` of ``svm_radius="auto"``, or ``FloatingPointError`` naming ``cause``
    when it is beyond float64 (data of extreme units: the limit scales inversely)."""
    if not np.isfinite(radius):
        raise FloatingPointError(
            f"svm_radius='auto': the radius of the explicit limit overflows float64 "
            f"({cause}): the data's scores are too small for its parameters to be "
            "represented; rescale the data (the limits are scale-covariant), or pass a "
            "numeric svm_radius.")
    return radius


def unit(w):
    """``(w / ||w||, ||w||)``; ``(0, 0)`` for the zero array.

    The direction is computed from ``w / max|w|``, so it is exact even where
    ``||w||`` itself overflows float64 (then the norm is ``inf``).
    """
    w = np.asarray(w, dtype=float)
    top = float(np.max(np.abs(w))) if w.size else 0.0
    if top == 0.0:
        return np.zeros_like(w), 0.0
    if not np.isfinite(top):
        raise FloatingPointError("the direction of an array with NaN or infinity is undefined.")
    v = w / top
    r = float(np.linalg.norm(v))
    with np.errstate(over="ignore"):
        return v / r, top * r


def norm_name(norm):
    """``"max"``, ``"spectral"``, ``"l3"`` (for ``("lp", 3)``), ... in messages."""
    return norm if isinstance(norm, str) else f"l{norm[1]:g}"


def cosine(w, direction):
    """Cosine of ``w`` with ``direction`` (0 for a zero argument, nan without direction)."""
    if direction is None:
        return float("nan")

    return alignment(w, direction)


def other_limit_directions(limits):
    """``{"fro": W^fro}`` (``{}`` without it): the history's ``alignment_fro``, the
    alignment with the Frobenius limit whatever ``limit_norm_`` is
    (:func:`skntp.metrics.history_metrics`)."""
    directions = limits.attributes.get("limit_directions_") or {}
    fro = directions.get("fro")
    return {} if fro is None else {"fro": fro}


def trials_other_directions(limits):
    """:func:`other_limit_directions` of every trial, for the history of a batched run
    (a name every trial has)."""
    each = [other_limit_directions(lim) for lim in limits]
    return {name: [d[name] for d in each] for name in each[0]
            if all(name in d for d in each)}


class Limits:
    """The explicit limit of a model, as the base needs it.

    Parameters
    ----------
    direction : ndarray or None
        The unit max-margin direction (``mm_direction_``), ``None`` when the
        program is infeasible or was not solved.
    finite : ndarray or None, default=None
        The finite part the iterates converge to on the complementary
        subspace (``finite_component_``), ``None`` where the theory has none.
    projector : SubspaceProjector or None, default=None
        The projector onto the finite part's subspace.
    **attributes :
        Further fitted attributes (``mm_margin_``, ``svm_result_``, ...).
    """

    def __init__(self, direction=None, finite=None, projector=None, **attributes):
        self.direction = direction
        self.finite = finite
        self.projector = projector
        self.attributes = attributes


class Training:
    """What :meth:`ImplicitBiasEstimator._train` minimizes, and how.

    Parameters
    ----------
    objective : callable
        ``params -> (loss, grads)`` on the estimator's backend.
    params0 : tuple of ndarray
        The start.
    metrics : callable or None
        The history's per-record metrics (:func:`skntp.metrics.history_metrics`).
    lr : float, optional
        The step (the estimator's ``lr`` unless the model rescales it).
    radii : ndarray, optional
        The path's radii (``solver="regpath"``).
    starts, rescale :
        Options of the path (:func:`skntp._optim.minimize`).
    log_loss : bool, default=False
        The objective is ``log L``: the progress bar then shows ``L = exp(loss)``.
    """

    def __init__(self, objective, params0, metrics=None, *, lr=None, radii=None, starts=(),
                 rescale=False, log_loss=False):
        self.objective = objective
        self.params0 = params0
        self.metrics = metrics
        self.lr = lr
        self.radii = radii
        self.starts = starts
        self.rescale = rescale
        self.log_loss = log_loss


def _exp_loss(progress):
    """``progress`` shown ``exp(loss)`` (the loop runs on ``log L``); None stays None."""
    if progress is None:
        return None

    def shown(k, loss, row=None):
        return progress(k, np.exp(loss), row)

    shown.close = getattr(progress, "close", None)
    return shown


def _is_fitted_name(name):
    return (name.endswith("_") and not name.startswith("__")) or name in (
        "_fit_state",)


def reject_booleans(estimator):
    """Refuse ``True``/``False`` for a numeric parameter.

    ``bool`` is a subclass of ``int``, so scikit-learn's ``Interval(Integral, ...)``,
    ``Interval(Real, ...)`` and ``Integral`` constraints accept ``lr=True`` or
    ``max_iter=True`` as 1: almost surely a mistake, never what the user meant.
    """
    for name, constraints in getattr(estimator, "_parameter_constraints", {}).items():
        value = getattr(estimator, name, None)
        if not isinstance(value, (bool, np.bool_)):
            continue
        if any(c == "boolean" or c is bool for c in constraints):
            continue
        numeric = [c for c in constraints if isinstance(c, Interval)
                   or c in (Integral, Real)]
        if numeric:
            raise ValueError(f"{type(estimator).__name__}: {name} must be a number, not the "
                             f"boolean {value!r}.")


@contextlib.contextmanager
def atomic_fit(estimator):
    """Run a fit that either completes or leaves the estimator as it was.

    The previous fitted state is set aside first (so no attribute of an
    earlier fit survives the new one) and put back if the fit raises, or is
    interrupted (``KeyboardInterrupt``) at any line.  Both swaps replace the
    estimator's ``__dict__`` in one assignment, so no interrupt can leave it
    half-updated; the first happens inside the ``try``.
    """
    state = dict(vars(estimator))
    try:
        object.__setattr__(estimator, "__dict__",
                           {k: v for k, v in state.items() if not _is_fitted_name(k)})
        yield
    except BaseException:
        object.__setattr__(estimator, "__dict__", state)
        raise


class ImplicitBiasEstimator(BaseEstimator):
    """Base of the estimators: validate, solve the limits, fit, publish, atomically.

    Subclasses implement the model hooks (see the module docstring) and call
    :meth:`_fit` from their ``fit``.
    """

    # ------------------------------------------------------------------ fit
    def _fit(self, X, y=None, sample_weight=None):
        reject_booleans(self)
        with atomic_fit(self):
            be = backend_of(self)  # an unavailable device fails before any work
            data = self._prepare(X, y, sample_weight)
            if self.compute_limits or self.solver == "svm":
                limits = self._explicit_limits(data)
            else:
                limits = Limits()
            if self.solver == "svm":
                params, result = self._limit_parameters(data, limits), None
            else:
                training = self._training(data, limits, be)
                if getattr(self, "record_weights", False):
                    self._record_weights(training)
                result = self._train(training)
                params = tuple(np.asarray(to_numpy(p), dtype=np.float64)
                               for p in result.params)
            weights = None if result is None else result.history.pop("weights", None)
            limits = self._trained_limits(data, limits, params)
            self._fitted(data, limits, params, result)
            if getattr(self, "record_weights", False):
                self.trajectory_ = {"iteration": self.history_["iteration"].copy(),
                                    "weights": (params[0][None].copy() if weights is None
                                                else weights)}
        return self

    def _descent_options(self):
        """The options of the descent solvers (:func:`skntp._optim.minimize`)."""
        return {"eps": self.eps, "power_t": self.power_t, "mirror_p": self.mirror_p,
                "descent_norm": check_descent_norm(self.descent_norm)}

    def _parameter_norm(self):
        """The norm of gradient descent's limit on this model's parameterization."""
        return "fro"

    def _svm_method(self, norm):
        """The max-margin method of the program in ``norm``: ``svm_method`` for the
        limit norm's program, ``"auto"`` for the Frobenius program beside it
        (``alignment_fro``), which an LP or norm-specific method cannot solve."""
        return self.svm_method if norm == self._limit_norm() else "auto"

    def _trains_vectors(self):
        """Whether every trained parameter is a vector (no matrix norm applies)."""
        return False

    def _limit_norm(self):
        """The norm of the max-margin limit of the estimator's solver
        (:func:`skntp.diagnostics.limit_norm`): ``limit_norm_``.

        The spectral and nuclear norms of a vector are its Euclidean norm, so on a
        vector parameter spectral descent is normalized GD and its limit is the
        Frobenius (Euclidean) one."""
        norm = limit_norm(self.solver, self.descent_norm, self.mirror_p,
                          self._parameter_norm(), self.eps)
        if norm in ("spectral", "nuclear") and self._trains_vectors():
            return "fro"
        return norm

    def _limits_in_norms(self, program, solve, consequence, *, required=None, quiet=()):
        """The unit directions of one program's solutions in the limit norm and in Frobenius.

        Parameters
        ----------
        program, consequence : str
            As for :meth:`_solve_limit`.
        solve : callable
            ``solve(norm, callback) -> result`` with a ``primal`` (a
            :class:`~skntp.svm.MaxMarginResult`).
        required, quiet :
            As for :meth:`_solve_limit`.

        Returns
        -------
        directions : dict
            Norm -> unit-Frobenius direction, ``None`` when infeasible or too
            large (decided once: the constraints are the same in every norm).
        results : dict
            Norm -> the result.
        failure : Exception or None
            As for :meth:`_solve_limit`.
        """
        norms = list(dict.fromkeys([self._limit_norm(), "fro"]))
        directions, results, failure = {}, {}, None
        for norm in norms:
            name = program if norm == "fro" else f"{program} ({norm_name(norm)} norm)"
            res = None
            if failure is None:
                res, failure = self._solve_limit(
                    name, lambda cb, norm=norm: solve(norm, cb), consequence,
                    required=required, quiet=quiet)
            results[norm] = res
            directions[norm] = None if res is None else unit(res.primal)[0]
        return directions, results, failure

    def _record_weights(self, training):
        """Add the trained weights to every record of the history (``record_weights``).

        Refused before the run when the records would take more than a quarter
        of the available memory.
        """
        shape = np.shape(training.params0[0])
        steps = (len(training.radii) if training.radii is not None and self.solver == "regpath"
                 else self.max_iter // self.record_every + 2)
        need = float(steps) * float(np.prod(shape)) * 8
        if need > 0.25 * available_memory():
            raise ValueError(
                f"record_weights=True would keep {steps} weight matrices of shape {shape} "
                f"({need / 2**30:.3g} GiB, more than a quarter of the available memory); "
                "raise record_every, or lower max_iter.")
        metrics = training.metrics

        def with_weights(params):
            row = {} if metrics is None else dict(metrics(params))
            row["weights"] = np.array(to_numpy(params[0]), dtype=np.float64)
            return row

        training.metrics = with_weights

    def _solve_limit(self, program, solve, consequence, *, required=None,
                     failures=(NotSeparableError, ProgramTooLargeError, UndecidedError),
                     quiet=()):
        """``solve(callback)`` with a progress bar; infeasible, undecided, too large or
        not certified: warn.

        Every limit program of every estimator is solved through this method,
        so the policy on a failed solve is written once.  A
        :class:`~skntp.svm.MaxMarginResult` whose certificate did not come out
        ``"optimal"`` is never used (as if the solve had failed, whatever
        ``required`` says): one ConvergenceWarning names its status, and the
        estimator goes on without the limit.

        Parameters
        ----------
        program : str
            The program's name, shown by the progress bar.
        solve : callable
            ``solve(callback) -> result``; ``callback`` goes to
            :func:`skntp.svm.solve_max_margin`.
        consequence : str
            What a failure means for the fit (appended to the warning).
        required : bool, optional
            Whether the fit needs the solution, so that a failure raises;
            default: ``solver="svm"``.  The limits of what training selected
            (the ``_trained_limits`` step) are a diagnosis, never required.
        failures : tuple of exception types
            The exceptions that mean "no solution".
        quiet : tuple of exception types
            Failures that are an answer the fitted attributes already report
            (e.g. trained attention selected tokens that no key-query matrix
            separates: its ``selection_`` says so): no warning.

        Returns
        -------
        result : object or None
            ``None`` when the program has no solution here (an error when
            ``required``), or none that is certified.
        failure : Exception or None
            The exception behind a ``None`` result (a RuntimeError for an
            uncertified one).
        """
        required = self.solver == "svm" if required is None else required
        progress = make_limit_progress(self.verbose, desc=f"limit {program}")
        caught = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = solve(progress)
        except failures as exc:
            reemit(caught)
            if required:
                raise type(exc)(f"solver='svm' needs the {program} solution: {exc}") from exc
            if not isinstance(exc, quiet):
                warnings.warn(f"{str(exc).rstrip('.')}. {consequence}", UserWarning,
                              stacklevel=user_stacklevel())
            return None, exc
        finally:
            close_progress(progress)
        status = getattr(result, "status", "optimal")
        if status == "optimal":
            reemit(caught)
            return result, None
        # the dispatcher's "no answer could be certified" is folded into one warning
        reemit(w for w in caught if not issubclass(w.category, ConvergenceWarning))
        message = (
            f"{program}: no certified answer (status {status!r}: {STATUSES.get(status, '')}; "
            f"relative duality gap {result.gap:.2e}, largest constraint violation "
            f"{result.max_violation:.2e}), so it is not used. {consequence}")
        warnings.warn(message, ConvergenceWarning, stacklevel=user_stacklevel())
        return None, RuntimeError(message)

    def _train(self, training):
        """Run the one training loop with the estimator's solver parameters."""
        be = backend_of(self)
        regpath = self.solver == "regpath"
        radii = training.radii
        if regpath and radii is None:
            radii = default_radii(self.path_radii)
        return minimize(
            training.objective,
            tuple(be.asarray(p) for p in training.params0),
            xp=be.xp,
            solver=self.solver,
            lr=self.lr if training.lr is None else training.lr,
            max_iter=self.max_iter,
            tol=self.tol,
            **self._descent_options(),
            metrics=training.metrics,
            record_every=self.record_every,
            radii=radii,
            inner_max_iter=self.max_iter,
            starts=training.starts,
            rescale=training.rescale,
            # the regularization path reports no per-iteration progress
            progress=(None if regpath else
                      _exp_loss(make_progress(self.verbose, self.max_iter, desc=self.solver))
                      if training.log_loss else
                      make_progress(self.verbose, self.max_iter, desc=self.solver)),
        )

    @classmethod
    def _fit_trials(cls, estimators, datasets, **options):
        """Fit ``estimators[b]`` on ``datasets[b]`` in one batched run of the loop.

        Every trial is validated and gets its limits and its start as in
        ``fit``; the model's ``_batched_objective`` stacks the trials'
        objectives along a leading axis, the loop runs them together
        (``batched=True``: each trial follows its own iterates, recorded by
        the trials' metrics), and each estimator is published from its
        trial's slice of the run (atomically, as in ``fit``).
        """
        template = estimators[0]
        if template.solver not in DESCENT_SOLVERS:
            raise ValueError(
                f"batched trials run the descent solvers {DESCENT_SOLVERS}; got "
                f"solver={template.solver!r} (fit those trials one by one).")
        for est in estimators:  # as fit does (sklearn's _fit_context)
            est._validate_params()
            reject_booleans(est)
        be = backend_of(template)
        with contextlib.ExitStack() as stack:
            for est in estimators:
                stack.enter_context(atomic_fit(est))
            datas = [est._prepare(*data) for est, data in zip(estimators, datasets)]
            limits = [est._explicit_limits(data) if est.compute_limits else Limits()
                      for est, data in zip(estimators, datas)]
            objective = cls._batched_objective(datas, be, **options)  # checks the shapes
            starts = [est._training(data, lim, be).params0[0]
                      for est, data, lim in zip(estimators, datas, limits)]
            metrics = history_metrics(be, 0, [lim.direction for lim in limits],
                                      [lim.finite for lim in limits],
                                      [lim.projector for lim in limits], trials=True,
                                      other_directions=trials_other_directions(limits))
            training = Training(objective, (np.stack(starts),), metrics)
            result = minimize(
                training.objective, tuple(be.asarray(p) for p in training.params0),
                xp=be.xp, solver=template.solver, lr=template.lr, max_iter=template.max_iter,
                tol=template.tol, metrics=training.metrics, **template._descent_options(),
                record_every=template.record_every, batched=True)
            params = [np.asarray(to_numpy(p), dtype=np.float64) for p in result.params]
            for b, (est, data, lim) in enumerate(zip(estimators, datas, limits)):
                history = {k: (v[:, b] if v.ndim == 2 else v.copy())
                           for k, v in result.history.items()}
                trial = OptimResult(tuple(p[b] for p in params), result.n_iter,
                                    result.converged, result.stop_reason, history)
                est._fitted(data, est._trained_limits(data, lim, trial.params), trial.params,
                            trial)
        return estimators

    # ------------------------------------------------------- the model hooks
    def _prepare(self, X, y, sample_weight):  # pragma: no cover - abstract
        raise NotImplementedError

    def _explicit_limits(self, data):  # pragma: no cover - abstract
        raise NotImplementedError

    def _limit_parameters(self, data, limits):  # pragma: no cover - abstract
        raise NotImplementedError

    def _training(self, data, limits, be):  # pragma: no cover - abstract
        raise NotImplementedError

    def _trained_limits(self, data, limits, params):
        """The limits of what ``params`` select (step 4); by default ``limits``."""
        return limits

    def _fitted(self, data, limits, params, result):  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------ helpers
    def _initial(self, init, shape, rng, *, default, divisor, name="init"):
        """A start point: ``"zeros"``, ``"random"`` (standard normal entries divided by
        ``divisor``), an array, or ``default`` (one of those) for ``None``."""
        init = default if init is None else init
        if isinstance(init, str):
            if init == "zeros":
                return np.zeros(shape)
            if init == "random":
                return rng.standard_normal(shape) / divisor
            raise ValueError(f"{name} must be 'zeros', 'random' or an array, got {init!r}.")
        arr = np.asarray(init)
        if np.iscomplexobj(arr):
            raise ValueError(f"{name} must be real; got complex values.")
        arr = arr.astype(float)
        if arr.shape != tuple(shape):
            raise ValueError(f"{name} must have shape {tuple(shape)}, got {arr.shape}.")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} contains NaN or infinity.")
        return arr.copy()

    def _set_limit_attributes(self, limits, coef, names=()):
        """Publish a matrix model's limits and ``coef_``: ``mm_direction_``,
        ``finite_component_``, ``mm_margin_``, ``svm_result_``, ``limit_norm_``,
        ``limit_directions_``, the model's own ``names`` from ``limits.attributes``,
        and ``alignment_`` (of ``coef_`` minus the finite part, with ``mm_direction_``)."""
        self.mm_direction_, self.finite_component_ = limits.direction, limits.finite
        self.limit_norm_ = self._limit_norm()
        self.limit_directions_ = limits.attributes.get("limit_directions_", {})
        self.mm_margin_ = limits.attributes.get("mm_margin_", float("nan"))
        self.svm_result_ = limits.attributes.get("svm_result_")
        for name in names:
            setattr(self, name, limits.attributes.get(name))
        self.coef_ = coef
        W = coef if limits.finite is None else coef - limits.finite
        self.alignment_ = cosine(W, limits.direction)

    @staticmethod
    def _svm_history(loss, params, **extra):
        """The one-record history of ``solver="svm"``."""
        w = np.concatenate([np.ravel(p) for p in params])
        out = {"iteration": np.array([0.0]), "loss": np.array([float(loss)]),
               "norm": np.array([scaled_norm(w)])}
        out.update({k: np.array([float(v)]) for k, v in extra.items()})
        return out

