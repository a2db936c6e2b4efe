"""The explicit programs are homogeneous in the data: W^mm(alpha H) = W^mm(H) / alpha.

Every program is solved at unit magnitude and scaled back, so inputs of any
units give the scaled answer, never a false "not separable" or a solver
failure; and malformed solver options or inputs are refused by name.
"""

import numpy as np
import pytest

from skntp.datasets import make_token_priority_data
from skntp.graphs import token_priority_graphs
from skntp.svm import (
    att_svm,
    finite_component,
    graph_svm,
    head_svm,
    ntp_svm,
    ntp_svm_problem,
    solve_max_margin,
)

SCALES = [1e-150, 1e-90, 1e-30, 1e-6, 1e6, 1e30, 1e90, 1e150]


def _instances():
    rng = np.random.default_rng(0)
    H = rng.standard_normal((20, 30))
    S = rng.random((20, 6)) < 0.3
    S[:, 0] |= ~S.any(axis=1)
    P = rng.random((20, 6)) * S
    K = rng.standard_normal((10, 5, 8))
    sel = np.argmax(K @ rng.standard_normal(8), axis=1)
    R = rng.standard_normal((30, 8))
    y = np.sign(R @ rng.standard_normal(8))
    X, labels, E = make_token_priority_data(random_state=0)
    graphs = token_priority_graphs(X, labels, n_tokens=E.shape[0])
    # (call at a scale, power of the scale in the scores)
    return {
        "ntp_svm": (lambda a: ntp_svm(a * H, S), 1),
        "att_svm": (lambda a: att_svm(a * K, sel), 1),
        "head_svm": (lambda a: head_svm(a * R, y), 1),
        "graph_svm": (lambda a: graph_svm(a * E, graphs), 2),  # E enters twice
        "finite_component": (lambda a: finite_component(a * H, P), 1),
    }


INSTANCES = _instances()


@pytest.mark.parametrize("name", sorted(INSTANCES))
def test_solution_scales_inversely_with_the_data(name):
    solve, power = INSTANCES[name]
    base = solve(1.0)
    assert np.linalg.norm(base) > 0
    for alpha in SCALES:
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            with pytest.warns(RuntimeWarning) if name == "graph_svm" and alpha < 1e-80 \
                    else _no_warning():
                scaled = solve(alpha)
        rel = np.linalg.norm(scaled * alpha**power - base) / np.linalg.norm(base)
        assert rel <= 1e-10, (alpha, rel)


class _no_warning:
    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


def test_overflowing_solution_is_an_error_not_inf():
    H = np.array([[1.0, 0.0], [1.0, 1e-3]])  # nearly parallel: ||W^mm|| ~ 1e3
    S = np.eye(2, dtype=bool)
    assert np.abs(ntp_svm(H, S)).max() > 100
    with pytest.raises(FloatingPointError, match="overflows float64.*rescale"):
        ntp_svm(H * 1e-306, S)


@pytest.mark.parametrize("tol", [-1.0, float("nan"), float("inf"), "1e-8", True + 0j])
def test_solver_tolerance_is_validated(tol):
    problem = ntp_svm_problem(np.eye(3, 4), np.eye(3, 5, dtype=bool))
    with pytest.raises(ValueError, match="tol must be a finite number >= 0"):
        solve_max_margin(problem, tol=tol)


@pytest.mark.parametrize("max_iter", [0, -3, 2.5, True])
def test_solver_max_iter_is_validated(max_iter):
    problem = ntp_svm_problem(np.eye(3, 4), np.eye(3, 5, dtype=bool))
    with pytest.raises(ValueError, match="max_iter must be an integer >= 1"):
        solve_max_margin(problem, max_iter=max_iter)


def test_nan_in_a_float_support_is_refused():
    S = np.eye(3, 5)
    S[1, 3] = np.nan
    with pytest.raises(ValueError, match="support must be finite"):
        ntp_svm(np.eye(3, 4), S)


@pytest.mark.parametrize("call", [
    lambda: ntp_svm(np.eye(3, 4) + 1j, np.eye(3, 5, dtype=bool)),
    lambda: head_svm(np.ones((4, 2)) * (1 + 1j), np.array([1, -1, 1, -1])),
    lambda: att_svm(np.ones((2, 3, 2)) + 0j * 1j + 1j, np.array([0, 1])),
    lambda: finite_component(np.eye(3, 4) * 1j, np.eye(3, 5)),
])
def test_complex_input_is_refused(call):
    with pytest.raises(ValueError, match="must be real; got complex"):
        call()
