"""
The optimizer chooses the norm: sign descent, Muon and lp mirror descent
========================================================================

Steepest descent in a norm converges in direction to the max-margin solution
in that norm (Fan, Schmidt, Thrampoulidis, "Implicit Bias of Spectral Descent
and Muon on Multiclass Separable Data", 2025): normalized GD to the Frobenius
one, sign descent to the entrywise max-norm one, normalized spectral descent
(Muon's orthogonalized step) to the spectral-norm one.  Mirror descent with
the potential ``(1/p) ||W||_p^p`` goes to the lp max-margin attention
(Julistiono, Tarzanagh, Azizan, "Optimizing Attention with Mirror Descent",
2024).

**The papers' claims.** On separable one-hot data the optimizer x norm matrix
of normalized margins (each as a fraction of that norm's optimum) has its
largest entries on the diagonal, tending to 1; on attention, the normalized
Bregman divergence of lp mirror descent to the lq ATT-SVM is smallest for
``q = p`` (AttentionMD's Fig. 2).
"""

# %%
# One-hot data: three optimizers, three norms
# -------------------------------------------
# ``m = 20`` contexts in ``d = 12`` dimensions with one next token each among
# ``V = 5``; every optimizer starts at ``W = 0`` with the step ``0.1 / t^(1/3)``.
# :func:`~skntp.diagnostics.compare_optimizers` solves the max-margin program
# of each norm once and measures each run against all of them.
import matplotlib.pyplot as plt
import numpy as np

from skntp import KeyQuerySelector, NTPDecoderClassifier
from skntp.datasets import make_key_query_data
from skntp.diagnostics import compare_optimizers
from skntp.plotting import plot_optimizer_norms
from skntp.svm import att_svm_w

rng = np.random.default_rng(0)
X, y = rng.standard_normal((20, 12)), rng.integers(0, 5, 20)
solvers = {"normalized GD": {"solver": "ngd"}, "sign descent": {"solver": "signgd"},
           "Muon (spectral)": {"solver": "nsd", "descent_norm": "spectral"}}
template = NTPDecoderClassifier(lr=0.1, power_t=1 / 3, max_iter=5000, init="zeros",
                                compute_limits=False, record_every=5000)
table = compare_optimizers(template, X, y, solvers=solvers, norms=("fro", "max", "spectral"))
print("normalized margin / optimum (rows: optimizer; columns: fro, max, spectral)")
for name, row in zip(table["solvers"], table["margin_fraction"]):
    print(f"{name:>16}: " + "  ".join(f"{v:.3f}" for v in row))
print("paper: the diagonal is every row's largest entry, and tends to 1 "
      f"(here its smallest entry is {np.diag(table['margin_fraction']).min():.3f})")
plot_optimizer_norms(table)
plt.show()

# %%
# Attention: lp mirror descent and the lq ATT-SVMs
# ------------------------------------------------
# AttentionMD's setup: ``n = 6`` inputs of ``T = 8`` tokens in ``d = 10``, one
# query per input, normalized lp mirror descent with step 0.1 from
# ``W0 ~ N(0, 1)``.  The divergence is
# ``D_p(W^q / ||W^q||_p, W / ||W||_p)`` with ``D_p`` the Bregman divergence of
# the potential ``(1/p) ||.||_p^p``, to the lq ATT-SVM of the tokens the run
# selects.


def bregman(w1, w2, p):
    a = np.ravel(w1) / np.sum(np.abs(w1) ** p) ** (1 / p)
    b = np.ravel(w2) / np.sum(np.abs(w2) ** p) ** (1 / p)
    return 1.0 - np.sum(np.sign(b) * np.abs(b) ** (p - 1) * a)


ps, steps = (1.75, 2.0, 3.0), {1.75: 1500, 2.0: 2000, 3.0: 8000}
data = make_key_query_data(6, 8, 10, attention="cross", random_state=1)
W0 = np.random.default_rng(1).standard_normal((10, 10))
D = np.zeros((3, 3))
for i, p in enumerate(ps):
    est = KeyQuerySelector(head=data.head, query_index="extra-row",
                           solver="nmirror", mirror_p=p, lr=0.1, max_iter=steps[p],
                           init=W0, record_every=steps[p]).fit(data.X, data.y)
    for j, q in enumerate(ps):
        W_q = att_svm_w(data.tokens, data.queries, est.selected_tokens_, norm=("lp", q))
        D[i, j] = bregman(W_q, est.key_query_, p)
print("normalized Bregman divergence D_p(W^q, W) (rows: p of the run; columns: q)")
for p, row in zip(ps, D):
    print(f"p = {p:<4}: " + "  ".join(f"{v:.4f}" for v in row))
print("paper (Fig. 2, 50 seeds): each row's smallest entry on the diagonal "
      f"(here: {bool(np.all(np.argmin(D, axis=1) == np.arange(3)))})")

fig, ax = plt.subplots(figsize=(4.2, 3.4))
image = ax.imshow(D, cmap="viridis_r")
for (i, j), v in np.ndenumerate(D):
    ax.text(j, i, f"{v:.3f}", ha="center", va="center", fontsize=9,
            color="white" if v > D.max() / 2 else "black")
ax.set_xticks(range(3), [f"q = {q:g}" for q in ps])
ax.set_yticks(range(3), [f"p = {p:g}" for p in ps])
ax.set_title("Bregman divergence to the lq ATT-SVM", fontsize=10)
fig.colorbar(image, ax=ax, shrink=0.8)
plt.show()
