"""The engine's hook: a PS job's exchange shortened to the part compute does not hide.

The contention engine runs an iteration as compute (forward, backward) followed by one
exchange task of ``comm_mb`` MB at the rate contention allows.  Under TicTac's model the
transfers overlap the forward pass instead, and the iteration takes ``T`` (the slowest
worker's list schedule) rather than ``C + N``.  When an exchange starts at rate ``v`` MB/ms
we evaluate the iteration model at that bandwidth (``N = comm_mb / v``) and keep only its
exposed share: the task moves ``comm_mb * (T - C) / N`` MB, so that at a constant rate the
iteration lasts exactly ``C + (T - C) = T``.

What this approximates: contention is felt only by the exposed part (the hidden part of the
transfer, which in reality runs during the forward pass, does not load the NIC in the
engine), and the order's effect is evaluated at the rate the exchange starts with.  Both are
exact for a job alone on its NICs.  All-reduce jobs and one-server PS jobs are unchanged.
"""

from __future__ import annotations

import numpy as np

from envs.sim.errors import ConfigError
from envs.sim.spec import CommArch, JobSpec, ModelProfile, NetworkSpec, Workload
from envs.sim.tictac.graph import OpGraphError, available_graphs, graph_for
from envs.sim.tictac.model import IterationModel, OrderPolicy

#: values of ``SimConfig.model.ps_iteration``: the engine's own sequential model, or TicTac's
SEQUENTIAL = "sequential"
PS_ITERATION_MODELS = (SEQUENTIAL, *(p.value for p in OrderPolicy))


class PSOverlap:
    """Per-iteration exposed share of PS exchanges under one transfer-order policy.

    Randomness (random orders, TIC's tie breaks) comes from a Generator seeded by ``seed``
    and owned here, so the run's placement draws are untouched.  TAC's time oracle for
    transfers is the job's uncontended rate (``b`` ms/MB on its busiest NIC), measured once
    per placement as the paper does offline.
    """

    def __init__(
        self,
        policy: OrderPolicy | str,
        network: NetworkSpec,
        seed: int = 0,
        *,
        upstream_tic_ties: bool = False,
    ) -> None:
        self.policy = OrderPolicy.parse(policy)
        self.b = network.b_ms_per_mb
        self.rng = np.random.default_rng([seed, 0x71C7AC])
        self.upstream_tic_ties = upstream_tic_ties
        self.models: dict[ModelProfile, IterationModel] = {}
        self.evaluations = 0

    def check(self, workload: Workload) -> None:
        """Every PS job's model must have an op graph (a clear error names those that don't)."""
        missing = sorted(
            {j.model.name for j in workload.jobs if j.comm is CommArch.PS} - set(available_graphs())
        )
        if missing:
            raise ConfigError(
                f"ps_iteration={self.policy.value!r} needs an op graph for every PS job's "
                f"model; none for {missing} (shipped: {available_graphs()})"
            )

    def model(self, spec: JobSpec) -> IterationModel:
        m = self.models.get(spec.model)
        if m is None:
            try:
                graph = graph_for(spec.model)
            except OpGraphError as e:
                raise ConfigError(f"job {spec.job_id}: {e}") from None
            m = IterationModel(
                graph, self.policy, self.rng, upstream_tic_ties=self.upstream_tic_ties
            )
            self.models[spec.model] = m
        return m

    def fraction(self, spec: JobSpec, comm_mb: float, speed: float) -> float:
        """Share of this iteration's exchange (``comm_mb`` MB at ``speed`` MB/ms) left
        exposed after overlap with the workers' compute, in (0, 1]."""
        model = self.model(spec)
        mb = spec.model.model_size_mb
        ms_per_mb = comm_mb / speed / mb
        oracle = comm_mb * self.b / mb  # the uncontended rate, as TAC's offline oracle
        self.evaluations += 1
        return model.iteration(ms_per_mb, workers=spec.num_gpus, oracle=oracle).exposed_fraction


def make_overlap(
    ps_iteration: str, network: NetworkSpec, workload: Workload, seed: int, upstream_ties: bool
) -> PSOverlap | None:
    """The engine's overlap hook for ``SimConfig.model.ps_iteration`` (None: sequential model)."""
    if ps_iteration == SEQUENTIAL:
        return None
    hook = PSOverlap(ps_iteration, network, seed, upstream_tic_ties=upstream_ties)
    hook.check(workload)
    return hook
