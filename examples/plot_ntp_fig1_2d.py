"""
NTP in two dimensions: word embeddings of the limit (NTP paper, Fig. 1/2)
=========================================================================

The smallest example of *Implicit optimization bias of next-token prediction
in linear models* (Thrampoulidis, 2024): ``m = 3`` contexts A, B, C on the
unit circle of ``R^2``, a vocabulary of ``V = 5`` words, and three words after
each context.  Gradient descent on the cross-entropy drives the decoder ``W``
to infinity along the NTP-SVM direction ``W^mm`` while its projection on the
subspace ``F`` converges to the finite component ``W*`` (Thm. 4.1).

**The paper's claims.** Fig. 1 (right): the loss goes to the entropy bound,
the norm grows, the correlation with ``W^mm`` goes to 1 and the projection
on ``F`` to ``W*``.  Fig. 2: words 1 and 5 (0 and 4 here, counting from 0)
follow the same contexts, so their rows of ``W^mm`` coincide, while their
rows of ``W*``, which carry the probabilities, differ.
"""

# %%
# The data and the two fits
# -------------------------
# ``make_ntp_2d_example`` returns the three contexts (one row each), their
# next-word distributions as soft labels, and the context weights.
import matplotlib.pyplot as plt
import numpy as np

from skntp import NTPDecoderClassifier
from skntp.datasets import make_ntp_2d_example
from skntp.plotting import plot_training_curves, plot_word_embeddings

H, P, weights = make_ntp_2d_example()
print("next-word probabilities (rows A, B, C):")
print(np.round(P, 2))

gd = NTPDecoderClassifier(solver="gd", lr=0.5, max_iter=20_000, record_every=20,
                          random_state=0).fit(H, P, sample_weight=weights)
svm = NTPDecoderClassifier(solver="svm").fit(H, P, sample_weight=weights)

# %%
# The limit's rows, word by word
# ------------------------------
# Words 0 and 4 have the same support pattern (both follow A and B): equal
# rows of ``W^mm``, different rows of ``W*``.
print(f"{'word':>4} {'W^mm row':>20} {'W* row':>20}")
for z in range(P.shape[1]):
    mm, star = svm.mm_direction_[z], svm.finite_component_[z]
    print(f"{z:>4} ({mm[0]:8.4f}, {mm[1]:7.4f}) ({star[0]:8.4f}, {star[1]:7.4f})")
print("paper (Fig. 2): w_1 = w_5 in W^mm but not in W* (words 0 and 4 here)")

h = gd.history_
print(f"GD after {gd.n_iter_} steps: CE - H = {h['excess_loss'][-1]:.2e}, "
      f"||W|| = {h['norm'][-1]:.2f}, cos(W - W*, W^mm) = {gd.alignment_:.4f}, "
      f"||P_F(W) - W*|| = {h['finite_distance'][-1]:.2e}")
print("paper (Fig. 1, right): CE -> H, ||W|| -> inf, cos -> 1, ||P_F(W) - W*|| -> 0")

# %%
# Fig. 1 and 2 in one grid
# ------------------------
# Top: the next-token matrix and the rows of ``W^mm`` (with each context's
# support set) and of ``W*``; passing the contexts ``H`` keeps the order
# A, B, C.  Bottom: GD against the limit, drawn as dashed reference lines.
fig, axes = plt.subplots(2, 4, figsize=(16, 8))
plot_word_embeddings(svm, context_embeddings=H, contexts=["A", "B", "C"], ax=axes[0, :3])
axes[0, 3].set_axis_off()
plot_training_curves([gd, svm], labels=["GD", "SVM"], ax=axes[1])
fig.tight_layout()
plt.show()
