"""What every figure of a run shares: its size and panels, its one legend, its axes, its PNG file.

The run figures (run_figures.py, cdf_figures.py) and the game figures (game_figures.py) draw with
these, so that all of them look alike: panel sizes, a legend under the panels, load axes ticked at
the simulated loads, log axes labelled between decades, one style per policy, what a figure says in
place of intervals it has not got, and PNGs written atomically like every other file of a run.

matplotlib is imported inside the functions (importing the plots stays cheap for the CLI), and
figures are built as `matplotlib.figure.Figure` objects, never through pyplot: no global figure
state to leak, and no backend switch in a user's notebook that imports these modules.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from poa_mc.io.files import atomic_write_bytes

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure

_DPI = 110
_PANEL = (5.2, 3.9)  # inches per panel of the per-topology figures
_ONE_PANEL = (7.0, 4.6)  # a single topology (the paper presets) gets room for 17 loads and the legend
_NAMED_MAX = 8  # policies drawn in colour with a legend entry; the rest as grey lines
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


# -- small pure helpers (tested directly) ------------------------------------------------------


def has_intervals(frame: pl.DataFrame, columns: Sequence[str]) -> bool:
    """Whether any of the `_lo`/`_hi` pairs of `columns` holds a finite interval (one replica: none)."""
    for c in columns:
        lo, hi = f"{c}_lo", f"{c}_hi"
        if lo in frame.columns and hi in frame.columns:
            both = np.isfinite(_floats(frame[lo])) & np.isfinite(_floats(frame[hi]))
            if both.any():
                return True
    return False


def no_interval_note(replicas: int | None) -> str:
    """What a figure without intervals says in their place."""
    if replicas is not None and replicas < 2:
        return f"{replicas} replica: no intervals"
    return "no intervals"


def thin_load_labels(values: Sequence[float] | np.ndarray, *, log: bool, width_in: float, fontsize: float = 8) -> list:
    """The loads to label on an axis `width_in` inches wide so that no two labels overlap.

    Ends first, then (on a log2 axis) powers of two, then the rest left to right: 1..512 with
    17 loads keeps 1, 2, 4, ..., 512 and drops 80, 96, ... where they would collide.
    """
    v = np.unique(np.asarray(values, dtype=float))
    v = v[np.isfinite(v) & ((v > 0) if log else True)]
    if v.size <= 1:
        return v.tolist()
    pos = np.log2(v) if log else v
    usable = width_in / 1.1  # matplotlib pads the data range by 5% on each side
    at = (pos - pos[0]) / (pos[-1] - pos[0]) * usable
    half = np.array([len(f"{x:g}") * fontsize * 0.62 / 72 + 0.1 for x in v]) / 2

    def rank(i: int) -> tuple[bool, bool, int]:
        pow2 = log and float(np.log2(v[i])).is_integer()
        return (i not in (0, v.size - 1), not pow2, i)

    kept: list[int] = []
    for i in sorted(range(v.size), key=rank):
        if all(abs(at[i] - at[j]) >= half[i] + half[j] for j in kept):
            kept.append(i)
    return v[sorted(kept)].tolist()


def _floats(s: pl.Series) -> np.ndarray:
    # nulls (polars) and NaN/inf (numpy) both mean "no value" to a plot
    a = s.cast(pl.Float64).fill_null(np.nan).to_numpy()
    return np.where(np.isfinite(a), a, np.nan)


def _num(v: float) -> str:
    return f"{v:g}"


def _ratio(v: float) -> str:
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.3g}"


# -- figure plumbing ---------------------------------------------------------------------------


def _figure(rows: int, cols: int, panel: tuple[float, float], **share: Any) -> tuple[Figure, list[Axes]]:
    from matplotlib.figure import Figure

    # constrained layout keeps suptitles, shared labels, colorbars and outside legends apart
    fig = Figure(figsize=(panel[0] * cols, panel[1] * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, **share)
    return fig, list(axes.ravel())


def _panel_size(n: int) -> tuple[float, float]:
    return _ONE_PANEL if n == 1 else _PANEL


def _axis_width(n: int) -> float:
    return _panel_size(n)[0] - 1.2  # less the y label and tick labels


def _panels(n: int, **share: Any) -> tuple[Figure, list[Axes]]:
    cols = min(n, 3)
    rows = -(-n // cols)
    fig, flat = _figure(rows, cols, _panel_size(n), **share)
    for k, ax in enumerate(flat[n:], start=n):
        ax.set_visible(False)
        above = k - cols
        if share.get("sharex") and 0 <= above < n:  # its x labels were hidden for the empty panel below
            flat[above].xaxis.set_tick_params(labelbottom=True)
    return fig, flat[:n]


def _save(fig: Figure, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    atomic_write_bytes(Path(path), buf.getvalue())  # like every file of a run: never half a PNG
    return Path(path)


def _legend_below(fig: Figure, axes: Sequence[Axes], ncol: int = 3, **kw: Any) -> None:
    """One legend for the whole figure, under the panels: per-axes legends covered data."""
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels and not lab.startswith("_"):
                handles.append(h)
                labels.append(lab)
    if handles:
        ncol = legend_columns([len(lab) for lab in labels], fig.get_figwidth(), ncol)
        fig.legend(handles, labels, loc="outside lower center", ncol=ncol, fontsize=8, frameon=False, **kw)


def legend_columns(label_chars: Sequence[int], width_in: float, most: int, fontsize: float = 8) -> int:
    """The most legend columns (up to `most`) whose entries fit across `width_in` inches.

    matplotlib fills columns top to bottom, so a column is as wide as its longest label.
    """
    n = len(label_chars)
    for ncol in range(min(most, n), 1, -1):
        rows = -(-n // ncol)
        cols = [label_chars[i : i + rows] for i in range(0, n, rows)]
        # DejaVu Sans averages ~0.55 em a character; handle, its pad and the column gap are 4.8 em
        if sum((max(c) * 0.55 + 4.8) * fontsize / 72 for c in cols) <= width_in:
            return ncol
    return 1


def _log_ticks(axis: Axis, lo: float, hi: float, fmt: Any = _num) -> None:
    """Readable labels on a log axis: decades and, when there is room for them, the values between."""
    from matplotlib import ticker

    if not (lo > 0 and hi > lo):
        return
    span = math.log10(hi / lo)
    if span > 3.5:
        major = ticker.LogLocator(10, subs=(1.0,), numticks=40)
    elif span > 1.2:
        major = ticker.LogLocator(10, subs=(1.0, 2.0, 5.0), numticks=40)
    elif span > 0.45:
        major = ticker.LogLocator(10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0), numticks=40)
    else:  # under half a decade a log locator finds one tick or none
        major = ticker.MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10])
    axis.set_major_locator(major)
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _pos: fmt(v)))
    axis.set_minor_locator(ticker.LogLocator(10, subs=np.arange(2.0, 10.0), numticks=40))
    axis.set_minor_formatter(ticker.NullFormatter())


def _load_col(df: pl.DataFrame) -> tuple[str, str, str]:
    """Column of the load, its axis label, and a short prefix for panel titles."""
    if df.height and df["load_axis"][0] == "rate":
        return "rate", "arrival rate (req/s)", "rate "
    return "concurrency", "concurrency C (closed-loop clients)", "C="


def _log_loads(x: np.ndarray) -> bool:
    x = x[np.isfinite(x)]
    return bool(x.size > 1 and x.min() > 0 and x.max() / x.min() >= 8)


def _set_load_axis(ax: Axes, x: np.ndarray, width_in: float) -> None:
    """Ticks at the simulated loads themselves (not powers of ten), labelled where they fit."""
    from matplotlib import ticker

    x = np.unique(x[np.isfinite(x)])
    log = _log_loads(x)
    if log:
        ax.set_xscale("log", base=2)
    if x.size == 0:
        return
    labelled = thin_load_labels(x, log=log, width_in=width_in)
    ax.set_xticks(labelled, [_num(v) for v in labelled])
    ax.set_xticks([v for v in x.tolist() if v not in labelled], minor=True)
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.tick_params(axis="x", labelsize=8)


def _policy_styles(
    frame: pl.DataFrame, selfish: str | None, best: dict[str, int] | None = None
) -> dict[str, dict[str, Any]]:
    """Colour, marker, width and legend label per policy, in grid order.

    All policies are named when few; else the selfish policy, the policies `best` names (a
    figure's winner at some load: `best[policy]` loads, said in its label), the non-kv kinds
    (adaptive, oracle, ...) and the first kv policy, up to _NAMED_MAX, and the rest share one grey
    legend entry: a winner is never one of the grey lines.
    Earlier named lines are drawn wider so that a later one on top of them leaves them visible,
    and the selfish policy dashed above all.
    """
    from matplotlib import rcParams

    policies = frame["policy"].unique(maintain_order=True).to_list()
    kinds = dict(zip(frame["policy"].to_list(), frame["policy_kind"].to_list()))
    if len(policies) <= _NAMED_MAX:
        named = policies
    else:
        first_kv = next((p for p in policies if kinds.get(p) == "kv"), policies[0])
        winners = sorted((best or {}), key=lambda p: -(best or {})[p])
        order = [selfish, *winners, *(p for p in policies if kinds.get(p) != "kv"), first_kv]
        keep = list(dict.fromkeys(p for p in order if p in policies))[:_NAMED_MAX]
        named = [p for p in policies if p in keep]
    colours = rcParams["axes.prop_cycle"].by_key()["color"]
    styles: dict[str, dict[str, Any]] = {}
    grey_label = f"{len(policies) - len(named)} other kv settings"
    for pol in policies:
        if pol in named:
            i = named.index(pol)
            styles[pol] = dict(
                color=colours[i % len(colours)],
                marker=_MARKERS[i % len(_MARKERS)],
                markersize=4.5,
                linewidth=max(2.6 - 0.3 * i, 1.1),
                zorder=3 + i,
                label=pol,
            )
            if pol == selfish:  # dashed on top: visible where a baseline draws the same curve
                styles[pol].update(linestyle=(0, (4, 2)), linewidth=1.6, zorder=4 + _NAMED_MAX)
                styles[pol]["label"] = f"{pol} (selfish)"
            if best and best.get(pol) and len(policies) > 2:
                n = best[pol]
                styles[pol]["label"] += f" (best at {n} load{'s' if n > 1 else ''})"
        else:
            styles[pol] = dict(color="grey", alpha=0.5, linewidth=0.8, zorder=2, label=grey_label)
            grey_label = "_"  # one legend entry for all grey lines
    return styles
