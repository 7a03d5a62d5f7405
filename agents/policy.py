"""The policy network every learned scheduler and behaviour cloning share.

DL² (reference-code notes §6): separate policy and value networks, fully connected, ReLU;
``NUM_NEURONS_PER_FCN = 6 J`` units per hidden layer (1 layer in the experiment scripts' small
setting, 2 in the large default), Adam.  We use sb3-contrib's
:class:`~sb3_contrib.common.maskable.policies.MaskableActorCriticPolicy` (masked softmax over
``Discrete(3J + 1)``) with ``net_arch = dict(pi=[h] * layers, vf=[h] * layers)``, no shared
layers, ReLU, Adam.  DL²'s "batch norm" layers never leave inference mode in its code (an
affine map per unit), so they are left out.

:func:`policy_kwargs` is the one place these choices are made: pretraining builds the policy
with it and fine-tuning loads the pretrained weights into a policy built with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

from envs.sim.errors import ConfigError

__all__ = ["DL2Policy", "PolicyConfig", "masked_logits", "policy_kwargs"]

#: The policy class shared by pretraining and every DL²-style agent.
DL2Policy = MaskableActorCriticPolicy


@dataclass
class PolicyConfig:
    """Network shape: ``hidden`` units per layer (``0``: DL²'s ``6 J``), ``layers`` hidden
    layers in each of the policy and value networks, ``ortho_init`` (SB3's orthogonal
    initialisation; DL²'s code uses a truncated normal)."""

    hidden: int = 0
    layers: int = 1
    ortho_init: bool = True


def policy_kwargs(config: PolicyConfig | None, J: int) -> dict[str, Any]:
    """SB3 ``policy_kwargs`` for a window of ``J`` jobs."""
    config = config or PolicyConfig()
    if config.layers < 1:
        raise ConfigError(f"policy.layers must be >= 1, got {config.layers}")
    if config.hidden < 0:
        raise ConfigError(f"policy.hidden must be >= 0 (0 = 6 J), got {config.hidden}")
    h = int(config.hidden) or 6 * int(J)
    return {
        "net_arch": {"pi": [h] * config.layers, "vf": [h] * config.layers},
        "activation_fn": th.nn.ReLU,
        "ortho_init": bool(config.ortho_init),
        "optimizer_class": th.optim.Adam,
    }


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


class NumpyPolicy:
    """A frozen numpy copy of a :class:`DL2Policy`'s actor and critic, for fast single-decision
    inference (a torch forward costs ~0.3 ms per call on one observation; this ~20 us).

    Valid for the networks :func:`policy_kwargs` builds (flatten features, ``Linear`` + ReLU
    stacks); anything else raises :class:`ConfigError`.  Re-create (or :meth:`sync`) after
    every update: it does not follow the torch weights.
    """

    def __init__(self, policy: MaskableActorCriticPolicy) -> None:
        self.policy = policy
        self.sync()

    @staticmethod
    def _layers(seq: th.nn.Module) -> list[tuple[np.ndarray, np.ndarray]]:
        layers = []
        for module in seq.modules() if not isinstance(seq, th.nn.Linear) else [seq]:
            if isinstance(module, th.nn.Linear):
                layers.append(
                    (
                        module.weight.detach().cpu().numpy().astype(np.float64).T.copy(),
                        module.bias.detach().cpu().numpy().astype(np.float64).copy(),
                    )
                )
            elif not isinstance(module, th.nn.Sequential | th.nn.ReLU | th.nn.Identity):
                raise ConfigError(f"NumpyPolicy: unsupported layer {type(module).__name__}")
        return layers

    def sync(self) -> None:
        """Copy the current torch weights."""
        p = self.policy
        if not isinstance(p.features_extractor, th.nn.Module) or any(
            not isinstance(m, th.nn.Flatten | type(p.features_extractor))
            for m in p.features_extractor.modules()
        ):
            raise ConfigError("NumpyPolicy needs a flatten features extractor")
        if p.activation_fn is not th.nn.ReLU:
            raise ConfigError("NumpyPolicy supports ReLU networks only")
        self._pi = self._layers(p.mlp_extractor.policy_net) + self._layers(p.action_net)
        self._vf = self._layers(p.mlp_extractor.value_net) + self._layers(p.value_net)

    @staticmethod
    def _forward(layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
        last = len(layers) - 1
        for i, (w, b) in enumerate(layers):
            x = x @ w + b
            if i < last:
                np.maximum(x, 0.0, out=x)
        return x

    def logits(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Masked logits (``-inf`` where ``mask`` is False) of one observation or a batch."""
        z = self._forward(self._pi, np.asarray(obs, dtype=np.float64))
        return np.where(mask, z, -np.inf)

    def probs(self, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        z = self.logits(obs, mask)
        z = z - z.max(axis=-1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=-1, keepdims=True)

    def value(self, obs: np.ndarray) -> np.ndarray:
        return self._forward(self._vf, np.asarray(obs, dtype=np.float64))[..., 0]

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
        if rng is None:
            raise ConfigError("sampling an action needs an rng")
        p = self.probs(obs, mask)
        c = np.cumsum(p)
        return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(p) - 1))
