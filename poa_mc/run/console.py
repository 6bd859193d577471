"""What a run says on the console: progress while it simulates, stage lines (compiling,
summarising, plotting), and the end-of-run table of results.

On a terminal, progress is a rich progress bar on stderr; off a terminal (a log file, a Slurm
job) it is one plain line per finished cell, so logs stay readable. `quiet` silences all of it.
The results table goes to stdout.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, TextIO

MAX_TABLE_ROWS = 60  # beyond this the table shows the selfish policy's cells only


class RunConsole:
    """Progress of one run over `n_cells` cells whose estimated work adds up to `total_cost`."""

    def __init__(self, n_cells: int, total_cost: float, *, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.n, self.total_cost, self.quiet = n_cells, total_cost, quiet
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.done = 0
        self.simulated = 0.0
        self.t0 = time.perf_counter()
        self._bar: Any = None
        self._task: Any = None
        self._sum_task: Any = None

    def __enter__(self) -> RunConsole:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_bar(self, simulating: bool = True) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[cells]}"),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(),
            console=Console(file=self.stream),
            transient=False,
        )
        if simulating:
            self._task = self._bar.add_task("simulating", total=max(self.total_cost, 1e-9), cells="", rate="")
        self._bar.start()

    def note(self, message: str, *, always: bool = False) -> None:
        """A stage line (compiling kernels, summarising, drawing plots); `always`: also with --quiet
        (a wait of a minute or more that would otherwise look like a hang)."""
        if self.quiet and not always:
            return
        if self._bar is not None:
            self._bar.console.print(message, highlight=False)
        else:
            print(message, file=self.stream, flush=True)

    def cell_done(self, label: str, cost: float, simulated: float, wall: float) -> None:
        self.done += 1
        self.simulated += simulated
        if self.quiet:
            return
        elapsed = time.perf_counter() - self.t0
        rate = self.simulated / elapsed if elapsed > 0 else 0.0
        if self.tty:
            if self._bar is None:
                self._start_bar()
            self._bar.update(self._task, advance=cost, cells=f"{self.done}/{self.n} cells", rate=f"{_si(rate)} req/s")
        else:
            cell_rate = simulated / wall if wall > 0 else 0.0
            print(
                f"[{self.done}/{self.n}] {label}: {simulated:,.0f} requests in {wall:.2f} s ({_si(cell_rate)} req/s)",
                file=self.stream,
                flush=True,
            )

    def summarising(self, done: int, total: int) -> None:
        """Progress through the summary: a bar on a terminal, else a line at each tenth."""
        if self.quiet:
            return
        if self.tty:
            if self._bar is None:
                self._start_bar(simulating=False)
            if self._sum_task is None:
                self._sum_task = self._bar.add_task("summarising", total=total, cells="", rate="")
            self._bar.update(self._sum_task, completed=done, cells=f"{done}/{total} cells")
        elif done == total or done * 10 // total > (done - 1) * 10 // total:
            print(f"summarised {done}/{total} cells", file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        self._sum_task = None


def _si(x: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f}"


def _num(x: Any, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{digits}f}"


def _interval(v: Any, lo: Any, hi: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if lo is None or hi is None or (isinstance(lo, float) and math.isnan(lo)):
        return f"{v:.3f}"
    return f"{v:.3f} [{lo:.3f}, {hi:.3f}]"


def results_table(summary: Any, poa: Any, selfish: str) -> Any:
    """A rich Table: per cell TTFT P50/P99, ITL, throughput, PoA-hat, and on the selfish policy's
    row the counterfactual PoA of its point, each PoA with its 95% interval."""
    import polars as pl
    from rich.table import Table

    axis = summary["load_axis"][0] if summary.height else "concurrency"
    load_col = "concurrency" if axis == "concurrency" else "rate"
    rows = summary.sort(["point", "policy"]) if "point" in summary.columns else summary
    shown = rows
    caption = None
    if rows.height > MAX_TABLE_ROWS:
        shown = rows.filter(pl.col("policy") == selfish)
        caption = f"{selfish!r} only ({shown.height} of {rows.height} cells); all of them: summary.parquet"
    cf = {}
    if poa.height:
        for r in poa.iter_rows(named=True):
            cf[(r["topology"], r[load_col])] = (r.get("poa_cf"), r.get("poa_cf_lo"), r.get("poa_cf_hi"))
    one_rep = bool(rows.height) and int(rows["replicas"].max()) < 2
    table = Table(
        title="results (95% intervals across replicas)" if not one_rep else "results (1 replica: no intervals)",
        caption=caption,
        header_style="bold",
    )
    for name, justify in (
        ("topology", "left"),
        ("C" if axis == "concurrency" else "rate", "right"),
        ("policy", "left"),
        ("TTFT p50 ms", "right"),
        ("TTFT p99 ms", "right"),
        ("ITL ms", "right"),
        ("req/s", "right"),
        ("PoA-hat", "right"),
        ("PoA cf", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=name != "policy")  # type: ignore[arg-type]
    for r in shown.iter_rows(named=True):
        load = r[load_col]
        poa_cf = cf.get((r["topology"], load)) if r["policy"] == selfish else None
        unstable = bool(r.get("unstable"))  # an overloaded open loop: no steady state to report
        table.add_row(
            r["topology"],
            f"{load:g}" if isinstance(load, float) else str(load),
            r["policy"] + (" *" if r["policy"] == selfish else ""),
            "unstable" if unstable else _num(r.get("ttft_p50_ms")),
            "unstable" if unstable else _num(r.get("ttft_p99_ms")),
            _num(r.get("itl_mean_ms"), 2),
            f"cap {_num(r.get('capacity_rps'), 2)}" if unstable else _num(r.get("throughput_rps"), 2),
            _interval(r.get("poa_hat"), r.get("poa_hat_lo"), r.get("poa_hat_hi")),
            _interval(*poa_cf) if poa_cf else "",
        )
    return table


def stages_table(stages: Any) -> Any:
    """A rich Table of a load schedule's stages (stages.parquet): per cell and stage its load, window,
    TTFT P50/P99, ITL and request rate, each with its 95% interval where it has one."""
    from rich.table import Table

    axis = stages["load_axis"][0] if stages.height else "rate"
    table = Table(title="stages (95% intervals across replicas)", header_style="bold")
    for name in ("topology", "policy", "stage", "C" if axis == "concurrency" else "rate", "window s",
                 "TTFT p50 ms", "TTFT p99 ms", "ITL ms", "req/s"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("topology", "policy") else "right", no_wrap=True)

    def est(r: dict, name: str, digits: int) -> str:
        v, lo, hi = (r.get(f"{name}{p}") for p in ("", "_lo", "_hi"))
        if lo is None or hi is None or (isinstance(lo, float) and math.isnan(lo)):
            return _num(v, digits)
        return f"{_num(v, digits)} [{_num(lo, digits)}, {_num(hi, digits)}]"

    for r in stages.sort(["index", "stage"]).iter_rows(named=True):
        table.add_row(
            r["topology"],
            r["policy"],
            str(r["stage"]),
            f"{r['stage_load']:g}",
            f"{r['stage_start_ms'] / 1000:.0f}-{r['stage_end_ms'] / 1000:.0f}",
            est(r, "ttft_p50_ms", 1),
            est(r, "ttft_p99_ms", 1),
            _num(r.get("itl_mean_ms"), 2),
            est(r, "throughput_rps", 2),
        )
    return table


FEW_FOR_TAILS = 64  # replicas below which a P99's interval under-covers near saturation (docs/outputs.md)


def summary_notes(summary: Any, warmup: int) -> list[str]:
    """What a reader of the summary must know before trusting a figure: cells whose warm-up left a
    transient (poa_mc.stats.warmup), and cells whose replicas all came out the same (zero-width
    intervals that measure nothing about run-to-run variation)."""
    import polars as pl

    out = []
    if "warmup_suggested" in summary.columns:
        short = summary.filter(pl.col("warmup_suggested").is_not_null())
        if short.height:
            most = int(short["warmup_suggested"].max())
            first = short.row(0, named=True)
            axis = first["load_axis"]
            at = f"{axis} {first['concurrency' if axis == 'concurrency' else 'rate']}"
            # quote the drift only where the drift test could have fired (> 2%), never a NaN
            drifts = [abs(d) for d in short["warmup_drift"].to_list() if d is not None and math.isfinite(d)]
            drift = max((d for d in drifts if d > 0.02), default=0.0)
            how = f", mean TTFT up to {drift:.0%} apart between the halves of the measured requests" if drift else ""
            out.append(
                f"warning: run.warmup = {warmup} is too short for {short.height} of {summary.height} cells "
                f"(e.g. {first['topology']} {first['policy']} at {at}{how}); their means and quantiles lean on the "
                f"start of the run: use warmup >= {most:,} (summary.parquet: warmup_suggested, warmup_drift)"
            )
    if "replicas" in summary.columns and summary.height and int(summary["replicas"].min()) < FEW_FOR_TAILS:
        out.append(
            f"note: cells with fewer than {FEW_FOR_TAILS} replicas: the intervals of tail quantiles (P99) can "
            "under-cover near saturation, where a run's tail comes from a few busy periods (docs/outputs.md, "
            '"What the intervals cover")'
        )
    if "unstable" in summary.columns:
        over = summary.filter(pl.col("unstable").fill_null(False))
        if over.height:
            first = over.row(0, named=True)
            out.append(
                f"warning: {over.height} of {summary.height} cells are unstable: their arrival rate exceeds what the "
                f"cluster completes (e.g. {first['topology']} {first['policy']} at rate {first['rate']:g}: it "
                f"completes {first['capacity_rps']:.3g} req/s), so their queues grow through the run; they report "
                "their capacity (capacity_rps), no throughput and no steady-state latency (summary.parquet: unstable)"
            )
    out += identical_policy_notes(summary)
    if "replicas_identical" in summary.columns:
        same = summary.filter(pl.col("replicas_identical"))
        if same.height:
            out.append(
                f"note: in {same.height} of {summary.height} cells all replicas are identical (nothing random "
                "drives them): their intervals have zero width (summary.parquet: replicas_identical)"
            )
    return out


MAX_BEST_LINES = 12  # points whose best policies are listed on the console (all of them: poa.parquet)


def best_policy_lines(poa: Any) -> list[str]:
    """Per (topology, load): the best policy on mean TTFT and on mean E2E, each with the selfish
    policy's counterfactual PoA against it; then a warning for each point whose TTFT winner wins
    by decoding slower (poa.parquet's ttft_win_slows_decode; docs/outputs.md)."""
    if not poa.height or "best_policy_ttft" not in poa.columns:
        return []
    load_col = "concurrency" if poa["load_axis"][0] == "concurrency" else "rate"
    tag = "C" if load_col == "concurrency" else "rate"
    rows = list(poa.iter_rows(named=True))
    out, selfish_best, listed = [], 0, 0
    for r in rows:
        load = r[load_col]
        at = f"{r['topology']} {tag}={load:g}" if isinstance(load, float) else f"{r['topology']} {tag}={load}"
        winners = {k: r.get(f"best_policy_{k}") for k in ("ttft", "e2e", "goodput")}
        if all(w in (None, r["selfish_policy"]) for w in winners.values()):
            selfish_best += winners["ttft"] is not None  # said once, below, not a line a point
            continue
        parts = []
        for k, name in (("ttft", "TTFT"), ("e2e", "E2E"), ("goodput", "goodput")):
            best = winners[k]
            if best == r["selfish_policy"]:
                parts.append(f"best on {name}: {best} (the selfish policy)")
            elif best:
                margin = _interval(r[f"poa_cf_{k}"], r[f"poa_cf_{k}_lo"], r[f"poa_cf_{k}_hi"])
                tie = ": a tie" if r[f"poa_cf_{k}_lo"] is not None and r[f"poa_cf_{k}_lo"] <= 1.0 else ""
                if k == "goodput":  # more is better: the winner's rate as a multiple of the selfish one's
                    parts.append(f"best on {name}: {best} (x{margin} {r['selfish_policy']}'s{tie})")
                else:
                    parts.append(f"best on {name}: {best} ({r['selfish_policy']} is x{margin}{tie})")
        listed += 1
        if listed <= MAX_BEST_LINES:
            out.append(f"{at}: " + "; ".join(parts))
    if listed > MAX_BEST_LINES:
        out.append(f"... {listed - MAX_BEST_LINES} more points: poa.parquet (best_policy_ttft, best_policy_e2e)")
    if selfish_best:
        out.append(
            f"at the other {selfish_best} of {len(rows)} points the selfish policy ({rows[0]['selfish_policy']}) is "
            "best on every measure"
        )
    out += _knee_lines(rows, load_col, tag)
    for r in rows:
        if r.get("ttft_win_slows_decode"):
            load = r[load_col]
            out.append(
                f"warning: at {r['topology']} {tag}={load:g}, {r['best_policy_ttft']} beats {r['selfish_policy']} on "
                "TTFT only by decoding slower (higher ITL, no lower E2E): in a closed loop that keeps clients out "
                "of the prefill queue and serves no one sooner (docs/outputs.md, TTFT against end-to-end latency)"
            )
    return out


def _knee_lines(rows: list[dict], load_col: str, tag: str) -> list[str]:
    """One line per topology: the selfish policy's knee, with the load points either side of it
    (the grid's resolution, which its interval does not include), or why there is none."""
    out, seen = [], set()
    for r in rows:
        topo = r["topology"]
        if topo in seen or "knee_reason" not in r:
            continue
        seen.add(topo)
        k = r.get("knee")
        if k is not None and math.isfinite(k) and r.get("knee_grid_lo") is not None:
            out.append(
                f"{topo} knee ({r['selfish_policy']}): {tag}={k:.4g} [{r['knee_lo']:.4g}, {r['knee_hi']:.4g}], between "
                f"the load points {r['knee_grid_lo']:g} and {r['knee_grid_hi']:g} (add loads there to place it closer)"
            )
        elif r.get("knee_reason"):
            out.append(f"{topo} knee ({r['selfish_policy']}): none found: {r['knee_reason']}")
    return out


def identical_policy_notes(summary: Any) -> list[str]:
    """Policies whose cells came out the same as another policy's at every load of a topology: a
    setting that changes nothing there (an overlap weight, once every worker caches every prefix),
    said so that it is not taken for a bug."""
    keys = [c for c in ("ttft_mean_ms", "e2e_mean_ms", "hit_rate") if c in summary.columns]
    if not keys or not summary.height:
        return []
    out = []
    for (topo,), d in summary.group_by(["topology"], maintain_order=True):
        sig: dict[tuple, list[str]] = {}
        d = d.sort("index" if "index" in d.columns else "policy")
        for (pol,), p in d.group_by(["policy"], maintain_order=True):
            sig.setdefault(tuple(p.select(keys).rows()), []).append(pol)
        for same in sig.values():
            if len(same) > 1:
                out.append(
                    f"note: at {topo}, policies {', '.join(same)} gave identical results at every load: their "
                    "settings change nothing there (e.g. an overlap weight once every worker caches every prefix)"
                )
    return out[:3]


def print_results(summary: Any, poa: Any, selfish: str, stream: TextIO | None = None) -> None:
    """The end-of-run table on stdout (`*` marks the selfish policy, whose row carries PoA cf),
    then the best policy of each point on TTFT and on E2E, and warnings where they disagree for
    the wrong reason."""
    from rich.console import Console

    file = stream if stream is not None else sys.stdout
    # off a terminal (a log file) there is no width to fit: keep rows on one line
    width = None if getattr(file, "isatty", lambda: False)() else 160
    console = Console(file=file, highlight=False, width=width)
    console.print(results_table(summary, poa, selfish))
    for line in best_policy_lines(poa):
        console.print(line, markup=False)


def print_pd_game(game: Any, stream: TextIO | None = None) -> None:
    """Per load: the equilibrium split(s), the social optimum and PoA_PD with its interval."""
    from rich.console import Console
    from rich.table import Table

    load = "concurrency" if "concurrency" in game.columns else "rate"
    first = game.row(0, named=True)
    table = Table(
        title=f"prefill/decode split game: pools' costs {first['prefill_cost_kind']} / {first['decode_cost_kind']}, "
        f"social cost {first['social_cost_kind']}",
        header_style="bold",
    )
    for name in ("C" if load == "concurrency" else "rate", "equilibrium", "optimum", "PoA_PD (worst eq.)", "best eq.",
                 "cycles"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("equilibrium", "optimum") else "right", no_wrap=True)
    for (value,), d in game.group_by([load], maintain_order=True):
        r = d.row(0, named=True)
        eq = ", ".join(d.filter(d["is_equilibrium"])["topology"].to_list()) or "none"
        opt = ", ".join(d.filter(d["is_optimum"])["topology"].to_list()) or "-"
        table.add_row(
            f"{value:g}" if isinstance(value, float) else str(value),
            eq,
            opt,
            _interval(r["poa_pd"], r["poa_pd_lo"], r["poa_pd_hi"]),
            _interval(r["poa_pd_best"], r["poa_pd_best_lo"], r["poa_pd_best_hi"]),
            str(r["cycles"]),
        )
    file = stream if stream is not None else sys.stdout
    width = None if getattr(file, "isatty", lambda: False)() else 160
    Console(file=file, highlight=False, width=width).print(table)


def print_cache_game(game: Any, stream: TextIO | None = None) -> None:
    """Per (topology, load, capacity, skew): PoA_KV against the best coordinated placement, with
    its interval, and every placement's prefix hit rate."""
    from rich.console import Console
    from rich.table import Table

    load = "concurrency" if "concurrency" in game.columns else "rate"
    policies = game.select("policy").unique(maintain_order=True)["policy"].to_list()
    table = Table(
        title=f"caching game: PoA_KV = {policies[0]} / best coordinated, social cost {game['social_cost_kind'][0]}",
        header_style="bold",
    )
    for name in ("topology", "C" if load == "concurrency" else "rate", "kv/worker", "working set", "zipf a",
                 "PoA_KV", "best", *(f"hit {p}" for p in policies)):  # fmt: skip
        table.add_column(name, justify="left" if name == "topology" else "right", no_wrap=True)
    keys = ["topology", load]
    for _, d in game.group_by(keys, maintain_order=True):
        r = d.row(0, named=True)
        hits = dict(zip(d["policy"].to_list(), d["hit_rate"].to_list()))
        value = r[load]
        table.add_row(
            r["topology"].split(" ")[0],
            f"{value:g}" if isinstance(value, float) else str(value),
            str(r["prefill_kv_blocks"]),
            str(r["working_set_blocks"]) if r["working_set_blocks"] >= 0 else "?",
            f"{r['zipf_alpha']:g}",
            _interval(r["poa_kv"], r["poa_kv_lo"], r["poa_kv_hi"]),
            r["best_coordinated"],
            *(f"{hits.get(p, math.nan):.3f}" for p in policies),
        )
    file = stream if stream is not None else sys.stdout
    width = None if getattr(file, "isatty", lambda: False)() else 160
    Console(file=file, highlight=False, width=width).print(table)


def print_planner(frame: Any, stream: TextIO | None = None, policy: str | None = None) -> None:
    """Per (load, start split): where the Planner ended (the split most replicas end at, and
    their share), the share of the measured time it spent at the static game's equilibrium and
    at its optimum, and its moves, reversals and oscillating replicas; of `policy` (the game's)
    when given."""
    from rich.console import Console
    from rich.table import Table

    load = "concurrency" if "concurrency" in frame.columns else "rate"
    if policy is not None:
        frame = frame.filter(frame["policy"] == policy)
    title = "the Planner moving the split (one run from each start" + (f", policy {policy})" if policy else ")")
    table = Table(title=title, header_style="bold")
    for name in ("C" if load == "concurrency" else "rate", "start", "ends at", "time at eq.", "time at opt.",
                 "moves", "reversals", "oscillating", "social cost / optimum"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("start", "ends at") else "right", no_wrap=True)
    for _, d in frame.group_by([load, "start"], maintain_order=True):
        r = d.row(0, named=True)
        end = d.sort("final_share", descending=True).row(0, named=True)
        value = r[load]
        tags = "".join(t for t, on in ((" (eq.)", end["is_equilibrium"]), (" (opt.)", end["is_optimum"])) if on)
        table.add_row(
            f"{value:g}" if isinstance(value, float) else str(value),
            r["start"],
            f"{end['split']}{tags} {end['final_share']:.0%}",
            f"{d.filter(d['is_equilibrium'])['time_share'].sum():.2f}",
            f"{d.filter(d['is_optimum'])['time_share'].sum():.2f}",
            f"{r['moves_mean']:.1f}",
            f"{r['reversals_mean']:.1f}",
            f"{r['oscillating_share']:.0%}",
            _interval(
                r.get("social_cost_vs_optimum"), r.get("social_cost_vs_optimum_lo"), r.get("social_cost_vs_optimum_hi")
            ),  # fmt: skip
        )
    file = stream if stream is not None else sys.stdout
    width = None if getattr(file, "isatty", lambda: False)() else 160
    Console(file=file, highlight=False, width=width).print(table)
