"""The network: NIC sharing, all-reduce and PS-exchange rates, transfer progress.

Every server has one NIC; an all-reduce over servers whose busiest NIC carries ``k`` tasks
moves at ``1 / (k b + (k-1) η)`` MB/ms (a PS exchange at its busiest NIC's share, see
``_ps_traffic``).  Rates change only when a task starts or ends on one of a transfer's
servers; phase 6 (``_retime``) then banks its progress and gives it a new end event.  This is
the paper's continuous-time model; the reference simulator's ticks and probe side effect are
:class:`~envs.sim.engine.reference.ReferenceQuirks` (``self.quirks``).
"""

from __future__ import annotations

from typing import cast

from envs.sim.engine.core import EngineCore
from envs.sim.engine.state import EV_COMM, EV_SYNC, CommTask, Job
from envs.sim.policies.base import CommTaskView


class Network(EngineCore):
    """Phase 1's all-reduce ends, NIC rates (phase 6) and ``NetView.remaining_mb``."""

    def _finish_comm(self, task: CommTask, t: float) -> None:
        job = task.job
        job.comm = None
        for s in task.servers:
            self.nic_tasks[s].remove(task)
        self.changed_servers.update(task.servers)
        self.probed.discard(task)
        self.touched.discard(task)
        self.nic_dirty.update(task.servers)
        self.nic_ended.update(task.servers)
        a = self.network.a_ms
        if a > 0:
            end = t + a * job.chunk
            if self.quirks is not None:  # the reference: at a tick
                end = self.quirks.ceil_tick(end)
            self._push(end, EV_SYNC, job)
        else:
            self._sync(job, t)

    def _ps_traffic(self, job: Job) -> None:
        """Where a parameter-server job's PSs sit and what crosses each server's NIC.

        PS ``k`` sits on the server of worker ``k mod W`` (PSs spread over the job's worker
        servers, DL²-style bundles).  Each iteration every worker pushes ``M / P`` MB to every
        PS and pulls as much back; traffic between a worker and a PS on the same server is
        free.  NICs are full duplex: server ``s`` carries ``v_s = max(in_s, out_s)`` MB.  The
        exchange is one communication task over the servers with ``v_s > 0``, moving
        ``max_s v_s`` MB at the rate its busiest NIC allows (``_speed``).
        """
        spec = job.spec
        per = self.cluster.gpus_per_server
        worker_srv = [g // per for g in job.gpus]
        given = self.ps_servers.get(spec.job_id)
        if given is not None:
            ps_srv = list(given)
        else:
            ps_srv = [worker_srv[k % len(worker_srv)] for k in range(spec.num_ps)]
        share = spec.model.model_size_mb / spec.num_ps
        inn: dict[int, float] = {}
        out: dict[int, float] = {}
        for sw in worker_srv:
            for sp in ps_srv:
                if sw != sp:  # push sw -> sp, pull sp -> sw
                    out[sw] = out.get(sw, 0.0) + share
                    inn[sp] = inn.get(sp, 0.0) + share
                    out[sp] = out.get(sp, 0.0) + share
                    inn[sw] = inn.get(sw, 0.0) + share
        vol = {s: max(inn.get(s, 0.0), out.get(s, 0.0)) for s in set(inn) | set(out)}
        job.servers = [s for s in dict.fromkeys(worker_srv + ps_srv) if vol.get(s, 0.0) > 0]
        job.multi = bool(job.servers)
        job.comm_mb = max(vol.values()) if vol else 0.0
        job.factors = {s: vol[s] / job.comm_mb for s in job.servers} if vol else None

    def _speed(self, task: CommTask) -> float:
        """MB/ms over the task's busiest NIC: all-reduce ``1/(k b + (k-1) η)`` with ``k`` the
        most tasks on any of its servers; a PS exchange ``1 / max_s f_s (k_s b + (k_s-1) η)``
        where ``f_s`` is server ``s``'s share of the busiest NIC's bytes."""
        nic = self.nic_tasks
        if task.factors is None:
            return self.network.rate(max(len(nic[s]) for s in task.servers))
        b, eta = self.network.b_ms_per_mb, self.network.eta_ms_per_mb
        worst = 0.0
        for s, f in task.factors.items():
            k = len(nic[s])
            worst = max(worst, f * (k * b + (k - 1) * eta))
        return 1.0 / worst

    def remaining_mb(self, view: CommTaskView) -> float:
        """MB the running all-reduce still has to move at the current time.

        In tick mode this is the reference's probe
        (:meth:`~envs.sim.engine.reference.ReferenceQuirks.remaining_mb`).

        FAST fidelity: a job asking to start a merged all-reduce of ``chunk`` iterations is
        told the remainder divided by its ``chunk``, so that a scheduler comparing it with
        one iteration's size (AdaDUAL's ratio test) compares the two steps' sizes.
        """
        task = cast(CommTask, view)
        t = self.now
        asking = self._asking
        if asking is not None:
            asking.probe_target = task
        if self.quirks is not None:
            return self.quirks.remaining_mb(self, task, t)
        rem = task.size_mb
        if task.start_t != t:
            rem -= task.trans + (t - task.bank_t) * task.speed
        if asking is not None and asking.chunk > 1:
            rem /= asking.chunk
        return rem

    def _retime(self, t: float) -> None:
        """Phase 6: every transfer touched or on a server whose task count changed has its
        progress banked at its old rate and a new rate and end event (older end events are
        void by their version number)."""
        tasks = set(self.touched)
        nic = self.nic_tasks
        for s in self.changed_servers:
            tasks.update(nic[s])
        self.changed_servers.clear()
        self.touched.clear()
        if self.quirks is not None:
            self.quirks.retime(self, tasks, t)
            return
        for task in sorted(tasks, key=_placed_order):
            if task.start_t != t:
                task.trans += (t - task.bank_t) * task.speed
            task.bank_t = t
            task.speed = self._speed(task)
            rest = max(task.size_mb - task.trans, 0.0)
            end = t + rest / task.speed
            task.version += 1
            self._push(end, EV_COMM, task, task.version)


def _placed_order(task: CommTask) -> int:
    return task.job.placed_order
