"""The env's decision state, read-only, for the code outside ``envs/gym`` that acts on it or
measures it (heuristic drivers, learners' rollouts, evaluation, experiments): what they used
to read from private attributes (``_ended``, ``_slot_open``, ``_t``, ``_mask``, ``_invalid``,
``_views``, ``_require_sim()``, ``_obs()``), now one public contract that the env may
implement as it likes (``tests/test_layers.py`` checks that nothing outside ``envs`` reads
an env's private attribute)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from envs.sim.elastic.allocator_base import JobState
    from envs.sim.elastic.simulator import SlotSimulator


class DecisionStateMixin:
    """Read-only properties of :class:`~envs.gym.cluster.env.ClusterEnv`'s decision state."""

    if TYPE_CHECKING:
        _ended: bool
        _slot_open: bool
        _t: int
        _mask: npt.NDArray[np.bool_]
        _invalid: int
        _views: list[JobState]
        _window: list[JobState]
        _alloc: dict[int, list[int]]

        def _require_sim(self) -> SlotSimulator: ...

        def _obs(self) -> npt.NDArray[np.float32]: ...

    @property
    def ended(self) -> bool:
        """Whether the episode has ended (``reset`` needed)."""
        return self._ended

    @property
    def slot_open(self) -> bool:
        """Whether a slot is open for decisions (not between episodes)."""
        return self._slot_open

    @property
    def slot(self) -> int:
        """The open slot's index (the simulator's clock, in slots)."""
        return self._t

    @property
    def live_mask(self) -> npt.NDArray[np.bool_]:
        """The current action mask, without a copy: the env's own buffer, valid until the next
        ``step`` or ``reset`` and not to be written (``action_masks()`` returns a copy)."""
        return self._mask

    @property
    def invalid_actions(self) -> int:
        """Invalid actions taken this episode (each a counted no-op)."""
        return self._invalid

    @property
    def simulator(self) -> SlotSimulator:
        """The episode's slot simulator (a :class:`ConfigError`-free read after ``reset``;
        before the first ``reset``, the env's own error)."""
        return self._require_sim()

    @property
    def active_jobs(self) -> list[JobState]:
        """Every active job of the open slot (the window's ``J`` first, then the backlog),
        as the simulator's read-only views."""
        return list(self._views)

    @property
    def window_jobs(self) -> list[JobState]:
        """The open slot's window: the active jobs an allocator plans (the first ``J`` of
        :attr:`active_jobs`)."""
        return list(self._window)

    @property
    def slot_allocation(self) -> dict[int, tuple[int, int]]:
        """The open slot's decisions so far: window job id -> (workers, parameter servers)."""
        return {jid: (c[0], c[1]) for jid, c in self._alloc.items()}

    def observation(self) -> npt.NDArray[np.float32]:
        """The current observation (a copy; what ``step`` and ``reset`` returned last)."""
        return self._obs()
