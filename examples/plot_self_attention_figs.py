"""
Self-attention: token-priority graphs (self-attention paper, Figs. 2-4)
=======================================================================

*Mechanics of next token prediction with self-attention* (Li et al., 2024):
a one-layer self-attention model ``y_hat = C X^T softmax(X W x_bar)`` over
fixed token embeddings predicts the next token of a sequence.  For every
last token ``k`` the data define a *token-priority graph* ``G^(k)`` (edges
from each label to every token of its sequence).  Gradient descent on ``W``
converges in direction to the Graph-SVM solution ``W^mm``, which separates
the strongly connected components (SCCs) of the graphs, and its projection
on the cyclic subspace ``S_cyc`` converges to the finite ``W^cyc`` (Thms. 2-3).

**The paper's claims.** Fig. 2: the graphs and their SCCs.  Fig. 3 (acyclic
data, ``K = d = 8``, ``n = 4``, ``T = 6``; normalized GD, step 0.01): the
correlation of ``W(tau)`` with ``W^mm``, averaged over random instances,
exceeds 0.99 after 4000 iterations.  Fig. 4 (cyclic data, ``K = 6``,
``d = 8``, ``n = 6``, ``T = 4``): the correlation reaches about 0.987 and
``||Pi_Scyc(W) - W^cyc||`` falls below 0.01.  Both average 100 instances, as
here: :func:`skntp.sweeps.fit_ntp_trials` trains them in one batched run, each
instance exactly as ``fit`` would alone, in a few seconds.
"""

# %%
# Random instances of Fig. 3 (acyclic) and Fig. 4 (cyclic)
# --------------------------------------------------------
import warnings

import matplotlib.pyplot as plt
import numpy as np

from skntp import NTPAttentionClassifier
from skntp.datasets import make_token_priority_data
from skntp.graphs import is_acyclic, token_priority_graphs
from skntp.plotting import plot_metric_over_trials, plot_token_priority_graphs
from skntp.sweeps import fit_ntp_trials


def cyclic_instance(seed):
    """Fig. 4's general data, redrawn until some graph has a cycle."""
    while True:
        X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=seed)
        if not is_acyclic(token_priority_graphs(X, y)):
            return X, y, E
        seed += 10_000


n_trials = 100
data = {"acyclic (Fig. 3)": [make_token_priority_data(8, 8, 4, 6, acyclic=True,
                                                      random_state=seed)
                             for seed in range(n_trials)],
        "cyclic (Fig. 4)": [cyclic_instance(seed) for seed in range(n_trials)]}
fits = {}
for kind, instances in data.items():
    # one estimator per instance (each has its own embeddings E), one batched run
    with warnings.catch_warnings():
        # float64 saturation can stop a few instances early: expected here
        warnings.simplefilter("ignore")
        fits[kind] = fit_ntp_trials(
            [NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=4000, record_every=40)
             for _, _, E in instances],
            [(X, y) for X, y, _ in instances])

# %%
# Correlation with ``W^mm`` and distance to ``W^cyc`` after 4000 iterations
# -------------------------------------------------------------------------
print(f"{'data':>17} {'trials':>6} {'mean corr':>10} {'min corr':>9} "
      f"{'mean ||Pi(W)-W^cyc||':>21}")
for kind, ests in fits.items():
    corr = [e.history_["alignment"][-1] for e in ests]
    dist = [e.history_["finite_distance"][-1] for e in ests]
    print(f"{kind:>17} {len(ests):>6} {np.mean(corr):10.4f} {np.min(corr):9.4f} "
          f"{np.mean(dist):21.2e}")
print("paper: Fig. 3 corr > 0.99 (acyclic); Fig. 4 corr ~ 0.987 and "
      "||Pi_Scyc(W) - W^cyc|| < 0.01 (cyclic)")

# %%
# Fig. 2: the token-priority graphs of one cyclic instance
# --------------------------------------------------------
# Nodes of one color form a cyclic SCC (tokens that follow each other);
# solid edges ``i => j`` cross SCCs, dashed red edges stay inside one.
example = fits["cyclic (Fig. 4)"][0]
print(f"instance 0: {len(example.graphs_)} graphs, acyclic: {example.is_acyclic_}")
plot_token_priority_graphs(example, max_graphs=4)
plt.show()

# %%
# Fig. 3 and Fig. 4: averages over the instances
# ----------------------------------------------
fig, axes = plt.subplots(1, 3, figsize=(15, 4))
plot_metric_over_trials(fits["acyclic (Fig. 3)"], "alignment", ax=axes[0])
axes[0].set_title("Fig. 3: corr(W, W^mm), acyclic data", fontsize=10)
plot_metric_over_trials(fits["cyclic (Fig. 4)"], "alignment", ax=axes[1])
axes[1].set_title("Fig. 4(a): corr(W, W^mm), cyclic data", fontsize=10)
plot_metric_over_trials(fits["cyclic (Fig. 4)"], "finite_distance", ax=axes[2])
axes[2].set_title("Fig. 4(b): ||Pi_Scyc(W) - W^cyc||", fontsize=10)
for ax in axes[:2]:
    ax.set_ylim(0, 1.02)
fig.tight_layout()
plt.show()
