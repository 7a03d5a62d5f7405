"""Starting or joining Ray for dlsched's distributed parts (federated training's actors,
``evaluate.py runner=ray``'s tasks), and the BLAS thread settings their workers must share with
this process for bit-identical results.  Imports Ray only when called."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from envs.sim import ConfigError

__all__ = ["blas_threads", "end_own_ray_now", "init_ray", "watchdog_alive"]


def init_ray(address: str | None = None, *, num_cpus: int | None = None) -> bool:
    """Start or join Ray, with the dashboard and usage statistics off
    (``RAY_USAGE_STATS_ENABLED=0``); nothing when Ray is already initialised.  True when this
    call started or joined it (the caller then owns ``ray.shutdown()``).

    ``address`` (``host:port`` of a running head, or ``"auto"``): join that cluster.  Empty: start
    a one-machine Ray on ``num_cpus`` CPUs (default all) whose every server listens on
    127.0.0.1 only.  (Ray resolves ``_node_ip_address="127.0.0.1"`` to the machine's external
    address unless its single-machine mode is on: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, the
    mode Ray uses on macOS and Windows; it is set here for Ray's processes and, when Ray was
    already imported, in its constants.)"""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    if not address:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    if ray.is_initialized():
        return False
    common: dict[str, Any] = {
        "include_dashboard": False,
        "configure_logging": True,
        "logging_level": "warning",
    }
    if address:
        try:
            ray.init(address=address, **common)
        except (ConnectionError, RuntimeError, TimeoutError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"cannot join the Ray cluster at {address}: {first}. The head must be running "
                "(`ray start --head`), and with Ray's token authentication (on by default since "
                "Ray 2.60) every node and this driver need RAY_AUTH_MODE=token and the head's "
                "token (RAY_AUTH_TOKEN, or the file ~/.ray/auth_token); see the README"
            ) from None
        return True
    _start_watchdog()
    from ray._private import ray_constants  # single-machine mode if Ray was imported earlier

    ray_constants.ENABLE_RAY_CLUSTER = False
    # "local": a new instance, never one that ``ray start`` left running on this machine
    ray.init(address="local", num_cpus=num_cpus, _node_ip_address="127.0.0.1", **common)
    _tell_watchdog()
    return True


#: Set in this process's environment before Ray starts, so that Ray's processes carry it
#: (Ray passes the environment on): one of the ways the watchdog finds them.
OWNER_VAR = "DLSCHED_RAY_OWNER"
_WATCHDOG: list[Any] = []  # the watchdog's Popen, kept so that its pipe stays open


def _start_watchdog() -> None:
    """A local Ray's processes outlive a driver killed with ``kill -9`` (Ray's dashboard and
    runtime-env agents for minutes).  Before starting Ray, start the watchdog
    (``agents/procwatch.py``) in a session of its own: it records this process's
    descendants while it lives and kills what is left of them when it ends (its stdin pipe
    closes, however this process ends); it also knows them by :data:`OWNER_VAR`, set here, and
    by the raylet pids :func:`_tell_watchdog` reports.  Linux (``/proc``) only; once per
    process."""
    import subprocess
    import sys

    if _WATCHDOG or not os.path.isdir("/proc"):
        return
    me = str(os.getpid())
    env = {k: v for k, v in os.environ.items() if k != OWNER_VAR}
    _WATCHDOG.append(
        subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("procwatch.py")), me],
            stdin=subprocess.PIPE,
            env=env,
            start_new_session=True,  # Ctrl-C in the terminal does not reach it
        )
    )
    os.environ[OWNER_VAR] = me


def watchdog_alive() -> bool:
    """Whether this process started a local Ray with a watchdog that is still waiting: then
    everything of that Ray ends when this process ends, without ``ray.shutdown()``."""
    return bool(_WATCHDOG) and _WATCHDOG[0].poll() is None


def end_own_ray_now() -> None:
    """Kill, at once, every process of the local Ray this process started (its descendants
    and the processes carrying its mark, the watchdog excepted): for a driver about to exit on
    Ctrl-C without ``ray.shutdown()``.  The watchdog then finds nothing left to do."""
    if not watchdog_alive():
        return
    import signal

    from agents.procwatch import descendants, marked

    me = os.getpid()
    for pid in (descendants(me) | marked(me)) - {me, _WATCHDOG[0].pid}:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _tell_watchdog() -> None:
    """Send the watchdog the pids of the Ray processes this process just started."""
    if not _WATCHDOG or _WATCHDOG[0].stdin is None:
        return
    try:
        from ray._private import worker

        node = worker._global_node
        procs: dict[str, Any] = node.all_processes if node is not None else {}
        pids = [str(info.process.pid) for infos in procs.values() for info in infos]
        _WATCHDOG[0].stdin.write("".join(f"{p}\n" for p in pids).encode())
        _WATCHDOG[0].stdin.flush()
    except (AttributeError, OSError, ImportError):  # pragma: no cover - Ray internals moved
        pass


def blas_threads() -> dict[str, str]:
    """This process's BLAS/OpenMP thread settings, for the actors.

    The simulator's speed model solves a small linear system (``numpy.linalg``), whose last
    bits depend on the BLAS thread count; Ray sets ``OMP_NUM_THREADS=1`` in its workers, so
    without this an actor's envs would differ from the same envs here in the last bits (then
    trajectories can drift).  Unset here means OpenBLAS's default, one thread per CPU this
    process may use."""
    names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    out = {k: os.environ[k] for k in names if os.environ.get(k)}
    if "OMP_NUM_THREADS" not in out:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        out["OMP_NUM_THREADS"] = str(cpus or 1)
    return out
