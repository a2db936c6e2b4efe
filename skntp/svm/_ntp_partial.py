"""NTP limits on data that are not NTP-separable: the separable rows and the two limits.

Thrampoulidis (2024) proves the limit ``W* + R W^mm/||W^mm||`` when the data are
NTP-separable (Def. 3.2), which ``d > m`` makes almost sure.  With ``d < m``, the
regime of real models, the NTP-SVM (4a)-(4b) is infeasible.  Its Sec. 6 points to
the binary case (Ji & Telgarsky 2019, "The implicit bias of gradient descent on
nonseparable data"), whose decomposition carries over to the NTP loss (2) as
follows.  Write the margin rows ``r_{jv}(W) = (e_{z_j} - e_v)^T W h_j`` for
``v not in S_j`` (``z_j`` an anchor of ``S_j``).

* The recession cone of the loss (2): ``K = {D : (e_z - e_z')^T D h_j = 0 for
  z, z' in S_j,  r_{jv}(D) >= 0 for v not in S_j}``; along ``D in K`` the loss
  never increases, and it decreases exactly through the rows with ``r_{jv}(D) > 0``.
* The separable rows ``I``: the rows that some ``D in K`` makes strictly positive.
  ``K`` is a convex cone, so one ``D`` does it for all of ``I`` at once, and every
  other row (``N``) is zero on all of ``K``.  One linear program finds ``I``
  (:func:`ntp_separability`).
* The direction ``W^mm_I = argmin ||W||_F`` s.t. in-support equalities,
  ``r_{jv}(W) >= 1`` on ``I`` and ``r_{jv}(W) = 0`` on ``N``
  (:func:`partial_ntp_svm_problem`): the NTP-SVM of the separable rows, in the
  orthogonal complement of ``F_I = span{(e_a - e_b) h_j^T : a, b in S_j u N_j}``
  (``N_j`` the non-separable tokens of context ``j``).
* The finite part ``W_fin = argmin_{W in F_I} CE_I(W)``, ``CE_I`` the loss (2)
  with the separable tokens dropped from every softmax
  (:func:`partial_finite_component`).  ``CE_I`` is strictly convex on ``F_I`` and
  coercive there (a recession direction inside ``F_I`` would, added to a large
  multiple of ``W^mm_I``, be a point of ``K`` positive on a row of ``N``), so
  ``W_fin`` exists and is unique.
* Expected: ``W_k ~ log(k) W^mm_I + W_fin`` for gradient descent, and the same
  along the regularization path.  Proven for binary labels (Ji & Telgarsky 2019,
  Thm. 1.1, direction rate ``O(ln ln t / ln t)``); for NTP it is the natural
  extension, measured by the package's tests on fresh random instances.  When
  every out-of-support row is separable (``N`` empty), ``F_I = F`` and these are
  Thm. 4.1's ``W^mm`` and ``W*`` (with NTP_H-compatibility, ``CE_I`` restricted to
  the supports is minimized by the solution of eq. (3)).

Both limits come with their certificate: ``W^mm_I`` with the max-margin core's
(violation and duality gap), ``W_fin`` with the gradient of ``CE_I`` at it, and the
two together certify ``I``: a feasible ``W^mm_I`` proves every row of ``I``
separable, and the stationarity of ``W_fin`` (its softmax is positive on every
row of ``N``) proves every row of ``N`` non-separable.
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.sparse as sp
import scipy.sparse.linalg

from .._backend import (
    blas_threads,
    clip_above_,
    exp_,
    get_backend,
    row_chunks,
    row_dots,
    to_numpy,
)
from .._warnings import user_stacklevel
from ..losses._contexts import ContextProducts, word_blocks
from ._certificate import ROW_ULPS
from ._newton import GradientStall, newton_cg
from ._ntp import (
    _TOO_LARGE_ADVICE,
    _anchors,
    _check_contexts,
    exchangeable_tokens,
    orthonormal_contexts,
    spanning_proof,
)
from ._ntp_cycles import CycleCertificate, check_cycle_certificate, cycle_certificate
from ._ntp_sparse import SparseRestrictedLoss, sparse_enough
from ._problem import (
    BilinearScores,
    Constraints,
    MaxMarginProblem,
    NotSeparableError,
    ProgramTooLargeError,
    available_memory,
    check_program_size,
)

if TYPE_CHECKING:  # (the labels' module checks its tables with this one's functions)
    from ._ntp_labels import LabelCertificate

__all__ = ["NOT_SEPARABLE_MARGIN", "SEPARABILITY_TOL", "FiniteComponent", "NTPSeparability",
           "certify_split", "complete_stationary_split", "far_point_split",
           "farkas_row_bounds",
           "finite_side_problem", "image_vanishes", "no_row_is_separable", "ntp_separability",
           "partial_finite_component", "partial_ntp_svm_problem",
           "separable_row_gaps", "stationary_separability", "table_multipliers"]

_log = logging.getLogger("skntp.svm")

#: The largest ``m * V * d`` for which :func:`ntp_separability` tries the
#: stationary-point proof: 5 s at m = 3,889, V = 298, d = 32 (3.7e7) on 2 cores
#: (``benchmarks/ntp_separability.py``); at 1e9 it ran for minutes.
MAX_PROOF_WORK = 200_000_000

#: The work budget (Hessian products times ``m V d``) of the preconditioned Newton-CG
#: of :func:`partial_finite_component` with ``max_products="auto"``: about five minutes
#: on 2 cores (a product is two ``m x d x V`` matrix products).
MAX_FIN_WORK = 4e12

#: Newton steps between two computations of the per-token preconditioner of
#: :func:`partial_finite_component` (each costs more than a step's CG products).
REFRESH_EVERY = 2

#: The relative gradient norm below which :func:`no_row_is_separable` tries its
#: proof at each Newton step.
NEAR_STATIONARY = 1e-6

#: The separable side's tolerance, on an orthonormal basis of the contexts' span
#: (:func:`orthonormal_contexts`): the rows of ``I`` are certified separable by a
#: direction that meets every other row of the recession cone to this fraction of
#: its smallest margin on them (the relative violation of a certified optimum).
SEPARABILITY_TOL = 1e-8

#: The other side's: a row is certified not separable when a Farkas table bounds
#: every recession direction's margin on it by this fraction of ``||D|| ||a_jv||``,
#: on the same basis (:func:`farkas_row_bounds`).  A table's bound on a row is its
#: image's size (rounding, ~1e-17 of the table's mass) over the row's entry, so rows
#: whose softmax probability at the stationary point is tiny get weak bounds: on
#: real text (3,889 contexts, V = 298) the weakest is 1.1e-6 and the 99th
#: percentile 1.8e-9; with tokens never next (400 contexts, V = 50, probabilities
#: down to 1.5e-8) the weakest is 1.6e-6.  The linear program's multipliers, which
#: weigh every row off ``I`` by at least 1, bound them by about 1e-13.  So "not
#: separable" is certified to this precision, not to the NTP-SVM dispatcher's Farkas
#: test (``FARKAS_MARGIN``, 1e-11): a row separable only by a normalized margin below
#: it can be certified not separable (three contexts (1, 0), (-1, 1e-8), (0, 1), one
#: support token each: all separable, by 5e-9; two certified not, bounds 1e-8).
NOT_SEPARABLE_MARGIN = 1e-5

#: Seconds HiGHS is given to solve the separability program to 1e-10 before its
#: default tolerances take over.
QUICK_SOLVE = 10.0

#: The largest linear program (out-of-support rows after merging exchangeable
#: tokens) that :func:`ntp_separability` hands to HiGHS by default: about 5 s on
#: 2 cores at 8,000 rows of real text (``benchmarks/ntp_separability.py``).
MAX_LP_ROWS = 20_000

#: The work (passes over the constraints times their count times the contexts' rank)
#: after which the NTP-SVM of a candidate separable side stops undecided
#: (:func:`_separable_side`; the decoder's NTP-SVM of every row where its split is
#: undecided too, :func:`side_passes`): a candidate that holds a row that is not
#: separable makes that program infeasible, which the first-order methods of
#: ``"auto"`` may not prove within their default 100,000 passes.  The medium
#: real-text case (971 contexts, V = 291, rank 128: 281,590 constraints) certifies its
#: ``W^mm_I`` in 1,337 passes (4.8e10, 7.7 s); its candidate of every row ran 400 s
#: without an answer, and at 2,140 contexts x 566 tokens (1.2 M constraints, 14 ms a
#: pass) over 7 minutes.
MAX_SIDE_WORK = 1e11


@dataclass
class NTPSeparability:
    """Which margin rows ``(j, v)``, ``v not in S_j``, some recession direction separates.

    Attributes
    ----------
    separable : ndarray of shape (m, V), bool
        ``separable[j, v]``: the row ``(j, v)`` is in ``I`` (False on the supports).
    support : ndarray of shape (m, V), bool
        The supports ``S_j``.
    method : str
        ``"rank"`` (linearly independent contexts: every row separable, Lemma 1 of
        the NTP paper's Sec. 3; or no row at all), ``"positive spanning"`` (no row
        separable, :func:`~skntp.svm.spanning_proof`, certified by a stationary
        point), ``"stationary point"`` (a stationary point's table:
        :func:`no_row_is_separable`, :func:`stationary_separability`, and with the
        rows it leaves open certified separable, :func:`complete_stationary_split`;
        or the table of the rows a far iterate holds, :func:`far_point_split`),
        ``"analytic center"`` (no row separable, the table of the margin polytope's
        analytic center: :func:`~skntp.svm.analytic_center_separability`) or
        ``"highs"`` (the linear program).
    direction : ndarray of shape (V, d) or None
        A point of the recession cone, positive on every row of ``I``, for the
        contexts divided by their largest entry (``None`` unless a program ran:
        the linear program, or the NTP-SVM of :func:`complete_stationary_split`; or
        the projected far iterate of :func:`far_point_split`).
    status : {"certified", "undecided"}
        ``"certified"``: every row of ``I`` is certified separable (``direction``,
        or linearly independent contexts) and every other row certified not
        separable (``farkas``); ``"undecided"``: some row is neither (the split
        is the candidate that was found).
    farkas : ndarray of shape (m, V) or None
        The Farkas table of the rows certified not separable
        (:func:`farkas_row_bounds`): ``-pi_j (softmax_j - p_j)`` at a stationary
        point of the loss restricted to the rows off ``I``, on an orthonormal
        basis of the contexts' span, or the gradient's table of the barrier whose
        minimizer is the analytic center (``method="analytic center"``).
    certified : ndarray of shape (m, V), bool or None
        The out-of-support rows whose side is certified (``None``: all of them).
    cycles : CycleCertificate or None
        Exact Farkas tables of rows not separable at any width, from closed walks of
        contexts that share coordinates (:func:`~skntp.svm.cycle_certificate`),
        besides ``farkas``; ``None`` where none was found or none was looked for.
    cycle_rows : ndarray of shape (m, V), bool or None
        The rows ``cycles`` certify, as :func:`~skntp.svm.check_cycle_certificate`
        recomputed them from the contexts (margin exactly zero on the recession cone).
    labels : LabelCertificate or None
        Farkas tables of the program of the contexts' labels, with ``cycle_rows`` as
        ties (:func:`~skntp.svm.label_certificate`): rows not separable at any width
        that tables of three or more tokens prove; ``None`` where none was found or
        none was looked for.
    label_rows : ndarray of shape (m, V), bool or None
        The rows ``labels`` certify beyond ``cycle_rows``, as
        :func:`~skntp.svm.check_label_certificate` recomputed them.
    """

    separable: np.ndarray
    support: np.ndarray
    method: str
    direction: np.ndarray | None = None
    status: str = "certified"
    farkas: np.ndarray | None = None
    certified: np.ndarray | None = None
    cycles: CycleCertificate | None = None
    cycle_rows: np.ndarray | None = None
    labels: LabelCertificate | None = None
    label_rows: np.ndarray | None = None

    @property
    def structure_rows(self):
        """The rows that ``cycles`` and ``labels`` certify (``None`` where neither
        certified any)."""
        found = [r for r in (self.cycle_rows, self.label_rows) if r is not None]
        if not found:
            return None
        return np.logical_or.reduce(found)

    @property
    def n_rows(self):
        """The number of out-of-support rows."""
        return int(self.support.size - np.count_nonzero(self.support))

    @property
    def n_separable(self):
        """The number of separable rows ``|I|``."""
        return int(np.count_nonzero(self.separable))

    @property
    def n_undecided(self):
        """The number of out-of-support rows whose side is not certified."""
        if self.certified is None:
            return 0
        return int(np.count_nonzero(~self.support & ~self.certified))

    @property
    def fraction(self):
        """``|I|`` over the number of out-of-support rows (1.0 when there are none)."""
        return self.n_separable / self.n_rows if self.n_rows else 1.0

    @property
    def is_separable(self):
        """Every out-of-support row separable: the data are NTP-separable (Def. 3.2)."""
        return self.n_separable == self.n_rows

    @property
    def separable_contexts(self):
        """``(m,)`` bool: every out-of-support row of the context is separable."""
        return np.all(self.separable | self.support, axis=1)


#: The largest ``m * V`` held as dense (m, V) masks (50 MB of bools).
MAX_MASK_ENTRIES = 50_000_000


def _dense_support(support):
    if support.shape[0] * support.shape[1] > MAX_MASK_ENTRIES:
        raise ProgramTooLargeError(
            f"the separability diagnosis keeps (m, V) masks; m * V = "
            f"{support.shape[0] * support.shape[1]} is above {MAX_MASK_ENTRIES}. Use fewer "
            "contexts or a smaller vocabulary.")
    support = support_mask(support)
    if not np.all(support.any(axis=1)):
        raise ValueError("every context needs at least one in-support token.")
    return support


def support_mask(probs):
    """``probs != 0`` as a dense bool mask (from a sparse matrix without a dense float
    copy: that is 2.5 GB at m = 105,782, V = 2,990)."""
    if not sp.issparse(probs):
        return np.asarray(probs).astype(bool)
    if not probs.has_canonical_format:  # (stored entries that cancel are not in it)
        probs = sp.csr_matrix(probs, copy=True)
        probs.sum_duplicates()
    mask = np.zeros(probs.shape, dtype=bool)
    mask[probs.nonzero()] = True
    return mask


#: Below this relative uncertainty of the contexts' span (:func:`_span_uncertainty`)
#: a Farkas table's claims are not asked to survive it: rows whose margin could flip
#: by such a perturbation are below 1e-5 of :data:`NOT_SEPARABLE_MARGIN`, while the
#: robust bound weakens every row whose table entry is small (on 400 contexts of
#: condition 2 with tokens never next, the weakest from 1.6e-6 to 2e-4).
SPAN_UNCERTAINTY_FLOOR = 1e-10


def _span_uncertainty(Q, cond):
    """The relative perturbation of the contexts that their float64 span leaves open,
    ``r eps cond`` (0 below :data:`SPAN_UNCERTAINTY_FLOOR`, contexts of condition
    below about 1e5): a Farkas table's claims must survive it
    (:func:`farkas_row_bounds`)."""
    blur = Q.shape[1] * np.finfo(float).eps * cond
    return blur if blur >= SPAN_UNCERTAINTY_FLOOR else 0.0


def _refutation_margin(blur):
    """The margin bound that certifies a row not separable for data whose span is known
    to ``blur``: :data:`NOT_SEPARABLE_MARGIN`, or ``blur ** (1/3)`` where that is
    larger (ill-conditioned contexts).  The bound already holds for every data within
    ``blur`` (:func:`farkas_row_bounds`), the well-conditioned data before rounding
    included; the looser threshold only admits the weaker bounds that this
    robustness costs (about 1e-3 at condition 1e8), a third of the way (in orders of
    magnitude) from the data's precision to 1."""
    return max(NOT_SEPARABLE_MARGIN, blur ** (1.0 / 3.0))


def farkas_row_bounds(contexts, support, table, *, perturbation=0.0):
    """The margin bound that a Farkas table proves for every out-of-support row.

    A table ``T`` (m, V) combines the rows of the recession cone ``K`` (module
    docstring): with its rows summed to zero on an anchor of each support and
    ``E = T^T H``, every ``D in K`` has
    ``sum_{v not in S_j} (-T[j, v]) r_{jv}(D) = <D, E>``, and every term on the left is
    ``>= 0`` where ``T <= 0``.  So each row with ``T[j, v] < 0`` has, for every ``D``
    in ``K``,

    .. math::

        \\frac{r_{jv}(D)}{\\|D\\| \\, \\|a_{jv}\\|} \\le
        \\frac{\\|E\\| + \\sum_{T_{ik} > 0} T_{ik} \\|a_{ik}\\| + \\delta}
        {-T[j, v] \\, \\|a_{jv}\\|},

    ``a_{jv}`` the row's coefficients (``||a_jv|| = sqrt(2) ||h_j||``), positive
    off-support entries counted against it and ``delta`` a rounding allowance: one
    unit of roundoff of the image's magnitude, ``eps || |T|^T |H| ||`` (the
    computed image of a projected table is of that order; the worst case of
    ``m``-term sums, ``m`` times more, would leave no row of a large table
    certified), and the row sums left after the anchor's correction, times the
    contexts' norms.  With ``perturbation=epsilon`` the bound holds for every set of
    contexts within ``epsilon ||h_j||`` of these, each (the image moves by at most
    ``epsilon sum_j ||T_j|| ||h_j||``): for data whose span float64 knows only to
    that precision (ill-conditioned contexts), a row that only the rounding of the
    data keeps from being separable is not called non-separable.
    :func:`ntp_separability` applies it on an orthonormal basis of the contexts'
    span, where the bound does not depend on the conditioning of the contexts, and
    certifies a row not separable when it is at most :data:`NOT_SEPARABLE_MARGIN`
    (or the cube root of the data's precision, when that is larger).

    Parameters
    ----------
    contexts : ndarray of shape (m, d)
    support : ndarray of shape (m, V), bool
    table : ndarray of shape (m, V)
    perturbation : float, default=0.0
        The relative uncertainty of each context.

    Returns
    -------
    ndarray of shape (m, V)
        The bound of every out-of-support row (``inf`` where ``T >= 0``, and on the
        supports).

    Notes
    -----
    One pass over the table by chunks of rows for the sums, one more for the
    bounds: no ``(m, V)`` temporary besides the result (a table is 2.5 GB at
    m = 105,782, V = 2,990).
    """
    bounds = np.full(support.shape, np.inf)
    for rows, chunk in _row_bounds(contexts, support, table, perturbation):
        bounds[rows] = chunk
    return bounds


def _refuted_rows(contexts, support, table, margin, perturbation=0.0):
    """The out-of-support rows that ``table`` certifies not separable: their
    :func:`farkas_row_bounds` at most ``margin`` (a mask, computed by chunks of rows
    without the bounds' table)."""
    refuted = np.zeros(support.shape, dtype=bool)
    for rows, chunk in _row_bounds(contexts, support, table, perturbation):
        refuted[rows] = chunk <= margin
    return refuted


@dataclass
class _TableImage:
    """The sums over a table's rows that its checks need (:func:`_table_image`)."""

    image: np.ndarray      # T^T H, of the zero-summed table
    magnitude: float       # || |T|^T |H| ||
    rounding: float        # _table_image's rounding allowance
    against: float         # sum of positive off-support entries times ||a_jv||
    spread: float          # sum_j ||T_j|| ||h_j||


def _table_image(H, support, table):
    """One pass by chunks of rows over the zero-summed table (:func:`_zero_sum`).

    ``rounding`` is the allowance for the computed ``T^T H``: one unit of roundoff of
    its magnitude, and the row sums left after the anchor's correction (``c_j`` times
    each, ``|c_j| <= ||D|| ||h_j||``).
    """
    m, V = support.shape
    hn = np.linalg.norm(H, axis=1)
    image = np.zeros((V, H.shape[1]))
    magnitude = np.zeros((V, H.shape[1]))
    left = against = spread = 0.0
    for start, stop in row_chunks(m, V):
        rows = slice(start, stop)
        T = _zero_sum(table[rows], support[rows])
        Hc = H[rows]
        image += T.T @ Hc
        magnitude += np.abs(T).T @ np.abs(Hc)
        left += float(np.abs(T.sum(axis=1, dtype=np.longdouble)).astype(float) @ hn[rows])
        against += float(np.sum(T, axis=1, where=~support[rows] & (T > 0)) @ hn[rows])
        spread += float(np.linalg.norm(T, axis=1) @ hn[rows])
    size = float(np.linalg.norm(magnitude))
    return _TableImage(image, size, np.finfo(float).eps * size + left,
                       math.sqrt(2.0) * against, spread)


def _row_bounds(contexts, support, table, perturbation):
    """:func:`farkas_row_bounds` by chunks of rows: a generator of ``(rows, bounds)``."""
    H = np.asarray(contexts, dtype=float)
    top = float(np.max(np.abs(H), initial=0.0))
    m, V = support.shape
    if top == 0.0 or m == 0:
        yield slice(0, m), np.full((m, V), np.inf)
        return
    H = H / top
    terms = _table_image(H, support, table)
    numerator = float(np.linalg.norm(terms.image)) + terms.against + terms.rounding
    if perturbation:
        numerator += perturbation * terms.spread
    a = math.sqrt(2.0) * np.linalg.norm(H, axis=1)
    for start, stop in row_chunks(m, V):
        rows = slice(start, stop)
        T = _zero_sum(table[rows], support[rows])
        bounds = np.full(T.shape, np.inf)
        np.multiply(T, -a[rows, None], out=T)
        with np.errstate(divide="ignore"):
            np.divide(numerator, T, out=bounds, where=~support[rows] & (T > 0))
        yield rows, bounds


def _zero_sum(table, support):
    """A copy of ``table`` with each row summed to zero on its anchor's entry (the sums
    in extended precision, where the platform has it)."""
    T = np.array(table, dtype=float)
    T[np.arange(T.shape[0]), _anchors(support)] -= T.sum(axis=1, dtype=np.longdouble)
    return T


def image_vanishes(contexts, support, table):
    """Whether the table's image ``T^T H`` on the contexts themselves (not a basis)
    vanishes: ``||T^T H|| <= SEPARABILITY_TOL || |T|^T |H| ||`` above its rounding.

    The check of a table found on an orthonormal basis against the program's own rows.
    """
    H = np.asarray(contexts, dtype=float)
    top = float(np.max(np.abs(H), initial=0.0))
    if top == 0.0:
        return False
    terms = _table_image(H / top, support, table)
    return bool(float(np.linalg.norm(terms.image))
                <= SEPARABILITY_TOL * terms.magnitude + terms.rounding)


def table_multipliers(constraints, support, table):
    """The multipliers of a program's rows (NTP-SVM, :func:`partial_ntp_svm_problem`)
    that a Farkas table ``T`` (m, V) stands for: ``T[j, z]`` on an equality
    ``(z, z_j)``, ``-T[j, v]`` on a row ``(z_j, v)`` (``z_j`` the anchor); the anchor's
    entry is implied by the zero row sum."""
    c = constraints
    anchor = _anchors(support)
    on_ref = anchor[c.block] == c.ref
    return np.where(on_ref, table[c.block, c.pos], -table[c.block, np.maximum(c.ref, 0)])


def side_passes(n_constraints, rank):
    """The passes (``max_iter``) that :data:`MAX_SIDE_WORK` gives a program of
    ``n_constraints`` rows on contexts of rank ``rank``: between 100 and 100,000."""
    return int(min(100_000, max(100, MAX_SIDE_WORK / max(n_constraints * rank, 1))))


def _separable_side(Q, support, separable):
    """The NTP-SVM of the rows ``separable`` (:func:`partial_ntp_svm_problem`) on the
    contexts ``Q``, by :func:`~skntp.svm.solve_max_margin` within :data:`MAX_SIDE_WORK`:
    its primal when certified optimal (a point of the cone with margin 1 on them),
    else ``None``."""
    from ._solve import solve_max_margin

    problem = partial_ntp_svm_problem(Q, NTPSeparability(separable, support, "highs"))
    passes = side_passes(len(problem.constraints), Q.shape[1])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an uncertified answer is simply not used
            res = solve_max_margin(problem, max_iter=passes)
    except (NotSeparableError, RuntimeError):
        return None
    return res.primal if res.status == "optimal" else None


def _certified_separable_side(Q, support, separable, blur, ftol=0.0, direction=None):
    """``(proven, direction)``: the rows of ``separable`` certified by ``direction`` (a
    candidate point of the cone on the contexts ``Q``), or where it certifies none, by
    the certified optimum of their own NTP-SVM (:func:`_separable_side`).

    The check (:func:`_separable_rows_certified`) allows the span's uncertainty
    ``blur`` and the candidate's own tolerance ``ftol`` (ten times each), and asks
    a normalized margin of at least ``sqrt(blur)``: for ill-conditioned contexts, rows
    separable only by a margin at the square root of the span's precision are not
    certified (the rounding may have made them)."""
    tol, least = max(SEPARABILITY_TOL, 10.0 * blur, 10.0 * ftol), math.sqrt(blur)
    proven = _separable_rows_certified(Q, support, separable, direction, tol, least)
    if separable.any() and not proven.any():
        try:
            direction = _separable_side(Q, support, separable)
        except ProgramTooLargeError:  # (not certified, as any program without an answer)
            return proven, None
        proven = _separable_rows_certified(Q, support, separable, direction, tol, least)
    return proven, direction


def _on_contexts(contexts, Q, direction):
    """A direction on the orthonormal contexts ``Q``, on ``contexts`` (``D_H h_j = D_Q
    q_j``); ``None`` stays ``None``."""
    if direction is None:
        return None
    return np.linalg.lstsq(contexts, Q @ direction.T, rcond=None)[0].T


def _margin_floor(Q, support, direction):
    """The rounding error of every margin ``(e_a - e_v)^T D q_j`` (``a`` the anchor of
    ``S_j``): ``ROW_ULPS`` ulps of ``|q_j|^T |d_v|`` plus those of ``|q_j|^T |d_a|``."""
    scale = ROW_ULPS * np.finfo(float).eps * (np.abs(Q) @ np.abs(direction).T)
    return scale + scale[np.arange(len(Q)), _anchors(support)][:, None]


def _separable_rows_certified(Q, support, separable, direction, tol=SEPARABILITY_TOL,
                              min_margin=0.0):
    """Which rows of ``separable`` the direction certifies, on the contexts ``Q``.

    ``D`` (``direction`` for the contexts ``Q``) divided by its smallest margin on
    those rows must meet the rest of the recession cone's rows as any certified
    solution meets its program's (violation at most ``tol`` of the margin, above the
    rounding floor): in-support logits equal, the other rows ``>= 0``; and its
    normalized margin on them (over ``||D|| sqrt(2) ||q_j||``) must be at least
    ``min_margin`` (a separation that the rounding of ill-conditioned data could
    have made is not one).  Every margin on them must also be above its own rounding
    error (the floor below, before normalization): a margin of ``2e-14`` from logits of
    size ``1e4`` has no sign.  Returns a mask: every row of ``separable``, or none.
    """
    none = np.zeros_like(separable)
    if direction is None or not separable.any():
        return none
    L = Q @ direction.T
    anchor = L[np.arange(len(Q)), _anchors(support)]
    gaps = anchor[:, None] - L
    smallest = float(gaps[separable].min())
    if not smallest > 0:
        return none
    floor = _margin_floor(Q, support, direction)
    if not np.all(gaps[separable] > floor[separable]):
        return none
    if min_margin:
        j = np.nonzero(separable)[0]
        normalized = gaps[separable] / (float(np.linalg.norm(direction)) * math.sqrt(2.0)
                                        * np.linalg.norm(Q, axis=1)[j])
        if not float(normalized.min()) >= min_margin:
            return none
    floor /= smallest
    gaps = gaps / smallest
    eq_ok = np.all(np.abs(gaps[support]) <= tol + floor[support])
    rest = ~support & ~separable
    rest_ok = np.all(gaps[rest] >= -(tol + floor[rest]))
    return separable.copy() if (eq_ok and rest_ok) else none


def ntp_separability(contexts, support, *, method="auto", max_rows=MAX_LP_ROWS,
                     stationary_point=True):
    """Find the separable margin rows ``I`` of NTP data, and certify both sides.

    The split is found on an orthonormal basis ``Q`` of the contexts' span
    (:func:`orthonormal_contexts`; separability is invariant under ``H -> H A``), and
    reported as ``"certified"`` only when both sides verify: the rows of ``I`` by a
    point of the recession cone positive on them (``direction``, checked row by row),
    the other rows by a Farkas table (``farkas``, the stationary point of the loss
    restricted to them, checked by :func:`farkas_row_bounds` on the contexts
    themselves).  Otherwise ``status="undecided"``, with a warning, and
    ``certified`` marks the rows that did verify.

    The linear program (in ``W`` of shape (V, r), one common in-support logit ``c_j``
    per context and one ``s_{jv}`` per out-of-support row)::

        max  sum s_{jv}   s.t.  w_z^T q_j = c_j            (z in S_j)
                                w_v^T q_j <= c_j - s_{jv}  (v not in S_j)
                                0 <= s_{jv} <= 1

    Cheaper answers come first.  Linearly independent contexts: every row is
    separable (Lemma 1 of the NTP paper's Sec. 3).  No row separable, the common
    case of real text with ``d << m``: the contexts of the frequent tokens
    positively span the basis's space (:func:`spanning_proof`, a few non-negative
    least squares of ``d`` rows; each is a Gordan certificate whose residual is
    checked against the smallest singular value of its points, with its rounding,
    and whose weights must keep it robust at the tolerance
    :data:`NOT_SEPARABLE_MARGIN`),
    or the loss has a minimizer whose table certifies every row
    (:func:`no_row_is_separable`, tried when ``m * V * d`` is at most 2e8), or, where
    Newton finds that minimizer but its table's entries are too small for float64,
    the analytic center of the margin polytope certifies every row
    (:func:`~skntp.svm.analytic_center_separability`; on 161 contexts of real text,
    13,642 rows, 0.1 s where the program takes 52 s).  Otherwise the program decides.

    Its feasible ``W`` are the recession cone ``K`` of the loss (2) (see the
    module docstring), scaled.  As ``K`` is a cone, a ``W`` in it makes every
    row of ``I`` at least 1, so the optimum is ``s = 1`` on ``I`` and 0 on the
    rest, and ``I = {s_{jv} > 1/2}`` exactly.  Tokens with identical support
    columns (:func:`~skntp.svm.exchangeable_tokens`) share their rows, an exact
    reduction: the cone is symmetric under their exchange, so the average of a
    maximal ``W`` and its exchange is maximal too.

    Parameters
    ----------
    contexts : array-like of shape (m, d)
        Distinct context embeddings ``h_j``.
    support : array-like or sparse matrix of shape (m, V)
        ``support[j, v]`` nonzero when ``v in S_j`` (probabilities may be passed).
    method : {"auto", "highs"}, default="auto"
        ``"auto"``: the rank, the spanning contexts, the stationary point, the
        analytic center, then the program;
        ``"highs"``: the program alone.
    max_rows : int, default=20_000
        The largest program solved (out-of-support rows after the reduction).
        HiGHS takes seconds at this size on real text and grows much faster than
        linearly beyond it.
    stationary_point : bool, default=True
        Whether ``"auto"`` tries the stationary point.  A caller that minimizes the
        loss over every row anyway (the decoder's ``W_fin``) certifies with that
        minimizer's table (:func:`stationary_separability`) and passes False where
        the program is too large: the same Newton solve is not run twice.

    Returns
    -------
    NTPSeparability

    Raises
    ------
    ProgramTooLargeError
        When the program has more than ``max_rows`` rows, or ``m * V`` is above
        50 million (the masks are dense).
    RuntimeError
        If neither HiGHS's choice of method nor its interior point solves the
        program (it is always feasible and bounded).
    """
    contexts, support = _check_contexts(contexts, support)
    support = _dense_support(support)
    m, V = support.shape
    d = contexts.shape[1]
    # the rows' signs do not depend on the units of the contexts: solve in unit scale
    top = float(np.max(np.abs(contexts), initial=0.0))
    contexts = contexts / top if top > 0 else contexts
    if method not in ("auto", "highs"):
        raise ValueError(f"method must be 'auto' or 'highs', got {method!r}.")
    if not (~support).any():  # every context's support is the vocabulary: no row
        return NTPSeparability(~support, support, "rank")
    Q, cond = orthonormal_contexts(contexts, return_condition=True)
    blur = _span_uncertainty(Q, cond)
    if method == "auto" and Q.shape[1] == m:
        # linearly independent contexts: every logit table is W Q^T for some W
        return NTPSeparability(~support, support, "rank")
    none = np.zeros_like(support)
    if Q.shape[1] == 0:  # every context is zero: every W is a stationary point
        return NTPSeparability(none, support, "stationary point",
                               farkas=_table_at_zero(support))
    if method == "auto":
        start = time.perf_counter()
        spans = spanning_proof(Q, support, robustness=1.0 / _refutation_margin(blur))
        _log.info("separability of %d contexts x %d tokens (d=%d): %s in %.2f s", m, V, d,
                  "no row separable, by spanning contexts" if spans else
                  "the contexts' cones do not prove it", time.perf_counter() - start)
        if spans:
            return NTPSeparability(none, support, "positive spanning")
    if method == "auto" and stationary_point and m * V * d <= MAX_PROOF_WORK:
        start = time.perf_counter()
        minimizer = {}
        table = _stationary_table(Q, contexts, support, ~none, perturbation=blur,
                                  minimizer=minimizer)
        _log.info("separability of %d contexts x %d tokens (d=%d): %s in %.2f s", m, V, d,
                  "no row separable, by a stationary point" if table is not None
                  else "no certifying stationary point", time.perf_counter() - start)
        if table is not None:
            return NTPSeparability(none, support, "stationary point", farkas=table)
        # a minimizer whose table float64 cannot check: the analytic center's can
        found = _center_module().center_after_the_loss(contexts, support, Q.shape[1],
                                                       minimizer)
        if found is not None:
            return found
        _log.info("separability of %d contexts x %d tokens (d=%d): the linear program "
                  "decides", m, V, d)
    separable, direction, lp_table, ftol = _separability_program(Q, support, max_rows)
    # (the program's point may miss the cone by more than its tolerance: HiGHS meets
    # its tolerance on its scaled rows; or its margin may be small for its norm)
    proven, direction = _certified_separable_side(Q, support, separable, blur, ftol,
                                                  direction)
    rest = ~support & ~separable
    # the program's multipliers are a Farkas table of the rows off I (-1 or less on
    # them), up to HiGHS's tolerance: projected, and checked; the rows they leave
    # open get the stationary point of the loss without I
    table = lp_table - Q @ (Q.T @ lp_table)
    table[separable] = np.minimum(table[separable], 0.0)
    refuted = np.zeros_like(support)
    if rest.any() and image_vanishes(contexts, support, table):
        refuted = rest & _refuted_rows(Q, support, table, _refutation_margin(blur), blur)
    if (rest & ~refuted).any():
        second = _stationary_table(Q, contexts, support, ~separable, require="some",
                                   perturbation=blur)
        if second is not None:
            refuted |= rest & _refuted_rows(Q, support, second, _refutation_margin(blur),
                                            blur)
            if not refuted[rest].all() or not image_vanishes(contexts, support, table):
                table = second
    certified = proven | refuted
    status = "certified" if np.all(certified | support) else "undecided"
    if status == "undecided":
        n_open = int(np.count_nonzero(~support & ~certified))
        warnings.warn(
            f"ntp_separability: undecided. Of the {int(np.count_nonzero(~support))} "
            f"out-of-support rows, {n_open} are neither certified separable (a recession "
            "direction positive on them) nor certified not separable (a Farkas table); "
            "the split reported is the linear program's, uncertified.", UserWarning,
            stacklevel=user_stacklevel())
    return NTPSeparability(separable, support, "highs", _on_contexts(contexts, Q, direction),
                           status=status,
                           farkas=table, certified=certified)


def _center_module():
    """:mod:`skntp.svm._ntp_center` (the analytic center; it imports this module, so it
    is imported on first use)."""
    from . import _ntp_center

    return _ntp_center


def _program_rows(support):
    """The rows of :func:`ntp_separability`'s program: the out-of-support rows after
    merging exchangeable tokens (``support`` dense or sparse)."""
    representative, _, _ = exchangeable_tokens(support)
    if sp.issparse(support):
        inside = sp.csc_matrix(support, dtype=bool)[:, representative].count_nonzero()
    else:
        inside = np.count_nonzero(np.asarray(support, dtype=bool)[:, representative])
    return support.shape[0] * representative.size - int(inside)


def _separability_program(Q, support, max_rows):
    """The linear program of :func:`ntp_separability` on the contexts ``Q``: returns
    ``(separable, direction, table, tol)``, the direction of shape (V, r), the table
    (m, V) of its multipliers (``<= -1`` on the rows off ``I``: a Farkas table) and
    the feasibility tolerance it was solved to."""
    m, r = Q.shape
    representative, token_class, _ = exchangeable_tokens(support)
    reduced = support[:, representative]
    Vc = reduced.shape[1]
    # (counted before the rows' indices exist: 2.3e7 of them on the Python documentation)
    n_out = reduced.size - int(np.count_nonzero(reduced))
    if n_out > max_rows:
        raise ProgramTooLargeError(
            f"the separability program has {n_out} out-of-support rows (after merging "
            f"exchangeable tokens), more than max_rows={max_rows}. Use fewer contexts or "
            f"a smaller vocabulary, or raise max_rows (HiGHS time grows fast with the "
            f"rows).")
    j_out, v_out = np.nonzero(~reduced)
    anchor = _anchors(reduced)
    j_in, z_in = np.nonzero(reduced)
    keep = z_in != anchor[j_in]
    j_in, z_in = j_in[keep], z_in[keep]
    n_w = Vc * r

    # w_v^T q_j - w_{z_j}^T q_j (+ s_{jv}): anchored rows, no level variable
    A_eq = _anchored_rows(Q, anchor, j_in, z_in, n_w + n_out)
    A_ub = _anchored_rows(Q, anchor, j_out, v_out, n_w + n_out, n_w + np.arange(n_out))
    cost = np.concatenate([np.zeros(n_w), -np.ones(n_out)])
    # the cone is scaled to margins s <= 1, so W is bounded there: a box of 1e4
    # (contexts of at most unit norm: margins down to about 1e-4 of ||W||) keeps HiGHS
    # from the numerical rays it reported as "unbounded"; at 1e6 its scaling failed
    # ("status 15") on near-duplicate contexts that it solved boxed at 1e4 or not at all
    def boxed(size):
        return np.array([(-size, size)] * n_w + [(0.0, 1.0)] * n_out)
    # HiGHS's own choice (the dual simplex) to 1e-10, for a direction certifiable at
    # SEPARABILITY_TOL, for at most QUICK_SOLVE seconds (at 1e-10 it ended in "Solve
    # error", or ran for a minute on transformers' hidden states); at its default
    # tolerances (1e-7) where that fails; its interior point where the simplex fails
    # (on 400 random contexts, d = 20, V = 50, 19,600 rows, the simplex stopped after
    # 75 s with "Not Set" and the interior point solved it in 26 s, quiet)
    attempts = (("highs", {"primal_feasibility_tolerance": 1e-10,
                           "dual_feasibility_tolerance": 1e-10, "time_limit": QUICK_SOLVE}, 1e4),
                ("highs", {}, 1e4), ("highs", {}, np.inf), ("highs-ipm", {}, 1e4))
    for solver, options, box in attempts:
        start = time.perf_counter()
        res = scipy.optimize.linprog(cost, A_ub=A_ub, b_ub=np.zeros(n_out),
                                     A_eq=A_eq if j_in.size else None,
                                     b_eq=np.zeros(j_in.size) if j_in.size else None,
                                     bounds=boxed(box), method=solver, options=options)
        _log.info("separability program (%d rows, %d variables): %s %s in %.2f s", n_out,
                  A_ub.shape[1], solver, res.message, time.perf_counter() - start)
        ftol = options.get("primal_feasibility_tolerance", 1e-7)
        if res.status == 0:
            break
    else:
        # HiGHS's three attempts failed (ill-conditioned contexts whose rounding leaves
        # the program near-degenerate): Clarabel's interior point, through cvxpy
        failed = res.message
        res, ftol = _clarabel_lp(cost, A_ub, A_eq if j_in.size else None, boxed(1e4)), 1e-7
        if res is None:
            raise RuntimeError(f"HiGHS did not solve the separability program ({failed}), "
                               "nor did Clarabel.")
    s = res.x[n_w:]
    separable_reduced = np.zeros((m, Vc), dtype=bool)
    separable_reduced[j_out, v_out] = s > 0.5
    direction = res.x[:n_w].reshape(Vc, r)[token_class]
    # the multipliers: a table over the classes (rows of w_u: sum_j T[j, u] q_j = 0;
    # the anchor's entry closes each row's sum), each class's entry shared by its tokens
    table = np.zeros((m, Vc))
    table[j_out, v_out] = res.ineqlin.marginals
    if j_in.size:
        table[j_in, z_in] = res.eqlin.marginals
    table[np.arange(m), anchor] = -table.sum(axis=1)
    counts = np.bincount(token_class)
    return (separable_reduced[:, token_class], direction, (table / counts)[:, token_class],
            ftol)


def _table_at_zero(support):
    """The table ``-pi (softmax - p)`` at ``W = 0`` (uniform weights and probabilities on
    the supports): a Farkas table of every row when every context is zero."""
    m, V = support.shape
    return -(1.0 / V - support / support.sum(axis=1, keepdims=True)) / m


def _clarabel_lp(cost, A_ub, A_eq, bounds):
    """``min cost^T x`` s.t. ``A_ub x <= 0``, ``A_eq x = 0``, bounds, by Clarabel through
    cvxpy: an object with ``x``, ``ineqlin.marginals`` and ``eqlin.marginals`` signed as
    :func:`scipy.optimize.linprog`'s, or ``None`` when Clarabel gives no solution."""
    import cvxpy as cp

    from .solvers.conic import CONIC_BYTES_PER_NONZERO

    nnz = A_ub.nnz + (A_eq.nnz if A_eq is not None else 0)
    if CONIC_BYTES_PER_NONZERO * nnz > 0.8 * available_memory():
        # (past the memory Clarabel aborts the process, or the system kills it)
        _log.info("separability program: its conic form (%d nonzeros) would not fit in "
                  "memory; Clarabel not tried", nnz)
        return None
    x = cp.Variable(cost.size)
    cons = [A_ub @ x <= 0] + ([A_eq @ x == 0] if A_eq is not None else [])
    problem = cp.Problem(cp.Minimize(cost @ x),
                         cons + [x >= bounds[:, 0], x <= bounds[:, 1]])
    try:
        with warnings.catch_warnings():
            # "Solution may be inaccurate": the direction and the multipliers are
            # certified afterwards
            warnings.simplefilter("ignore", UserWarning)
            problem.solve(solver=cp.CLARABEL)
    except cp.error.SolverError:
        return None
    if problem.status != cp.OPTIMAL or x.value is None:
        return None
    eq = -cons[1].dual_value if A_eq is not None else np.zeros(0)
    result = scipy.optimize.OptimizeResult
    return result(x=np.asarray(x.value), status=0, message="Clarabel",
                  ineqlin=result(marginals=-np.asarray(cons[0].dual_value)),
                  eqlin=result(marginals=np.asarray(eq)))


def _loss_table(Z, probs, pi, Q, allowed=None, project=True):
    """The table ``T = -pi (softmax - p)`` of the loss (2) at the logits ``Z`` (m, V),
    in ``Z``'s buffer (overwritten), its image ``Q^T T`` projected off the orthonormal
    contexts ``Q`` by chunks of rows (with ``project``).

    With ``allowed``, the softmax runs over the allowed tokens of each row only (the
    loss restricted to them), and the entries off ``allowed``, the projection's
    rounding, are clipped to ``<= 0`` (a Farkas table's sign there).  ``probs`` is
    dense or sparse; at m = 105,782, V = 2,990 a table is 2.5 GB, so nothing else of
    that shape is allocated."""
    if allowed is not None:
        Z[~allowed] = -np.inf
    Z -= Z.max(axis=1, keepdims=True)
    np.exp(Z, out=Z)
    Z /= Z.sum(axis=1, keepdims=True)
    Z *= -pi[:, None]
    if sp.issparse(probs):
        j, v = probs.nonzero()
        Z[j, v] += pi[j] * np.asarray(probs[j, v]).ravel()
    else:
        Z += pi[:, None] * probs
    return _project_off(Z, Q, allowed) if project else Z


def _project_off(T, Q, allowed=None):
    """``T - Q (Q^T T)`` in ``T``'s buffer, by chunks of rows (the image of a table
    removed on the orthonormal contexts ``Q``); entries off ``allowed``, the
    projection's rounding there, clipped to ``<= 0``."""
    image = Q.T @ T
    for start, stop in row_chunks(*T.shape):
        T[start:stop] -= Q[start:stop] @ image
    if allowed is not None:
        off = ~allowed
        T[off] = np.minimum(T[off], 0.0)
    return T


#: The relative gradient below which the loss's Newton is taken to have found a
#: minimizer (the sign that no row is separable, under which the analytic center is
#: tried): the decoder's ``W_fin`` reaches 7.7e-13 on the real text of 2,140 contexts.
CONVERGED_BELOW = 1e-9


def _stationary_table(Q, contexts, support, allowed, *, max_iter=100, require="all",
                      perturbation=0.0, minimizer=None):
    """The Farkas table of a stationary point of the loss restricted to ``allowed``.

    Newton-CG on the loss (2) with uniform weights and probabilities on the
    supports and the tokens off ``allowed`` dropped from each softmax, on the
    orthonormal contexts ``Q``.  At a minimizer ``T = -pi (softmax - p)`` is a
    Farkas table for every allowed out-of-support row; at an approximate one its
    image ``T^T Q`` is removed by projection (``T - Q (Q^T T)``, exact on an
    orthonormal basis, where ``pinv(H^T H)`` on ill-conditioned contexts is not).
    The table is checked at every Newton step once the relative gradient is below
    ``1e-6``: its image on ``contexts`` must vanish (:func:`image_vanishes`), its
    entries off the supports must be negative, and, row by row,
    :func:`farkas_row_bounds` on ``Q`` is compared with :data:`NOT_SEPARABLE_MARGIN`.
    The attempt ends when it certifies what ``require`` asks, or when five such
    steps have not halved the gradient (the loss's precision is reached, or the
    iterates drift along a separable direction).

    Parameters
    ----------
    require : {"all", "some", "image"}
        ``"all"``: every allowed out-of-support row certified; ``"some"``: the
        table that certifies the most rows; ``"image"``: a table whose image
        vanishes and whose entries off the supports are negative (a program's
        Farkas multipliers, which the dispatcher checks as a whole).
    perturbation : float, default=0.0
        Of :func:`farkas_row_bounds`.
    minimizer : dict, optional
        Receives ``"converged"``: whether Newton's relative gradient went below
        :data:`CONVERGED_BELOW` (the loss has a minimizer, to float64's precision).

    Returns
    -------
    ndarray of shape (m, V) or None
        The table, ``None`` when it does not certify what ``require`` asks.
    """
    m, V = support.shape
    r = Q.shape[1]
    rows = allowed & ~support
    if not rows.any():
        return np.zeros((m, V)) if require == "all" else None
    P = support / support.sum(axis=1, keepdims=True)
    scale = max(float(np.max(np.linalg.norm(Q, axis=1))), np.finfo(float).tiny)
    watch = {"table": None, "count": 0}
    stalled = GradientStall()
    n_rows = int(np.count_nonzero(rows))

    def table_at(w):
        return _loss_table(Q @ w.reshape(V, r).T, P, np.full(m, 1.0 / m), Q, allowed)

    def attempt(w):
        T = table_at(w)
        if not image_vanishes(contexts, support, T):
            return False
        if require == "image":
            if not np.all(T[rows] < 0):
                return False
            watch["table"] = T
            return True
        proven = rows & _refuted_rows(Q, support, T, _refutation_margin(perturbation),
                                      perturbation)
        count = int(np.count_nonzero(proven))
        if count > watch["count"]:
            watch["table"], watch["count"] = T, count
        return count == n_rows

    def report(k, g, w):
        if g > NEAR_STATIONARY * scale:
            return
        if attempt(w) or stalled(g):
            raise StopIteration

    _, w, _ = _restricted_newton(Q, P, np.full(m, 1.0 / m), allowed, tol=1e-13,
                                 max_iter=max_iter, cg_iter=200, max_products="auto",
                                 report=report)
    if minimizer is not None:
        minimizer["converged"] = stalled.best <= CONVERGED_BELOW * scale
    if attempt(w) or (require == "some" and watch["count"] > 0):
        return watch["table"]
    return None


def no_row_is_separable(contexts, support, *, max_iter=100):
    """Prove that no margin row is separable, by a stationary point of the loss, or fail.

    A row ``(j, v)`` is not separable when some table ``T`` (m, V) has
    ``sum_j T[j] h_j^T = 0``, rows summing to zero, entries ``<= 0`` off the
    supports and ``T[j, v] < 0`` (Farkas' lemma on the cone ``K``).  At a
    minimizer of the loss (2) (uniform weights and probabilities on the
    supports: any positive ones do), ``T = -pi (softmax - p)`` is such a table for
    every row at once.  Newton-CG finds an approximate minimizer on an orthonormal
    basis of the contexts' span (:func:`orthonormal_contexts`); the table's image
    is removed there exactly, and the proof holds when its image on the contexts
    themselves vanishes (:func:`image_vanishes`) and :func:`farkas_row_bounds`, on
    the basis, bounds the normalized margin of every row by
    :data:`NOT_SEPARABLE_MARGIN`.  The proof is tried
    at every Newton step once the relative gradient is below ``1e-6``; the attempt
    ends when it holds, or when five such steps have not halved the gradient
    (Newton's quadratic phase has stalled: the loss's precision is reached, or the
    iterates drift along a separable direction).

    Parameters
    ----------
    contexts : ndarray of shape (m, d)
    support : ndarray of shape (m, V), bool
    max_iter : int, default=100
        Newton steps, at most.

    Returns
    -------
    bool
        True: proven, no row is separable.  False: not proven (some row may be).
    """
    contexts, support = _check_contexts(contexts, support)
    support = _dense_support(support)
    top = float(np.max(np.abs(contexts), initial=0.0))
    if top == 0.0:
        return False
    contexts = contexts / top
    Q, cond = orthonormal_contexts(contexts, return_condition=True)
    return _stationary_table(Q, contexts, support, np.ones_like(support), max_iter=max_iter,
                             perturbation=_span_uncertainty(Q, cond)) is not None


def stationary_separability(contexts, support, finite, next_token_probs, context_weights=None):
    """The split of a stationary point: no row separable, certified by ``W_fin``'s table.

    When ``finite`` (:func:`partial_finite_component` with every row allowed) is a
    minimizer of the loss (2), its table ``T = -pi (softmax - p)`` is a Farkas table
    of every out-of-support row (Farkas' lemma on the recession cone, module
    docstring): projected off an orthonormal basis of the contexts' span, checked
    against the contexts themselves (:func:`image_vanishes`) and row by row
    (:func:`farkas_row_bounds`).  Of the table as computed and the table projected
    off the basis, the one that certifies more rows: projection removes the image that
    an unconverged minimizer leaves, but its rounding reaches every entry, so at a
    minimizer converged to the loss's precision the table as computed (whose image
    is the gradient) certifies rows of smaller probability (on real text at 2,140
    contexts x 566 tokens, 37,333 rows against 17,839).  The scalable side of
    :func:`ntp_separability`:
    one pass over the ``(m, V)`` table after the Newton solve that the finite part
    needs anyway, where the linear program is out of reach.  Where that table leaves
    rows open and the contexts share coordinates (concatenated word vectors), the
    exact tables of closed walks of contexts certify the rows they force
    (:func:`~skntp.svm.cycle_certificate`, in ``cycles``; on the Python
    documentation at d = 768, 13,750 rows where the table certifies none), then the
    tables of the program of their labels, which couple more tokens
    (:func:`~skntp.svm.label_certificate`, in ``labels``, where ``m V`` is at most
    :data:`MAX_MASK_ENTRIES`; 1,404 rows more there).

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    support : ndarray of shape (m, V), bool
    finite : FiniteComponent
        ``W_fin`` over every row.
    next_token_probs : ndarray or sparse matrix of shape (m, V)
    context_weights : array-like of shape (m,), optional

    Returns
    -------
    NTPSeparability
        No row separable, ``method="stationary point"``: ``status="certified"``
        with its table in ``farkas`` (and ``cycles``, ``labels``), or ``"undecided"`` with the
        rows it did certify in ``certified``.
    """
    H, probs = _check_contexts(contexts, next_token_probs, "next_token_probs")
    P = sp.csr_matrix(probs, dtype=float)
    P = sp.csr_matrix(sp.diags(1.0 / np.asarray(P.sum(axis=1)).ravel()) @ P)
    m = P.shape[0]
    pi = (np.full(m, 1.0 / m) if context_weights is None
          else np.asarray(context_weights, float) / np.sum(context_weights))
    top = _power_of_two_scale(H)
    H = H / top
    Q, cond = orthonormal_contexts(H, return_condition=True)
    blur = _span_uncertainty(Q, cond)
    none = np.zeros_like(support)
    rows = ~support

    def certified_by(T):
        if not image_vanishes(H, support, T):
            return np.zeros_like(support)
        return rows & _refuted_rows(Q, support, T, _refutation_margin(blur), blur)

    # (one table at a time: at m = 105,782, V = 2,990 a table is 2.5 GB)
    T = _loss_table((H * top) @ finite.W.T, P, pi, Q, project=False)
    refuted = certified_by(T)
    if not refuted[rows].all():
        projected = certified_by(_project_off(T, Q))
        if np.count_nonzero(projected) >= np.count_nonzero(refuted):
            refuted = projected
        else:  # (the table as computed, again)
            del T
            T = _loss_table((H * top) @ finite.W.T, P, pi, Q, project=False)
    exact = exact_rows = labels = label_rows = None
    if not refuted[rows].all():
        # (rows whose probabilities float64 cannot hold, where the contexts share
        # coordinates: exact tables, no rounding)
        exact = cycle_certificate(H, support)
        if len(exact):
            exact_rows = check_cycle_certificate(H, support, exact)
            refuted |= exact_rows
        else:
            exact = None
    if not refuted[rows].all() and support.size <= MAX_MASK_ENTRIES:
        # (the tables that couple three or more tokens, on the same structure; its
        # module checks its tables with this one's functions)
        from ._ntp_labels import check_label_certificate, label_certificate

        labels = label_certificate(H, support, equal=exact_rows)
        if len(labels):
            label_rows = check_label_certificate(H, support, labels, equal=exact_rows)
            refuted |= label_rows
        else:
            labels = None
    found = {"farkas": T, "cycles": exact, "cycle_rows": exact_rows, "labels": labels,
             "label_rows": label_rows}
    if refuted[rows].all():
        return NTPSeparability(none, support, "stationary point", **found)
    return NTPSeparability(none, support, "stationary point", status="undecided",
                           certified=refuted, **found)


def complete_stationary_split(contexts, found):
    """The rows a stationary point's table leaves open, certified separable if they are.

    On partly separable data the loss over every row has no minimizer: Newton goes far
    out, where the separable rows' probabilities fall toward 0 (Ji & Telgarsky 2019) and
    the table of :func:`stationary_separability` is close to that of the loss without
    them, so it certifies the rows that are not separable and leaves the others open.
    The open rows are the candidate ``I``: their NTP-SVM (:func:`partial_ntp_svm_problem`,
    the certified rows held at 0), solved on an orthonormal basis of the contexts, is a
    point of the recession cone positive on them when certified optimal, checked row by
    row as :func:`ntp_separability` checks its own (:func:`_separable_rows_certified`).

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    found : NTPSeparability
        An undecided :func:`stationary_separability`.

    Returns
    -------
    NTPSeparability
        The split certified both ways (``method="stationary point"``, ``separable`` the
        open rows, ``farkas`` the table, ``direction`` the point of the cone); or
        ``found`` itself when the open rows are not all certified separable (their
        NTP-SVM infeasible, undecided or too large for the memory).
    """
    support = found.support
    candidate = ~support & ~found.certified if found.certified is not None else None
    if found.status == "certified" or candidate is None or not candidate.any():
        return found
    H = np.asarray(contexts, dtype=float)
    top = float(np.max(np.abs(H), initial=0.0))
    H = H / top if top > 0 else H
    Q, cond = orthonormal_contexts(H, return_condition=True)
    proven, direction = _certified_separable_side(Q, support, candidate,
                                                  _span_uncertainty(Q, cond))
    if not proven.any():
        return found
    return NTPSeparability(candidate, support, "stationary point",
                           _on_contexts(H, Q, direction), farkas=found.farkas,
                           certified=found.certified | proven, cycles=found.cycles,
                           cycle_rows=found.cycle_rows, labels=found.labels,
                           label_rows=found.label_rows)


#: Probabilities at a far iterate of the loss over every row above which
#: :func:`far_point_split` takes a row as not separable (the first candidate), and below
#: which, at the minimizer of the loss restricted to the candidates, it moves a row to
#: the separable side: on real text (971 contexts, V = 291, d = 128) the 90 rows that
#: are not separable keep their probabilities along Newton's iterates (89 above 1e-3,
#: one at 10^-3.05, held once its margin on the other side had no sign), while the
#: separable ones fall by up to 12 decades.
FAR_KEEP = 1e-3
FAR_DROP = 1e-5

#: Newton steps of the analytic center of the rows :func:`far_point_split` holds, where
#: their loss's table leaves some uncertified: 30 certified the 15,983 rows of the side
#: ``N`` on the Python documentation at d = 768.
MAX_CENTER_STEPS = 60

#: The most rows (held at 0 and in-support equalities) onto which
#: :func:`far_point_split` projects its direction by a dense Gram matrix; above it, by
#: LSQR on the rows as an operator (:func:`_project_onto_rows`): on the Python
#: documentation at d = 768 (21,503 rows, 2,128 x 768 unknowns, logits of size 69)
#: 127 s on 2 cores, the rows' residual from 31.9 to 4.5e-12, 1.1 GiB at the peak.
MAX_PROJECTION_ROWS = 5_000

#: The rows per chunk of the operator of :func:`_project_onto_rows` (two
#: ``chunk x r`` temporaries).
PROJECTION_CHUNK = 16_384


def _anchored_rows(Q, anchor, j, v, n_cols, extra_cols=None):
    """The rows ``(e_v - e_a)^T W q_j`` (``a = anchor[j]``) on ``W.ravel()`` (``W`` of
    shape (V, r)) as a sparse matrix of ``n_cols`` columns, with a 1 in ``extra_cols``
    (a slack of each row) when given."""
    n, r = j.size, Q.shape[1]
    rr = [np.repeat(np.arange(n), r), np.repeat(np.arange(n), r)]
    cc = [(v[:, None] * r + np.arange(r)).ravel(),
          (anchor[j][:, None] * r + np.arange(r)).ravel()]
    x = [Q[j].ravel(), -Q[j].ravel()]
    if extra_cols is not None:
        rr.append(np.arange(n))
        cc.append(extra_cols)
        x.append(np.ones(n))
    return sp.csr_matrix((np.concatenate(x), (np.concatenate(rr), np.concatenate(cc))),
                         shape=(n, n_cols))


def _held_rows(support, held):
    """``(anchor, j, v)``: the in-support equalities and the rows ``held`` at 0, each
    ``(e_v - e_a)^T W q_j`` with ``a = anchor[j]``."""
    anchor = _anchors(support)
    j_in, z_in = np.nonzero(support)
    keep = z_in != anchor[j_in]
    j_held, v_held = np.nonzero(held)
    return anchor, np.concatenate([j_in[keep], j_held]), np.concatenate([z_in[keep], v_held])


def _project_onto_rows(Q, support, held, D):
    """``D`` (V, r) projected onto the in-support equalities and the rows ``held`` at 0
    (the least change that makes them all vanish), on the contexts ``Q``.

    At most :data:`MAX_PROJECTION_ROWS` rows: by their dense Gram matrix.  Above it, by
    LSQR on the rows as an operator, ``W -> ((e_v - e_a)^T W q_j)_i`` and its adjoint
    by chunks of rows, never a matrix of rows x ``V r``; the residual that LSQR leaves
    is projected again (at most three rounds).  LSQR's minimum-norm correction is the
    projection whether the rows are independent or not (a Farkas table of the held
    rows is a dependency among them).
    """
    V, r = D.shape
    anchor, j, v = _held_rows(support, held)
    if j.size == 0:
        return D
    if j.size <= MAX_PROJECTION_ROWS:
        rows = _anchored_rows(Q, anchor, j, v, V * r)
        d = D.ravel()
        d = d - rows.T @ np.linalg.lstsq((rows @ rows.T).toarray(), rows @ d, rcond=None)[0]
        return d.reshape(V, r)
    n = j.size
    incidence = sp.csr_matrix(
        (np.r_[np.ones(n), -np.ones(n)], (np.r_[np.arange(n), np.arange(n)],
                                            np.r_[v, anchor[j]])), shape=(n, V))
    adjoint = sp.csr_matrix(incidence.T)
    chunks = [slice(a, min(a + PROJECTION_CHUNK, n)) for a in range(0, n, PROJECTION_CHUNK)]

    def rows_of(w):
        W = w.reshape(V, r)
        return np.concatenate([np.einsum("ij,ij->i", incidence[c] @ W, Q[j[c]])
                               for c in chunks])

    def rows_adjoint(y):
        out = np.zeros((V, r))
        for c in chunks:
            out += adjoint[:, c] @ (y[c, None] * Q[j[c]])
        return out.ravel()

    op = scipy.sparse.linalg.LinearOperator((n, V * r), matvec=rows_of, rmatvec=rows_adjoint,
                                            dtype=float)
    d = D.ravel().copy()
    # (a row's size: ||d_v|| + ||d_a|| times ||q_j||, at most this)
    scale = 2.0 * float(np.linalg.norm(D, axis=1).max() * np.linalg.norm(Q, axis=1).max())
    for _ in range(3):
        residual = rows_of(d)
        if float(np.max(np.abs(residual))) <= ROW_ULPS * np.finfo(float).eps * scale:
            break
        d -= scipy.sparse.linalg.lsqr(op, residual, atol=1e-15, btol=1e-15,
                                      iter_lim=min(20 * n, 50_000))[0]
    return d.reshape(V, r)


def far_point_split(contexts, found, far_point, next_token_probs=None, context_weights=None,
                    *, max_rounds=5):
    """The split that a far iterate of the loss over every row marks, certified both ways.

    On partly separable data Newton on the loss over every row goes far out: the
    iterate is ``W_fin + g W^mm_I`` plus a vanishing error (Ji & Telgarsky 2019, the
    module docstring), so the rows of ``N`` keep their probabilities and those of
    ``I`` fall.  The candidate ``N`` is the rows above :data:`FAR_KEEP` there, and
    those that ``found``'s table certifies.

    * The side ``N``: the minimizer ``W_N`` of the loss restricted to the supports and
      ``N`` (Newton, on an orthonormal basis of the contexts) gives a Farkas table of
      every row of ``N``, checked as :func:`stationary_separability` checks its own.
      Where its entries fall too low for float64 to certify every row (a minimizer far
      out), the analytic center of the polytope of ``N``'s rows gives one whose entries
      do not (:func:`~skntp.svm.analytic_center_of_rows`, at most
      :data:`MAX_CENTER_STEPS` Newton steps; the loss is computed entry by entry where
      ``N`` is a few rows per context, :mod:`skntp.svm._ntp_sparse`).
      While a row of ``N`` is separable that loss has no minimizer: Newton's gradient
      stalls (five steps without halving) while that row's probability falls; the
      rows whose probabilities are then below :data:`FAR_DROP` leave ``N``, and Newton
      runs again.
    * The side ``I``: ``D = far_point - W_N``, projected onto the in-support equalities
      and the rows of ``N`` held at 0, is a point of the recession cone positive on
      ``I`` when its margins there are (:func:`_separable_rows_certified`, as the
      linear program's point is checked).  A row whose margin is below its rounding
      error joins ``N``, and the side ``N`` is solved again.

    Nothing is reported that is not verified: where a round leaves a row undecided, the
    input is returned unchanged.

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    found : NTPSeparability
        An undecided :func:`stationary_separability` (its ``support``).
    far_point : ndarray of shape (V, d)
        A far iterate of the loss over every row, for ``contexts`` (e.g. the ``W`` of
        :func:`partial_finite_component` with every row allowed, stopped far out).
    next_token_probs : ndarray or sparse matrix of shape (m, V), optional
        The probabilities of the far point's loss (default: uniform on the supports);
        any positive ones give a Farkas table, these keep ``W_N`` the far point's
        finite part.
    context_weights : array-like of shape (m,), optional
        Its context weights (default: uniform).
    max_rounds : int, default=5
        Newton solves of each side, at most.

    Returns
    -------
    NTPSeparability
        ``method="stationary point"``, certified both ways, ``direction`` the point of
        the cone; or ``found`` itself.
    """
    support = found.support
    if found.status == "certified" or not (~support).any():
        return found
    H = np.asarray(contexts, dtype=float)
    top = float(np.max(np.abs(H), initial=0.0))
    if top == 0.0:
        return found
    H = H / top
    Q, cond = orthonormal_contexts(H, return_condition=True)
    blur = _span_uncertainty(Q, cond)
    m, V = support.shape
    r = Q.shape[1]
    if next_token_probs is None:
        P = support / support.sum(axis=1, keepdims=True)
    else:
        P = sp.csr_matrix(next_token_probs, dtype=float)
        P = sp.csr_matrix(sp.diags(1.0 / np.asarray(P.sum(axis=1)).ravel()) @ P)
    pi = (np.full(m, 1.0 / m) if context_weights is None
          else np.asarray(context_weights, float) / np.sum(context_weights))
    probs = P.toarray() if sp.issparse(P) else P
    # the far point on the basis: the same logits, H W^T = Q (Q^T H W^T)
    far = (Q.T @ (H @ (top * np.asarray(far_point, dtype=float)).T)).T
    logits = Q @ far.T
    logits -= logits.max(axis=1, keepdims=True)
    logits -= np.log(np.exp(logits).sum(axis=1, keepdims=True))
    held = ~support & (logits > math.log(FAR_KEEP))
    if found.certified is not None:  # (rows the far table certified are not separable)
        held |= found.certified & ~support
    exact = found.structure_rows  # (certified, whatever the tables below say)
    del logits
    anchor = _anchors(support)

    def falling_at(w, allowed):
        # the rows of held whose probabilities, in the softmax over allowed, are below
        # FAR_DROP (computed on the contexts that hold some)
        j = np.nonzero(held.any(axis=1))[0]
        Z = np.where(allowed[j], Q[j] @ w.reshape(V, r).T, -np.inf)
        Z -= Z.max(axis=1, keepdims=True)
        Z -= np.log(np.exp(Z).sum(axis=1, keepdims=True))
        falling = np.zeros_like(held)
        falling[j] = held[j] & (Z < math.log(FAR_DROP))
        return falling

    def stalled(allowed):
        # a held row that separates leaves the loss without a minimizer: Newton's
        # gradient stalls while that row's probability falls
        stall = GradientStall()

        def report(k, g, w):
            if stall(g) and falling_at(w, allowed).any():
                raise StopIteration
        return report

    for _ in range(max_rounds):
        table = None
        for _ in range(max_rounds):
            allowed = support | held
            products = max(1, int(min(1e5, MAX_FIN_WORK / _product_work(allowed, r))))
            _, w, n_iter = _restricted_newton(Q, P, pi, allowed, tol=1e-13, max_iter=100,
                                              cg_iter=200, max_products=products,
                                              report=stalled(allowed))
            T = _loss_table(Q @ w.reshape(V, r).T, probs, pi, Q, allowed)
            refuted = np.zeros_like(support) if exact is None else held & exact
            if image_vanishes(H, support, T):
                refuted |= held & _refuted_rows(Q, support, T, _refutation_margin(blur),
                                                blur)
            if not np.array_equal(refuted, held):
                # (the loss's entries fall exponentially where its minimizer is far out;
                # those of the analytic center of the held rows' polytope do not)
                center = _center_module().analytic_center_of_rows(
                    H, support, held, max_iter=MAX_CENTER_STEPS)
                if center is not None:
                    T, refuted = center, held.copy()
            _log.info("far-point split: %d rows held not separable, %d certified by the "
                      "table of their loss (%d Newton steps)", int(held.sum()),
                      int(refuted.sum()), n_iter)
            if np.array_equal(refuted, held):
                table = T
                break
            falling = falling_at(w, allowed)
            if exact is not None:
                falling &= ~exact
            if not falling.any():
                return found
            held &= ~falling
        if table is None:
            return found
        D = _project_onto_rows(Q, support, held, far - w.reshape(V, r))
        L = Q @ D.T
        gaps = L[np.arange(m), anchor][:, None] - L
        separable = ~support & ~held
        unsigned = separable & (gaps <= _margin_floor(Q, support, D))
        _log.info("far-point split: %d rows separable by the projected far point, %d "
                  "without a certified sign", int(separable.sum()), int(unsigned.sum()))
        if unsigned.any():
            held |= unsigned
            continue
        # (checked as _certified_separable_side checks a program's point, without its
        # fallback: the NTP-SVM of every separable row is what this avoids)
        if separable.any() and not _separable_rows_certified(
                Q, support, separable, D, max(SEPARABILITY_TOL, 10.0 * blur),
                math.sqrt(blur)).any():
            return found
        return NTPSeparability(separable, support, "stationary point",
                               _on_contexts(H, Q, D) if separable.any() else None,
                               farkas=table, cycles=found.cycles,
                               cycle_rows=found.cycle_rows, labels=found.labels,
                               label_rows=found.label_rows)
    return found


def _raise_token_margins(Q, support, held, D, tokens):
    """``D`` with the rows of ``tokens`` lifted: for each, the change ``u`` of its row of
    ``D`` orthogonal to the contexts where it is tied (in a support, or held at 0) that
    maximizes the smallest margin of its other rows (:func:`scipy.optimize.linprog`).
    Only that token's logits move, and only on contexts where it is not tied, so no
    tie and no other token's row changes.  (A loop over the few tokens whose rows are
    at their rounding after the projection: two of 2,128 on the Python documentation
    at d = 768.)"""
    D = D.copy()
    anchor = _anchors(support)
    for v in tokens:
        tied = support[:, v] | held[:, v]
        free = np.flatnonzero(~tied)
        if free.size == 0:
            continue
        if tied.any():
            _, s, Vt = np.linalg.svd(Q[tied], full_matrices=True)
            C = Vt[np.count_nonzero(s > SPAN_TIE_RTOL * s[0]):].T  # (their span's complement)
        else:
            C = np.eye(Q.shape[1])
        if C.shape[1] == 0:
            continue
        L = Q[free] @ D.T
        gaps = L[np.arange(free.size), anchor[free]] - L[:, v]
        A = Q[free] @ C
        # max t s.t. gaps - A y >= t, y in a box of the gaps' size
        box = 1e4 * max(1.0, float(np.abs(gaps).max()))
        res = scipy.optimize.linprog(
            np.r_[np.zeros(C.shape[1]), -1.0], A_ub=np.c_[A, np.ones(free.size)], b_ub=gaps,
            bounds=[(-box, box)] * C.shape[1] + [(None, None)], method="highs")
        if res.status == 0 and -res.fun > gaps.min():
            D[v] += C @ res.x[:-1]
    return D


#: Singular values of a token's tied contexts below this fraction of the largest are
#: taken as outside their span by :func:`_raise_token_margins`.
SPAN_TIE_RTOL = 1e-10


def certify_split(contexts, support, held, direction, *, max_center_steps=200):
    """A candidate split, found by any means, certified both ways, or ``None``.

    The check that "certified both ways" asks of any split, whoever proposes it (a far
    iterate, a projection method, a program on part of the rows, the user):

    * the side ``N`` (``held``, the rows claimed not separable): the analytic center of
      their polytope (:func:`~skntp.svm.analytic_center_of_rows`) gives a Farkas table
      of each, checked (image and row bounds) as the package checks its tables;
    * the side ``I`` (every other out-of-support row): ``direction``, moved to an
      orthonormal basis of the contexts and projected onto the in-support equalities
      and the rows of ``N`` held at 0 (:func:`_project_onto_rows`), must be positive on
      every row of ``I`` above its rounding and meet the rest of the cone, as a
      program's point is checked (:func:`_separable_rows_certified`).  Before that
      check, the tokens that still have rows at or below their rounding are lifted one
      by one (:func:`_raise_token_margins`: a linear program in the complement of the
      token's tied contexts), which changes no tie and no other token's row.

    On the whole Python documentation at d = 768 (11,071 contexts, V = 2,128) a split
    found outside the package (15,983 rows held, a direction from Douglas-Rachford
    projections) is certified in 402 s on 2 cores (the center 98 s, the projection
    136 s, the linear programs of the two tokens lifted 160 s): 23,524,281 rows
    separable, 15,983 not (``benchmarks/certified_split.py``).

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    support : ndarray or sparse matrix of shape (m, V), bool
    held : ndarray of shape (m, V), bool
        The rows claimed not separable (off the supports).
    direction : ndarray of shape (V, d)
        A claimed point of the recession cone, positive on the other rows, for
        ``contexts``.
    max_center_steps : int, default=200
        Newton steps of the analytic center.

    Returns
    -------
    NTPSeparability or None
        ``method="stationary point"``, certified both ways: ``separable`` the rows off
        ``held``, ``direction`` the point of the cone checked (for the contexts divided
        by their largest entry), ``farkas`` the center's table; ``None`` where either
        side is not certified.

    Raises
    ------
    ValueError
        Where ``held`` or ``direction`` has the wrong shape, ``held`` holds in-support
        entries, ``direction`` is not finite, or the center's tables do not fit in memory
        (:func:`~skntp.svm.analytic_center_of_rows`).
    """
    H, support = _check_contexts(contexts, support)
    support = _dense_support(support)
    held = np.asarray(held, dtype=bool)
    m, V = support.shape
    direction = np.asarray(direction, dtype=float)
    if held.shape != support.shape or direction.shape != (V, H.shape[1]):
        raise ValueError(f"held must have the supports' shape {support.shape} and "
                         f"direction shape {(V, H.shape[1])}; got {held.shape} and "
                         f"{direction.shape}.")
    if np.any(held & support):
        raise ValueError("held must be margin rows, off the supports.")
    if not np.all(np.isfinite(direction)):
        raise ValueError("direction holds NaN or infinite entries.")
    began = time.perf_counter()
    table = _center_module().analytic_center_of_rows(H, support, held,
                                                     max_iter=max_center_steps)
    if table is None:
        _log.info("split: the held rows are not certified not separable")
        return None
    top = float(np.max(np.abs(H), initial=0.0))
    if top == 0.0:
        return None
    Hs = H / top
    Q, cond = orthonormal_contexts(Hs, return_condition=True)
    blur = _span_uncertainty(Q, cond)
    D = _project_onto_rows(Q, support, held, (Q.T @ (Hs @ (top * direction).T)).T)
    separable = ~support & ~held
    L = Q @ D.T
    gaps = L[np.arange(m), _anchors(support)][:, None] - L
    low = separable & (gaps <= _margin_floor(Q, support, D))
    del L, gaps
    if low.any():
        tokens = np.flatnonzero(low.any(axis=0))
        _log.info("split: %d rows of %d tokens at or below their rounding: lifted token "
                  "by token", int(low.sum()), tokens.size)
        D = _raise_token_margins(Q, support, held, D, tokens)
    certified = not separable.any() or _separable_rows_certified(
        Q, support, separable, D, max(SEPARABILITY_TOL, 10.0 * blur), math.sqrt(blur)).any()
    _log.info("split of %d contexts x %d tokens: %d rows separable, %d not: %s, %.1f s",
              m, V, int(separable.sum()), int(held.sum()),
              "certified both ways" if certified else "the separable side not certified",
              time.perf_counter() - began)
    if not certified:
        return None
    return NTPSeparability(separable, support, "stationary point",
                           _on_contexts(Hs, Q, D) if separable.any() else None, farkas=table)


def partial_ntp_svm_problem(contexts, separability):
    """The NTP-SVM of the separable rows: ``W^mm_I`` (module docstring).

    ``min 1/2 ||W||_F^2`` s.t. ``(e_z - e_{z_j})^T W h_j = 0`` (``z in S_j``),
    ``(e_{z_j} - e_v)^T W h_j >= 1`` on ``I`` and ``= 0`` on ``N``: the NTP-SVM
    (4a)-(4b) with the non-separable rows turned into equalities.  With ``N``
    empty it is the NTP-SVM.

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    separability : NTPSeparability
        From :func:`ntp_separability` on the same contexts.

    Returns
    -------
    MaxMarginProblem
        Its equalities span ``F_I``, the subspace of the finite part.

    Raises
    ------
    ProgramTooLargeError
        Where its ``m V - m`` rows would not fit in memory, as the NTP-SVM's
        (:func:`~skntp.svm.ntp_svm_problem`); before anything is built.
    """
    m, V = separability.support.shape
    check_program_size("NTP-SVM of the separable rows", m * V - m, _TOO_LARGE_ADVICE)
    return _partial_program(contexts, separability, separable_rows=True)


def _partial_program(contexts, separability, separable_rows):
    """:func:`partial_ntp_svm_problem` without the size check, or with
    ``separable_rows=False`` its equality rows alone (those of
    :func:`finite_side_problem`, built without the rest where the whole program is too
    large to build): the in-support ones and those of ``N``."""
    support, separable = separability.support, separability.separable
    contexts, _ = _check_contexts(contexts, support)
    m, V = support.shape
    anchor = _anchors(support)
    j_eq, z_eq = np.nonzero(support)
    keep = z_eq != anchor[j_eq]
    j_eq, z_eq = j_eq[keep], z_eq[keep]
    j_n, v_n = np.nonzero(~support & ~separable)
    parts = [
        Constraints(j_eq, z_eq, anchor[j_eq], np.zeros(j_eq.size), np.ones(j_eq.size, bool)),
        Constraints(j_n, anchor[j_n], v_n, np.zeros(j_n.size), np.ones(j_n.size, bool)),
    ]
    if not separable_rows:
        return MaxMarginProblem(BilinearScores(contexts, None, n_outputs=V),
                                Constraints.concatenate(parts), name="the finite side F_I")
    j_i, v_i = np.nonzero(separable)
    parts.append(Constraints(j_i, anchor[j_i], v_i, np.ones(j_i.size), np.zeros(j_i.size, bool)))
    return MaxMarginProblem(
        BilinearScores(contexts, None, n_outputs=V), Constraints.concatenate(parts),
        name="NTP-SVM of the separable rows",
        infeasible_message="the rows marked separable are not (the separability program "
        "was wrong)",
        info={"separability": separability})


def finite_side_problem(problem):
    """The equality rows of :func:`partial_ntp_svm_problem` alone: they span ``F_I``
    (the subspace of ``W_fin``; e.g. for :class:`~skntp.metrics.SubspaceProjector`)."""
    c = problem.constraints
    eq = c.equality
    return MaxMarginProblem(problem.scores, Constraints(c.block[eq], c.pos[eq], c.ref[eq],
                                                        c.rhs[eq], eq[eq]),
                            name="the finite side F_I")


def separable_row_gaps(contexts, support, separable, *decoders):
    """Per separable row and decoder: the smallest in-support logit minus the row's logit.

    Parameters
    ----------
    contexts : ndarray of shape (m, d)
    support, separable : ndarray of shape (m, V), bool
        ``S_j`` and ``I`` (:class:`NTPSeparability`).
    *decoders : ndarrays of shape (V, d)

    Returns
    -------
    list of ndarray of shape (n_separable,)
        In the order of ``np.nonzero(separable)``: ``min_{z in S_j} w_z^T h_j -
        w_v^T h_j`` for each row ``(j, v)`` (``svm_radius="auto"`` saturates these).
    """
    j, v = np.nonzero(separable)
    out = []
    for W in decoders:
        L = contexts @ W.T
        out.append(np.where(support, L, np.inf).min(axis=1)[j] - L[j, v])
    return out


@dataclass
class FiniteComponent:
    """``W_fin`` and its certificate (:func:`partial_finite_component`).

    Attributes
    ----------
    W : ndarray of shape (V, d)
    loss : float
        ``CE_I(W_fin)``.
    grad_norm : float
        ``||grad CE_I(W_fin)||_F`` relative to ``max_j ||h_j||``.
    min_prob : float
        The smallest softmax probability of a non-separable row at ``W_fin``
        (positive: the gradient's table is the certificate that those rows are
        not separable).
    n_iter : int
    converged : bool
        ``grad_norm <= tol``.
    """

    W: np.ndarray
    loss: float
    grad_norm: float
    min_prob: float
    n_iter: int
    converged: bool


def _context_products(H, chunk_bytes=2**28):
    """The upper triangles of ``h_j h_j^T / max|h|^2`` (single precision), one row per
    context, by chunks of at most ``chunk_bytes``: a generator of ``(start, rows)``."""
    m, d = H.shape
    iu, ju = np.triu_indices(d)
    top = float(np.abs(H).max(initial=0.0)) or 1.0
    H32 = (H / top).astype(np.float32)
    # entries below 2^-60 of the largest would be subnormal once squared, and a
    # subnormal operand slows single-precision BLAS down by orders of magnitude
    H32[np.abs(H32) < 2.0**-60] = 0.0
    step = max(1, chunk_bytes // (4 * iu.size))
    for a in range(0, m, step):
        Hc = H32[a:a + step]
        yield a, Hc[:, iu] * Hc[:, ju]


def _inverse_blocks(products, weights, d):
    """``(B_a + eps_a I)^{-1}`` of ``B_a = sum_j weights[j, a] h_j h_j^T`` for every token.

    One matrix product ``weights^T (h_j h_j^T)_j`` over the chunks of
    ``products`` (:func:`_context_products`; upper triangles, single precision),
    ``V m d^2 / 2`` flops.  The blocks are those of the data divided by
    ``max|h|^2 max(weights)``: a preconditioner's scale does not change CG's
    iterates.  ``eps_a`` is ``1e-10`` of ``B_a``'s mean eigenvalue, and at least
    ``1e-14`` of the largest block's: a block of a rank below ``d`` keeps the
    span of the contexts invariant.  Returns single precision, ``(V, d, d)``.
    """
    iu, ju = np.triu_indices(d)
    w32 = (weights / max(float(weights.max(initial=0.0)), np.finfo(float).tiny)).astype(
        np.float32)
    w32[w32 < 2.0**-60] = 0.0  # no subnormal products (see _context_products)
    upper = np.zeros((weights.shape[1], iu.size), dtype=np.float32)
    for a, rows in products:
        upper += w32[a:a + rows.shape[0]].T @ rows
    B = np.zeros((weights.shape[1], d, d))
    B[:, iu, ju] = upper
    B[:, ju, iu] = upper
    mean = np.trace(B, axis1=1, axis2=2) / d
    ridge = np.maximum(1e-10 * mean, 1e-14 * mean.max(initial=0.0))
    ridge = np.maximum(ridge, np.finfo(float).tiny / np.finfo(float).eps)
    B[:, np.arange(d), np.arange(d)] += ridge[:, None]
    return _invert_blocks(B, np.float32)


def _invert_blocks(B, dtype=float):
    """The inverses of the ``(n, d, d)`` blocks ``B``, by shares of blocks, in ``dtype``
    (each share converted as it is done: no double-precision copy of them all).

    ``n`` separate ``d x d`` inverses.  BLAS's own threads on each small factorization
    took 70 s instead of 1.2 s next to a busy process (threads waiting for cores); one
    BLAS thread per share of the blocks, a share per core, takes 0.47 s quiet (2,128
    blocks of 128 x 128)."""
    workers = max(1, min(os.cpu_count() or 1, B.shape[0] // 64))
    with blas_threads(0), ThreadPoolExecutor(workers) as pool:
        shares = pool.map(np.linalg.inv, np.array_split(B, workers))
        return np.concatenate([share.astype(dtype, copy=False) for share in shares])


class _RestrictedLoss:
    """``CE_I`` (the loss (2) over the allowed tokens), its gradient and Hessian products.

    Written once on the array layer (:mod:`skntp._backend`): the contexts and the
    ``(m, V)`` tables live on the backend's device (``backend="torch", device="cuda"``
    runs the products there), in float64; the Newton-CG that calls it works on the
    host, ``V d`` numbers per call.  Every ``(m, V)`` table lives in one of three
    buffers allocated once (the logits and softmax of :meth:`value_and_gradient`, the
    softmax at the Hessian's point, the work of :meth:`hessian_at`'s products, whose
    two halves hold the single-precision softmax and work), and the weights ``pi_j``
    and probabilities enter through the contexts' images ``T^T diag(pi) H`` and the
    gathered ``pi_j p_jz``: a Hessian product is two products with the contexts
    (``m x d x V`` multiply-adds, or word by word where the contexts concatenate word
    vectors, :class:`~skntp.losses._contexts.ContextProducts`) and three passes over
    one table.  :meth:`along` uses all three buffers: it is for
    the line search, after the Hessian's products and before the next evaluation.
    """

    def __init__(self, H, P, pi, allowed, be=None):
        be = get_backend() if be is None else be
        m, V = P.shape
        self.be, self.xp = be, be.xp
        self.shape = (V, H.shape[1])
        targets = sp.csr_matrix(sp.csr_matrix(P).multiply(pi[:, None]))
        self.blocks = word_blocks(H)
        self.contexts = ContextProducts(H, pi, be, blocks=self.blocks)
        self._H, self._pi = H, pi
        self.pi = be.asarray(pi)
        self.rows = be.asindex(np.repeat(np.arange(m), np.diff(targets.indptr)))
        self.cols = be.asindex(targets.indices)
        self.probs = be.asarray(targets.data)
        self.target_gradient = be.asarray(np.asarray(targets.T @ H))
        self.blocked = None if allowed.all() else be.asbool(~allowed)
        self.S, self.S_at, self.work = (be.zeros((m, V)) for _ in range(3))
        self.point = None
        self.single = None
        self._work_owner = None

    def _matrix(self, w):
        return self.be.asarray(np.reshape(w, self.shape)).T

    def _exponentiate(self, Z):
        """``Z <- exp(Z - top)`` on the allowed tokens and 0 elsewhere, in place, ``top``
        the row maxima over the allowed tokens; returns ``(top, row sums)``, each of
        shape ``(m, 1)``."""
        xp = self.xp
        if self.blocked is not None:
            Z[self.blocked] = -math.inf  # (in place: no (m, V) temporary)
        top = xp.max(Z, axis=1, keepdims=True)
        Z -= top
        exp_(clip_above_(Z, 0.0))
        return top, xp.sum(Z, axis=1, keepdims=True)

    def _linear(self, Z):
        return float(self.xp.sum(Z[self.rows, self.cols] * self.probs))

    def _log_partition(self, top, total):
        return float(self.xp.sum(self.pi * (top + self.xp.log(total))[:, 0]))

    def value_and_gradient(self, w):
        """``(CE_I(w), gradient)``; keeps the softmax at ``w``."""
        S = self.contexts.logits_into(self._matrix(w), self.S)
        linear = self._linear(S)
        top, total = self._exponentiate(S)
        S /= total
        self.point = np.array(w, copy=True)
        loss = self._log_partition(top, total) - linear
        return loss, to_numpy(self.contexts.image(S) - self.target_gradient).ravel()

    def along(self, w, step):
        """``t -> CE_I(w + t step)``: two products with the contexts, then one pass per
        ``t``."""
        Zw = self.contexts.logits_into(self._matrix(w), self.S)
        self._claim_work()
        Zs = self.contexts.logits_into(self._matrix(step), self.work)
        linear_w, linear_s = self._linear(Zw), self._linear(Zs)
        self.point = None

        def value(t):
            Z = self.S_at
            Z[...] = Zs
            Z *= t
            Z += Zw
            top, total = self._exponentiate(Z)
            return self._log_partition(top, total) - linear_w - t * linear_s
        return value

    def softmax_at(self, w):
        """The softmax at ``w``, in its own buffer (the line search moves ``self.S``)."""
        if self.point is None or not np.array_equal(w, self.point):
            self.value_and_gradient(w)
        self.S_at[...] = self.S
        return self.S_at

    def hessian_at(self, w, single=False):
        """``v -> Hessian(w) v``: ``sum_j pi_j (diag(s_j) - s_j s_j^T) V h_j h_j^T``.

        ``single=True``: the products in single precision (2.5 times faster at
        m = 11,071, V = 2,128, d = 768), for Newton steps whose CG stops at a relative
        residual far above single precision's rounding.  Their two single-precision
        tables (the softmax and the product's work) are the two halves of the work
        buffer: such a product is valid until the buffer's next use (the line search,
        a double-precision product), and raises RuntimeError after it."""
        S, be = self.softmax_at(w), self.be
        if single:
            if self.single is None:
                self.single = ContextProducts(self._H, self._pi, be, be.xp.float32,
                                              blocks=self.blocks)
            contexts32 = self.single
            V = self.shape[0]
            halves = self.work.view(be.xp.float32)  # (m, 2 V)
            S32, work32 = halves[:, :V], halves[:, V:]
            S32[...] = S
            owner = self._claim_work()

            def product32(v):
                if self._work_owner is not owner:
                    raise RuntimeError("a single-precision Hessian product was called after "
                                       "its tables' buffer was reused.")
                top = float(np.max(np.abs(v), initial=0.0)) or 1.0  # (linear in v)
                T = contexts32.logits_into(
                    be.asarray(np.reshape(v / top, self.shape), be.xp.float32).T, work32)
                T -= row_dots(S32, T)[:, None]
                T *= S32
                return to_numpy(contexts32.image(T)).astype(float).ravel() * top
            return product32

        def product(v):
            self._claim_work()
            T = self.contexts.logits_into(self._matrix(v), self.work)
            T -= row_dots(S, T)[:, None]
            T *= S
            return to_numpy(self.contexts.image(T)).ravel()
        return product

    def _claim_work(self):
        """Mark the work buffer as overwritten; returns the new owner's token."""
        self._work_owner = object()
        return self._work_owner


class _WoodburyPreconditioner:
    """The Hessian's per-token blocks, each as a few contexts and a multiple of the
    identity, in whitened coordinates: the preconditioner of ``W_fin`` where the
    blocks (``V d^2`` numbers) do not fit.

    With ``Z = H R^{-1}`` (``R`` from the QR of ``sqrt(pi) H``, so ``Z^T diag(pi) Z =
    I``), token ``a``'s block ``B_a = sum_j pi_j s_ja (1 - s_ja) z_j z_j^T`` is
    approximated by ``c_a I + U_a U_a^T``: ``U_a`` the ``p`` contexts of largest weight
    for ``a``, ``c_a`` the rest's trace over ``d``; its inverse by Woodbury (a
    ``p x p`` inverse per token).  Memory ``V p d`` (single precision), an
    application ``2 V p d`` multiply-adds and two triangular solves; CG on the
    Hessian in ``H`` coordinates with this preconditioner is CG in ``Z`` coordinates.
    On 3,918 real-text contexts (V = 1,066, d = 128) Newton-CG took 294 Hessian
    products with ``p = 64`` (229 with the exact blocks, 3,000 and not converged with
    the blocks' diagonals or a scalar per token).
    """

    def __init__(self, H, pi, rank):
        m, d = H.shape
        _, R = np.linalg.qr(np.sqrt(pi)[:, None] * H)
        diag = np.abs(np.diag(R))
        R = R + np.diag(np.where(diag > 1e-14 * diag.max(), 0.0, 1e-14 * diag.max()))
        self.R = R
        self.Z = scipy.linalg.solve_triangular(R, H.T, trans="T").T  # H R^{-1}
        self.z2 = np.einsum("ij,ij->i", self.Z, self.Z)
        self.Z32 = self.Z.astype(np.float32)
        self.rank = min(rank, m)

    def at(self, S, pi):
        """The preconditioner's ``apply`` at the softmax ``S``."""
        V, d, p = S.shape[1], self.Z.shape[1], self.rank
        # the weights pi_j s_ja (1 - s_ja), their p largest per token and the rest's
        # trace, by chunks of tokens: no (m, V) table besides S (argpartition's
        # indices of a whole table would be as large as the table)
        top, wt, tail, largest = [], [], [], 0.0
        for start, stop in row_chunks(V, S.shape[0]):  # (chunks of columns)
            weights = np.subtract(1.0, S[:, start:stop])
            weights *= S[:, start:stop]
            weights *= pi[:, None]
            # (a copy: the slice, a view, would keep argpartition's whole chunk alive)
            chosen = np.argpartition(-weights, p - 1, axis=0)[:p].copy()
            top.append(chosen)
            wt.append(np.take_along_axis(weights, chosen, axis=0))
            tail.append(weights.T @ self.z2)
            largest = max(largest, float(weights.max(initial=0.0)))
        top, wt, tail = (np.concatenate(x, axis=-1) for x in (top, wt, tail))
        tail -= np.einsum("pa,pa->a", wt, self.z2[top])
        c = np.maximum(tail / d, 1e-12 * max(largest, np.finfo(float).tiny))
        U = self.Z32[top.T]  # (V, p, d), single precision from the start (V p d numbers)
        root = np.sqrt(wt.T).astype(np.float32)
        root[root < 2.0**-60] = 0.0  # no subnormal products (see _context_products)
        U *= root[:, :, None]
        K = np.einsum("apd,aqd->apq", U, U) + c[:, None, None] * np.eye(p, dtype=np.float32)
        with blas_threads(0):
            Kinv = np.linalg.inv(K.astype(float)).astype(np.float32)
        R = self.R

        def apply(r):
            G = r.reshape(V, d)
            G = scipy.linalg.solve_triangular(R, (G - G.mean(axis=0)).T, trans="T").T
            top = float(np.max(np.abs(G), initial=0.0)) or 1.0  # (single precision)
            Gf = (G / top).astype(np.float32)
            inner = np.einsum("apq,aq->ap", Kinv, np.einsum("apd,ad->ap", U, Gf))
            Y = (G - top * np.einsum("apd,ap->ad", U, inner).astype(float)) / c[:, None]
            Y = scipy.linalg.solve_triangular(R, Y.T).T
            return (Y - Y.mean(axis=0)).ravel()
        return apply


def _power_of_two_scale(H):
    """The power of two just above ``max|H|`` (1 for zeros): dividing by it is exact."""
    top = float(np.max(np.abs(H), initial=0.0))
    return math.ldexp(1.0, math.frexp(top)[1]) if top > 0 and math.isfinite(top) else 1.0


#: Newton steps whose CG stops at a relative residual at least this run their Hessian
#: products in single precision (``newton_cg``'s ``single_above``), when every row is
#: allowed and the per-token blocks do not fit (the Woodbury case, where the products
#: are the cost: 2.5 times faster; on small ill-conditioned problems single precision
#: doubles the products, measured in ``test_the_preconditioned_finite_component_is_the_
#: minimizer_in_f``; the loss with rows dropped is left in double, its minimizer far out
#: along nearly flat directions).
SINGLE_PRECISION_RTOL = 0.03

#: The contexts per token of :class:`_WoodburyPreconditioner`.
WOODBURY_RANK = 64


def _product_work(allowed, d):
    """The multiply-adds of a Hessian product of the loss restricted to ``allowed``
    (:func:`_restricted_newton`'s): ``|A| d`` entry by entry where the mask is sparse,
    else ``m V d``."""
    return (2.0 * np.count_nonzero(allowed) * d if sparse_enough(allowed)
            else float(allowed.size) * d)


def _restricted_newton(H, P, pi, allowed, *, tol, max_iter, cg_iter, max_products, report,
                       be=None):
    """Newton-CG on ``CE_I`` (:func:`partial_finite_component`) from ``W = 0``, its
    loss on the backend ``be`` (NumPy by default).

    On NumPy, where fewer than :data:`~skntp.svm._ntp_sparse.SPARSE_BELOW` of the
    ``(context, token)`` entries are allowed (the side ``N`` of a split), the loss is
    computed on those entries only (:class:`~skntp.svm._ntp_sparse.SparseRestrictedLoss`,
    a product ``|A| d`` multiply-adds instead of ``m V d``).

    ``report(k, gradient_norm, w)``, if given, is called before each step and may
    raise StopIteration to end the minimization at ``w``.  Returns
    ``(loss, w, n_iter)``, the loss holding its tables at ``w``.
    """
    m, V = P.shape
    d = H.shape[1]
    scale = max(float(np.max(np.linalg.norm(H, axis=1))), np.finfo(float).tiny)
    preconditioned = bool(allowed.all())
    on_host = be is None or be.name == "numpy"
    loss = (SparseRestrictedLoss(H, P, pi, allowed) if on_host and sparse_enough(allowed)
            else _RestrictedLoss(H, P, pi, allowed, be))
    blocks = preconditioned and 8.0 * V * d * d <= 0.125 * available_memory()
    # the contexts' outer products, kept when they fit in an eighth of the memory
    products = (list(_context_products(H)) if blocks and 2.0 * m * d * (d + 1)
                <= 0.125 * available_memory() else None)
    woodbury = (_WoodburyPreconditioner(H, pi, WOODBURY_RANK)
                if preconditioned and not blocks else None)
    refreshed = {"step": 0, "apply": None}

    def precondition_at(w):
        # CG on the Hessian's diagonal blocks, one d x d block per token:
        # B_a = sum_j pi_j s_ja (1 - s_ja) h_j h_j^T, recomputed every second Newton
        # step (the products cost more than CG's iterations); where those do not fit,
        # their approximation by a few contexts each (_WoodburyPreconditioner).  With
        # every token allowed in every softmax, F_I = {D : 1^T D = 0} (within the span
        # of the contexts), which each preserves up to the projection D - 1 1^T D / V
        if refreshed["step"] % REFRESH_EVERY == 0:
            S = to_numpy(loss.softmax_at(w))
            if woodbury is not None:
                refreshed["apply"] = woodbury.at(S, pi)
            else:
                inverse = _inverse_blocks(
                    products if products is not None else _context_products(H),
                    pi[:, None] * S * (1.0 - S), d)

                def apply(r, inverse=inverse):
                    R = r.reshape(V, d)
                    R = R - R.mean(axis=0)
                    # (in single precision at unit scale: a residual far from it would
                    # overflow or underflow there; the blocks' inverse is linear)
                    top = float(np.max(np.abs(R), initial=0.0)) or 1.0
                    Y = np.einsum("ade,ae->ad", inverse, (R / top).astype(np.float32))
                    Y = Y.astype(float) * top
                    return (Y - Y.mean(axis=0)).ravel()
                refreshed["apply"] = apply
        refreshed["step"] += 1
        return refreshed["apply"]

    if max_products == "auto":
        max_products = int(min(5000, (MAX_FIN_WORK if preconditioned else 6e10)
                               / max(_product_work(allowed, d), 1)))
    w, n_iter = newton_cg(loss.value_and_gradient, loss.hessian_at, np.zeros(V * d),
                          tol * scale, max_iter, cg_iter, report, max_products,
                          precondition_at if preconditioned else None, loss.along,
                          single_above=SINGLE_PRECISION_RTOL if woodbury is not None else None)
    return loss, w, n_iter


def partial_finite_component(contexts, next_token_probs, separability, context_weights=None,
                             *, tol=1e-9, max_iter=200, cg_iter=2000, max_products="auto",
                             callback=None, backend="numpy", device=None):
    """``W_fin = argmin_{W in F_I} CE_I(W)``: the finite part off the separable rows.

    ``CE_I(W) = sum_j pi_j [log sum_{a in S_j u N_j} exp(w_a^T h_j)
    - sum_{z in S_j} p_{j,z} w_z^T h_j]``, the loss (2) with the separable tokens
    of each context dropped from its softmax.  Newton-CG (Hessian-vector products
    in closed form) from ``W = 0``: every gradient and Hessian product lies in
    ``F_I``, so the iterates do, and the minimizer found is the one in ``F_I``.

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    next_token_probs : array-like or sparse matrix of shape (m, V)
        Rows normalized to sum to one.
    separability : NTPSeparability
    context_weights : array-like of shape (m,), optional
        ``pi_j`` (uniform by default); normalized to sum to one.
    tol : float, default=1e-9
        Stop when the gradient norm, relative to ``max_j ||h_j||``, is below.
    max_iter : int, default=200
        Newton iterations.
    cg_iter : int, default=2000
        Conjugate-gradient iterations per Newton step, at most.
    max_products : int, "auto" or None, default="auto"
        Hessian-vector products in all, at most (each costs about two products
        of size ``m x d x V``).  Data with rows close to separable have a loss
        that is nearly flat along some directions and a minimizer far out;
        there Newton's CG needs thousands of products per step, and the budget
        ends the work with ``converged=False``.  When no row is separable (every
        token in every softmax, the case of real text with ``d << m``), CG is
        preconditioned by the Hessian's ``d x d`` diagonal blocks, one per token,
        which cuts the products by orders of magnitude: on 3,918 real-text
        contexts (V = 1,066, d = 128) a Newton system that took 914 products
        took 16.  Overshooting Newton steps are shortened to the minimum of the
        loss along them (a bounded Brent search on ``[0, 1]``).
        There ``W_fin`` converged (relative gradient 7e-12) in 21 Newton steps,
        380 products and 42 s on 2 quiet cores, 95 s next to a process that
        keeps both cores busy (``benchmarks/ntp_separability.py
        --preconditioner``).
        ``"auto"``: ``min(5000, 4e12 / (m V d))`` with a preconditioner (the
        blocks, or where those do not fit in an eighth of the memory their
        approximation by :data:`WOODBURY_RANK` contexts each,
        :class:`_WoodburyPreconditioner`), ``min(5000, 6e10 / (m V d))`` without
        (about five minutes and one minute of work on 2 quiet cores);
        ``None``: no budget.
    callback : callable, optional
        ``callback(n_iter, grad_norm, 0.0)`` at every Newton step, with the
        relative gradient norm (the progress of :func:`~skntp.make_limit_progress`).
    backend : {"numpy", "torch"}, default="numpy"
        The array layer of the loss, its gradient and its Hessian products (the
        ``m x d x V`` products, all of the work but the preconditioner's), always in
        float64; ``"torch"`` with ``device="cuda"`` runs them on a GPU.
    device : str, optional
        Torch device (:func:`skntp._backend.get_backend`).

    Returns
    -------
    FiniteComponent
    """
    be = get_backend(backend, device, "float64")
    H, probs = _check_contexts(contexts, next_token_probs, "next_token_probs")
    # (sparse: a dense (m, V) copy is 2.5 GB at m = 105,782, V = 2,990)
    P = sp.csr_matrix(probs, dtype=float)
    P.eliminate_zeros()
    if np.any(P.data < 0) or not np.all(np.isfinite(P.data)):
        raise ValueError("next_token_probs must be finite and non-negative.")
    P = sp.csr_matrix(sp.diags(1.0 / np.asarray(P.sum(axis=1)).ravel()) @ P)
    support = separability.support
    if P.shape != support.shape or P.nnz != np.count_nonzero(support) or not np.all(
            support[P.nonzero()]):
        raise ValueError("next_token_probs must have the supports of the separability "
                         "result.")
    m = P.shape[0]
    pi = np.full(m, 1.0 / m) if context_weights is None else np.asarray(context_weights, float)
    pi = pi / pi.sum()
    allowed = ~separability.separable
    # solved on the contexts divided by the power of two just above their largest entry
    # (exact: the same rounding as unscaled), W scaled back: the loss depends on W H^T
    # only, and single-precision preconditioners and products of contexts at 1e100 or
    # 1e-100 neither overflow nor underflow
    top = _power_of_two_scale(H)
    H = H / top
    scale = max(float(np.max(np.linalg.norm(H, axis=1))), np.finfo(float).tiny)
    report = None if callback is None else (
        lambda k, g, w: callback(k, g / scale, 0.0))
    loss, w, n_iter = _restricted_newton(H, P, pi, allowed, tol=tol, max_iter=max_iter,
                                         cg_iter=cg_iter, max_products=max_products,
                                         report=report, be=be)
    V, d = P.shape[1], H.shape[1]
    W = w.reshape(V, d) / top
    value, grad = loss.value_and_gradient(w)
    S = to_numpy(loss.S)
    rest = allowed & ~separability.support
    grad_norm = float(np.linalg.norm(grad)) / scale
    return FiniteComponent(W=W, loss=value, grad_norm=grad_norm,
                           min_prob=float(np.min(S, where=rest, initial=math.inf)),
                           n_iter=n_iter, converged=bool(grad_norm <= tol))
