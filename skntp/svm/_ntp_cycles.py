"""Exact Farkas tables of NTP data from cycles of contexts: rows never separable.

Split the coordinates of the contexts into two groups, such that each group's values
are a function of a *label* of the context (the loader's ``embedding="words"``: the
first word's vector and the second's).  Each context ``j`` is then an edge between its
two labels ``a_j`` (left) and ``b_j`` (right), and ``h_j = (f(a_j), g(b_j))`` up to the
order of the coordinates.  For two tokens ``p != q``, orient the edges:

* ``a_j -> b_j`` when ``p`` is in ``S_j`` (``+`` edges),
* ``b_j -> a_j`` when ``q`` is in ``S_j`` (``-`` edges; both when both are).

A closed walk ``j_1, j_2, ..., j_{2k}`` of this graph alternates ``+`` and ``-`` edges
(the graph is bipartite), and at each of its nodes as many ``+`` as ``-`` edges carry
that node's part of the vector.  So, coordinate by coordinate and therefore exactly,

.. math::

    \\sum_{i \\text{ odd}} h_{j_i} = \\sum_{i \\text{ even}} h_{j_i},

and the table ``T = e_p - e_q`` on the ``+`` edges, ``e_q - e_p`` on the ``-`` edges
(summed over repeated contexts) has ``T^T H = 0``, rows summing to zero and no positive
entry off the supports: a Farkas table of the recession cone ``K`` of the loss (2)
(module docstring of :mod:`skntp.svm._ntp_partial`).  For ``D`` in ``K`` each edge's
term ``+-(e_p - e_q)^T D h_j`` is a margin row (``q`` after a ``+`` edge, ``p`` after a
``-`` edge, where off the support) or an in-support equality, all ``>= 0`` and summing
to ``<D, T^T H> = 0``: every such row of the walk is zero on ``K``, not separable.

The shortest walks are rectangles of four contexts, ``(a, r), (b, r'), (b, r), (a, r')``
with ``h_ar + h_br' = h_br + h_ar'``; longer ones are cycles of the word-pair graph
through more words.

An edge lies on a closed walk exactly when both its ends are in the same strongly
connected component of the graph, so one pass of Tarjan's algorithm per pair of tokens
finds every row these tables can prove; the walk of each row is its edge closed by two
breadth-first trees of its component (root to tail, head to root).  A row proven not
separable is an equality of ``K`` (``K`` is the same cone with ``v`` added to ``S_j``),
so the cycles run in rounds: a round's supports are the data's with every row
certified before added.  Each step is exact (an identity of the data's
own floating-point values, checked as equal values of neighbours along the walk, and
integer tables), so a row certified here has margin exactly zero on ``K``.

On the whole Python documentation at d = 768 (11,071 two-word contexts, V = 2,128) the
cycles certify 13,750 rows in 13 rounds, the rectangles alone 13,220 (``python
benchmarks/certified_infeasibility.py --corpus``).  With two tokens and word vectors
that are linearly independent, the cycles certify exactly the rows that are not
separable (the cone is then a system of difference constraints on the words' logits,
infeasible exactly on cycles); the tests check it against the linear program.  With more
tokens they need not: a table may couple several tokens through its rows' zero sums,
which :func:`~skntp.svm.label_certificate` finds (on the corpus above, 1,404 rows beyond
the cycles' 13,750).  Rows forced by the word vectors' own linear dependencies are left
to other certificates.

Why no library: networkx's and SciPy's graph routines run on one graph, and there is one
graph per pair of tokens (150,000 pairs on the corpus above).  The graphs of many pairs
are put side by side in one sparse matrix, whose strongly connected components
(:func:`scipy.sparse.csgraph.connected_components`) and breadth-first trees
(:func:`scipy.sparse.csgraph.breadth_first_order`, from one added node joined to a root
of each component) are computed once; the rest is integer bookkeeping in NumPy.  The
linear program that finds these rows and the others has 23.5 million rows at d = 768.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, connected_components

from ._ntp import _check_contexts

__all__ = ["CycleCertificate", "check_cycle_certificate", "cycle_certificate"]

_log = logging.getLogger("skntp.svm")

#: Tokens listed at once when the candidate edges are gathered (by chunks of contexts):
#: about 500 MB of index arrays.
EDGES_PER_CHUNK = 1 << 23

#: The most candidate edges of one round on one side (about 15 s and 3 GB with the
#: graph and its sorts).  A round that would have more is not run: the rounds stop
#: there, and the rows certified so far stand.  On the Python documentation at d = 768
#: a round has at most 0.5 million.  On the standard library's docstrings (105,782
#: three-word contexts, three sides) they grow with the supports, from 4.2 million in
#: the first round to 22 million in the fourth, which is not run: 465,126 rows in three
#: rounds, 66 s, 3.5 GiB peak with the contexts (the rectangles before: 238,106 rows).
MAX_EDGES = 1 << 24


def _checked(contexts, support):
    """The contexts (float64, finite) and the supports as a CSR bool matrix with sorted
    indices (sparse duplicates summed first, :func:`~skntp.svm._ntp._check_contexts`)."""
    H, support = _check_contexts(contexts, support)
    S = sp.csr_matrix(support, dtype=bool)
    S.eliminate_zeros()
    S.sort_indices()
    return H, S


def _coordinate_classes(H):
    """One label array per distinct partition of the contexts by a coordinate's value
    (contexts with the same value there share a label), or ``[]`` when a coordinate
    takes ``m`` distinct values (no walk can exist: every table's rows would
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


def _joint_labels(labels):
    """One label per distinct tuple of ``labels`` (a list of (m,) arrays)."""
    if len(labels) == 1:
        return labels[0]
    return np.unique(np.stack(labels, axis=1), axis=0, return_inverse=True)[1].ravel()


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


@dataclass
class CycleCertificate:
    """A chain of exact Farkas tables, one per closed walk of contexts (module docstring).

    Attributes
    ----------
    contexts : ndarray of shape (n_entries,), int
        The walks one after the other: ``contexts[offsets[i]:offsets[i + 1]]`` is walk
        ``i``, of even length ``L``, whose contexts at even positions (0, 2, ...) are
        its ``+`` edges and at odd positions its ``-`` edges; every coordinate is equal
        along one of its pairings of neighbours, ``(0, 1), (2, 3), ...`` (shared right
        labels) or ``(1, 2), ..., (L - 1, 0)`` (shared left labels), so that
        ``sum h_+ = sum h_-`` coordinate by coordinate.
    offsets : ndarray of shape (n + 1,), int
        Where each walk starts in ``contexts``.
    tokens : ndarray of shape (n, 2), int
        ``(p, q)``, ``p != q``: the table ``e_p - e_q`` on the ``+`` edges and
        ``e_q - e_p`` on the ``-`` edges; ``p`` is in the supports of the ``+`` edges
        and ``q`` in those of the ``-`` edges (the data's, with the rows certified in
        earlier rounds).
    rounds : ndarray of shape (n,), int
        The round of each table, non-decreasing.
    """

    contexts: np.ndarray
    offsets: np.ndarray
    tokens: np.ndarray
    rounds: np.ndarray

    def __len__(self):
        return int(self.rounds.size)

    @property
    def n_rounds(self):
        """The number of rounds of the chain."""
        return int(self.rounds.max(initial=-1)) + 1

    def lengths(self):
        """The number of contexts of each walk."""
        return np.diff(self.offsets)

    def table(self, shape, of_round=0):
        """The sum of one round's tables (sparse (m, V), integer entries): a Farkas table
        of the recession cone on the supports of that round."""
        walk, position = _entries(self.offsets)
        keep = self.rounds[walk] == of_round
        walk, position, j = walk[keep], position[keep], self.contexts[keep]
        p, q = self.tokens[walk].T
        sign = np.where(position % 2 == 0, 1.0, -1.0)
        return sp.csr_matrix((np.r_[sign, -sign], (np.r_[j, j], np.r_[p, q])), shape=shape)


def _empty():
    return CycleCertificate(np.zeros(0, np.int64), np.zeros(1, np.int64),
                            np.zeros((0, 2), np.int64), np.zeros(0, np.int64))


def _entries(offsets):
    """``(walk, position)`` of each entry of the flattened walks."""
    lengths = np.diff(offsets)
    walk = np.repeat(np.arange(lengths.size), lengths)
    return walk, np.arange(walk.size) - np.repeat(offsets[:-1], lengths)


def _ranges(starts, lengths):
    """The concatenated ranges ``starts[i] + arange(lengths[i])``."""
    shift = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
    return shift + np.arange(int(lengths.sum()))


def _sides(H):
    """The graphs' labels: ``(left, right)`` compact integer labels per context, one
    pair per partition of the coordinates (one when there are two)."""
    labels = _coordinate_classes(H)
    if len(labels) < 2:
        return []
    sides = []
    for p in range(len(labels) if len(labels) > 2 else 1):
        others = _joint_labels([lab for k, lab in enumerate(labels) if k != p])
        sides.append(tuple(np.unique(lab, return_inverse=True)[1].ravel().astype(np.int64)
                           for lab in (labels[p], others)))
    return sides


#: The largest ``V x labels`` table of which labels each token's contexts have that is
#: held dense (64 MB of bools); above it, sorted keys are searched (five times slower).
MAX_DENSE_LABELS = 1 << 26


def _label_sets(S, labels, n):
    """Which labels each token's contexts have: ``(M, lookup)``, ``M`` sparse (V, n),
    ``lookup`` a dense bool (V, n) or the sorted keys ``v n + label``."""
    incidence = sp.csr_matrix((np.ones(labels.size), (np.arange(labels.size), labels)),
                              shape=(labels.size, n))
    M = (sp.csr_matrix(S, dtype=float).T @ incidence).tocsr()
    M.sort_indices()
    if M.shape[0] * n <= MAX_DENSE_LABELS:
        return M, M.toarray() != 0
    return M, _keys(M)


def _in_sets(lookup, n, tokens, labels):
    """``labels[i]`` among the labels of ``tokens[i]``'s contexts."""
    if lookup.ndim == 2:
        return lookup[tokens, labels]
    if lookup.size == 0:
        return np.zeros(tokens.size, dtype=bool)
    query = tokens * n + labels
    at = np.minimum(np.searchsorted(lookup, query), lookup.size - 1)
    return lookup[at] == query


def _grown_pairs(S, left, right, sets, new_rows):
    """The pairs of tokens whose graphs the rows ``new_rows = (j, v)`` just added to
    the supports can change: ``{v, y}`` with ``y`` after a context at a label of ``j``
    (the new ``v`` edge at ``j`` needs ``y`` at both labels, and the ``y`` edges that
    ``v``'s new labels let through share one with ``j``).  Returns ``(tokens, lookup)``:
    the tokens ``v``, and for :func:`_in_sets` (``n = V``) the pairs both ways."""
    (A, _), (B, _) = sets
    j, v = new_rows
    V = S.shape[1]
    grown = sp.csr_matrix((V, V))
    for M, labels in ((A, left), (B, right)):
        at = sp.csr_matrix((np.ones(j.size), (v, labels[j])), shape=M.shape)
        grown = grown + at @ M.T
    grown = (grown + grown.T).tocsr()
    grown.sort_indices()
    if V * V <= MAX_DENSE_LABELS:
        return np.unique(v), grown.toarray() != 0
    return np.unique(v), _keys(grown)


def _candidate_edges(S, left, right, sets, grown, chunk):
    """The edges that can lie on a closed walk, as ``(j, x, y)``: context ``j``, a token
    ``x`` of its support and a token ``y != x`` that has contexts at both of ``j``'s
    labels (each node of a walk has edges of both tokens); of the pairs ``grown``
    (:func:`_grown_pairs`) when given.  The tokens at one label are listed and the
    other label looked up, from the side whose lists are shorter in total; by chunks
    of contexts of about ``chunk`` entries."""
    (A, lookup_a), (B, lookup_b) = sets
    m, V = S.shape
    tokens, pairs = grown if grown is not None else (None, None)
    n1, n2 = int(left.max()) + 1, int(right.max()) + 1
    count_a = np.bincount(A.indices, minlength=n1)[left]
    count_b = np.bincount(B.indices, minlength=n2)[right]
    if count_a.sum() <= count_b.sum():
        listed, labels, count, lookup, other, n_other = A, left, count_a, lookup_b, right, n2
    else:
        listed, labels, count, lookup, other, n_other = B, right, count_b, lookup_a, left, n1
    at_label = sp.csr_matrix(listed.T)
    at_label.sort_indices()
    sizes = np.diff(S.indptr)
    changed = flagged = None
    if tokens is not None:
        changed = np.zeros(V, dtype=bool)
        changed[tokens] = True
        flagged = np.zeros(m, dtype=bool)
        flagged[np.repeat(np.arange(m), sizes)[changed[S.indices]]] = True
    bounds = np.unique(np.r_[0, np.searchsorted(np.cumsum(count),
                                                np.arange(chunk, int(count.sum()), chunk)), m])
    found = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        lab = labels[lo:hi]
        lengths = np.diff(at_label.indptr)[lab]
        j = np.repeat(np.arange(lo, hi, dtype=np.int64), lengths)
        y = at_label.indices[_ranges(at_label.indptr[lab], lengths)].astype(np.int64)
        if changed is not None:
            keep = flagged[j] | changed[y]
            j, y = j[keep], y[keep]
        keep = _in_sets(lookup, n_other, y, other[j])
        j, y = j[keep], y[keep]
        # each with every token of the support
        n_x = sizes[j]
        x = S.indices[_ranges(S.indptr[j], n_x)].astype(np.int64)
        j, y = np.repeat(j, n_x), np.repeat(y, n_x)
        keep = x != y
        if pairs is not None:
            keep[keep] = _in_sets(pairs, V, x[keep], y[keep])
        found.append((j[keep], x[keep], y[keep]))
    return tuple(np.concatenate(parts) for parts in zip(*found))


def _closed_walks(n, tail, head, component, chosen):
    """One closed walk through each ``chosen`` edge of a graph of ``n`` nodes: the path
    from a root of its component to its tail, the edge, and the path from its head to
    the root, along two breadth-first trees of the component.  Returns ``(walk,
    edges)``: for each step in order, its walk and its edge's index."""
    wanted = np.zeros(int(component.max(initial=-1)) + 1, dtype=bool)
    wanted[component[tail[chosen]]] = True
    inside = np.flatnonzero((component[tail] == component[head]) & wanted[component[tail]])
    first = np.unique(component[tail[chosen]], return_index=True)[1]
    roots = tail[chosen][first]
    top = n  # (an added node joined to every root)
    t, h = tail[inside], head[inside]
    trees = []
    for a, b in ((t, h), (h, t)):
        G = sp.csr_matrix((np.ones(a.size + roots.size, np.int8),
                           (np.r_[a, np.full(roots.size, top)], np.r_[b, roots])),
                          shape=(n + 1, n + 1))
        trees.append(breadth_first_order(G, top, directed=True,
                                         return_predecessors=True)[1])
    out_tree, in_tree = trees
    key = t.astype(np.int64) * (n + 1) + h
    order = np.argsort(key)
    key, edge_of = key[order], inside[order]

    def edge(a, b):
        return edge_of[np.searchsorted(key, a.astype(np.int64) * (n + 1) + b)]

    k = chosen.size
    walks, positions, edges = [np.arange(k)], [np.zeros(k, np.int64)], [chosen]
    # back from the tail to the root along the first tree (positions -1, -2, ...), on
    # from the head to the root along the second (positions 1, 2, ...)
    for tree, start, sign in ((out_tree, tail[chosen], -1), (in_tree, head[chosen], 1)):
        node, at, step = start, np.arange(k), 0
        while at.size:
            other = tree[node]
            go = other != top
            at, node, other = at[go], node[go], other[go]
            step += 1
            walks.append(at)
            positions.append(np.full(at.size, sign * step))
            edges.append(edge(other, node) if sign < 0 else edge(node, other))
            node = other
    walk, position, edge_ids = (np.concatenate(v) for v in (walks, positions, edges))
    order = np.lexsort((position, walk))
    return walk[order], edge_ids[order]


class _TooManyEdges(Exception):
    """A round with more candidate edges than ``max_edges``."""


def _compact(keys, size):
    """``(distinct, inverse)`` of non-negative integer ``keys`` below ``size``: by a
    presence table where it fits (no sort), else :func:`numpy.unique`."""
    if size <= MAX_DENSE_LABELS // 4:  # (64 MB of ranks)
        present = np.zeros(size, dtype=bool)
        present[keys] = True
        distinct = np.flatnonzero(present)
        rank = np.cumsum(present, dtype=np.int32) - 1
        return distinct, rank[keys].astype(np.int64)
    distinct, inverse = np.unique(keys, return_inverse=True)
    return distinct, inverse.ravel().astype(np.int64)


def _round(S, side, new_rows, edges_per_chunk, max_edges):
    """One round on one side: for each row the cycles certify that ``S`` does not hold,
    a closed walk, as ``[(j, v, contexts, offsets, p, q)]`` (empty where none); only the
    pairs of tokens that the rows ``new_rows`` added last round can change, when given.
    Raises :class:`_TooManyEdges` above ``max_edges`` candidate edges."""
    left, right = side
    m, V = S.shape
    n1, n2 = int(left.max()) + 1, int(right.max()) + 1
    sets = (_label_sets(S, left, n1), _label_sets(S, right, n2))
    grown = None if new_rows is None else _grown_pairs(S, left, right, sets, new_rows)
    j, x, y = _candidate_edges(S, left, right, sets, grown, edges_per_chunk)
    _log.debug("cycles of contexts: %d candidate edges", j.size)
    if j.size > max_edges:
        raise _TooManyEdges(j.size)
    if j.size == 0:
        return []
    # the pair (p, q) = (min, max): + edges have p in the support, - edges q; either
    # way the row an edge proves is y after j
    p, q = np.minimum(x, y), np.maximum(x, y)
    forward = x == p
    pairs, pair = _compact(p * V + q, V * V)
    a, b = left[j], n1 + right[j]
    u, v = np.where(forward, a, b), np.where(forward, b, a)
    nodes, inverse = np.unique(np.r_[pair * (n1 + n2) + u, pair * (n1 + n2) + v],
                               return_inverse=True)
    inverse = inverse.ravel()
    tail, head = inverse[:j.size], inverse[j.size:]
    G = sp.csr_matrix((np.ones(j.size, np.int8), (tail, head)), shape=(nodes.size,) * 2)
    component = connected_components(G, directed=True, connection="strong")[1]
    proven = np.flatnonzero(component[tail] == component[head])
    proven = proven[~_supported(S, j[proven], y[proven])]
    if proven.size == 0:
        return []
    _, first = np.unique(j[proven] * V + y[proven], return_index=True)
    chosen = proven[first]
    walk, edge_ids = _closed_walks(nodes.size, tail, head, component, chosen)
    # start each walk with a + edge (a walk from a right-hand root starts with a -)
    lengths = np.bincount(walk, minlength=chosen.size)
    offsets = np.r_[0, np.cumsum(lengths)]
    starts = offsets[:-1]
    minus_first = ~forward[edge_ids[starts]]
    position = _entries(offsets)[1]
    position[starts[minus_first]] = lengths[minus_first]
    edge_ids = edge_ids[np.lexsort((position, walk))]
    return [(j[chosen], y[chosen], j[edge_ids], offsets,
             pairs[pair[chosen]] // V, pairs[pair[chosen]] % V)]


def _first_per_row(found, V):
    """Of several batches' walks (:func:`_round`), one per new row (the first)."""
    if not found:
        return None
    jj = np.concatenate([f[0] for f in found])
    vv = np.concatenate([f[1] for f in found])
    _, keep = np.unique(jj * V + vv, return_index=True)
    keep = np.sort(keep)
    contexts = np.concatenate([f[2] for f in found])
    lengths = np.concatenate([np.diff(f[3]) for f in found])
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    p = np.concatenate([f[4] for f in found])
    q = np.concatenate([f[5] for f in found])
    return (jj[keep], vv[keep], contexts[_ranges(starts[keep], lengths[keep])],
            np.r_[0, np.cumsum(lengths[keep])], p[keep], q[keep])


def cycle_certificate(contexts, support, *, max_rounds=100, max_edges=MAX_EDGES,
                      edges_per_chunk=EDGES_PER_CHUNK):
    """Find the rows that closed walks of contexts certify not separable, in rounds.

    See the module docstring: for a pair of tokens ``(p, q)``, every context with ``p``
    in its support is an edge from its left label to its right label, and every
    context with ``q`` from right to left; a closed walk of these edges is an exact
    Farkas table that proves the rows ``q`` after its ``+`` edges and ``p`` after its
    ``-`` edges zero on the recession cone, and each round adds the rows certified so
    far to the supports.  One walk is kept per certified row.  Check the result with
    :func:`check_cycle_certificate`.

    Parameters
    ----------
    contexts : array-like of shape (m, d)
        Distinct context embeddings ``h_j``.
    support : array-like or sparse matrix of shape (m, V)
        ``support[j, v]`` nonzero when ``v in S_j`` (probabilities may be passed).
    max_rounds : int, default=100
        The longest chain.
    max_edges : int, default=MAX_EDGES
        The most candidate edges of a round on one side of the contexts' labels; the
        rounds stop before one that has more (logged at ``INFO``), and the rows
        certified so far stand.
    edges_per_chunk : int, default=EDGES_PER_CHUNK
        Tokens listed per chunk of contexts while the candidate edges are gathered
        (bounds that step's memory, not the result).

    Returns
    -------
    CycleCertificate
        Empty (``len == 0``) when the contexts' coordinates do not split into labelled
        groups (a coordinate with ``m`` distinct values) or no walk has the supports it
        needs.

    Raises
    ------
    ValueError
        If the contexts or the supports have non-finite values or mismatched shapes.
    """
    H, S = _checked(contexts, support)
    n_support = S.nnz
    sides = _sides(H) if S.shape[0] >= 2 else []
    if not sides:
        return _empty()
    V = S.shape[1]
    kept, new_rows = [], None
    for round_ in range(max_rounds):
        try:
            found = _first_per_row([batch for side in sides for batch in _round(
                S, side, new_rows, edges_per_chunk, max_edges)], V)
        except _TooManyEdges as too_many:
            _log.info("cycles of contexts: round %d would have %d candidate edges, above "
                      "max_edges=%d; the rounds stop there", round_, too_many.args[0],
                      max_edges)
            break
        if found is None:
            break
        j, v, walk_contexts, offsets, p, q = found
        kept.append((walk_contexts, np.diff(offsets), np.stack([p, q], axis=1),
                     np.full(p.size, round_)))
        _log.debug("cycles of contexts, round %d: %d rows", round_, j.size)
        S = _add_rows(S, j, v)
        new_rows = (j, v)
    if not kept:
        return _empty()
    walk_contexts, lengths, pq, rounds = (np.concatenate(parts) for parts in zip(*kept))
    _log.info("cycles of contexts: %d rows certified not separable in %d rounds",
              int(S.nnz - n_support), len(kept))
    return CycleCertificate(walk_contexts.astype(np.int64),
                            np.r_[0, np.cumsum(lengths)].astype(np.int64),
                            pq.astype(np.int64), rounds.astype(np.int64))


#: Values compared at once by :func:`check_cycle_certificate` (walks times length times
#: ``d``): 32 MB of float64.
VALUES_PER_CHUNK = 1 << 22


def _exact_walks(H, contexts, offsets, which):
    """For each walk of ``which`` (a mask of walks of even length ``L`` with contexts in
    range): every coordinate equal along one of the walk's two pairings of neighbours,
    ``(0, 1), (2, 3), ...`` or ``(1, 2), (3, 4), ..., (L - 1, 0)``, so its terms cancel
    in pairs and the sums at even and odd positions are equal exactly, without
    rounding.  (A closed walk of the label graph shares its right labels along the first
    pairing and its left labels along the second.)"""
    lengths = np.diff(offsets)
    ok = np.zeros(lengths.size, dtype=bool)
    d = H.shape[1]
    for length in np.unique(lengths[which]):
        at = np.flatnonzero(which & (lengths == length))
        step = max(1, VALUES_PER_CHUNK // int(length * max(d, 1)))
        for start in range(0, at.size, step):
            walks = at[start:start + step]
            X = H[contexts[_ranges(offsets[walks], lengths[walks])]]
            X = X.reshape(walks.size, int(length), d)
            even, odd = X[:, 0::2], X[:, 1::2]
            first = (even == odd).all(axis=1)
            second = (odd == np.roll(even, -1, axis=1)).all(axis=1)
            ok[walks] = (first | second).all(axis=1)
    return ok


def check_cycle_certificate(contexts, support, certificate):
    """The rows a :class:`CycleCertificate` proves not separable, recomputed.

    Every table is checked against the contexts themselves and the supports of its
    round, in order: a walk of even length with contexts in range, each coordinate
    equal along one of its two pairings of neighbours (so its terms cancel in pairs and
    ``T^T H = 0`` exactly, no rounding), ``p != q``, ``p`` in the supports of the even positions and
    ``q`` in those of the odd ones, where a round's supports are the data's with the
    rows that the tables of earlier rounds certified (a table that fails certifies
    nothing, and nothing that needed its rows).  No tolerance is involved: a certified
    row has margin exactly zero on the recession cone.

    Parameters
    ----------
    contexts : array-like of shape (m, d)
    support : array-like or sparse matrix of shape (m, V)
    certificate : CycleCertificate

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
    certified = np.zeros((m, V), dtype=bool)
    walk_contexts = np.asarray(certificate.contexts, dtype=np.int64).ravel()
    offsets = np.asarray(certificate.offsets, dtype=np.int64).ravel()
    tokens = np.asarray(certificate.tokens, dtype=np.int64).reshape(-1, 2)
    rounds = np.asarray(certificate.rounds, dtype=np.int64).ravel()
    n = rounds.size
    if (n == 0 or tokens.shape[0] != n or offsets.size != n + 1 or offsets[0] != 0
            or offsets[-1] != walk_contexts.size or np.any(np.diff(offsets) < 0)):
        return certified
    walk, position = _entries(offsets)
    inside = np.ones(n, dtype=bool)
    np.logical_and.at(inside, walk, (walk_contexts >= 0) & (walk_contexts < m))
    lengths = np.diff(offsets)
    valid = (inside & (lengths >= 2) & (lengths % 2 == 0)
             & np.all((tokens >= 0) & (tokens < V), axis=1) & (tokens[:, 0] != tokens[:, 1]))
    valid &= _exact_walks(H, walk_contexts, offsets, valid)
    plus = position % 2 == 0
    S = S0
    for round_ in np.unique(rounds[valid]):
        in_round = valid & (rounds == round_)
        at = in_round[walk]
        j, p, q, even = walk_contexts[at], tokens[walk[at], 0], tokens[walk[at], 1], plus[at]
        needed, other = np.where(even, p, q), np.where(even, q, p)
        usable = np.ones(n, dtype=bool)
        np.logical_and.at(usable, walk[at], _supported(S, j, needed))
        use = usable[walk[at]]
        jj, vv = j[use], other[use]
        certified[jj, vv] = True
        S = _add_rows(S, jj, vv)
    certified[S0.nonzero()] = False
    return certified
