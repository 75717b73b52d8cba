"""The one pool helper: results as they finish, and an early stop that cancels the jobs not started
and kills the running ones instead of waiting for the rest of the work."""

from __future__ import annotations

import os
import signal
import time

import pytest

from imagenet_shards.pipeline.parallel import run_jobs


def _job(i: int) -> tuple[int, int, int]:
    """(i, worker pid, how the worker treats SIGINT); every job but the first sleeps for a minute."""
    if i:
        time.sleep(60)
    return i, os.getpid(), int(signal.getsignal(signal.SIGINT) == signal.SIG_DFL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.timeout(30)
def test_results_in_completion_order_then_an_early_stop_kills_the_running_jobs():
    jobs = run_jobs(_job, [(i,) for i in range(6)], workers=2)
    _, (i, pid, default_sigint) = next(jobs)
    assert i == 0 and pid != os.getpid() and default_sigint == 1  # SIGINT ends a worker quietly
    jobs.close()  # the caller stops reading: the other worker is mid-job, four jobs are queued
    assert not _alive(pid)


def test_one_worker_runs_the_jobs_here_in_order():
    assert [r[1][:2] for r in run_jobs(_job, [(0,)], workers=1)] == [(0, os.getpid())]
