"""The action masks of ``dlsched/Cluster-v0`` (:class:`MaskMixin`), kept incrementally.

The mask lives in a bytearray seen through a numpy view (cheap item writes), with a count of
its valid non-void entries, so that the env knows without a scan when a slot must close.
Which distinct demands fit on some node is ``cluster.occupied & fit_positions(demand)``,
rechecked only when a placement emptied the last node of a free state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from envs.gym.cluster.observation import _Row
from envs.sim.elastic.cluster import SlotCluster
from envs.sim.elastic.simulator import SlotSimulator

__all__ = ["MaskMixin"]


class MaskMixin:
    """Valid actions of :class:`~envs.gym.cluster.env.ClusterEnv` (True = valid;
    sb3-contrib's convention), length ``3J + 1``: masked are rows without a job, a role at
    its cap (``max_workers`` / ``max_ps``; the bundle when either is), and a task (or bundle)
    that the placement rule cannot place (fits on no node; with ``"reference"``, does not fit
    on the least-loaded node).  Void (last) is always valid.

    A placement updates the mask row of its job (inlined in ``ClusterEnv._apply``, the hot
    path) and, only when some demand stopped fitting on every node (:meth:`_update_fits`),
    the whole mask (:meth:`_refresh_mask`).
    """

    # State of the env (ClusterEnv.__init__ and reset set it; declared for the type checker).
    J: int
    strict_reference_placement: bool
    _rows: list[_Row]
    _counts: list[list[int]]
    _demands: list[tuple[int, int]]
    _fit_masks: list[int]
    _fits: list[bool]
    _fit_cache: dict[int, list[bool]]
    _mbytes: bytearray
    _mask: npt.NDArray[np.bool_]
    _closed_bytes: bytes
    _n_valid: int
    _cluster: SlotCluster | None

    if TYPE_CHECKING:

        def _require_sim(self) -> SlotSimulator: ...

    def _init_mask_buffers(self) -> None:
        """The mask lives in a bytearray (cheap item writes) seen by numpy through ``_mask``;
        ``_n_valid`` counts its True non-void entries.  Needs ``J``.

        Also the fit state: the distinct demands (cpu, gpu) of the episode's jobs (worker, PS,
        bundle), the free states each fits in (``SlotCluster.fit_positions``), and whether it
        fits on some node in the open slot (``cluster.occupied & positions``)."""
        self._demands = []
        self._fit_masks = []
        self._fits = []
        self._fit_cache = {}
        self._closed_bytes = bytes(3 * self.J) + b"\x01"
        self._mbytes = bytearray(self._closed_bytes)
        self._bind_mask_views()
        self._n_valid = 0

    def _bind_mask_views(self) -> None:
        """The numpy view of the mask's bytes (again after unpickling)."""
        self._mask = np.frombuffer(self._mbytes, dtype=bool)

    def action_masks(self) -> npt.NDArray[np.bool_]:
        """Valid actions (True), length ``3J + 1``; void (last) always True.  A copy: callers
        keep it, and the env's buffer changes at the next step."""
        return self._mask.copy()

    def _prepare_fits(self) -> None:
        """The free states each distinct demand of the episode fits in (after
        ``_prepare_jobs``)."""
        cluster = self._require_sim().cluster
        self._fit_masks = [cluster.fit_positions(c, g) for c, g in self._demands]
        self._fit_cache = {}

    def _fits_at(self, occupied: int) -> list[bool]:
        """Which demands fit on some node of a cluster whose occupied positions are
        ``occupied`` (``(occupied & positions) != 0`` per demand), cached per ``occupied`` for
        the episode (the same few sets come back every slot: an empty cluster's above all).
        The lists are shared: never change one in place."""
        fits = self._fit_cache.get(occupied)
        if fits is None:
            cache = self._fit_cache
            if len(cache) >= 4096:
                cache.clear()
            fits = cache[occupied] = [(occupied & positions) != 0 for positions in self._fit_masks]
        return fits

    def _update_fits(self) -> bool:
        """Recompute which demands fit on some node; whether that changed."""
        fits = self._fits_at(self._cluster.occupied)  # type: ignore[union-attr]  # a slot is open
        if fits is self._fits or fits == self._fits:
            return False
        self._fits = fits
        return True

    def _close_mask(self) -> None:
        self._mbytes[:] = self._closed_bytes
        self._n_valid = 0

    def _open_mask(self, opened: tuple[bytes, int] | None = None) -> None:
        """Fit state and mask of a newly opened slot (``_rows`` and ``_counts`` set;
        ``opened``: the rows' open masks joined and their valid count, made already)."""
        cluster = self._require_sim().cluster
        rows = self._rows
        self._fits = self._fits_at(cluster.occupied)
        if cluster.is_empty():  # the usual case (begin_slot emptied it)
            if opened is None:
                opened = (
                    b"".join([row.open_mask for row in rows]),
                    sum([row.open_valid for row in rows]),
                )
            self._mbytes[: 3 * len(rows)], self._n_valid = opened
        else:
            self._refresh_mask()

    def _row_valid(self, row: _Row, w: int, p: int) -> tuple[bool, bool, bool]:
        """Whether a worker, a PS and a bundle of ``row``'s job, holding ``w`` workers and
        ``p`` PS, are valid actions: below its caps, and a node for the task under the
        placement rule (the fit state; with ``"reference"``, the least-loaded node)."""
        w_ok = w < row.max_w
        p_ok = p < row.max_p
        if self.strict_reference_placement:
            cluster = self._require_sim().cluster
            fw = cluster.find_node(row.wc, row.wg) is not None
            fp = cluster.find_node(row.pc, row.pg) is not None
            fb = cluster.find_node(row.wc + row.pc, row.wg + row.pg) is not None
        else:
            fits = self._fits
            fw, fp, fb = fits[row.iw], fits[row.ip], fits[row.ib]
        return w_ok and fw, p_ok and fp, w_ok and p_ok and fb

    def _mask_row(self, j: int) -> None:
        """Mask entries of window row ``j`` from its counts and the fit state."""
        w, p = self._counts[j]
        vw, vp, vb = self._row_valid(self._rows[j], w, p)
        mb = self._mbytes
        k = 3 * j
        before = mb[k] + mb[k + 1] + mb[k + 2]
        mb[k] = vw
        mb[k + 1] = vp
        mb[k + 2] = vb
        self._n_valid += vw + vp + vb - before

    def _refresh_mask(self) -> None:
        for j in range(len(self._rows)):
            self._mask_row(j)
