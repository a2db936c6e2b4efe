"""
Attention selects tokens: max-margin directions (max-margin paper, Fig. 1/8)
============================================================================

*Max-margin token selection in attention mechanism* (Tarzanagh et al., 2023),
Sec. 2: the model ``f(X) = v^T X^T softmax(X W^T p)`` with a fixed head ``v``
is trained in the query ``p``.  Gradient descent drives ``||p||`` to infinity
and the softmax to select one token per input; the direction of ``p``
converges to the max-margin separator ``p^mm(alpha)`` of the selected tokens
(ATT-SVM): the globally optimal one (GMM) or a locally optimal one (LMM).

**The paper's claims.** Fig. 1(a) (one input): GD converges to the GMM
direction from every start (Thm. 2).  Fig. 1(c) (three inputs): GD aligns
with the GMM direction from various starts.  Fig. 1(b) and Fig. 8: GD
started in the cone of an LMM direction converges to it (Thm. 3); started
near the GMM direction, to the GMM, so GD need not find the GMM.
"""

# %%
# Normalized GD from every start of every example
# -----------------------------------------------
# Each recipe of :mod:`skntp.datasets` holds the inputs, the head ``v``, the
# key-query matrix ``W`` and the starts of the paper's figure.
import matplotlib.pyplot as plt
import numpy as np

from skntp import AttentionSelector
from skntp.datasets import (
    make_attention_fig1a,
    make_attention_fig1b,
    make_attention_fig1c,
    make_attention_fig8,
)
from skntp.plotting import plot_attention_trajectories

examples = {"Fig. 1(a)": make_attention_fig1a(), "Fig. 1(b)": make_attention_fig1b(),
            "Fig. 1(c)": make_attention_fig1c(), "Fig. 8": make_attention_fig8()}
fits = {}
for title, data in examples.items():
    fits[title] = {
        start: AttentionSelector(data.head, data.key_query, solver="ngd", lr=0.1,
                                 max_iter=2000, init=p0,
                                 classes=[-1, 1]).fit(data.X, data.y)
        for start, p0 in data.starts.items()
    }

# %%
# Which tokens are selected, and which direction ``p`` converges to
# -----------------------------------------------------------------
# ``convergence_`` is ``"global"`` (GMM) or ``"local"`` (LMM, Def. 2);
# ``alignment_`` is the cosine of ``p`` with ``p^mm`` of the selected tokens.
print(f"{'example':>10} {'start':>11} {'selected':>10} {'limit':>6} "
      f"{'cos(p, p^mm)':>13} {'||p||':>7}")
for title, by_start in fits.items():
    for start, est in by_start.items():
        kind = {"global": "GMM", "local": "LMM"}.get(est.convergence_, est.convergence_)
        print(f"{title:>10} {start:>11} {str(est.selected_tokens_.tolist()):>10} "
              f"{kind:>6} {est.alignment_:13.5f} {np.linalg.norm(est.query_):7.1f}")
print("paper: Fig. 1(a), 1(c) -> GMM from every start (Thm. 2); Fig. 1(b), Fig. 8: "
      "a start in the cone of an LMM direction converges to it (Thm. 3)")

# %%
# The trajectories of ``p / ||p||``
# ---------------------------------
# The keys are colored by their score ``gamma = Y v^T x`` (one marker shape
# per input); the rays are the GMM direction (solid) and the LMM direction of
# the first start (dashed) when it differs.
fig, axes = plt.subplots(1, 4, figsize=(21, 5.2))
for ax, (title, by_start) in zip(axes, fits.items()):
    plot_attention_trajectories(list(by_start.values()), examples[title].X,
                                labels=list(by_start), title=title, ax=ax)
fig.tight_layout()
plt.show()
