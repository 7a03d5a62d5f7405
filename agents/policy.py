"""The policy network every learned scheduler and behaviour cloning share.

DL² (reference-code notes §6): separate policy and value networks, fully connected, ReLU;
``NUM_NEURONS_PER_FCN = 6 J`` units per hidden layer (1 layer in the experiment scripts' small
setting, 2 in the large default), Adam.  We use sb3-contrib's
:class:`~sb3_contrib.common.maskable.policies.MaskableActorCriticPolicy` (masked softmax over
``Discrete(3J + 1)``) with ``net_arch = dict(pi=[h] * layers, vf=[h] * layers)``, no shared
layers, ReLU, Adam.  DL²'s "batch norm" layers never leave inference mode in its code (an
affine map per unit), so they are left out.  That is ``arch: mlp``.  ``arch: per_job``
(:class:`PerJobNetwork`) is DL²'s optional "job-central" representation: one small network
shared by every job row plus a pooled context, per-job logits from a shared head, so that a
rule that ranks jobs by a function of their own row (SRTF, Ada-SRSF's absolute remaining
epochs) is one function to learn instead of one per window position.

:func:`policy_kwargs` is the one place these choices are made: pretraining builds the policy
with it and fine-tuning loads the pretrained weights into a policy built with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from scipy import special
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import MlpExtractor
from stable_baselines3.common.type_aliases import Schedule

from envs.sim.errors import ConfigError

__all__ = [
    "ARCHS",
    "DL2Policy",
    "NumpyPolicy",
    "PerJobNetwork",
    "PolicyConfig",
    "TorchPolicy",
    "inference_policy",
    "masked_logits",
    "numpy_support",
    "policy_from_zip",
    "policy_kwargs",
]

#: Network architectures :class:`PolicyConfig` knows (``policy.arch``).
ARCHS = ("mlp", "per_job")

#: Default width of the per-job encoder (``policy.hidden = 0`` with ``arch: per_job``).
PER_JOB_HIDDEN = 64


def _mlp(sizes: list[int], final_activation: bool) -> th.nn.Sequential:
    """``Linear`` + ReLU layers through ``sizes`` (no ReLU after the last unless asked)."""
    layers: list[th.nn.Module] = []
    for i, (a, b) in enumerate(pairwise(sizes)):
        layers.append(th.nn.Linear(a, b))
        if final_activation or i < len(sizes) - 2:
            layers.append(th.nn.ReLU())
    return th.nn.Sequential(*layers)


class PerJobNetwork(th.nn.Module):
    """DL²'s "job-central" representation: one small network shared by every job row.

    The flat observation is cut into its ``J`` rows of ``width`` features (the env's layout:
    row ``j`` is entries ``j * width .. (j + 1) * width - 1``; rows without a job are zero).
    For the actor and, with separate weights, for the critic:

    * ``rows``: the same MLP (``layers`` x ``hidden``, ReLU) embeds every row: ``e_j``;
    * ``ctx``: a pooled context over the non-empty rows, ``[mean_j e_j, max_j e_j,
      sum_j e_j / J, n / J]`` (``n`` non-empty rows), through ``Linear`` + ReLU: ``c``;
    * actor: a shared head on ``[row_j, e_j, c]`` gives job ``j``'s three logits (+worker,
      +PS, +both: actions ``3j .. 3j + 2``, the env's order), a ``Linear`` on ``c`` the
      void logit (action ``3J``);
    * critic: ``c`` is the value latent (the policy's ``value_net`` maps it to the value).

    Permuting the job rows permutes the per-job logits the same way and leaves the void
    logit and the value unchanged; empty rows do not enter the context.  ``position=True``
    appends the row's window position ``j / J`` to every row (the window is in arrival order):
    the network can then break ties by arrival as the teachers do (SRTF: equal remaining
    fractions, e.g. new jobs, go by arrival), at the price of exact equivariance.  ``latent_dim_pi``
    is ``3J + 1`` (the actor's output *is* the logits: the policy's ``action_net`` is the
    identity), ``latent_dim_vf`` is ``hidden``.
    """

    def __init__(
        self,
        J: int,
        width: int,
        hidden: int = PER_JOB_HIDDEN,
        layers: int = 1,
        position: bool = False,
    ):
        super().__init__()
        if J < 1 or width < 1 or hidden < 1 or layers < 1:
            raise ConfigError(
                f"per-job network needs J, width, hidden, layers >= 1; got {J}, {width}, "
                f"{hidden}, {layers}"
            )
        self.J, self.width, self.hidden, self.layers = int(J), int(width), int(hidden), layers
        self.position = bool(position)
        h = self.hidden
        # the row as the networks see it: its features, then its position if asked for
        self.row_in = self.width + int(self.position)
        self.register_buffer(
            "positions", (th.arange(self.J, dtype=th.float32) / self.J)[:, None], persistent=False
        )
        self.latent_dim_pi = 3 * self.J + 1
        self.latent_dim_vf = h
        self.pi_rows = _mlp([self.row_in] + [h] * layers, final_activation=True)
        self.pi_ctx = _mlp([3 * h + 1, h], final_activation=True)
        self.pi_job = _mlp([self.row_in + 2 * h, h, 3], final_activation=False)
        self.pi_void = th.nn.Linear(h, 1)
        self.vf_rows = _mlp([self.row_in] + [h] * layers, final_activation=True)
        self.vf_ctx = _mlp([3 * h + 1, h], final_activation=True)

    def output_layers(self) -> list[th.nn.Linear]:
        """The layers that emit logits (SB3 initialises them with a small gain)."""
        last = self.pi_job[-1]
        assert isinstance(last, th.nn.Linear)
        return [last, self.pi_void]

    def _encode(
        self, rows_net: th.nn.Module, ctx_net: th.nn.Module, features: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        rows = features.reshape(features.shape[0], self.J, self.width)
        present = (rows != 0).any(dim=-1, keepdim=True).to(rows.dtype)
        if self.position:
            pos = self.positions
            assert isinstance(pos, th.Tensor)
            rows = th.cat([rows, pos.to(rows.dtype).expand(rows.shape[0], -1, -1)], dim=-1)
        emb = rows_net(rows) * present  # ReLU output >= 0: empty rows are 0 and never a max
        n = present.sum(dim=1)
        total = emb.sum(dim=1)
        pooled = th.cat(
            [total / n.clamp(min=1.0), emb.amax(dim=1), total / self.J, n / self.J], dim=1
        )
        return rows, emb, ctx_net(pooled)

    def forward_actor(self, features: th.Tensor) -> th.Tensor:
        rows, emb, ctx = self._encode(self.pi_rows, self.pi_ctx, features)
        # the head's first layer on [row, e, c], as three blocks: c's part once, not J times
        first = self.pi_job[0]
        assert isinstance(first, th.nn.Linear)
        w, W, h = first.weight, self.row_in, self.hidden
        hidden = th.relu(
            th.nn.functional.linear(rows, w[:, :W])
            + th.nn.functional.linear(emb, w[:, W : W + h])
            + th.nn.functional.linear(ctx, w[:, W + h :], first.bias)[:, None, :]
        )
        job_logits = self.pi_job[2:](hidden).reshape(features.shape[0], 3 * self.J)
        return th.cat([job_logits, self.pi_void(ctx)], dim=1)

    def forward_critic(self, features: th.Tensor) -> th.Tensor:
        return self._encode(self.vf_rows, self.vf_ctx, features)[2]

    def forward(self, features: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)


class DL2Policy(MaskableActorCriticPolicy):
    """sb3-contrib's masked actor-critic policy, with an optional per-job network.

    ``per_job=None`` (``arch: mlp``): exactly :class:`MaskableActorCriticPolicy` (same modules,
    same initialisation, same state dict).  ``per_job=dict(J=, hidden=, layers=)`` (``arch:
    per_job``): the actor and critic are a :class:`PerJobNetwork` (the row width is the
    observation size over ``J``); its actor output is the logits, so ``action_net`` is the
    identity, and ``value_net`` maps the critic's pooled context to the value.  The
    ``per_job`` argument is a constructor parameter, so SB3's save/load rebuilds it.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        *args: Any,
        per_job: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.per_job = (
            None if per_job is None else _per_job_args(per_job, observation_space, action_space)
        )
        super().__init__(observation_space, action_space, lr_schedule, *args, **kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["per_job"] = None if self.per_job is None else dict(self.per_job)
        return data

    def _build_mlp_extractor(self) -> None:
        if self.per_job is None:
            super()._build_mlp_extractor()
            return
        self.mlp_extractor = PerJobNetwork(**self.per_job)  # type: ignore[assignment]

    def _build(self, lr_schedule: Schedule) -> None:
        if self.per_job is None:
            super()._build(lr_schedule)
            return
        self._build_mlp_extractor()
        net = self.mlp_extractor
        assert isinstance(net, PerJobNetwork)
        self.action_net = th.nn.Identity()
        self.value_net = th.nn.Linear(net.latent_dim_vf, 1)
        if self.ortho_init:  # SB3's gains: sqrt 2 inside, 0.01 on the logits, 1 on the value
            net.apply(partial(self.init_weights, gain=np.sqrt(2)))
            for layer in net.output_layers():
                self.init_weights(layer, gain=0.01)
            self.value_net.apply(partial(self.init_weights, gain=1))
        self.optimizer = self.optimizer_class(
            self.parameters(),
            lr=lr_schedule(1),  # type: ignore[call-arg]
            **self.optimizer_kwargs,
        )


def _per_job_args(
    per_job: dict[str, Any], observation_space: spaces.Space, action_space: spaces.Space
) -> dict[str, Any]:
    args = dict(per_job)
    unknown = set(args) - {"J", "hidden", "layers", "position"}
    if unknown or "J" not in args:
        raise ConfigError(f"per_job takes J, hidden, layers, position; got {sorted(per_job)}")
    J = int(args["J"])
    shape = observation_space.shape
    n = getattr(action_space, "n", None)
    if shape is None or len(shape) != 1 or J < 1 or shape[0] % J or n != 3 * J + 1:
        raise ConfigError(
            f"the per-job network needs a flat observation of J rows and Discrete(3J + 1) "
            f"actions; got J={J}, observation shape {shape}, action space {action_space}"
        )
    args["width"] = shape[0] // J
    return args


@dataclass
class PolicyConfig:
    """Network shape.  ``arch``: ``mlp`` (DL²'s fully connected networks over the flat
    observation) or ``per_job`` (:class:`PerJobNetwork`, DL²'s job-central representation).
    ``hidden``: units per layer (``0``: DL²'s ``6 J`` for ``mlp``, 64 for ``per_job``);
    ``layers``: hidden layers in each of the policy and value networks (``mlp``) or in the
    row encoder (``per_job``); ``ortho_init``: SB3's orthogonal initialisation (DL²'s code
    uses a truncated normal); ``position`` (``per_job`` only): give every row its window
    position (arrival rank) too, so that arrival-order tie-breaks are learnable."""

    arch: str = "mlp"
    hidden: int = 0
    layers: int = 1
    ortho_init: bool = True
    position: bool = False


def policy_kwargs(config: PolicyConfig | None, J: int) -> dict[str, Any]:
    """SB3 ``policy_kwargs`` of :class:`DL2Policy` for a window of ``J`` jobs."""
    config = config or PolicyConfig()
    if config.arch not in ARCHS:
        raise ConfigError(f"unknown policy.arch {config.arch!r}; known: {', '.join(ARCHS)}")
    if config.layers < 1:
        raise ConfigError(f"policy.layers must be >= 1, got {config.layers}")
    if config.hidden < 0:
        raise ConfigError(
            f"policy.hidden must be >= 0 (0 = the arch's default), got {config.hidden}"
        )
    common = {
        "activation_fn": th.nn.ReLU,
        "ortho_init": bool(config.ortho_init),
        "optimizer_class": th.optim.Adam,
    }
    if config.arch == "per_job":
        h = int(config.hidden) or PER_JOB_HIDDEN
        net: dict[str, Any] = {"J": int(J), "hidden": h, "layers": int(config.layers)}
        if config.position:
            net["position"] = True
        return {"net_arch": {"pi": [], "vf": []}, "per_job": net, **common}
    if config.position:
        raise ConfigError("policy.position applies to policy.arch=per_job only")
    h = int(config.hidden) or 6 * int(J)
    return {"net_arch": {"pi": [h] * config.layers, "vf": [h] * config.layers}, **common}


def masked_logits(
    policy: MaskableActorCriticPolicy, obs: th.Tensor, masks: th.Tensor | None
) -> th.Tensor:
    """The policy's action logits with invalid actions at ``-inf`` (no value head)."""
    features = policy.extract_features(obs, policy.pi_features_extractor)
    assert isinstance(features, th.Tensor)  # flat Box observations: one feature tensor
    latent_pi = policy.mlp_extractor.forward_actor(features)
    logits = policy.action_net(latent_pi)
    if masks is not None:
        logits = logits.masked_fill(~masks, float("-inf"))
    return logits


@th.no_grad()
def act(
    policy: MaskableActorCriticPolicy,
    obs: npt.NDArray[np.float32],
    mask: npt.NDArray[np.bool_],
    *,
    deterministic: bool,
    rng: np.random.Generator | None = None,
) -> int:
    """One action for one observation: the masked argmax, or a sample drawn with ``rng``.

    A lean path for evaluation (one env, one decision at a time): a forward pass of the actor
    only, sampling in numpy so that the draw depends on ``rng`` alone.
    """
    logits = masked_logits(
        policy, th.as_tensor(obs, dtype=th.float32)[None], th.as_tensor(mask, dtype=th.bool)[None]
    )[0]
    if deterministic:
        return int(th.argmax(logits))
    if rng is None:
        raise ConfigError("sampling an action needs an rng")
    p = th.softmax(logits.double(), dim=0).numpy()
    return int(rng.choice(p.shape[0], p=p / p.sum()))


def setup_policy(algo: Any) -> bool:
    """The start of ``_setup_model`` shared by the A2C-based learners (:class:`DL2A2C`,
    :class:`GroupPPO`): a Discrete action space, the LR schedule, the seed (unless ``load``
    restored the learner's run-time state: re-seeding a restored model would also re-seed the
    env's next reset and so change the workloads a resumed run sees), the policy, and no SB3
    rollout buffer.  True when the run-time state was restored."""
    if not isinstance(algo.action_space, spaces.Discrete):
        raise ConfigError(f"{type(algo).__name__} needs a Discrete action space")
    algo._setup_lr_schedule()
    restored = getattr(algo, "_rng", None) is not None  # ``load`` put the saved state back
    if not restored:
        algo.set_random_seed(algo.seed)
    algo.policy = algo.policy_class(
        algo.observation_space, algo.action_space, algo.lr_schedule, **algo.policy_kwargs
    ).to(algo.device)
    algo.rollout_buffer = None
    return restored


class MaskedPredict:
    """``predict(obs, ..., action_masks=m)`` as MaskablePPO takes it, for learners built on
    SB3's ``A2C`` (whose own ``predict`` has no masks and would pick masked actions)."""

    def predict(
        self,
        observation: Any,
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        policy: MaskableActorCriticPolicy = self.policy  # type: ignore[attr-defined]
        return policy.predict(
            observation, state, episode_start, deterministic, action_masks=action_masks
        )


#: SB3's actor-critic policies (sb3-contrib's masked one is not an ``ActorCriticPolicy``).
_ACTOR_CRITIC = (ActorCriticPolicy, MaskableActorCriticPolicy)


_Fn = Callable[[np.ndarray], np.ndarray]
_SELU_ALPHA = 1.6732632423543772848170429916717  # torch's constants
_SELU_SCALE = 1.0507009873554804934193349852946
_SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0, out=x)


def _gelu(m: Any) -> _Fn:
    if m.approximate == "tanh":
        return lambda x: 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3)))
    return lambda x: 0.5 * x * (1.0 + special.erf(x / np.sqrt(2.0)))


def _leaky(slope: float) -> _Fn:
    return lambda x: np.where(x > 0, x, x * slope)


def _softplus(beta: float, threshold: float) -> _Fn:
    return lambda x: np.where(x * beta > threshold, x, np.logaddexp(0.0, x * beta) / beta)


def _elu(alpha: float) -> _Fn:
    return lambda x: np.where(x > 0, x, alpha * np.expm1(x))


def _celu(alpha: float) -> _Fn:
    return lambda x: np.maximum(x, 0.0) + np.minimum(0.0, alpha * np.expm1(x / alpha))


def _clip(lo: float, hi: float) -> _Fn:
    return lambda x: np.clip(x, lo, hi, out=x)


def _threshold(threshold: float, value: float) -> _Fn:
    return lambda x: np.where(x > threshold, x, value)


def _hardshrink(lambd: float) -> _Fn:
    return lambda x: np.where(np.abs(x) > lambd, x, 0.0)


def _softshrink(lambd: float) -> _Fn:
    return lambda x: np.where(x > lambd, x - lambd, np.where(x < -lambd, x + lambd, 0.0))


def _prelu(m: Any) -> _Fn:
    w = m.weight.detach().cpu().numpy().astype(np.float64).copy()  # one, or one per unit
    return lambda x: np.where(x > 0, x, x * w)


#: Elementwise torch activations -> their numpy function (float64), built from the module
#: (its options): torch's definitions, ``RReLU`` as in inference (the mean slope).
_ACTIVATIONS: dict[type[th.nn.Module], Callable[[Any], _Fn]] = {
    th.nn.ReLU: lambda m: _relu,
    th.nn.Identity: lambda m: lambda x: x,
    th.nn.Tanh: lambda m: lambda x: np.tanh(x, out=x),
    th.nn.Sigmoid: lambda m: lambda x: special.expit(x, out=x),
    th.nn.SiLU: lambda m: lambda x: x * special.expit(x),
    th.nn.LeakyReLU: lambda m: _leaky(float(m.negative_slope)),
    th.nn.RReLU: lambda m: _leaky((m.lower + m.upper) / 2.0),
    th.nn.PReLU: _prelu,
    th.nn.ELU: lambda m: _elu(float(m.alpha)),
    th.nn.CELU: lambda m: _celu(float(m.alpha)),
    th.nn.SELU: lambda m: lambda x: _SELU_SCALE * _elu(_SELU_ALPHA)(x),
    th.nn.GELU: _gelu,
    th.nn.Softplus: lambda m: _softplus(float(m.beta), float(m.threshold)),
    th.nn.Mish: lambda m: lambda x: x * np.tanh(np.logaddexp(0.0, x)),
    th.nn.LogSigmoid: lambda m: lambda x: -np.logaddexp(0.0, -x),
    th.nn.Softsign: lambda m: lambda x: x / (1.0 + np.abs(x)),
    th.nn.Tanhshrink: lambda m: lambda x: x - np.tanh(x),
    th.nn.Hardtanh: lambda m: _clip(float(m.min_val), float(m.max_val)),
    th.nn.ReLU6: lambda m: _clip(0.0, 6.0),
    th.nn.Hardsigmoid: lambda m: lambda x: np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    th.nn.Hardswish: lambda m: lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    th.nn.Threshold: lambda m: _threshold(float(m.threshold), float(m.value)),
    th.nn.Hardshrink: lambda m: _hardshrink(float(m.lambd)),
    th.nn.Softshrink: lambda m: _softshrink(float(m.lambd)),
}


def _elementwise(module: th.nn.Module) -> _Fn | None:
    """The numpy (float64) function of an elementwise torch activation module, exactly
    torch's definition (:data:`_ACTIVATIONS`), or ``None`` if :class:`NumpyPolicy` does not
    know the module (its exact type: a subclass may compute something else).  The function
    may overwrite its argument (always a fresh array of the forward pass)."""
    build = _ACTIVATIONS.get(type(module))
    return None if build is None else build(module)


#: A step of a :class:`NumpyPolicy` forward: a ``Linear`` layer (``(W.T, b)``, float64) or an
#: elementwise activation.
_Op = tuple[np.ndarray, np.ndarray] | Callable[[np.ndarray], np.ndarray]


def _linear(module: th.nn.Linear) -> tuple[np.ndarray, np.ndarray]:
    w = module.weight.detach().cpu().numpy().astype(np.float64).T.copy()
    bias = module.bias
    b = np.zeros(w.shape[1]) if bias is None else bias.detach().cpu().numpy().astype(np.float64)
    return w, b.copy()


def _ops(seq: th.nn.Module) -> list[_Op]:
    """``seq`` (a ``Linear``, an activation, or a ``Sequential`` of them, nested or not) as the
    steps of its forward, in order; :class:`ConfigError` naming the first module it cannot
    mirror."""
    if isinstance(seq, th.nn.Sequential):
        return [op for child in seq for op in _ops(child)]
    if isinstance(seq, th.nn.Linear):
        return [_linear(seq)]
    fn = _elementwise(seq)
    if fn is None:
        raise ConfigError(f"unsupported layer {type(seq).__name__}")
    return [fn]


def _run(ops: list[_Op], x: np.ndarray) -> np.ndarray:
    """The forward of :func:`_ops`' steps on ``x`` (never changed in place)."""
    fresh = False
    for op in ops:
        if type(op) is tuple:
            w, b = op
            x = x @ w + b
            fresh = True
        else:
            if not fresh:
                x, fresh = x.copy(), True
            x = op(x)  # type: ignore[operator]
    return x


def numpy_support(policy: Any) -> str | None:
    """Why :class:`NumpyPolicy` cannot mirror ``policy`` (``None`` if it can): it needs an
    SB3 actor-critic policy over a flat ``Box`` observation with flatten features extractors
    and either SB3's ``MlpExtractor`` of ``Linear`` layers and elementwise activations
    (:func:`_elementwise`: ReLU, Tanh, LeakyReLU, ELU, GELU, SiLU, Sigmoid, ...) or a
    :class:`PerJobNetwork`."""
    try:
        NumpyPolicy(policy)
    except ConfigError as exc:
        return str(exc).removeprefix("NumpyPolicy: ")
    return None


class _MaskedActor:
    """Acting from masked logits, shared by :class:`NumpyPolicy` and :class:`TorchPolicy`
    (each gives ``logits(obs, mask)``, ``-inf`` where ``mask`` is False)."""

    def logits(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def probs(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return _softmax(self.logits(obs, mask))

    def act(
        self,
        obs: np.ndarray,
        mask: np.ndarray,
        *,
        deterministic: bool,
        rng: np.random.Generator | None = None,
    ) -> int:
        """Masked argmax, or a draw from the masked softmax with ``rng`` (inverse CDF)."""
        if deterministic:
            return int(np.argmax(self.logits(obs, mask)))
        return _draw(self.probs(obs, mask), rng)


class NumpyPolicy(_MaskedActor):
    """A frozen numpy copy of an SB3 actor-critic policy's actor and critic (a
    :class:`DL2Policy`, or a stock ``PPO`` / ``MaskablePPO`` / ``A2C`` ``MlpPolicy``), for fast
    single-decision inference (a torch forward costs ~0.3 ms per call on one observation;
    this ~20 us).

    Valid for flatten features extractors and SB3's ``MlpExtractor`` of ``Linear`` layers and
    any elementwise activation of :func:`_elementwise` (ReLU, Tanh, LeakyReLU, ELU, GELU,
    SiLU, Sigmoid, Softplus, Mish, ...; torch's definitions in float64: equal to the torch
    forward to float32 rounding), or a :class:`PerJobNetwork` (``arch: per_job``, same
    arithmetic in float64); anything else raises :class:`ConfigError` (:func:`numpy_support`
    says why; :class:`TorchPolicy` acts with the torch network instead).  Re-create (or
    :meth:`sync`) after every update: it does not follow the torch weights.
    """

    def __init__(self, policy: MaskableActorCriticPolicy) -> None:
        self.policy = policy
        self.sync()

    @staticmethod
    def _layers(seq: th.nn.Module) -> list[tuple[np.ndarray, np.ndarray]]:
        """The ``Linear`` layers of a :class:`PerJobNetwork` part (ReLU between them)."""
        layers = []
        for module in seq.modules() if not isinstance(seq, th.nn.Linear) else [seq]:
            if isinstance(module, th.nn.Linear):
                layers.append(_linear(module))
            elif not isinstance(module, th.nn.Sequential | th.nn.ReLU | th.nn.Identity):
                raise ConfigError(f"NumpyPolicy: unsupported layer {type(module).__name__}")
        return layers

    def sync(self) -> None:
        """Copy the current torch weights."""
        p = self.policy
        if not isinstance(p, _ACTOR_CRITIC):
            raise ConfigError(
                f"NumpyPolicy: needs an SB3 actor-critic policy, got {type(p).__name__}"
            )
        space = p.observation_space
        if not isinstance(space, spaces.Box) or len(space.shape) != 1:
            raise ConfigError(f"NumpyPolicy: needs a flat Box observation space, got {space}")
        extractors = (p.features_extractor, p.pi_features_extractor, p.vf_features_extractor)
        for extractor in (e for e in extractors if e is not None):
            if not isinstance(extractor, th.nn.Module) or any(
                not isinstance(m, th.nn.Flatten | type(extractor)) for m in extractor.modules()
            ):
                raise ConfigError("NumpyPolicy: needs a flatten features extractor")
        net = p.mlp_extractor
        if isinstance(net, PerJobNetwork):
            if not isinstance(p.action_net, th.nn.Identity):
                raise ConfigError("NumpyPolicy: a per-job policy's action_net must be identity")
            self._per_job: PerJobNetwork | None = net
            L = self._layers
            self._pj = {
                "pi_rows": L(net.pi_rows),
                "pi_ctx": L(net.pi_ctx),
                "pi_job": L(net.pi_job),
                "pi_void": L(net.pi_void),
                "vf_rows": L(net.vf_rows),
                "vf_ctx": L(net.vf_ctx),
                "value": L(p.value_net),
            }
            # the job head's first layer on [row, e, c] as three blocks (c once, not J times)
            (w, b), *rest = self._pj["pi_job"]
            W, h = net.row_in, net.hidden
            self._job_first = (w[:W], w[W : W + h], w[W + h :], b)
            self._job_rest = rest
            return
        if type(net) is not MlpExtractor:
            raise ConfigError(f"NumpyPolicy: unsupported mlp_extractor {type(net).__name__}")
        self._per_job = None
        try:
            self._pi = _ops(net.policy_net) + _ops(p.action_net)
            self._vf = _ops(net.value_net) + _ops(p.value_net)
        except ConfigError as exc:
            raise ConfigError(f"NumpyPolicy: {exc}") from None

    @staticmethod
    def _forward(
        layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray, relu_last: bool = False
    ) -> np.ndarray:
        last = len(layers) - 1
        for i, (w, b) in enumerate(layers):
            x = x @ w + b
            if i < last or relu_last:
                np.maximum(x, 0.0, out=x)
        return x

    @property
    def row_width(self) -> int | None:
        """A per-job network's job-row width (``None`` for a flat network)."""
        return None if self._per_job is None else self._per_job.width

    @property
    def any_window(self) -> bool:
        """Whether the policy acts on observations of any window ``J`` (rows of its width):
        a per-job network without the position column, whose weights do not depend on ``J``
        (:meth:`_encode` reads ``J`` off the observation)."""
        return self._per_job is not None and not self._per_job.position

    @staticmethod
    def _window(net: PerJobNetwork, obs: np.ndarray) -> int:
        """The window ``J`` of ``obs``: the network's own, or (position-free networks) any
        whole number of rows of its width; anything else is a :class:`ConfigError`."""
        J, rest = divmod(obs.shape[-1], net.width)
        if J == net.J and not rest:
            return J
        if net.position or rest or J < 1:
            raise ConfigError(
                f"the per-job policy takes {net.J} rows of {net.width} features"
                + ("" if net.position else " (or any number of such rows)")
                + f", got {obs.shape[-1]} observations"
            )
        return J

    def _encode(
        self, net: PerJobNetwork, obs: np.ndarray, rows_key: str, ctx_key: str
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`PerJobNetwork._encode` in numpy: rows, row embeddings, context (for the
        observation's window ``J``: :meth:`_window`)."""
        J = self._window(net, obs)
        rows = obs.reshape(*obs.shape[:-1], J, net.width)
        present = (rows != 0).any(axis=-1, keepdims=True)
        if net.position:
            pos = np.arange(J, dtype=np.float64)[:, None] / J
            rows = np.concatenate([rows, np.broadcast_to(pos, (*rows.shape[:-1], 1))], axis=-1)
        emb = self._forward(self._pj[rows_key], rows, relu_last=True) * present
        n = present.sum(axis=-2).astype(np.float64)
        total = emb.sum(axis=-2)
        pooled = np.concatenate(
            [total / np.maximum(n, 1.0), emb.max(axis=-2), total / J, n / J], axis=-1
        )
        return rows, emb, self._forward(self._pj[ctx_key], pooled, relu_last=True)

    def _raw_logits(self, obs: np.ndarray) -> np.ndarray:
        net = self._per_job
        if net is None:
            return _run(self._pi, obs)
        rows, emb, ctx = self._encode(net, obs, "pi_rows", "pi_ctx")
        J = rows.shape[-2]
        w_row, w_emb, w_ctx, b = self._job_first
        hidden = rows @ w_row + emb @ w_emb + (ctx @ w_ctx + b)[..., None, :]
        np.maximum(hidden, 0.0, out=hidden)
        job = self._forward(self._job_rest, hidden)
        void = self._forward(self._pj["pi_void"], ctx)
        return np.concatenate([job.reshape(*job.shape[:-2], 3 * J), void], axis=-1)

    def logits(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Masked logits (``-inf`` where ``mask`` is False) of one observation or a batch."""
        z = self._raw_logits(np.asarray(obs, dtype=np.float64))
        return np.where(mask, z, -np.inf)

    def value(self, obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float64)
        net = self._per_job
        if net is None:
            return _run(self._vf, x)[..., 0]
        ctx = self._encode(net, x, "vf_rows", "vf_ctx")[2]
        return self._forward(self._pj["value"], ctx)[..., 0]


def _draw(p: np.ndarray, rng: np.random.Generator | None) -> int:
    """One draw from the probabilities ``p`` with ``rng`` (inverse CDF, one uniform)."""
    if rng is None:
        raise ConfigError("sampling an action needs an rng")
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(p) - 1))


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


class TorchPolicy(_MaskedActor):
    """:class:`NumpyPolicy`'s interface over the torch network itself, for policies it cannot
    mirror (``reason``, from :func:`numpy_support`): masked logits of the actor's own forward
    (:func:`masked_logits`, in float32, then float64), the same masked argmax and the same
    draw from ``rng``.  Slower (~0.3 ms a decision), any actor-critic network."""

    def __init__(self, policy: Any, reason: str = "") -> None:
        self.policy = policy
        self.reason = reason
        policy.set_training_mode(False)

    @th.no_grad()
    def logits(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Masked logits (``-inf`` where ``mask`` is False) of one observation or a batch."""
        x = th.as_tensor(np.asarray(obs, dtype=np.float32))
        one = x.ndim == 1
        z = masked_logits(self.policy, x[None] if one else x, None)
        out = z.double().numpy()
        return np.where(mask, out[0] if one else out, -np.inf)

    @th.no_grad()
    def value(self, obs: np.ndarray) -> np.ndarray:
        x = th.as_tensor(np.asarray(obs, dtype=np.float32))
        one = x.ndim == 1
        v = self.policy.predict_values(x[None] if one else x)[..., 0].double().numpy()
        return v[0] if one else v


def inference_policy(policy: Any) -> NumpyPolicy | TorchPolicy:
    """``policy`` (an SB3 actor-critic policy) for acting one decision at a time: its
    :class:`NumpyPolicy` copy where it can mirror the network, else a :class:`TorchPolicy`
    (whose ``reason`` says why not)."""
    try:
        return NumpyPolicy(policy)
    except ConfigError as exc:
        if not isinstance(policy, _ACTOR_CRITIC):
            raise ConfigError(
                f"expected an SB3 actor-critic policy, got {type(policy).__name__}"
            ) from None
        return TorchPolicy(policy, str(exc).removeprefix("NumpyPolicy: "))


def policy_from_zip(path: str | Path) -> Any:
    """The policy of any SB3 ``.zip`` (``PPO``, ``MaskablePPO``, ``A2C``, this project's
    learners, any ``policy_kwargs``), on the CPU in inference mode, without building the
    algorithm (so without its env or its hyperparameters): the policy class and constructor
    arguments the zip records, and its ``policy`` weights.  :class:`ConfigError` naming the
    file if it is not such a zip."""
    from stable_baselines3.common.save_util import load_from_zip_file

    p = Path(path)
    try:
        data, params, _ = load_from_zip_file(p, device="cpu", print_system_info=False)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:  # zipfile errors are these
        raise ConfigError(f"{p}: not a readable SB3 model zip ({exc})") from None
    if not data or not params or "policy" not in params:
        raise ConfigError(f"{p}: not an SB3 model zip (no policy weights or no data)")
    cls = data.get("policy_class")
    if not isinstance(cls, type) or not issubclass(cls, _ACTOR_CRITIC):
        raise ConfigError(
            f"{p}: its policy_class is {getattr(cls, '__name__', cls)!r}; evaluation takes "
            "actor-critic policies (PPO, MaskablePPO, A2C)"
        )
    policy = cls(
        data["observation_space"],
        data["action_space"],
        lambda _: 0.0,
        **(data.get("policy_kwargs") or {}),
    )
    weights: Any = params["policy"]  # the state dict SB3 saved
    try:
        policy.load_state_dict(weights)
    except RuntimeError as exc:
        raise ConfigError(f"{p}: its policy weights do not fit its policy ({exc})") from None
    policy.set_training_mode(False)
    return policy
