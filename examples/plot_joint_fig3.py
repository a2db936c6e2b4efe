"""
Training the head and the attention together (max-margin paper, Fig. 3)
=======================================================================

Sec. 3 of *Max-margin token selection in attention mechanism*: the model
``f(X) = v^T X^T softmax(X p)`` is trained in the head ``v`` **and** the
attention ``p`` together, on the logistic loss.  The paper's three inputs
(``n = 3``, ``T = d = 2``) each hold the token ``(0, 0)`` and one optimal
token; normalized GD (step 0.1, 1000 iterations) starts at
``p_0 = (0, -1)``, ``v_0 = (-1, 0)``.

**The paper's claims.** ``v`` converges in direction to the hard-margin SVM
``v^mm = (0, 1)`` of the selected tokens, and ``p``:

* Fig. 3(a): every selected token is a support vector of that SVM, so
  ``p -> p^mm = p^relax`` (Thm. 5);
* Fig. 3(b): the third token, moved to ``(0.5, 1.5)``, is not a support
  vector, so ``p -> p^relax`` of eq. (10), which differs from ``p^mm``
  (Thm. 6);
* Fig. 3(c): the softmax probability of the optimal tokens and the logistic
  probability of the labels both go to 1.
"""

# %%
# The two variants, by normalized GD and by the explicit limit
# ------------------------------------------------------------
import matplotlib.pyplot as plt
import numpy as np

from skntp import JointAttentionSVM
from skntp.datasets import make_joint_fig3
from skntp.plotting import plot_attention_trajectories


def cos(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


fits = {}
print(f"{'fig':>4} {'solver':>6} {'cos(p,p^relax)':>15} {'cos(p,p^mm)':>12} "
      f"{'cos(v,v^mm)':>12} {'support':>10}")
for variant in ("a", "b"):
    X, y, P = make_joint_fig3(variant, return_params=True)
    for solver in ("ngd", "svm"):
        est = JointAttentionSVM(solver=solver, lr=0.1, max_iter=1000,
                                init=(P.head_init, P.query_init)).fit(X, y)
        fits[variant, solver] = (est, X, P)
        print(f"{'3(' + variant + ')':>4} {solver:>6} {cos(est.query_, P.relaxed):15.6f} "
              f"{cos(est.query_, P.att_svm):12.6f} {cos(est.head_, P.head_mm):12.6f} "
              f"{str(est.support_.tolist()):>10}")
print("paper: (a) p -> p^mm = p^relax (Thm. 5); (b) p -> p^relax != p^mm (Thm. 6); "
      "v -> v^mm = (0, 1)")

# %%
# Fig. 3: trajectories and probabilities
# --------------------------------------
# ``trajectory_["query"]`` and ``trajectory_["head"]`` hold the iterates;
# ``attention_saturation`` and ``label_probability`` are the two curves of
# Fig. 3(c).
fig, axes = plt.subplots(1, 3, figsize=(16, 5))
for ax, variant in zip(axes, ("a", "b")):
    est, X, P = fits[variant, "ngd"]
    _, y, _ = make_joint_fig3(variant, return_params=True)
    Y = np.where(y == est.classes_[1], 1.0, -1.0)
    plot_attention_trajectories(
        [est.trajectory_["query"], est.trajectory_["head"]], X, labels=["p(t)", "v(t)"],
        directions={"p^relax": P.relaxed, "p^mm (ATT-SVM)": P.att_svm, "v^mm": P.head_mm},
        token_scores=Y[:, None] * (X @ est.head_),  # scores Y v^T x of the fitted head
        title=f"Fig. 3({variant})", ax=ax)
h = fits["a", "ngd"][0].history_
axes[2].plot(h["iteration"] + 1, h["attention_saturation"], color="tab:red",
             label="softmax probability of the selected tokens")
axes[2].plot(h["iteration"] + 1, h["label_probability"], color="tab:blue",
             label="logistic probability sigmoid(Y f(X))")
axes[2].set_xscale("log")
axes[2].set_xlabel("iteration + 1")
axes[2].set_title("Fig. 3(c): probabilities in (a)", fontsize=10)
axes[2].legend(fontsize=8)
axes[2].grid(alpha=0.3)
fig.tight_layout()
plt.show()
