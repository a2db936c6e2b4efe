"""The methods of :func:`skntp.svm.solve_max_margin`, one module per algorithm.

Every method has the signature ``solve(problem, tol, max_iter, be, verbose,
callback) -> MaxMarginResult or None`` (``None``: it declines the program) and
minimizes the norms listed in :data:`METHODS`.  Whatever status a method
reports, :func:`~skntp.svm.solve_max_margin` recomputes the certificate of its
answer from the program (:mod:`skntp.svm._certificate`).  ``callback`` is
``None`` or ``callback(n_iter, gap, violation)``, called at each certificate
check (progress bars).  The methods registered with ``frobenius=True`` also
take ``frobenius``, the dispatcher's solve of the Frobenius program on the same
constraints (a start, or an exact certificate of infeasibility): no method
imports the dispatcher.

Library methods: :mod:`.conic` (cvxpy with Clarabel, every norm, the
reference; cvxpy with SCS, the nuclear norm) and :mod:`.highs` (HiGHS, the max
and l1 norms).  Every other module opens with the reason no library serves its
programs and the benchmark row that shows it.  A method may carry an attribute ``blas_threads``: the
BLAS threads it runs on (``1``, or ``None`` for the library's pool) where the
default, one thread for a small score map (:func:`skntp._backend.blas_threads`),
does not fit its own products.

To add a method: write its module here, add it to :data:`METHODS` (with the
norms it minimizes) and, if ``auto`` should try it, to :data:`AUTO_ORDER`
with the benchmark that earns it its place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .._norms import NORMS
from . import (
    accelerated_dual,
    barrier,
    conic,
    dual_active_set,
    dual_coordinate_descent,
    highs,
    least_distance,
    lp_interior_point,
    nnls_working_set,
    sdp_interior_point,
    svt_admm,
)

__all__ = ["AUTO_ORDER", "METHODS", "Method"]


@dataclass(frozen=True)
class Method:
    """A method of :func:`~skntp.svm.solve_max_margin`.

    Attributes
    ----------
    solve : callable
        ``solve(problem, tol, max_iter, be, verbose, callback)``.
    norms : tuple of str
        The norms of :data:`skntp.svm.NORMS` it minimizes, and ``"lp"`` for every
        ``("lp", p)`` (:func:`skntp.svm._norms.norm_kind`); it is never given a
        program in another.
    frobenius : bool
        Whether it is called with ``frobenius=``
        :func:`skntp.svm._solve.frobenius_solution`, the Frobenius program on
        the same constraints (its start, or its certificate of infeasibility),
        so that no method imports the dispatcher.
    """

    solve: Callable
    norms: tuple = ("fro",)
    frobenius: bool = False


#: Every method by name.
METHODS = {
    "cvxpy": Method(conic.solve, NORMS + ("lp",)),
    "scs": Method(conic.solve_scs, ("nuclear",)),
    "highs": Method(highs.solve, ("max", "l1")),
    "dcd": Method(dual_coordinate_descent.solve),
    "accelerated-dual": Method(accelerated_dual.solve),
    "dual-active-set": Method(dual_active_set.solve),
    "nnls": Method(nnls_working_set.solve),
    "graph-ldp": Method(least_distance.solve),
    "lp-ipm": Method(lp_interior_point.solve, ("max",), frobenius=True),
    "nuclear-ipm": Method(sdp_interior_point.solve, ("nuclear",), frobenius=True),
    "svt-admm": Method(svt_admm.solve, ("nuclear",)),
    "spectral-barrier": Method(barrier.solve_spectral, ("spectral",), frobenius=True),
    "pnorm-barrier": Method(barrier.solve_pnorm, ("lp",), frobenius=True),
}

#: ``method="auto"``: the methods tried, in order, for each class of program
#: (:func:`skntp.svm._solve.program_class`); the first whose answer is certified
#: answers.  When none is certified, the least uncertain answer is returned with
#: its status and a ConvergenceWarning.  The order follows the benchmarks cited in
#: each method's module:
#:
#: * ``"decoder"`` (linear-decoder scores: the NTP-SVM, Crammer-Singer): the exact
#:   least-distance NNLS while the constraint matrix has at most 4 million entries
#:   (App. B.2's m = 50, d = 60, V = 10: 0.15 s against 1.3 s for ``"dcd"``; with the
#:   contexts multiplied by a matrix of condition 1e6, 0.1 s where ``"dcd"`` ends
#:   uncertified after 22 s; ``benchmarks/exact_methods.py``), then the sequential
#:   dual method on the CPU; the accelerated dual method on a GPU (``"dcd"``
#:   declines there) and where ``"dcd"`` hands over;
#: * ``"keys"`` (key scores: ATT-SVM, relaxed ATT-SVM, the head SVM): the exact
#:   dual active set; the working-set NNLS takes the programs on which the active
#:   set's rank-one updates drift (it declines those rather than return an
#:   inexact answer); both need a parameter of at most 2000 entries;
#: * ``"bilinear"`` (bilinear scores with output embeddings: Graph-SVM): the
#:   exact null-space NNLS when small, else the accelerated dual method;
#: * ``"nuclear"`` (the key-query ATT-SVM of factored attention; the logit-space
#:   NTP-SVM of NTP-UFM): ADMM with singular value thresholding, which takes only
#:   the logit NTP-SVM (certified at m = V = 1,000 in 40.8 s where SCS through
#:   cvxpy was stopped after 300 s in the same run; ``benchmarks/README.md``,
#:   table "Logit NTP-SVM"); the primal-dual interior-point method on its semidefinite form
#:   (it declines programs with equalities or other scores); then SCS, to a
#:   hundredth of ``tol``: on the logit NTP-SVM at m = V = 60 it is certified in
#:   2.3 s where Clarabel takes 467 s in the same run;
#: * ``"decoder-partial"`` (:func:`~skntp.svm.partial_ntp_svm_problem`: the
#:   separable rows of the separability program, at most 20,000, or of
#:   :func:`~skntp.svm.complete_stationary_split`, up to ``m V d = 2e8``): the exact
#:   least-distance NNLS when small (as for ``"decoder"``), then Clarabel while its
#:   conic form fits in memory (:func:`~skntp.svm.solvers.conic.check_conic_size`),
#:   as on real text the program's equalities on the non-separable rows leave
#:   the dual ill-conditioned: 1.0 s against 60 s for ``dcd`` and ``accelerated-dual``
#:   (117 contexts, 20 words, d = 28; ``benchmarks/ntp_separability.py``); then those;
#: * ``"lp"`` (``norm="max"`` or ``"l1"``): the structured interior-point method
#:   for the max norm of linear-decoder scores, HiGHS for every other;
#: * ``"spectral"``: the barrier method (Clarabel fails on these programs);
#: * ``"lp-norm"`` (``norm=("lp", p)``): Clarabel, which is two to three times
#:   faster than the barrier method; the barrier answers where Clarabel's answer
#:   is not certified.
AUTO_ORDER = {
    "decoder": ("graph-ldp", "dcd", "accelerated-dual", "cvxpy"),
    "decoder-partial": ("graph-ldp", "cvxpy", "dcd", "accelerated-dual"),
    "keys": ("dual-active-set", "nnls", "accelerated-dual", "cvxpy"),
    "bilinear": ("graph-ldp", "accelerated-dual", "cvxpy"),
    "nuclear": ("svt-admm", "nuclear-ipm", "scs", "cvxpy"),
    "lp": ("lp-ipm", "highs", "cvxpy"),
    "spectral": ("spectral-barrier", "cvxpy"),
    "lp-norm": ("cvxpy", "pnorm-barrier"),
}
