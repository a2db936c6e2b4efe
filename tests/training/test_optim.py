"""The shared training loop (``skntp._optim.minimize``) against closed forms.

Every solver is checked iterate by iterate on objectives whose iterates are
known exactly: gradient descent on a diagonal quadratic, normalized GD on an
isotropic one, Adam against a textbook implementation written here (Kingma &
Ba, Algorithm 1), and the regularization path against the projection formula
``argmin_{||x|| <= r} 1/2 ||x - c||^2 = c min(1, r/||c||)``.  The stopping
rules (``tol``, exact zero gradient, non-finite values, ``max_iter``) and the
recording rules (``record_every``, forced first and last rows) are checked on
runs whose stopping iteration is known in advance.
"""

import math
import time
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

import skntp._optim as optim_module
from skntp._optim import (
    SOLVERS,
    _dual_norm_rows,
    _per_trial,
    _regpath,
    _rescaled,
    _solve_ball,
    _warn_lr,
    limit_norm,
    minimize,
    steepest_direction,
)


def quadratic(a, c):
    """``f(x) = 1/2 sum_i a_i (x_i - c_i)^2`` on one block, and its gradient."""
    a, c = np.asarray(a, float), np.asarray(c, float)

    def objective(params):
        x = params[0]
        r = x - c.astype(x.dtype)
        g = a.astype(x.dtype) * r
        return 0.5 * float(np.sum(g * r)), (g,)

    return objective


def recorder(store):
    """A ``metrics`` callback that keeps a copy of every recorded iterate."""

    def metrics(params):
        store.append(tuple(np.array(p, dtype=float) for p in params))
        return {"first": float(params[0].ravel()[0])}

    return metrics


# --------------------------------------------------------------------------
# gradient descent
# --------------------------------------------------------------------------
def test_gd_iterates_follow_the_closed_form():
    a = np.array([1.0, 0.25, 3.0])
    c = np.array([2.0, -1.0, 0.5])
    x0 = np.array([-1.0, 4.0, 2.0])
    lr = 0.3
    seen = []
    res = minimize(quadratic(a, c), (x0,), xp=np, solver="gd", lr=lr, max_iter=25,
                   metrics=recorder(seen))
    k = np.arange(26)[:, None]
    expected = c + (1 - lr * a) ** k * (x0 - c)  # x_k = c + (1 - lr a)^k (x_0 - c)
    np.testing.assert_allclose(np.array([s[0] for s in seen]), expected, rtol=1e-13,
                               atol=1e-15)
    np.testing.assert_allclose(res.params[0], expected[-1], rtol=1e-13)
    np.testing.assert_array_equal(res.history["iteration"], np.arange(26))
    loss = 0.5 * np.sum(a * (expected - c) ** 2, axis=1)
    np.testing.assert_allclose(res.history["loss"], loss, rtol=1e-12)
    grad = np.linalg.norm(a * (expected - c), axis=1)
    np.testing.assert_allclose(res.history["grad_norm"], grad, rtol=1e-12)
    np.testing.assert_allclose(res.history["first"], expected[:, 0], rtol=1e-13)
    assert res.n_iter == 25 and res.stop_reason == "max_iter" and not res.converged
    # seconds since the start of the run: nondecreasing, within the run's duration
    assert np.all(np.diff(res.history["time"]) >= 0)
    t0 = time.perf_counter()
    res = minimize(quadratic(a, c), (x0,), xp=np, solver="gd", lr=lr, max_iter=25)
    assert 0 <= res.history["time"][0] <= res.history["time"][-1] <= time.perf_counter() - t0


def test_gd_moves_every_block_by_its_own_gradient():
    def objective(params):
        x, y = params
        return 0.5 * float(x @ x) + 2.0 * float(np.sum(y * y)), (x, 4.0 * y)

    x0, y0 = np.array([1.0, -2.0]), np.array([[0.5, 1.0], [-1.0, 2.0]])
    res = minimize(objective, (x0, y0), xp=np, solver="gd", lr=0.1, max_iter=3)
    np.testing.assert_allclose(res.params[0], 0.9**3 * x0, rtol=1e-14)
    np.testing.assert_allclose(res.params[1], 0.6**3 * y0, rtol=1e-14)
    # the recorded gradient norm is the norm of all blocks together
    gx, gy = 0.9**3 * x0, 4.0 * 0.6**3 * y0
    assert res.history["grad_norm"][-1] == pytest.approx(
        math.sqrt(float(gx @ gx) + float(np.sum(gy * gy))), rel=1e-13)


# --------------------------------------------------------------------------
# normalized gradient descent
# --------------------------------------------------------------------------
def test_ngd_moves_each_block_by_exactly_lr():
    # blocks with gradients of very different sizes both move by lr along -g/||g||
    def objective(params):
        x, y = params
        return 50.0 * float(x @ x) + 1e-3 * float(y @ y), (100.0 * x, 2e-3 * y)

    x0, y0 = np.array([3.0, 4.0]), np.array([0.0, -10.0])
    seen = []
    res = minimize(objective, (x0, y0), xp=np, solver="ngd", lr=0.5, max_iter=6,
                   metrics=recorder(seen))
    for k, (x, y) in enumerate(seen):
        np.testing.assert_allclose(x, x0 * (1 - 0.5 * k / 5.0), rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(y, y0 * (1 - 0.5 * k / 10.0), rtol=1e-14, atol=1e-15)
    assert res.n_iter == 6


def test_ngd_leaves_a_block_with_zero_gradient_in_place():
    def objective(params):
        x, y = params
        return 0.5 * float(x @ x), (x, np.zeros_like(y))

    x0, y0 = np.array([0.0, 2.0]), np.array([7.0])
    res = minimize(objective, (x0, y0), xp=np, solver="ngd", lr=0.5, max_iter=2)
    np.testing.assert_allclose(res.params[0], [0.0, 1.0], rtol=1e-15)
    np.testing.assert_array_equal(res.params[1], y0)


# --------------------------------------------------------------------------
# Adam
# --------------------------------------------------------------------------
def adam_reference(grad, x0, lr, betas, eps, n_iter):
    """Kingma & Ba (2015), Algorithm 1, with t = 1, 2, ... (the textbook form)."""
    b1, b2 = betas
    x = np.array(x0, dtype=float)
    m = np.zeros_like(x)
    v = np.zeros_like(x)
    out = [x.copy()]
    for t in range(1, n_iter + 1):
        g = grad(x)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        x = x - lr * m_hat / (np.sqrt(v_hat) + eps)
        out.append(x.copy())
    return np.array(out)


@pytest.mark.parametrize("betas, eps", [((0.9, 0.99), 1e-8), ((0.5, 0.9), 1e-3)])
def test_adam_matches_the_textbook_algorithm(betas, eps):
    c = np.array([1.0, -2.0, 0.5, 3.0])
    scale = np.array([1.0, 10.0, 0.1, 1e-3])

    def objective(params):
        r = params[0] - c
        # log-cosh: curvature varies along the path, so every moment matters
        return float(np.sum(scale * np.log(np.cosh(r)))), (scale * np.tanh(r),)

    x0 = np.array([3.0, 1.0, -2.0, 0.0])
    seen = []
    res = minimize(objective, (x0,), xp=np, solver="adam", lr=0.05, max_iter=40,
                   betas=betas, eps=eps, metrics=recorder(seen))
    ref = adam_reference(lambda x: scale * np.tanh(x - c), x0, 0.05, betas, eps, 40)
    np.testing.assert_allclose(np.array([s[0] for s in seen]), ref, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(res.params[0], ref[-1], rtol=1e-13)


def test_adam_first_step_is_lr_times_the_gradient_sign():
    # with the bias correction m_hat = g, v_hat = g^2 at t = 1: the step is lr g/(|g| + eps)
    g = np.array([2.0, -1e-3, 50.0])

    def objective(params):
        return float(g @ params[0]), (g,)

    res = minimize(objective, (np.zeros(3),), xp=np, solver="adam", lr=0.1, max_iter=1,
                   eps=0.0)
    np.testing.assert_allclose(res.params[0], -0.1 * np.sign(g), rtol=1e-14)


# --------------------------------------------------------------------------
# stopping rules
# --------------------------------------------------------------------------
def test_tol_stops_at_the_first_small_gradient():
    # GD with lr 0.5 on x^2/2 from 1: x_k = 2^-k, gradient 2^-k <= tol = 2^-10 first at
    # k = 10 (a gradient equal to tol stops the run)
    res = minimize(quadratic([1.0], [0.0]), (np.array([1.0]),), xp=np, solver="gd", lr=0.5,
                   max_iter=100, tol=2.0**-10)
    assert res.stop_reason == "tol" and res.converged
    assert res.n_iter == 10
    assert res.params[0][0] == 2.0**-10
    assert res.history["iteration"][-1] == 10
    # a start within tol never moves
    res = minimize(quadratic([1.0], [0.0]), (np.array([1e-4]),), xp=np, solver="gd",
                   lr=0.5, max_iter=100, tol=1e-3)
    assert res.n_iter == 0 and res.stop_reason == "tol" and res.params[0][0] == 1e-4


def test_zero_gradient_at_the_start_stops_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = minimize(quadratic([1.0, 1.0], [1.0, 2.0]), (np.array([1.0, 2.0]),), xp=np,
                       solver="ngd", max_iter=50)
    assert res.stop_reason == "zero-gradient" and res.converged and res.n_iter == 0
    np.testing.assert_array_equal(res.history["iteration"], [0])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gradient_underflow_after_moving_warns(dtype):
    # GD with lr 1 on x^2/2 lands exactly on the minimum: the gradient is exactly 0
    x0 = np.array([3.0, -1.0], dtype=dtype)
    with pytest.warns(ConvergenceWarning, match="underflowed to exactly zero at iteration 1"
                      ) as caught:
        res = minimize(quadratic([1.0, 1.0], [0.0, 0.0]), (x0,), xp=np, solver="gd", lr=1.0,
                       max_iter=50, tol=0.0)
    assert res.stop_reason == "zero-gradient" and res.n_iter == 1 and res.converged
    name = np.dtype(dtype).name
    advice = ("use dtype='float64' to go further" if dtype == np.float32
              else "the iterate is at the limit of this precision")
    assert str(caught[0].message) == (
        f"gd: the gradient underflowed to exactly zero at iteration 1 (loss 0): the softmax "
        f"is saturated in {name}, so the iterates cannot move. Stopped; {advice}.")


def _blow_up(bad):
    """``x^2/2`` where the loss, the gradient or the iterate turns non-finite past 1e3."""

    def objective(params):
        x = params[0]
        big = float(np.abs(x).max()) > 1e3
        loss = 0.5 * float(x @ x)
        grad = x.copy()
        if big and bad == "loss":
            loss = float("nan")
        if big and bad == "grad":
            grad[0] = np.inf
        return loss, (grad,)

    return objective


@pytest.mark.parametrize("bad", ["loss", "grad", "params"])
def test_non_finite_stops_and_keeps_the_last_finite_iterate(bad):
    # GD with lr 3 on x^2/2: x_k = (-2)^k; |x_10| = 1024 is the first past 1e3
    project = None
    if bad == "params":
        def project(params):
            x = params[0]
            return (np.where(np.abs(x) > 1e3, np.inf, x),)
    with pytest.warns(ConvergenceWarning, match="gradients became non-finite at iteration 10; "
                      "stopped and kept the last finite iterate"):
        res = minimize(_blow_up(bad), (np.array([1.0, 0.5]),), xp=np, solver="gd", lr=3.0,
                       max_iter=50, project=project)
    assert res.stop_reason == "non-finite" and not res.converged
    assert res.n_iter == 9
    np.testing.assert_array_equal(res.params[0], (-2.0) ** 9 * np.array([1.0, 0.5]))
    assert res.history["iteration"][-1] == 9
    assert np.all(np.isfinite(res.history["loss"]))


def test_unknown_solver_is_refused():
    for batched in (False, True):
        with pytest.raises(ValueError, match="solver must be one of"):
            minimize(quadratic([1.0], [0.0]), (np.ones(1),), xp=np, solver="sgd",
                     batched=batched)
    assert SOLVERS == ("gd", "ngd", "adam", "signgd", "nsd", "mirror", "nmirror", "regpath")


# --------------------------------------------------------------------------
# recording, projection, progress
# --------------------------------------------------------------------------
def test_record_every_keeps_first_multiples_and_last():
    seen = []
    res = minimize(quadratic([1.0], [0.0]), (np.ones(1),), xp=np, solver="gd", lr=0.1,
                   max_iter=23, record_every=5, metrics=recorder(seen))
    np.testing.assert_array_equal(res.history["iteration"], [0, 5, 10, 15, 20, 23])
    np.testing.assert_allclose(res.history["loss"], 0.5 * 0.9 ** (2 * res.history["iteration"]),
                               rtol=1e-12)
    assert len(seen) == 6
    # a stop between records records the final iterate too
    res = minimize(quadratic([1.0], [0.0]), (np.ones(1),), xp=np, solver="gd", lr=0.5,
                   max_iter=100, tol=1e-3, record_every=4)
    np.testing.assert_array_equal(res.history["iteration"], [0, 4, 8, 10])


def test_project_is_applied_after_every_step():
    # keep the second coordinate fixed, as estimators keep a fixed block fixed
    def project(params):
        x = params[0].copy()
        x[1] = 5.0
        return (x,)

    res = minimize(quadratic([1.0, 1.0], [0.0, 0.0]), (np.array([2.0, 5.0]),), xp=np,
                   solver="gd", lr=0.25, max_iter=8, project=project)
    np.testing.assert_allclose(res.params[0], [2.0 * 0.75**8, 5.0], rtol=1e-14)


def test_progress_gets_every_iteration_and_is_closed():
    calls = []

    def progress(k, loss, row):
        calls.append((k, loss, row["iteration"]))

    progress.close = lambda: calls.append("closed")
    minimize(quadratic([1.0], [0.0]), (np.ones(1),), xp=np, solver="gd", lr=0.1,
             max_iter=7, record_every=3, progress=progress)
    assert [c[0] for c in calls[:-1]] == list(range(1, 8))
    assert calls[-1] == "closed"
    np.testing.assert_allclose([c[1] for c in calls[:-1]],
                               [0.5 * 0.9 ** (2 * k) for k in range(1, 8)], rtol=1e-12)
    assert [c[2] for c in calls[:-1]] == [0, 0, 3, 3, 3, 6, 7]  # the last recorded row


# --------------------------------------------------------------------------
# the regularization path
# --------------------------------------------------------------------------
def test_regpath_solves_each_ball_exactly():
    c = np.array([3.0, -4.0])  # ||c|| = 5
    radii = np.array([0.5, 2.0, 4.0, 5.0, 8.0])
    seen = []
    res = minimize(quadratic([1.0, 1.0], c), (np.array([10.0, 10.0]),), xp=np,
                   solver="regpath", radii=radii, inner_max_iter=500, tol=1e-12,
                   metrics=recorder(seen))
    expected = c[None, :] * np.minimum(1.0, radii / 5.0)[:, None]
    np.testing.assert_allclose(np.array([s[0] for s in seen]), expected, atol=1e-9)
    np.testing.assert_array_equal(res.history["radius"], radii)
    np.testing.assert_array_equal(res.history["iteration"], np.arange(5))
    np.testing.assert_allclose(res.history["loss"],
                               0.5 * np.maximum(0.0, 5.0 - radii) ** 2, atol=1e-12)
    assert res.n_iter == 5 and res.converged and res.stop_reason == "tol"
    # the gradient at each solution: c - x, of norm max(0, 5 - r)
    np.testing.assert_allclose(res.history["grad_norm"], np.maximum(0.0, 5.0 - radii),
                               atol=1e-9)
    assert set(res.history) == {"iteration", "loss", "grad_norm", "time", "radius", "first"}


def test_regpath_converges_through_a_restart():
    # found by search: here the inner loop's last step is an adaptive restart whose
    # projected-gradient step is already below the tolerance
    res = minimize(quadratic([3.3], [-1.5]), (np.array([-1.1]),), xp=np, solver="regpath",
                   radii=[0.9], inner_max_iter=300, tol=0.0)
    assert res.converged and res.stop_reason == "tol"
    np.testing.assert_allclose(res.params[0], [-0.9], rtol=1e-12)


def test_regpath_with_a_radius_per_block():
    # two blocks, two radius columns: each block projected on its own ball
    def objective(params):
        x, y = params
        rx, ry = x - np.array([6.0, 8.0]), y - np.array([1.0])
        return 0.5 * float(rx @ rx + ry @ ry), (rx, ry)

    radii = np.array([[1.0, 0.5], [20.0, 0.5]])
    res = minimize(objective, (np.zeros(2), np.zeros(1)), xp=np, solver="regpath",
                   radii=radii, inner_max_iter=500, tol=1e-12)
    np.testing.assert_allclose(res.params[0], [6.0, 8.0], atol=1e-9)
    np.testing.assert_allclose(res.params[1], [0.5], atol=1e-9)
    np.testing.assert_array_equal(res.history["radius_0"], [1.0, 20.0])
    np.testing.assert_array_equal(res.history["radius_1"], [0.5, 0.5])
    # one column is broadcast to every block
    res = minimize(objective, (np.zeros(2), np.zeros(1)), xp=np, solver="regpath",
                   radii=[2.0], inner_max_iter=500, tol=1e-12)
    np.testing.assert_allclose(res.params[0], [1.2, 1.6], atol=1e-9)
    np.testing.assert_allclose(res.params[1], [1.0], atol=1e-9)


def test_regpath_reports_an_unfinished_inner_solve():
    # an ill-conditioned quadratic that 2 inner iterations cannot solve
    res = minimize(quadratic([1.0, 1e-4], [0.0, 100.0]), (np.array([1.0, 0.0]),), xp=np,
                   solver="regpath", radii=[50.0], inner_max_iter=2)
    assert not res.converged and res.stop_reason == "max_iter"
    assert np.linalg.norm(res.params[0]) <= 50.0 * (1 + 1e-12)
    # one unfinished radius makes the whole path unfinished, even if the last is solved
    # (radius 0: the ball is the origin, solved by the first projection)
    res = minimize(quadratic([1.0, 1e-4], [0.0, 100.0]), (np.array([1.0, 0.0]),), xp=np,
                   solver="regpath", radii=[50.0, 0.0], inner_max_iter=2)
    np.testing.assert_array_equal(res.params[0], [0.0, 0.0])
    assert not res.converged and res.stop_reason == "max_iter"
    with pytest.raises(ValueError, match="needs radii"):
        minimize(quadratic([1.0], [0.0]), (np.ones(1),), xp=np, solver="regpath")


# --------------------------------------------------------------------------
# batched runs
# --------------------------------------------------------------------------
def test_batched_gd_and_adam_equal_the_closed_forms_per_trial():
    C = np.array([[1.0, 2.0], [-3.0, 0.5], [0.5, -0.5]])

    def objective(params):
        r = params[0] - C
        return 0.5 * np.sum(r * r, axis=1), (r,)

    X0 = np.zeros((3, 2))
    res = minimize(objective, (X0,), xp=np, solver="gd", lr=0.2, max_iter=12,
                   batched=True)
    np.testing.assert_allclose(res.params[0], C * (1 - 0.8**12), rtol=1e-13)
    assert res.history["loss"].shape == (13, 3)
    np.testing.assert_allclose(res.history["loss"][:, 0],
                               0.5 * 5.0 * 0.8 ** (2 * np.arange(13)), rtol=1e-12)
    adam = minimize(objective, (X0,), xp=np, solver="adam", lr=0.1, max_iter=12,
                    batched=True)
    for b in range(3):
        ref = adam_reference(lambda x, c=C[b]: x - c, X0[b], 0.1, (0.9, 0.99), 1e-8, 12)
        np.testing.assert_allclose(adam.params[0][b], ref[-1], rtol=1e-13, atol=1e-15)


def test_batched_non_finite_stops_every_trial():
    def objective(params):
        x = params[0]
        loss = 0.5 * np.sum(x * x, axis=1)
        loss = np.where(np.abs(x).max(axis=1) > 1e3, np.nan, loss)
        return loss, (x,)

    X0 = np.array([[1.0], [1e-3]])
    with pytest.warns(ConvergenceWarning, match="of a trial became non-finite at iteration 10; "
                      "stopped every trial and kept the last finite iterate"):
        res = minimize(objective, (X0,), xp=np, solver="gd", lr=3.0, max_iter=50,
                       batched=True)
    assert res.stop_reason == "non-finite" and res.n_iter == 9
    np.testing.assert_array_equal(res.params[0], (-2.0) ** 9 * X0)


def _batched_quadratic(C):
    def objective(params):
        r = params[0] - C
        return 0.5 * np.sum(r * r, axis=1), (r,)

    return objective


def test_batched_stopping_rules_and_records():
    # GD with lr 0.5 on |x - c|^2/2 from 0: every trial's gradient halves each step;
    # trial 1 starts 8 times farther, so it reaches tol = 1e-2 three steps later
    C = np.array([[1.0, 0.0], [0.0, 8.0]])
    seen = []
    res = minimize(_batched_quadratic(C), (np.zeros((2, 2)),), xp=np, solver="gd", lr=0.5,
                   max_iter=50, tol=1e-2, record_every=4, batched=True,
                   metrics=recorder(seen))
    np.testing.assert_array_equal(seen[-1][0], res.params[0])  # the final row's iterate
    assert res.stop_reason == "tol" and res.converged
    assert res.n_iter == 10  # 8 * 2^-k <= 1e-2 first at k = 10
    np.testing.assert_array_equal(res.history["iteration"], [0, 4, 8, 10])
    # trial 0 stopped moving at k = 7 (2^-7 <= 1e-2), trial 1 at k = 10
    np.testing.assert_allclose(res.params[0], C * (1 - 0.5 ** np.array([[7], [10]])),
                               rtol=1e-15)
    np.testing.assert_allclose(res.history["grad_norm"][-1], [2.0**-7, 8 * 2.0**-10],
                               rtol=1e-14)
    np.testing.assert_allclose(res.history["loss"][-1],
                               [0.5 * 4.0**-7, 0.5 * 64 * 4.0**-10], rtol=1e-14)
    res = minimize(_batched_quadratic(C), (np.zeros((2, 2)),), xp=np, solver="gd", lr=0.5,
                   max_iter=3, batched=True)
    assert res.stop_reason == "max_iter" and not res.converged and res.n_iter == 3
    np.testing.assert_array_equal(res.history["iteration"], [0, 1, 2, 3])


def test_batched_zero_gradient_stops_and_warns_per_trial():
    # lr 1 lands both trials exactly on their minima at k = 1
    C = np.array([[1.0, -2.0], [3.0, 0.5]])
    with pytest.warns(ConvergenceWarning, match=r"underflowed to exactly zero for 2 "
                      r"trial\(s\) by iteration 1"):
        res = minimize(_batched_quadratic(C), (np.zeros((2, 2)),), xp=np, solver="gd",
                       lr=1.0, max_iter=50, batched=True)
    assert res.stop_reason == "zero-gradient" and res.converged and res.n_iter == 1
    np.testing.assert_array_equal(res.params[0], C)
    # one trial saturated, one still moving at max_iter: warned for that one trial
    with pytest.warns(ConvergenceWarning, match=r"gd: the gradient underflowed to exactly "
                      r"zero for 1 trial\(s\) by iteration 3.*saturated in float64"):
        res = minimize(_batched_quadratic(C), (np.array([[1.0, -2.0], [0.0, 0.0]]),),
                       xp=np, solver="gd", lr=0.5, max_iter=3, batched=True)
    assert res.stop_reason == "max_iter"
    # a start at the minimum: zero gradient at k = 0 stops silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = minimize(_batched_quadratic(C), (C.copy(),), xp=np, solver="ngd", max_iter=5,
                       batched=True)
    assert res.stop_reason == "zero-gradient" and res.n_iter == 0


def test_batched_ngd_normalizes_each_trial_and_block():
    C = np.array([[3.0, 4.0], [0.0, -100.0]])
    res = minimize(_batched_quadratic(C), (np.zeros((2, 2)),), xp=np, solver="ngd", lr=0.5,
                   max_iter=4, batched=True)
    # each trial moves by exactly lr toward its own c
    np.testing.assert_allclose(res.params[0], C / np.linalg.norm(C, axis=1,
                                                                 keepdims=True) * 2.0,
                               rtol=1e-14)
    # a trial whose gradient is exactly zero in one block does not move that block
    def objective(params):
        x, z = params
        r = x - C
        return 0.5 * np.sum(r * r, axis=1), (r, np.zeros_like(z))

    res = minimize(objective, (np.zeros((2, 2)), np.ones((2, 3))), xp=np, solver="ngd",
                   lr=0.5, max_iter=2, batched=True)
    np.testing.assert_array_equal(res.params[1], np.ones((2, 3)))


def test_batched_projection_and_progress():
    C = np.array([[2.0, 2.0], [-4.0, 1.0]])
    calls = []

    def progress(k, loss, row):
        calls.append((k, np.array(loss), row["iteration"]))

    progress.close = lambda: calls.append("closed")

    def project(params):
        x = params[0].copy()
        x[:, 1] = 0.0
        return (x,)

    res = minimize(_batched_quadratic(C), (np.zeros((2, 2)),), xp=np, solver="gd",
                   lr=0.5, max_iter=3, record_every=2, project=project, progress=progress,
                   batched=True)
    np.testing.assert_allclose(res.params[0][:, 0], C[:, 0] * (1 - 0.5**3), rtol=1e-15)
    np.testing.assert_array_equal(res.params[0][:, 1], 0.0)
    assert [c[0] for c in calls[:-1]] == [1, 2, 3] and calls[-1] == "closed"
    assert [c[2] for c in calls[:-1]] == [0, 2, 3]
    x1 = np.array([C[:, 0] * 0.5, np.zeros(2)]).T
    np.testing.assert_allclose(calls[0][1], 0.5 * np.sum((x1 - C) ** 2, axis=1), rtol=1e-14)


def test_batched_ngd_keeps_float32_on_torch():
    torch = pytest.importorskip("torch")
    from skntp._backend import get_backend

    xp = get_backend("torch").xp
    C = torch.tensor([[3.0, 4.0], [2.0, 0.0]], dtype=torch.float32)

    def objective(params):
        r = params[0] - C
        return 0.5 * (r * r).sum(dim=1), (r,)

    res = minimize(objective, (torch.zeros((2, 2), dtype=torch.float32),), xp=xp,
                   solver="ngd", lr=0.5, max_iter=2, batched=True)
    assert res.params[0].dtype == torch.float32
    assert res.history["loss"].dtype == np.float64 and res.history["loss"].shape == (3, 2)
    np.testing.assert_allclose(res.params[0].numpy(), [[0.6, 0.8], [1.0, 0.0]], rtol=1e-6)


def test_warning_names_the_torch_dtype_without_its_module():
    torch = pytest.importorskip("torch")
    from skntp._backend import get_backend

    xp = get_backend("torch").xp
    x0 = torch.tensor([3.0, -1.0], dtype=torch.float32)

    def objective(params):
        return float(0.5 * (params[0] * params[0]).sum()), (params[0],)

    with pytest.warns(ConvergenceWarning, match=r"saturated in float32, so the iterates "
                      r"cannot move\. Stopped; use dtype='float64' to go further"):
        minimize(objective, (x0,), xp=xp, solver="gd", lr=1.0, max_iter=5)


def test_defaults_are_gd_with_step_one_half_for_1000_iterations():
    # the signature's defaults: solver="gd", lr=0.5, max_iter=1000, tol=0, record every
    # iteration, unbatched; from 2^500 toward 0 on x^2/2: x_k = 2^(500 - k)
    res = minimize(quadratic([1.0], [0.0]), (np.array([2.0**500]),), xp=np)
    assert res.n_iter == 1000 and res.stop_reason == "max_iter"
    assert res.params[0][0] == 2.0**-500
    np.testing.assert_array_equal(res.history["iteration"], np.arange(1001))
    assert set(res.history) == {"iteration", "loss", "grad_norm", "time"}
    # Adam's defaults: betas (0.9, 0.99), eps 1e-8
    c = np.array([1.0, -2.0])

    def objective(params):
        r = params[0] - c
        return float(np.sum(np.log(np.cosh(r)))), (np.tanh(r),)

    res = minimize(objective, (np.zeros(2),), xp=np, solver="adam", max_iter=30)
    ref = adam_reference(lambda x: np.tanh(x - c), np.zeros(2), 0.5, (0.9, 0.99), 1e-8, 30)
    np.testing.assert_allclose(res.params[0], ref[-1], rtol=1e-13)


def test_batched_non_finite_is_not_reported_as_saturation():
    # trial 0 reaches its minimum exactly (zero gradient) at k = 1 while trial 1 blows
    # up: one warning, about the non-finite values only
    def objective(params):
        x = params[0]
        r = x - np.array([[1.0], [0.0]])
        loss = 0.5 * np.sum(r * r, axis=1)
        loss = np.where(np.abs(x).max(axis=1) > 1e3, np.inf, loss)
        return loss, (r * np.array([[1.0], [-1.0]]),)  # trial 1 climbs away from 0

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = minimize(objective, (np.array([[0.0], [1.0]]),), xp=np, solver="gd", lr=1.0,
                       max_iter=50, batched=True)
    messages = [str(w.message) for w in caught]
    assert res.stop_reason == "non-finite" and res.n_iter == 9
    assert len(messages) == 1 and "non-finite at iteration 10" in messages[0]


def test_batched_sum_of_losses_as_a_scalar_tensor():
    # objectives may return the summed loss (a 0-d array) instead of one per trial
    torch = pytest.importorskip("torch")
    from skntp._backend import get_backend

    xp = get_backend("torch").xp
    C = torch.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=torch.float64)

    def objective(params):
        r = params[0] - C
        return 0.5 * (r * r).sum(), (r,)

    res = minimize(objective, (torch.zeros((2, 2), dtype=torch.float64),), xp=xp,
                   solver="gd", lr=0.5, max_iter=2, batched=True)
    np.testing.assert_allclose(res.history["loss"], 0.5 * 15.0 * 0.25 ** np.arange(3),
                               rtol=1e-14)


def test_regpath_backtracks_on_a_steep_objective():
    # curvature 100: a unit step overshoots; the backtracking must shrink it
    res = minimize(quadratic([100.0, 1.0], [1.0, 2.0]), (np.zeros(2),), xp=np,
                   solver="regpath", radii=[10.0], inner_max_iter=500)
    assert res.converged
    np.testing.assert_allclose(res.params[0], [1.0, 2.0], rtol=1e-9)


def test_rescaled_objective_divides_loss_and_gradient_by_the_start_gradient_norm():
    # f(x) = ||x - a||^2 / 2: at x0 the gradient is x0 - a, of norm 5
    a = np.array([3.0, 4.0])

    def f(params):
        (x,) = params
        return 0.5 * float(np.sum((x - a) ** 2)), (x - a,)

    scaled = _rescaled(f, (np.zeros(2),), np)
    x = np.array([1.0, 1.0])
    loss, (grad,) = scaled((x,))
    assert loss == pytest.approx(f((x,))[0] / 5.0, rel=1e-15)
    np.testing.assert_allclose(grad, (x - a) / 5.0, rtol=1e-15)
    # a zero gradient at the start leaves the objective as it is
    same = _rescaled(f, (a.copy(),), np)
    assert same((x,))[0] == f((x,))[0]
    # a gradient norm below 1 (0.5) scales up
    near = _rescaled(f, (a - np.array([0.3, 0.4]),), np)
    assert near((x,))[0] == pytest.approx(2.0 * f((x,))[0], rel=1e-15)
    # a gradient norm of 5e-170, whose square is 0 in float64, is not taken for zero
    tiny = _rescaled(quadratic(1.0, 0.0), (np.array([3e-170, 4e-170]),), np)
    assert tiny((x,))[0] == pytest.approx(2e169 * quadratic(1.0, 0.0)((x,))[0], rel=1e-15)
    # below 2^-1000 the factor stays 2^1000: 1 / 5e-310 would be infinite
    subnormal = _rescaled(quadratic(1.0, 0.0), (np.array([3e-310, 4e-310]),), np)
    assert subnormal((x,))[0] == 2.0**1000 * quadratic(1.0, 0.0)((x,))[0]


@pytest.mark.parametrize("loss0, loss, expected", [
    (1.0, 1.0 + 1e-6, "rose"),             # any rise beyond rounding is reported
    (1.0, 1.0 + 1e-12, None),              # a rise within 1e-9 relative is rounding
    (1.0, 1.0, "did not change"),
    (4.0, 4.0 + 4.0 * 2.0**-42, "did not change"),  # relative, not absolute, 1e-12
    (1e12, 1e12 + 1.0, "did not change"),  # exactly 1e-12 relative: still unchanged
    (1.0, 0.5, None),                      # the loss went down: nothing to say
    (0.0, 0.0, None),                      # already at zero loss
    (0.0, 1e-300, None),                   # within the absolute floor
    (0.0, 1e-200, "rose"),
])
def test_warn_lr_thresholds(loss0, loss, expected):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _warn_lr("gd", 0.5, 10, np.asarray(loss0), np.asarray(loss))
    messages = [str(w.message) for w in caught if w.category is ConvergenceWarning]
    if expected is None:
        assert messages == []
    else:
        assert len(messages) == 1 and expected in messages[0]


@pytest.mark.parametrize("level, warns", [(0.5, True), (3.0, True), (0.0, False)])
def test_zero_gradient_at_the_start_warns_whenever_the_loss_is_positive(level, warns):
    # a flat objective: no first-order method can leave the start; at zero loss
    # the start is already optimal and nothing is said
    def flat(params):
        (x,) = params
        return level, (np.zeros_like(x),)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = minimize(flat, (np.ones(3),), xp=np, solver="gd", lr=0.5, max_iter=10)
    assert res.n_iter == 0
    messages = [str(w.message) for w in caught if w.category is ConvergenceWarning]
    assert any("exactly zero at the initial point" in m for m in messages) == warns


@pytest.mark.parametrize("solver, max_iter, warns", [
    ("gd", 1, True),     # one overshooting step is enough to say so
    ("gd", 5, True),
    ("adam", 5, False),  # Adam's step is not lr times the gradient: no lr advice
])
def test_overshooting_lr_warning(solver, max_iter, warns):
    # f(x) = x^2 / 2 has curvature 1: lr = 3 maps x to -2x, the loss grows 4x a step
    def f(params):
        (x,) = params
        return 0.5 * float(np.sum(x * x)), (x,)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        minimize(f, (np.ones(2),), xp=np, solver=solver, lr=3.0, max_iter=max_iter)
    messages = [str(w.message) for w in caught if w.category is ConvergenceWarning]
    assert any("lr=3.0 is too large" in m for m in messages) == warns
    # the solver and the number of iterations are named (run 12, _descend 305, 307)
    assert any(m.startswith(f"{solver}: the loss rose from ") and f"over {max_iter} "
               "iterations" in m for m in messages) == warns


def test_no_iteration_no_lr_warning():
    # run 12, _descend 300: with max_iter=0 the loss cannot have changed; nothing is said
    f = quadratic([1.0], [3.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = minimize(f, (np.zeros(1),), xp=np, solver="gd", lr=1e-30, max_iter=0)
    assert res.n_iter == 0 and res.stop_reason == "max_iter"


def test_spectral_steepest_direction_is_each_trials_polar_factor():
    # run 12, steepest_direction 21, 24 (the rank cut-off 1e-12 s_max taken over all
    # trials): a trial 1e-14 times smaller than the other still gets its own U V^T
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((2, 4, 3))
    step = steepest_direction(np, np.stack([A, 1e-14 * B]), "spectral", batched=True)
    for got, g in zip(step, (A, B)):
        U, _, Vt = np.linalg.svd(g, full_matrices=False)
        np.testing.assert_allclose(got, U @ Vt, atol=1e-12)


def test_dual_norm_of_zero_and_tiny_trials():
    # run 12, _dual_norm_rows 15, 18 (the scale taken over all trials) and 29 (a zero
    # trial divided by 0): ||g||_2 of each trial, exact at 1e-170 and 0 for a zero one
    g = np.array([[3.0, 4.0], [0.0, 0.0], [3e-170, 4e-170]])
    np.testing.assert_allclose(_dual_norm_rows(np, g, 2.0, True).ravel(),
                               [5.0, 0.0, 5e-170], rtol=1e-15)


def test_batched_spectral_step_of_vector_blocks_is_each_rows_unit_vector():
    # run 12, steepest_direction 4: a batch of vectors is not one matrix (its spectral
    # step would be the polar factor of all trials together)
    g = np.random.default_rng(1).standard_normal((3, 4))
    np.testing.assert_allclose(steepest_direction(np, g, "spectral", batched=True),
                               g / np.linalg.norm(g, axis=1, keepdims=True), rtol=1e-14)


@pytest.mark.parametrize("descent_norm", ["fro", "max", "l1", ("lp", 3.0), "spectral"])
@pytest.mark.parametrize("shape", [(4, 3), (4,)])
def test_steepest_direction_keeps_float32(descent_norm, shape):
    # run 12, steepest_direction 31, 84 (masks cast to the default float): a float32
    # model must not be promoted to float64 by its own step
    g = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    g.flat[0] = g.flat[1]  # a tie for "l1"
    assert steepest_direction(np, g, descent_norm).dtype == np.float32


def test_nmirror_leaves_a_zero_gradient_block_in_place():
    # run 12, _step 86: a block with a zero gradient has dual norm 0 and is divided by 1,
    # not by 0 (which would make it NaN and stop the run)
    def objective(params):
        w, v = params
        return 0.5 * float(np.sum((w - 1.0) ** 2)), (w - 1.0, np.zeros_like(v))

    v0 = np.array([0.5, -2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = minimize(objective, (np.zeros(2), v0), xp=np, solver="nmirror", mirror_p=3.0,
                       lr=0.1, max_iter=3)
    assert res.n_iter == 3
    np.testing.assert_allclose(res.params[1], v0, rtol=1e-15)
    assert np.all(res.params[0] > 0)


def test_progress_sees_python_floats():
    # run 12, _descend 17: a 0-d array loss reaches progress(k, loss, row) as a float
    seen = []

    def objective(params):
        (x,) = params
        return np.asarray(0.5 * np.sum(x * x)), (x,)

    minimize(objective, (np.ones(2),), xp=np, solver="gd", lr=0.5, max_iter=3,
             progress=lambda k, loss, row: seen.append(loss))
    assert len(seen) == 3 and all(type(loss) is float for loss in seen)


def test_per_trial_scale_lives_on_the_blocks_device():
    # run 12, _per_trial 4, 7, 8, 13, 14: the per-trial vector is made on the device of
    # the block it scales (torch's "meta" device stands in for a GPU here)
    pytest.importorskip("torch")
    import torch

    from skntp._backend import get_backend

    like = torch.empty((2, 3), device="meta", dtype=torch.float32)
    s = _per_trial(get_backend("torch").xp, np.array([1.0, 2.0]), like)
    assert s.device == like.device and s.dtype == torch.float32 and s.shape == (2, 1)


def _scaled_square(a):
    """``f(x) = a/2 ||x||^2`` on one block: a step ``s`` passes the backtracking test
    ``f(c) <= f(y) + <g, c - y> + ||c - y||^2 / (2 s)`` exactly when ``a s <= 1``."""
    return quadratic(a, 0.0)


def test_solve_ball_is_fista_with_a_growing_step():
    # run 12, _solve_ball 55, 89, 92, 95, 103, 112: three iterations on f = 0.2 x^2
    # from x0 = 1 (ball of radius 10, never active), by hand: every step passes the
    # backtracking test (a s = 0.4, 0.6, 0.9), the step grows 1.5x after each, and
    # FISTA's momentum (t_{k-1} - 1) / t_k enters from the second iteration on
    # (Beck & Teboulle 2009, with t_{k+1} = (1 + sqrt(1 + 4 t_k^2)) / 2)
    a = 0.4
    t1 = (1 + math.sqrt(5)) / 2
    t2 = (1 + math.sqrt(1 + 4 * t1 * t1)) / 2
    x1 = 1 - a
    x2 = x1 * (1 - 1.5 * a)
    y2 = x2 + (t1 - 1) / t2 * (x2 - x1)
    x3 = y2 * (1 - 2.25 * a)
    for n_iter, x_expected, step in [(1, x1, 1.5), (2, x2, 2.25), (3, x3, 3.375)]:
        (x,), converged, step_out = _solve_ball(
            _scaled_square(a), (np.array([1.0]),), [10.0], xp=np, tol=0.0,
            inner_max_iter=n_iter, step=1.0)
        np.testing.assert_allclose(x, [x_expected], rtol=1e-14)
        assert not converged and step_out == step


def test_solve_ball_from_its_minimizer_keeps_its_step():
    # run 12, _solve_ball 57: at the minimizer the backtracking test holds with equality
    # (f(c) = f(y) = 0), which passes: the step is not halved down to 1e-12
    (x,), converged, step = _solve_ball(_scaled_square(1.0), (np.zeros(2),), [1.0], xp=np,
                                        tol=0.0, inner_max_iter=5, step=1.0)
    assert converged and step == 1.5
    np.testing.assert_array_equal(x, 0.0)


@pytest.mark.parametrize("rescale, expected", [
    (False, [[0.3, 0.4], [0.3, 0.4]]),  # the warm start, projected (inside both balls)
    (True, [[0.6, 0.8], [1.2, 1.6]]),   # the warm start, scaled onto each sphere
])
def test_regpath_starts_from_the_previous_solution(rescale, expected):
    # run 12, _regpath 46, 47, 76, 79, 80, 83: with no inner iteration the path returns
    # its start at each radius
    res = _regpath(_scaled_square(1.0), (np.array([0.3, 0.4]),), xp=np, radii=[1.0, 2.0],
                   tol=0.0, inner_max_iter=0, metrics=lambda p: {"x": p[0]}, starts=(),
                   rescale=rescale)
    np.testing.assert_allclose(res.history["x"], expected, rtol=1e-15)


@pytest.mark.parametrize("center, expected", [
    ([0.0, 1.0], [0.0, 1.0]),  # the given start is better
    ([1.0, 0.0], [1.0, 0.0]),  # the previous solution is better
    ([1.0, 1.0], [1.0, 0.0]),  # a tie keeps the previous solution
])
def test_regpath_keeps_the_best_start(center, expected):
    # run 12, _regpath 45, 84, 127 (and minimize 40, which dropped the starts): at
    # radius 1, from e1 (the previous solution) and from the start e2, no inner iteration
    c = np.asarray(center)

    def objective(params):
        (x,) = params
        return 0.5 * float(np.sum((x - c) ** 2)), (x - c,)

    res = minimize(objective, (np.array([2.0, 0.0]),), xp=np, solver="regpath", radii=[1.0],
                   inner_max_iter=0, starts=[(np.array([0.0, 1.0]),)])
    np.testing.assert_array_equal(res.params[0], expected)


@pytest.mark.parametrize("starts, rescale, expected", [
    ((), False, 0.6),                        # step 1: x = 1 - 0.4
    ([(np.array([1.0]),)], False, 0.6),      # each start's solve from step 1
    ((), True, 0.0),                         # f / |f'(1)| has curvature 1: one exact step
    ([(np.array([1.0]),)], True, 0.0),
])
def test_regpath_first_step_and_rescaling(starts, rescale, expected):
    # run 12, _regpath 41, 91, 92, 120, minimize 41: one inner iteration on f = 0.2 x^2 at
    # radius 1; a first step of 2 would pass too (a s = 0.8) and give 0.2
    res = minimize(_scaled_square(0.4), (np.array([1.0]),), xp=np, solver="regpath",
                   radii=[1.0], inner_max_iter=1, starts=starts, rescale=rescale)
    np.testing.assert_allclose(res.params[0], [expected], atol=1e-15)


def _exponential_slope(scale):
    """``f(x) = scale exp(-x_1)`` on a block of two: normalized steps move ``x_1`` by
    ``lr`` whatever the gradient's size."""
    def objective(params):
        (x,) = params
        v = scale * np.exp(-x[..., 0])
        g = np.zeros_like(x)
        g[..., 0] = -v
        return float(np.sum(v)), (g,)

    return objective


@pytest.mark.parametrize("solver", ["ngd", "nsd"])
def test_a_gradient_below_the_square_root_of_the_smallest_float_is_not_zero(solver):
    # entries of 1e-170 (representable) have squares that underflow to 0: the gradient
    # norm is computed from g / max|g| and the run goes on
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = minimize(_exponential_slope(1e-170), (np.zeros(2),), xp=np, solver=solver,
                       lr=1.0, max_iter=5)
    assert res.stop_reason == "max_iter" and res.n_iter == 5
    assert res.history["grad_norm"][0] == pytest.approx(1e-170, rel=1e-15, abs=0)
    np.testing.assert_allclose(res.params[0], [5.0, 0.0], rtol=1e-15)


def test_batched_ngd_with_a_tiny_trial_and_a_zero_block():
    # trial 0 of scale 1, trial 1 of scale 1e-170 (squares underflow): both move lr per
    # step in x_1.  The second block has a zero gradient in every trial: its step is 0,
    # not 0 / 0 (run 12, _descend 111, 113).
    slope = _exponential_slope(np.array([1.0, 1e-170]))

    def objective(params):
        x, z = params
        loss, (g,) = slope((x,))
        return loss, (g, np.zeros_like(z))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = minimize(objective, (np.zeros((2, 2)), np.ones((2, 3))), xp=np, solver="ngd",
                       lr=0.5, max_iter=4, batched=True)
    assert res.stop_reason == "max_iter"
    np.testing.assert_allclose(res.params[0], [[2.0, 0.0], [2.0, 0.0]], rtol=1e-15)
    np.testing.assert_array_equal(res.params[1], 1.0)


def test_an_infinite_gradient_stops_as_non_finite_not_as_converged():
    def objective(params):
        (x,) = params
        return 1.0, (np.array([np.inf, 0.0]),)

    with pytest.warns(ConvergenceWarning, match="non-finite"):
        res = minimize(objective, (np.zeros(2),), xp=np, solver="gd", lr=0.1, max_iter=5)
    assert res.stop_reason == "non-finite" and not res.converged
    assert res.history["grad_norm"][0] == np.inf


def test_limit_norm_defaults_and_its_parameter_check():
    # run 12, limit_norm 1-3, 44, 49, 50
    assert limit_norm("nsd") == "fro"
    assert limit_norm("mirror") == "fro"  # ("lp", 2) is the Frobenius norm
    assert limit_norm("nmirror", mirror_p=3) == ("lp", 3.0)
    with pytest.raises(ValueError, match="^mirror_p must be a finite real > 1, got 1.0"):
        limit_norm("mirror", mirror_p=1.0)


def test_mirror_descent_by_default_is_gradient_descent():
    # run 12, minimize 10: the default potential is (1/2) ||w||^2 (mirror_p = 2)
    f = quadratic([1.0, 3.0], [1.0, -2.0])
    x0 = (np.array([0.5, 0.5]),)
    gd = minimize(f, x0, xp=np, solver="gd", lr=0.1, max_iter=7)
    md = minimize(f, x0, xp=np, solver="mirror", lr=0.1, max_iter=7)
    np.testing.assert_allclose(md.params[0], gd.params[0], rtol=1e-14)


@pytest.mark.parametrize("work_size, expected", [(None, math.inf), (123, 123)])
def test_the_loop_runs_under_the_blas_threads_of_its_work_size(work_size, expected,
                                                                monkeypatch):
    # run 12, minimize 15-28: the objective's work_size (none: unlimited) and the
    # namespace reach blas_threads, which runs the loop on one thread when it is small
    seen = []
    real = optim_module.blas_threads

    def spy(size, be=None):
        seen.append((size, be))
        return real(size, be)

    monkeypatch.setattr(optim_module, "blas_threads", spy)
    f = quadratic([1.0], [0.0])
    if work_size is not None:
        def f(params, _f=f):
            return _f(params)

        f.work_size = work_size
    minimize(f, (np.ones(1),), xp=np, solver="gd", lr=0.5, max_iter=2)
    assert seen == [(expected, np)]


def test_divergence_is_one_convergence_warning_and_no_numpy_warning():
    # run 12, _descend 126, 129 (overflow in the step) and 184, 185, 187, 188 (invalid
    # and divide in the objective at the diverged point): every floating-point warning
    # of the step and of the objective there is folded into the one ConvergenceWarning
    def objective(params):
        (x,) = params
        diverged = ~np.isfinite(x)
        # 0 at a finite x; at an infinite one log(0) divides by zero and inf - inf
        # is invalid
        extra = np.sum(np.log(1.0 - diverged)) + np.sum(x - x)
        return float(np.sum(1e10 * x) + extra), (np.full_like(x, 1e10),)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # lr * g = 1e310 overflows in the first step
        res = minimize(objective, (np.ones(2),), xp=np, solver="gd", lr=1e300, max_iter=10)
    assert [w.category for w in caught] == [ConvergenceWarning], [str(w) for w in caught]
    assert res.stop_reason == "non-finite" and res.n_iter == 0


def test_adam_from_an_infinite_gradient_warns_once():
    # run 12, _descend 127, 130: Adam's first step from an infinite gradient is
    # inf / inf (invalid); it is reported as the non-finite stop, not as a NumPy warning
    def objective(params):
        (x,) = params
        return 1.0, (np.full_like(x, np.inf),)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = minimize(objective, (np.ones(2),), xp=np, solver="adam", lr=0.1, max_iter=5)
    assert [w.category for w in caught] == [ConvergenceWarning], [str(w) for w in caught]
    assert res.stop_reason == "non-finite" and res.n_iter == 0


@pytest.mark.parametrize("p", [1.5, 3.0])
def test_dual_norm_for_p_other_than_2(p):
    # run 13, _scaled_norms 27, 28: the shortcut sqrt(sum g^2) is for q = 2 only
    g = np.random.default_rng(3).standard_normal((2, 5))
    q = p / (p - 1.0)
    np.testing.assert_allclose(_dual_norm_rows(np, g, p, True).ravel(),
                               np.linalg.norm(g, ord=q, axis=1), rtol=1e-14)


@pytest.mark.parametrize("g, expected", [
    ([3e200, 4e200], 5e200),    # squares overflow, silently (run 13, _scaled_norms 31, 33)
    ([3e-160, 4e-160], 5e-160),  # squares are subnormal, with 5 digits (run 13, 52)
    ([3.0, 4.0], 5.0),
])
def test_gradient_norm_is_exact_at_any_magnitude(g, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = minimize(lambda params: (1.0, (np.asarray(g),)), (np.zeros(2),), xp=np,
                       solver="gd", max_iter=0)
    assert res.history["grad_norm"][0] == pytest.approx(expected, rel=1e-15, abs=0)
