"""The README's claim that sweeps run on a cluster through joblib's Dask backend:
``run_sweep`` on a local Dask cluster of two processes gives the sequential results
(needs the optional extra ``skntp[dask]``)."""

import numpy as np
import pytest

from skntp.sweeps import run_sweep, trial_seeds

distributed = pytest.importorskip("distributed")


def _fit_summary(random_state, lr):
    """A real fit of the decoder (random start, 30 GD steps): its losses and weights."""
    from skntp import NTPDecoderClassifier
    from skntp.datasets import make_ntp_data

    X, y = make_ntp_data(n_samples=200, n_contexts=8, n_features=10, n_tokens=4,
                         support_size=2, random_state=0)
    est = NTPDecoderClassifier(solver="gd", lr=lr, max_iter=30, init="random",
                               compute_limits=False, random_state=random_state).fit(X, y)
    return np.concatenate([est.history_["loss"], est.coef_.ravel()])


@pytest.mark.slow
def test_run_sweep_on_a_local_dask_cluster_matches_the_sequential_run():
    import joblib

    grid = {"random_state": [0, 1], "lr": [0.1, 0.5]}
    seq = run_sweep(_fit_summary, grid)
    seeds = run_sweep(trial_seeds, {"random_state": [0, 1, 2], "n_trials": [3]})
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client, \
            joblib.parallel_config(backend="dask"):
        on_dask = run_sweep(_fit_summary, grid)
        seeds_dask = run_sweep(trial_seeds, {"random_state": [0, 1, 2], "n_trials": [3]})
        # the work ran on the cluster's worker processes
        assert len(client.scheduler_info()["workers"]) == 2
    assert [p for p, _ in on_dask] == [p for p, _ in seq]
    for (_, a), (_, b) in zip(on_dask, seq):
        np.testing.assert_array_equal(a, b)
    for (_, a), (_, b) in zip(seeds_dask, seeds):
        np.testing.assert_array_equal(a, b)
