"""A rule selector's policy file with a search: ``python -m agents.selector_search SRC OUT
[--search drained|known|sampled] [--samples K] [--margin M] [--margin-by B] [--model M]``
(:func:`with_search`).

Why: the searches (:mod:`agents.rule_search`) act at decision time over a trained selector's
weights; this writes the selector's file again with its ``search`` set, so that
``evaluate.py contention:<OUT>`` runs it like any policy, and its record says where it came
from.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agents.rule_search import (
    AUTO_FAST_FROM,
    DEFAULT_SAMPLES,
    SEARCHES,
    check_margin,
    check_margin_by,
    check_model,
    check_samples,
    check_search,
)
from envs.sim.errors import ConfigError

__all__ = ["main", "with_search"]


def with_search(
    src: str,
    out: str,
    search: str = "drained",
    command: list[str] | None = None,
    samples: int = DEFAULT_SAMPLES,
    margin: float = 0.0,
    margin_by: str = "always",
    model: str = "same",
) -> Path:
    """Write the rule selector of the policy file ``src`` (a file or a directory with
    ``policy.npz``) to ``out`` (a ``.npz``, or a directory for its ``policy.npz``) with
    ``search`` set (and ``samples``, the futures per decision of ``sampled``, and
    ``margin``, the share another action must beat the selector's own by, and
    ``margin_by``, how it applies, and ``model``, the engine its rollouts run): the same
    weights, rules and env layout; its training record is the
    source's, plus where it came from (``search_of``: the file, the search, ``command``, the
    commit and versions; a source written with a search keeps its own ``search_of`` in
    ``source_search_of``).  A file that is not a rule selector is one :class:`ConfigError`
    naming it."""
    from agents.episode_pg import load_episode_pg
    from agents.policy_file import find
    from agents.policy_format import _episode_net_meta, save
    from agents.rule_selector import RuleSelector
    from envs.provenance import provenance

    p = find(src)
    net, meta = load_episode_pg(p)
    if not isinstance(net, RuleSelector):
        raise ConfigError(f"{p}: a {getattr(net, 'arch', 'mlp')!r} network, not a rule selector")
    searched = net.with_search(
        check_search(search),
        check_samples(samples),
        check_margin(margin),
        check_margin_by(margin_by),
        check_model(model),
    )
    dst = Path(out)
    dst = dst if dst.suffix == ".npz" else dst / "policy.npz"
    dst.parent.mkdir(parents=True, exist_ok=True)
    record = dict(meta.get("training") or {})
    made = provenance()
    made["command"] = list(command) if command is not None else made["command"]
    # the search's settings as the policy's own description keeps them (each only where set)
    kept = searched.describe()
    what: dict[str, Any] = {"search": search}
    what.update({k: kept[k] for k in ("samples", "margin", "margin_by", "model") if k in kept})
    prior = record.get("search_of")
    record["search_of"] = {"file": str(p), **what, **made}
    if prior:  # the source was itself written with a search: where it came from is kept
        record["search_of"]["source_search_of"] = prior
    return save(dst, searched, net_meta=_episode_net_meta(searched), layout=meta["layout"],
                env=meta["env"], record=record, act=str(meta.get("act", "argmax")))  # fmt: skip


def _int(text: str) -> Any:
    """``text`` as an int if it is one, else as given (:func:`check_samples` names it)."""
    try:
        return int(text)
    except ValueError:
        return text


def _float(text: str) -> Any:
    """``text`` as a float if it is one, else as given (:func:`check_margin` names it)."""
    try:
        return float(text)
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    """``python -m agents.selector_search SRC OUT [--search drained]``: :func:`with_search`."""
    parser = argparse.ArgumentParser(
        prog="python -m agents.selector_search",
        description="Write a rule selector's policy file with a search (module docstring).",
    )
    parser.add_argument("src", help="a rule selector's policy file or its directory")
    parser.add_argument("out", help="the file (.npz) or directory to write")
    parser.add_argument("--search", default="drained", help=f"one of {list(SEARCHES)}")
    parser.add_argument(
        "--samples",
        default=DEFAULT_SAMPLES,
        help=f"futures per decision of the sampled search (default {DEFAULT_SAMPLES})",
    )
    parser.add_argument(
        "--margin",
        default=0.0,
        help="share of the selector's own value another action must beat it by (default 0)",
    )
    parser.add_argument(
        "--margin-by",
        default="always",
        help="how the margin applies before the last arrival: always (in full) or arrivals "
        "(scaled by the arrivals expected while a job runs; default always)",
    )
    parser.add_argument(
        "--model",
        default="same",
        help="the engine the rollouts run: same (the run's fidelity), fast (FAST fidelity "
        f"whatever the run's) or auto (FAST where it merges {AUTO_FAST_FROM} or more iterations "
        "a step, the run's below; default same)",
    )
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(raw)
    command = ["python", "-m", "agents.selector_search", *raw]  # no machine path in the file
    try:
        path = with_search(
            args.src,
            args.out,
            args.search,
            command,
            _int(args.samples),
            _float(args.margin),
            args.margin_by,
            args.model,
        )
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    extra = f", {args.samples} samples" if args.search == "sampled" else ""
    extra += f", margin {float(args.margin):g}" if float(args.margin) else ""
    extra += f" by {args.margin_by}" if args.margin_by != "always" else ""
    extra += f", {args.model} model" if args.model != "same" else ""
    print(f"wrote {path} (search: {args.search}{extra})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
