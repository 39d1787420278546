"""The learning curve as a picture: per metric, each seed's champion minus v0 after every cycle (95% intervals),
cycle 0 being v0 itself. PNG or SVG, by the file's name (matplotlib, no display)."""

from __future__ import annotations

from pathlib import Path

PANELS = (("edit_persistence_rate", "edit persistence"), ("dissatisfied_followup_rate", "dissatisfied follow-ups"),
          ("broken_tool_call_rate", "broken tool calls"))


def plot_curve(result: dict, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.6), constrained_layout=True)
    per_cycle = result["curve"]["per_cycle"]
    seeds = result["seeds"]
    for ax, (metric, title) in zip(axes, PANELS):
        for k, seed in enumerate(seeds):
            xs, ys, lo, hi = [0.0], [0.0], [0.0], [0.0]
            for row in per_cycle:
                entry = next((s for s in row["seeds"] if s["seed"] == seed), None)
                if entry is None:
                    continue
                d = (entry["vs_v0"] or {}).get(metric) or {"diff": 0.0, "ci_low": 0.0, "ci_high": 0.0}
                if d.get("diff") is None:
                    continue
                xs.append(row["cycle"] + (k - (len(seeds) - 1) / 2) * 0.08)
                ys.append(100 * d["diff"])
                lo.append(100 * (d["diff"] - d["ci_low"]))
                hi.append(100 * (d["ci_high"] - d["diff"]))
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", ms=3, capsize=2, lw=1, label=f"seed {seed}")
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(f"{title}: champion − v0")
        ax.set_xlabel("cycle")
        ax.set_ylabel("percentage points")
        ax.set_xticks(range(0, result["cycles"] + 1))
    axes[0].legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
