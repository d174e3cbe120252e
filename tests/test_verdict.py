"""The one judge of the reproductions (ssdlab.studies.verdict): its verdicts at the band's edges,
for every kind of claim, and the shipped reports' use of it."""

import ast
import importlib
import json
import math
from pathlib import Path

import pytest

from ssdlab.studies.verdict import (LARGER, NO_EFFECT, NOT_MEASURED, NOT_REPRODUCED, OPPOSITE, REPRODUCED, SMALLER, Claim,
                                    Estimate, Verdicts, Why, check_saved, judge, judge_qualitative, table)

ROOT = Path(__file__).resolve().parents[1]


def one(x):
    """One seed: no interval."""
    return Estimate.of([x])


@pytest.mark.parametrize("r, want", [
    (1.0 + 0.3 * 0.75, REPRODUCED),  # e = 0.75 exactly: the band's lower edge is in
    (1.0 + 0.3 * 0.7499, SMALLER),
    (1.0 + 0.3 * 1.25, REPRODUCED),  # e = 1.25: the upper edge is in
    (1.0 + 0.3 * 1.2501, LARGER),
    (1.07, SMALLER),  # flashblox's 1.07x against the document's 1.3x
    (1.3, REPRODUCED),
    (0.9, OPPOSITE),
    (1.0, NO_EFFECT),
])
def test_ratio_verdicts_at_the_band_edges(r, want):
    assert judge(Claim("throughput, channel / die", 1.3, "ratio"), one(r)).verdict == want


@pytest.mark.parametrize("q, want", [
    (-0.747, REPRODUCED), (-0.747 * 0.75, REPRODUCED), (-0.747 * 0.7499, SMALLER), (-0.747 * 1.25, REPRODUCED),
    (-0.747 * 1.2501, LARGER), (-0.09, SMALLER), (0.019, OPPOSITE), (0.0, NO_EFFECT),
])
def test_relative_change_verdicts(q, want):
    # lsm-deletion's -9% against the published -74.7% is "smaller", not met.
    assert judge(Claim("WA, zone-aware vs FADE", -0.747, "change"), one(q)).verdict == want


def test_a_positive_change_judged_the_same_way():
    c = Claim("motivation throughput", 0.108, "change")
    assert judge(c, one(0.208)).verdict == LARGER  # +20.8% against +10.8%: e = 1.93
    assert judge(c, one(0.12)).verdict == REPRODUCED


def test_no_effect_when_the_interval_includes_no_change():
    c = Claim("p99 write, non-FDP / FDP", 10.0, "ratio")
    wide = Estimate.of([0.9, 1.3, 1.05])
    assert wide.lo < 1.0 < wide.hi
    assert judge(c, wide).verdict == NO_EFFECT
    assert judge(c, Estimate.of([1.2, 1.25, 1.22])).verdict == SMALLER
    # The other side, its interval clear of 1: opposite.
    assert judge(c, Estimate.of([0.8, 0.82, 0.81])).verdict == OPPOSITE


def test_estimate_is_the_mean_with_a_student_t_interval():
    e = Estimate.of([1.0, 2.0, 3.0])
    assert e.mean == 2.0 and e.n == 3
    # t(0.975, 2) = 4.3027; sd = 1; half width = 4.3027 / sqrt(3)
    assert math.isclose(e.hi - e.mean, 4.302652729749462 / math.sqrt(3), rel_tol=1e-9)
    assert Estimate.of(5.0).lo is None and Estimate.of([5.0]).n == 1


def test_fraction_and_value_claims():
    share = Claim("batch bandwidth lost to channel isolation", 0.36, "fraction")
    assert judge(share, one(0.30)).verdict == REPRODUCED
    assert judge(share, one(0.20)).verdict == SMALLER
    bw = Claim("migration bandwidth", 78.9, "value", unit="MB/s")
    assert judge(bw, one(78.9 * 0.76)).verdict == REPRODUCED
    assert judge(bw, one(78.9 * 1.3)).verdict == LARGER
    assert judge(bw, one(78.9 * 0.5)).verdict == SMALLER
    assert "MB/s" in judge(bw, one(60.0)).ours_text()


def test_bounds_hold_or_fall_short():
    life = Claim("lifetime with rotation", 0.95, "fraction", bound="at_least")
    assert judge(life, one(0.95)).verdict == REPRODUCED
    assert judge(life, one(0.99)).verdict == REPRODUCED  # a lower bound has no upper edge
    assert judge(life, one(0.90)).verdict == SMALLER
    tail = Claim("search p99 cut", 2.0, "ratio", bound="at_least")
    assert judge(tail, one(2.5)).verdict == REPRODUCED
    assert judge(tail, one(1.5)).verdict == SMALLER
    assert judge(tail, one(0.8)).verdict == OPPOSITE
    cpu = Claim("layer CPU cost", 0.06, "change", bound="at_most")
    assert judge(cpu, one(0.02)).verdict == REPRODUCED
    assert judge(cpu, one(-0.01)).verdict == REPRODUCED
    assert judge(cpu, one(0.10)).verdict == LARGER
    months = Claim("lifetime without swaps", 4.0, "value", unit="months", bound="at_most")
    assert judge(months, one(3.1)).verdict == REPRODUCED
    assert judge(months, one(5.0)).verdict == LARGER


def test_a_failed_bound_is_named_by_its_effect_size():
    # "reduces by at least 50%": -30% falls short (smaller), +10% goes the other way.
    cut = Claim("reduction", -0.5, "change", bound="at_most")
    assert judge(cut, one(-0.7)).verdict == REPRODUCED
    assert judge(cut, one(-0.3)).verdict == SMALLER
    assert judge(cut, one(0.1)).verdict == OPPOSITE
    # A ratio bound below 1: "at least 0.5x" (no more than halves); 0.3x halves more than that.
    assert judge(Claim("kept", 0.5, "ratio", bound="at_least"), one(0.3)).verdict == LARGER


def test_ratios_and_changes_average_on_the_log_scale():
    r = judge(Claim("speedup", 2.0, "ratio"), [1.0, 4.0]).ours
    assert math.isclose(r.mean, 2.0) and r.scale == "log" and r.lo > 0  # the geometric mean; never below 0
    c = judge(Claim("latency change", -0.1, "change"), [-0.9, -0.2, -0.5]).ours
    assert c.scale == "log1p" and c.lo > -1.0  # a change never goes below -100%
    assert judge(Claim("share", 0.36, "fraction"), [0.2, 0.4]).ours.scale == "linear"


def test_undefined_samples_are_left_out_and_said():
    j = judge(Claim("speedup", 2.0, "ratio"), [2.0, float("inf"), 2.2])
    assert j.ours.n == 3 and j.ours.undefined == 1 and j.verdict == REPRODUCED
    assert "1 undefined, left out" in j.ours_text()
    assert judge(Claim("speedup", 2.0, "ratio"), [float("nan")]).verdict == NOT_MEASURED


def test_identical_seeds_are_said_to_be_identical():
    j = judge(Claim("p99 read gain", 1.75, "ratio"), [1.78, 1.78, 1.78])
    assert j.verdict == REPRODUCED and "3 seeds (identical)" in j.ours_text()


def test_qualitative_claims_need_the_measurement_that_decides_them():
    c = Claim("no deleted value on the NAND after erase-level persistence", None, "qualitative")
    assert judge_qualitative(c, True, "0 of 4096 deleted values found").verdict == REPRODUCED
    assert judge_qualitative(c, False, "3 of 4096 deleted values found").verdict == NOT_REPRODUCED
    with pytest.raises(ValueError):
        judge_qualitative(c, True, "")
    with pytest.raises(ValueError):
        judge(c, 1.0)


def test_not_measured_and_malformed_claims():
    c = Claim("x", 1.3, "ratio")
    assert judge(c, None).verdict == NOT_MEASURED
    assert judge(c, one(float("nan"))).verdict == NOT_MEASURED
    with pytest.raises(ValueError):
        Claim("x", 1.0, "ratio")  # no effect to compare with
    with pytest.raises(ValueError):
        Claim("x", 0.0, "change")
    with pytest.raises(ValueError):
        Claim("x", 1.0, "ratio", bound="at_least")  # a bound at no change has no effect size either
    with pytest.raises(ValueError):
        Claim("x", 0.0, "value")
    with pytest.raises(ValueError):
        Claim("x", 1.2, "speedup")  # type: ignore[arg-type]


def test_an_explanation_without_a_measured_quantity_cannot_be_built():
    with pytest.raises(ValueError):
        Why("The DPU cores are busy compressing.", "")
    w = Why("Reads wait behind programs on shared dies.", "die busy 71%")
    assert w.render().endswith("(measured: die busy 71%)")


def test_saved_verdicts_are_rechecked_by_the_judge(tmp_path):
    v = Verdicts("demo", "quick")
    v.add(Claim("a ratio", 1.3, "ratio", headline=True), [1.05, 1.08, 1.07], Why("Symmetric tenants.", "die utilisation 0.41 / 0.42"))
    v.add_qualitative(Claim("deleted data gone", None, "qualitative"), True, "0 survivors")
    path = v.save(tmp_path)
    assert check_saved(path) == []
    doc = json.loads(path.read_text())
    doc["claims"][0]["verdict"] = "reproduced"  # a verdict written by hand
    path.write_text(json.dumps(doc))
    assert check_saved(path) and "the judge says 'smaller'" in check_saved(path)[0]
    doc["claims"][0]["verdict"] = "smaller"
    doc["claims"][0]["ours"]["samples"] = []  # an estimate typed in by hand
    path.write_text(json.dumps(doc))
    assert "without its samples" in check_saved(path)[0]
    doc["claims"][0]["ours"]["samples"] = [1.05, 1.08, 1.07]
    doc["claims"][1]["measured"] = ""  # a qualitative verdict with nothing behind it
    path.write_text(json.dumps(doc))
    assert len(check_saved(path)) == 1 and "deleted data gone" in check_saved(path)[0]
    lines = table(v.judged)
    assert lines[2].count("|") == 7 and "**smaller**" in lines[2] and "3 seeds" in lines[2]


def test_the_headline_table_refuses_verdicts_the_judge_would_not_give(tmp_path):
    from ssdlab.studies.reproduce import headline

    v = Verdicts("demo", "quick")
    v.add(Claim("a ratio", 1.3, "ratio", headline=True), [1.05, 1.08, 1.07])
    (tmp_path / "demo").mkdir()
    path = v.save(tmp_path / "demo")
    lines, _ = headline(tmp_path)
    assert len(lines) == 3 and "**smaller**" in lines[2]
    doc = json.loads(path.read_text())
    doc["claims"][0]["verdict"] = "reproduced"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="not the judge's"):
        headline(tmp_path)


# ---------------------------------------------------------------------------------------------
# Every study's report takes its verdicts from the judge, and nothing else writes one.


def _study_sources():
    return sorted((ROOT / "python" / "ssdlab" / "studies").rglob("*.py"))


def test_no_hand_written_verdict_in_the_package():
    """No string in the package says "met" or "missed" as a verdict, or spells a verdict of the
    judge's vocabulary in bold by hand: verdict words come from ssdlab.studies.verdict."""
    bad = []
    for path in (ROOT / "python" / "ssdlab").rglob("*.py"):
        if path.name == "verdict.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                s = node.value
                if s.strip() in ("met", "missed", "**missed**", "**met**") or "met:" in s or "**missed**" in s \
                        or any(f"**{w}**" in s for w in ("reproduced", "smaller", "larger", "no effect", "opposite")):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {s[:60]!r}")
    assert not bad, "hand-written verdicts:\n" + "\n".join(bad)


def test_every_study_is_registered_with_its_files_by_role():
    from ssdlab.studies import PACKAGES, all_studies

    studies = all_studies()
    assert [s.package.rsplit(".", 1)[1] for s in studies] == list(PACKAGES)
    for s in studies:
        folder = ROOT / "python" / "ssdlab" / "studies" / s.package.rsplit(".", 1)[1]
        assert (folder / "experiment.py").exists() and (folder / "report.py").exists(), s.name
        assert (folder / "cli.py").exists() == bool(s.commands), s.name
        assert (ROOT / "experiments" / s.name / "experiment.toml").exists(), s.name
        module, _, func = s.load_experiment().report.partition(":")
        assert module == f"{s.package}.report" and callable(getattr(importlib.import_module(module), func)), s.name
