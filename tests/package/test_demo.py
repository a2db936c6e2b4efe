"""The main job (``python -m skntp demo``): every row of its table against an independent
computation from the fitted estimators and the NTP paper's definitions (Thrampoulidis
2024, eq. (2), (3), (5)); every quantity it prints is defined in its output."""

import re

import numpy as np
import pytest
from scipy.special import log_softmax

import skntp.__main__ as cli
from skntp.__main__ import demo_table
from skntp.datasets import make_ntp_data


@pytest.fixture(scope="module")
def demo_400():
    """The demo's fits and rows at 400 iterations (computed once for this file)."""
    return demo_table(max_iter=400, seed=0)


def _distinct(X, y):
    """Distinct contexts, their weights and next-token distributions."""
    H, inverse = np.unique(X, axis=0, return_inverse=True)
    tokens = np.unique(y)
    counts = np.zeros((len(H), len(tokens)))
    np.add.at(counts, (inverse.ravel(), np.searchsorted(tokens, y)), 1.0)
    return H, counts.sum(1) / len(y), counts / counts.sum(1, keepdims=True)


def _subspace_F(H, P):
    """Generators of F = span{(e_z - e_z') h_j^T : z, z' in S_j} (eq. 5) on W.ravel(), and
    the log-odds right-hand sides of eq. (3)."""
    V, d = P.shape[1], H.shape[1]
    rows, rhs = [], []
    for j in range(len(H)):
        sup = np.flatnonzero(P[j])
        for z in sup[1:]:
            g = np.zeros((V, d))
            g[z], g[sup[0]] = H[j], -H[j]
            rows.append(g.ravel())
            rhs.append(np.log(P[j, z] / P[j, sup[0]]))
    return np.array(rows), np.array(rhs)


def test_every_row_of_the_demo_is_what_its_label_says(demo_400):
    fits, rows = demo_400
    table = dict(rows)
    X, y = make_ntp_data(random_state=0)
    H, pi, P = _distinct(X, y)
    entropy = -np.sum(pi[:, None] * np.where(P > 0, P * np.log(np.where(P > 0, P, 1)), 0))
    G, b = _subspace_F(H, P)
    W_star = np.linalg.lstsq(G, b, rcond=None)[0]  # min-norm: the solution in F
    basis = np.linalg.svd(G, full_matrices=False)[2][: np.linalg.matrix_rank(G)]
    svm = fits["SVM limit"][0]
    mm = svm.mm_direction_.ravel()
    np.testing.assert_allclose(svm.finite_component_.ravel(), W_star, atol=1e-8)
    for k, (est, seconds) in enumerate(fits.values()):
        W = est.coef_.ravel()
        ce = -np.sum(pi[:, None] * P * log_softmax(H @ est.coef_.T, axis=1))
        assert table[f"CE - H (entropy bound H = {entropy:.4f})"][k] == pytest.approx(
            ce - entropy, rel=1e-6, abs=1e-12)
        assert table["||W||"][k] == pytest.approx(np.linalg.norm(W), rel=1e-12)
        assert table["cos(W, W^mm)"][k] == pytest.approx(
            W @ mm / np.linalg.norm(W), rel=1e-10)
        assert table["cos(W - W*, W^mm)"][k] == pytest.approx(
            (W - W_star) @ mm / np.linalg.norm(W - W_star), rel=1e-6)
        assert table["||P_F(W) - W*||"][k] == pytest.approx(
            np.linalg.norm(basis.T @ (basis @ W) - W_star), rel=1e-5,
            abs=1e-8 * np.linalg.norm(W))  # the projection's rounding, relative to ||W||
        assert table["iterations"][k] == est.n_iter_ and isinstance(est.n_iter_, int)
        assert table["time (s)"][k] == seconds > 0
    # the two cosines differ: the row labelled cos(W, W^mm) is not the corrected one
    assert table["cos(W, W^mm)"][0] < table["cos(W - W*, W^mm)"][0] - 1e-3


def test_the_demo_defines_every_quantity_it_prints(demo_400, monkeypatch, capsys):
    monkeypatch.setattr(cli, "demo_table", lambda max_iter, seed: demo_400)
    assert cli.main(["demo", "--max-iter", "400"]) == 0
    out = capsys.readouterr().out
    table, legend = out.split("What the rows are")
    defined = {line[2:21].strip() for line in legend.splitlines()
               if line.startswith("  ") and line[2] != " "}
    labels = [label for label, _ in demo_400[1]]
    for label in labels:  # each row of the table, as printed
        assert label in table
    # the rows, without their parenthesized note ("CE - H (entropy bound H = ...)")
    printed = {re.sub(r" \(.*\)$", "", label) for label in labels}
    # the quantities of the line under the table ("NTP-separable: True   ...")
    flags = next(line for line in table.splitlines() if line.startswith("NTP-separable"))
    printed |= {re.sub(r" 1/.*", "", part.split(":")[0].strip())
                for part in re.split(r"\s{3,}", flags)}
    assert printed == {"CE - H", "||W||", "cos(W, W^mm)", "cos(W - W*, W^mm)",
                       "||P_F(W) - W*||", "iterations", "time", "NTP-separable",
                       "NTP_H-compatible", "NTP-margin"}
    assert printed <= defined, printed - defined
    svm = demo_400[0]["SVM limit"][0]
    assert f"(method '{svm.svm_result_.method}'), not gradient steps" in legend
    assert f"R = {svm.svm_radius_:.4g}" in legend
