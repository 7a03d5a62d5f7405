"""The elastic slot loop's heartbeat and wall-clock budget (:class:`Heartbeat`), as the
contention engine's ``progress_s`` / ``max_wall_s``: a progress line on stderr, a clear
:class:`SimulationError` past the budget, the clock read every few slots, and nothing
simulated changed."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from envs.sim.elastic import simulator as simulator_module
from envs.sim.elastic.allocators import make_allocator
from envs.sim.elastic.engine_slots import ContentionSlotSimulator
from envs.sim.elastic.simulator import Heartbeat, SlotSimulator
from envs.sim.elastic.spec import ElasticCluster
from envs.sim.elastic.speed import MeasuredSpeed
from envs.sim.elastic.workload import DL2_SMALL
from envs.sim.errors import ConfigError, SimulationError

LINE = re.compile(r"^dl2 under drf: \d+ s, slot \d+, \d+ of 20 jobs finished$")


def _jobs() -> tuple:
    return tuple(DL2_SMALL.workload(0)[:20])


def _sim(heartbeat: Heartbeat | None = None, allocator: str = "drf") -> SlotSimulator:
    return SlotSimulator(
        ElasticCluster(), _jobs(), make_allocator(allocator), MeasuredSpeed(), heartbeat=heartbeat
    )


def test_a_tiny_budget_stops_the_run_with_a_clear_error() -> None:
    beat = Heartbeat("dl2 under drf", max_wall_s=1e-6)
    with pytest.raises(SimulationError) as info:
        _sim(beat).run()
    msg = str(info.value)
    assert re.fullmatch(r"wall-clock budget of 1e-06 s spent at slot 0, 0 of 20 jobs finished", msg)


def test_a_tiny_progress_period_prints_progress_lines(capfd: pytest.CaptureFixture[str]) -> None:
    res = _sim(Heartbeat("dl2 under drf", progress_s=1e-9)).run()
    lines = [ln for ln in capfd.readouterr().err.splitlines() if "jobs finished" in ln]
    assert lines, "no progress line"
    assert all(LINE.match(ln) for ln in lines), lines
    # the clock is read every few slots, not after every one: fewer lines than slots
    assert len(lines) <= res.num_slots


def test_the_heartbeat_changes_nothing_simulated(capfd: pytest.CaptureFixture[str]) -> None:
    for allocator in ("drf", "srtf", "optimus"):
        plain = _sim(None, allocator).run()
        beat = Heartbeat("x", max_wall_s=1e9, progress_s=1e-9)
        watched = _sim(beat, allocator).run()
        assert watched == plain
    capfd.readouterr()


def test_the_clock_is_read_every_few_slots_while_slots_are_cheap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = [0]

    def fast_clock() -> float:  # 0.1 ms of wall time per read: cheap slots
        reads[0] += 1
        return reads[0] * 1e-4

    monkeypatch.setattr(simulator_module, "time", SimpleNamespace(perf_counter=fast_clock))
    res = _sim(Heartbeat("x", max_wall_s=1e9)).run()
    assert res.num_slots > 100
    assert reads[0] < res.num_slots / 4  # at most one read per 16 slots once warmed up


def test_slow_slots_are_checked_after_every_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]

    def clock() -> float:  # every read is a second later: slow slots
        now[0] += 1.0
        return now[0]

    monkeypatch.setattr(simulator_module, "time", SimpleNamespace(perf_counter=clock))
    beat = Heartbeat("x", max_wall_s=5.5)
    with pytest.raises(SimulationError, match=r"wall-clock budget of 5\.5 s spent at slot 5,"):
        _sim(beat).run()
    assert beat.stride == 1


def test_restart_on_reset_and_a_second_run() -> None:
    beat = Heartbeat("x", max_wall_s=60.0)
    sim = _sim(beat)
    first = sim.run()
    assert sim.run() == first  # run() resets, the clock restarts
    assert beat.left >= 1


def test_the_contention_slot_simulator_keeps_a_heartbeat_too() -> None:
    sim = ContentionSlotSimulator(ElasticCluster(), _jobs(), make_allocator("drf"))
    sim.heartbeat = Heartbeat("x", max_wall_s=1e-6)
    with pytest.raises(SimulationError, match="wall-clock budget of 1e-06 s spent at slot 0"):
        sim.run()


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"max_wall_s": 0.0}, "max_wall_s"),
        ({"max_wall_s": float("nan")}, "max_wall_s"),
        ({"progress_s": -1.0}, "progress_s"),
    ],
)
def test_bad_numbers_are_config_errors(kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        Heartbeat("x", **kwargs)


def test_of_gives_none_without_budget_or_heartbeat() -> None:
    assert Heartbeat.of("x", None, None) is None
    beat = Heartbeat.of("x", 3.0, None)
    assert beat is not None and beat.max_wall_s == 3.0 and beat.progress_s is None
