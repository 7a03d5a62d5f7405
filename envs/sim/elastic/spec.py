"""Specifications of DL²'s elastic world (DL² §2-3; reference data in ``envs/sim/data/dl2``)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Protocol

from envs.sim.errors import ConfigError, WorkloadError, check_number


@dataclass(frozen=True)
class JobType:
    """One of DL²'s job types (``job_types.csv``).

    Demands are in node *slots*: each node has ``ElasticCluster.cpu_slots`` CPU slots and
    ``gpu_slots`` GPU slots (8 and 8 in DL²; a GPU worker takes 4 GPU slots).
    """

    index: int  # 0-based position in the type table (the observation's one-hot index)
    model: str
    worker_cpu: int
    worker_gpu: int
    ps_cpu: int
    ps_gpu: int
    epoch_fraction: float  # epochs = epoch_fraction x max_epochs
    iterations_per_epoch: int
    local_comp_time_s: float  # per iteration, analytical speed model
    model_size_mb: float
    inter_bw_mb_s: float
    intra_bw_mb_s: float

    def __post_init__(self) -> None:
        who = f"job type {self.model!r}"
        for name in ("worker_cpu", "worker_gpu", "ps_cpu", "ps_gpu"):
            check_number(getattr(self, name), f"{who}: {name}", ge=0, error=WorkloadError)
        for name in ("epoch_fraction", "local_comp_time_s", "model_size_mb"):
            check_number(getattr(self, name), f"{who}: {name}", gt=0, error=WorkloadError)
        for name in ("inter_bw_mb_s", "intra_bw_mb_s"):
            check_number(getattr(self, name), f"{who}: {name}", gt=0, error=WorkloadError)
        if self.iterations_per_epoch < 1:
            raise WorkloadError(f"{who}: epochs and iterations must be > 0")


def _positive_float(x: object) -> bool:
    """A finite float or int > 0 that ``float()`` holds (what ``check_number(x, gt=0)``
    accepts), decided without a call for the usual values; anything else: ``False`` (the
    caller runs ``check_number``)."""
    return (type(x) is float or type(x) is int) and 0 < x <= _FLOAT_MAX


_FLOAT_MAX = sys.float_info.max


@dataclass(frozen=True)
class ElasticJob:
    """A job of the elastic world.

    ``num_epochs`` is what the user declares (what schedulers and the observation see);
    ``real_num_epochs`` is the work that actually completes the job (DL² §6.4 estimation
    error).  ``speed_factor`` scales its training speed (DL² §6.4 speed variation).
    """

    job_id: int
    type: JobType
    arrival_slot: int
    num_epochs: float
    real_num_epochs: float
    max_workers: int = 16
    max_ps: int = 16
    speed_factor: float = 1.0

    def __post_init__(self) -> None:
        if self.arrival_slot < 0:
            raise WorkloadError(f"job {self.job_id}: arrival_slot must be >= 0")
        ne, real, sf = self.num_epochs, self.real_num_epochs, self.speed_factor
        if not (
            _positive_float(ne) and _positive_float(real) and _positive_float(sf)
        ):  # not the usual floats: check_number decides (and names the field)
            who = f"job {self.job_id}"
            for name in ("num_epochs", "real_num_epochs", "speed_factor"):
                check_number(getattr(self, name), f"{who}: {name}", gt=0, error=WorkloadError)
        if self.max_workers < 1 or self.max_ps < 0:
            raise WorkloadError(f"{who}: needs max_workers >= 1 and max_ps >= 0")


@dataclass(frozen=True)
class ElasticCluster:
    """``num_nodes`` homogeneous nodes with ``cpu_slots`` and ``gpu_slots`` each (DL²: 8, 8;
    500 nodes in its large setting, 48 in its small one)."""

    num_nodes: int = 48
    cpu_slots: int = 8
    gpu_slots: int = 8
    slot_s: float = 1200.0  # length of a scheduling time slot, seconds

    def __post_init__(self) -> None:
        if self.num_nodes < 1 or self.cpu_slots < 1 or self.gpu_slots < 0:
            raise ConfigError(
                f"elastic cluster needs >= 1 node with >= 1 CPU slot, got {self.num_nodes} "
                f"nodes x ({self.cpu_slots} CPU, {self.gpu_slots} GPU)"
            )
        check_number(self.slot_s, "slot_s", gt=0)


class SpeedModel(Protocol):
    """Training speed of a job as a function of its allocation."""

    name: str

    def speed(self, job_type: JobType, num_ps: int, num_workers: int) -> float:
        """Total training speed in iterations (batches) per second, summed over workers;
        0 when the job has no worker (or no PS)."""
        ...
