"""How many rows the cycles leave that the structure of the contexts alone forces.

A measurement for issue #49, not a certificate of the package: on the whole Python
documentation at d = 768 (11,071 two-word contexts, V = 2,128) the cycles
(:func:`skntp.svm.cycle_certificate`) certify 13,750 rows not separable.  Contexts that
concatenate word vectors give each token's logit at context ``j`` as
``alpha_v[a_j] + beta_v[b_j]`` (``a_j``, ``b_j`` its two words).  The separability
program with those values free (one per token and word, as if the word vectors were
linearly independent) is a relaxation of the true one, so every row that it proves not
separable is not.  It is written on the candidate rows whose two words both occur in
the token's supports (a row with a word of its own can be lowered alone), with the
supports and the cycles' rows as equalities, and solved by HiGHS.  Its dual is a Farkas
table: its image on the contexts and its row bounds are checked as the package checks
its own tables (:func:`skntp.svm.image_vanishes`, the rows' bounds of
:func:`skntp.svm.farkas_row_bounds` on an orthonormal basis of the contexts, robust to
the span's rounding, at ``NOT_SEPARABLE_MARGIN``).  Rounds add the rows
found to the equalities until none is new.  The reference, in the same run: the cycles.

Run::

    python benchmarks/label_program.py
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

sys.path.insert(0, os.path.dirname(__file__))


def _candidates(S, labels):
    """The rows off ``S`` whose labels all occur in their token's supports."""
    m, V = S.shape
    j, v = np.nonzero(S)
    candidates = ~S
    for label in labels:
        seen = np.zeros((V, label.max() + 1), dtype=bool)
        seen[v, label[j]] = True
        candidates &= seen[:, label].T
    return candidates


def _label_program(S, labels, candidates):
    """``max sum s`` over the candidates, ``s in [0, 1]``, with
    ``t_j - sum_p alpha_{v,p}[label_p(j)] = 0`` on ``S`` and ``>= s_jv`` on the
    candidates; returns ``(s, table)``, the table the equalities' and rows' multipliers."""
    m, V = S.shape
    je, ve = np.nonzero(S)
    jc, vc = np.nonzero(candidates)
    j, v = np.r_[je, jc], np.r_[ve, vc]
    n_rows, n_s = j.size, jc.size
    rows, cols, vals = [np.arange(n_rows)], [j], [np.ones(n_rows)]
    offset = m
    for label in labels:
        _, column = np.unique(v * (label.max() + 1) + label[j], return_inverse=True)
        rows.append(np.arange(n_rows))
        cols.append(offset + column.ravel())
        vals.append(-np.ones(n_rows))
        offset += int(column.max()) + 1
    rows.append(je.size + np.arange(n_s))
    cols.append(offset + np.arange(n_s))
    vals.append(-np.ones(n_s))
    A = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                      shape=(n_rows, offset + n_s))
    cost = np.r_[np.zeros(offset), -np.ones(n_s)]
    bounds = [(None, None)] * offset + [(0.0, 1.0)] * n_s
    # (t_j - logit - s >= 0 on the candidates: -(...) <= 0)
    res = linprog(cost, A_ub=-A[je.size:], b_ub=np.zeros(n_s), A_eq=A[:je.size],
                  b_eq=np.zeros(je.size), bounds=bounds, method="highs")
    if res.status != 0:
        raise RuntimeError(res.message)
    table = np.zeros((m, V))
    table[je, ve] = res.eqlin.marginals
    table[jc, vc] = -res.ineqlin.marginals  # (the multipliers of A's rows, not -A's)
    return res.x[offset:], table


def main():
    from corpus_scale import _load

    from skntp.decoder import aggregate_contexts
    from skntp.losses.decoder import next_token_targets
    from skntp.svm import check_cycle_certificate, cycle_certificate
    from skntp.svm._ntp_cycles import _coordinate_classes
    from skntp.svm._ntp_partial import (
        _power_of_two_scale,
        _refutation_margin,
        _refuted_rows,
        _span_uncertainty,
        image_vanishes,
        orthonormal_contexts,
        support_mask,
    )

    X, y = _load("python-768")
    _, Y = next_token_targets(y, len(y), None)
    H, _, P, _ = aggregate_contexts(X, Y, np.ones(len(y)))
    S = support_mask(P)
    S = S.toarray() if sp.issparse(S) else np.asarray(S)
    print(f"python-768: {H.shape[0]} contexts, V = {S.shape[1]}, d = {H.shape[1]}, "
          f"load {os.getloadavg()[0]:.2f}")
    start = time.perf_counter()
    cycles = check_cycle_certificate(H, S, cycle_certificate(H, S))
    print(f"  reference, the cycles (found and checked): {int(cycles.sum()):7d} rows "
          f"{time.perf_counter() - start:7.1f} s")
    Hs = H / _power_of_two_scale(H)
    Q, cond = orthonormal_contexts(Hs, return_condition=True)
    blur = _span_uncertainty(Q, cond)
    labels = [np.unique(lab, return_inverse=True)[1].ravel()
              for lab in _coordinate_classes(H)]
    equal = S | cycles
    total = 0
    for round_ in range(10):
        start = time.perf_counter()
        candidates = _candidates(equal, labels)
        s, table = _label_program(equal, labels, candidates)
        jc, vc = np.nonzero(candidates)
        refuted = np.zeros_like(S)
        for sign in (1.0, -1.0):
            if image_vanishes(Hs, equal, sign * table):
                refuted |= ~equal & _refuted_rows(Q, equal, sign * table,
                                                  _refutation_margin(blur), blur)
        program = np.zeros_like(S)
        program[jc[s < 0.5], vc[s < 0.5]] = True
        print(f"  round {round_}: {int(candidates.sum())} candidate rows, the program "
              f"{int(program.sum())} not separable, the dual table certifies "
              f"{int(refuted.sum())} (the same rows: {np.array_equal(refuted, program)}) "
              f"{time.perf_counter() - start:7.1f} s")
        if not refuted.any():
            break
        total += int(refuted.sum())
        equal |= refuted
    print(f"  the label program: {total} rows beyond the cycles' {int(cycles.sum())}")


if __name__ == "__main__":
    main()
