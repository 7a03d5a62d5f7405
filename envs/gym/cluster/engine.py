"""``EngineClusterEnv``: ``dlsched/Cluster-v0`` with its slots simulated in the contention
engine (:class:`~envs.sim.elastic.engine_slots.ContentionSlotSimulator`) instead of the
measured table; built by :func:`envs.gym.factory.make_env` for ``speed="contention"``.

:class:`ClusterEnv`'s only hook is ``_new_sim``, so its default path is unchanged; the
subclass also logs the env's placements for the engine (the env is the allocator).
"""

from __future__ import annotations

from typing import Any

from envs.gym.cluster.contract import ACTION_ROLES
from envs.gym.cluster.env import ClusterEnv
from envs.sim.elastic.engine_slots import (
    ContentionConfig,
    ContentionSlotSimulator,
    ContentionSpeed,
)
from envs.sim.elastic.simulator import SlotSimulator
from envs.sim.elastic.spec import SpeedModel
from envs.sim.elastic.workload import DL2Setting
from envs.sim.errors import ConfigError

__all__ = ["EngineClusterEnv"]


class _EnvDecisions:
    """What :class:`ContentionSlotSimulator` reads of an allocator when it uses the
    allocator's task placement: the slot's ordered ``(job_id, role, node)`` log, here the
    env's own placements (the env is the allocator)."""

    name = "env"

    def __init__(self) -> None:
        self.last_decisions: list[tuple[int, str, int]] = []

    def allocate(self, *args: Any, **kwargs: Any) -> dict[int, tuple[int, int]]:
        raise ConfigError("the env's decisions are made by its actions, not by allocate()")


class EngineClusterEnv(ClusterEnv):
    """:class:`ClusterEnv` whose slots are simulated in the contention engine
    (:class:`~envs.sim.elastic.engine_slots.ContentionSlotSimulator`, the ``contention``
    speed mode of the elastic world) instead of the measured table.

    Same observation, actions, masks, rewards and seeding as :class:`ClusterEnv`; only the
    epochs a job trains in a slot differ.  Extra keyword arguments: ``contention`` (a
    :class:`~envs.sim.elastic.engine_slots.ContentionConfig`; default its defaults: fair-share
    NICs, SRSF engine order, 50 merged steps per slot, exact slot reuse) and ``placer``:

    * ``None`` (default): the engine places every worker and PS exactly on the node the env
      put it (the env's placement rule, ``placement=``); the env logs its placements as the
      simulator's ``last_decisions`` (``allocator_for_unused`` is not supported then: its
      tasks would have no log);
    * a core placement token (``"lwf1"``, ``"ff"``, ``"ls"``, ...): only the per-job
      ``(workers, ps)`` counts of the env's decisions are used; the core placer chooses the
      workers' devices in the engine (PS ``k`` next to worker ``k mod W``).

    ``speed`` (what the env's jobs and heuristics plan with) defaults to the contention
    model's uncontended speed (:class:`ContentionSpeed` of ``contention``).
    """

    def __init__(
        self,
        setting: str | DL2Setting = "small",
        *,
        contention: ContentionConfig | None = None,
        placer: str | None = None,
        speed: SpeedModel | None = None,
        **kwargs: Any,
    ) -> None:
        self.contention = contention if contention is not None else ContentionConfig()
        if not isinstance(self.contention, ContentionConfig):
            raise ConfigError(f"contention must be a ContentionConfig, got {contention!r}")
        if placer is not None:
            from envs.sim.stacks import make_stack

            make_stack(f"{self.contention.order}:{placer}_{self.contention.comm}")
        elif kwargs.get("allocator_for_unused") is not None:
            raise ConfigError(
                "allocator_for_unused needs a core placer (placer=...) in the contention "
                "mode: the engine reads the env's own placements, and the backlog "
                "allocator's tasks have none"
            )
        self.placer_name = placer
        super().__init__(
            setting,
            speed=ContentionSpeed(self.contention) if speed is None else speed,
            **kwargs,
        )
        self._decisions = _EnvDecisions()

    def _new_sim(self) -> SlotSimulator:
        return ContentionSlotSimulator(
            self.cluster_spec,
            self.jobs,
            self._decisions if self.placer_name is None else None,
            self.contention,
            placer=self.placer_name,
            speed=self.speed if isinstance(self.speed, ContentionSpeed) else None,
            scaling_overhead_s=self.scaling_overhead_s,
            max_slots=self.max_slots + 1,
            placement=self.placement,
        )

    def _apply(self, a: int) -> bool:
        if self.placer_name is None:
            # log the node the placement rule will choose (SlotCluster.take follows
            # find_node's rule) for the engine's task placement
            j = a // 3
            kind = a - 3 * j
            cpu, gpu = self._rows[j].acts[kind]
            node = self._cluster.find_node(cpu, gpu)  # type: ignore[union-attr]
            if node is not None:
                job_id = self._window[j].spec.job_id
                self._decisions.last_decisions.append((job_id, ACTION_ROLES[kind], node))
        return super()._apply(a)

    def _open_next_slot(self) -> int:
        self._decisions.last_decisions = []
        return super()._open_next_slot()
