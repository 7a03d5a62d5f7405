"""Immutable input specifications of the simulator.

Units everywhere in ``envs.sim``: time in **milliseconds** (ms), sizes in **megabytes**
(MB = 10^6 bytes), network cost ``b`` and penalty ``eta`` in **ms per MB**.  These are the
units of the Ada-SRSF paper's Table III and of its reference simulator, which keeps the
numbers that tests compare readable.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from envs.sim.errors import ConfigError, WorkloadError, check_number


class CommArch(enum.Enum):
    """How a job synchronises gradients."""

    ALLREDUCE = "allreduce"
    PS = "ps"


@dataclass(frozen=True)
class NetworkSpec:
    """Inter-server network model (paper Eq. 5 with contention).

    ``k`` all-reduce tasks sharing a NIC each move ``M`` MB in ``a + k*b*M + (k-1)*eta*M`` ms,
    i.e. each progresses at ``1 / (k*b + (k-1)*eta)`` MB/ms while ``k`` is constant; the rate is
    recomputed whenever ``k`` changes.  ``a`` (ms) is a fixed latency added once to every task
    after its bytes are through.  Communication inside one server is free.

    Defaults are the reference simulator's constants (b = 0.856 ms/MB, eta = 0.235 ms/MB, a = 0);
    the paper's 10 GbE fit is a = 0.669 ms, b = 0.853 ms/MB.
    """

    a_ms: float = 0.0
    b_ms_per_mb: float = 0.856
    eta_ms_per_mb: float = 0.235

    def __post_init__(self) -> None:
        check_number(self.b_ms_per_mb, "network.b_ms_per_mb", gt=0)
        check_number(self.eta_ms_per_mb, "network.eta_ms_per_mb", ge=0)
        check_number(self.a_ms, "network.a_ms", ge=0)

    def rate(self, k: int) -> float:
        """Per-task transfer rate in MB/ms when ``k >= 1`` tasks share a NIC."""
        return 1.0 / (k * self.b_ms_per_mb + (k - 1) * self.eta_ms_per_mb)


@dataclass(frozen=True)
class ClusterSpec:
    """A homogeneous GPU cluster: ``num_servers`` x ``gpus_per_server`` GPUs.

    ``gpu_memory_mb`` limits how many workers may time-share one GPU (Ada-SRSF model).
    CPU cores and host memory are carried for the elastic (DL²) layer.
    """

    num_servers: int = 16
    gpus_per_server: int = 4
    gpu_memory_mb: float = 32768.0
    cpu_cores_per_server: int = 32
    host_memory_gb_per_server: float = 256.0
    network: NetworkSpec = field(default_factory=NetworkSpec)

    def __post_init__(self) -> None:
        if self.num_servers < 1 or self.gpus_per_server < 1:
            raise ConfigError(
                f"cluster needs >= 1 server and >= 1 GPU per server, got "
                f"{self.num_servers} x {self.gpus_per_server}"
            )
        check_number(self.gpu_memory_mb, "cluster.gpu_memory_mb", gt=0)
        check_number(self.cpu_cores_per_server, "cluster.cpu_cores_per_server", ge=0)
        check_number(self.host_memory_gb_per_server, "cluster.host_memory_gb_per_server", ge=0)

    @property
    def num_gpus(self) -> int:
        return self.num_servers * self.gpus_per_server

    def server_of(self, gpu: int) -> int:
        """Server index hosting global GPU index ``gpu`` (GPUs are numbered server-major)."""
        return gpu // self.gpus_per_server


@dataclass(frozen=True)
class ModelProfile:
    """A DNN's per-iteration cost on one worker GPU (Ada-SRSF Table III)."""

    name: str
    model_size_mb: float
    gpu_memory_mb: float
    batch_size: int
    forward_ms: float
    backward_ms: float

    def __post_init__(self) -> None:
        for attr in ("model_size_mb", "gpu_memory_mb", "forward_ms", "backward_ms"):
            check_number(
                getattr(self, attr), f"model {self.name!r}: {attr}", gt=0, error=WorkloadError
            )
        if self.batch_size < 1:
            raise WorkloadError(f"model {self.name!r}: batch_size must be >= 1")

    @property
    def compute_ms(self) -> float:
        """Forward plus backward time of one iteration on one worker, ms."""
        return self.forward_ms + self.backward_ms

    def with_batch(self, per_worker_batch: float) -> ModelProfile:
        """The same model at another per-worker batch size: forward and backward time scale
        linearly with the batch (DL² §3.1 keeps a job's global batch fixed, so a job with
        ``W`` workers runs ``global_batch / W`` samples per worker and iteration)."""
        check_number(per_worker_batch, f"model {self.name!r}: batch", gt=0, error=WorkloadError)
        f = per_worker_batch / self.batch_size
        return ModelProfile(
            self.name,
            self.model_size_mb,
            self.gpu_memory_mb,
            max(1, round(per_worker_batch)),
            self.forward_ms * f,
            self.backward_ms * f,
        )


@dataclass(frozen=True)
class JobSpec:
    """One data-parallel training job: ``num_gpus`` workers, one per GPU.

    ``iterations`` training iterations, each forward -> backward on every worker, then a
    barrier and the gradient exchange: with ``CommArch.ALLREDUCE`` one all-reduce of
    ``model.model_size_mb`` across the job's servers; with ``CommArch.PS`` every worker pushes
    ``M / num_ps`` to each of ``num_ps`` parameter servers and pulls as much back (see
    :mod:`envs.sim.engine` for where PSs sit and what crosses each NIC).
    ``submit_ms`` is the arrival time.
    """

    job_id: int
    submit_ms: float
    model: ModelProfile
    iterations: int
    num_gpus: int
    comm: CommArch = CommArch.ALLREDUCE
    name: str = ""
    num_ps: int = 0  # parameter servers (CommArch.PS only)

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise WorkloadError(
                f"job {self.job_id}: iterations must be >= 1, got {self.iterations}"
            )
        if self.num_gpus < 1:
            raise WorkloadError(f"job {self.job_id}: num_gpus must be >= 1, got {self.num_gpus}")
        check_number(self.submit_ms, f"job {self.job_id}: submit_ms", ge=0, error=WorkloadError)
        if self.comm is CommArch.PS and self.num_ps < 1:
            raise WorkloadError(f"job {self.job_id}: a parameter-server job needs num_ps >= 1")
        if self.comm is CommArch.ALLREDUCE and self.num_ps != 0:
            raise WorkloadError(
                f"job {self.job_id}: num_ps={self.num_ps} given for an all-reduce job"
            )

    @property
    def total_compute_ms(self) -> float:
        """GPU compute service of the whole job: workers x iterations x (fw + bw), GPU-ms."""
        return self.num_gpus * self.iterations * self.model.compute_ms


@dataclass(frozen=True)
class Workload:
    """An ordered, validated collection of jobs with a record of where it came from."""

    jobs: tuple[JobSpec, ...]
    name: str = "workload"
    source: str = ""

    def __post_init__(self) -> None:
        if not self.jobs:
            raise WorkloadError(
                f"workload {self.name!r} ({self.source or 'in memory'}) has no jobs"
            )
        seen: set[int] = set()
        for job in self.jobs:
            if job.job_id in seen:
                raise WorkloadError(f"workload {self.name!r}: duplicate job_id {job.job_id}")
            seen.add(job.job_id)

    def __len__(self) -> int:
        return len(self.jobs)

    def check_fits(self, cluster: ClusterSpec) -> None:
        """Raise :class:`WorkloadError` for any job that can never run on ``cluster``."""
        for job in self.jobs:
            if job.num_gpus > cluster.num_gpus:
                raise WorkloadError(
                    f"workload {self.name!r}: job {job.job_id} asks for {job.num_gpus} GPUs "
                    f"but the cluster has {cluster.num_gpus}"
                )
            if job.model.gpu_memory_mb > cluster.gpu_memory_mb:
                raise WorkloadError(
                    f"workload {self.name!r}: job {job.job_id} needs "
                    f"{job.model.gpu_memory_mb} MB per GPU but a GPU has {cluster.gpu_memory_mb} MB"
                )
