"""A rule selector's policy file with a search: ``python -m agents.selector_search SRC OUT
[--search drained|known]`` (:func:`with_search`).

Why: the searches (:mod:`agents.rule_search`) act at decision time over a trained selector's
weights; this writes the selector's file again with its ``search`` set, so that
``evaluate.py contention:<OUT>`` runs it like any policy, and its record says where it came
from.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agents.rule_search import SEARCHES, check_search
from envs.sim.errors import ConfigError

__all__ = ["main", "with_search"]


def with_search(
    src: str, out: str, search: str = "drained", command: list[str] | None = None
) -> Path:
    """Write the rule selector of the policy file ``src`` (a file or a directory with
    ``policy.npz``) to ``out`` (a ``.npz``, or a directory for its ``policy.npz``) with
    ``search`` set: the same weights, rules and env layout; its training record is the
    source's, plus where it came from (``search_of``: the file, the search, ``command``, the
    commit and versions).  A file that is not a rule selector is one :class:`ConfigError`
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
    searched = net.with_search(check_search(search))
    dst = Path(out)
    dst = dst if dst.suffix == ".npz" else dst / "policy.npz"
    dst.parent.mkdir(parents=True, exist_ok=True)
    record = dict(meta.get("training") or {})
    made = provenance()
    made["command"] = list(command) if command is not None else made["command"]
    record["search_of"] = {"file": str(p), "search": search, **made}
    return save(dst, searched, net_meta=_episode_net_meta(searched), layout=meta["layout"],
                env=meta["env"], record=record, act=str(meta.get("act", "argmax")))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """``python -m agents.selector_search SRC OUT [--search drained]``: :func:`with_search`."""
    parser = argparse.ArgumentParser(
        prog="python -m agents.selector_search",
        description="Write a rule selector's policy file with a search (module docstring).",
    )
    parser.add_argument("src", help="a rule selector's policy file or its directory")
    parser.add_argument("out", help="the file (.npz) or directory to write")
    parser.add_argument("--search", default="drained", help=f"one of {list(SEARCHES)}")
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(raw)
    command = ["python", "-m", "agents.selector_search", *raw]  # no machine path in the file
    try:
        path = with_search(args.src, args.out, args.search, command)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path} (search: {args.search})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
