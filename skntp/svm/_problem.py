"""The max-margin program family: score maps, constraints, problems and results.

Every explicit limit in skntp (NTP-SVM, ATT-SVM, relaxed ATT-SVM, the head
SVM ``v^mm`` and Graph-SVM) is an instance of

.. math::

    \\min_w \\|w\\| \\quad \\text{s.t.}\\quad
    S_{b,a}(w) - S_{b,t}(w) \\;\\{=, \\ge\\}\\; r

where ``S(w)`` is a *score map*, a linear map from the primal parameter ``w`` to
a table of scores with one row per block (a context, an input sequence, a last
token) and one column per position (a vocabulary token, a sequence position),
and each constraint compares two scores of the same row (or one score with 0).
The models only build the score map and the list of constraints
(:class:`MaxMarginProblem`); :func:`skntp.svm.solve_max_margin` solves it by
one of the methods of :mod:`skntp.svm.solvers`.

For the Frobenius norm (``min 1/2 ||w||^2``) the dual, with multipliers ``lam``
(``>= 0`` on inequalities, free on equalities), is

.. math::

    \\max_{lam} \\; r^T lam - \\tfrac12 \\|S^*(C(lam))\\|^2,\\qquad
    C(lam) = \\sum_k lam_k (e_{b_k a_k} - e_{b_k t_k}),

and the primal solution is ``w = S^*(C(lam))`` (``S^*`` the adjoint).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator

from .._backend import (
    CHUNK_ELEMENTS,
    get_backend,
    lifted_keys,
    scatter_add,
    sparse_rows_matmul,
)
from ._norms import MATRIX_NORMS, check_norm

__all__ = [
    "BilinearScores",
    "Constraints",
    "KeyScores",
    "MaxMarginProblem",
    "MaxMarginResult",
    "NotSeparableError",
    "ProgramTooLargeError",
    "QueryKeyScores",
    "UndecidedError",
    "available_memory",
    "check_program_size",
    "constraint_operator",
    "constraint_violation",
    "real_array",
]


class NotSeparableError(ValueError):
    """The max-margin program is infeasible: the data are not separable.

    The message names the program (e.g. "data are not NTP-separable").  Raised by
    :func:`~skntp.svm.solve_max_margin` only with a verified Farkas certificate
    (:mod:`skntp.svm._certificate`): its attribute ``result`` is then the
    :class:`MaxMarginResult` of status ``"infeasible"`` whose ``dual`` holds the
    multipliers.  A method of :mod:`skntp.svm.solvers` that concludes
    infeasibility raises it with its multipliers in the attribute ``ray`` (a
    claim, which the dispatcher checks).
    """

    result = None
    ray = None


class UndecidedError(RuntimeError):
    """No method decided a max-margin program: no answer is certified either way.

    Raised by :func:`~skntp.svm.solve_max_margin` when every method tried called
    the program infeasible and none of their multipliers is a verified Farkas
    certificate.  ``results`` holds their :class:`MaxMarginResult` (status
    ``"undecided"``).  Neither "separable" nor "not separable" can be reported.
    """

    results = ()


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
    infeasibility_proof : callable or None
        ``proof() -> (message, multipliers) or None``: a test of infeasibility that
        the builder knows, cheaper than a solve (for the NTP-SVM of ``m > d``
        contexts, the table of a stationary point of the loss,
        :func:`skntp.svm.no_row_is_separable`).  :func:`skntp.svm.solve_max_margin`
        runs it before any method, checks the multipliers as a Farkas certificate
        from the rows, and raises :class:`NotSeparableError` with the message when
        they certify; otherwise (and on ``None``) the methods decide.
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
    infeasibility_proof: object = None

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
        ``"max_iter"`` (the method ran out of iterations uncertified); for a
        method that called the program infeasible, ``"infeasible"`` (its
        multipliers in ``dual`` are a verified Farkas certificate) or
        ``"undecided"`` (they are not).
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
    margin_bound : float
        ``"infeasible"`` and ``"undecided"``: the multipliers' bound on the
        normalized margin of every feasible point (at most
        :data:`~skntp.svm._certificate.FARKAS_MARGIN` when certified).
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
    margin_bound: float = float("nan")


def constraint_violation(problem, w):
    """Largest violation of the problem's constraints at ``w`` (NumPy)."""
    A = problem.constraint_matrix()
    c = problem.constraints
    vals = A @ np.asarray(w, dtype=float).ravel() - c.rhs
    viol = np.where(c.equality, np.abs(vals), np.maximum(-vals, 0.0))
    return float(viol.max()) if viol.size else 0.0


# --------------------------------------------------------------------------
# Methods
