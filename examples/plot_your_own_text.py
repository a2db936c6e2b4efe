"""
Your own text: from sentences to the implicit bias of next-token prediction
===========================================================================

The recipe for your own data, end to end: raw sentences, token ids, contexts
and next tokens, a decoder fitted by gradient descent **and** by its
max-margin limit, and the comparison of the two.

The NTP paper (Thrampoulidis, 2024) predicts what GD finds on such data
when the context embeddings are fixed and there are more dimensions than
distinct contexts (``d > m``): the loss goes to the entropy of the text's
next-word distributions, and the decoder grows along the NTP-SVM direction
``W^mm`` (which depends only on *which* words follow each context) while its
projection on the subspace ``F`` converges to ``W*`` (which carries the
*probabilities*).  Words that follow exactly the same contexts share their
``W^mm`` row.
"""

# %%
# Sentences to token ids
# ----------------------
# :class:`~skntp.datasets.TokenEncoder` learns a vocabulary (most frequent
# words first) and maps every sentence to an array of ids; ``<s>`` and
# ``</s>`` mark the start and the end of a sentence, so the first word is
# predicted too.
import matplotlib.pyplot as plt
import numpy as np

from skntp import NTPDecoderClassifier
from skntp.datasets import TokenEncoder, ntp_from_sequences
from skntp.plotting import plot_training_curves, plot_word_embeddings

sentences = [
    "the cat sat on the mat", "the cat sat on the rug", "the dog sat on the rug",
    "the dog sat on the mat", "the cat ate the fish", "the dog ate the bone",
    "a cat saw the dog", "a dog saw the cat", "the cat ran away", "the dog ran home",
    "a bird sat on the tree", "the bird ate the seed", "a bird saw the cat",
]
encoder = TokenEncoder(bos_token="<s>", eos_token="</s>")
ids = encoder.fit_transform(sentences)
print(f"{len(sentences)} sentences, {encoder.n_tokens_} tokens:", list(encoder.tokens_))
print("first sentence as ids:", ids[0].tolist())

# %%
# Contexts and next tokens
# ------------------------
# Every prefix of every sentence, cut to its last two words, is a context;
# the next word is its label.  ``embed="gaussian"`` gives every distinct
# context its own random embedding in ``d = m + 8`` dimensions (the
# overparameterized regime: NTP-separable and NTP_H-compatible).
X, y = ntp_from_sequences(ids, "gaussian", context_size=2, random_state=0)
prefixes, _ = ntp_from_sequences(ids, None, context_size=2)
names = {tuple(x): " ".join(encoder.inverse_transform(p)) for x, p in zip(X, prefixes)}
print(f"n = {X.shape[0]} (context, next word) pairs, m = {len(names)} distinct "
      f"contexts, d = {X.shape[1]}")

# %%
# Gradient descent and the limit it converges to
# ----------------------------------------------
# ``vocabulary`` names every token, also those no context is followed by.
gd = NTPDecoderClassifier(solver="ngd", lr=0.1, max_iter=5000, vocabulary=encoder.n_tokens_,
                          random_state=0).fit(X, y)
svm = NTPDecoderClassifier(solver="svm", vocabulary=encoder.n_tokens_).fit(X, y)
print(f"NTP-separable: {svm.is_ntp_separable_}, NTP_H-compatible: "
      f"{svm.is_ntp_compatible_}, entropy H = {svm.entropy_:.4f} nats")
print(f"{'fit':>4} {'CE - H':>9} {'||W||':>7} {'cos(W - W*, W^mm)':>18} "
      f"{'||P_F(W) - W*||':>16}")
for name, est in (("GD", gd), ("SVM", svm)):
    h = est.history_
    print(f"{name:>4} {h['excess_loss'][-1]:9.2e} {h['norm'][-1]:7.1f} "
          f"{est.alignment_:18.4f} {h['finite_distance'][-1]:16.3g}")
print("paper (Thm. 4.1): CE - H -> 0, cos -> 1, ||P_F(W) - W*|| -> 0 as GD runs")

# %%
# What the models predict after a few contexts
# --------------------------------------------
# The empirical next-word probabilities of the text, GD's and the limit's.
words = encoder.inverse_transform(gd.classes_)
for context in ("the cat", "sat on", "the dog"):
    x = X[[names[tuple(r)] == context for r in X]][:1]
    empirical = np.bincount(y[(X == x).all(axis=1)], minlength=encoder.n_tokens_)
    empirical = empirical / empirical.sum()
    top = np.argsort(-empirical)[:3]
    top = top[empirical[top] > 0]
    print(f"after '{context}':  " + ",  ".join(
        f"{words[z]} {empirical[z]:.2f} / GD {gd.predict_proba(x)[0, z]:.2f} / "
        f"SVM {svm.predict_proba(x)[0, z]:.2f}" for z in top))

# %%
# Words as the rows of the limit
# ------------------------------
# Words that follow exactly the same contexts get the same row of ``W^mm``.
support = np.asarray(svm.next_token_probs_) > 0
groups = {}
for z, column in enumerate(support.T):
    if column.any():
        groups.setdefault(column.tobytes(), []).append(words[z])
for group in groups.values():
    if len(group) > 1:
        print("same contexts, same W^mm row:", ", ".join(group))

# %%
# The plots
# ---------
# Top: GD against the limit (dashed lines).  Bottom: the next-token matrix
# and the rows of ``W^mm`` and ``W*`` (the most frequent next words, projected
# on their top two principal directions).
fig, axes = plt.subplots(2, 4, figsize=(17, 8.5))
plot_training_curves([gd, svm], labels=["GD", "SVM"], ax=axes[0])
plot_word_embeddings(svm, words=words, context_embeddings=np.unique(X, axis=0),
                     contexts=[names[tuple(r)] for r in np.unique(X, axis=0)],
                     max_words=12, max_contexts=0, ax=axes[1, :3])
axes[1, 3].set_axis_off()
fig.tight_layout()
plt.show()
