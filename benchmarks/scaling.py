"""The explicit limit at the scale of gradient descent: time, threads and memory.

Every figure is measured in this run, each beside its reference:

* ``--part scaling``: time of the user-facing ``ntp_svm`` (method ``auto``) to a
  certified relative duality gap and violation of 1e-8 on NTP-separable data
  with tied supports and no exchangeable tokens
  (:func:`skntp.datasets.make_ntp_svm_data`, ``d = 256``), versus the number of
  contexts ``m`` (``V = 500``) and the vocabulary ``V`` (``m = 10 000``), with
  fitted exponents; beside it the accelerated dual method ``"accelerated-dual"`` on the
  same programs (a time limit gives a lower bound on the speed-up) and, on
  one-hot supports (``|S_j| = 1``, the Crammer-Singer SVM without bias),
  ``LinearSVC(multi_class="crammer_singer", C=1e6, tol=1e-8)``.  A torch row
  times ``method="accelerated-dual"`` on ``--device`` (the array-layer method, which is
  the one that runs on a GPU).  A plot is written with ``--plot``.
* ``--part threads``: the NTP-SVM ``m = 150, d = 160, V = 60`` and the one-hot
  Crammer-Singer SVM ``m = 2000, d = 64, V = 32`` (against LinearSVC), and 200
  GD steps of the decoder on small data, each with the default BLAS threads
  and with one thread, on a quiet machine and next to a busy process (two
  threads spinning on matrix products).
* ``--part memory``: peak resident memory of ``finite_component`` with sparse
  next-token probabilities at ``m = V = 20 000`` and of
  ``NTPDecoderClassifier(max_iter=1).fit`` (default parameters, limits
  included) at ``m = 100 000, d = 256, V = 30 000``, each in a fresh process.

Usage::

    python benchmarks/scaling.py --part scaling [--plot docs/_static/scaling.png]
    python benchmarks/scaling.py --part threads
    python benchmarks/scaling.py --part memory
    python benchmarks/scaling.py --part scaling --m 1000 3000 --V 100 --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

try:  # run from a checkout without installing
    import skntp  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from maxmargin import run_with_timeout  # noqa: E402  (the benchmarks' shared runner)

from skntp.datasets import make_ntp_svm_data
from skntp.svm import ntp_svm, ntp_svm_problem, solve_max_margin

D = 256


def load():
    return os.getloadavg()[0]


# --------------------------------------------------------------------------
# scaling
# --------------------------------------------------------------------------
def _fast_worker(H, S, backend, device, queue):
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = solve_max_margin(ntp_svm_problem(H, S), method="accelerated-dual", backend=backend,
                               device=device)
    queue.put((time.perf_counter() - t, res.status, res.gap, res.max_violation, res.n_iter))


def run_fast(H, S, timeout, backend="numpy", device=None):
    """(seconds, status, gap, violation, iterations) of method 'accelerated-dual', or a timeout."""
    return run_with_timeout(_fast_worker, (H, S, backend, device), timeout,
                            (timeout, "timeout", np.nan, np.nan, 0))


def _svc_worker(H, y, queue):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        svc = LinearSVC(multi_class="crammer_singer", fit_intercept=False, C=1e6, tol=1e-8,
                        max_iter=100_000, random_state=0).fit(H, y)
    queue.put((time.perf_counter() - t, svc.coef_))


def run_svc(H, y, timeout):
    """(seconds, coef_) of LinearSVC(crammer_singer), or (timeout, None)."""
    return run_with_timeout(_svc_worker, (H, y), timeout, (timeout, None))


def time_ntp_svm(H, S):
    t = time.perf_counter()
    W, res = ntp_svm(H, S, return_result=True)
    return time.perf_counter() - t, W, res


def _auto_worker(H, S, queue):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t, _, res = time_ntp_svm(H, S)
    queue.put((t, res.method, res.n_iter, res.gap, res.max_violation, res.status))


def run_auto(H, S, timeout):
    """(seconds, method, passes, gap, violation, status) of ``ntp_svm``, or a timeout."""
    return run_with_timeout(_auto_worker, (H, S), timeout,
                            (timeout, "dcd", 0, np.nan, np.nan, "timeout"))


def exponent(xs, ts):
    """Slope of log(t) against log(x) (least squares)."""
    return float(np.polyfit(np.log(xs), np.log(ts), 1)[0])


def part_scaling(args):
    rows = []
    print(f"# scaling (load average {load():.1f} at start)", flush=True)
    grid = ([("m", m, 500) for m in args.m] + [("V", 10_000, V) for V in args.V if V != 500]
            + [("point", m, V) for m, V in args.points])
    for sweep, m, V in grid:
        data = make_ntp_svm_data(m, D, V, random_state=0)
        t, method, passes, gap, viol, status = run_auto(data.contexts, data.support,
                                                        args.auto_timeout)
        ref = run_fast(data.contexts, data.support, args.fast_timeout)
        row = dict(kind="tied", sweep=sweep, m=m, V=V, t=t, method=method, status=status,
                   passes=passes, gap=gap, viol=viol, t_fast=ref[0], fast_status=ref[1],
                   load=load())
        rows.append(row)
        print(f"tied m={m} V={V}: auto ({method}) {t:.2f}s ({status}) gap={gap:.1e} "
              f"viol={viol:.1e} | fast {ref[0]:.1f}s ({ref[1]}) | load {row['load']:.1f}",
              flush=True)
    for m, V in args.onehot:
        rng = np.random.default_rng(1)
        H = rng.standard_normal((m, D if V > 32 else 64))
        y = np.argmax(H @ rng.standard_normal((V, H.shape[1])).T, axis=1)
        S = np.eye(V, dtype=bool)[y]
        t, W, res = time_ntp_svm(H, S)
        ts, coef = run_svc(H, y, args.svc_timeout)
        cos = (np.nan if coef is None else
               float(1 - np.sum(W * coef) / np.linalg.norm(W) / np.linalg.norm(coef)))
        rows.append(dict(kind="one-hot", m=m, V=V, d=H.shape[1], t=t, method=res.method,
                         gap=res.gap, viol=res.max_violation, t_svc=ts, svc_1mcos=cos,
                         load=load()))
        print(f"one-hot m={m} d={H.shape[1]} V={V}: auto ({res.method}) {t:.2f}s | "
              f"LinearSVC {ts:.2f}s{' (timed out)' if coef is None else ''} 1-cos {cos:.1e}",
              flush=True)
    if args.device is not None or args.torch:
        device = args.device or "cpu"
        for m, V in args.torch_sizes:
            data = make_ntp_svm_data(m, D, V, random_state=0)
            ref = run_fast(data.contexts, data.support, args.fast_timeout, "torch", device)
            rows.append(dict(kind=f"torch-{device}", m=m, V=V, t=ref[0], method="accelerated-dual",
                             status=ref[1], gap=ref[2], viol=ref[3], load=load()))
            print(f"torch {device} fast m={m} V={V}: {ref[0]:.2f}s ({ref[1]}, gap "
                  f"{ref[2]:.1e}, viol {ref[3]:.1e}, {ref[4]} iterations)", flush=True)
    tied = [r for r in rows if r["kind"] == "tied"]
    # the exponents are fitted on the runs that finished
    ms = [r for r in tied if r["V"] == 500 and r["sweep"] != "point" and r["status"] != "timeout"]
    vs = [r for r in tied if r["m"] == 10_000 and r["sweep"] != "point"
          and r["status"] != "timeout"]
    print("\n| sweep | m | V | auto method | time (s) | passes | gap | violation "
          "| 'accelerated-dual' (s) | speed-up | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in tied:
        lb = ">" if r["fast_status"] == "timeout" else ""
        done = r["status"] != "timeout"
        t = f"{r['t']:.2f}" if done else f"> {r['t']:.0f} (time limit)"
        ratio = f"{lb}{r['t_fast'] / r['t']:.1f}x" if done else "–"
        print(f"| {r['sweep']} | {r['m']} | {r['V']} | {r['method']} | {t} | "
              f"{r['passes']} | {r['gap']:.1e} | {r['viol']:.1e} | {lb}{r['t_fast']:.1f} "
              f"({r['fast_status']}) | {ratio} | {r['load']:.1f} |")
    for rs, key, fixed in ((ms, "m", "V=500"), (vs, "V", "m=10000")):
        if len(rs) > 1:
            slope = exponent([r[key] for r in rs], [r["t"] for r in rs])
            print(f"exponent in {key} ({fixed}): {slope:.2f}")
    hot = [r for r in rows if r["kind"] == "one-hot"]
    if hot:
        print("\n| one-hot m | d | V | auto (s) | LinearSVC CS (s) | ratio | LinearSVC 1-cos |")
        print("|---|---|---|---|---|---|---|")
        for r in hot:
            print(f"| {r['m']} | {r['d']} | {r['V']} | {r['t']:.2f} | {r['t_svc']:.2f} | "
                  f"{r['t_svc'] / r['t']:.1f}x | {r['svc_1mcos']:.1e} |")
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=float))


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, fixed, label in ((axes[0], "m", ("V", 500), "contexts m (V = 500)"),
                                  (axes[1], "V", ("m", 10_000), "vocabulary V (m = 10 000)")):
        tied = sorted((r for r in rows if r["kind"] == "tied" and r[fixed[0]] == fixed[1]
                       and r["sweep"] != "point"), key=lambda r: r[key])
        if not tied:
            continue
        done = [r for r in tied if r["status"] != "timeout"]
        x = [r[key] for r in done]
        ax.loglog(x, [r["t"] for r in done], "o-", label="ntp_svm (auto: dcd)")
        late = [(r[key], r["t"]) for r in tied if r["status"] == "timeout"]
        if late:
            ax.loglog(*zip(*late), "o", markerfacecolor="none", color="C0",
                      label="ntp_svm: time limit (lower bound)")
        fast = [(r[key], r["t_fast"]) for r in tied]
        ax.loglog(*zip(*fast), "s--", color="C1", label="method 'accelerated-dual'")
        cut = [(r[key], r["t_fast"]) for r in tied if r["fast_status"] == "timeout"]
        if cut:  # drawn over the filled markers
            ax.loglog(*zip(*cut), "s", color="C1", markerfacecolor="white",
                      label="'accelerated-dual': time limit (lower bound)")
        if len(x) > 1:
            ax.set_title(f"slope {exponent(x, [r['t'] for r in done]):.2f}")
        ax.set_xlabel(label)
        ax.set_ylabel("seconds to gap and violation 1e-8")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("NTP-SVM, tied supports, no exchangeable tokens, d = 256 (2 cores)")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


# --------------------------------------------------------------------------
# threads
# --------------------------------------------------------------------------
BUSY = """
import numpy as np, time, threadpoolctl
a = np.random.default_rng(0).standard_normal((700, 700))
with threadpoolctl.threadpool_limits(2):
    while True:
        a = a @ a; a /= np.abs(a).max()
"""

THREAD_JOB = """
import sys, time, warnings, json
import numpy as np
from threadpoolctl import threadpool_limits
from skntp.svm import ntp_svm
from skntp import NTPDecoderClassifier
job, threads = sys.argv[1], sys.argv[2]
ctx = threadpool_limits(1) if threads == "1" else None
rng = np.random.default_rng(0)
def best(f, k):
    out = []
    for _ in range(k):
        t = time.perf_counter(); f(); out.append(time.perf_counter() - t)
    return min(out)
if job == "ntp":
    H = rng.standard_normal((150, 160))
    k = rng.integers(1, 4, 150)
    S = np.argsort(np.argsort(rng.random((150, 60)), 1), 1) < k[:, None]
    ntp_svm(H, S)
    t = best(lambda: ntp_svm(H, S), 5)
elif job == "onehot":
    rng = np.random.default_rng(1)
    H = rng.standard_normal((2000, 64))
    y = np.argmax(H @ rng.standard_normal((32, 64)).T, axis=1)
    S = np.eye(32, dtype=bool)[y]
    ntp_svm(H[:50], S[:50] | (np.arange(32) == 0))
    t = best(lambda: ntp_svm(H, S), 2)
elif job == "svc":
    from sklearn.svm import LinearSVC
    from sklearn.exceptions import ConvergenceWarning
    rng = np.random.default_rng(1)
    H = rng.standard_normal((2000, 64))
    y = np.argmax(H @ rng.standard_normal((32, 64)).T, axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t = best(lambda: LinearSVC(multi_class="crammer_singer", fit_intercept=False, C=1e6,
                                   tol=1e-8, max_iter=100_000).fit(H, y), 2)
elif job == "gd":
    X = rng.standard_normal((200, 32)); y = rng.integers(0, 20, 200)
    est = NTPDecoderClassifier(max_iter=200, compute_limits=False, record_every=10)
    est.fit(X, y)
    t = best(lambda: est.fit(X, y), 3)
print(json.dumps({"t": t}))
"""


def thread_job(job, threads):
    out = subprocess.run([sys.executable, "-c", THREAD_JOB, job, threads], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["t"]


def part_threads(args):
    print(f"# threads (load average {load():.1f} at start)", flush=True)
    jobs = ["ntp", "onehot", "svc", "gd"]
    results = {}
    for busy in (False, True):
        proc = subprocess.Popen([sys.executable, "-c", BUSY]) if busy else None
        try:
            if busy:
                time.sleep(2.0)
            for job in jobs:
                for threads in ("default", "1"):
                    results[job, busy, threads] = thread_job(job, threads)
                    print(f"{job} busy={busy} threads={threads}: "
                          f"{results[job, busy, threads]:.3f}s", flush=True)
        finally:
            if proc is not None:
                proc.kill()
                proc.wait()
    names = {"ntp": "ntp_svm m=150 d=160 V=60", "onehot": "ntp_svm one-hot m=2000 d=64 V=32",
             "svc": "LinearSVC CS m=2000 d=64 V=32 (C=1e6, tol=1e-8)",
             "gd": "decoder GD, 200 steps, m=200 d=32 V=20"}
    print("\n| job | quiet, default threads | quiet, 1 thread | busy, default threads "
          "| busy, 1 thread | busy default / 1 thread |")
    print("|---|---|---|---|---|---|")
    for job in jobs:
        r = [results[job, b, t] for b in (False, True) for t in ("default", "1")]
        print(f"| {names[job]} | {r[0]:.3f} | {r[1]:.3f} | {r[2]:.3f} | {r[3]:.3f} | "
              f"{r[2] / r[3]:.2f}x |")
    print(f"\none-hot, busy, default threads: ntp_svm {results['onehot', True, 'default']:.2f}s"
          f" vs LinearSVC {results['svc', True, 'default']:.2f}s")


# --------------------------------------------------------------------------
# memory
# --------------------------------------------------------------------------
MEMORY_JOB = """
import sys, time, resource, warnings, json
import numpy as np, scipy.sparse as sp
job = sys.argv[1]
rng = np.random.default_rng(0)
def sparse_probs(m, V, k):
    cols = np.stack([rng.choice(V, k, replace=False) for _ in range(min(m, 4096))])
    cols = cols[np.arange(m) % cols.shape[0]]
    return sp.csr_matrix((rng.dirichlet(np.ones(k), m).ravel(), cols.ravel(),
                          np.arange(0, m * k + 1, k)), shape=(m, V))
out = {}
if job == "finite":
    from skntp.svm import finite_component
    m = V = 20_000
    H = rng.standard_normal((m, 256)); P = sparse_probs(m, V, 4)
    out["before"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    t = time.perf_counter()
    W, res = finite_component(H, P, return_residual=True)
    out.update(t=time.perf_counter() - t, residual=res)
else:
    from skntp import NTPDecoderClassifier
    m, d, V = 100_000, 256, 30_000
    P = sparse_probs(m, V, 4)  # soft labels: 4 next tokens per context
    X = rng.standard_normal((m, d))
    out["before"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        est = NTPDecoderClassifier(max_iter=1).fit(X, P)
    out.update(t=time.perf_counter() - t, warnings=[str(w.message)[:300] for w in rec],
               mm_direction=est.mm_direction_ is not None,
               finite_component=est.finite_component_ is not None)
out["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(json.dumps(out))
"""


def part_memory(args):
    print(f"# memory (load average {load():.1f} at start)", flush=True)
    for job, goal, what in (("finite", 1.0, "finite_component, sparse P, m = V = 20 000, d = 256"),
                            ("decoder", 4.0, "NTPDecoderClassifier(max_iter=1).fit, "
                                             "m = 100 000, d = 256, V = 30 000")):
        proc = subprocess.run([sys.executable, "-c", MEMORY_JOB, job], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            print(f"{what}: FAILED (exit {proc.returncode})\n{proc.stderr[-2000:]}")
            continue
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{what}: {out['t']:.1f}s, peak RSS {out['peak']:.2f} GiB (data {out['before']:.2f}"
              f" GiB before), goal <= {goal} GiB: {'met' if out['peak'] <= goal else 'NOT met'}")
        for w in out.get("warnings", []):
            print(f"  warning: {w}")
        if "mm_direction" in out:
            print(f"  mm_direction_ computed: {out['mm_direction']}, finite_component_: "
                  f"{out['finite_component']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["scaling", "threads", "memory"], required=True)
    ap.add_argument("--m", type=int, nargs="*", default=[1000, 3000, 10_000, 30_000])
    ap.add_argument("--V", type=int, nargs="*", default=[100, 500, 2000])
    ap.add_argument("--onehot", type=lambda s: tuple(int(x) for x in s.split("x")), nargs="*",
                    default=[(2000, 32), (10_000, 100)], help="one-hot sizes as MxV")
    ap.add_argument("--points", type=lambda s: tuple(int(x) for x in s.split("x")), nargs="*",
                    default=[(3000, 200)], help="extra m x V points (not in the fits)")
    ap.add_argument("--auto-timeout", type=float, default=1200.0)
    ap.add_argument("--fast-timeout", type=float, default=300.0)
    ap.add_argument("--svc-timeout", type=float, default=300.0)
    ap.add_argument("--torch", action="store_true", help="torch rows on the CPU")
    ap.add_argument("--device", default=None, help="torch device for the torch rows (cuda)")
    ap.add_argument("--torch-sizes", type=lambda s: tuple(int(x) for x in s.split("x")),
                    nargs="*", default=[(1000, 100), (3000, 200)])
    ap.add_argument("--plot", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    {"scaling": part_scaling, "threads": part_threads, "memory": part_memory}[args.part](args)


if __name__ == "__main__":
    main()
