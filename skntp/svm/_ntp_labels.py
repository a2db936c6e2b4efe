"""Farkas tables of NTP data from the labels of its contexts: one program for all tokens.

Where the coordinates of the contexts fall into groups whose values are functions of a
*label* of the context (the loader's ``embedding="words"``: one group per word position,
labelled by the word; the labels of :mod:`skntp.svm._ntp_cycles`), each logit is a sum of
one value per group,

.. math::

    w_v^T h_j = \\sum_p \\alpha_{v,p}[\\ell_p(j)], \\qquad
    \\alpha_{v,p}[\\ell] = w_{v,p}^T f_p(\\ell),

``f_p(l)`` the group's coordinates at label ``l``.  Letting every ``alpha`` be free (as
if each group's vectors were linearly independent) relaxes the recession cone ``K`` of
the loss (2) (module docstring of :mod:`skntp.svm._ntp_partial`): a row that is zero on
the relaxed cone is zero on ``K``, not separable.  The relaxed separability program, in
the level ``t_j`` of each context's support, the free values and one ``s_jv in [0, 1]``
per row::

    max  sum s_jv   s.t.  t_j - sum_p alpha_{v,p}[l_p(j)] = 0       (v in E_j)
                          t_j - sum_p alpha_{v,p}[l_p(j)] >= s_jv   (candidate rows)

(``E_j`` the support, with the rows already certified as ties), is a cone's program:
``s = 1`` exactly on the relaxation's separable rows.  A row with a label that none of
its token's ties has can be lowered alone (its value appears in no equality), so only
the *candidate* rows, whose every label occurs among their token's ties, are written:
on the whole Python documentation at d = 768, 17,992 of 23.5 million rows, and a program
of 50,566 rows and 169,690 nonzeros that HiGHS solves in about 10 s.

Its multipliers ``T`` (one per row written) are a Farkas table: dual feasibility on
``t_j`` sums each context's row to zero, on each ``alpha_{v,p}[l]`` sums each token's
entries over the contexts with label ``l`` to zero, so ``T^T H = 0`` coordinate by
coordinate; on the candidates they have the sign that proves the row.  They are
floating-point numbers, so each round's table is checked as the package checks a
stationary point's (:func:`~skntp.svm.image_vanishes` on the contexts themselves,
:func:`~skntp.svm.farkas_row_bounds` on an orthonormal basis of their span, robust to
its rounding), with the round's ties as supports: the certificate is a chain, each
round proving rows given the ties before it.

The cycles of :func:`~skntp.svm.cycle_certificate` are the tables of two tokens; this
program couples all tokens through the rows' zero sums.  With linearly independent
vectors in each group the relaxation is ``K`` itself, and the program certifies exactly
the rows that are not separable (the tests check it against the linear program).  On
the Python documentation at d = 768 it certifies 1,404 rows beyond the cycles' 13,750
(``benchmarks/label_program.py``); rows forced by the word vectors' own dependencies
(1,928 first words in 384 dimensions) are beyond it.

Why no library beyond HiGHS: the program is HiGHS's (:func:`scipy.optimize.linprog`);
what is home-made is its sparse form, three or four nonzeros per row, where the
separability program of :func:`~skntp.svm.ntp_separability` has 23.5 million rows of
1,536 nonzeros on those data.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from ._ntp_cycles import _checked, _coordinate_classes
from ._ntp_partial import (
    _power_of_two_scale,
    _refutation_margin,
    _refuted_rows,
    _span_uncertainty,
    image_vanishes,
    orthonormal_contexts,
)

__all__ = ["LabelCertificate", "check_label_certificate", "label_certificate"]

_log = logging.getLogger("skntp.svm")

#: The most rows (ties and candidates) of one round's program; a larger round is not
#: run, the rows certified before it stand.
MAX_PROGRAM_ROWS = 2_000_000


@dataclass
class LabelCertificate:
    """The Farkas tables of :func:`label_certificate`, one per round, as sparse entries.

    Attributes
    ----------
    contexts, tokens : ndarray of shape (n,), int
        The entries ``(j, v)`` of the tables.
    values : ndarray of shape (n,)
        Their values (``<= 0`` on the rows each proves, rows summing to zero).
    rounds : ndarray of shape (n,), int
        The round of each entry: the table of round ``k`` proves rows with the data's
        supports, the rows ``equal`` of :func:`label_certificate` and those of the
        rounds before ``k`` as ties.
    """

    contexts: np.ndarray
    tokens: np.ndarray
    values: np.ndarray
    rounds: np.ndarray

    def __len__(self):
        return int(self.values.size)

    @property
    def n_rounds(self):
        """The number of rounds that proved some row."""
        return int(self.rounds.max()) + 1 if self.rounds.size else 0


def _labels(H):
    """The compact labels of each group of coordinates (:func:`_coordinate_classes`),
    ``[]`` when the contexts have no such structure."""
    return [np.unique(lab, return_inverse=True)[1].ravel()
            for lab in _coordinate_classes(H)]


def _candidates(ties, labels):
    """The rows off ``ties`` (dense (m, V) bool) whose every label occurs among the
    ties of their token."""
    j, v = np.nonzero(ties)
    candidates = ~ties
    for label in labels:
        seen = np.zeros((ties.shape[1], int(label.max()) + 1), dtype=bool)
        seen[v, label[j]] = True
        candidates &= seen[:, label].T
    return candidates


def _program(ties, candidates, labels):
    """One round's program (module docstring) by HiGHS: ``(proven, (j, v, T))``, the
    candidate rows it finds not separable and the table of its multipliers."""
    m = ties.shape[0]
    je, ve = np.nonzero(ties)
    jc, vc = np.nonzero(candidates)
    j, v = np.concatenate([je, jc]), np.concatenate([ve, vc])
    n, n_s = j.size, jc.size
    rows, cols, vals = [np.arange(n)], [j], [np.ones(n)]
    offset = m
    for label in labels:
        _, column = np.unique(v * (int(label.max()) + 1) + label[j], return_inverse=True)
        rows.append(np.arange(n))
        cols.append(offset + column.ravel())
        vals.append(np.full(n, -1.0))
        offset += int(column.max()) + 1
    # (the candidates' rows negated, as <= rows: s - t + sum alpha <= 0)
    rows.append(je.size + np.arange(n_s))
    cols.append(offset + np.arange(n_s))
    vals.append(np.full(n_s, -1.0))
    A = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(n, offset + n_s))
    cost = np.concatenate([np.zeros(offset), -np.ones(n_s)])
    bounds = np.column_stack([np.r_[np.full(offset, -np.inf), np.zeros(n_s)],
                              np.r_[np.full(offset, np.inf), np.ones(n_s)]])
    res = linprog(cost, A_ub=-A[je.size:], b_ub=np.zeros(n_s), A_eq=A[:je.size],
                  b_eq=np.zeros(je.size), bounds=bounds, method="highs")
    if res.status != 0:  # (always feasible, s = 0, and bounded)
        return np.zeros(n_s, dtype=bool), None
    # the multipliers of A's rows (the <= rows are -A's), signed to be <= 0 on the
    # candidates
    table = np.concatenate([-res.eqlin.marginals, res.ineqlin.marginals])
    return res.x[offset:] < 0.5, (j, v, table)


def _round_table(shape, j, v, values):
    """The rows of contexts ``j`` (sorted, unique), the dense table on them."""
    rows, inverse = np.unique(j, return_inverse=True)
    T = np.zeros((rows.size, shape[1]))
    np.add.at(T, (inverse.ravel(), v), values)
    return rows, T


def _certified_by(H, Q, blur, ties, j, v, values):
    """The rows (a mask of ``ties``' shape) that one round's table certifies, with
    ``ties`` as supports; checked on the contexts that the table touches (the others'
    rows are zero, and add nothing to its image or its bounds)."""
    rows, T = _round_table(ties.shape, j, v, values)
    proven = np.zeros_like(ties)
    if rows.size == 0 or not image_vanishes(H[rows], ties[rows], T):
        return proven
    proven[rows] = ~ties[rows] & _refuted_rows(Q[rows], ties[rows], T,
                                               _refutation_margin(blur), blur)
    return proven


def _basis(H):
    H = H / _power_of_two_scale(H)
    Q, cond = orthonormal_contexts(H, return_condition=True)
    return H, Q, _span_uncertainty(Q, cond)


def _ties(S, equal):
    ties = np.asarray(S.toarray(), dtype=bool)
    if equal is not None:
        equal = np.asarray(equal.toarray() if sp.issparse(equal) else equal, dtype=bool)
        if equal.shape != ties.shape:
            raise ValueError(f"equal has shape {equal.shape}, the supports {ties.shape}.")
        ties |= equal
    return ties


def label_certificate(contexts, support, *, equal=None, max_rounds=20,
                      max_rows=MAX_PROGRAM_ROWS):
    """Rows not separable by the program of the contexts' labels, one round at a time.

    Each round solves the relaxed separability program of the module docstring on the
    candidate rows, with HiGHS, and keeps the rows that its multipliers' table
    certifies (checked as :func:`check_label_certificate` checks them); they join the
    ties of the next round.  The rounds end when one proves nothing new, after
    ``max_rounds``, or before a program of more than ``max_rows`` rows (logged at
    INFO).

    Parameters
    ----------
    contexts : array-like of shape (m, d)
        Distinct context embeddings ``h_j``.
    support : array-like or sparse matrix of shape (m, V)
        ``support[j, v]`` nonzero when ``v in S_j``.
    equal : array-like of shape (m, V), bool, optional
        Rows already certified not separable (e.g. the rows of
        :func:`~skntp.svm.check_cycle_certificate`), held as ties: the tables prove
        their rows given these.
    max_rounds : int, default=20
    max_rows : int, default=MAX_PROGRAM_ROWS
        The most rows (ties and candidates) of one round's program.

    Returns
    -------
    LabelCertificate
        Empty where the contexts have no labels (some coordinate differs between all
        contexts) or no candidate row is forced.
    """
    H, S = _checked(contexts, support)
    if not isinstance(max_rounds, (int, np.integer)) or max_rounds < 0:
        raise ValueError(f"max_rounds must be a non-negative integer, got {max_rounds!r}.")
    ties = _ties(S, equal)
    empty = LabelCertificate(*(np.zeros(0, dtype=np.int64),) * 2, np.zeros(0),
                             np.zeros(0, dtype=np.int64))
    labels = _labels(H)
    if not labels:
        return empty
    Hs, Q, blur = _basis(H)
    found = []
    for k in range(max_rounds):
        start = time.perf_counter()
        candidates = _candidates(ties, labels)
        n_rows = int(np.count_nonzero(ties) + np.count_nonzero(candidates))
        if not candidates.any():
            break
        if n_rows > max_rows:
            _log.info("label program: round %d has %d rows (more than %d), not run", k,
                      n_rows, max_rows)
            break
        forced, table = _program(ties, candidates, labels)
        if table is None or not forced.any():
            break
        proven = _certified_by(Hs, Q, blur, ties, *table)
        _log.info("label program, round %d: %d candidate rows, %d not separable, %d "
                  "certified by its table, %.1f s", k, int(candidates.sum()),
                  int(forced.sum()), int(proven.sum()), time.perf_counter() - start)
        if not proven.any():
            break
        j, v, values = table
        keep = values != 0.0
        found.append((j[keep], v[keep], values[keep], np.full(int(keep.sum()), k)))
        ties |= proven
    if not found:
        return empty
    return LabelCertificate(*(np.concatenate(parts) for parts in zip(*found)))


def check_label_certificate(contexts, support, certificate, *, equal=None):
    """The rows that a :class:`LabelCertificate` proves not separable, recomputed.

    Each round's table is checked with the data's supports, ``equal`` and the rows of
    the rounds before it as ties: its image on the contexts must vanish
    (:func:`~skntp.svm.image_vanishes`), and each row it proves must have a margin
    bound at most :data:`~skntp.svm.NOT_SEPARABLE_MARGIN` on an orthonormal basis of
    the contexts' span (:func:`~skntp.svm.farkas_row_bounds`, robust to the span's
    rounding).

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    support : array-like or sparse matrix of shape (m, V)
    certificate : LabelCertificate
    equal : array-like of shape (m, V), bool, optional
        The rows :func:`label_certificate` was given as ties (themselves certified).

    Returns
    -------
    ndarray of shape (m, V), bool
        The rows certified, beyond ``equal``.

    Raises
    ------
    ValueError
        Where the certificate's entries are out of range or its arrays disagree in
        length.
    """
    H, S = _checked(contexts, support)
    c = certificate
    arrays = [np.asarray(a) for a in (c.contexts, c.tokens, c.values, c.rounds)]
    if len({a.shape for a in arrays}) != 1 or arrays[0].ndim != 1:
        raise ValueError("the certificate's contexts, tokens, values and rounds must be "
                         "1-D arrays of one length.")
    j, v, values, rounds = arrays
    m, V = S.shape
    if j.size and (j.min() < 0 or j.max() >= m or v.min() < 0 or v.max() >= V
                   or rounds.min() < 0 or not np.all(np.isfinite(values))):
        raise ValueError(f"the certificate's entries must be finite, with contexts in "
                         f"[0, {m}), tokens in [0, {V}) and rounds >= 0.")
    ties = _ties(S, equal)
    given = ties.copy()
    if j.size == 0:
        return np.zeros_like(ties)
    Hs, Q, blur = _basis(H)
    for k in np.unique(rounds):
        at = rounds == k
        ties |= _certified_by(Hs, Q, blur, ties, j[at], v[at], values[at])
    return ties & ~given
