"""The products of the NTP loss with its contexts: dense, or word by word.

The loss (2) of Thrampoulidis (2024) touches the contexts ``H`` (m, d) only through
the logits ``H W^T`` and the images ``T^T diag(pi) H`` of ``(m, V)`` tables (its
gradient and Hessian products).  Contexts that concatenate word vectors (``h_j =
(u_{x_j}, u'_{y_j})``, the text loaders' ``embedding="words"``) repeat each word's
block across every context that holds the word: with ``E_g`` the distinct rows of
block ``g`` and ``idx_g`` each context's row there, ``h_j = (E_1[idx_1[j]], ...,
E_G[idx_G[j]])`` and

* ``H W^T = sum_g (E_g W_g^T)[idx_g]``, ``W_g`` the columns of block ``g``;
* ``T^T diag(pi) H = (Y_1^T E_1, ..., Y_G^T E_G)``, ``Y_g = A_g T`` with ``A_g`` the
  ``(n_g, m)`` matrix of ``pi_j`` at ``(idx_g[j], j)``: the table summed over the
  contexts that share a word.

The matrix products shrink from ``m d V`` to ``sum_g n_g d_g V`` multiply-adds, and
each block adds one pass over the ``(m, V)`` table.  On the Python documentation at
d = 768 (11,071 contexts, 1,928 and 2,048 distinct words, V = 2,128) a Hessian product
of ``W_fin`` takes 0.26 s instead of 0.73 s (0.19 s instead of 0.39 s in single
precision), and six Newton steps 113 s instead of 161 s, the preconditioner's
applications unchanged (``benchmarks/factored_contexts.py``, 2 cores).
"""

from __future__ import annotations

import numpy as np

from .._backend import matmul_into, row_chunks, sparse_rows

__all__ = ["ContextProducts", "word_blocks"]

#: The most column blocks :func:`word_blocks` tries (contexts of up to 8 words).
MAX_BLOCKS = 8

#: The cells of the ``(m, V)`` table that :meth:`ContextProducts.logits_into` gathers
#: and sums at a time: each block's gathered rows are a temporary of this size, which
#: smaller chunks reuse from the allocator (at m = 105,782, V = 2,990 with three blocks
#: the logits took 1.97 s by chunks of 2**24 cells, 1.02 s by chunks of 2**20).
GATHER_ELEMENTS = 2**20

#: The fraction of the dense products' multiply-adds above which :func:`word_blocks`
#: keeps the contexts dense.
FACTORED_WORK = 0.5

#: The multiply-adds that one entry of a pass over an ``(m, V)`` table costs as much
#: as (each block gathers and sums the table once each way): on 2 cores, a gather of
#: the ``(11071, 2128)`` table took 24 ms and a product of ``0.8e9`` multiply-adds
#: 31 ms, about 26 per entry.
PASS_COST = 32


def word_blocks(H, max_blocks=MAX_BLOCKS, pass_cost=PASS_COST):
    """The contexts as concatenated word vectors, when that saves work.

    Splits the columns into ``G = 2, ..., max_blocks`` equal blocks and takes the
    distinct rows of each (bitwise: ``E_g[idx_g]`` is the block exactly).  Of the
    splits, the one of least work per token, ``sum_g n_g d_g + pass_cost G m``
    (``n_g`` distinct rows of ``d_g`` entries), when that is below
    :data:`FACTORED_WORK` of the dense ``m d``.  A split is sorted only where the
    distinct hashes of its blocks' rows (:func:`_hash_prefixes`, one pass over ``H``
    for all the splits), a lower bound on ``n_g``, leave it below that: on generic
    contexts (m = 50,000, d = 768) the detection takes 0.34 s instead of 4.1 s.

    Parameters
    ----------
    H : ndarray of shape (m, d)
    max_blocks : int, default=MAX_BLOCKS
    pass_cost : float, default=PASS_COST

    Returns
    -------
    list of (start, stop, E, idx) or None
        Each block's columns ``[start, stop)``, its distinct rows ``E`` (n_g, d_g)
        and each context's row ``idx`` (m,); ``None`` where no split saves enough.
    """
    m, d = H.shape
    best, least = None, FACTORED_WORK * m * d
    splits = [n for n in range(2, min(max_blocks, d) + 1) if d % n == 0]
    cuts = sorted({a for n in splits for a in range(0, d + 1, d // n)})
    hashes = _hash_prefixes(H, cuts) if splits else None
    for n in splits:
        width, blocks, work = d // n, [], pass_cost * n * m
        if hashes is not None:
            # (distinct hashes first, a lower bound on the distinct rows: generic
            # contexts skip the sorts of their rows)
            at = [cuts.index(a) for a in range(0, d + 1, width)]
            if work + width * sum(np.unique(hashes[:, k] - hashes[:, i]).size
                                  for i, k in zip(at[:-1], at[1:])) >= least:
                continue
        for start in range(0, d, width):
            if work >= least:
                break
            E, idx = np.unique(H[:, start:start + width], axis=0, return_inverse=True)
            work += E.size
            blocks.append((start, start + width, E, idx.reshape(-1)))
        if work < least:
            best, least = blocks, work
    return best


#: Rows hashed at a time by :func:`_hash_prefixes`.
HASH_ROWS = 2**12


def _hash_prefixes(H, cuts):
    """Per row of ``H`` (m, d), an integer hash of its 8- or 4-byte words in the
    columns ``[0, c)`` for each ``c`` in ``cuts``, shape (m, len(cuts)): a sum of one
    term per word (wrapping), so that a block's hash is the difference of two and equal
    blocks hash alike, whatever the block.  ``None`` for other item sizes."""
    size = H.dtype.itemsize
    if size not in (4, 8):
        return None
    words = np.ascontiguousarray(H).view(np.uint64 if size == 8 else np.uint32)
    weights = np.random.default_rng(0).integers(
        0, 2**62, words.shape[1], dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    out = np.empty((H.shape[0], len(cuts)), dtype=np.uint64)
    for a in range(0, H.shape[0], HASH_ROWS):
        x = words[a:a + HASH_ROWS].astype(np.uint64)
        x ^= x >> np.uint64(29)  # (the bits above 32 reach the low ones: a sign counts)
        x *= weights
        prefix = np.cumsum(x, axis=1, dtype=np.uint64)
        out[a:a + HASH_ROWS] = np.where(np.asarray(cuts) > 0,
                                        prefix[:, np.maximum(np.asarray(cuts) - 1, 0)], 0)
    return out


class ContextProducts:
    """``H W^T`` into an ``(m, V)`` buffer and ``T^T diag(pi) H`` of a table, on a
    backend: dense, or factored by word (:func:`word_blocks`, module docstring).

    Both work on all the contexts at once or on a range of rows (the row chunks of
    :class:`~skntp.losses.decoder.CrossEntropy`): :meth:`words` prepares the
    per-word logits once, :meth:`logits_into` gathers any range of rows from them,
    :meth:`table_sums` adds a range of the table's rows into per-word sums, and
    :meth:`image_of` multiplies the sums by the words once.

    Parameters
    ----------
    H : ndarray of shape (m, d), or (B, m, d) for independent trials (dense only)
    pi : ndarray of shape (m,) or (B, m), or None
        The context weights of the images (``None``: none, the images of the tables
        as given).
    be : Backend
    dtype : optional
        The backend's dtype of the products (its own by default); single precision
        for the Hessian products that allow it.
    blocks : list, optional
        :func:`word_blocks` of ``H`` (computed when not given; ``None`` is dense).
    """

    def __init__(self, H, pi, be, dtype=None, blocks="detect"):
        self.be, self.xp, self.dtype = be, be.xp, dtype
        if isinstance(blocks, str):
            blocks = word_blocks(H) if H.ndim == 2 else None
        self.blocks = None
        if blocks is None:
            self.H = be.asarray(H, dtype)
            self.weighted = self.H if pi is None else be.asarray(H * pi[..., None], dtype)
            return
        self.pi = np.ones(H.shape[0]) if pi is None else pi
        self.blocks = [(start, stop, be.asarray(E, dtype), idx, be.asindex(idx))
                       for start, stop, E, idx in blocks]
        # (A_g of each range of rows: the table's rows weighted and summed by word)
        self._sums = {}

    def words(self, Wt):
        """The per-word logits ``E_g W_g^T`` of :meth:`logits_into` (``None`` when
        dense): computed once per ``Wt``, whatever the number of row ranges."""
        if self.blocks is None:
            return None
        return [E @ Wt[..., start:stop, :] for start, stop, E, _, _ in self.blocks]

    def logits_into(self, Wt, out, start=0, words=None):
        """``out <- H[start:start + len(out)] Wt`` for ``Wt`` of shape (d, V) (or
        (B, d, V)); ``words`` (:meth:`words`) when at hand.  Returns ``out``."""
        stop = start + out.shape[-2]
        if self.blocks is None:
            return matmul_into(self.H[..., start:stop, :], Wt, out)
        xp = self.xp
        words = self.words(Wt) if words is None else words
        gathers = [(F, block[4][start:stop]) for F, block in zip(words, self.blocks)]
        for a, b in row_chunks(stop - start, out.shape[-1], GATHER_ELEMENTS):
            (F, idx), *rest = gathers
            out[a:b] = xp.take(F, idx[a:b], axis=0)
            for F, idx in rest:
                out[a:b] += xp.take(F, idx[a:b], axis=0)
        return out

    def table_sums(self, T, start=0, into=None):
        """The rows ``start:start + len(T)`` of a table ``T`` for :meth:`image_of`,
        added into ``into`` (a previous range's sums) when given: the partial image
        ``T^T diag(pi) H[start:...]`` when dense, the weighted rows summed per word
        (``(n_g, V)`` each) when factored."""
        stop = start + T.shape[-2]
        if self.blocks is None:
            part = self.xp.matrix_transpose(T) @ self.weighted[..., start:stop, :]
            return part if into is None else _added(into, part)
        parts = [A(T) for A in self._word_sums(start, stop)]
        return parts if into is None else [_added(a, p) for a, p in zip(into, parts)]

    def image_of(self, sums):
        """``T^T diag(pi) H`` of shape (V, d) from the :meth:`table_sums` of all of
        ``T``'s rows."""
        if self.blocks is None:
            return sums
        return self.xp.concat([Y.T @ E for Y, (_, _, E, _, _) in zip(sums, self.blocks)],
                              axis=1)

    def image(self, T):
        """``T^T diag(pi) H`` of shape (V, d) for a table ``T`` of shape (m, V)."""
        return self.image_of(self.table_sums(T))

    def _word_sums(self, start, stop):
        if (start, stop) not in self._sums:
            n = stop - start
            self._sums[start, stop] = [
                sparse_rows(self.be, idx[start:stop], np.arange(n), self.pi[start:stop],
                            (E.shape[0], n), self.dtype)
                for _, _, E, idx, _ in self.blocks]
        return self._sums[start, stop]


def _added(total, part):
    total += part
    return total
