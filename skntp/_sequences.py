"""Validation of sequence inputs for the attention estimators.

Sequences of token vectors arrive as a 3-D array ``(n, T, d)`` or a list of
``(T_i, d)`` arrays of different lengths; they are stored padded to the
longest length with a boolean ``mask`` of real tokens.  A 2-D array
``(n, T)`` (what scikit-learn's generic checks pass) is read as ``n``
sequences of ``T`` scalar tokens (``d = 1``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["check_sequences"]


def check_sequences(X, *, n_features=None, dtype=np.float64, name="X"):
    """Validate sequences and return ``(padded, mask)``.

    Parameters
    ----------
    X : array-like of shape (n, T, d) or (n, T), or list of (T_i, d) arrays
    n_features : int, optional
        Expected token dimension ``d`` (from ``fit``); a mismatch raises.
    dtype : dtype, default=float64

    Returns
    -------
    padded : ndarray of shape (n, T_max, d)
        Zero-padded token vectors.
    mask : ndarray of shape (n, T_max), bool
        True at real tokens.

    Raises
    ------
    ValueError
        On empty input, empty sequences, inconsistent token dimensions,
        NaN/inf, or a dimension different from ``n_features``.
    """
    if hasattr(X, "toarray"):
        raise TypeError(f"{name}: sparse input is not supported; pass a dense array.")
    if isinstance(X, np.ndarray) and X.dtype != object:
        arr = X
        if arr.ndim == 2:
            arr = arr[:, :, None]
        if arr.ndim != 3:
            raise ValueError(
                f"{name} must be 3-D (n_samples, seq_len, n_features), a 2-D array "
                f"(n_samples, seq_len) of scalar tokens, or a list of 2-D arrays; got "
                f"shape {X.shape}."
            )
        seqs = None
    else:
        try:
            seqs = [np.asarray(s) for s in X]
        except TypeError as exc:
            raise ValueError(f"{name} must be an array or a list of sequences.") from exc
        if seqs and all(s.ndim == 1 for s in seqs) and len({s.shape for s in seqs}) == 1:
            arr, seqs = np.stack(seqs)[:, :, None], None
        elif seqs and all(s.ndim == 2 for s in seqs) and len({s.shape for s in seqs}) == 1:
            arr, seqs = np.stack(seqs), None
    if seqs is None:
        if arr.dtype.kind not in "biuf":
            try:
                arr = arr.astype(dtype)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{name} must be numeric: {exc}") from exc
        arr = np.asarray(arr, dtype=dtype)
        n, T, d = arr.shape
        mask = np.ones((n, T), dtype=bool)
    else:
        if not seqs:
            raise ValueError(f"{name} is empty: found 0 sequences.")
        for i, s in enumerate(seqs):
            if s.ndim != 2:
                raise ValueError(
                    f"{name}[{i}] must be a 2-D (seq_len, n_features) array, got shape "
                    f"{s.shape}."
                )
        dims = {s.shape[1] for s in seqs}
        if len(dims) > 1:
            raise ValueError(
                f"{name}: sequences have different token dimensions {sorted(dims)}."
            )
        n, d = len(seqs), dims.pop()
        T = max(s.shape[0] for s in seqs)
        arr = np.zeros((n, T, d), dtype=dtype)
        mask = np.zeros((n, T), dtype=bool)
        for i, s in enumerate(seqs):
            arr[i, : s.shape[0]] = s
            mask[i, : s.shape[0]] = True
    if n == 0:
        raise ValueError(f"{name} is empty: found 0 sequences (n_samples=0).")
    if T == 0 or not mask.any(axis=1).all():
        raise ValueError(f"{name} contains an empty sequence.")
    if d == 0:
        raise ValueError(f"{name} has tokens of dimension 0 (n_features=0).")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"Input {name} contains NaN or infinity.")
    if n_features is not None and d != n_features:
        raise ValueError(
            f"{name} has tokens of dimension {d}, but the estimator was fitted with "
            f"{n_features} features."
        )
    return arr, mask
