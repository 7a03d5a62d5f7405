"""Grouper in dlsched: hyperparameter-search cojobs and flow priorities on a big switch.

A separate network model from :mod:`envs.sim.engine`: the engine serves all-reduce / PS
exchanges with a closed-form per-NIC contention rate, while Grouper's question is *which flows
go first* on every ingress and egress port. Here each port is a strict-priority queue set with
max-min fair sharing inside a queue (:mod:`.network`), fed by a policy's priority keys
(:mod:`.policies`: FS, Baraat, Sincronia, SPTF, Grouper's PDA in :mod:`.pda`), and cojobs run
in an event-driven fluid simulation (:mod:`.simulator`). Units: ms, MB, MB/ms.

Example::

    >>> from envs.sim.grouper import builtin_trace, scale_trace, simulate_cojobs
    >>> w = scale_trace(builtin_trace(), cojobs=2, divisor=20)
    >>> r = simulate_cojobs(w, "grouper")
    >>> len(r.stages), r.avg_sct_ms() > 0
    (8, True)
"""

from envs.sim.grouper.network import allocate, check_allocation, port_queues
from envs.sim.grouper.pda import PdaResult, PdaStep, pda_order, upstream_stage_weight
from envs.sim.grouper.policies import (
    POLICIES,
    CommPolicy,
    FairShare,
    Grouper,
    GrouperOffline,
    Sincronia,
    Sptf,
    SptfKey,
    StageFifo,
    make_policy,
)
from envs.sim.grouper.results import CojobJobRecord, CojobStageRecord, GrouperResult
from envs.sim.grouper.simulator import CojobSimulator, GrouperConfig, alone_scts, simulate_cojobs
from envs.sim.grouper.spec import GBPS, Cojob, CojobWorkload, PSJob
from envs.sim.grouper.state import CojobSnapshot, JobStatus, WorkloadArrays
from envs.sim.grouper.workload import (
    TRACE_MODELS,
    builtin_trace,
    generate_cojobs,
    load_cojob_trace,
    scale_trace,
    successive_halving,
)

__all__ = [
    "GBPS",
    "POLICIES",
    "TRACE_MODELS",
    "Cojob",
    "CojobJobRecord",
    "CojobSimulator",
    "CojobSnapshot",
    "CojobStageRecord",
    "CojobWorkload",
    "CommPolicy",
    "FairShare",
    "Grouper",
    "GrouperConfig",
    "GrouperOffline",
    "GrouperResult",
    "JobStatus",
    "PSJob",
    "PdaResult",
    "PdaStep",
    "Sincronia",
    "Sptf",
    "SptfKey",
    "StageFifo",
    "WorkloadArrays",
    "allocate",
    "alone_scts",
    "builtin_trace",
    "check_allocation",
    "generate_cojobs",
    "load_cojob_trace",
    "make_policy",
    "pda_order",
    "port_queues",
    "scale_trace",
    "simulate_cojobs",
    "successive_halving",
    "upstream_stage_weight",
]
