"""The capacity-aware lower bound on the mean JCT (envs/sim/capacity_bound.py): hand-computed
optima, the convex envelope and bad input (the worlds' schedules against it:
tests/evaluation/test_bound_capacity.py, tests/sim/elastic/test_bounds.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from envs.sim import ConfigError
from envs.sim.capacity_bound import REL_STEP, capacity_bound, intervals, lower_envelope

#: the slack of counting an interval's progress at its start: the default shortest interval
#: is a twentieth of the shortest job, so a job's centre of mass is at most that much early
SLACK = 1 / 20


def test_one_job_finishes_at_its_release_plus_its_duration() -> None:
    out = capacity_bound([3.0], [10.0], [2.0], np.array([[1.0]]), [4.0])
    assert out.completion == pytest.approx([8.0])
    assert out.mean_response == pytest.approx(5.0)


def test_two_jobs_on_one_machine_shortest_first() -> None:
    # capacity 1, both need all of it: the preemptive optimum runs the short job first,
    # completions 1 and 3 (sum 4); the mean-busy-time programme gives the same
    out = capacity_bound([0.0, 0.0], [2.0, 1.0], [1.0, 1.0], np.ones((2, 1)), [1.0])
    # the long job's progress is counted at its intervals' starts: at most SLACK x the
    # shortest job (1) early
    assert 4.0 - SLACK - 1e-9 <= out.completion.sum() <= 4.0 + 1e-9
    assert out.completion[1] == pytest.approx(1.0)  # the short job first, at its own floor
    # a finer grid closes the gap, down to the intervals' growth (REL_STEP of the time, 3 here)
    fine = capacity_bound([0.0, 0.0], [2.0, 1.0], [1.0, 1.0], np.ones((2, 1)), [1.0], min_step=1e-3)
    assert 4.0 - REL_STEP * 3.0 <= fine.completion.sum() <= 4.0 + 1e-9
    assert fine.completion.sum() > out.completion.sum()


def test_the_capacity_binds_only_when_the_jobs_do_not_fit_side_by_side() -> None:
    # two jobs of 4 GPU-units at rate 4 (1 time unit alone) on 8 GPUs: side by side, no wait
    both = capacity_bound([0.0, 0.0], [4.0, 4.0], [4.0, 4.0], np.ones((2, 1)), [8.0])
    assert both.mean_response == pytest.approx(1.0)
    # on 4 GPUs one waits: completions 1 and 2 at best (mean 1.5), less the start slack
    one = capacity_bound([0.0, 0.0], [4.0, 4.0], [4.0, 4.0], np.ones((2, 1)), [4.0])
    assert 1.5 - SLACK <= one.mean_response <= 1.5 + 1e-9
    # a job asking for more than the cluster runs at the cluster's rate: 8 units on 4 GPUs
    big = capacity_bound([0.0], [8.0], [16.0], np.ones((1, 1)), [4.0])
    assert big.completion == pytest.approx([2.0])


def test_the_floor_and_the_earliest_start_hold() -> None:
    out = capacity_bound(
        [0.0, 1.0], [1.0, 1.0], [1.0, 1.0], np.ones((2, 1)), [10.0], floor=[5.0, 0.5]
    )
    # job 0 at its floor 5; job 1's floor 0.5 is below its own duration 1, which holds instead
    assert out.completion == pytest.approx([5.0, 2.0])
    late = capacity_bound([0.0], [1.0], [1.0], np.ones((1, 1)), [1.0], earliest=[4.0])
    assert late.completion == pytest.approx([5.0]) and late.mean_response == pytest.approx(5.0)


def test_lower_envelope_by_hand() -> None:
    # (2, 4) lies above the chord from (1, 1) to (3, 4.5): the envelope is two pieces
    pieces = lower_envelope([(1.0, 1.0), (2.0, 4.0), (3.0, 4.5)])
    assert np.asarray(pieces) == pytest.approx(np.array([[1.0, 0.0], [1.75, -0.75]]))
    assert max(a * 2.0 + b for a, b in pieces) == pytest.approx(2.75)  # below the point (2, 4)
    # a higher holding at the same rate never counts; a linear holding is one piece
    assert np.asarray(lower_envelope([(1.0, 2.0), (1.0, 5.0), (2.0, 4.0)])) == pytest.approx(
        np.array([[2.0, 0.0]])
    )


def test_a_concave_speedup_holds_more_per_unit_of_progress_when_fast() -> None:
    # jobs of 1 and 3 units, each 1 unit per time on 1 GPU or 1.5 on 2 GPUs (concave); 2 GPUs
    # in all.  The best schedules have completions summing to 10/3 (the short one fast, then
    # the long one fast: 2/3 + 8/3; or side by side at rate 1, then the long one fast).  The
    # envelope (1 GPU per unit up to rate 1, then 2 per unit) charges the fast rate what it
    # costs; holding 1 GPU per unit at any rate lets the short job run fast beside the long
    # one, and gives a lower (weaker) bound.
    env = lower_envelope([(1.0, 1.0), (1.5, 2.0)])
    assert np.asarray(env) == pytest.approx(np.array([[1.0, 0.0], [2.0, -1.0]]))
    args = ([0.0, 0.0], [1.0, 3.0], [1.5, 1.5])
    out = capacity_bound(*args, [[env], [env]], [2.0])
    linear = capacity_bound(*args, np.ones((2, 1)), [2.0])
    assert linear.completion.sum() < out.completion.sum() <= 10 / 3 + 1e-9


def test_intervals_start_at_every_release_and_grow() -> None:
    pts = intervals(np.array([0.0, 2.5, 7.0]), 1000.0, 1.0)
    assert {0.0, 2.5, 7.0} <= set(pts.tolist())
    assert pts[-1] >= 1000.0
    steps = np.diff(pts)
    assert steps.max() <= max(1.0, 0.01 * 1000.0) + 1e-9


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"work": [math.nan]}, r"work\[0\] is nan"),
        ({"work": [1.0, 2.0]}, "work: expected 1"),
        ({"rate_cap": [0.0]}, r"rate_cap\[0\] is 0.0: must be > 0"),
        ({"capacity": [math.inf]}, r"capacity\[0\] is inf"),
        ({"capacity": [-1.0]}, r"capacity\[0\] is -1.0"),
        ({"release": [math.inf]}, r"release\[0\] is inf"),
        ({"use": [[[(1.0, 0.5)]]]}, r"job 0, resource 0: piece \(1.0, 0.5\)"),
        ({"use": np.ones((2, 1))}, "use: expected 1 rows"),
        ({"min_step": 0.0}, "min_step must be"),
    ],
)
def test_bad_input_is_one_clear_error(kwargs: dict, match: str) -> None:
    args = {
        "release": [0.0],
        "work": [1.0],
        "rate_cap": [1.0],
        "use": np.ones((1, 1)),
        "capacity": [1.0],
    }
    args.update(kwargs)
    with pytest.raises(ConfigError, match=match):
        capacity_bound(**args)
    with pytest.raises(ConfigError, match="no jobs"):
        capacity_bound([], [], [], np.ones((0, 1)), [1.0])
