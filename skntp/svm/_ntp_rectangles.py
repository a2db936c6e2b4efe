"""Exact Farkas tables of NTP data from rectangles of contexts: rows never separable.

A context vector that concatenates the vectors of the words before it (the loader's
``embedding="words"``, and any model whose context is a concatenation of per-position
parts) shares each part with every context that has the same word there.  Four contexts
``(a, r), (b, r'), (b, r), (a, r')`` (``a, b`` the words of one group of positions,
``r, r'`` those of the others) then satisfy, coordinate by coordinate and so exactly,

.. math::

    h_{ar} + h_{br'} = h_{br} + h_{ar'},

whatever the width ``d``.  Such a *rectangle* is a Farkas table of the recession cone
``K`` of the loss (2) (module docstring of :mod:`skntp.svm._ntp_partial`): with a token
``p`` in the supports of both contexts of the first diagonal and a token ``q != p`` in
those of the second, the table ``T = e_p - e_q`` on ``(a, r)`` and ``(b, r')``,
``e_q - e_p`` on the other two, has rows summing to zero, no positive entry off the
supports, and ``T^T H = (e_p - e_q)(h_{ar} + h_{br'} - h_{br} - h_{ar'})^T = 0``.  For
every ``D`` in ``K`` the weighted sum of its margin rows ``r_{jv}(D) >= 0`` at the
table's negative entries is then ``<D, T^T H> = 0``: the rows ``((a, r), q)``,
``((b, r'), q)``, ``((b, r), p)``, ``((a, r'), p)`` (those off the supports) are zero on
all of ``K``, not separable.

A row proven not separable is an equality of ``K`` (``K`` is the same cone with ``v``
added to ``S_j``), so the rectangles run in rounds: each round's supports are the
data's with every row certified before added, and a round certifies the rows that its
rectangles find with those supports.  Each step is exact (an identity of the data's own
floating-point values, and integer tables), so the chain is too: unlike the tables of
:func:`~skntp.svm.stationary_separability`, whose bounds are float64's
(:data:`~skntp.svm._ntp_partial.NOT_SEPARABLE_MARGIN`), a row certified here has margin
exactly zero on ``K``.  On the whole Python documentation at d = 768 (11,071 two-word
contexts, V = 2,128) the 300,626 rectangles certify 13,220 rows in 14 rounds, where
the loss's table certifies none (``benchmarks/corpus_scale.py``).

The rectangles prove only rows that the shared coordinates force; rows forced by the
word vectors' own dependencies (or by longer cycles of words) are left to the other
certificates.  Data without shared coordinates (a coordinate with ``m`` distinct values)
have no rectangle.  "Exact" is about the float64 values the package works with:
contexts given in another type (integers above ``2**53``, long doubles) are rounded to
float64 first, as everywhere in the package.

Why no library: the certificate is integer bookkeeping on the contexts' labels (sorts
and sparse products in NumPy and SciPy); the linear program that would find these rows
and the others has 23.5 million rows at d = 768, beyond HiGHS and Clarabel (the
separability LP stops at 20,000), and networkx's cycle searches run per node in Python.
Benchmark: ``python benchmarks/certified_infeasibility.py --corpus`` (the NTP-SVM's
proof at d = 768 checked in 19 s; ``dcd`` without it has no answer in 300 s).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ._ntp import _check_contexts

__all__ = ["RectangleCertificate", "check_rectangle_certificate", "rectangle_certificate"]

_log = logging.getLogger("skntp.svm")

#: The most rectangles enumerated (4 indices each): about 160 MB.  Above it the first
#: ones are kept (the certificate is valid on any subset, it certifies fewer rows).
MAX_RECTANGLES = 5_000_000


@dataclass
class RectangleCertificate:
    """A chain of exact Farkas tables, one per rectangle of contexts (module docstring).

    Attributes
    ----------
    contexts : ndarray of shape (n, 4), int
        ``(j1, j2, j3, j4)``: four distinct contexts with ``h_j1 + h_j2 = h_j3 + h_j4``
        coordinate by coordinate (each coordinate's pair of values is the same).
    tokens : ndarray of shape (n, 2), int
        ``(p, q)``, ``p != q``: the table ``e_p - e_q`` on ``j1, j2`` and ``e_q - e_p``
        on ``j3, j4``; ``p`` is in the supports of ``j1, j2`` and ``q`` in those of
        ``j3, j4`` (the data's, with the rows certified in earlier rounds).
    rounds : ndarray of shape (n,), int
        The round of each table, non-decreasing.
    """

    contexts: np.ndarray
    tokens: np.ndarray
    rounds: np.ndarray

    def __len__(self):
        return int(self.rounds.size)

    @property
    def n_rounds(self):
        """The number of rounds of the chain."""
        return int(self.rounds.max(initial=-1)) + 1

    def table(self, shape, of_round=0):
        """The sum of one round's tables (sparse (m, V), integer entries): a Farkas table
        of the recession cone on the supports of that round."""
        keep = self.rounds == of_round
        j = self.contexts[keep]
        p, q = self.tokens[keep].T
        rows = np.concatenate([j[:, 0], j[:, 1], j[:, 2], j[:, 3]] * 2)
        cols = np.concatenate([p, p, p, p, q, q, q, q])
        signs = np.repeat([1.0, 1.0, -1.0, -1.0, -1.0, -1.0, 1.0, 1.0], p.size)
        return sp.csr_matrix((signs, (rows, cols)), shape=shape)


def _checked(contexts, support):
    """The contexts (float64, finite) and the supports as a CSR bool matrix with sorted
    indices (sparse duplicates summed first, :func:`~skntp.svm._ntp._check_contexts`)."""
    H, support = _check_contexts(contexts, support)
    S = sp.csr_matrix(support, dtype=bool)
    S.eliminate_zeros()
    S.sort_indices()
    return H, S


def _distinct(quads):
    """Rows of ``quads`` (n, 4) whose four contexts are distinct (equal contexts would
    cancel in the table)."""
    a, b, c, e = quads.T
    return (a != b) & (a != c) & (a != e) & (b != c) & (b != e) & (c != e)


def _proven_cells(quads, p, q):
    """``(j, v)`` of the rows the tables ``(quads, p, q)`` prove: ``q`` after ``j1, j2``
    and ``p`` after ``j3, j4`` (those off the supports are the certified rows)."""
    return quads.T.ravel(), np.concatenate([q, q, p, p])


def _coordinate_classes(H):
    """One label array per distinct partition of the contexts by a coordinate's value
    (contexts with the same value there share a label), or ``[]`` when a coordinate
    takes ``m`` distinct values (no rectangle can exist: every table's rows would
    have to sum to zero over single contexts)."""
    m, d = H.shape
    if m < 4 or d == 0:
        return []
    found = {}
    for c in range(d):
        values, first, inverse = np.unique(H[:, c], return_index=True, return_inverse=True)
        if values.size == m:
            return []
        # canonical labels: the first context with the value (the same partition gives
        # the same labels whatever the values)
        label = first[inverse.ravel()].astype(np.int64)
        found.setdefault(label.tobytes(), label)
    return list(found.values())


def _pairs_in_groups(keys, limit):
    """``(i, k)``: the unordered pairs of distinct positions with equal ``keys``, the
    first ``limit`` of them (group by group in the order of the keys, each position's
    pairs with the later positions of its group in turn)."""
    order = np.argsort(keys, kind="stable")
    ks = keys[order]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    sizes = np.diff(np.r_[starts, ks.size])
    within = np.arange(ks.size) - np.repeat(starts, sizes)
    after = np.repeat(sizes, sizes) - within - 1
    before = np.cumsum(after) - after
    if before[-1:].sum() + after[-1:].sum() > limit:
        _log.info("rectangles of contexts: %d pairs, the first %d kept",
                  int(after.sum()), int(limit))
        after = np.clip(limit - before, 0, after)
        before = np.cumsum(after) - after
    first = np.repeat(np.arange(ks.size), after)
    offset = np.arange(first.size) - np.repeat(before, after) + 1
    return order[first], order[first + offset]


def _n_pairs(keys):
    """The number of unordered pairs of positions with equal ``keys``."""
    counts = np.unique(keys, return_counts=True)[1].astype(float)
    return float(np.sum(counts * (counts - 1) / 2))


def _joint_labels(labels):
    """One label per distinct tuple of ``labels`` (a list of (m,) arrays)."""
    if len(labels) == 1:
        return labels[0]
    return np.unique(np.stack(labels, axis=1), axis=0, return_inverse=True)[1].ravel()


def _rectangles(labels, max_rectangles):
    """The 4-cycles of the graph whose edges are the contexts between their label in
    one partition and their joint label in the others, for each partition (one when
    there are two), as ``(j1, j2, j3, j4)`` rows: ``j1 = (a, r), j2 = (b, r'),
    j3 = (b, r), j4 = (a, r')``."""
    found, total = [], 0
    sides = [(labels[p], _joint_labels([lab for k, lab in enumerate(labels) if k != p]))
             for p in range(len(labels))]
    if len(labels) == 2:  # (the same rectangles either way: the side with fewer wedges)
        sides = [min(sides, key=lambda side: _n_pairs(side[1]))]
    for left, right in sides:
        # wedges: (a, r) = i, (b, r) = k; where they would be too many, the contexts of
        # the first half of the left labels, and so on
        kept = np.unique(left)
        while kept.size >= 2 and _n_pairs(right[np.isin(left, kept)]) > 4 * max_rectangles:
            kept = kept[:kept.size // 2]
        if kept.size < 2:
            continue
        among = np.flatnonzero(np.isin(left, kept))
        i, k = _pairs_in_groups(right[among], 4 * max_rectangles)
        i, k = among[i], among[k]
        swap = left[i] > left[k]
        i, k = np.where(swap, k, i), np.where(swap, i, k)
        key = left[i] * (int(left.max()) + 1) + left[k]
        w1, w2 = _pairs_in_groups(key, max_rectangles - total)
        quads = np.stack([i[w1], k[w2], k[w1], i[w2]], axis=1)
        # (contexts with equal vectors could close a "rectangle" on themselves)
        found.append(quads[_distinct(quads)])
        total += w1.size
        if total >= max_rectangles:
            break
    if not found:
        return np.zeros((0, 4), dtype=np.int64)
    return np.concatenate(found).astype(np.int64)


def _keys(S):
    """The sorted keys ``j V + v`` of the entries of a CSR matrix with sorted indices."""
    rows = np.repeat(np.arange(S.shape[0], dtype=np.int64), np.diff(S.indptr))
    return rows * S.shape[1] + S.indices


def _supported(S, j, tokens, keys=None):
    """``tokens[i]`` in the support row ``S[j[i]]`` (S a CSR bool matrix, sorted
    indices; ``keys`` its :func:`_keys`, when at hand)."""
    keys = _keys(S) if keys is None else keys
    if keys.size == 0:
        return np.zeros(j.size, dtype=bool)
    query = np.asarray(j, dtype=np.int64) * S.shape[1] + tokens
    at = np.minimum(np.searchsorted(keys, query), keys.size - 1)
    return keys[at] == query


def _add_rows(S, j, v):
    """``S`` with the rows ``(j, v)`` added (CSR bool, sorted indices)."""
    add = sp.csr_matrix((np.ones(j.size, dtype=bool), (j, v)), shape=S.shape)
    out = (S + add).tocsr()
    out.data[:] = True
    out.sort_indices()
    return out


def _first_two(M):
    """Per row of a CSR matrix: its first and second column (``-1`` where none)."""
    n = np.diff(M.indptr)
    first = np.full(M.shape[0], -1, dtype=np.int64)
    second = np.full(M.shape[0], -1, dtype=np.int64)
    first[n >= 1] = M.indices[M.indptr[:-1][n >= 1]]
    second[n >= 2] = M.indices[M.indptr[:-1][n >= 2] + 1]
    return first, second


def _witnesses(S, rects):
    """One round: ``(rows, p, q)`` per usable table of the rectangles ``rects`` on the
    supports ``S``: for each token ``q`` of the second diagonal's common support a
    token ``p != q`` of the first's, and the other way round."""
    j1, j2, j3, j4 = rects.T
    Sb = S.astype(np.int8)
    first = Sb[j1].multiply(Sb[j2]).tocsr()
    second = Sb[j3].multiply(Sb[j4]).tocsr()
    first.eliminate_zeros()
    second.eliminate_zeros()
    first.sort_indices()
    second.sort_indices()
    out = []
    for A, B, flip in ((first, second, False), (second, first, True)):
        # each token t of B's row paired with A's first token, or its second if equal
        b = B.tocoo()
        a1, a2 = _first_two(A)
        other = np.where(a1[b.row] != b.col, a1[b.row], a2[b.row])
        ok = other >= 0
        r, t, o = b.row[ok], b.col[ok], other[ok]
        out.append((r, t, o) if flip else (r, o, t))
    r = np.concatenate([out[0][0], out[1][0]])
    p = np.concatenate([out[0][1], out[1][1]])
    q = np.concatenate([out[0][2], out[1][2]])
    return r, p, q


def _new_rows(S, keys, rects, r, p, q):
    """The rows the tables ``(r, p, q)`` certify that ``S`` (sorted ``keys``) does not
    hold yet, with the first table that certifies each: ``(table index, j, v)``."""
    idx = np.tile(np.arange(r.size), 4)
    jj, vv = _proven_cells(rects[r], p, q)
    new = ~_supported(S, jj, vv, keys)
    idx, jj, vv = idx[new], jj[new], vv[new]
    _, first = np.unique(jj * S.shape[1] + vv, return_index=True)
    return idx[first], jj[first], vv[first]


#: Rectangles handled at once within a round (their tables' rows are gathered by chunk).
RECTANGLES_PER_CHUNK = 200_000


def _round(S, rects):
    """One round: the tables of ``rects`` that certify rows ``S`` does not hold, one per
    new row, by chunks of rectangles: ``(quads, tokens, j, v)``."""
    keys = _keys(S)
    V = S.shape[1]
    quads, tokens, found = [], [], np.zeros(0, dtype=np.int64)
    for start in range(0, rects.shape[0], RECTANGLES_PER_CHUNK):
        chunk = rects[start:start + RECTANGLES_PER_CHUNK]
        r, p, q = _witnesses(S, chunk)
        idx, j, v = _new_rows(S, keys, chunk, r, p, q)
        fresh = ~np.isin(j * V + v, found)
        idx, j, v = idx[fresh], j[fresh], v[fresh]
        if idx.size:
            used = np.unique(idx)
            quads.append(chunk[r[used]])
            tokens.append(np.stack([p[used], q[used]], axis=1))
            found = np.union1d(found, j * V + v)
    if not quads:
        return None
    return np.concatenate(quads), np.concatenate(tokens), found // V, found % V


def rectangle_certificate(contexts, support, *, max_rounds=100,
                          max_rectangles=MAX_RECTANGLES):
    """Find the rows that rectangles of contexts certify not separable, in rounds.

    See the module docstring: each rectangle ``h_j1 + h_j2 = h_j3 + h_j4`` (exact,
    coordinate by coordinate) with a token ``p`` in the supports of ``j1, j2`` and a
    token ``q != p`` in those of ``j3, j4`` is a Farkas table that proves the rows
    ``(j1, q), (j2, q), (j3, p), (j4, p)`` zero on the recession cone; each round adds
    the rows certified so far to the supports.  One table is kept per certified row.
    Check the result with :func:`check_rectangle_certificate`.

    Parameters
    ----------
    contexts : array-like of shape (m, d)
        Distinct context embeddings ``h_j``.
    support : array-like or sparse matrix of shape (m, V)
        ``support[j, v]`` nonzero when ``v in S_j`` (probabilities may be passed).
    max_rounds : int, default=100
        The longest chain.
    max_rectangles : int, default=5_000_000
        The most rectangles enumerated (the first ones are kept above it, in the order
        of the contexts' labels).

    Returns
    -------
    RectangleCertificate
        Empty (``len == 0``) when the contexts share no coordinates or no rectangle
        has the supports it needs.

    Raises
    ------
    ValueError
        If the contexts or the supports have non-finite values or mismatched shapes.
    """
    H, S = _checked(contexts, support)
    n_support = S.nnz
    empty = RectangleCertificate(np.zeros((0, 4), np.int64), np.zeros((0, 2), np.int64),
                                 np.zeros(0, np.int64))
    labels = _coordinate_classes(H)
    if len(labels) < 2:
        return empty
    rects = _rectangles(labels, max_rectangles)
    if rects.shape[0] == 0:
        return empty
    kept, active = [], rects
    for round_ in range(max_rounds):
        found = _round(S, active)
        if found is None:
            break
        quads, tokens, j, v = found
        kept.append((quads, tokens, np.full(quads.shape[0], round_)))
        S = _add_rows(S, j, v)
        # only rectangles with a context whose support grew can give new rows
        changed = np.zeros(S.shape[0], dtype=bool)
        changed[j] = True
        active = rects[changed[rects].any(axis=1)]
    if not kept:
        return empty
    _log.info("rectangles of contexts: %d rows certified not separable in %d rounds "
              "(%d rectangles)", int(S.nnz - n_support),
              len(kept), rects.shape[0])
    return RectangleCertificate(*(np.concatenate(parts) for parts in zip(*kept)))


def _exact_rectangles(H, quads):
    """``h_j1 + h_j2 = h_j3 + h_j4`` exactly for each row of ``quads``: in every
    coordinate the two pairs of values are the same (by chunks of rectangles)."""
    ok = np.empty(quads.shape[0], dtype=bool)
    step = max(1, 2**22 // max(1, H.shape[1]))
    for start in range(0, quads.shape[0], step):
        a, b, c, e = (H[quads[start:start + step, k]] for k in range(4))
        same = ((a == c) & (b == e)) | ((a == e) & (b == c))
        ok[start:start + step] = same.all(axis=1)
    return ok


def check_rectangle_certificate(contexts, support, certificate):
    """The rows a :class:`RectangleCertificate` proves not separable, recomputed.

    Every table is checked against the contexts themselves and the supports of its
    round, in order: four distinct contexts, each coordinate's pair of values the same
    on both diagonals (so ``T^T H = 0`` exactly, no rounding), ``p != q``, ``p`` in the
    supports of ``j1, j2`` and ``q`` in those of ``j3, j4``, where a round's supports
    are the data's with the rows that the tables of earlier rounds certified (a table
    that fails certifies nothing, and nothing that needed its rows).  No tolerance is
    involved: a certified row has margin exactly zero on the recession cone.

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    support : array-like or sparse matrix of shape (m, V)
    certificate : RectangleCertificate

    Returns
    -------
    ndarray of shape (m, V), bool
        The out-of-support rows certified not separable.

    Raises
    ------
    ValueError
        If the contexts or the supports have non-finite values or mismatched shapes.
    """
    H, S0 = _checked(contexts, support)
    m, V = S0.shape
    quads = np.asarray(certificate.contexts, dtype=np.int64).reshape(-1, 4)
    tokens = np.asarray(certificate.tokens, dtype=np.int64).reshape(-1, 2)
    rounds = np.asarray(certificate.rounds, dtype=np.int64).ravel()
    certified = np.zeros((m, V), dtype=bool)
    if not (quads.shape[0] == tokens.shape[0] == rounds.size) or rounds.size == 0:
        return certified
    inside = (np.all((quads >= 0) & (quads < m), axis=1)
              & np.all((tokens >= 0) & (tokens < V), axis=1))
    valid = inside & _distinct(quads) & (tokens[:, 0] != tokens[:, 1])
    valid[valid] = _exact_rectangles(H, quads[valid])
    S = S0
    for round_ in np.unique(rounds[valid]):
        at = np.flatnonzero(valid & (rounds == round_))
        j, (p, q) = quads[at], tokens[at].T
        keys = _keys(S)
        usable = (_supported(S, j[:, 0], p, keys) & _supported(S, j[:, 1], p, keys)
                  & _supported(S, j[:, 2], q, keys) & _supported(S, j[:, 3], q, keys))
        jj, vv = _proven_cells(j[usable], p[usable], q[usable])
        certified[jj, vv] = True
        S = _add_rows(S, jj, vv)
    certified[S0.nonzero()] = False
    return certified
