"""The optimizers that choose the norm: sign descent, normalized steepest descent,
lp mirror descent, Adam's eps and the step schedule (issue #20).

References are written here from the definitions: the steepest direction of a
norm is the maximizer of <g, s> over its unit ball, so <g, s> is the dual norm
of g (computed with NumPy's norms) and ||s|| = 1; the mirror step is the
gradient of the potential (1/p)||w||_p^p inverted entrywise; the steps of a
linear loss add up in closed form.
"""

import numpy as np
import pytest

from skntp import NTPDecoderClassifier
from skntp._backend import get_backend
from skntp._optim import (
    DESCENT_SOLVERS,
    check_descent_norm,
    limit_norm,
    minimize,
    steepest_direction,
)
from skntp.datasets import make_ntp_data

RNG = np.random.default_rng(0)


def _lp(a, p):
    return float(np.sum(np.abs(a) ** p) ** (1 / p))


# the norm of each descent norm, and its dual (NumPy's, on the flattened or 2-D array)
NORMS = {
    "fro": (np.linalg.norm, np.linalg.norm),
    "max": (lambda a: np.abs(a).max(), lambda a: np.abs(a).sum()),
    "l1": (lambda a: np.abs(a).sum(), lambda a: np.abs(a).max()),
    "spectral": (lambda a: np.linalg.norm(a, 2), lambda a: np.linalg.norm(a, "nuc")),
    ("lp", 3.0): (lambda a: _lp(a, 3.0), lambda a: _lp(a, 1.5)),
    ("lp", 1.5): (lambda a: _lp(a, 1.5), lambda a: _lp(a, 3.0)),
}


@pytest.mark.parametrize("descent_norm", list(NORMS), ids=str)
@pytest.mark.parametrize("shape", [(5, 3), (3, 7), (6,)])
def test_steepest_direction_attains_the_dual_norm_on_the_unit_ball(descent_norm, shape):
    primal, dual = NORMS[descent_norm]
    if descent_norm == "spectral" and len(shape) == 1:  # a vector's spectral norm is l2
        primal, dual = np.linalg.norm, np.linalg.norm
    for seed in range(3):
        g = np.random.default_rng(seed).standard_normal(shape) * 10.0 ** (seed - 1)
        s = steepest_direction(np, g, descent_norm)
        assert primal(s) == pytest.approx(1.0, rel=1e-12)
        assert float(np.sum(g * s)) == pytest.approx(dual(g), rel=1e-12)
        # no other unit vector of the norm does better (random competitors)
        for _ in range(20):
            c = RNG.standard_normal(shape)
            assert float(np.sum(g * c)) / primal(c) <= float(np.sum(g * s)) * (1 + 1e-12)


def test_steepest_direction_of_zero_and_of_tiny_gradients():
    for dn in NORMS:
        np.testing.assert_array_equal(steepest_direction(np, np.zeros((3, 2)), dn), 0.0)
    g = np.array([[3e-300, -4e-300], [0.0, 1e-300]])  # the powers of lp would underflow
    s = steepest_direction(np, g, ("lp", 3.0))
    ref = steepest_direction(np, g * 1e300, ("lp", 3.0))
    np.testing.assert_allclose(s, ref, rtol=1e-14)
    np.testing.assert_allclose(steepest_direction(np, g, "fro"), g / np.linalg.norm(g * 1e300)
                               * 1e300, rtol=1e-14)


def test_l1_direction_shares_ties_and_spectral_is_the_polar_factor():
    g = np.array([[1.0, -3.0], [3.0, 0.5]])
    np.testing.assert_array_equal(steepest_direction(np, g, "l1"), [[0, -0.5], [0.5, 0]])
    U, S, Vh = np.linalg.svd(RNG.standard_normal((4, 2)) @ RNG.standard_normal((2, 5)),
                             full_matrices=False)  # rank 2: the polar factor of its range
    g = (U * S) @ Vh
    ref = U[:, :2] @ Vh[:2]
    np.testing.assert_allclose(steepest_direction(np, g, "spectral"), ref, atol=1e-12)


def _quadratic(A, b):
    """``1/2 ||A w - b||^2`` with its gradient."""
    def objective(params):
        (w,) = params
        r = A @ w - b
        return 0.5 * float(r @ r), (A.T @ r,)
    return objective


def _linear(c):
    def objective(params):
        return float(np.sum(c * params[0])), (c.copy(),)
    return objective


def test_each_solver_takes_the_steps_of_its_definition():
    A, b = RNG.standard_normal((8, 5)), RNG.standard_normal(8)
    w0 = RNG.standard_normal(5)
    lr, p = 0.05, 3.0
    q = p / (p - 1)

    def reference(solver, steps=4):
        w = w0.copy()
        for k in range(1, steps + 1):
            g = A.T @ (A @ w - b)
            lr_k = lr / np.sqrt(k)
            if solver == "signgd":
                w = w - lr_k * np.sign(g)
            elif solver == "mirror":
                theta = np.sign(w) * np.abs(w) ** (p - 1) - lr_k * g
                w = np.sign(theta) * np.abs(theta) ** (1 / (p - 1))
            elif solver == "nmirror":
                theta = np.sign(w) * np.abs(w) ** (p - 1) - lr_k * g / _lp(g, q)
                w = np.sign(theta) * np.abs(theta) ** (1 / (p - 1))
        return w

    for solver in ("signgd", "mirror", "nmirror"):
        res = minimize(_quadratic(A, b), (w0,), xp=np, solver=solver, lr=lr, max_iter=4,
                       mirror_p=p, power_t=0.5)
        np.testing.assert_allclose(res.params[0], reference(solver), rtol=1e-12)


def test_mirror_with_p_two_is_gd_and_nmirror_is_ngd():
    A, b = RNG.standard_normal((6, 4)), RNG.standard_normal(6)
    w0 = RNG.standard_normal(4)
    for mirror, plain in (("mirror", "gd"), ("nmirror", "ngd")):
        a = minimize(_quadratic(A, b), (w0,), xp=np, solver=mirror, lr=0.02, max_iter=30,
                     mirror_p=2.0)
        c = minimize(_quadratic(A, b), (w0,), xp=np, solver=plain, lr=0.02, max_iter=30)
        np.testing.assert_allclose(a.params[0], c.params[0], rtol=1e-12)
    # and nsd in the Frobenius norm is normalized GD, in the max norm sign descent
    for dn, plain in (("fro", "ngd"), ("max", "signgd")):
        a = minimize(_quadratic(A, b), (w0,), xp=np, solver="nsd", descent_norm=dn,
                     lr=0.02, max_iter=30)
        c = minimize(_quadratic(A, b), (w0,), xp=np, solver=plain, lr=0.02, max_iter=30)
        np.testing.assert_allclose(a.params[0], c.params[0], rtol=1e-12)


@pytest.mark.parametrize("power_t", [0.0, 0.5, 1.0])
def test_the_step_schedule_adds_up_in_closed_form(power_t):
    c = np.array([2.0, -1.0, 0.0])
    res = minimize(_linear(c), (np.zeros(3),), xp=np, solver="signgd", lr=0.3, max_iter=50,
                   power_t=power_t)
    total = 0.3 * np.sum(np.arange(1, 51) ** -power_t)
    np.testing.assert_allclose(res.params[0], -total * np.sign(c), rtol=1e-13)


def test_adam_eps_is_the_constant_of_its_denominator():
    c = np.array([1e-3, -2.0])  # linear loss: constant gradient, so mhat = g, vhat = g^2
    for eps in (0.0, 1e-8, 1e-2, 10.0):
        res = minimize(_linear(c), (np.zeros(2),), xp=np, solver="adam", lr=0.1, max_iter=7,
                       eps=eps)
        np.testing.assert_allclose(res.params[0], -0.7 * c / (np.abs(c) + eps), rtol=1e-12)
    # eps = 0 with an entry whose gradient is always zero: it stays, no NaN
    res = minimize(_linear(np.array([0.0, 1.0])), (np.ones(2),), xp=np, solver="adam",
                   lr=0.1, max_iter=3, eps=0.0)
    np.testing.assert_allclose(res.params[0], [1.0, 1.0 - 0.3], rtol=1e-12)


@pytest.mark.parametrize("solver,options", [
    ("signgd", {}), ("nsd", {"descent_norm": "spectral"}),
    ("nsd", {"descent_norm": ("lp", 3.0)}), ("nsd", {"descent_norm": "l1"}),
    ("mirror", {"mirror_p": 1.5}), ("nmirror", {"mirror_p": 3.0}),
    ("adam", {"eps": 0.0})], ids=str)
def test_batched_trials_follow_their_own_runs(solver, options):
    """Every trial of a batch takes exactly the steps it takes alone (per-trial norms)."""
    Ws = RNG.standard_normal((3, 4, 5))
    targets = RNG.standard_normal((3, 4, 5))

    def batched(params):
        r = params[0] - targets
        return 0.5 * np.sum(r * r, axis=(1, 2)), (r,)

    def alone(b):
        def objective(params):
            r = params[0] - targets[b]
            return 0.5 * float(np.sum(r * r)), (r,)
        return objective

    batch = minimize(batched, (Ws,), xp=np, solver=solver, lr=0.05, max_iter=12,
                     batched=True, power_t=0.5, **options)
    for b in range(3):
        alone_run = minimize(alone(b), (Ws[b],), xp=np, solver=solver, lr=0.05, max_iter=12,
                             power_t=0.5, **options)
        np.testing.assert_allclose(batch.params[0][b], alone_run.params[0], rtol=1e-11,
                                   atol=1e-14)


@pytest.mark.parametrize("solver,options", [
    ("signgd", {}), ("nsd", {"descent_norm": "spectral"}),
    ("nsd", {"descent_norm": ("lp", 1.5)}), ("nmirror", {"mirror_p": 1.75}),
    ("mirror", {"mirror_p": 3.0})], ids=str)
def test_torch_runs_the_same_steps(solver, options):
    torch = pytest.importorskip("torch")
    be = get_backend("torch", "cpu", "float64")
    A, b = RNG.standard_normal((6, 4)), RNG.standard_normal((6, 3))
    W0 = RNG.standard_normal((4, 3))

    def objective(params, xp_A, xp_b):
        (W,) = params
        r = xp_A @ W - xp_b
        return 0.5 * (r * r).sum(), (xp_A.T @ r,)

    ref = minimize(lambda ps: objective(ps, A, b), (W0,), xp=np, solver=solver, lr=0.05,
                   max_iter=10, **options)
    At, bt = torch.as_tensor(A), torch.as_tensor(b)
    out = minimize(lambda ps: objective(ps, At, bt), (be.asarray(W0),), xp=be.xp,
                   solver=solver, lr=0.05, max_iter=10, **options)
    np.testing.assert_allclose(out.params[0].numpy(), ref.params[0], rtol=1e-10)


def test_limit_norm_of_each_solver():
    assert limit_norm("gd") == limit_norm("ngd") == limit_norm("regpath") == "fro"
    assert limit_norm("svm", parameter_norm="nuclear") == "nuclear"
    assert limit_norm("signgd") == "max"
    assert limit_norm("adam", eps=0.0) == "max" and limit_norm("adam", eps=1e-8) == "fro"
    assert limit_norm("nsd", descent_norm="spectral") == "spectral"
    assert limit_norm("nsd", descent_norm=["lp", 3]) == ("lp", 3.0)
    assert limit_norm("mirror", mirror_p=1.75) == ("lp", 1.75)
    assert limit_norm("nmirror", mirror_p=2) == "fro"
    assert set(DESCENT_SOLVERS) >= {"signgd", "nsd", "mirror", "nmirror"}


@pytest.mark.parametrize("bad,match", [
    ("linf", "descent_norm: norm must be one of"), (("lp", 1.0), "use norm='l1'"),
    (("lp", float("inf")), "use norm='max'"), (("lq", 3), "descent_norm: norm must be one"),
    (("lp", True), "must be a real number"), (("lp", 0.5), "finite number > 1"),
    ("nuclear", "descent_norm must be one of")], ids=str)
def test_bad_descent_norms_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        check_descent_norm(bad)
    with pytest.raises(ValueError, match=match):
        minimize(_linear(np.ones(2)), (np.zeros(2),), xp=np, solver="nsd", descent_norm=bad)


@pytest.mark.parametrize("kw,match", [
    ({"solver": "mirror", "mirror_p": 1.0}, "mirror_p must be a finite real > 1"),
    ({"solver": "nmirror", "mirror_p": float("nan")}, "mirror_p must be a finite real > 1"),
    ({"solver": "signgd", "power_t": -0.5}, "power_t must be a finite real >= 0"),
    ({"solver": "adam", "eps": -1e-8}, "eps must be a finite real >= 0")], ids=str)
def test_bad_options_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        minimize(_linear(np.ones(2)), (np.zeros(2),), xp=np, **kw)


def test_estimator_parameters_are_validated():
    X, y = make_ntp_data(n_samples=60, n_contexts=6, n_features=8, n_tokens=4,
                         support_size=2, random_state=0)
    for kw in ({"mirror_p": 1.0}, {"power_t": -1.0}, {"eps": -1.0},
               {"descent_norm": "linf"}):
        with pytest.raises(ValueError):
            NTPDecoderClassifier(solver="nsd", max_iter=2, **kw).fit(X, y)
    with pytest.raises(ValueError, match="finite number > 1"):
        NTPDecoderClassifier(solver="nsd", descent_norm=("lp", 0.5), max_iter=2).fit(X, y)


def test_decoder_records_both_limits_and_their_alignments():
    X, y = make_ntp_data(n_samples=400, n_contexts=12, n_features=20, n_tokens=6,
                         support_size=(1, 3), random_state=1)
    gd = NTPDecoderClassifier(solver="gd", lr=0.5, max_iter=300, random_state=0).fit(X, y)
    sd = NTPDecoderClassifier(solver="signgd", lr=0.02, power_t=0.5, max_iter=300,
                              random_state=0).fit(X, y)
    assert gd.limit_norm_ == "fro" and sd.limit_norm_ == "max"
    assert set(sd.limit_directions_) == {"max", "fro"}
    np.testing.assert_allclose(sd.limit_directions_["fro"], gd.mm_direction_, atol=1e-6)
    assert sd.mm_direction_ is sd.limit_directions_["max"]
    assert np.linalg.norm(sd.mm_direction_) == pytest.approx(1.0)
    # the max-norm solution: margin 1 and the smallest max norm among feasible W
    W = sd.mm_direction_ / sd.mm_margin_ / np.abs(sd.mm_direction_).max()
    logits = sd.contexts_ @ W.T
    support = sd.next_token_probs_ > 0
    gaps = (np.where(support, logits, np.inf).min(axis=1)
            - np.where(support, -np.inf, logits).max(axis=1))
    assert gaps[~support.all(axis=1)].min() == pytest.approx(1.0, rel=1e-6)
    # the histories: alignment with the own limit, alignment_fro with the Frobenius one
    R = sd.coef_ - sd.finite_component_
    cos = lambda a, b: float(np.sum(a * b) / np.linalg.norm(a) / np.linalg.norm(b))  # noqa
    assert sd.history_["alignment"][-1] == pytest.approx(cos(R, sd.mm_direction_))
    assert sd.history_["alignment_fro"][-1] == pytest.approx(cos(R, gd.mm_direction_))
    assert gd.history_["alignment_fro"][-1] == pytest.approx(gd.history_["alignment"][-1])
