"""Data of the joint head/attention examples (Tarzanagh et al. 2023, Fig. 3)."""

from __future__ import annotations

import numpy as np
from sklearn.utils import Bunch

__all__ = ["make_joint_fig3"]


def make_joint_fig3(variant="a", *, return_params=False):
    """The three-input example of Fig. 3 (Sec. 3): ``n = 3``, ``T = d = 2``, ``W = I``.

    Every input has the non-optimal token ``(0, 0)`` and one optimal token:
    ``(1, 1)`` with label ``+1``, ``(1, -1)`` with label ``-1`` and a third
    token with label ``+1``:

    * ``variant="a"`` (Fig. 3(a), Thm. 5): the third token is ``(0.5, 1)``.
      ``v^mm = (0, 1)`` and every selected token is a support vector of the
      head SVM, so ``p^relax = p^mm = (4/3, 1/3)``.
    * ``variant="b"`` (Fig. 3(b), Thm. 6): the third token is ``(0.5, 1.5)``,
      no longer a support vector (its label margin is 1.5).  ``v^mm = (0, 1)``
      still, ``p^relax = (1, 0)`` (eq. (10)) while ``p^mm = (5/4, 1/4)``.

    The coordinates and the starting point ``p_0 = (0, -1)``, ``v_0 = (-1, 0)``
    are those of the authors' experiment (normalized GD, step 0.1, 1000
    iterations, App. E).

    Parameters
    ----------
    variant : {"a", "b"}, default="a"
    return_params : bool, default=False
        Also return a :class:`~sklearn.utils.Bunch` with ``query_init``,
        ``head_init``, ``selected`` (the optimal tokens), ``support`` (the
        support vectors of the head SVM), ``head_mm``, ``relaxed`` and
        ``att_svm`` (the exact ``v^mm``, ``p^relax`` and ``p^mm``, margin 1).

    Returns
    -------
    X : ndarray of shape (3, 2, 2)
    y : ndarray of shape (3,)
        Labels in {-1, +1}.
    params : Bunch, only if ``return_params``
    """
    if variant not in ("a", "b"):
        raise ValueError(f"variant must be 'a' or 'b', got {variant!r}.")
    third = (0.5, 1.0) if variant == "a" else (0.5, 1.5)
    X = np.array([[[0.0, 0.0], [1.0, 1.0]],
                  [[0.0, 0.0], [1.0, -1.0]],
                  [[0.0, 0.0], third]])
    y = np.array([1.0, -1.0, 1.0])
    if not return_params:
        return X, y
    if variant == "a":
        support = np.array([True, True, True])
        relaxed = att = np.array([4 / 3, 1 / 3])
    else:
        support = np.array([True, True, False])
        relaxed, att = np.array([1.0, 0.0]), np.array([1.25, 0.25])
    params = Bunch(
        query_init=np.array([0.0, -1.0]),
        head_init=np.array([-1.0, 0.0]),
        selected=np.array([1, 1, 1]),
        support=support,
        head_mm=np.array([0.0, 1.0]),
        relaxed=relaxed,
        att_svm=att,
    )
    return X, y, params
