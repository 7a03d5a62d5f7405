"""How far a guessed future is from the real one, for the rule selector's searches.

Usage::

    python benchmarks/search_model_error.py                 # seed 500, every 20th decision
    python benchmarks/search_model_error.py --seed 501 --every 10 --futures 4

On a paper-scale workload (fast fidelity) followed by the selector of ``--policy`` (default
the released ``policies/contention_selector``), at every ``--every``-th decision before the
last arrival where the rules' actions differ: each candidate's value (avg JCT, s) rolled out
on the real future (a deep copy of the env that keeps the jobs still to arrive: a
clairvoyant check, not a search), on ``--futures`` sampled futures
(:func:`agents.rule_search.sample_futures`, as ``search: sampled``) and on the known jobs
alone (as ``search: known``).  Then the counts: where another candidate is better than the
selector's own on the real future, and whether the guessed futures agree on the sign.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from tabulate import tabulate

import agents.rule_search as rs
from agents.episode_pg import load_episode_pg
from agents.policy_file import find
from agents.rule_selector import RuleSelector
from envs.gym.contention_env import ContentionEnv

ROOT = Path(__file__).resolve().parents[1]
RELEASED = ROOT / "policies" / "contention_selector" / "policy.npz"


def _real_future(env: ContentionEnv) -> list[Any]:
    """The jobs of ``env``'s episode still to arrive, as they will (the clairvoyant check:
    a rollout given these is the run that kept them, ``tests/sim/test_decisions.py``)."""
    sim = env.sim
    assert sim is not None
    return [j.spec for j in sim.jobs if j.spec.submit_ms > sim.now]


def measure(
    path: Path, seed: int, every: int, k: int
) -> list[tuple[int, int, list[float], list[list[float]], list[float]]]:
    """Per checked decision: its index, the jobs still to arrive, the candidates' values on
    the real future, on each sampled future (candidate-major) and on the known jobs."""
    net, meta = load_episode_pg(path)
    if not isinstance(net, RuleSelector):
        raise SystemExit(f"{path}: not a rule selector")
    lay: dict[str, Any] = meta["env"]
    env = ContentionEnv(scale="paper", fidelity="fast", comm=lay["comm"], J=lay["J"],
                        placements=lay["placements"])  # fmt: skip
    env.reset(seed=seed)
    out = []
    i = 0
    while not env.done and not rs.drained(env):
        cands = rs.candidates(net, env)
        if i % every == every // 2 and len(cands) > 1:
            futures = rs.sample_futures(env, k)
            if futures is not None:
                truth = _real_future(env)
                real = [rs.rollout_value(net, env, c, truth) for c in cands]
                guessed = [[rs.rollout_value(net, env, c, f) for f in futures] for c in cands]
                known = [rs.rollout_value(net, env, c) for c in cands]
                out.append((i, int(env.jobs_to_arrive()), real, guessed, known))
                print(f"decision {i}: {len(cands)} candidates checked", flush=True)
        env.step(net.base_act(env))
        i += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", type=Path, default=RELEASED, help="a rule selector's file")
    ap.add_argument("--seed", type=int, default=500, help="workload seed (default: validation)")
    ap.add_argument("--every", type=int, default=20, help="check every n-th decision")
    ap.add_argument("--futures", type=int, default=4, help="sampled futures per decision")
    args = ap.parse_args()
    th.set_num_threads(1)
    rows = measure(find(args.policy), args.seed, args.every, args.futures)
    table, below, level, above, differ, disagree, agree, wrong = [], 0, 0, 0, 0, 0, 0, 0
    for i, left, real, guessed, known in rows:
        best_other = min(real[1:])
        below += best_other < real[0] - 1e-9
        level += abs(best_other - real[0]) <= 1e-9
        above += best_other > real[0] + 1e-9
        j = 1 + int(np.argmin([np.mean(g) for g in guessed[1:]]))  # the guesses' best other
        d = np.array(guessed[j]) - np.array(guessed[0])
        if np.any(np.abs(d) > 1e-9):
            differ += 1
            if np.all(d < 0) or np.all(d > 0):
                agree += 1
                wrong += (d[0] < 0) != (real[j] < real[0])
            else:
                disagree += 1
        cells = [" ".join(f"{v:.0f}" for v in real), " ".join(f"{x:+.0f}" for x in d),
                 " ".join(f"{v:.0f}" for v in known)]  # fmt: skip
        table.append([i, left, *cells])
    heads = ["decision", "to arrive", "real future (own first)", "guessed: other - own",
             "known jobs"]  # fmt: skip
    print(tabulate(table, headers=heads, tablefmt="github"))
    print(f"\nreal future, best other candidate vs the selector's own: below at {below}, "
          f"level at {level}, above at {above} of {len(rows)} decisions")  # fmt: skip
    print(f"guessed futures: the candidates differ at {differ}; the futures disagree on the "
          f"sign at {disagree}; all agree at {agree}, wrongly at {wrong}")  # fmt: skip


if __name__ == "__main__":
    main()
