"""The estimators' limit step, value by value.

``skntp/decoder.py``, ``skntp/attention.py`` and ``skntp/self_attention.py``:
``_explicit_limits``, ``_limit_parameters`` and the helpers they call.  Each test
checks documented behaviour against a value written here (a closed form, a fit on
duplicated data, a direct solve of the program) and names the survivors it kills;
see ``docs/mutation.md``, "Run 11".
"""

import re
import warnings

import numpy as np
import pytest
from helpers import att_svm_by_hand, joint_instance, key_query_setup, relu_setup
from sklearn.exceptions import ConvergenceWarning

import skntp._base as base_module
import skntp.attention as attention_module
import skntp.key_query as key_query_module
import skntp.self_attention as self_attention_module
from skntp import NTPDecoderClassifier
from skntp.attention import AttentionSelector, JointAttentionSVM
from skntp.datasets import make_token_priority_data
from skntp.key_query import KeyQuerySelector
from skntp.self_attention import NTPAttentionClassifier
from skntp.svm import NotSeparableError, _problem, graph_svm_problem, solve_max_margin


# --------------------------------------------------------------------------
# NTPAttentionClassifier
# --------------------------------------------------------------------------
def test_self_attention_finite_component_weights_samples_as_repeats():
    # _explicit_limits 17, 25 (cyclic_correction without the sample weights): an integer
    # weight is that many copies of the sequence, for W^cyc as for the risk
    X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=4)
    X = np.asarray(X)
    counts = np.array([3, 1, 2, 1, 1, 4])
    kw = dict(solver="svm", svm_radius=1.0)
    weighted = NTPAttentionClassifier(E, **kw).fit(X, y, sample_weight=counts)
    repeated = NTPAttentionClassifier(E, **kw).fit(np.repeat(X, counts, axis=0),
                                                    np.repeat(y, counts))
    plain = NTPAttentionClassifier(E, **kw).fit(X, y)
    assert np.abs(plain.finite_component_ - repeated.finite_component_).max() > 1e-3
    np.testing.assert_allclose(weighted.finite_component_, repeated.finite_component_,
                               rtol=1e-7, atol=1e-9)


def test_self_attention_small_limit_norm_margin_and_orthogonality_check(monkeypatch):
    # _explicit_limits 84, 126 (the tests "norm > 0" made "norm > 1"): with embeddings
    # 10 times larger ||W^mm|| is 100 times smaller, here below 1; the margin is still
    # 1 / ||W^mm|| and Lemma 2's check still runs
    X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=4)
    E = 10.0 * E
    est = NTPAttentionClassifier(E, solver="svm").fit(X, y)
    primal = solve_max_margin(graph_svm_problem(E, est.graphs_, est.sccs_)).primal
    assert np.linalg.norm(primal) < 1.0
    assert est.mm_margin_ == pytest.approx(1.0 / np.linalg.norm(primal), rel=1e-6)
    real = self_attention_module.cyclic_correction

    def skewed(*args, **kwargs):
        W, info = real(*args, **kwargs)
        return W + 0.1 * np.eye(W.shape[0]), info

    monkeypatch.setattr(self_attention_module, "cyclic_correction", skewed)
    with pytest.warns(RuntimeWarning, match=r"W\^cyc and W\^mm are not orthogonal"):
        NTPAttentionClassifier(E, solver="svm").fit(X, y)


def test_self_attention_without_a_graph_svm_solution(monkeypatch):
    # _explicit_limits 115 (mm_margin_ of a missing solution): when (Graph-SVM) cannot
    # be solved the fit goes on with a warning, no direction and a margin of nan
    X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=4)

    def declined(*args, **kwargs):
        raise NotSeparableError("declined here")

    monkeypatch.setattr(self_attention_module, "solve_max_margin", declined)
    with pytest.warns(UserWarning, match="declined here. mm_direction_ is None"):
        est = NTPAttentionClassifier(E, max_iter=3).fit(X, y)
    assert est.mm_direction_ is None and est.svm_result_ is None
    assert np.isnan(est.mm_margin_)


def test_self_attention_solves_graph_svm_with_its_array_layer(monkeypatch):
    # _explicit_limits 63 (backend_kwargs dropped): the estimator's backend, device and
    # dtype reach the max-margin core
    X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=4)
    seen, real = [], self_attention_module.solve_max_margin

    def recording(problem, **kwargs):
        seen.append({k: kwargs.get(k) for k in ("backend", "device", "dtype")})
        return real(problem, **kwargs)

    monkeypatch.setattr(self_attention_module, "solve_max_margin", recording)
    NTPAttentionClassifier(E, solver="svm", dtype="float32").fit(X, y)
    assert seen and all(s == {"backend": "numpy", "device": None, "dtype": "float32"}
                        for s in seen)


def test_self_attention_computes_the_sccs_once(monkeypatch):
    # _explicit_limits 44, 47 (graph_svm_problem without the SCCs): the program reuses
    # the components of the fit instead of computing them again
    import skntp.graphs as graphs

    X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=4)
    calls, real = [], graphs.strongly_connected_components
    monkeypatch.setattr(graphs, "strongly_connected_components",
                        lambda g: calls.append(1) or real(g))
    monkeypatch.setattr(self_attention_module, "strongly_connected_components",
                        lambda g: calls.append(1) or real(g))
    NTPAttentionClassifier(E, solver="svm").fit(X, y)
    assert len(calls) == 1


def test_self_attention_auto_radius_keeps_20_nats_with_more_tokens_than_dimensions():
    # _limit_parameters 34 (the vocabulary size K read as the dimension d): with K = 7
    # tokens in d = 6 dimensions, svm_radius="auto" puts every token outside the label's
    # SCC of G^(last) at least 20 nats below every token inside it, with equality for
    # the tightest sequence; scores e_t^T W e_last computed here from the fitted W
    X, y, E = make_token_priority_data(7, 6, 8, 4, acyclic=False, random_state=0)
    est = NTPAttentionClassifier(E, head="embeddings", loss="ce", solver="svm").fit(X, y)
    W = est.coef_
    gaps = []
    for seq, label in zip(np.asarray(X), y):
        last = seq[-1]
        comp = next(c for c in est.sccs_[last] if label in c)
        scores = E[seq] @ W @ E[last]
        inside = np.isin(seq, list(comp))
        if (~inside).any():
            gaps.append(scores[inside].min() - scores[~inside].max())
    assert min(gaps) == pytest.approx(20.0, rel=1e-6)


# --------------------------------------------------------------------------
# JointAttentionSVM
# --------------------------------------------------------------------------
def test_joint_svm_attributes_of_a_planted_instance():
    # _joint_directions 135-137 (support_vectors_ not set): Thm. 6's instance plants
    # the optimal tokens, v^mm = (a, 0) with margin 1, and the support S = {i: c_i = 1}
    X, y, pos, v_mm, support = joint_instance(0, n=5, relax=True)
    est = JointAttentionSVM(solver="svm").fit(X, y)
    np.testing.assert_array_equal(est.selected_tokens_, pos)
    np.testing.assert_array_equal(est.support_, np.flatnonzero(support))
    assert est.support_.dtype == np.int64
    np.testing.assert_array_equal(est.support_vectors_, X[support, pos[support]])
    np.testing.assert_allclose(est.head_mm_direction_, v_mm, atol=1e-8)
    assert est.head_mm_margin_ == pytest.approx(1.0, rel=1e-8)
    assert est.svm_radius_[0] == pytest.approx(20.0, rel=1e-8)  # label margin 20


def test_joint_svm_attributes_without_limits():
    # _joint_directions 13-48 (the attributes of a fit without limits): documented
    # values, with the types of a fit that has them
    X, y, _, _, _ = joint_instance(0, n=5, relax=True)
    est = JointAttentionSVM(solver="gd", compute_limits=False, max_iter=3).fit(X, y)
    assert est.selected_tokens_ is None and est.head_mm_direction_ is None
    assert est.head_mm_margin_ == 0.0 and np.isnan(est.mm_margin_)
    assert est.support_.dtype == np.int64 and est.support_.shape == (0,)
    assert est.support_vectors_.shape == (0, X.shape[2])
    assert est.mm_direction_ is None and est.att_svm_direction_ is None
    out = attention_module._joint_directions(est, {"X": X, "K": X, "mask": None, "Y": y},
                                             None)
    assert set(out) == {"selected_tokens_", "head_mm_direction_", "head_mm_margin_",
                        "support_", "support_vectors_", "att_svm_direction_",
                        "mm_direction_", "mm_margin_", "label_gaps", "attention_gaps"}
    assert out["label_gaps"].shape == out["attention_gaps"].shape == (0,)


def test_joint_attributes_when_the_selected_tokens_are_not_separable():
    # _joint_directions 19, 23-30, 40 (the attributes when the head SVM is infeasible)
    X = np.array([[[1.0, 0.0]], [[1.0, 0.0]], [[0.0, 1.0]]])
    y = np.array([1, -1, 1])
    with pytest.warns(UserWarning, match="admit no head max-margin direction"):
        est = JointAttentionSVM(solver="gd", max_iter=3).fit(X, y)
    np.testing.assert_array_equal(est.selected_tokens_, [0, 0, 0])
    assert est.selected_tokens_.dtype == np.int64
    assert est.head_mm_direction_ is None and est.head_mm_margin_ == 0.0
    assert est.support_.dtype == np.int64 and est.support_.shape == (0,)
    assert est.support_vectors_.shape == (0, 2)
    assert est.mm_direction_ is None and np.isnan(est.mm_margin_)


def test_joint_svm_limit_step_reuses_the_joint_solution(monkeypatch):
    # JointAttentionSVM._limit_parameters 8-18 (head, relaxed, att or support not passed
    # on) and _joint_directions 64-66 (its progress bar): solver="svm" solves the joint
    # program once; the head SVM and (relaxed) ATT-SVM are not solved again
    import skntp._progress as progress

    X, y, _, _, _ = joint_instance(0, n=5, relax=True)
    bars, real = [], progress.make_limit_progress
    monkeypatch.setattr(base_module, "make_limit_progress",
                        lambda verbose, desc="limit", **kw: bars.append(desc) or real(
                            verbose, desc=desc, **kw))

    def refused(*args, **kwargs):
        raise AssertionError("solved again")

    ref = JointAttentionSVM(solver="svm").fit(X, y)
    bars.clear()
    monkeypatch.setattr(attention_module, "head_svm", refused)
    monkeypatch.setattr(attention_module, "relaxed_att_svm", refused)
    monkeypatch.setattr(attention_module, "support_vectors", refused)
    est = JointAttentionSVM(solver="svm", verbose=1).fit(X, y)
    assert bars == ["limit joint SVM"]
    for name in ("head_mm_direction_", "mm_direction_", "att_svm_direction_", "support_"):
        np.testing.assert_array_equal(getattr(est, name), getattr(ref, name))


def _selected_by(query_scale, seed=1, n=5, T=4):
    """Thm. 6's instance and a fit that keeps the query at ``(0, .., 0, scale)``, which
    selects the planted tokens (last coordinate 1 against at most 1/2)."""
    X, y, pos, v_mm, support = joint_instance(seed, n=n, T=T, relax=True)
    q0 = np.zeros(X.shape[2])
    q0[-1] = query_scale
    return X, y, pos, dict(solver="gd", lr=1e-12, max_iter=1, init=(v_mm, q0))


def test_joint_limits_of_padded_inputs_ignore_the_padding():
    # _joint_directions 143-147, 164-169 (the mask not passed to (relaxed) ATT-SVM):
    # inputs of different lengths are padded with zero tokens that are not attended;
    # the same data with each missing token replaced by a copy of a token the input
    # already has (which adds no constraint) gives the same directions
    X, y, pos, kw = _selected_by(5.0)
    seqs, copies = [], X.copy()
    for i in range(3):  # inputs 0-2 keep their planted token and their lowest other
        # (a zero key would then bind: p^T x_{i pos} >= 1 is the tighter constraint)
        other = min((t for t in range(X.shape[1]) if t != pos[i]), key=lambda t: X[i, t, -1])
        keep = sorted([pos[i], other])
        seqs.append(X[i, keep])
        copies[i, [t for t in range(X.shape[1]) if t not in keep]] = X[i, other]
    seqs += list(X[3:])
    for params in (kw, {"solver": "svm"}):  # JointAttentionSVM._explicit_limits 18, 25
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # lr=1e-12 keeps the query
            padded = JointAttentionSVM(**params).fit(seqs, y)
            full = JointAttentionSVM(**params).fit(copies, y)
        np.testing.assert_array_equal(full.selected_tokens_, pos)
        for name in ("mm_direction_", "att_svm_direction_", "head_mm_direction_"):
            np.testing.assert_allclose(getattr(padded, name), getattr(full, name),
                                       atol=1e-8)
        assert padded.mm_margin_ == pytest.approx(full.mm_margin_, rel=1e-8)


def test_joint_warning_names_each_infeasible_attention_program():
    # _joint_directions 149, 158, 170-176 (the problems reported): the selected token 0 of
    # input 0 has a twin, so (ATT-SVM) and, every input being a support vector, (relaxed
    # ATT-SVM) are infeasible; one warning for each, its reason and then its consequence
    X = np.array([[[1.0, 0.0], [1.0, 0.0], [0.0, 0.5]],
                  [[-1.0, 0.0], [-2.0, 0.0], [-3.0, 0.0]],
                  [[1.0, 1.0], [0.0, 0.0], [0.2, 0.2]]])
    y = np.array([1, -1, 1])
    reason = ("ATT-SVM is infeasible: in input 0 the selected token 0 has the same key as "
              "token 1, so no attention weight p can separate it (the constraint reads "
              "0 >= 1); the selected tokens are not separable.")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = JointAttentionSVM(solver="gd", max_iter=1, lr=1e-12,
                                init=(np.array([1.0, 0.0]), np.array([1.0, 0.0]))).fit(X, y)
    messages = [str(w.message) for w in caught if "direction_ is None" in str(w.message)]
    assert messages == [f"{reason[:-1]}. att_svm_direction_ is None.",
                        f"{reason[:-1]}. mm_direction_ is None."]
    np.testing.assert_array_equal(est.support_, [0, 1, 2])
    np.testing.assert_allclose(est.head_mm_direction_, [1.0, 0.0])
    assert est.mm_direction_ is None and est.att_svm_direction_ is None


def _attention_rows(X, selected, inputs):
    return np.array([X[i, selected[i]] - X[i, t] for i in inputs for t in range(X.shape[1])
                     if t != selected[i]])


def _relaxed_att_svm_by_hand(X, selected, support, norm=2):
    """(relaxed ATT-SVM), eq. (10), ``W = I``: rhs 1 for the inputs in ``support`` and 0
    for the others (with every input, ATT-SVM)."""
    return att_svm_by_hand(list(X), selected, rhs=np.isin(np.arange(len(X)), support) * 1.0,
                           norm=norm)


def _is_solution(direction, ref, X, selected, support, norm):
    """``direction`` scaled to margin 1 is feasible for ``ref``'s program and as short."""
    p = direction / _attention_rows(X, selected, support).dot(direction).min()
    others = [i for i in range(len(X)) if i not in set(support)]
    feasible = not others or _attention_rows(X, selected, others).dot(p).min() >= -1e-7
    return feasible and np.linalg.norm(p, norm) == pytest.approx(
        np.linalg.norm(ref, norm), rel=1e-6)


@pytest.mark.parametrize("scale", [1.0, 10.0])
@pytest.mark.parametrize("solver", ["svm", "gd"])
def test_joint_attention_directions_and_margin_against_cvxpy(solver, scale):
    # _joint_directions 184-198 (mm_margin_ = 1 / ||p^relax||): p^relax over the support
    # vectors and p^mm over every input, written here; at scale 10 ||p^relax|| < 1
    X, y, pos, kw = _selected_by(5.0)
    X = scale * X
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        est = (JointAttentionSVM(solver="svm") if solver == "svm"
               else JointAttentionSVM(**kw)).fit(X, y)
    np.testing.assert_array_equal(est.selected_tokens_, pos)
    relaxed = _relaxed_att_svm_by_hand(X, pos, est.support_)
    full = _relaxed_att_svm_by_hand(X, pos, range(len(y)))
    assert len(est.support_) < len(y)  # some inputs only >= 0
    assert (np.linalg.norm(relaxed) < 1.0) == (scale == 10.0)
    assert est.mm_margin_ == pytest.approx(1.0 / np.linalg.norm(relaxed), rel=1e-6)
    np.testing.assert_allclose(est.mm_direction_, relaxed / np.linalg.norm(relaxed),
                               atol=1e-6)
    np.testing.assert_allclose(est.att_svm_direction_, full / np.linalg.norm(full),
                               atol=1e-6)


def test_joint_one_token_inputs_have_no_attention_margin():
    # _joint_directions 193-200: with one token per input (ATT-SVM) has no constraint,
    # p^relax = p^mm = 0: no direction (None, as AttentionSelector says), mm_margin_ nan
    rng = np.random.default_rng(0)
    y = np.array([1, -1, 1, -1])
    X = rng.standard_normal((4, 1, 3))
    X[:, 0, 0] = np.abs(X[:, 0, 0]) * y
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fits = (JointAttentionSVM(solver="svm").fit(X, y),
                JointAttentionSVM(solver="gd", max_iter=3).fit(X, y))
    for est in fits:
        assert np.isnan(est.mm_margin_)
        assert est.mm_direction_ is None and est.att_svm_direction_ is None
        assert est.head_mm_margin_ > 0
        assert est.predict(X).tolist() == y.tolist()
    with pytest.warns(ConvergenceWarning, match="gradient is exactly zero at the initial"):
        assert AttentionSelector(max_iter=3).fit(X, y).mm_direction_ is None


def test_joint_attention_limits_in_the_max_norm_against_cvxpy():
    # _joint_directions 147, 169 (the norm not passed to (relaxed) ATT-SVM): sign descent
    # is measured against the max-norm programs, written here; a max-norm solution need
    # not be unique, its margin min_i (x_{i alpha_i} - x_it)^T p / ||p||_inf is
    X, y, pos, kw = _selected_by(5.0)
    kw["solver"] = "signgd"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        est = JointAttentionSVM(**kw).fit(X, y)
    assert est.limit_norm_ == "max"
    np.testing.assert_array_equal(est.selected_tokens_, pos)
    for got, support in ((est.mm_direction_, est.support_),
                         (est.att_svm_direction_, range(len(y)))):
        ref = _relaxed_att_svm_by_hand(X, pos, support, norm="inf")
        assert _is_solution(got, ref, X, pos, support, np.inf)
    ref = _relaxed_att_svm_by_hand(X, pos, est.support_, norm="inf")
    assert est.mm_margin_ == pytest.approx(1.0 / np.abs(ref).max(), rel=1e-6)
    assert abs(est.mm_margin_ - 1.0 / np.linalg.norm(_relaxed_att_svm_by_hand(
        X, pos, est.support_))) > 1e-2  # not the Frobenius margin


def test_joint_svm_enumerates_up_to_max_enumeration():
    # JointAttentionSVM._explicit_limits 27 (max_enumeration not passed on): 3^5 = 243
    # token choices are enumerated under the default 256, not under 100
    X, y, pos, _ = _selected_by(5.0, T=3)
    exhaustive = JointAttentionSVM(solver="svm").fit(X, y).svm_result_
    assert exhaustive.exhaustive and exhaustive.n_candidates == 3 ** 5
    heuristic = JointAttentionSVM(solver="svm", max_enumeration=100).fit(X, y).svm_result_
    assert not heuristic.exhaustive and heuristic.n_candidates < 100


@pytest.mark.parametrize("gaps, kept", [
    ([1e3, 1e-7, 1.5e-6], [1e3, 1.5e-6]),   # beyond 1e-9 max|gap| = 1e-6
    ([1.5, 1.2e-9, 1.8e-9], [1.5, 1.8e-9]),  # beyond 1e-9 max(1, max|gap|) = 1.5e-9
    ([0.5, 0.8e-9, 1.2e-9, -0.9], [0.5, 1.2e-9]),  # beyond 1e-9; -0.9 not separated
    ([2.0, 1.8e-9, 2.5e-9, -3.0], [2.0]),  # beyond 1e-9 max|gap| = 3e-9, negatives too
])
def test_joint_attention_gaps_leave_out_roundoff(gaps, kept):
    # _joint_directions 212, 218 (the roundoff threshold of attention_gaps): the gaps of
    # svm_radius="auto" are those of the unit p^relax beyond 1e-9 max(1, max |gap|);
    # one input, keys (0, -g_1, -g_2, ...) and p = 1, so the gaps are g
    gaps = np.array(gaps)
    K = np.concatenate([[0.0], -gaps])[None, :, None]
    X = np.ones((1, K.shape[1], 1))
    data = {"X": X, "K": K, "mask": np.ones(K.shape[:2], dtype=bool), "Y": np.ones(1)}
    est = JointAttentionSVM()
    out = attention_module._joint_directions(est, data, np.array([0]), head=np.ones(1),
                                             relaxed=np.ones(1), att=np.ones(1),
                                             support=np.array([True]))
    np.testing.assert_array_equal(out["attention_gaps"], kept)


# --------------------------------------------------------------------------
# AttentionSelector
# --------------------------------------------------------------------------
def _cross_attention():
    """test_key_query's unit tokens and queries, the query as an extra last row."""
    X, y, Z, v = key_query_setup(0)
    return np.concatenate([X, Z[:, None]], axis=1), y, v


def _max_norm_margins(seqs_keys, selected, direction):
    """The max-norm margin ``min_i,t p^T (k_{i alpha_i} - k_it) / ||p||_inf`` of
    ``direction`` and the best one, ``1 / ||p^mm||_inf`` (cvxpy)."""
    rows = np.array([K[a] - K[t] for K, a in zip(seqs_keys, selected)
                     for t in range(len(K)) if t != a])
    best = att_svm_by_hand(seqs_keys, selected, norm=np.inf)
    return (rows @ direction).min() / np.abs(direction).max(), 1.0 / np.abs(best).max()


def test_factored_svm_limit_at_and_beyond_full_rank():
    # _limit_parameters 50 (the low-rank warning at rank = rank W) and _factors 17-27
    # (zero columns beyond min(k, d)): Q K^T is the nuclear-norm limit W itself, with
    # rank columns, and there is no rank warning
    from skntp.metrics import numerical_rank

    X, y, v = _cross_attention()
    kw = dict(head=v, query_index="extra-row", parameterization="KQ",
              solver="svm", classes=[-1, 1])
    full = KeyQuerySelector(**kw).fit(X, y)
    W = full.query_factor_ @ full.key_factor_.T
    np.testing.assert_allclose(W, full.svm_radius_ * full.mm_direction_.reshape(10, 10),
                               atol=1e-8)
    rank_W = numerical_rank(W)
    assert 1 < rank_W < 10
    for rank in (rank_W, 12):
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            est = KeyQuerySelector(**kw, rank=rank).fit(X, y)
        assert est.query_factor_.shape == est.key_factor_.shape == (10, rank)
        np.testing.assert_allclose(est.query_factor_ @ est.key_factor_.T, W, atol=1e-6)
    assert not est.query_factor_[:, 10:].any() and not est.key_factor_[:, 10:].any()
    np.testing.assert_allclose(np.linalg.norm(est.query_factor_, axis=0),
                               np.linalg.norm(est.key_factor_, axis=0))  # balanced


def _kept_token_program_by_hand(X, kept, norm):
    """``min ||W||`` s.t. ``z_i^T W (x_o - x_o1) = 0`` and ``z_i^T W (x_o - x_t) >= 1`` for
    the kept ``o`` (``o1`` the first) and the other tokens ``t`` (``z_i`` the last row),
    in cvxpy; returns the optimal norm."""
    import cvxpy as cp

    n, T, d = X.shape
    Z, W, cons = X[:, -1], cp.Variable((d, d)), []
    for i in range(n):
        o = np.flatnonzero(kept[i])
        cons += [Z[i] @ W @ (X[i, j] - X[i, o[0]]) == 0 for j in o[1:]]
        cons += [Z[i] @ W @ (X[i, j] - X[i, t]) >= 1 for j in o for t in range(T - 1)
                 if not kept[i, t]]
    if norm == "fro":
        return np.sqrt(cp.Problem(cp.Minimize(cp.sum_squares(W)), cons).solve(
            solver=cp.CLARABEL))
    # (Clarabel stops "inaccurate" here, 4e-8 off; SCS at eps 1e-10 is not)
    return cp.Problem(cp.Minimize(cp.normNuc(W)), cons).solve(solver=cp.SCS, eps=1e-10,
                                                              max_iters=200_000)


@pytest.mark.parametrize("parameterization, norm", [("W", "fro"), ("KQ", "nuclear")])
def test_value_head_direction_against_cvxpy(parameterization, norm):
    # _kept_token_limit 101-120 (the program of W^dir in the limit norm): mm_direction_
    # scaled to margin 1 is feasible and as short as the program written here
    X, y, V = relu_setup(2, n=4, T=4, d=6)
    est = KeyQuerySelector(head=np.ones(6), value=V, activation="relu",
                           parameterization=parameterization, query_index="extra-row",
                           max_iter=300, classes=[-1, 1], random_state=0).fit(X, y)
    assert est.limit_norm_ == norm
    kept, D, Z = est.kept_tokens_, est.mm_direction_, X[:, -1]
    logits = np.einsum("itd,kd,ik->it", X[:, :-1], D, Z)
    first = kept.argmax(axis=1)
    gaps = [logits[i, o] - logits[i, t] for i in range(4) for o in np.flatnonzero(kept[i])
            for t in np.flatnonzero(~kept[i, :-1])]
    ties = [logits[i, o] - logits[i, first[i]] for i in range(4)
            for o in np.flatnonzero(kept[i])]
    assert np.abs(ties).max() <= 1e-9 * np.abs(gaps).max()
    W = D / min(gaps)
    value = np.linalg.norm(W) if norm == "fro" else np.linalg.norm(W, "nuc")
    assert value == pytest.approx(_kept_token_program_by_hand(X, kept, norm), rel=1e-7)


def test_kept_token_limit_of_inseparable_kept_tokens(monkeypatch):
    # _kept_token_limit 124-139 (the infeasible program): x_2 is the midpoint of the
    # kept x_0 and x_1, so z^T W x_0 = z^T W x_1 forces z^T W (x_o - x_2) = 0 < 1; the
    # direction is None with a warning, and W^fin still fits the log-odds
    import skntp.svm as svm
    from skntp._backend import lifted_keys

    X = np.array([[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]])
    Z = np.array([[1.0, 2.0]])
    q = np.array([0.3, -0.2, 0.1, 0.4])
    data = {"X": X, "Z": Z, "keys": lifted_keys(np, X, Z), "mask": np.ones((1, 3), bool)}
    kept = np.array([[True, True, False]])
    methods, real = [], svm.solve_max_margin
    monkeypatch.setattr(key_query_module, "solve_max_margin",
                        lambda problem, method, callback: methods.append(method) or real(
                            problem, method=method, callback=callback))
    est = key_query_module.KeyQuerySelector(svm_method="cvxpy", solver="ngd")
    for norm in ("fro", "nuclear"):
        with pytest.warns(UserWarning) as caught:
            fin, D = key_query_module._kept_token_limit(est, data, q, kept, norm)
        assert len(caught) == 1 and re.fullmatch(
            r"ATT-SVM of the kept tokens is infeasible: the kept tokens are not separable "
            r"from the others by a common key-query matrix W\. Certified by Farkas "
            r"multipliers recomputed from the rows: every feasible point would have a "
            r"normalized margin below [0-9.e+-]+\. \(method '\w+': .*\)\. "
            r"mm_direction_ is None\.", str(caught[0].message))
        assert D is None
        W = fin.reshape(2, 2)
        scores = Z[0] @ W @ X[0].T
        assert scores[1] - scores[0] == pytest.approx(
            (data["keys"][0, 1] - data["keys"][0, 0]) @ q, abs=1e-10)
    assert methods == ["cvxpy", "cvxpy"]


@pytest.mark.parametrize("head", [None, "column"])
def test_value_head_default_and_column_heads(head):
    # _value_head_vector 2-21: with a value matrix of d_v = 3 rows the head is
    # 1 / sqrt(d_v) everywhere by default; a given head may be a column (3, 1)
    X, y, V = relu_setup(2, n=4, T=4, d=6)
    V = V[:3]
    v = np.array([[0.5], [-1.0], [2.0]])
    est = KeyQuerySelector(head=None if head is None else v, value=V, activation="relu",
                           query_index="extra-row", max_iter=3,
                           classes=[-1, 1], random_state=0).fit(X, y)
    expected = np.full(3, 1.0 / np.sqrt(3.0)) if head is None else v.ravel()
    np.testing.assert_array_equal(est.head_, expected)
    s = est.attention_weights(X)
    f = np.maximum(np.einsum("it,itd->id", s, X) @ V.T, 0) @ expected
    np.testing.assert_allclose(est.decision_function(X), f, rtol=1e-12)


def test_decoder_solves_ntp_svm_with_its_array_layer(monkeypatch):
    # NTPDecoderClassifier._explicit_limits 25 (backend_kwargs dropped): the estimator's
    # backend, device and dtype reach the NTP-SVM solver
    import skntp.decoder as decoder_module
    from skntp.datasets import make_ntp_data

    X, y = make_ntp_data(random_state=0)[:2]
    seen, real = [], decoder_module.solve_ntp_svm

    def recording(*args, **kwargs):
        seen.append({k: kwargs.get(k) for k in ("backend", "device", "dtype")})
        return real(*args, **kwargs)

    monkeypatch.setattr(decoder_module, "solve_ntp_svm", recording)
    NTPDecoderClassifier(solver="svm", dtype="float32").fit(X, y)
    assert seen and all(s == {"backend": "numpy", "device": None, "dtype": "float32"}
                        for s in seen)


@pytest.mark.parametrize("shape", [(4, 6), (6, 4)])
@pytest.mark.parametrize("rank", [1, 2, 4, 6])
def test_factors_of_a_rectangular_matrix(rank, shape):
    # _factors 21, 26 (the padding read from the factors' columns): Q (k x rank) and K
    # (d x rank) with Q K^T the best rank-`rank` approximation (Eckart-Young: the SVD
    # truncated), equal column norms, and zero columns beyond min(k, d)
    W = np.random.default_rng(0).standard_normal(shape)
    Q, K = key_query_module._factors(W, rank)
    assert Q.shape == (shape[0], rank) and K.shape == (shape[1], rank)
    U, sv, Vt = np.linalg.svd(W)
    r = min(rank, 4)
    np.testing.assert_allclose(Q @ K.T, (U[:, :r] * sv[:r]) @ Vt[:r], atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(Q, axis=0), np.linalg.norm(K, axis=0))
    assert not Q[:, r:].any() and not K[:, r:].any()


# --------------------------------------------------------------------------
# NTPDecoderClassifier
# --------------------------------------------------------------------------
@pytest.mark.parametrize("count, compatible", [(4, True), (5, False)])
def test_decoder_ntp_compatibility_of_two_contexts_on_a_line(count, compatible):
    # NTPDecoderClassifier._explicit_limits 80 (the residual threshold 1e-8): contexts
    # h = 1 and h = 2 with next tokens 0 : 1 in counts 1 : 2 and 1 : count; the log-odds
    # (w_1 - w_0) h = log 2 and 2 (w_1 - w_0) = log(count) have a solution iff count = 4
    X = np.array([[1.0]] * 3 + [[2.0]] * (1 + count))
    y = np.array([0, 1, 1, 0] + [1] * count)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = NTPDecoderClassifier(max_iter=5).fit(X, y)
    assert est.is_ntp_compatible_ is compatible
    if compatible:  # W* reproduces both log-odds
        W = est.finite_component_
        np.testing.assert_allclose([W[1, 0] - W[0, 0], 2 * (W[1, 0] - W[0, 0])],
                                   [np.log(2.0), np.log(4.0)], rtol=1e-10)


# --------------------------------------------------------------------------
# AttentionSelector: tied optimal tokens, (ATT-SVM') of App. D
# --------------------------------------------------------------------------
# v = e_2 scores the tokens by their second coordinate, W = (1, 0) keys them by the
# first, so p is a scalar.  Inputs 0 and 1 have two optimal tokens each (4 choices):
# input 0 keys (1, -1 | 0) gives p >= 1 or p <= -1; input 1 keys (0.5, 2 | 1, 0) gives
# p >= 1 (its key 0.5 is infeasible); input 2 keys (3 | 1) gives p >= 1/2; input 3,
# two tokens of four, keys (0.4 | -0.1) gives p >= 2 (p >= 2.5 if its zero padding
# counted).  The one best choice is (0, 1): p^mm = 2.
_TIED = [np.array([[1.0, 1.0], [-1.0, 1.0], [0.0, 0.0]]),
         np.array([[0.5, 2.0], [2.0, 2.0], [1.0, -1.0], [0.0, 1.0]]),
         np.array([[3.0, 1.0], [1.0, 0.0]]),
         np.array([[0.4, 1.5], [-0.1, 0.2]])]
_TIED_HEAD, _TIED_KEYS = np.array([0.0, 1.0]), np.array([[1.0, 0.0]])


def test_tied_optimal_tokens_by_hand():
    # _gmm_program 33, 41-48, 52 (ATT-SVM' of App. D: its mask, its enumeration and its
    # message): the query is R p^mm with R = (20 + log T) ||p^mm||, T = 4
    with pytest.warns(UserWarning) as caught:
        est = AttentionSelector(_TIED_HEAD, _TIED_KEYS, solver="svm",
                                classes=[-1, 1]).fit(_TIED, [1, 1, 1, 1])
    assert [str(w.message) for w in caught] == [
        "inputs [0, 1] have several optimal tokens (tied scores), so (ATT-SVM) is "
        "replaced by the non-convex (ATT-SVM') of App. D, solved exactly by enumerating "
        "the 4 choices of one optimal token per input."]
    np.testing.assert_allclose(est.gmm_direction_, [1.0])
    np.testing.assert_array_equal(est.selected_tokens_, [0, 1, 0, 0])
    assert est.query_[0] == pytest.approx((20.0 + np.log(4.0)) * 2.0, rel=1e-9)


def test_tied_optimal_tokens_beyond_max_enumeration():
    # _gmm_program 48 (max_enumeration not passed on): 4 choices are not enumerated
    # under max_enumeration=3; gradient solvers fit on without the direction
    kw = dict(classes=[-1, 1], max_enumeration=3)
    with pytest.raises(ValueError, match=r"here 4 > max_combinations=3 choices"):
        AttentionSelector(_TIED_HEAD, _TIED_KEYS, solver="svm", **kw).fit(_TIED, [1] * 4)
    with pytest.warns(UserWarning, match="gmm_direction_ is None"):
        est = AttentionSelector(_TIED_HEAD, _TIED_KEYS, max_iter=3, **kw).fit(_TIED, [1] * 4)
    assert est.gmm_direction_ is None


def test_tied_optimal_tokens_name_at_most_ten_inputs():
    # _gmm_program 51: eleven inputs with ties, the message names the first ten
    seqs = [_TIED[0]] * 11 + _TIED[2:]
    with pytest.warns(UserWarning) as caught:
        AttentionSelector(_TIED_HEAD, _TIED_KEYS, solver="svm", max_enumeration=2048,
                          classes=[-1, 1]).fit(seqs, [1] * 13)
    message = next(str(w.message) for w in caught if "tied scores" in str(w.message))
    assert message.startswith(f"inputs {list(range(10))} have several optimal tokens")
    assert "2048 choices" in message


def test_tied_optimal_tokens_use_the_estimators_method(monkeypatch):
    # _gmm_program 47 (svm_method not passed on): each enumerated program is solved by
    # the method asked for
    methods, real = [], attention_module.att_svm_prime

    def recording(*args, **kwargs):
        methods.append(kwargs["method"])
        return real(*args, **kwargs)

    monkeypatch.setattr(attention_module, "att_svm_prime", recording)
    with pytest.warns(UserWarning, match="tied scores"):
        est = AttentionSelector(_TIED_HEAD, _TIED_KEYS, solver="svm", svm_method="cvxpy",
                                classes=[-1, 1]).fit(_TIED, [1] * 4)
    assert methods == ["cvxpy"]
    assert est.query_[0] == pytest.approx((20.0 + np.log(4.0)) * 2.0, rel=1e-6)


@pytest.mark.filterwarnings("ignore:ATT-SVM is infeasible")  # (not what is tested)
def test_default_head_is_the_unit_difference_of_pooled_class_means():
    # _head_vector 16-29: v = the unit difference of the class means of the mean-pooled
    # real tokens, by hand over inputs of lengths 3, 2, 1, 3; e_1 when the classes pool
    # alike; a given head may be a column
    rng = np.random.default_rng(5)
    seqs = [rng.standard_normal((t, 3)) for t in (3, 2, 1, 3)]
    y = np.array([1, -1, 1, -1])
    pooled = np.array([s.mean(axis=0) for s in seqs])
    diff = pooled[y > 0].mean(axis=0) - pooled[y < 0].mean(axis=0)
    est = AttentionSelector(max_iter=2, classes=[-1, 1]).fit(seqs, y)
    np.testing.assert_allclose(est.head_, diff / np.linalg.norm(diff), rtol=1e-12)
    alike = [seqs[0], seqs[0], seqs[1], seqs[1]]
    est = AttentionSelector(max_iter=2, classes=[-1, 1]).fit(alike, y)
    np.testing.assert_array_equal(est.head_, [1.0, 0.0, 0.0])
    column = np.array([[0.5], [1.0], [-2.0]])
    est = AttentionSelector(head=column, max_iter=2, classes=[-1, 1]).fit(seqs, y)
    np.testing.assert_array_equal(est.head_, column.ravel())


def test_default_head_with_one_class_present():
    # _head_vector 30, 41, 46, 47: with every label +1 (classes given) there is no class
    # difference: the head is e_1, without NumPy's "mean of empty slice" on the way
    seqs = [np.array([[0.5, 1.0], [2.0, -1.0]]), np.array([[1.0, 3.0]])]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.filterwarnings("ignore", category=UserWarning)
        est = AttentionSelector(max_iter=2, classes=[-1, 1]).fit(seqs, [1, 1])
    np.testing.assert_array_equal(est.head_, [1.0, 0.0])


def test_extra_row_queries_need_two_rows():
    # _input_queries 6, 7: query_index="extra-row" reads the last row as the query, so an
    # input of two rows (one token) is accepted and one of one row is not
    X, y, v = _cross_attention()
    seqs = [X[0, -2:]] + list(X[1:])
    est = KeyQuerySelector(head=v, query_index="extra-row", max_iter=2,
                           classes=[-1, 1]).fit(seqs, y)
    assert est.attention_weights(seqs[:1])[0, 0] == 1.0
    with pytest.raises(ValueError, match=r"inputs \[0\] have fewer than 2 rows"):
        KeyQuerySelector(head=v, query_index="extra-row", max_iter=2,
                         classes=[-1, 1]).fit([X[0, -1:]] + list(X[1:]), y)


def test_negative_query_index_counts_from_each_inputs_last_real_token():
    # _input_queries 19, 22: query_index=-1 is the last real token of every input,
    # whatever its length; the attention is softmax_t(z_i^T W x_it), by hand
    X, y, v = _cross_attention()
    seqs = [X[i, : 4 + i % 3] for i in range(len(y))]
    est = KeyQuerySelector(head=v, query_index=-1, max_iter=2,
                           classes=[-1, 1], random_state=0).fit(seqs, y)
    got = est.attention_weights(seqs)
    for i, x in enumerate(seqs):
        logits = x @ est.key_query_.T @ x[-1]
        s = np.exp(logits - logits.max())
        np.testing.assert_allclose(got[i, : len(x)], s / s.sum(), rtol=1e-12)
        assert not got[i, len(x):].any()


@pytest.mark.filterwarnings("ignore:ngd. the gradient is exactly zero")  # one token
def test_matrix_limits_of_one_token_inputs_are_none():
    # _matrix_limit 15 (W = 0 kept as a limit): with one token per input there is no
    # constraint, the key-query ATT-SVM is W = 0, and there is no limit direction
    X, y, v = _cross_attention()
    est = KeyQuerySelector(head=v, query_index="extra-row", max_iter=2,
                           classes=[-1, 1]).fit(X[:, -2:], y)
    assert est.limit_directions_ == {"fro": None, "nuclear": None}
    assert est.mm_direction_ is None


def test_lifted_keys_too_large_for_memory(monkeypatch):
    # _prepare_matrix 31, 33 (the name and the size per lifted key): n T = 6 x 9 keys of
    # 3 k d doubles, 2 400 bytes each, 129 600 bytes against 80 % of 150 000
    from skntp.svm import ProgramTooLargeError

    X, y, v = _cross_attention()
    monkeypatch.setattr(_problem, "available_memory", lambda: 150_000)
    with pytest.raises(ProgramTooLargeError,
                       match=r"^the lifted keys vec\(z_i x_it\^T\): the program has 54 "
                             r"constraints and needs about 0\.000121 GiB"):
        KeyQuerySelector(head=v, query_index="extra-row", max_iter=2,
                         classes=[-1, 1]).fit(X, y)
    monkeypatch.setattr(_problem, "available_memory", lambda: 170_000)
    KeyQuerySelector(head=v, query_index="extra-row", max_iter=2,
                     compute_limits=False, classes=[-1, 1]).fit(X, y)


def test_fixed_query_shapes():
    # _fixed_query 19-28: u of shape (k,), or a row or column of k values; another shape
    # is an error that names (k,); the trained W acts through u alone (Lemma 1's form)
    X, y, v = _cross_attention()
    X = X[:, :-1]
    u = np.linspace(1.0, 2.0, 10)
    kw = dict(head=v, train="W", solver="svm", classes=[-1, 1])
    flat = AttentionSelector(fixed_query=u, **kw).fit(X, y)
    column = AttentionSelector(fixed_query=u[:, None], **kw).fit(X, y)
    np.testing.assert_array_equal(column.query_, u)
    np.testing.assert_allclose(column.key_query_, flat.key_query_, rtol=1e-12)
    with pytest.raises(ValueError, match=r"^fixed_query must have shape \(10,\), got \(3,\)"):
        AttentionSelector(fixed_query=np.ones(3), **kw).fit(X, y)


def test_gmm_in_the_max_norm_against_cvxpy():
    # AttentionSelector._explicit_limits 50 (the keys of the max-norm ATT-SVM): sign
    # descent's GMM is the max-norm (ATT-SVM), written here; its solution is not unique
    # (the third key coordinate is 0), its margin is
    from skntp.datasets import make_attention_fig1c

    D = make_attention_fig1c()
    est = AttentionSelector(D.head, D.key_query, solver="signgd", max_iter=50,
                            classes=[-1, 1]).fit(D.X, D.y)
    assert est.limit_norm_ == "max"
    np.testing.assert_array_equal(est.selected_tokens_, [2, 2, 2])
    got, best = _max_norm_margins(list(D.K), [2, 2, 2], est.gmm_direction_)
    assert got == pytest.approx(best, rel=1e-6)


def test_ties_are_refused_outside_the_frobenius_norm():
    # AttentionSelector._explicit_limits 19: (ATT-SVM') is enumerated in the Frobenius
    # norm only; with two optimal tokens in an input sign descent fits without the GMM
    with pytest.warns(UserWarning, match=r"several optimal tokens \(tied scores\); the GMM "
                      r"in the max norm is only computed without ties"):
        est = AttentionSelector(_TIED_HEAD, _TIED_KEYS, solver="signgd", max_iter=3,
                                classes=[-1, 1]).fit(_TIED, [1] * 4)
    assert est.gmm_direction_ is None


def test_matrix_gmm_outside_the_frobenius_norm_gets_method_and_progress(monkeypatch):
    # KeyQuerySelector._explicit_limits: the nuclear-norm key-query ATT-SVM
    # of the factored model is solved by the estimator's method, with its progress bar
    X, y, v = _cross_attention()
    calls, real = [], key_query_module.att_svm_w

    def recording(*args, **kwargs):
        calls.append((kwargs.get("norm"), kwargs.get("method"), kwargs.get("callback")))
        return real(*args, **kwargs)

    monkeypatch.setattr(key_query_module, "att_svm_w", recording)
    KeyQuerySelector(head=v, query_index="extra-row", parameterization="KQ",
                     solver="svm", svm_method="cvxpy", verbose=1, classes=[-1, 1]).fit(X, y)
    norm, method, callback = calls[0]
    assert (norm, method) == ("nuclear", "cvxpy") and callable(callback)
    # _matrix_limit 13: so are the limits of the fitted attributes, in each norm; the
    # method names the limit norm's program, the Frobenius one beside it uses auto
    assert sorted(n for n, _, _ in calls[1:]) == ["fro", "nuclear"]
    assert {(n, m) for n, m, _ in calls} == {("nuclear", "cvxpy"), ("fro", "auto")}


def test_gmm_in_the_max_norm_of_padded_inputs_against_cvxpy(monkeypatch):
    # AttentionSelector._explicit_limits 51-61 (the max-norm ATT-SVM of the p model: its
    # tokens, mask, norm, method and progress): inputs of 2 to 4 tokens, the optimal
    # token argmax_t Y_i v^T x_it, the program over real tokens written here (counting
    # the zero padding would give the margin 1.54, not 1.69)
    rng = np.random.default_rng(3)
    seqs = [rng.standard_normal((t, 8)) for t in (4, 2, 3, 4, 2, 3)]
    y = np.array([1, -1, 1, -1, 1, -1])
    v = rng.standard_normal(8)
    calls, real = [], attention_module.att_svm

    def recording(*args, **kwargs):
        calls.append((kwargs.get("method"), kwargs.get("callback")))
        return real(*args, **kwargs)

    monkeypatch.setattr(attention_module, "att_svm", recording)
    est = AttentionSelector(v, solver="signgd", max_iter=5, svm_method="cvxpy", verbose=1,
                            classes=[-1, 1]).fit(seqs, y)
    assert est.limit_norm_ == "max"
    assert calls[0][0] == "cvxpy" and callable(calls[0][1])
    opt = [int(np.argmax(label * s @ v)) for s, label in zip(seqs, y)]
    got, best = _max_norm_margins(seqs, opt, est.gmm_direction_)
    assert got == pytest.approx(best, rel=1e-6)


def test_infeasible_gmm_warns_and_fits_without_it():
    # AttentionSelector._explicit_limits 75: the optimal token 0 of input 0 (score 2) has
    # the key of token 1 (score 0), so (ATT-SVM) is infeasible; a gradient solver warns
    # with the reason and its consequence, and solver="svm" refuses
    seqs = [np.array([[1.0, 2.0], [1.0, 0.0]]), np.array([[0.5, 1.0], [-1.0, 0.0]])]
    kw = dict(head=_TIED_HEAD, key_query=_TIED_KEYS, classes=[-1, 1])
    with pytest.warns(UserWarning) as caught:
        est = AttentionSelector(max_iter=3, **kw).fit(seqs, [1, 1])
    assert [str(w.message) for w in caught if "infeasible" in str(w.message)] == [
        "ATT-SVM is infeasible: in input 0 the selected token 0 has the same key as token "
        "1, so no attention weight p can separate it (the constraint reads 0 >= 1); the "
        "selected tokens are not separable. gmm_direction_ is None."]
    assert est.gmm_direction_ is None
    with pytest.raises(NotSeparableError, match="solver='svm' needs the ATT-SVM"):
        AttentionSelector(solver="svm", **kw).fit(seqs, [1, 1])


def test_value_matrix_of_the_wrong_width_names_its_shape():
    # _value_matrix 5: the error names the expected shape (d_v, d)
    X, y, V = relu_setup(2, n=4, T=4, d=6)
    with pytest.raises(ValueError, match=r"^value must have shape \(d_v, 6\) \(d the token "
                                         r"dimension\), got \(6, 5\)\.$"):
        KeyQuerySelector(head=np.ones(6), value=V[:, :5], activation="relu",
                         query_index="extra-row", max_iter=2, classes=[-1, 1]).fit(X, y)
