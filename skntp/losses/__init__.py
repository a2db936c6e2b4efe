"""One objective per model: the losses that the training loop minimizes.

* :mod:`skntp.losses.decoder`: the NTP cross-entropy of a linear decoder
  (Thrampoulidis 2024, eq. (2));
* :mod:`skntp.losses.attention`: the attention model ``f(X) = v^T X^T S(K p)``
  and its risk (Tarzanagh et al. 2023, eq. (5) and (ERM)), for the query,
  the key-query matrix and the head, alone or jointly;
* :mod:`skntp.losses.key_query`: the key-query model of "Transformers as Support
  Vector Machines" (per-input queries, ``W`` or ``Q K^T``, value heads);
* :mod:`skntp.losses.self_attention`: 1-layer self-attention for NTP
  (Li et al. 2024, eq. (1));
* :mod:`skntp.losses.embeddings`: the NTP cross-entropy of trained word and
  context embeddings ``L = W H`` with weight decay (NTP-UFM, Zhao et al. 2024).

Each objective is a callable ``params -> (loss, gradients)`` written once over
the array namespace (NumPy or torch), with a ``work_size`` attribute (the
multiply-adds of its largest product) by which the loop sizes its threads.
The max-margin programs live in :mod:`skntp.svm`.
"""
