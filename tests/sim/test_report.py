"""Aggregation, summary.json, report.md and plots of openb experiments, on fabricated results."""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from gpupool.sim import report

PUBLISHED = {"fgd": 4.77, "bestfit": 7.14}


@dataclass(frozen=True)
class Result:
    """The fields of ``gpupool.sim.openb.ExperimentResult`` that the report reads."""

    policy: str
    seed: int
    unallocated_pct: np.ndarray
    frag_pct: np.ndarray
    trace: str = "default"
    nodes: int = 4
    gpus: int = 16
    wall_s: float = 1.0
    decisions: int = 100
    decision_us: np.ndarray = field(default_factory=lambda: np.arange(1.0, 101.0))
    placed: int = 90
    failed: int = 10


def curve(value: float, **points: float) -> np.ndarray:
    """A flat curve at ``value`` with chosen bins set (``b100=4.5``; NaN allowed)."""
    c = np.full(report.BINS, value, dtype=np.float64)
    for key, v in points.items():
        c[int(key[1:])] = v
    return c


def result(
    policy: str, seed: int, u100: float, *, u130: float = 1.0, frag: float = 2.0, **kw: object
) -> Result:
    return Result(policy, seed, curve(50.0, b100=u100, b130=u130), curve(frag), **kw)  # type: ignore[arg-type]


# --- point statistics ---------------------------------------------------------------------


def test_point_stat_is_mean_and_sample_sd() -> None:
    s = report.point_stat([4.0, 5.0, 6.0])
    assert s == {"mean": 5.0, "sd": 1.0, "n": 3}  # ddof=1: sqrt(((1+0+1)/2))


def test_point_stat_one_value_has_sd_zero() -> None:
    assert report.point_stat([4.25]) == {"mean": 4.25, "sd": 0.0, "n": 1}


def test_point_stat_leaves_out_nan() -> None:
    s = report.point_stat([4.0, math.nan, 6.0])
    assert s["mean"] == 5.0
    assert s["sd"] == pytest.approx(math.sqrt(2.0), abs=1e-4)
    assert s["n"] == 2


def test_point_stat_without_data_is_null() -> None:
    assert report.point_stat([math.nan, math.nan]) == {"mean": None, "sd": None, "n": 0}
    assert report.point_stat([]) == {"mean": None, "sd": None, "n": 0}


def test_point_stat_rounds_to_four_digits() -> None:
    assert report.point_stat([1 / 3])["mean"] == 0.3333


# --- curves -------------------------------------------------------------------------------


def test_curve_band_is_median_and_quartiles_per_bin() -> None:
    m = np.vstack([curve(v) for v in (1.0, 2.0, 3.0, 4.0, 5.0)])
    med, lo, hi = report.curve_band(m)
    assert med[0] == 3.0 and lo[0] == 2.0 and hi[0] == 4.0
    assert med.shape == (report.BINS,)


def test_curve_band_ignores_nan_and_keeps_empty_bins_empty() -> None:
    a = curve(1.0, b5=math.nan, b7=math.nan)
    b = curve(3.0, b7=math.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "All-NaN slice" warning escapes
        med, lo, hi = report.curve_band(np.vstack([a, b]))
    assert med[0] == 2.0
    assert med[5] == 3.0  # only b has data there
    assert math.isnan(med[7]) and math.isnan(lo[7]) and math.isnan(hi[7])


def test_curve_matrix_rejects_a_curve_of_the_wrong_length() -> None:
    bad = Result("fgd", 1, np.zeros(100), np.zeros(report.BINS))
    with pytest.raises(ValueError, match=r"fgd seed 1: unallocated_pct has shape \(100,\)"):
        report.curve_matrix([bad], "unallocated_pct")


# --- summary.json -------------------------------------------------------------------------


def fabricated() -> list[Result]:
    # Given out of order on purpose: the summary orders policies as asked and seeds ascending.
    return [
        result(
            "fgd",
            43,
            5.0,
            u130=4.0,
            frag=1.5,
            wall_s=2.0,
            decisions=110,
            decision_us=np.full(110, 30.0),
        ),
        result("bestfit", 42, 7.0, u130=6.0, frag=3.0),
        result(
            "fgd",
            42,
            4.0,
            u130=math.nan,
            frag=0.5,
            wall_s=4.0,
            decisions=100,
            decision_us=np.full(100, 10.0),
        ),
        result("bestfit", 43, 9.0, u130=8.0, frag=5.0),
        result("gpupool", 42, 3.0),
    ]


def test_summary_has_the_fixed_shape() -> None:
    s = report.summarize(
        fabricated(),
        trace="default",
        seeds=[42, 43],
        policies=["fgd", "bestfit", "gpupool"],
        published=PUBLISHED,
    )
    assert list(s)[:4] == ["trace", "nodes", "gpus", "seeds"]
    assert (s["trace"], s["nodes"], s["gpus"], s["seeds"]) == ("default", 4, 16, [42, 43])
    assert list(s["policies"]) == ["fgd", "bestfit", "gpupool"]
    for p in s["policies"].values():
        assert set(p["unallocated_gpu_pct"]) == {"100", "130"}
        assert set(p["frag_pct"]) == {"50", "80", "90"}
        for stat in [*p["unallocated_gpu_pct"].values(), *p["frag_pct"].values()]:
            assert {"mean", "sd"} <= set(stat)
        assert {"wall_s", "decisions", "decision_us"} <= set(p)
        assert set(p["decision_us"]) >= {"p50", "p99"}


def test_summary_reads_the_right_bins_over_seeds() -> None:
    s = report.summarize(fabricated(), policies=["fgd", "bestfit", "gpupool"])
    fgd = s["policies"]["fgd"]
    assert fgd["unallocated_gpu_pct"]["100"] == {"mean": 4.5, "sd": 0.7071, "n": 2}
    assert fgd["unallocated_gpu_pct"]["130"] == {"mean": 4.0, "sd": 0.0, "n": 1}  # one NaN
    assert fgd["frag_pct"]["80"] == {"mean": 1.0, "sd": 0.7071, "n": 2}
    assert s["policies"]["bestfit"]["unallocated_gpu_pct"]["100"]["mean"] == 8.0
    assert s["policies"]["gpupool"]["unallocated_gpu_pct"]["100"] == {
        "mean": 3.0,
        "sd": 0.0,
        "n": 1,
    }
    assert fgd["per_seed"]["seed"] == [42, 43]
    assert fgd["per_seed"]["unallocated_gpu_pct"]["130"] == [None, 4.0]


def test_summary_timing_fields() -> None:
    fgd = report.summarize(fabricated())["policies"]["fgd"]
    assert fgd["wall_s"] == 3.0  # mean per experiment
    assert fgd["wall_s_max"] == 4.0
    assert fgd["decisions"] == 210  # total over the seeds
    assert fgd["experiments"] == 2
    assert fgd["decisions_per_s"] == 35.0
    # pooled: 100 decisions at 10 us, 110 at 30 us
    assert fgd["decision_us"]["p50"] == 30.0
    assert fgd["decision_us"]["p99"] == 30.0
    assert fgd["placed"]["mean"] == 90.0 and fgd["failed"]["mean"] == 10.0


def test_summary_compares_with_published_figures() -> None:
    s = report.summarize(fabricated(), published=PUBLISHED)
    fgd, bestfit = s["policies"]["fgd"], s["policies"]["bestfit"]
    assert fgd["published"] == {
        "unallocated_gpu_pct": {"100": 4.77},
        "diff": -0.27,
        "within_tolerance": True,
    }
    assert bestfit["published"]["diff"] == 0.86
    assert bestfit["published"]["within_tolerance"] is False
    assert "published" not in s["policies"]["gpupool"]
    assert all("published" not in p for p in report.summarize(fabricated())["policies"].values())


def test_summary_takes_extra_fields_before_policies() -> None:
    s = report.summarize(fabricated(), extra={"tune": 1.3, "pods": 40})
    assert list(s) == ["trace", "nodes", "gpus", "seeds", "tune", "pods", "policies"]


def test_summary_refuses_mixed_clusters_and_no_results() -> None:
    with pytest.raises(ValueError, match="nodes"):
        report.summarize([result("fgd", 1, 4.0), result("fgd", 2, 4.0, nodes=5)])
    with pytest.raises(ValueError, match="no experiment results"):
        report.summarize([])


def test_summary_json_is_strict_and_round_trips() -> None:
    s = report.summarize(fabricated(), published=PUBLISHED)
    text = report.dumps_summary(s)
    assert "NaN" not in text and text.endswith("\n")
    assert json.loads(text) == s
    assert '"100": {"mean": 4.5, "sd": 0.7071, "n": 2}' in text  # leaf objects on one line


def test_summary_of_all_nan_bins_is_null() -> None:
    rs = [Result("fgd", s, curve(math.nan), curve(math.nan)) for s in (1, 2)]
    p = json.loads(report.dumps_summary(report.summarize(rs)))["policies"]["fgd"]
    assert p["unallocated_gpu_pct"]["100"] == {"mean": None, "sd": None, "n": 0}


# --- report.md ----------------------------------------------------------------------------


def test_report_sets_published_beside_ours() -> None:
    s = report.summarize(fabricated(), policies=["fgd", "bestfit", "gpupool"], published=PUBLISHED)
    md = report.render_report(s, ["a.png"])
    assert "| fgd | 4.77 | 4.50 ± 0.71 | -0.27 | ✓ | 4.00 ± 0.00 |" in md
    assert "| bestfit | 7.14 | 8.00 ± 1.41 | +0.86 | ✗ |" in md
    assert "| gpupool | – | 3.00 ± 0.00 | – | – |" in md
    assert "gpupool − fgd at 100 %: -1.50 points (gpupool is below FGD" in md
    assert "| fgd | 1.00 ± 0.71 | 1.00 ± 0.71 | 1.00 ± 0.71 |" in md  # frag 50/80/90
    assert "| fgd | 3.00 | 4.00 | 210 | 35 | 30.0 | 30.0 | 90.0 | 10.0 |" in md  # speed
    assert "![a](a.png)" in md


def test_report_without_published_figures() -> None:
    md = report.render_report(report.summarize(fabricated(), trace="gpushare40"))
    assert "No published figures for this trace." in md
    assert "| fgd | 4.50 ± 0.71 | 4.00 ± 0.00 |" in md
    assert "## Plots" not in md


# --- files --------------------------------------------------------------------------------


ORDER = ["fgd", "bestfit", "gpupool"]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    out = tmp_path_factory.mktemp("report")
    s = report.write_outputs(
        fabricated(), out, trace="default", policies=ORDER, published=PUBLISHED
    )
    return out, s


def test_write_outputs_writes_every_file(written: tuple[Path, dict[str, object]]) -> None:
    out, s = written
    assert json.loads((out / report.SUMMARY_FILE).read_text()) == s
    for name in (report.PLOT_UNALLOCATED, report.PLOT_BARS, report.PLOT_FRAG):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({name})" in (out / report.REPORT_FILE).read_text()
    rows = (out / report.CURVES_FILE).read_text().splitlines()
    assert rows[0] == "policy,seed,arrived_load_pct,unallocated_gpu_pct,frag_pct"
    assert len(rows) == 1 + 5 * report.BINS
    assert rows[1].startswith("fgd,42,0,")
    assert "fgd,42,130,,0.5" in rows  # NaN is an empty cell


def test_outputs_are_byte_identical_for_the_same_results(
    written: tuple[Path, dict[str, object]],
    tmp_path: Path,
) -> None:
    out, _ = written
    # The same experiments finishing in another order give the same bytes, plots included.
    report.write_outputs(
        list(reversed(fabricated())), tmp_path, trace="default", policies=ORDER, published=PUBLISHED
    )
    for f in sorted(out.iterdir()):
        assert f.read_bytes() == (tmp_path / f.name).read_bytes(), f.name


def test_write_outputs_without_plots(tmp_path: Path) -> None:
    report.write_outputs(fabricated(), tmp_path, plots=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [report.SUMMARY_FILE, report.REPORT_FILE, report.CURVES_FILE]
    )


def test_policy_colours_are_fixed() -> None:
    assert report.policy_color("fgd", ["x", "fgd"]) == report.policy_color("fgd", ["fgd"])
    assert report.policy_color("x", ["x", "y"]) != report.policy_color("y", ["x", "y"])
