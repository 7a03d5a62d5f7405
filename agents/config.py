"""The learner's typed config (``agent.*`` of ``train.py``; ``conf/agent/*.yaml``), read by
:func:`agents.build.build_agent`.  The training run's schema around it (env, pretraining,
validation, federated clusters) is :mod:`training.config`."""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.cem import CEMConfig
from agents.expert_iteration import ExpertConfig
from agents.exploration import ExplorationConfig
from agents.group import GroupConfig
from agents.learners import LEARNERS
from agents.plan_a2c import PlanA2CConfig
from agents.policy import PolicyConfig
from agents.replay import ReplayConfig
from agents.selector_distill import DistillConfig

__all__ = ["ALGOS", "AgentConfig", "ContentionPGConfig", "PPOConfig", "PlanPGConfig"]

#: Agent algorithms ``train.py`` knows (``agent.algo``): the learner registry's names.
ALGOS = tuple(LEARNERS)


@dataclass
class PPOConfig:
    """PPO/MaskablePPO-only settings (SB3's meaning)."""

    batch_size: int = 256
    n_epochs: int = 4
    clip_range: float = 0.2
    gae_lambda: float = 0.95


@dataclass
class PlanPGConfig:
    """``plan_pg`` only (:mod:`training.plan`): the slot's plan as one action
    (``dlsched/ClusterPlan-v0``), :class:`~agents.episode_pg.EpisodePG` over it. ``iterations``
    of ``groups`` workloads x ``group_size`` rollouts; rollouts mix in ``epsilon`` uniform;
    validation every ``val_every`` iterations (and at the start and the end); the clone of
    ``pretrain.teacher``'s plan: ``bc_epochs`` epochs, label smoothing ``bc_smoothing`` (so that
    rollouts still try the other plans); ``arch``: ``mlp`` (the flat
    :class:`~agents.episode_pg.MaskedMLP`, welded to the training window ``J``) or ``set``
    (:class:`~agents.set_plan.SetPlanNet`: one set of weights for any window and cluster);
    ``relative``: advantages relative to each workload's mean return
    (:class:`~agents.episode_pg.EpisodePGConfig`; for a mixture of settings); ``hidden``: the
    network's widths; ``plans``: the action set, one label per plan (``esrtf``,
    ``"esrtf(efficiency=0.85)"``, :func:`~envs.gym.plan_env.parse_plan`); empty:
    :data:`~envs.gym.plan_env.DEFAULT_PLANS`; ``workers``: processes the rollouts are split over
    (:class:`~agents.rollout_pool.RolloutPool`; the results are the same for any number, bit for
    bit, unless ``lockstep``: then each worker runs its share of the rollouts side by side, one
    batched forward per step, and the numbers depend on the count; the update stays on
    ``torch_threads``: on 2 threads its float sums differ in the last bits and a run drifts from
    the 1-thread run after ~20 iterations); ``epochs``: PPO passes over each iteration's
    decisions."""

    iterations: int = 24
    groups: int = 4
    group_size: int = 8
    epsilon: float = 0.0
    val_every: int = 4
    bc_epochs: int = 30
    bc_smoothing: float = 0.3
    arch: str = "mlp"
    relative: bool = False
    hidden: int = 128
    plans: list[str] = field(default_factory=list)
    workers: int = 2
    lockstep: bool = False
    epochs: int = 4


@dataclass
class ContentionPGConfig:
    """``contention_pg`` only (:mod:`training.contention`): :class:`~agents.episode_pg.EpisodePG`
    acting in ``dlsched/Contention-v0`` (the env: ``train.py``'s ``contention`` block).
    ``teacher``: the registered rule the network clones first
    (:data:`~envs.gym.contention_env.CONTENTION_TEACHERS`; ``none``: random weights), on
    ``bc_workloads`` workloads drawn from [10,000, 2^31) for ``bc_epochs`` epochs with label
    smoothing ``bc_smoothing``; then ``iterations`` of ``groups`` workloads x ``group_size``
    rollouts that mix in ``epsilon`` uniform at ``temperature``; validation every
    ``val_every`` iterations; ``hidden``: the network's widths; ``workers``: rollout
    processes (the same numbers for any count); ``arch``: ``mlp`` (the flat
    :class:`~agents.episode_pg.MaskedMLP`, welded to the training cluster and window) or
    ``set`` (:class:`~agents.set_contention.SetContentionNet`: one set of weights for any
    cluster and window).  The defaults are those that made the released
    ``contention_exclusive_pg`` but ``bc_epochs`` (20 there: ``policies/README.md`` gives the
    one ``train.py`` command that re-makes it)."""

    teacher: str = "exclusive"
    bc_workloads: int = 40
    bc_epochs: int = 30
    bc_smoothing: float = 0.0
    iterations: int = 12
    groups: int = 4
    group_size: int = 8
    epsilon: float = 0.05
    temperature: float = 1.0
    val_every: int = 3
    hidden: int = 128
    workers: int = 1
    arch: str = "mlp"


@dataclass
class AgentConfig:
    """One learner.  ``algo``: ``dl2_a2c`` (DL²'s actor-critic; ``critic: false`` makes it
    REINFORCE with a moving-average baseline), ``ppo`` (SB3, no masks: invalid actions are the
    env's counted no-ops), ``maskable_ppo`` (sb3-contrib), ``group_ppo``
    (:class:`agents.group.GroupPPO`: batched episodes, input-driven baseline, anchor;
    settings in ``group``), ``plan_pg`` (one action per slot picks the allocator that plans
    it: :mod:`training.plan`; settings in ``plan``, with ``learning_rate`` and
    ``ent_coef``), ``plan_a2c`` (DL²'s actor-critic over the slot's plan: ``plan_pg``'s
    pipeline with a critic, replay and job-aware exploration, :mod:`agents.plan_a2c`;
    settings in ``plan`` and ``a2c``), ``expert_iteration`` (a rollout search labels the
    policy's own decisions, the policy is distilled from it, in either env:
    :mod:`agents.expert_iteration`; settings in ``expert`` and the env's block),
    ``contention_pg``
    (EpisodePG in ``dlsched/Contention-v0``: :mod:`training.contention`; settings in
    ``contention``), ``cem`` (the cross-entropy method over a rule selector in
    ``dlsched/Contention-v0``: :mod:`agents.cem`; settings in ``cem`` and ``contention``),
    ``distill`` (a searched rule selector's choices distilled into its weights:
    :mod:`agents.selector_distill`; settings in ``distill``, ``cem.rules`` and ``contention``).
    The rest as in
    :class:`agents.dl2.DL2A2C` / SB3."""

    name: str = "a2c"
    algo: str = "dl2_a2c"
    learning_rate: float = 3e-4  # DL²: 1e-4 (over ~10^5-10^6 updates; ours are short runs)
    n_steps: int = 256  # decisions per env between updates
    gamma: float = 0.99
    ent_coef: float = 0.01  # DL²: 0.1 x mean over actions = 0.0016 per sample at J=20
    vf_coef: float = 0.5
    max_grad_norm: float = 10.0
    returns: str = "slot"  # DL²'s rule; "discounted" = r_slot + gamma V(next slot)
    critic: bool = True  # False: REINFORCE (moving-average baseline, no critic)
    baseline_momentum: float = 0.99
    gradient_steps: int = 1
    normalize_advantage: bool = False
    exploration: ExplorationConfig = field(default_factory=ExplorationConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)  # correction "none" = DL²'s code
    policy: PolicyConfig = field(default_factory=PolicyConfig)  # arch mlp | per_job
    ppo: PPOConfig = field(default_factory=PPOConfig)
    group: GroupConfig = field(default_factory=GroupConfig)
    plan: PlanPGConfig = field(default_factory=PlanPGConfig)
    a2c: PlanA2CConfig = field(default_factory=PlanA2CConfig)  # plan_a2c's ingredients
    expert: ExpertConfig = field(default_factory=ExpertConfig)  # expert_iteration's search
    cem: CEMConfig = field(default_factory=CEMConfig)  # cem's search over a rule selector
    distill: DistillConfig = field(default_factory=DistillConfig)  # a selector's search distilled
    contention: ContentionPGConfig = field(default_factory=ContentionPGConfig)
