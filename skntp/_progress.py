"""Progress of long fits: the descent and the max-margin limit solve.

Estimators with ``verbose > 0`` report two phases on stderr:

* **the limit** (:func:`make_limit_progress`): ``callback(n_iter, gap,
  violation)`` for :func:`skntp.svm.solve_max_margin`, which iterative
  methods call at each certificate check and once at the end;
* **the descent** (:func:`make_progress`): ``progress(k, loss, row)`` for
  :func:`skntp._optim.minimize`, called after every iteration with ``row``
  the last recorded history row (a dict of floats, or per-trial vectors for
  batched runs).

Both return callables with a ``close()`` method, drawn one of three ways:

* in a Jupyter kernel, or on a terminal, when ``tqdm`` is installed
  (``pip install 'skntp[progress]'``): a ``tqdm.auto`` bar (a widget in
  notebooks when ``ipywidgets`` is installed; rate and ETA);
* on a terminal without ``tqdm``: a one-line text bar redrawn in place
  (carriage return) at most every ``min_interval`` seconds;
* when the stream is not a terminal (a log file, a pipe, CI): full lines,
  at most one every ``line_interval`` seconds, and always the last one, so
  a log gets a few readable lines instead of one endless redrawn line.
"""

from __future__ import annotations

import math
import sys
import time
import warnings

import numpy as np

__all__ = ["LimitProgress", "ProgressBar", "make_limit_progress", "make_progress"]

STYLES = ("auto", "tqdm", "plain")


def _scalar(value):
    """A float for display: the value, or the mean over trials of a vector."""
    arr = np.asarray(value, dtype=float)
    return float(arr) if arr.ndim == 0 else float(np.mean(arr))


def _is_tty(stream):
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _in_notebook():
    """Running in a Jupyter kernel (where ``tqdm.auto`` draws a widget)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # pragma: no cover - exotic IPython set-ups
        return False
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def _tqdm_class():
    """``tqdm.auto.tqdm``, or None when tqdm is not installed.

    Without ``ipywidgets`` a kernel gets tqdm's text bar; tqdm's warning
    about the missing widget is silenced (the text bar works there).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm


def _use_tqdm(style, stream):
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}.")
    if style == "plain":
        return None
    tqdm = _tqdm_class()
    if style == "tqdm":
        if tqdm is None:
            raise ImportError("style='tqdm' needs tqdm: pip install 'skntp[progress]'.")
        return tqdm
    if tqdm is not None and (_in_notebook() or _is_tty(stream)):
        return tqdm
    return None


def _duration(seconds):
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}:{seconds:02d}"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"


class _Line:
    """Writes a status line: redrawn in place on a terminal, full lines otherwise."""

    def __init__(self, stream, min_interval, line_interval):
        self.stream = stream
        self.min_interval = float(min_interval)
        self.line_interval = float(line_interval)
        self._tty = None
        self._t0 = time.perf_counter()
        self._last = None  # time of the last write
        self._width = 0
        self._closed = False

    def _target(self):
        stream = self.stream if self.stream is not None else sys.stderr
        if self._tty is None:
            self._tty = _is_tty(stream)
        return stream

    def due(self, now):
        """Whether to write now: a terminal redraws at once, then every ``min_interval``;
        a log gets its first line after ``line_interval``, then one every ``line_interval``."""
        self._target()  # decides terminal or not on first use
        if self._tty:
            return self._last is None or now - self._last >= self.min_interval
        since = self._t0 if self._last is None else self._last
        return now - since >= self.line_interval

    def write(self, text, now, final=False):
        if self._closed:
            return
        stream = self._target()
        self._last = now
        if self._tty:
            stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
            if final:
                stream.write("\n")
        else:
            stream.write(text + "\n")
        if final:
            self._closed = True
        stream.flush()

    def end(self, text=None):
        """Close the line; on a non-terminal, ``text`` (the last state) is written first."""
        if self._closed:
            return
        stream = self._target()
        if self._tty:
            if self._last is not None:  # a line was drawn: move past it
                stream.write("\n")
        elif text is not None:
            stream.write(text + "\n")
        stream.flush()
        self._closed = True


class ProgressBar:
    """``progress(k, loss, row=None)`` callback drawing the descent without tqdm.

    On a terminal, a one-line bar redrawn with a carriage return at most
    every ``min_interval`` seconds; otherwise one full line at most every
    ``line_interval`` seconds.  The last iteration is always written.  The
    line shows the iteration, the loss, the alignment with the max-margin
    direction when the history has it, the elapsed time and the ETA.

    Parameters
    ----------
    total : int
        Number of iterations (``max_iter``).
    desc : str, default="fit"
        Label at the start of the line.
    width : int, default=24
        Characters of the bar itself.
    stream : file-like, default=None
        Where to write (``sys.stderr`` at the time of the first write when None).
    min_interval : float, default=0.1
        Seconds between redraws on a terminal.
    line_interval : float, default=10.0
        Seconds between full lines when the stream is not a terminal.
    """

    def __init__(self, total, desc="fit", width=24, stream=None, min_interval=0.1,
                 line_interval=10.0):
        self.total = max(1, int(total))
        self.desc = desc
        self.width = int(width)
        self.stream = stream
        self._line = _Line(stream, min_interval, line_interval)
        self._t0 = time.perf_counter()
        self._state = None
        self._pending = False  # the last state is not written yet

    def line(self, k, loss, row=None, now=None, stopped=False):
        """The text of the bar at iteration ``k`` (``stopped``: the run ended there)."""
        now = time.perf_counter() if now is None else now
        elapsed = now - self._t0
        frac = min(1.0, k / self.total)
        filled = int(round(frac * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        parts = [f"{self.desc} [{bar}] {k}/{self.total}", f"loss {_scalar(loss):.4g}"]
        if row:
            if "alignment" in row:  # of w - w* where the model has a finite part
                label = "cos(w-w*,mm)" if "alignment_uncorrected" in row else "cos(w,mm)"
                parts.append(f"{label} {_scalar(row['alignment']):.4f}")
        if stopped and k < self.total:
            parts.append(f"{elapsed:.1f}s (stopped)")
        elif k < self.total:
            eta = elapsed / k * (self.total - k) if k > 0 else math.inf
            parts.append(f"{elapsed:.1f}s eta {_duration(eta)}")
        else:
            parts.append(f"{elapsed:.1f}s")
        return "  ".join(parts)

    def __call__(self, k, loss, row=None):
        now = time.perf_counter()
        done = k >= self.total
        self._state = (k, loss, row)
        self._pending = True
        if done or self._line.due(now):
            self._line.write(self.line(k, loss, row, now), now, final=done)
            self._pending = False

    def close(self):
        """End the line (when a fit stops before ``total``), writing the last state."""
        if self._line._tty and self._state is not None:
            now = time.perf_counter()
            self._line.write(self.line(*self._state, now=now, stopped=True), now, final=True)
            return
        self._line.end(self.line(*self._state, stopped=True) if self._pending else None)


class LimitProgress:
    """``callback(n_iter, gap, violation)`` showing the max-margin solve without tqdm.

    Writes ``"<desc>: it=..., gap=..., viol=..."`` (redrawn on a terminal,
    occasional full lines otherwise; see :class:`ProgressBar`).  Iteration
    counts of successive solves (a method falling back to another, or the
    several programs of one limit) add up.

    Parameters
    ----------
    desc : str, default="limit"
    stream : file-like, default=None
    min_interval : float, default=0.1
    line_interval : float, default=10.0
    """

    def __init__(self, desc="limit", stream=None, min_interval=0.1, line_interval=10.0):
        self.desc = desc
        self._line = _Line(stream, min_interval, line_interval)
        self._t0 = time.perf_counter()
        self._done = 0      # iterations of finished solves
        self._last_it = 0
        self._state = None
        self._pending = False  # the last state is not written yet

    def iterations(self, n_iter):
        """Total iterations after a report of ``n_iter`` for the current solve."""
        n_iter = int(n_iter)
        if n_iter < self._last_it:  # a new solve started
            self._done += self._last_it
        self._last_it = n_iter
        return self._done + n_iter

    def line(self, total_it, gap, violation, now=None):
        now = time.perf_counter() if now is None else now
        return (f"{self.desc}: it={total_it}, gap={float(gap):.2e}, "
                f"viol={float(violation):.2e}  {now - self._t0:.1f}s")

    def __call__(self, n_iter, gap, violation):
        now = time.perf_counter()
        self._state = (self.iterations(n_iter), gap, violation)
        self._pending = True
        if self._line.due(now):
            self._line.write(self.line(*self._state, now), now)
            self._pending = False

    def close(self):
        """Write the final state (unless just written) and end the line."""
        if self._state is None:
            self._line.end(None)
        elif self._pending or self._line._tty:
            now = time.perf_counter()
            self._line.write(self.line(*self._state, now), now, final=True)
        else:
            self._line.end(None)


class _TqdmDescent:
    """The descent callback on a ``tqdm`` bar (postfix: loss and alignment)."""

    def __init__(self, tqdm, total, desc, stream, min_interval=0.1):
        self.bar = tqdm(total=int(total), desc=desc, file=stream, leave=True,
                        dynamic_ncols=True, mininterval=min_interval)
        self.min_interval = min_interval
        self._last = -math.inf
        self._k = 0

    def __call__(self, k, loss, row=None):
        now = time.perf_counter()
        if k < self.bar.total and now - self._last < self.min_interval:
            return
        self._last = now
        post = {"loss": f"{_scalar(loss):.4g}"}
        if row and "alignment" in row:  # of w - w* where the model has a finite part
            label = "cos(w-w*,mm)" if "alignment_uncorrected" in row else "cos(w,mm)"
            post[label] = f"{_scalar(row['alignment']):.4f}"
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(k - self._k)
        self._k = k

    def close(self):
        self.bar.close()


class _TqdmLimit:
    """The limit callback on a ``tqdm`` counter (postfix: gap and violation)."""

    def __init__(self, tqdm, desc, stream, min_interval=0.1):
        self.bar = tqdm(total=None, desc=desc, file=stream, leave=True, unit="it",
                        dynamic_ncols=True, mininterval=min_interval)
        self._count = LimitProgress()
        self._shown = 0

    def __call__(self, n_iter, gap, violation):
        total = self._count.iterations(n_iter)
        self.bar.set_postfix_str(f"gap={float(gap):.2e}, viol={float(violation):.2e}",
                                 refresh=False)
        self.bar.update(max(0, total - self._shown))
        self._shown = max(self._shown, total)

    def close(self):
        self.bar.refresh()
        self.bar.close()


def make_progress(verbose, total, desc="fit", stream=None, style="auto"):
    """The descent's progress callback when ``verbose > 0``, else ``None``.

    Parameters
    ----------
    verbose : int
    total : int
        ``max_iter``.
    desc : str, default="fit"
    stream : file-like, default=None
        ``sys.stderr`` when None.
    style : {"auto", "tqdm", "plain"}, default="auto"
        ``"auto"``: tqdm in a notebook or on a terminal when it is installed,
        else :class:`ProgressBar`; ``"tqdm"``/``"plain"`` force one.

    Returns
    -------
    callable or None
        ``progress(k, loss, row)`` with a ``close()`` method.
    """
    if not verbose:
        return None
    target = stream if stream is not None else sys.stderr
    tqdm = _use_tqdm(style, target)
    if tqdm is not None:
        return _TqdmDescent(tqdm, total, desc, target)
    return ProgressBar(total, desc=desc, stream=stream)


def make_limit_progress(verbose, desc="limit", stream=None, style="auto"):
    """The limit solve's ``callback(n_iter, gap, violation)`` when ``verbose > 0``.

    Pass it as ``callback=`` to :func:`skntp.svm.solve_max_margin` (or any
    :mod:`skntp.svm` function) and call its ``close()`` after the solve.

    Parameters
    ----------
    verbose : int
    desc : str, default="limit"
        E.g. ``"limit NTP-SVM"``.
    stream, style :
        See :func:`make_progress`.

    Returns
    -------
    callable or None
    """
    if not verbose:
        return None
    target = stream if stream is not None else sys.stderr
    tqdm = _use_tqdm(style, target)
    if tqdm is not None:
        return _TqdmLimit(tqdm, desc, target)
    return LimitProgress(desc, stream=stream)


def close_progress(progress):
    """``progress.close()`` when there is a progress callback."""
    close = getattr(progress, "close", None)
    if close is not None:
        close()
