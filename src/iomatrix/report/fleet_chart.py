"""The HTML report's host × configuration heat map (report/fleet.py), rendered like the other charts
(report/charts.py: matplotlib's SVG backend, text as text, stable ids)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from iomatrix.report.charts import _svg, plt

# The colour scale's worst end: a configuration at this share of a host's best (or worse) is drawn
# darkest.
FLOOR = 0.5


def share_of_best(ratio: float | None, higher_is_better: bool) -> float | None:
    """How much of the host's best a configuration gives, in (0, 1]: the ratio itself when higher is
    better, its inverse when lower is better (a latency twice the best's gives half of it)."""
    if ratio is None or not math.isfinite(ratio) or ratio <= 0:
        return None
    return min(1.0, ratio if higher_is_better else 1.0 / ratio)


def fleet_heat_map(
    hosts: Sequence[str],
    configurations: Sequence[str],
    heat: Mapping[str, Mapping[str, float]],
    higher_is_better: bool,
    choice: str | None,
) -> str:
    """Rows: configurations (in the fleet ranking's order); columns: hosts; each square the
        configuration's ratio
    to the host's own best, written in it and coloured by the share of the best it gives (white: the
    best; darker: further from it; grey with '–': not ranked on that host). The group's choice is
    outlined."""
    from matplotlib.colors import LinearSegmentedColormap
    from matplotlib.patches import Rectangle

    cmap = LinearSegmentedColormap.from_list("loss", ["#ffffff", "#fdae61", "#d7191c"])
    fig, ax = plt.subplots(
        figsize=(max(4.0, 1.2 + 1.1 * len(hosts)), 0.8 + 0.34 * max(len(configurations), 1))
    )
    ax.grid(False)
    for i, c in enumerate(configurations):
        for j, h in enumerate(hosts):
            ratio = heat.get(h, {}).get(c)
            share = share_of_best(ratio, higher_is_better)
            colour = "#dddddd" if share is None else cmap(min(1.0, (1.0 - share) / (1.0 - FLOOR)))
            ax.add_patch(Rectangle((j, i), 1, 1, facecolor=colour, edgecolor="white"))
            ax.text(
                j + 0.5,
                i + 0.5,
                "–" if ratio is None else f"{ratio:.2f}",
                ha="center",
                va="center",
                fontsize=8,
            )
        if c == choice:
            ax.add_patch(
                Rectangle((0, i), len(hosts), 1, fill=False, edgecolor="#000000", linewidth=1.6)
            )
    # at least one row's span: with no configuration ranked anywhere, (0, 0) is no axis at all
    ax.set_xlim(0, max(len(hosts), 1))
    ax.set_ylim(max(len(configurations), 1), 0)
    ax.set_xticks([j + 0.5 for j in range(len(hosts))], list(hosts), rotation=30, ha="right")
    ax.set_yticks([i + 0.5 for i in range(len(configurations))], list(configurations))
    ax.tick_params(length=0)
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title("ratio to each host's own best", fontsize=9)
    return _svg(fig)
