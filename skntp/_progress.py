"""A minimal text progress bar for long fits and sweeps (no dependency).

Estimators with ``verbose > 0`` pass ``progress=make_progress(self.verbose,
self.max_iter)`` to :func:`skntp._optim.minimize`; the loop calls it as
``progress(k, loss, row)`` after every iteration, with ``row`` the last
recorded history row (a dict of floats, or per-trial vectors for batched
runs).  The bar is redrawn on stderr with a carriage return, at most every
``min_interval`` seconds, and shows the iteration, the loss and, when the
history has it, the alignment with the max-margin direction.
"""

from __future__ import annotations

import sys
import time

import numpy as np

__all__ = ["ProgressBar", "make_progress"]


def _scalar(value):
    """A float for display: the value, or the mean over trials of a vector."""
    arr = np.asarray(value, dtype=float)
    return float(arr) if arr.ndim == 0 else float(np.mean(arr))


class ProgressBar:
    """``progress(k, loss, row=None)`` callback drawing a one-line bar on a stream.

    Parameters
    ----------
    total : int
        Number of iterations (``max_iter``).
    desc : str, default="fit"
        Label at the start of the line.
    width : int, default=24
        Characters of the bar itself.
    stream : file-like, default=None
        Where to write (``sys.stderr`` when None).
    min_interval : float, default=0.1
        Seconds between redraws (the last iteration is always drawn).
    """

    def __init__(self, total, desc="fit", width=24, stream=None, min_interval=0.1):
        self.total = max(1, int(total))
        self.desc = desc
        self.width = int(width)
        self.stream = stream
        self.min_interval = float(min_interval)
        self._t0 = time.perf_counter()
        self._last = -np.inf
        self._closed = False
        self._width = 0

    def line(self, k, loss, row=None):
        """The text of the bar at iteration ``k`` (without the carriage return)."""
        frac = min(1.0, k / self.total)
        filled = int(round(frac * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        parts = [f"{self.desc} [{bar}] {k}/{self.total}", f"loss {_scalar(loss):.4g}"]
        if row:
            for key, label in (("alignment_corrected", "cos(w-w*,mm)"),
                               ("alignment", "cos(w,mm)")):
                if key in row:
                    parts.append(f"{label} {_scalar(row[key]):.4f}")
                    break
        parts.append(f"{time.perf_counter() - self._t0:.1f}s")
        return "  ".join(parts)

    def __call__(self, k, loss, row=None):
        if self._closed:
            return
        now = time.perf_counter()
        done = k >= self.total
        if not done and now - self._last < self.min_interval:
            return
        self._last = now
        stream = self.stream if self.stream is not None else sys.stderr
        text = self.line(k, loss, row)
        stream.write("\r" + text.ljust(self._width))
        self._width = len(text)
        if done:
            stream.write("\n")
            self._closed = True
        stream.flush()

    def close(self):
        """End the line (call when a fit stops before ``total``)."""
        if not self._closed:
            stream = self.stream if self.stream is not None else sys.stderr
            stream.write("\n")
            stream.flush()
            self._closed = True


def make_progress(verbose, total, desc="fit", stream=None):
    """A :class:`ProgressBar` when ``verbose > 0``, else ``None`` (no callback)."""
    if not verbose:
        return None
    return ProgressBar(total, desc=desc, stream=stream)
