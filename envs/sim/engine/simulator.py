"""The contention-aware simulator: the engine's parts composed into one class.

:class:`Simulator` is the event kernel (:mod:`~envs.sim.engine.kernel`) with the compute,
network, admission and placement parts over one shared state
(:mod:`~envs.sim.engine.core`); the parts are mixins so that the hot loop calls plain
methods of one object.  Preemption and the reference's quirks are strategy objects the core
picks at construction.  Here: the debug invariants and the run's result.
"""

from __future__ import annotations

from typing import Any

from envs.sim.engine.admission import Admission
from envs.sim.engine.compute import Compute
from envs.sim.engine.kernel import Kernel
from envs.sim.engine.network import Network
from envs.sim.engine.placement import Placement
from envs.sim.engine.state import RUNNING
from envs.sim.errors import SimulationError
from envs.sim.results import JobRecord, SimResult


class Simulator(Kernel, Compute, Network, Admission, Placement):
    """Simulate ``workload`` on ``cluster`` under ``stack``; ``run()`` returns a SimResult.

    The simulator owns the only event loop; policies are consulted at decision points.
    A Simulator runs once; build a new one (with fresh policies) for another run.
    """

    def check_invariants(self) -> None:
        """Raise SimulationError if any model invariant fails (called after every event time
        when ``SimConfig.run.check_invariants``)."""
        cap = self.cluster.gpu_memory_mb
        for g in range(self.cluster.num_gpus):
            used = sum(j.spec.model.gpu_memory_mb for j, _ in self.residents[g])
            if used > cap + 1e-6 or abs(cap - used - self.free_mem_mb[g]) > 1e-6:
                raise SimulationError(
                    f"GPU {g} memory over-committed or inconsistent at t={self.now}"
                )
            ready = {(id(j), w) for j, w in self.residents[g] if j.wstate[w] < RUNNING}
            if ready != {(id(j), w) for j, w in self.gpu_ready[g]}:
                raise SimulationError(f"GPU {g}: ready-task list out of date at t={self.now}")
            running = sum(1 for j, w in self.residents[g] if j.wstate[w] == RUNNING)
            if running != (self.gpu_task[g] is not None) or running > 1:
                raise SimulationError(f"GPU {g} runs {running} compute tasks at t={self.now}")
        inv_b = 1.0 / self.network.b_ms_per_mb
        for s, tasks in enumerate(self.nic_tasks):
            if len(set(map(id, tasks))) != len(tasks):
                raise SimulationError(f"NIC {s} lists a task twice at t={self.now}")
            for task in tasks:
                f = 1.0 if task.factors is None else task.factors[s]
                if task.speed * f > self.network.rate(len(tasks)) * (1 + 1e-9):
                    raise SimulationError(f"NIC {s}: task of job {task.job.spec.job_id} too fast")
            load = sum(x.speed * (1.0 if x.factors is None else x.factors[s]) for x in tasks)
            if load > inv_b * (1 + 1e-9):
                raise SimulationError(f"NIC {s} carries more than its capacity at t={self.now}")

    def _result(self, wall: float) -> SimResult:
        records = [
            JobRecord.from_spec(j.spec, j.start_ms, j.finish_ms, len(j.servers)) for j in self.jobs
        ]
        extra: dict[str, Any] = {"iterations_per_step": self.chunk_max}
        self.preemption.report(self, extra)
        return SimResult.from_records(
            records,
            num_gpus=self.cluster.num_gpus,
            stack=self.stack.name,
            config=self.cfg.to_dict(),
            workload=self.workload.name,
            events=self.events,
            wall_s=wall,
            extra=extra,
        )
