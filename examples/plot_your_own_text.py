"""
Your own text: from sentences to the implicit bias of next-token prediction
===========================================================================

The recipe for your own data, end to end: raw sentences, token ids, contexts
embedded by their words, a decoder fitted by gradient descent **and** by its
max-margin limit, the comparison of the two, and their predictions on new
text embedded by the same fitted encoder and embedder.

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
from skntp.datasets import ContextEmbedder, TokenEncoder, ntp_from_sequences
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
# Contexts and next tokens, embedded by their words
# -------------------------------------------------
# Every prefix of every sentence, cut to its last two words, is a context;
# the next word is its label.  A :class:`~skntp.datasets.ContextEmbedder`
# gives every word of the vocabulary a fixed random vector (one row of a
# token table, ``N(0, I/d_tok)`` with ``d_tok = V``) and embeds a context as
# the concatenation of the vectors of its last two words.  A context's
# vector therefore depends on its words only: the same fitted embedder
# embeds new text below, and a context of both texts gets the same vector in
# both.  ``ntp_from_sequences`` fits the embedder on the contexts of the
# sentences and returns their embeddings ``X`` and next words ``y``.
embedder = ContextEmbedder(context_size=2, n_tokens=encoder.n_tokens_, random_state=0)
X, y = ntp_from_sequences(ids, embedder)
contexts = ntp_from_sequences(ids, None, context_size=2)[0]
H, first = np.unique(X, axis=0, return_index=True)  # the distinct contexts
names = [" ".join(encoder.inverse_transform(contexts[i])) for i in first]
print(f"n = {X.shape[0]} (context, next word) pairs, m = {len(H)} distinct contexts, "
      f"d = {X.shape[1]} (rank {np.linalg.matrix_rank(H)})")

# %%
# Gradient descent and the limit it converges to
# ----------------------------------------------
# ``vocabulary`` names every token, also those no context is followed by.
# The contexts share words, so they are not linearly independent (rank
# below ``m``), yet the data are NTP-separable and NTP_H-compatible: the
# conditions of Thm. 4.1 hold.
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
# Predictions on new text
# -----------------------
# New sentences go through the *fitted* encoder and embedder.  A context
# seen in training ("the cat") gets its training vector, so the models
# predict the text's next-word distribution there (empirical / GD / SVM).
# "bird ran" never occurs in training: its vector is new, but made of the
# vectors of "bird" and "ran", so the decoder's logits add what it learned
# about "bird" as the older word and "ran" as the newer one ("ran away",
# "ran home").
words = encoder.inverse_transform(gd.classes_)
new_ids = encoder.transform(["the cat sat on the rug", "the bird ran home"])
X_new, y_new = ntp_from_sequences(new_ids, embedder)
new_contexts = ntp_from_sequences(new_ids, None, context_size=2)[0]
proba_gd, proba_svm = gd.predict_proba(X_new), svm.predict_proba(X_new)
print(f"{'context':>12} {'next':>6} {'in training':>11}   top-3 of GD (empirical / GD / SVM)")
for i, context in enumerate(new_contexts):
    seen = (X == X_new[i]).all(axis=1)
    counts = np.bincount(y[seen], minlength=encoder.n_tokens_)
    empirical = [f"{c / seen.sum():.2f}" if seen.any() else "  - " for c in counts]
    top = np.argsort(-proba_gd[i])[:3]
    print(f"{' '.join(encoder.inverse_transform(context)):>12} "
          f"{encoder.inverse_transform([y_new[i]])[0]:>6} {str(seen.any()):>11}   "
          + ",  ".join(f"{words[z]} {empirical[z]} / {proba_gd[i, z]:.2f} / "
                       f"{proba_svm[i, z]:.2f}" for z in top))

# %%
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
# on their top two principal directions), and the next-word probabilities
# the two fits give the new context "bird ran" of the new text.
fig, axes = plt.subplots(2, 4, figsize=(17, 8.5))
plot_training_curves([gd, svm], labels=["GD", "SVM"], ax=axes[0])
plot_word_embeddings(svm, words=words, context_embeddings=H, contexts=names,
                     max_words=12, max_contexts=0, ax=axes[1, :3])
new_context = next(i for i in range(len(X_new)) if not (X == X_new[i]).all(axis=1).any())
top = np.argsort(-proba_gd[new_context])[:6]
at = np.arange(len(top))
axes[1, 3].bar(at - 0.2, proba_gd[new_context, top], width=0.4, label="GD")
axes[1, 3].bar(at + 0.2, proba_svm[new_context, top], width=0.4, label="SVM")
axes[1, 3].set_xticks(at, words[top], rotation=45)
axes[1, 3].set_ylabel("predicted probability")
axes[1, 3].set_title("new context: '"
                     + " ".join(encoder.inverse_transform(new_contexts[new_context])) + "'")
axes[1, 3].legend()
fig.tight_layout()
plt.show()
