"""lsm-deletion's runs as the report and its figures read them: a finished run (``Run``) and
its row of lsm-deletion.csv (``row``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional


class Run:
    """One finished run: its policy, delete share, seed, summary and directory."""

    def __init__(self, name: str, policy: str, d: float, seed: int, s: Dict[str, Any], directory: Path) -> None:
        self.name, self.policy, self.d, self.seed, self.s, self.dir = name, policy, d, seed, s, directory

    @property
    def c(self) -> Dict[str, Any]:
        return self.s["counters"]

    @property
    def wa(self) -> float:
        return float(self.s["write_amplification"]["total"])

    def level(self, which: str) -> Dict[str, Any]:
        return self.s["deletion_persistence"][which]

    @property
    def ttl_compactions(self) -> int:
        return int(self.s["lsm"]["compactions_ttl"])

    @property
    def expired_first(self) -> int:
        """Saturation-started compactions that took an expired tombstone file first."""
        return int(self.s["lsm"]["compactions_expired_first"])

    def first_ttl_s(self) -> Optional[float]:
        """FADE's first-level TTL d_0 with the tree as it is at the end of the run (levels in
        use L): D_th (T-1) / (T^(L-1) - 1)."""
        levels = self.s["space"]["levels"]
        used = max((i + 1 for i, lv in enumerate(levels) if lv["files"]), default=0)
        t = float(self.s["lsm_config"]["size_ratio"])
        if used < 2:
            return None
        return self.s["delete_threshold_ns"] / 1e9 * (t - 1) / (t ** (used - 1) - 1)

    def flush_interval_s(self) -> float:
        return float(self.s["sim_seconds"]) / max(1, int(self.s["lsm"]["flushes"]))


def row(r: Run) -> Dict[str, Any]:
    """A run's figures, as lsm-deletion.csv has them."""
    s, c, wa, p = r.s, r.c, r.s["write_amplification"], r.s["deletion_persistence"]
    ph = {x["name"]: x for x in s["phases"]}

    def lat(phase: str, q: str) -> float:
        g = ph.get(phase, {}).get("latency_ns", {}).get("get", {})
        return g.get(q, 0) / 1e3

    def at_least_erase(phase: str) -> float:
        return float(ph.get(phase, {}).get("latency_ns", {}).get("get", {}).get("at_least_erase", 0.0))

    lsm, er = p["lsm_level"], p["erase_level"]
    a = s.get("audit") or {}
    return {
        "run": r.name, "policy": r.policy, "delete_fraction": r.d, "seed": r.seed,
        "delete_threshold_s": s["delete_threshold_ns"] / 1e9, "sim_seconds": s["sim_seconds"],
        "app_write_bytes": c["app_write_bytes"], "compaction_write_bytes": c["compaction_write_bytes"],
        "gc_migrated_bytes": c["gc_migrated_bytes"], "nand_write_bytes": c["nand_write_bytes"],
        "wa_total": wa["total"], "wa_lsm": wa["lsm"], "wa_zone_layer": wa["zone_layer"], "dlwa": wa["device_dlwa"],
        "space_amplification": s["space"]["space_amplification"], "zone_resets": c["zone_resets"],
        "compactions_ttl": s["lsm"]["compactions_ttl"], "compactions_saturation": s["lsm"]["compactions_saturation"],
        "compactions_expired_first": s["lsm"]["compactions_expired_first"],
        "deletes": p["deletes"], "lsm_within_dth": lsm["fraction_within_threshold"],
        "lsm_p99_s": lsm["p99_ns"] / 1e9 if lsm["p99_ns"] is not None else float("inf"),
        "lsm_not_persisted": lsm["not_persisted_by_end"], "erase_within_dth": er["fraction_within_threshold"],
        "erase_p50_s": er["p50_ns"] / 1e9 if er["p50_ns"] is not None else float("inf"),
        "erase_not_persisted": er["not_persisted_by_end"],
        "audit_survivors_erase_persisted": a.get("survivors_erase_persisted", ""),
        "audit_survivors_not_erased": (a.get("survivors_pending", 0) + a.get("survivors_lsm_persisted", 0)) if a else "",
        "read_p50_us_phase2": lat("mixed", "p50"), "read_p99_us_phase2": lat("mixed", "p99"),
        "read_p50_us_phase3": lat("lookups", "p50"), "read_p99_us_phase3": lat("lookups", "p99"),
        "reads_at_least_erase_phase2": at_least_erase("mixed"), "reads_at_least_erase_phase3": at_least_erase("lookups"),
    }
