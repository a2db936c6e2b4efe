"""The max-margin core: one program family, one set of solvers.

Every explicit limit in skntp (NTP-SVM, ATT-SVM, relaxed ATT-SVM, the head
SVM ``v^mm`` and Graph-SVM) is an instance of

.. math::

    \\min_w \\tfrac12 \\|w\\|^2 \\quad \\text{s.t.}\\quad
    S_{b,a}(w) - S_{b,t}(w) \\;\\{=, \\ge\\}\\; r

where ``S(w)`` is a *score map*, a linear map from the primal parameter ``w`` to
a table of scores with one row per block (a context, an input sequence, a last
token) and one column per position (a vocabulary token, a sequence position),
and each constraint compares two scores of the same row (or one score with 0).
The models only build the score map and the list of constraints; the core
solves the program, by a fast method of our own or by cvxpy (the reference).

The dual of the program, with multipliers ``lam`` (``>= 0`` on inequalities,
free on equalities), is

.. math::

    \\max_{lam} \\; r^T lam - \\tfrac12 \\|S^*(C(lam))\\|^2,\\qquad
    C(lam) = \\sum_k lam_k (e_{b_k a_k} - e_{b_k t_k}),

and the primal solution is ``w = S^*(C(lam))`` (``S^*`` the adjoint).
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from .._backend import (
    CHUNK_ELEMENTS,
    blas_threads,
    get_backend,
    scatter_add,
    sparse_rows_matmul,
    to_numpy,
)
from .._warnings import user_stacklevel
from ..models.attention import lifted_keys
from ._certificate import certify

_log = logging.getLogger("skntp.svm")

__all__ = [
    "BilinearScores",
    "Constraints",
    "KeyScores",
    "MaxMarginProblem",
    "NORMS",
    "QueryKeyScores",
    "MaxMarginResult",
    "NotSeparableError",
    "ProgramTooLargeError",
    "AUTO_ORDER",
    "check_norm",
    "dual_norm",
    "norm_label",
    "program_class",
    "register_method",
    "solve_max_margin",
]


class NotSeparableError(ValueError):
    """The max-margin program is infeasible: the data are not separable.

    The message names the program (e.g. "data are not NTP-separable").
    """


class ProgramTooLargeError(MemoryError):
    """The explicit program would not fit in this machine's memory.

    Raised before anything large is allocated; the message says how many
    constraints the program has, how much memory solving it needs and what
    to do instead.
    """


#: Bytes of memory per constraint while a program is built and solved: the
#: constraint list (block, positions, right-hand side, type), the structure
#: detection and a method's per-constraint arrays (multipliers, values, the
#: sweep's row layout), measured on the NTP-SVM (``benchmarks/scaling.py``).
BYTES_PER_CONSTRAINT = 250


def available_memory():
    """Bytes of memory available to this process now (Linux ``MemAvailable``).

    Falls back to the physical memory when ``/proc/meminfo`` is unreadable.
    """
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - not Linux
        pass
    try:  # pragma: no cover - not Linux
        import os

        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 1 << 62


def check_program_size(name, n_constraints, advice, bytes_per_constraint=None):
    """Raise :class:`ProgramTooLargeError` if a program would not fit in memory.

    Parameters
    ----------
    name : str
        The program ("NTP-SVM").
    n_constraints : int
    advice : str
        What to do instead (ends the message).
    bytes_per_constraint : float, default=None
        Memory a method needs per constraint (``None``: the build's
        ``BYTES_PER_CONSTRAINT``).
    """
    per = BYTES_PER_CONSTRAINT if bytes_per_constraint is None else bytes_per_constraint
    need = float(n_constraints) * per
    have = float(available_memory())
    if need > 0.8 * have:
        raise ProgramTooLargeError(
            f"{name}: the program has {n_constraints:.3g} constraints and needs about "
            f"{need / 2**30:.3g} GiB of memory to build and solve; {have / 2**30:.3g} GiB "
            f"are available. {advice}"
        )


# --------------------------------------------------------------------------
# Score maps
# --------------------------------------------------------------------------
def real_array(a, name):
    """``a`` as a finite float64 array; complex or non-finite values are an error."""
    arr = np.asarray(a)
    if np.iscomplexobj(arr):
        raise ValueError(f"{name} must be real; got complex values (dtype {arr.dtype}).")
    try:
        arr = np.asarray(arr, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric: {exc}") from None
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite; it contains NaN or infinity.")
    return arr


def _with(obj, **arrays):
    """A shallow copy of a score map with some arrays replaced."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    new.__dict__.update(arrays)
    return new


def _max_abs(a):
    return float(np.max(np.abs(a))) if np.size(a) else 0.0


class BilinearScores:
    """Scores ``S = Q W^T E^T`` for a matrix parameter ``W`` (shape ``(p, q)``).

    Row ``b`` of ``S`` holds ``E W Q[b]``: the score of every output
    embedding (row of ``E``, shape ``(n_positions, p)``) for the query
    ``Q[b]`` (shape ``(n_blocks, q)``).  ``E=None`` means the identity, which
    is the linear decoder of the NTP paper: ``S[j, v] = e_v^T W h_j``.
    With ``E`` the token embeddings and ``Q`` the last-token embeddings it is
    the Graph-SVM score ``S[k, i] = e_i^T W e_k``.

    Parameters
    ----------
    queries : ndarray of shape (n_blocks, q)
    outputs : ndarray of shape (n_positions, p) or None
        ``None`` for the identity (then ``n_positions = p`` must be given).
    n_outputs : int, optional
        Number of positions when ``outputs`` is None.
    output_scale : ndarray of shape (n_positions,), optional
        Only with ``outputs=None``: a diagonal ``E`` (``S[b, t] = s_t e_t^T W
        Q[b]``) without the dense ``(n_positions, n_positions)`` product.
    """

    def __init__(self, queries, outputs=None, n_outputs=None, output_scale=None):
        self.queries = real_array(queries, "queries")
        self.outputs = None if outputs is None else real_array(outputs, "outputs")
        self.output_scale = None
        if self.outputs is None:
            if n_outputs is None:
                raise ValueError("n_outputs is required when outputs is None.")
            self.n_positions = int(n_outputs)
            p = self.n_positions
            if output_scale is not None:
                self.output_scale = real_array(output_scale, "output_scale").reshape(p)
        else:
            if output_scale is not None:
                raise ValueError("output_scale is only for outputs=None.")
            self.n_positions, p = self.outputs.shape
        self.n_blocks = self.queries.shape[0]
        self.shape = (p, self.queries.shape[1])
        # multiply-adds of one forward product (BLAS threads: blas_threads)
        self.work_size = self.n_blocks * p * self.shape[1] + (
            0 if self.outputs is None else self.n_blocks * self.n_positions * p)

    def magnitude(self):
        """Largest ``|S[b, t]|`` per unit ``|W|`` entry, up to the dimensions: the scale
        of the map (``max|Q| max|E| max|s|``)."""
        factors = [_max_abs(self.queries)]
        if self.outputs is not None:
            factors.append(_max_abs(self.outputs))
        if self.output_scale is not None:
            factors.append(_max_abs(self.output_scale))
        if min(factors) == 0.0:
            return 0.0
        # in the log domain, so that a product that leaves float64 (while no factor
        # is zero) reads as inf or a subnormal, never as an empty map
        log_mag = sum(math.log(f) for f in factors)
        if log_mag > math.log(np.finfo(np.float64).max):
            return math.inf
        return max(math.exp(log_mag), np.finfo(np.float64).smallest_subnormal)

    def rescaled(self, alpha):
        """The map times ``alpha`` (the queries scaled)."""
        return _with(self, queries=self.queries * alpha)

    def to_backend(self, be):
        """Return a copy whose arrays live on backend ``be``."""
        return _with(self, queries=be.asarray(self.queries),
                     outputs=None if self.outputs is None else be.asarray(self.outputs),
                     output_scale=(None if self.output_scale is None
                                   else be.asarray(self.output_scale)))

    def forward(self, xp, w):
        """Scores ``(n_blocks, n_positions)`` of the parameter ``w``."""
        if self.output_scale is not None:  # scale the (small) parameter, not the table
            return self.queries @ (w * self.output_scale[:, None]).T
        s = self.queries @ w.T
        return s if self.outputs is None else s @ self.outputs.T

    def adjoint(self, xp, c):
        """Adjoint: ``W = E^T C^T Q`` for a table ``C`` shaped like the scores."""
        if self.output_scale is not None:
            return (c.T @ self.queries) * self.output_scale[:, None]
        ct = c.T if self.outputs is None else self.outputs.T @ c.T
        return ct @ self.queries

    def pair_values(self, xp, w, block, pos, ref, has_ref):
        """``S[block, pos] - has_ref * S[block, ref]`` without the score table.

        Only for ``outputs=None``: each entry is ``s_t w_t^T Q[b]``, computed
        from gathered rows in chunks of at most :data:`CHUNK_ELEMENTS` numbers.
        """
        scaled = w if self.output_scale is None else w * self.output_scale[:, None]
        n, q = int(block.shape[0]), self.shape[1]
        if n == 0:
            return xp.zeros(0, dtype=w.dtype)
        step = max(1, CHUNK_ELEMENTS // max(q, 1))
        parts = []
        for a in range(0, n, step):
            b, p_, r_ = block[a:a + step], pos[a:a + step], ref[a:a + step]
            diff = xp.take(scaled, p_, axis=0) - has_ref[a:a + step, None] * xp.take(
                scaled, r_, axis=0)
            parts.append(xp.sum(diff * xp.take(self.queries, b, axis=0), axis=1))
        return xp.concat(parts) if len(parts) != 1 else parts[0]

    def sparse_adjoint(self, xp, block, pos, values):
        """Adjoint of a sparse score table (``values`` at ``(block, pos)``): ``W = C^T Q``.

        Only for ``outputs=None``; never forms the ``(n_blocks, n_positions)`` table.
        """
        w = sparse_rows_matmul(xp, pos, block, values, self.n_positions, self.queries)
        return w if self.output_scale is None else w * self.output_scale[:, None]

    def matrix(self):
        """Sparse matrix of the map on ``w.ravel()`` (C order), rows ``b*T + t``."""
        if self.outputs is None:
            # S[b, t] = sum_k Q[b, k] W[t, k]; W[t, k] sits at t * q + k.
            B, T, (_, q) = self.n_blocks, self.n_positions, self.shape
            b, t, k = np.meshgrid(np.arange(B), np.arange(T), np.arange(q), indexing="ij")
            data = self.queries[b, k]
            if self.output_scale is not None:
                data = data * self.output_scale[t]
            return sp.csr_matrix(
                (data.ravel(), ((b * T + t).ravel(), (t * q + k).ravel())),
                shape=(B * T, T * q),
            )
        # S[b, t] = sum_{a,c} E[t, a] W[a, c] Q[b, c] (dense: small problems only).
        q_, e_ = self.queries, self.outputs
        dense = np.einsum("ta,bc->btac", e_, q_).reshape(
            self.n_blocks * self.n_positions, -1
        )
        return sp.csr_matrix(dense)


class KeyScores:
    """Scores ``S[b, t] = k_{bt}^T p`` for a vector parameter ``p`` (shape ``(d,)``).

    The attention score map: block ``b`` is an input sequence with keys
    ``K_b = X_b W^T`` (rows padded to a common length, ``mask`` marks real
    tokens).  A single position per block (``T = 1``) with ``k_b = y_b r_b``
    gives the binary hard-margin SVM without bias (the head SVM ``v^mm``).

    Parameters
    ----------
    keys : ndarray of shape (n_blocks, n_positions, d)
    """

    def __init__(self, keys):
        self.keys = real_array(keys, "keys")
        if self.keys.ndim != 3:
            raise ValueError(f"keys must be 3-D (blocks, positions, d), got shape "
                             f"{self.keys.shape}.")
        self.n_blocks, self.n_positions, d = self.keys.shape
        self.shape = (d,)
        self.work_size = self.keys.size  # multiply-adds of one forward product

    def magnitude(self):
        """Largest ``|k_bt|`` entry: the scale of the map."""
        return _max_abs(self.keys)

    def rescaled(self, alpha):
        """The map times ``alpha``."""
        return _with(self, keys=self.keys * alpha)

    def to_backend(self, be):
        return _with(self, keys=be.asarray(self.keys))

    def forward(self, xp, w):
        return self.keys @ w

    def adjoint(self, xp, c):
        return xp.sum(self.keys * c[..., None], axis=(0, 1))

    def matrix(self):
        return sp.csr_matrix(self.keys.reshape(-1, self.shape[0]))


class QueryKeyScores:
    """Scores ``S[b, t] = z_b^T W x_{bt}`` for a matrix parameter ``W`` (shape ``(k, d)``).

    The key-query map of attention with one query per input (Tarzanagh, Li,
    Thrampoulidis, Oymak, "Transformers as Support Vector Machines", 2023):
    block ``b`` is an input with tokens ``x_{bt}`` (rows of ``X_b``) and its own
    query ``z_b`` (one of its tokens for self-attention, a separate vector for
    cross-attention).  The constraint rows ``z_b (x_{ba} - x_{bt})^T`` have rank
    one, which the nuclear-norm method uses; the map is the key map of
    :class:`KeyScores` on the lifted keys ``vec(z_b x_{bt}^T)``, never formed
    except by :meth:`matrix`.

    Parameters
    ----------
    tokens : ndarray of shape (n_blocks, n_positions, d)
    queries : ndarray of shape (n_blocks, k)
    """

    def __init__(self, tokens, queries):
        self.tokens = real_array(tokens, "tokens")
        self.queries = real_array(queries, "queries")
        if self.tokens.ndim != 3 or self.queries.ndim != 2 or (
                self.queries.shape[0] != self.tokens.shape[0]):
            raise ValueError(
                f"tokens must be 3-D (blocks, positions, d) and queries 2-D (blocks, k) "
                f"with as many blocks, got shapes {self.tokens.shape} and "
                f"{self.queries.shape}.")
        self.n_blocks, self.n_positions, d = self.tokens.shape
        self.shape = (self.queries.shape[1], d)
        self.work_size = self.tokens.size + self.queries.size * d

    def magnitude(self):
        """``max |x| * max |z|``: the scale of the map."""
        return _max_abs(self.tokens) * _max_abs(self.queries)

    def rescaled(self, alpha):
        """The map times ``alpha``, shared between the tokens and the queries so that
        both end at the same magnitude (scaling the tokens alone leaves queries of
        1e150 against tokens of 1e-150, which the nuclear-norm method cannot factor)."""
        t, q = _max_abs(self.tokens), _max_abs(self.queries)
        if t == 0.0 or q == 0.0:
            return _with(self, tokens=self.tokens * alpha)
        log_a = math.log(alpha)
        f_tokens = math.exp(0.5 * (log_a + math.log(q) - math.log(t)))
        f_queries = math.exp(0.5 * (log_a + math.log(t) - math.log(q)))
        return _with(self, tokens=self.tokens * f_tokens, queries=self.queries * f_queries)

    def unbalanced(self):
        """Whether the tokens and the queries differ in magnitude by more than 1e4
        (:func:`solve_max_margin` then solves the balanced map, ``rescaled(1)``)."""
        t, q = _max_abs(self.tokens), _max_abs(self.queries)
        return t > 0 and q > 0 and not 1e-4 <= t / q <= 1e4

    def to_backend(self, be):
        return _with(self, tokens=be.asarray(self.tokens), queries=be.asarray(self.queries))

    def forward(self, xp, w):
        return (self.tokens @ (self.queries @ w)[..., None])[..., 0]

    def adjoint(self, xp, c):
        # sum_bt c_bt z_b x_bt^T
        return self.queries.T @ (c[..., None] * self.tokens).sum(axis=1)

    def lifted(self):
        """The key map: the lifted keys ``vec(z_b x_bt^T)``, shape ``(B, T, k d)``."""
        return lifted_keys(np, self.tokens, self.queries)

    def matrix(self):
        return sp.csr_matrix(self.lifted().reshape(self.n_blocks * self.n_positions, -1))


# --------------------------------------------------------------------------
# Constraints and problems
# --------------------------------------------------------------------------
@dataclass
class Constraints:
    """Score-difference constraints ``S[b, a] - S[b, t] (= or >=) rhs``.

    ``ref = -1`` compares with 0 (``S[b, a] >= rhs``).  Arrays are NumPy.
    """

    block: np.ndarray
    pos: np.ndarray
    ref: np.ndarray
    rhs: np.ndarray
    equality: np.ndarray

    def __post_init__(self):
        self.block = np.asarray(self.block, dtype=np.int64)
        self.pos = np.asarray(self.pos, dtype=np.int64)
        self.ref = np.asarray(self.ref, dtype=np.int64)
        self.rhs = np.asarray(self.rhs, dtype=float)
        self.equality = np.asarray(self.equality, dtype=bool)
        n = self.block.shape[0]
        for name in ("pos", "ref", "rhs", "equality"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"constraint array {name!r} must have shape ({n},).")

    def __len__(self):
        return int(self.block.shape[0])

    @classmethod
    def concatenate(cls, parts):
        parts = [p for p in parts if len(p)]
        if not parts:
            e = np.zeros(0, dtype=np.int64)
            return cls(e, e, e, np.zeros(0), np.zeros(0, dtype=bool))
        return cls(
            *(
                np.concatenate([getattr(p, f) for p in parts])
                for f in ("block", "pos", "ref", "rhs", "equality")
            )
        )


@dataclass
class MaxMarginProblem:
    """``min 1/2 ||w||^2`` (or another norm, ``norm=``) under score-difference constraints.

    Parameters
    ----------
    scores : BilinearScores or KeyScores
        The linear score map ``w -> S(w)``.
    constraints : Constraints
    name : str
        The program's name, used in messages ("NTP-SVM", "ATT-SVM", ...).
    infeasible_message : str
        What infeasibility means for the user's data
        (e.g. "data are not NTP-separable").
    info : dict
        What the builder knows about the program (selected tokens, masks, ...).
    norm : {"fro", "nuclear", "spectral", "max", "l1"} or ("lp", p), default="fro"
        The norm minimized (see :func:`check_norm`): ``"fro"``, ``1/2 ||w||^2``
        (every program of the papers); ``"nuclear"``, ``||W||_*`` (the limit of
        gradient descent on the factors ``W = Q K^T`` of attention,
        "Transformers as Support Vector Machines", Thm. 2) and ``"spectral"``,
        the operator 2-norm ``||W||_2`` (the limit of spectral descent / Muon),
        for a matrix parameter; ``"max"``, ``max_i |w_i|`` (the limit of sign
        descent and of Adam without epsilon-dominance) and ``"l1"``,
        ``sum_i |w_i|`` (linear programs); ``("lp", p)``, ``1 < p < inf``, the
        entrywise ``(sum_i |w_i|^p)^(1/p)`` of the flattened parameter (the
        limit of lp mirror / steepest descent).  The dual of a norm other than
        Frobenius is ``max r^T lam`` subject to ``||S^*(C(lam))||_* <= 1`` (the
        dual norm, :func:`dual_norm`), ``lam >= 0`` on inequalities.
    """

    scores: object
    constraints: Constraints
    name: str = "max-margin program"
    infeasible_message: str = "data are not separable"
    info: dict = field(default_factory=dict)
    norm: object = "fro"

    def __post_init__(self):
        self.norm = check_norm(self.norm)
        if self.norm in MATRIX_NORMS and len(self.scores.shape) != 2:
            raise ValueError(f"norm={self.norm!r} needs a matrix parameter (a score map "
                             f"whose parameter is 2-D), got shape {self.scores.shape}.")

    @property
    def shape(self):
        return self.scores.shape

    def _is_sparse_decoder(self):
        """Linear-decoder scores with far fewer constraints than score-table entries."""
        sc = self.scores
        return (isinstance(sc, BilinearScores) and sc.outputs is None
                and 4 * len(self.constraints) < sc.n_blocks * sc.n_positions)

    def constraint_matrix(self):
        """Sparse rows of all constraints on ``w.ravel()`` (for cvxpy/testing)."""
        c = self.constraints
        n, T = len(c), self.scores.n_positions
        sc = self.scores
        if isinstance(sc, BilinearScores) and sc.outputs is None:
            # row k: s_pos Q[b] at the columns of W[pos], -s_ref Q[b] at those of W[ref]
            q = sc.shape[1]
            s_ = np.ones(T) if sc.output_scale is None else sc.output_scale
            two = c.ref >= 0
            rows = np.concatenate([np.arange(n), np.flatnonzero(two)])
            tok = np.concatenate([c.pos, c.ref[two]])
            sign = np.concatenate([np.ones(n), -np.ones(int(two.sum()))]) * s_[tok]
            blk = np.concatenate([c.block, c.block[two]])
            data = (sign[:, None] * sc.queries[blk]).ravel()
            cols = (tok[:, None] * q + np.arange(q)[None, :]).ravel()
            return sp.csr_matrix((data, (np.repeat(rows, q), cols)), shape=(n, T * q))
        rows = np.concatenate([np.arange(n), np.arange(n)[c.ref >= 0]])
        cols = np.concatenate([c.block * T + c.pos, (c.block * T + c.ref)[c.ref >= 0]])
        vals = np.concatenate([np.ones(n), -np.ones(int((c.ref >= 0).sum()))])
        select = sp.csr_matrix(
            (vals, (rows, cols)), shape=(n, self.scores.n_blocks * T)
        )
        return (select @ self.scores.matrix()).tocsr()

    # Operators over the array namespace, used by the fast solvers -------------
    def operators(self, be):
        """Return ``(values, dual_to_primal)`` closures on backend ``be``.

        ``values(w)`` gives every constraint's left-hand side; ``dual_to_primal``
        maps multipliers ``lam`` to ``w = S^*(C(lam))``.
        """
        xp = be.xp
        smap = self.scores.to_backend(be)
        c = self.constraints
        T = self.scores.n_positions
        size = self.scores.n_blocks * T
        has_ref = c.ref >= 0
        if self._is_sparse_decoder():
            # gathered scores and a sparse adjoint: memory O(constraints), not O(B T)
            blk, pos = be.asindex(c.block), be.asindex(c.pos)
            ref = be.asindex(np.where(has_ref, c.ref, 0))
            hr = be.asarray(has_ref.astype(float))
            two = np.flatnonzero(has_ref)
            adj_blk = be.asindex(np.concatenate([c.block, c.block[two]]))
            adj_pos = be.asindex(np.concatenate([c.pos, c.ref[two]]))
            sel = be.asindex(np.concatenate([np.arange(len(c)), two]))
            sign = be.asarray(np.concatenate([np.ones(len(c)), -np.ones(two.size)]))

            def values(w):
                return smap.pair_values(xp, w, blk, pos, ref, hr)

            def dual_to_primal(lam):
                return smap.sparse_adjoint(xp, adj_blk, adj_pos, xp.take(lam, sel) * sign)

            return values, dual_to_primal
        pos_flat = be.asindex(c.block * T + c.pos)
        ref_flat = be.asindex(np.where(has_ref, c.block * T + c.ref, 0))
        ref_mask = be.asarray(has_ref.astype(float))
        B = self.scores.n_blocks

        def values(w):
            s = xp.reshape(smap.forward(xp, w), (-1,))
            return xp.take(s, pos_flat) - ref_mask * xp.take(s, ref_flat)

        def dual_to_primal(lam):
            table = scatter_add(xp, pos_flat, lam, size) - scatter_add(
                xp, ref_flat, lam * ref_mask, size
            )
            return smap.adjoint(xp, xp.reshape(table, (B, T)))

        return values, dual_to_primal


def constraint_operator(problem):
    """The constraint rows as a :class:`scipy.sparse.linalg.LinearOperator` on ``w.ravel()``.

    Matrix-free (NumPy): each product is one application of the score map or
    of its adjoint, so it also serves programs whose explicit matrix would
    not fit in memory (e.g. the log-odds equations of a large vocabulary).
    """
    from scipy.sparse.linalg import LinearOperator

    values, dual_to_primal = problem.operators(get_backend("numpy"))
    n_var = int(np.prod(problem.shape))
    return LinearOperator(
        (len(problem.constraints), n_var),
        matvec=lambda x: values(np.reshape(x, problem.shape)),
        rmatvec=lambda y: np.ravel(dual_to_primal(np.ravel(y))),
        dtype=float,
    )


@dataclass
class MaxMarginResult:
    """Solution of a :class:`MaxMarginProblem`.

    Attributes
    ----------
    primal : ndarray
        ``w`` with the problem's shape (margin 1, not normalized).
    dual : ndarray of shape (n_constraints,)
        Multipliers (``>= 0`` on inequalities).
    method : str
    status : str
        Decided by :func:`solve_max_margin` from the certificate it recomputes
        from the program (:mod:`skntp.svm._certificate`), whatever the method
        reported: ``"optimal"`` (violation and ``|gap|`` within ``tol``),
        ``"optimal_inaccurate"`` (feasible, gap above ``tol``),
        ``"infeasible_point"`` (a violation beyond ``tol``, or a negative gap
        beyond ``tol``: the point lies below a lower bound on the optimum) or
        ``"max_iter"`` (the method ran out of iterations uncertified).
    n_iter : int
    gap : float
        Signed relative duality gap ``(||w|| - LB) / ||w||``, ``LB`` the lower
        bound of the multipliers (``(||w||^2 - r^T lam) / ||w||^2`` for the
        Frobenius program when ``w = S^*(C(lam))``).
    max_violation : float
        Largest constraint violation of ``primal``, recomputed from the rows.
    objective : float
        ``||primal||`` in the program's norm.
    bound : float
        The multipliers' lower bound ``LB`` on the optimal norm.
    """

    primal: np.ndarray
    dual: np.ndarray
    method: str
    status: str
    n_iter: int = 0
    gap: float = float("nan")
    max_violation: float = float("nan")
    objective: float = float("nan")
    bound: float = float("nan")


def constraint_violation(problem, w):
    """Largest violation of the problem's constraints at ``w`` (NumPy)."""
    A = problem.constraint_matrix()
    c = problem.constraints
    vals = A @ np.asarray(w, dtype=float).ravel() - c.rhs
    viol = np.where(c.equality, np.abs(vals), np.maximum(-vals, 0.0))
    return float(viol.max()) if viol.size else 0.0


# --------------------------------------------------------------------------
# Methods
# --------------------------------------------------------------------------
_METHODS = {}
#: the norms each method minimizes
_METHOD_NORMS = {}
#: the named norms a program may minimize (:class:`MaxMarginProblem`'s ``norm``):
#: the Frobenius (Euclidean) norm, the nuclear and spectral norms of a matrix
#: parameter, and the entrywise max (l-infinity) and l1 norms; besides these,
#: the entrywise lp norms ``("lp", p)``, ``1 < p < inf`` (kind ``"lp"``)
NORMS = ("fro", "nuclear", "spectral", "max", "l1")
#: the norms of a matrix parameter only
MATRIX_NORMS = ("nuclear", "spectral")
#: the dual norm of each named norm (the dual's constraint ``||S^*(C(lam))||_* <= 1``)
_DUAL_NORM = {"fro": "fro", "nuclear": "spectral", "spectral": "nuclear", "max": "l1",
              "l1": "max"}


def check_norm(norm):
    """Validate a norm and return its canonical form.

    Parameters
    ----------
    norm : str or tuple
        One of :data:`NORMS` (``"fro"``, ``"nuclear"``, ``"spectral"``,
        ``"max"``, ``"l1"``), or ``("lp", p)`` (a tuple or a list) for the
        entrywise lp norm with a finite real ``p > 1``.

    Returns
    -------
    str or tuple
        The name, or ``("lp", float(p))``.  ``("lp", 2)`` stays an lp norm
        (its programs have the Frobenius solution).

    Raises
    ------
    ValueError
        For anything else, with the accepted values; ``("lp", 1)`` and
        ``("lp", inf)`` point to ``"l1"`` and ``"max"``.
    """
    if isinstance(norm, str):
        if norm in NORMS:
            return norm
        raise ValueError(f"norm must be one of {list(NORMS)} or ('lp', p) with 1 < p < inf, "
                         f"got {norm!r}.")
    if isinstance(norm, (tuple, list)) and len(norm) == 2 and norm[0] == "lp":
        p = norm[1]
        if isinstance(p, (bool, np.bool_)) or not isinstance(
                p, (int, float, np.integer, np.floating)):
            raise ValueError(f"the p of norm=('lp', p) must be a real number, got {p!r}.")
        p = float(p)
        if p == 1.0:
            raise ValueError("norm=('lp', 1) is the l1 norm: use norm='l1' (a linear "
                             "program).")
        if p == math.inf:
            raise ValueError("norm=('lp', inf) is the entrywise max norm: use norm='max' "
                             "(a linear program).")
        if not (math.isfinite(p) and p > 1.0):
            raise ValueError(f"the p of norm=('lp', p) must be a finite number > 1, got "
                             f"{norm[1]!r}.")
        return ("lp", p)
    raise ValueError(f"norm must be one of {list(NORMS)} or ('lp', p) with 1 < p < inf, "
                     f"got {norm!r}.")


def norm_kind(norm):
    """``"lp"`` for ``("lp", p)``, the name for the named norms (the registry's key)."""
    return "lp" if isinstance(norm, tuple) else norm


def norm_label(norm):
    """A short name of a canonical norm for messages (``("lp", 1.5)``: ``"l1.5"``)."""
    return f"l{norm[1]:g}" if isinstance(norm, tuple) else norm


def dual_norm(norm):
    """The dual norm: ``fro``, ``nuclear <-> spectral``, ``max <-> l1``, ``lp <-> lq``
    with ``1/p + 1/q = 1``."""
    norm = check_norm(norm)
    if isinstance(norm, tuple):
        p = norm[1]
        return ("lp", p / (p - 1.0))
    return _DUAL_NORM[norm]


def register_method(name, func, norms=("fro",)):
    """Register a solver ``func(problem, tol, max_iter, be, verbose, callback) -> result``.

    ``callback`` is ``None`` or a callable ``callback(n_iter, gap, violation)``
    that an iterative method calls at each certificate check (progress bars).
    A function may decline a problem by returning ``None``.  Whatever status a
    method reports, :func:`solve_max_margin` recomputes the certificate of its
    answer from the program (:func:`skntp.svm._certificate.certify`);
    ``method="auto"`` tries the methods of :data:`AUTO_ORDER` until one answer
    is certified.  ``norms`` are the norms of
    :data:`NORMS` the method minimizes, and ``"lp"`` for every ``("lp", p)``
    (:func:`norm_kind`); it is never given a program in another.

    Optional attribute of ``func``: ``blas_threads``, the BLAS threads it runs
    on (``1``, or ``None`` for the library's pool) where the default, one thread
    for a small score map (:func:`skntp._backend.blas_threads`), does not fit
    its own products.
    """
    _METHODS[name] = func
    _METHOD_NORMS[name] = tuple(norms)


#: ``method="auto"``: the methods tried, in order, for each class of program
#: (:func:`program_class`); the first whose answer is certified ("optimal", recomputed
#: by :func:`skntp.svm._certificate.certify`) answers, and every list ends with the
#: reference path.  When none is certified, the least uncertain answer is returned
#: with its status and a ConvergenceWarning.
#:
#: * ``"decoder"`` (linear-decoder scores: the NTP-SVM, Crammer-Singer): the
#:   sequential dual method on the CPU; the accelerated dual method on a GPU
#:   (``"dcd"`` declines there) and where ``"dcd"`` hands over;
#: * ``"keys"`` (key scores: ATT-SVM, relaxed ATT-SVM, the head SVM): the exact
#:   dual active set; its fallback, the working-set NNLS, takes the programs on
#:   which the active set's rank-one updates drift (it declines those rather
#:   than return an inexact answer); both need a parameter of at most 2000
#:   entries;
#: * ``"bilinear"`` (bilinear scores with output embeddings: Graph-SVM): the
#:   exact null-space NNLS when small, else the accelerated dual method.
#: * ``"nuclear"`` (``norm="nuclear"``: the key-query ATT-SVM of factored
#:   attention): the primal-dual interior-point method on its semidefinite form;
#: * ``"lp"`` (``norm="max"`` or ``"l1"``, any program): the linear program; the
#:   max norm of linear-decoder scores (the NTP-SVM, Crammer-Singer) by the
#:   structured interior-point method of :mod:`skntp.svm._lpipm`, every other by
#:   HiGHS (``scipy.optimize.linprog``);
#: * ``"spectral"`` (``norm="spectral"``, a matrix parameter) and ``"lp-norm"``
#:   (``norm=("lp", p)``): the barrier methods of :mod:`skntp.svm._barrier`
#:   (a parameter of at most a few thousand entries; larger ones go to cvxpy).
AUTO_ORDER = {
    "decoder": ("dcd", "fast", "cvxpy"),
    "keys": ("dual-active-set", "nnls", "fast", "cvxpy"),
    "bilinear": ("graph-ldp", "fast", "cvxpy"),
    "nuclear": ("nuclear-ipm", "cvxpy"),
    "lp": ("lp-ipm", "highs", "cvxpy"),
    "spectral": ("spectral-barrier", "cvxpy"),
    "lp-norm": ("pnorm-barrier", "cvxpy"),
}


def program_class(problem):
    """The class of a program for ``method="auto"``: "decoder", "keys", "bilinear",
    "nuclear", "lp", "spectral" or "lp-norm"."""
    if problem.norm in ("nuclear", "spectral"):
        return problem.norm
    if problem.norm in ("max", "l1"):
        return "lp"
    if norm_kind(problem.norm) == "lp":
        return "lp-norm"
    scores = problem.scores
    while hasattr(scores, "base"):  # GatheredScores
        scores = scores.base
    if isinstance(scores, KeyScores):
        return "keys"
    if isinstance(scores, BilinearScores) and scores.outputs is None:
        return "decoder"
    return "bilinear"


def _solve_cvxpy(problem, tol, max_iter, be, verbose, callback=None):
    import cvxpy as cp

    c = problem.constraints
    A = problem.constraint_matrix()
    n_var = int(np.prod(problem.shape))
    nuclear = problem.norm in MATRIX_NORMS
    if nuclear:
        W = cp.Variable(problem.shape)
        w = cp.vec(W, order="C")
        objective = cp.normNuc(W) if problem.norm == "nuclear" else cp.sigma_max(W)
    elif norm_kind(problem.norm) == "lp":
        w = cp.Variable(n_var)
        # cvxpy writes pnorm with a rational p (exact for the p of the tests)
        objective = cp.pnorm(w, problem.norm[1])
    else:
        w = cp.Variable(n_var)
        objective = {"fro": 0.5 * cp.sum_squares(w), "max": cp.norm(w, "inf"),
                     "l1": cp.norm1(w)}[problem.norm]
    cons = []
    ineq, eq = ~c.equality, c.equality
    if ineq.any():
        cons.append(A[ineq] @ w >= c.rhs[ineq])
    if eq.any():
        cons.append(A[eq] @ w == c.rhs[eq])
    prob = cp.Problem(cp.Minimize(objective), cons)
    try:
        # Clarabel's default gap and feasibility tolerances (1e-8) are on its own
        # scaling; a tenth of ``tol`` leaves room for the certificate (recomputed).
        # Where that is beyond its reach, its defaults, and the certificate decides.
        ctol = max(0.1 * tol, 1e-10)
        try:
            prob.solve(solver=cp.CLARABEL, verbose=bool(verbose), tol_gap_abs=ctol,
                       tol_gap_rel=ctol, tol_feas=ctol)
        except cp.error.SolverError:
            prob.solve(solver=cp.CLARABEL, verbose=bool(verbose))
    except cp.error.SolverError as exc:  # pragma: no cover - solver crash
        raise RuntimeError(f"{problem.name}: Clarabel failed: {exc}") from exc
    status = prob.status
    if status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        raise NotSeparableError(
            f"{problem.name} is infeasible (solver status {status!r}): "
            f"{problem.infeasible_message}."
        )
    if status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise RuntimeError(f"{problem.name}: cvxpy returned status {status!r}.")
    if status == cp.OPTIMAL_INACCURATE:
        from sklearn.exceptions import ConvergenceWarning

        warnings.warn(
            f"{problem.name}: cvxpy returned status 'optimal_inaccurate'; the "
            "solution may be imprecise.",
            ConvergenceWarning,
            stacklevel=user_stacklevel(),
        )
    wv = np.asarray(w.value, dtype=float)
    dual = np.zeros(len(c))
    if ineq.any():
        dual[ineq] = np.asarray(cons[0].dual_value, dtype=float).ravel()
    if eq.any():
        dual[eq] = -np.asarray(cons[-1].dual_value, dtype=float).ravel()
    if nuclear:
        wv = np.asarray(W.value, dtype=float).ravel()
    if problem.norm != "fro":
        gap, dual = norm_gap(problem, wv.reshape(problem.shape), dual, A)
    else:
        sq = float(wv @ wv)
        gap = (sq - float(c.rhs @ dual)) / sq if sq > 0 else 0.0
    vals = A @ wv - c.rhs
    viol = np.where(c.equality, np.abs(vals), np.maximum(-vals, 0.0))
    stats = prob.solver_stats
    return MaxMarginResult(
        primal=wv.reshape(problem.shape),
        dual=dual,
        method="cvxpy",
        status=status,
        n_iter=int(stats.num_iters or 0) if stats is not None else 0,
        gap=float(gap),
        max_violation=float(viol.max()) if viol.size else 0.0,
    )


register_method("cvxpy", _solve_cvxpy, norms=NORMS + ("lp",))


def norm_value(W, norm):
    """``||W||`` in a norm of :func:`check_norm` (``"fro"``: the Frobenius norm;
    ``("lp", p)``: entrywise, of the flattened ``W``)."""
    W = np.asarray(W, dtype=float)
    norm = check_norm(norm)
    if isinstance(norm, tuple):
        a = np.abs(W).ravel()
        top = float(a.max(initial=0.0))
        if top == 0.0:
            return 0.0
        # scaled by the largest entry: |w_i|^p neither overflows nor underflows
        return top * float(np.sum((a / top) ** norm[1])) ** (1.0 / norm[1])
    if norm == "nuclear":
        return float(np.linalg.svd(W, compute_uv=False).sum())
    if norm == "spectral":
        return float(np.linalg.norm(W, 2)) if W.size else 0.0
    if norm == "max":
        return float(np.abs(W).max(initial=0.0))
    if norm == "l1":
        return float(np.abs(W).sum())
    top = float(np.abs(W).max(initial=0.0))
    if top == 0.0 or not np.isfinite(top):
        return top
    # scaled by the largest entry: squares of entries below 1e-154 would underflow to 0
    return top * float(np.linalg.norm(W / top))


def norm_gap(problem, W, dual, A=None):
    """Relative duality gap of ``min ||W||`` (a norm other than Frobenius) at a primal
    ``W`` and multipliers ``dual``.

    The multipliers are clipped to the sign constraints and scaled into the
    dual's feasible set ``||S^*(C(lam))||_* <= 1`` (the dual norm,
    :func:`dual_norm`: spectral for the nuclear norm and nuclear for the
    spectral norm, l1 for max, max for l1, lq for lp); the dual value
    ``r^T lam / ||S^*(C(lam))||_*`` is then a lower bound on the optimum and
    ``(||W|| - r^T lam / ||.||_*) / ||W||`` the gap (with the violation of
    ``W``, the certificate).

    Returns
    -------
    gap : float
    dual : ndarray
        The scaled (dual-feasible) multipliers.
    """
    c = problem.constraints
    A = problem.constraint_matrix() if A is None else A
    lam = np.where(c.equality, dual, np.maximum(dual, 0.0))
    M = np.asarray(A.T @ lam).reshape(problem.shape)
    dual_size = norm_value(M, dual_norm(problem.norm))
    size = norm_value(W, problem.norm)
    if dual_size == 0.0 or size == 0.0:
        return (0.0 if size == 0.0 else 1.0), lam
    lam = lam / dual_size
    return float((size - c.rhs @ lam) / size), lam


def _solve_highs_max_homogeneous(problem, A, verbose):
    """``min ||w||_max`` as ``max gamma`` s.t. ``A_I w >= gamma r_I``, ``A_E w = 0``,
    ``-1 <= w_i <= 1``; ``w / gamma`` is the solution.

    Valid when ``r_I >= 0`` and ``r_E = 0`` (the program is then homogeneous:
    ``w`` is feasible for margin ``gamma`` iff ``w / gamma`` is for margin 1).  The
    box is a set of variable bounds, not ``2 n`` rows ``-t <= w_i <= t``, and
    ``w = 0, gamma = 0`` is feasible, so the solver needs no phase one.  Returns
    ``(x, dual, n_iter)``, or ``None`` when ``gamma`` is 0 to working precision
    (then the general formulation decides).
    """
    from scipy.optimize import linprog

    c = problem.constraints
    n = A.shape[1]
    ineq, eq = ~c.equality, c.equality
    A_ub = sp.hstack([-A[ineq], sp.csr_matrix(c.rhs[ineq][:, None])]).tocsr()
    A_eq = sp.hstack([A[eq], sp.csr_matrix((int(eq.sum()), 1))]).tocsr()
    bounds = np.zeros((n + 1, 2))
    bounds[:n, 0], bounds[:n, 1], bounds[n, 1] = -1.0, 1.0, np.inf
    # the interior-point method (with crossover): an order of magnitude faster than
    # the simplex methods on these dense rows (h_j has d nonzeros per token)
    res = linprog(np.r_[np.zeros(n), -1.0], A_ub=A_ub, b_ub=np.zeros(A_ub.shape[0]),
                  A_eq=A_eq if eq.any() else None, b_eq=np.zeros(int(eq.sum())) if eq.any()
                  else None, bounds=bounds, method="highs-ipm",
                  options={"primal_feasibility_tolerance": 1e-10,
                           "dual_feasibility_tolerance": 1e-10, "disp": bool(verbose)})
    if res.status != 0 or not res.x[n] > 1e-9:
        return None
    dual = np.zeros(len(c))
    dual[ineq] = -res.ineqlin.marginals
    if eq.any():
        dual[eq] = res.eqlin.marginals
    x = res.x[:n] / res.x[n]
    # the smallest scaling that meets every margin-1 row exactly (HiGHS meets them to
    # its feasibility tolerance, divided here by gamma)
    vals, pos = A[ineq] @ x, c.rhs[ineq] > 0
    if pos.any() and np.all(vals[pos] > 0):
        x = x * max(1.0, float(np.max(c.rhs[ineq][pos] / vals[pos])))
    return x, dual, int(getattr(res, "nit", 0) or 0)


def _solve_highs(problem, tol, max_iter, be, verbose, callback=None):
    """``min ||w||_max`` or ``min ||w||_1`` under the constraints: a linear program (HiGHS).

    ``max``: when the program is homogeneous (right-hand sides ``>= 0`` on
    inequalities, 0 on equalities: every program of skntp), ``max gamma`` over
    the box ``|w_i| <= 1`` (:func:`_solve_highs_max_homogeneous`); else
    variables ``(w, t)``, ``min t`` s.t. ``-t <= w_i <= t``.  ``l1``: ``w = u - v``
    with ``u, v >= 0``, ``min sum(u + v)``.  The multipliers of the score
    constraints give the certificate of :func:`norm_gap`.
    """
    from scipy.optimize import linprog

    if problem.norm not in ("max", "l1"):
        return None
    c = problem.constraints
    A = problem.constraint_matrix().tocsr()
    n = A.shape[1]
    ineq, eq = ~c.equality, c.equality
    homogeneous = (problem.norm == "max" and np.all(c.rhs[ineq] >= 0)
                   and not np.any(c.rhs[eq]))
    found = _solve_highs_max_homogeneous(problem, A, verbose) if homogeneous else None
    if found is not None:
        return _certified_lp(problem, A, *found, tol)
    if problem.norm == "max":
        cost = np.r_[np.zeros(n), 1.0]
        bound = sp.hstack([sp.vstack([sp.eye(n), -sp.eye(n)]),
                           -sp.csr_matrix(np.ones((2 * n, 1)))])
        rows = sp.hstack([-A[ineq], sp.csr_matrix((int(ineq.sum()), 1))])
        A_ub = sp.vstack([rows, bound]).tocsr()
        b_ub = np.r_[-c.rhs[ineq], np.zeros(2 * n)]
        A_eq = sp.hstack([A[eq], sp.csr_matrix((int(eq.sum()), 1))]).tocsr()
        bounds = [(None, None)] * n + [(0, None)]
    else:
        cost = np.ones(2 * n)
        A_ub = sp.hstack([-A[ineq], A[ineq]]).tocsr()
        b_ub = -c.rhs[ineq]
        A_eq = sp.hstack([A[eq], -A[eq]]).tocsr()
        bounds = [(0, None)] * (2 * n)
    res = linprog(cost, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq if eq.any() else None,
                  b_eq=c.rhs[eq] if eq.any() else None, bounds=bounds, method="highs",
                  options={"primal_feasibility_tolerance": 1e-10,
                           "dual_feasibility_tolerance": 1e-10, "disp": bool(verbose)})
    if res.status == 2:
        raise NotSeparableError(f"{problem.name} is infeasible (HiGHS): "
                                f"{problem.infeasible_message}.")
    if res.status != 0:
        raise RuntimeError(f"{problem.name}: HiGHS stopped with status {res.status} "
                           f"({res.message}).")
    x = res.x[:n] if problem.norm == "max" else res.x[:n] - res.x[n:]
    dual = np.zeros(len(c))
    dual[ineq] = -res.ineqlin.marginals[: int(ineq.sum())]
    if eq.any():
        dual[eq] = res.eqlin.marginals
    return _certified_lp(problem, A, x, dual, int(getattr(res, "nit", 0) or 0), tol)


def _complementary_max_dual(problem, A, x, dual):
    """Multipliers of ``min ||w||_max`` cleaned by complementary slackness, or ``None``.

    At the optimum ``(A^T lam)_i = 0`` wherever ``|w_i| < ||w||_max``.  An LP
    solver's multipliers meet this to its dual feasibility tolerance only, and
    each such residual adds to ``||A^T lam||_1``, the denominator of the dual
    bound (:func:`norm_gap`): 1e-12 on each of 2 000 entries is a relative gap of
    1e-8.  The correction ``delta`` of least norm on the rows with a multiplier
    (LSQR) that cancels those entries gives another valid bound; the caller
    keeps the better one.
    """
    from scipy.sparse.linalg import lsqr

    c = problem.constraints
    if not hasattr(A, "tocsr"):
        return None
    A = A.tocsr()
    top = float(np.max(np.abs(x), initial=0.0))
    inside = np.abs(x) < top * (1.0 - 1e-9)
    rows = c.equality | (dual > 0)
    if top == 0.0 or not inside.any() or not rows.any():
        return None
    lam = np.where(c.equality, dual, np.maximum(dual, 0.0))
    M = A[rows][:, inside].T.tocsr()
    delta = lsqr(M, -(A.T @ lam)[inside], atol=1e-15, btol=1e-15,
                 iter_lim=20 * M.shape[1])[0]
    lam = lam.copy()
    lam[rows] += delta
    return np.where(c.equality, lam, np.maximum(lam, 0.0))


def _certified_lp(problem, A, x, dual, n_iter, tol, method="highs"):
    """The result of a linear program with its certificate (:func:`norm_gap`, the
    violation); ``"optimal"`` when ``|gap| <= tol`` (HiGHS's own tolerances are on
    feasibility, not the gap; :func:`solve_max_margin` certifies the answer again
    from the program).  ``A``: the constraint matrix or its operator."""
    c = problem.constraints
    gap, scaled = norm_gap(problem, x.reshape(problem.shape), dual, A)
    if problem.norm == "max" and gap > tol:
        cleaned = _complementary_max_dual(problem, A, x, dual)
        if cleaned is not None:
            gap2, scaled2 = norm_gap(problem, x.reshape(problem.shape), cleaned, A)
            if gap2 < gap:
                gap, scaled = gap2, scaled2
    dual = scaled
    vals = A @ x - c.rhs
    viol = np.where(c.equality, np.abs(vals), np.maximum(-vals, 0.0))
    return MaxMarginResult(primal=x.reshape(problem.shape), dual=dual, method=method,
                           status="optimal" if abs(gap) <= tol else "optimal_inaccurate",
                           n_iter=n_iter, gap=float(gap),
                           max_violation=float(viol.max(initial=0.0)))


register_method("highs", _solve_highs, norms=("max", "l1"))


def solve_max_margin(
    problem,
    *,
    method="auto",
    tol=None,
    max_iter=100_000,
    backend="numpy",
    device=None,
    dtype="float64",
    verbose=0,
    callback=None,
):
    """Solve ``min 1/2 ||w||^2`` (or ``min ||w||`` in ``problem.norm``) under the
    problem's constraints.

    Parameters
    ----------
    problem : MaxMarginProblem
    method : str, default="auto"
        ``"cvxpy"`` (Clarabel, the reference path), a registered method
        (``"dcd"``, ``"fast"``, ``"dual-active-set"``, ``"nnls"``,
        ``"graph-ldp"``; ``"nuclear-ipm"`` and ``"highs"`` for the nuclear, max
        and l1 norms; ``"lp-ipm"`` for the max norm of linear-decoder scores;
        ``"spectral-barrier"`` and ``"pnorm-barrier"`` for the spectral and lp
        norms), or ``"auto"``: the methods of :data:`AUTO_ORDER` for the
        program's class, in order.  A method is never given a program in a norm
        it does not minimize (``ValueError``).
    tol : float, default=None
        The certificate's tolerance: relative duality gap (in absolute value) and
        constraint violation (relative to the right-hand sides, above each row's
        rounding floor); below ``1000 eps`` the gap is held to that floor.  ``None``:
        :data:`DEFAULT_TOL` for the program's norm (``1e-8``; ``1e-6`` for the
        spectral norm, whose programs float64 does not certify closer: the barrier
        method stops at gaps of 2e-8 to 1e-7, Clarabel's semidefinite form near 1e-5).
    max_iter : int, default=100_000
    backend, device, dtype :
        Array layer for iterative methods (see :func:`skntp._backend.get_backend`).
        The solve always runs in float64: ``dtype="float32"`` (an estimator's
        training precision) is accepted and upcast, since float32 cannot
        certify the default ``tol``.
    verbose : int, default=0
    callback : callable, optional
        ``callback(n_iter, gap, violation)``, called by iterative methods at
        each certificate check (relative duality gap and largest constraint
        violation of the current iterate), e.g. to drive a progress bar, and
        once more with the returned result's figures.

    Returns
    -------
    MaxMarginResult
        With NumPy arrays.

    Raises
    ------
    NotSeparableError
        If the program is infeasible (the message names the program and what
        that means for the data).

    Notes
    -----
    The program is homogeneous in the score map: scaling it by ``alpha``
    scales the solution by ``1 / alpha`` and the multipliers by
    ``1 / alpha^2``.  A map of magnitude outside ``[1e-4, 1e4]`` is scaled to
    unit magnitude, solved, and the answer scaled back, so every method sees
    well-scaled numbers whatever the units of the data (``1e-150`` to
    ``1e150`` and beyond).  A program that ``w = 0`` satisfies (no rows, or
    inequalities of rhs ``<= 0`` and equalities of rhs 0) has the optimum
    ``w = 0`` in every norm; it is answered without a method (``method="trivial"``).
    """
    if tol is None:
        tol = DEFAULT_TOL.get(norm_kind(problem.norm), 1e-8)
    _check_solver_options(tol, max_iter)
    c = problem.constraints
    if not np.any(c.rhs[c.equality]) and not np.any(c.rhs[~c.equality] > 0):
        # w = 0 is feasible (no row, or rows ">= rhs <= 0" and "= 0" only), hence optimal
        # in any norm
        return MaxMarginResult(
            primal=np.zeros(problem.shape),
            dual=np.zeros(len(c)),
            method="trivial",
            status="optimal",
            gap=0.0,
            max_violation=0.0,
        )
    # Explicit programs are always solved in float64 (on the requested backend
    # and device): their answers are certified to ``tol`` (1e-8 by default),
    # beyond float32's precision, where iterative methods would run to
    # max_iter without converging.  An estimator's float32 is for its training loop.
    get_backend(backend, device, dtype)  # validates the request
    be = get_backend(backend, device, "float64")
    alpha = _unit_scale(problem.scores, problem.name)
    if alpha != 1.0 or getattr(problem.scores, "unbalanced", lambda: False)():
        scaled = _scaled_problem(problem, alpha)
        result = solve_max_margin(scaled, method=method, tol=tol, max_iter=max_iter,
                                  backend=backend, device=device, dtype=dtype,
                                  verbose=verbose, callback=callback)
        return _scale_back(problem, result, alpha)
    if method == "auto":
        names = [name for name in AUTO_ORDER[program_class(problem)] if name in _METHODS]
    else:
        if method not in _METHODS:
            raise ValueError(
                f"unknown max-margin method {method!r}; choose from "
                f"{sorted(_METHODS) + ['auto']}."
            )
        kind = norm_kind(problem.norm)
        if kind not in _METHOD_NORMS[method]:
            able = sorted(n for n, norms in _METHOD_NORMS.items() if kind in norms)
            raise ValueError(
                f"method {method!r} minimizes the {' or '.join(_METHOD_NORMS[method])} "
                f"norm, not the {norm_label(problem.norm)} norm of {problem.name}; use "
                f"one of {able + ['auto']}.")
        names = [method]
    _log_program(problem, names)
    answers = []  # (result, the warnings its method raised)
    for name in names:
        func = _METHODS[name]
        # a method that sets its own BLAS threads (``func.blas_threads``: 1, or None
        # for the library's pool) is not limited by the size of the score map
        own = getattr(func, "blas_threads", False)
        size = ((0 if own == 1 else np.inf) if own is not False
                else getattr(problem.scores, "work_size", np.inf))
        t0 = time.perf_counter()
        with blas_threads(size, be), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = func(problem, tol, max_iter, be, verbose, callback)
            except RuntimeError as exc:
                # a solver that fails outright (not infeasibility, not memory: those
                # raise their own errors) does not cost "auto" the answers it has
                if method != "auto" or not answers:
                    raise
                _log.info("%s (%s) failed: %s", problem.name, name, exc)
                continue
        if result is None:  # declined
            _reemit(caught)
            continue
        result.primal = to_numpy(result.primal)
        result.dual = to_numpy(result.dual)
        certify(problem, result, tol)
        _log.info("%s (%s): %s in %.2f s (gap %.2e, violation %.2e)", problem.name, name,
                  result.status, time.perf_counter() - t0, result.gap, result.max_violation)
        answers.append((result, caught))
        if result.status == "optimal" or method != "auto":
            break
        # "auto": an answer that is not certified has not decided the program; the
        # next method (the reference path last) does
        if verbose:
            print(f"[{problem.name}] method {name!r}: {result.status} (gap {result.gap:.2e},"
                  f" violation {result.max_violation:.2e}); trying the next method")
    if not answers:
        raise ValueError(f"no max-margin method accepts the problem {problem.name}.")
    result, caught = min(answers, key=lambda a: _uncertainty(a[0], tol))
    # the methods' own convergence warnings give way to the certificate's verdict (which
    # quotes them when the answer is not certified)
    said = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    _reemit(w for w in caught if not issubclass(w.category, ConvergenceWarning))
    if result.status != "optimal":
        tried = ", ".join(f"{r.method!r}: {r.status}" for r, _ in answers)
        quoted = "".join(f" The method said: {m}" for m in said)
        warnings.warn(
            f"{problem.name}: no answer could be certified ({tried}); returning the one of "
            f"method {result.method!r}, status {result.status!r}: relative duality gap "
            f"{result.gap:.2e}, largest constraint violation {result.max_violation:.2e} "
            f"(tol={tol:g}). Increase max_iter, or pass another method.{quoted}",
            ConvergenceWarning, stacklevel=user_stacklevel())
    if callback is not None:  # the final certificate, whatever the method
        callback(result.n_iter, result.gap, result.max_violation)
    return result


def _uncertainty(result, tol):
    """How far an answer is from certified (0 when it is): the largest of its
    violation and ``|gap|`` in units of ``tol``."""
    if result.status == "optimal":
        return 0.0
    t = max(tol, 1e-16)
    return max(result.max_violation / t, abs(result.gap) / t, 1.0)


def _reemit(caught):
    """Warn again, at their own file and line, warnings recorded by ``catch_warnings``."""
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


#: programs with more constraint-row entries than this announce their size and the
#: methods tried at ``logging.INFO`` (logger ``"skntp.svm"``)
LOG_SIZE = 1_000_000


def _log_program(problem, names):
    n_rows = len(problem.constraints)
    n_var = int(np.prod(problem.shape))
    if n_rows * max(problem.shape[-1], 1) >= LOG_SIZE:
        _log.info("%s: %d constraints on %d variables (norm %s); methods %s", problem.name,
                  n_rows, n_var, norm_label(problem.norm), ", ".join(names))




#: the certificate's default tolerance of a norm (:func:`solve_max_margin`'s ``tol=None``)
DEFAULT_TOL = {"spectral": 1e-6}

#: Score maps of magnitude outside this range are solved at unit magnitude.
_WELL_SCALED = (1e-4, 1e4)


def _check_solver_options(tol, max_iter):
    if not (isinstance(tol, (int, float, np.floating, np.integer)) and np.isfinite(tol)
            and tol >= 0):
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}.")
    if not (isinstance(max_iter, (int, np.integer)) and not isinstance(max_iter, bool)
            and max_iter >= 1):
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}.")


def _unit_scale(scores, name="the program"):
    """``alpha`` that brings the map's magnitude to 1 (1.0 when already well scaled)."""
    with np.errstate(over="ignore", under="ignore"):
        mag = scores.magnitude() if hasattr(scores, "magnitude") else 1.0
    if mag == 0.0 or _WELL_SCALED[0] <= mag <= _WELL_SCALED[1]:
        return 1.0
    if not np.isfinite(mag) or mag < np.finfo(np.float64).smallest_normal:
        raise FloatingPointError(
            f"{name}: the data make scores of magnitude beyond float64 (a product of "
            "factors over 1e308 or under 1e-308), so the solution (about the inverse of "
            "that magnitude) cannot be represented; rescale the data (e.g. the embeddings "
            "to unit norm: the limits are scale-covariant).")
    return 1.0 / mag


def _scaled_problem(problem, alpha):
    from dataclasses import replace

    return replace(problem, scores=problem.scores.rescaled(alpha))


def _scale_back(problem, result, alpha):
    """The original program's answer from the one with the map scaled by ``alpha``."""
    with np.errstate(over="ignore"):
        result.primal = result.primal * alpha
        # multipliers scale as 1/alpha^2 for 1/2 ||w||^2, as 1/alpha for the other norms
        result.dual = result.dual * alpha
        if problem.norm == "fro":
            result.dual = result.dual * alpha
        result.objective = result.objective * alpha
        result.bound = result.bound * alpha
    if not np.all(np.isfinite(result.primal)):
        raise FloatingPointError(
            f"{problem.name}: the solution overflows float64 (the data's scores have "
            f"magnitude {1.0 / alpha:.3g}, so the solution's entries are about "
            f"{alpha:.3g} times those of the unit-scale solution); rescale the data."
        )
    if not np.all(np.isfinite(result.dual)):
        warnings.warn(
            f"{problem.name}: the multipliers overflow float64 at this data scale "
            f"({1.0 / alpha:.3g}); they are reported as inf, the solution is exact.",
            RuntimeWarning, stacklevel=user_stacklevel())
    return result


def solve_min_norm(problem, *, tol=1e-13, max_iter=None):
    """Minimum-norm (least-squares) solution of the problem's *equalities*.

    Solves ``min ||w||`` over the least-squares solutions of
    ``S_{b,a}(w) - S_{b,t}(w) = rhs`` with LSQR started at zero, which
    returns the minimum-norm solution; it lies in the row space of the
    constraints (for the NTP-SVM structure, in the subspace ``F`` of eq. (5)).

    Parameters
    ----------
    problem : MaxMarginProblem
        Equality constraints only.
    tol : float, default=1e-13
        LSQR's ``atol`` and ``btol``.
    max_iter : int, optional
        LSQR's iteration limit; by default 20 times the number of unknowns.

    Returns
    -------
    w : ndarray with the problem's shape
    relative_residual : float
        ``||A w - rhs|| / max(1, ||rhs||)``: ~0 when the equations are solvable.
    """
    from scipy.sparse.linalg import lsqr

    c = problem.constraints
    if not c.equality.all():
        raise ValueError("solve_min_norm takes equality constraints only.")
    if len(c) == 0:
        return np.zeros(problem.shape), 0.0
    alpha = _unit_scale(problem.scores, problem.name)
    if alpha != 1.0:  # homogeneous in the map, as in solve_max_margin
        w, res = solve_min_norm(_scaled_problem(problem, alpha), tol=tol, max_iter=max_iter)
        w = w * alpha
        if not np.all(np.isfinite(w)):
            raise FloatingPointError(
                f"{problem.name}: the minimum-norm solution overflows float64; rescale "
                "the data.")
        return w, res
    op = constraint_operator(problem)
    n_var = op.shape[1]
    out = lsqr(op, c.rhs, atol=tol, btol=tol, iter_lim=max_iter or 20 * n_var)
    w = np.asarray(out[0]).reshape(problem.shape)
    res = float(np.linalg.norm(op.matvec(out[0]) - c.rhs)) / max(
        1.0, float(np.linalg.norm(c.rhs)))
    return w, res
