"""Rendering of ``dlsched/Cluster-v0`` (:class:`RenderMixin`): a text table of the window rows
(``"ansi"``) or a picture of the cluster's usage (``"rgb_array"``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from envs.sim.elastic.allocators import JobState, dominant_share
from envs.sim.elastic.simulator import SlotSimulator
from envs.sim.elastic.spec import ElasticJob

__all__ = ["CELL_PX", "RenderMixin"]

#: Pixels per cell side in the ``rgb_array`` picture.
CELL_PX = 4

_FREE = np.array([60, 60, 60], dtype=np.uint8)
_CPU = np.array([66, 133, 244], dtype=np.uint8)
_GPU = np.array([52, 168, 83], dtype=np.uint8)
_GAP = np.array([0, 0, 0], dtype=np.uint8)


class RenderMixin:
    """What ``render()`` draws for :class:`~envs.gym.cluster.env.ClusterEnv`: ``"ansi"``
    returns a text table of the window rows; ``"rgb_array"`` a uint8 image with one band of
    :data:`CELL_PX` pixels per node, ``cpu_slots`` CPU cells (used: blue), a gap, then
    ``gpu_slots`` GPU cells (used: green), free cells grey; both show the allocation built so
    far in the open slot."""

    # State of the env (ClusterEnv.__init__ and reset set it; declared for the type checker).
    J: int
    jobs: tuple[ElasticJob, ...]
    render_mode: str | None
    _slot_open: bool
    _window: list[JobState]
    _views: list[JobState]
    _alloc: dict[int, list[int]]
    _finished: int
    _invalid: int

    if TYPE_CHECKING:

        def _require_sim(self) -> SlotSimulator: ...

        def action_masks(self) -> npt.NDArray[np.bool_]: ...

    def render(self) -> str | npt.NDArray[np.uint8] | None:
        if self.render_mode == "ansi":
            return self._render_ansi()
        if self.render_mode == "rgb_array":
            return self._render_rgb()
        return None

    def _render_ansi(self) -> str:
        sim = self._require_sim()
        mask = self.action_masks()
        lines = [
            f"slot {sim.t}  open={self._slot_open}  window {len(self._window)}/{self.J}  "
            f"active {len(self._views)}  finished "
            f"{self._finished}/{len(self.jobs)}  invalid {self._invalid}",
            f"{'row':>3} {'job':>5} {'type':<12} {'stay':>5} {'remain':>7} {'dom':>6} "
            f"{'W':>3} {'PS':>3}  valid(W,PS,B)",
        ]
        for j, job in enumerate(self._window):
            w, p = self._alloc[job.job_id]
            dom = dominant_share(job, w, p, sim.cluster)
            valid = "".join("x" if mask[3 * j + k] else "." for k in range(3))
            lines.append(
                f"{j:>3} {job.job_id:>5} {job.spec.type.model:<12} {sim.t - job.arrival:>5} "
                f"{job.remaining_fraction:>7.3f} {dom:>6.3f} {w:>3} {p:>3}  {valid}"
            )
        if len(self._views) > self.J:
            lines.append(f"    + {len(self._views) - self.J} job(s) waiting beyond the window")
        return "\n".join(lines) + "\n"

    def _render_rgb(self) -> npt.NDArray[np.uint8]:
        cluster = self._require_sim().cluster
        ncpu, ngpu = cluster.cpu_capacity, cluster.gpu_capacity
        cols = ncpu + 1 + ngpu
        grid = np.empty((cluster.num_nodes, cols, 3), dtype=np.uint8)
        grid[:] = _FREE
        grid[:, ncpu] = _GAP
        cpu_idx = np.arange(ncpu)[None, :]
        gpu_idx = np.arange(ngpu)[None, :]
        grid[:, :ncpu][cpu_idx < cluster.used_cpu[:, None]] = _CPU
        grid[:, ncpu + 1 :][gpu_idx < cluster.used_gpu[:, None]] = _GPU
        return np.repeat(np.repeat(grid, CELL_PX, axis=0), CELL_PX, axis=1)
