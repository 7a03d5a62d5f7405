"""Starting or joining Ray for dlsched's distributed parts (federated training's actors,
``evaluate.py runner=ray``'s tasks), and the BLAS thread settings their workers must share with
this process for bit-identical results.  Imports Ray only when called."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from envs import numerics
from envs.sim import ConfigError

__all__ = [
    "WORKER_NICENESS",
    "blas_threads",
    "check_cluster",
    "driver_token",
    "end_own_ray_now",
    "init_ray",
    "watchdog_alive",
]


#: The nice level of the Ray workers dlsched starts (Ray's default is 15).  A worker steps
#: envs or runs evaluations the driver waits for; at nice 15 it gets almost no CPU while any
#: other process is busy (measured: ``import torch`` in an actor took 38 s beside two busy
#: processes on 2 cores, 1.9 s at 0).
WORKER_NICENESS = 0


def init_ray(address: str | None = None, *, num_cpus: int | None = None) -> bool:
    """Start or join Ray, with the dashboard and usage statistics off
    (``RAY_USAGE_STATS_ENABLED=0``); nothing when Ray is already initialised.  True when this
    call started or joined it (the caller then owns ``ray.shutdown()``).

    ``address`` (``host:port`` of a running head, or ``"auto"``): join that cluster, after
    :func:`check_cluster` has asked its head (one RPC: ~0.1 s, 5 s at most) whether it takes
    this driver's token: a missing or wrong token, or no head there, is one
    :class:`ConfigError` line before ``ray.init`` (which takes ~20 s to fail on a token).  A
    cluster whose every node is on 127.0.0.1 is joined from 127.0.0.1 (Ray's single-machine
    mode, see below).

    Empty: start a one-machine Ray on ``num_cpus`` CPUs (default: the CPUs this process may
    use) whose every server listens on 127.0.0.1 only.  (Ray resolves
    ``_node_ip_address="127.0.0.1"`` to the machine's external address unless its
    single-machine mode is on: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, the mode Ray uses on
    macOS and Windows; it is set here for Ray's processes and, when Ray was already imported,
    in its constants.)  Its token authentication (on by default since Ray 2.60) gets a token
    of this process's own, in ``RAY_AUTH_TOKEN`` (:func:`_private_token`): Ray would otherwise
    write one to ``~/.ray/auth_token``.  Its workers run at the driver's priority
    (:data:`WORKER_NICENESS`), not at Ray's default nice 15."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    if not address:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    if ray.is_initialized():
        return False
    from ray._private import ray_constants

    common: dict[str, Any] = {
        "include_dashboard": False,
        "configure_logging": True,
        "logging_level": "warning",
    }
    if address:
        if check_cluster(address):  # the nodes are on 127.0.0.1: so is this driver
            ray_constants.ENABLE_RAY_CLUSTER = False
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
    _private_token()
    _start_watchdog()
    ray_constants.ENABLE_RAY_CLUSTER = False  # single-machine mode if Ray was imported earlier
    if num_cpus is None:
        num_cpus = _usable_cpus()
    # "local": a new instance, never one that ``ray start`` left running on this machine;
    # its workers at the driver's priority (WORKER_NICENESS)
    ray.init(
        address="local",
        num_cpus=num_cpus,
        _node_ip_address="127.0.0.1",
        _system_config={"worker_niceness": WORKER_NICENESS},
        **common,
    )
    _tell_watchdog()
    return True


#: Ray's token authentication (Ray >= 2.60, ``ray._raylet.AuthenticationTokenLoader``): the mode
#: variable, and where a driver's token comes from, first found first.
AUTH_MODE_VAR = "RAY_AUTH_MODE"
TOKEN_VAR = "RAY_AUTH_TOKEN"
TOKEN_PATH_VAR = "RAY_AUTH_TOKEN_PATH"
_SET_TOKEN = (
    f"{AUTH_MODE_VAR}=token and the head's token in {TOKEN_VAR} (or in a file named by "
    f"{TOKEN_PATH_VAR}, or in ~/.ray/auth_token; `ray get-auth-token` on the head prints it)"
)


def _private_token() -> None:
    """A local Ray of this process's own: with token authentication on (Ray's default unless
    ``RAY_AUTH_MODE=disabled``) and no token given (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``),
    Ray's ``ray.init`` writes a new one to ``~/.ray/auth_token`` (``Path.home()``), a file that
    outlives the run and that later drivers on the machine then send.  Instead this process
    makes up a token and hands it to Ray (whose processes inherit the environment) in
    ``RAY_AUTH_TOKEN``: nothing is written.  ``RAY_AUTH_MODE`` is left to Ray: ``ray.init``
    turns it on and refreshes its own configuration."""
    import secrets

    if os.environ.get(AUTH_MODE_VAR, "token").strip().lower() != "token":
        return
    if not (os.environ.get(TOKEN_VAR, "").strip() or os.environ.get(TOKEN_PATH_VAR)):
        os.environ[TOKEN_VAR] = secrets.token_hex(32)


def _usable_cpus() -> int:
    """The CPUs this process may use: its affinity (``os.cpu_count()`` where there is none),
    or fewer where Ray finds a smaller container (cgroup) quota."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        from ray._private.utils import get_num_cpus

        quota = int(get_num_cpus(override_docker_cpu_warning=True))
    except (ImportError, AttributeError, TypeError, OSError):  # pragma: no cover - Ray moved it
        quota = cpus or 1
    return max(1, min(cpus or 1, quota))


def driver_token() -> tuple[str, str] | None:
    """The token a driver joining a cluster sends, as Ray 2.60 finds it, and where it comes
    from: none unless ``RAY_AUTH_MODE=token`` (Ray sends no token to an explicit address
    otherwise); then ``RAY_AUTH_TOKEN``, else the file ``RAY_AUTH_TOKEN_PATH`` names, else
    ``~/.ray/auth_token``.  :class:`ConfigError` when the mode is token but no token is found
    (Ray itself would fail then too)."""
    if os.environ.get(AUTH_MODE_VAR, "").strip().lower() != "token":
        return None
    token = os.environ.get(TOKEN_VAR, "").strip()
    if token:
        return token, TOKEN_VAR
    named = os.environ.get(TOKEN_PATH_VAR)
    path = Path(named).expanduser() if named else Path.home() / ".ray" / "auth_token"
    try:
        token = path.read_text().strip()
    except OSError as exc:
        if named:
            raise ConfigError(
                f"{TOKEN_PATH_VAR}={named}: cannot read the Ray token there "
                f"({exc.strerror or type(exc).__name__})"
            ) from None
        token = ""
    if named and not token:
        raise ConfigError(f"{TOKEN_PATH_VAR}={named}: the file is empty (no Ray token)")
    if not token:
        raise ConfigError(
            f"{AUTH_MODE_VAR}=token but no Ray token is set: put the head's token in "
            f"{TOKEN_VAR}, or in a file named by {TOKEN_PATH_VAR}, or in {path}"
        )
    return token, (f"the file {path}" if named is None else f"{TOKEN_PATH_VAR}={named}")


def check_cluster(address: str, *, timeout_s: float = 5.0) -> bool:
    """Ask the head at ``address`` (``host:port``) for its nodes, sending this driver's token
    (:func:`driver_token`), before ``ray.init`` joins it: a missing or wrong token, or no head
    there, is one :class:`ConfigError` line at once (``ray.init`` takes ~20 s and three
    warnings to fail on a token); any other answer is left to ``ray.init``.  True when every
    live node is on a loopback address (a cluster on this machine's 127.0.0.1: the driver must
    stay on 127.0.0.1 too).  Nothing is asked of ``"auto"``, ``ray://`` or TLS addresses
    (False): ``ray.init`` checks those."""
    import ipaddress

    _, sep, port = address.rpartition(":")
    tls = os.environ.get("RAY_USE_TLS", "0").strip().lower() in ("1", "true")
    if not sep or "://" in address or not port.isdigit() or tls:
        return False
    import grpc
    from ray.core.generated import gcs_pb2, gcs_service_pb2, gcs_service_pb2_grpc

    def fail(why: str) -> ConfigError:
        return ConfigError(f"cannot join the Ray cluster at {address}: {why}")

    try:
        sent = driver_token()
    except ConfigError as exc:
        raise fail(str(exc)) from None
    metadata = [("authorization", f"Bearer {sent[0]}")] if sent else []
    with grpc.insecure_channel(address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            reply = stub.GetAllNodeInfo(
                gcs_service_pb2.GetAllNodeInfoRequest(),  # type: ignore[attr-defined]
                metadata=metadata,
                timeout=timeout_s,
            )
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            if code == grpc.StatusCode.UNAUTHENTICATED and sent is None:
                raise fail(
                    "the head requires Ray's token authentication and this driver sends no "
                    f"token: set {_SET_TOKEN}"
                ) from None
            if code == grpc.StatusCode.UNAUTHENTICATED and sent is not None:
                raise fail(
                    f"the head rejects this driver's Ray token (from {sent[1]}): set {_SET_TOKEN}"
                ) from None
            if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return False  # not a question of reaching it or of the token: ray.init says
            details = (
                (exc.details() or "").strip().splitlines() if isinstance(exc, grpc.Call) else []
            )
            raise fail(
                f"no Ray head answers there ({code.name}: {details[0] if details else '-'}); "
                "start it with `ray start --head` or fix the address"
            ) from None

    def loopback(ip: str) -> bool:
        try:
            return ipaddress.ip_address(ip).is_loopback
        except ValueError:
            return ip == "localhost"

    alive = gcs_pb2.GcsNodeInfo.ALIVE  # type: ignore[attr-defined]
    nodes = [n.node_manager_address for n in reply.node_info_list if n.state == alive]
    return bool(nodes) and all(loopback(ip) for ip in nodes)


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
    process may use.  PyTorch's and MKL's numerics settings (:mod:`envs.numerics`) travel
    with them, for the same reason."""
    names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", *numerics.PORTABLE)
    out = {k: os.environ[k] for k in names if os.environ.get(k)}
    if "OMP_NUM_THREADS" not in out:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        out["OMP_NUM_THREADS"] = str(cpus or 1)
    return out
