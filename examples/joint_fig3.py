"""Reproduce Fig. 3 of "Max-Margin Token Selection in Attention Mechanism" (Sec. 3).

The joint model ``f(X) = v^T X^T softmax(X p)`` (``W = I``) on the paper's
three inputs (``n = 3``, ``T = d = 2``; every input has the token ``(0, 0)``
and one optimal token), trained in ``(v, p)`` on the logistic loss by
normalized GD (step 0.1, 1000 iterations, from ``p_0 = (0, -1)``,
``v_0 = (-1, 0)``, as in App. E), and by the regularization path
``argmin_{||v|| <= r, ||p|| <= R} L`` (Thms. 5-6):

* **Fig. 3(a)** (Thm. 5): the optimal tokens ``(1, 1)``, ``(1, -1)``,
  ``(0.5, 1)`` are all support vectors of the head SVM (``v^mm = (0, 1)``),
  so ``p -> p^mm = (4/3, 1/3)`` and ``v -> v^mm``;
* **Fig. 3(b)** (Thm. 6): the third token moves to ``(0.5, 1.5)`` and is no
  longer a support vector, so ``p -> p^relax = (1, 0)`` of eq. (10), not
  ``p^mm = (5/4, 1/4)``;
* **Fig. 3(c)**: for (a), the mean softmax probability of the selected tokens
  (red) and the mean logistic probability ``sigmoid(Y f(X))`` (blue) go to 1.

Prints the cosines of the final iterates with each direction; ``--plot``
saves the three panels (needs matplotlib).

Usage::

    python examples/joint_fig3.py [--iters 1000] [--plot fig3.png]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from skntp._joint import JointAttentionSVM
from skntp.datasets import make_joint_fig3


def cos(a, b):
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def fit(variant, solver, iters):
    X, y, P = make_joint_fig3(variant, return_params=True)
    kw = {"max_iter": iters} if solver == "ngd" else {"max_iter": 500}
    est = JointAttentionSVM(solver=solver, lr=0.1, head_init=P.head_init,
                            query_init=P.query_init, **kw)
    t0 = time.perf_counter()
    est.fit(X, y)
    return est, X, P, time.perf_counter() - t0


def main(iters=1000, plot=None):
    rows, fits = [], {}
    for variant in ("a", "b"):
        for solver in ("ngd", "regpath", "svm"):
            est, X, P, secs = fit(variant, solver, iters)
            fits[variant, solver] = (est, X, P)
            rows.append((variant, solver, cos(est.query_, P.relaxed), cos(est.query_, P.att_svm),
                         cos(est.head_, P.head_mm), est.support_.tolist(),
                         est.history_["attention_saturation"][-1],
                         est.history_["label_probability"][-1], secs))
    print("Fig. 3: cosines of the fitted p and v with the limits of Thms. 5-6")
    print(f"{'fig':>4} {'solver':>8} {'cos(p,p^relax)':>15} {'cos(p,p^mm)':>12} "
          f"{'cos(v,v^mm)':>12} {'support':>10} {'softmax':>9} {'logistic':>9} {'time':>6}")
    for v, s, cr, cm, cv, sup, sat, prob, secs in rows:
        print(f"{'3(' + v + ')':>4} {s:>8} {cr:15.6f} {cm:12.6f} {cv:12.6f} {str(sup):>10} "
              f"{sat:9.6f} {prob:9.6f} {secs:5.2f}s")
    print("cos(p^relax, p^mm) in Fig. 3(b): "
          f"{cos(fits['b', 'ngd'][2].relaxed, fits['b', 'ngd'][2].att_svm):.6f}")
    if plot:
        draw(fits, plot)
        print(f"saved {plot}")
    return rows


def draw(fits, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 5))
    star_colors = ["tab:green", "tab:cyan", "gold"]
    for ax, variant, title in ((axes[0], "a", "(a) all inputs are support vectors"),
                               (axes[1], "b", "(b) (0.5, 1.5) is not a support vector")):
        est, X, P = fits[variant, "ngd"]
        ax.scatter([0], [0], s=80, color="0.5", edgecolors="k", zorder=3,
                   label="non-optimal tokens (0, 0)")
        for i, label in enumerate(("+1", "-1", "+1")):
            ax.scatter(*X[i, 1], marker="*", s=260, color=star_colors[i], edgecolors="k",
                       zorder=3, label=f"optimal token of input {i} (Y = {label})")
        for key, color in (("query", "tab:red"), ("head", "tab:blue")):
            traj = est.history_[key]
            u = traj / np.linalg.norm(traj, axis=1, keepdims=True)
            ax.plot(u[:, 0], u[:, 1], color=color, lw=2,
                    label=("p" if key == "query" else "v") + "(t) / ||.||")
            ax.annotate("", xy=u[-1], xytext=u[-2],
                        arrowprops={"arrowstyle": "-|>", "color": color})
        rays = [(P.relaxed, "tab:red", "p^relax (eq. 10)"), (P.head_mm, "tab:blue", "v^mm")]
        if variant == "b":
            rays.append((P.att_svm, "0.5", "p^mm (ATT-SVM)"))
        for d, color, name in rays:
            r = 1.6 * d / np.linalg.norm(d)
            ax.plot([0, r[0]], [0, r[1]], ls="--", color=color, lw=1.3, label=name)
        ax.set_xlim(-1.7, 1.7)
        ax.set_ylim(-1.7, 1.7)
        ax.set_aspect("equal")
        ax.axhline(0, color="0.9", lw=0.8, zorder=0)
        ax.axvline(0, color="0.9", lw=0.8, zorder=0)
        ax.set_title(title)
        ax.legend(fontsize=7, loc="lower left")
    est = fits["a", "ngd"][0]
    h = est.history_
    axes[2].plot(h["iteration"], h["attention_saturation"], color="tab:red",
                 label="softmax probability of the selected tokens")
    axes[2].plot(h["iteration"], h["label_probability"], color="tab:blue",
                 label="logistic probability sigmoid(Y f(X))")
    axes[2].set_xscale("symlog", linthresh=10)
    axes[2].set_xlabel("iteration")
    axes[2].set_ylabel("probability")
    axes[2].set_title("(c) probability evolution in (a)")
    axes[2].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=1000)
    parser.add_argument("--plot", default=None, help="save the figure to this path")
    args = parser.parse_args()
    main(args.iters, args.plot)
