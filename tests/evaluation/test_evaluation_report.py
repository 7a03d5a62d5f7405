"""The run directory's tables, statistics and plots (evaluation/report.py, stats.py and the
summary of pipeline.py): confidence intervals against the Student-t formula, Markdown tables,
styles that follow a scheduler's name, plots that say what they pool and measure, the per-run
/ means CSV split, and statistics that survive a failed scheduler."""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from envs.sim import DlschedError
from evaluation import kinds, report
from evaluation.config import EvaluateConfig, WorkloadConfig
from evaluation.pipeline import evaluate
from evaluation.report import (
    FIXED_STYLES,
    ci_table,
    markdown_table,
    paired_table,
    plot_cdf,
    plot_utilisation,
    seed_span,
    stack_styles,
)
from evaluation.stats import mean_ci95, paired_ci95

ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------------------------
# Confidence intervals: scipy's, equal to the Student-t formula they replace
# ---------------------------------------------------------------------------------------------

#: (sample, mean, half-width) by hand: half = t(0.975, n-1) x sd(ddof=1) / sqrt(n), with the
#: Student-t quantiles in closed form for 1 and 2 degrees of freedom (tan(0.475 pi) and
#: 0.95 sqrt(2 / (4 x 0.975 x 0.025))) and from the tables for 4
T1 = math.tan(0.475 * math.pi)  # 12.7062...
T2 = 0.95 * math.sqrt(2.0 / (4.0 * 0.975 * 0.025))  # 4.3027...
T4 = 2.7764451051977934
HAND = [
    ([1.0, 2.0, 3.0], 2.0, T2 * 1.0 / math.sqrt(3)),  # sd 1
    ([2.0, 4.0], 3.0, T1 * math.sqrt(2.0) / math.sqrt(2)),  # sd sqrt(2)
    ([10.0, 12.0, 14.0, 16.0, 18.0], 14.0, T4 * math.sqrt(10.0) / math.sqrt(5)),  # sd sqrt(10)
    ([5.0, 5.0, 5.0], 5.0, 0.0),  # no spread: a zero-width interval, not a warning
    ([1e12 + 1, 1e12 + 2, 1e12 + 3], 1e12 + 2, T2 / math.sqrt(3)),  # h not lost to cancelling
]


@pytest.mark.parametrize(("sample", "mean", "half"), HAND)
def test_mean_ci95_equals_the_hand_computed_student_t_interval(
    sample: list[float], mean: float, half: float
) -> None:
    m, h = mean_ci95(sample)
    assert m == pytest.approx(mean, rel=1e-15)
    assert h == pytest.approx(half, rel=1e-12, abs=1e-12)


def test_mean_ci95_equals_the_old_formula_on_seeded_samples() -> None:
    """The formula stats.py used before scipy's ttest_1samp, on samples of 2 to 40 values."""
    from scipy.stats import t as student_t

    rng = np.random.default_rng(38)
    for n in (2, 3, 5, 10, 31, 40):
        x = rng.lognormal(3.0, 1.0, n)
        old = float(student_t.ppf(0.975, n - 1)) * float(x.std(ddof=1)) / math.sqrt(n)
        m, h = mean_ci95(list(x))
        assert m == float(x.mean())
        assert h == pytest.approx(old, rel=1e-12)


def test_ci_edge_cases_keep_their_old_values() -> None:
    """n < 2 has no interval (nan, as before: scipy is not asked); a non-finite value gives
    a nan interval, as the old formula's nan standard deviation did."""
    m, h = mean_ci95([7.5])
    assert m == 7.5 and math.isnan(h)
    m, h = mean_ci95([1.0, math.inf])
    assert m == math.inf and math.isnan(h)
    d, h = paired_ci95([3.0], [1.0])
    assert d == 2.0 and math.isnan(h)


def test_paired_ci95_is_the_interval_of_the_differences() -> None:
    """ttest_rel's interval = the one-sample interval of a - b: by hand on a = [3, 5, 10],
    b = [1, 2, 4] (differences 2, 3, 6: mean 11/3, sd sqrt(13/3))."""
    d, h = paired_ci95([3.0, 5.0, 10.0], [1.0, 2.0, 4.0])
    assert d == pytest.approx(11 / 3, rel=1e-15)
    assert h == pytest.approx(T2 * math.sqrt(13 / 3) / math.sqrt(3), rel=1e-12)
    with pytest.raises(ValueError, match="3 values against 2"):
        paired_ci95([1.0, 2.0, 3.0], [1.0, 2.0])


# ---------------------------------------------------------------------------------------------
# Markdown tables (tabulate, GitHub format): the same cells as the hand-written tables
# ---------------------------------------------------------------------------------------------


def _cells(table: str) -> list[list[str]]:
    lines = table.splitlines()
    assert set(lines[1]) <= {"|", "-", ":"}  # the header rule
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]


def _row(stack: str, seed: str, scale: float) -> dict[str, Any]:
    row: dict[str, Any] = {"stack": stack, "paper_name": "-", "seed": seed}
    for k in ("avg_jct_s", "median_jct_s", "p95_jct_s", "p99_jct_s", "makespan_s"):
        row[k] = 1234.5678 * scale
    row.update(avg_queue_s=0.0, p95_queue_s=math.nan, mean_slowdown=2.345678)
    row.update(p95_slowdown=123.456, gpu_util_pct=92.54, wall_s=0.0123, censored_jobs=0.0)
    return row


def test_markdown_tables_keep_the_cells_of_the_hand_written_ones() -> None:
    rows = [_row("elastic:drf", "300", 1.0), _row("elastic:optimus", "300", 0.001)]
    cells = _cells(markdown_table(rows, paper=False))
    assert cells[0][:4] == ["stack", "paper name", "seed(s)", "avg JCT (s)"]
    assert cells[0][-2:] == ["GPU util %", "wall (s)"]
    # fixed point, ~4 significant digits, thousands separators; nan as "-"
    assert cells[2] == ["elastic:drf", "-", "300", "1,235", "1,235", "1,235", "1,235",
                        "0.000", "-", "2.35", "123.5", "1,235", "92.5", "0.01"]  # fmt: skip
    assert cells[3][3] == "1.23"
    mean = {**_row("elastic:drf", "mean(300,301)", 1.0), "avg_jct_s_ci95": 1.771e-3}
    for k in ("median_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s", "mean_slowdown",
              "p95_slowdown", "makespan_s", "gpu_util_pct"):  # fmt: skip
        mean[f"{k}_ci95"] = math.nan
    ci = _cells(ci_table([mean]))
    assert ci[0][:2] == ["stack", "avg JCT (s)"]
    assert ci[2][:2] == ["elastic:drf", "1,235 ± 0"]  # the CI at its mean's precision
    paired = {"stack": "b"}
    for k in ("avg_jct_s", "median_jct_s", "p95_jct_s", "p99_jct_s", "avg_queue_s",
              "mean_slowdown", "makespan_s", "gpu_util_pct"):  # fmt: skip
        paired.update({f"d_{k}": -12.5, f"d_{k}_ci95": 3.25, f"rel_{k}_pct": -4.44})
    paired["d_avg_queue_s_ci95"] = math.nan
    pc = _cells(paired_table([paired]))
    assert pc[0][:2] == ["stack", "Δ avg JCT (s)"]
    assert pc[2][:2] == ["b", "-12.50 ± 3.25 (-4.4%)"] and pc[2][5] == "-12.50 (-4.4%)"


# ---------------------------------------------------------------------------------------------
# Styles: a function of the scheduler's name
# ---------------------------------------------------------------------------------------------


def _key(style: dict[str, str]) -> tuple[str, str, str]:
    return style["color"], style["linestyle"], style["marker"]


def test_a_scheduler_keeps_its_style_whatever_the_order_of_stacks() -> None:
    one = stack_styles(["lwf1_adasrsf", "elastic:drf", "policy:runs/a/ckpt", "my_stack"])
    two = stack_styles(["my_stack", "policy:runs/a/ckpt", "elastic:drf", "lwf1_adasrsf"])
    assert one == two
    # and whatever else is plotted beside it (a registered heuristic's style is fixed)
    assert stack_styles(["elastic:drf"])["elastic:drf"] == one["elastic:drf"]
    # the headline stacks keep matplotlib's first colours, each with its own dash and marker
    head = stack_styles(["lwf1_adasrsf", "lwf1_srsf1", "ff_adasrsf", "ls_adasrsf"])
    assert [s["color"] for s in head.values()] == ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
    assert len({s["linestyle"] for s in head.values()}) == 4
    assert len({s["marker"] for s in head.values()}) == 4


def test_styles_are_distinct_and_the_same_in_every_process() -> None:
    fixed = stack_styles(list(FIXED_STYLES))
    assert len({s["color"] for s in fixed.values()}) == len(FIXED_STYLES)
    many = [f"policy:run{i}" for i in range(60)] + list(FIXED_STYLES)
    styles = stack_styles(many)
    assert len({_key(s) for s in styles.values()}) == len(many)  # never two alike in a plot
    code = (
        "from evaluation.report import stack_styles; "
        "print(sorted(stack_styles(['policy:x', 'bound:solo', 'fifo:lwf4_srsf2']).items()))"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    # str hashes are salted per process; the styles are not (and here is this process's)
    assert outs == {
        str(sorted(stack_styles(["policy:x", "bound:solo", "fifo:lwf4_srsf2"]).items())) + "\n"
    }


def test_seed_span() -> None:
    assert seed_span([300, 301, 302]) == "300-302"
    assert seed_span([7, 0, 2, 5, 6]) == "0, 2, 5-7"
    assert seed_span([4]) == "4"


# ---------------------------------------------------------------------------------------------
# Plots: what is pooled and measured, one label and style per scheduler
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures the plots would save (kept open for inspection)."""
    saved: list[Any] = []
    monkeypatch.setattr(report, "_save", lambda fig, path: saved.append(fig))
    return saved


def test_plots_say_what_they_pool_and_label_a_scheduler_alike(figures: list[Any]) -> None:
    rng = np.random.default_rng(0)
    stacks = ["lwf1_adasrsf", "elastic:drf"]
    jcts = {s: [rng.uniform(1, 100, 160) for _ in range(3)] for s in stacks}
    plot_cdf(Path("cdf.png"), jcts, "JCT CDF: workload w", seeds=[300, 301, 302])
    edges = np.linspace(0.0, 100.0, 11)
    series = {k: {s: (edges, np.full(10, 0.5)) for s in stacks} for k in (300, 301, 302)}
    plot_utilisation(Path("u.png"), series, "GPU utilisation", ylabel="GPUs allocated (%)",
                     note="what is measured")  # fmt: skip
    cdf, util = figures
    ax = cdf.axes[0]
    assert ax.get_title() == (
        "JCT CDF: workload w\njobs of seeds 300-302 pooled, 480 jobs per scheduler"
    )
    cdf_labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert cdf_labels == ["lwf1_adasrsf (LWF-1 + Ada-SRSF)", "elastic:drf"]
    styles = stack_styles(stacks)
    for line, s in zip(ax.get_lines(), stacks, strict=True):
        assert (line.get_marker(), line.get_linestyle()) == (
            styles[s]["marker"],
            styles[s]["linestyle"],
        )
    # one panel per seed; the same labels as the CDF's; the measure on the axis
    panels = [a for a in util.axes if a.get_visible()]
    assert [a.get_title() for a in panels] == ["seed 300", "seed 301", "seed 302"]
    util_labels = [t.get_text() for t in util.legends[0].get_texts()]
    assert util_labels == cdf_labels
    assert util._supylabel.get_text() == "GPUs allocated (%)"
    assert any(t.get_text() == "what is measured" for t in util.texts)


def test_cdf_names_the_job_count_of_each_scheduler_when_they_differ(figures: list[Any]) -> None:
    jcts = {"a": [np.arange(1.0, 11.0)], "b": [np.arange(1.0, 6.0)]}
    plot_cdf(Path("cdf.png"), jcts, "t", seeds=[4])
    ax = figures[0].axes[0]
    assert ax.get_title() == "t\njobs of seed 4"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a, 10 jobs", "b, 5 jobs"]


# ---------------------------------------------------------------------------------------------
# The run directory: summary.csv per run, summary_means.csv, failed schedulers
# ---------------------------------------------------------------------------------------------


def _cfg(stacks: list[str], baseline: str | None = None) -> EvaluateConfig:
    return EvaluateConfig(
        workload=WorkloadConfig(kind="ada_srsf_builtin"),
        stacks=stacks,
        seeds=[0, 1, 2],
        workers=1,  # in this process: the monkeypatched run_task below is the one called
        plot=False,
        baseline=baseline,
    )


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _no_wall(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if not k.startswith("wall_s")} for r in rows]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two schedulers that finish, on seeds 0-2: the oracle for the runs with a failure."""
    run_dir = tmp_path_factory.mktemp("clean")
    evaluate(_cfg(["lwf1_adasrsf", "lwf1_srsf1"]), run_dir, {})
    return run_dir


def test_summary_csv_holds_runs_and_summary_means_csv_the_means(clean: Path) -> None:
    runs = _csv(clean / "summary.csv")
    means = _csv(clean / "summary_means.csv")
    assert [(r["stack"], r["seed"]) for r in runs] == [
        (s, k) for s in ("lwf1_adasrsf", "lwf1_srsf1") for k in ("0", "1", "2")
    ]
    assert not any(k.endswith("_ci95") for k in runs[0])
    assert [(r["stack"], r["seed"]) for r in means] == [
        ("lwf1_adasrsf", "mean(0,1,2)"),
        ("lwf1_srsf1", "mean(0,1,2)"),
    ]
    for m in means:
        own = [float(r["avg_jct_s"]) for r in runs if r["stack"] == m["stack"]]
        mean, half = mean_ci95(own)
        assert float(m["avg_jct_s"]) == pytest.approx(mean, rel=1e-15)
        assert float(m["avg_jct_s_ci95"]) == pytest.approx(half, rel=1e-15)
    text = (clean / "summary.md").read_text()
    assert "**Units**" in text and "`paper s` = s x 100 = sim ms / 10" in text


def _fails(name: str) -> Any:
    run = kinds.run_task

    def run_task(task: Any) -> Any:
        if task.scheduler == name:
            raise RuntimeError(f"{name} cannot run")
        return run(task)

    return run_task


def test_a_scheduler_failing_on_every_seed_keeps_the_others_statistics(
    clean: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ff_adasrsf (also the baseline) raises on every seed: summary.md used to say
    "statistics over ... none" and drop the others' means, CIs and paired differences.  Now
    they appear, equal to a run without ff_adasrsf, and the failure is listed with its
    cause."""
    monkeypatch.setattr(kinds, "run_task", _fails("ff_adasrsf"))
    cfg = _cfg(["lwf1_adasrsf", "ff_adasrsf", "lwf1_srsf1"], baseline="ff_adasrsf")
    with pytest.raises(DlschedError, match=r"3 of 9 runs failed"):
        evaluate(cfg, tmp_path, {})
    text = (tmp_path / "summary.md").read_text()
    assert text.startswith("**PARTIAL**")
    assert "- `ff_adasrsf`: seed 0: RuntimeError: ff_adasrsf cannot run; seed 1:" in text
    assert "Mean ± 95% CI over 3 seeds" in text
    assert "The baseline `ff_adasrsf` failed: paired differences are against `lwf1_adasrsf`" in text
    assert "Paired difference vs `lwf1_adasrsf`" in text
    # the statistics are those of the run without the failing scheduler
    assert _no_wall(_csv(tmp_path / "summary.csv")) == _no_wall(_csv(clean / "summary.csv"))
    assert _no_wall(_csv(tmp_path / "summary_means.csv")) == _no_wall(
        _csv(clean / "summary_means.csv")
    )
    assert _csv(tmp_path / "paired.csv") == _csv(clean / "paired.csv")
    failed = _csv(tmp_path / "failed.csv")
    assert [(r["stack"], r["seed"]) for r in failed] == [("ff_adasrsf", k) for k in "012"]


def test_a_scheduler_censored_on_every_seed_keeps_the_others_statistics(
    clean: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduler that never finishes its jobs (every run censored at the horizon) used to
    censor every seed, so no scheduler had a mean; now it alone is left out of them."""
    run = kinds.run_task

    def never_finishes(task: Any) -> Any:
        out = run(task)
        if task.scheduler == "ff_adasrsf":
            out.extra["finished"] = [False] * len(out.name)
        return out

    monkeypatch.setattr(kinds, "run_task", never_finishes)
    evaluate(_cfg(["lwf1_adasrsf", "ff_adasrsf", "lwf1_srsf1"]), tmp_path, {})
    text = (tmp_path / "summary.md").read_text()
    assert "`ff_adasrsf` (censored on every seed): left out of the means" in text
    means = _csv(tmp_path / "summary_means.csv")
    assert _no_wall(means) == _no_wall(_csv(clean / "summary_means.csv"))
    assert _csv(tmp_path / "paired.csv") == _csv(clean / "paired.csv")
    assert {r["stack"] for r in _csv(tmp_path / "summary.csv")} == {
        "lwf1_adasrsf",
        "ff_adasrsf",
        "lwf1_srsf1",
    }


def test_a_mean_rows_seed_label_writes_long_runs_as_ranges() -> None:
    from evaluation.stats import seeds_label

    assert seeds_label([0, 1]) == "0,1"
    assert seeds_label([0, 1, 2]) == "0,1,2"
    assert seeds_label(list(range(300, 320))) == "300-319"
    assert seeds_label([1, 5, 6, 7, 8, 9, 11]) == "1,5-9,11"
    assert seeds_label([]) == ""
