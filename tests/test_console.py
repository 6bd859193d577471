import io

import polars as pl

from poa_mc.run.console import MAX_TABLE_ROWS, RunConsole, print_results


def _summary(replicas: int, n: int = 2) -> pl.DataFrame:
    rows = []
    for i in range(n):
        for policy in ("greedy", "rr"):
            rows.append({"point": i, "topology": "1P/2D", "load_axis": "concurrency", "concurrency": 4 * (i + 1),
                         "rate": None, "policy": policy, "replicas": replicas, "ttft_p50_ms": 12.34,
                         "ttft_p99_ms": 56.7, "itl_mean_ms": 5.0, "throughput_rps": 9.5, "poa_hat": 1.25,
                         "poa_hat_lo": 1.2 if replicas > 1 else None,
                         "poa_hat_hi": 1.3 if replicas > 1 else None})  # fmt: skip
    return pl.DataFrame(rows)


def _poa(n: int = 2) -> pl.DataFrame:
    return pl.DataFrame({"topology": ["1P/2D"] * n, "concurrency": [4 * (i + 1) for i in range(n)],
                         "poa_cf": [1.1] * n, "poa_cf_lo": [1.0] * n, "poa_cf_hi": [1.2] * n})  # fmt: skip


def _render(summary: pl.DataFrame, poa: pl.DataFrame) -> str:
    buf = io.StringIO()
    print_results(summary, poa, "greedy", stream=buf)
    return buf.getvalue()


def test_table_has_intervals_and_marks_the_selfish_policy():
    text = _render(_summary(8), _poa())
    assert "95% intervals" in text and "1.250 [1.200, 1.300]" in text and "1.100 [1.000, 1.200]" in text
    assert text.count("greedy *") == 2 and text.count("1.100 [") == 2  # PoA cf on the selfish rows only


def test_one_replica_says_it_has_no_intervals():
    text = _render(_summary(1), _poa())
    assert "1 replica: no intervals" in text and "[1.2" not in text


def test_long_grids_show_the_selfish_policy_only():
    n = MAX_TABLE_ROWS
    text = _render(_summary(4, n), _poa(n))
    assert "greedy' only" in text and " rr " not in text


def test_progress_off_a_terminal_is_one_line_per_cell_and_quiet_is_silent():
    buf = io.StringIO()
    con = RunConsole(2, 10.0, stream=buf)
    con.note("compiling")
    con.cell_done("1P/2D C=4 greedy", 5.0, 2_000_000, 1.0)
    con.cell_done("1P/2D C=4 rr", 5.0, 1000, 0.5)
    con.close()
    assert buf.getvalue().splitlines() == [
        "compiling",
        "[1/2] 1P/2D C=4 greedy: 2,000,000 requests in 1.00 s (2.00 M req/s)",
        "[2/2] 1P/2D C=4 rr: 1,000 requests in 0.50 s (2.00 k req/s)",
    ]
    quiet = io.StringIO()
    con = RunConsole(1, 1.0, quiet=True, stream=quiet)
    con.note("x")
    con.cell_done("a", 1.0, 1.0, 1.0)
    assert quiet.getvalue() == ""
    con.note("compiling the cpu kernels", always=True)  # a minute's wait is said even with --quiet
    assert quiet.getvalue() == "compiling the cpu kernels\n"


def test_summarising_progress_off_a_terminal_is_a_line_per_tenth():
    buf = io.StringIO()
    con = RunConsole(0, 0.0, stream=buf)
    for i in range(1, 26):
        con.summarising(i, 25)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "summarised 3/25 cells" and lines[-1] == "summarised 25/25 cells"
    assert len(lines) == 10


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_summarising_progress_on_a_terminal_is_a_bar_without_a_simulating_one():
    buf = _Tty()
    con = RunConsole(0, 0.0, stream=buf)
    for i in range(1, 4):
        con.summarising(i, 3)
    con.close()
    out = buf.getvalue()
    assert "summarising" in out and "3/3 cells" in out and "simulating" not in out


def test_summary_notes_name_a_short_warmup_and_identical_replicas():
    from poa_mc.run.console import summary_notes

    summary = pl.DataFrame(
        {
            "topology": ["1P/2D", "1P/2D"],
            "policy": ["kv", "rr"],
            "load_axis": ["rate", "rate"],
            "concurrency": [0, 0],
            "rate": [90.0, 90.0],
            "warmup_suggested": [1100, None],
            "warmup_drift": [0.061, 0.001],
            "replicas_identical": [False, True],
        }
    )
    notes = summary_notes(summary, 100)
    assert len(notes) == 2
    assert "run.warmup = 100" in notes[0] and "use warmup >= 1,100" in notes[0] and "1 of 2 cells" in notes[0]
    assert "up to 6% apart" in notes[0]
    assert "rate 90.0" in notes[0]
    assert "1 of 2 cells all replicas are identical" in notes[1]
    few = summary_notes(summary.with_columns(pl.lit(16).alias("replicas")), 100)
    assert len(few) == 3 and "fewer than 64 replicas" in few[1]
    quiet = summary.with_columns(
        pl.lit(None, dtype=pl.Int64).alias("warmup_suggested"), pl.lit(False).alias("replicas_identical")
    )
    assert summary_notes(quiet, 100) == []


def test_best_policy_lines_name_both_winners_and_warn_on_a_decode_slowing_win():
    from poa_mc.run.console import best_policy_lines

    poa = pl.DataFrame(
        {
            "topology": ["2P/8D", "2P/8D"], "load_axis": ["concurrency"] * 2, "concurrency": [40, 160],
            "rate": [None, None], "selfish_policy": ["kv", "kv"],
            "poa_cf_ttft": [1.0, 1.20], "poa_cf_ttft_lo": [1.0, 1.17], "poa_cf_ttft_hi": [1.01, 1.23],
            "best_policy_ttft": ["kv", "kv-t1"],
            "poa_cf_e2e": [1.0, 1.001], "poa_cf_e2e_lo": [1.0, 1.0], "poa_cf_e2e_hi": [1.01, 1.01],
            "best_policy_e2e": ["kv", "kv"], "ttft_win_slows_decode": [False, True],
        }
    )  # fmt: skip
    lines = best_policy_lines(poa)
    assert "2P/8D C=160: best on TTFT: kv-t1 (kv is x1.200 [1.170, 1.230]); best on E2E: kv (the selfish" in lines[0]
    assert lines[1] == "at the other 1 of 2 points the selfish policy (kv) is best on every measure"
    assert len(lines) == 3 and lines[2].startswith("warning: at 2P/8D C=160, kv-t1 beats kv on TTFT only by")
    assert best_policy_lines(poa.with_columns(pl.lit(False).alias("ttft_win_slows_decode")))[-1].startswith("at the")


def test_policies_identical_at_every_load_are_said_to_change_nothing():
    from poa_mc.run.console import identical_policy_notes

    rows = [
        {"index": i, "topology": "2P/8D", "policy": p, "ttft_mean_ms": t, "e2e_mean_ms": 2 * t, "hit_rate": 0.5}
        for i, (p, t) in enumerate([("kv", 1.0), ("kv-w0", 1.0), ("rr", 1.5), ("kv", 2.0), ("kv-w0", 2.0), ("rr", 2.0)])
    ]
    (note,) = identical_policy_notes(pl.DataFrame(rows))
    assert note.startswith("note: at 2P/8D, policies kv, kv-w0 gave identical results at every load")
    rows[4]["ttft_mean_ms"] = 2.5  # differs at one load: not identical
    assert identical_policy_notes(pl.DataFrame(rows)) == []


def test_the_knee_line_names_the_grid_points_around_it_or_why_there_is_none():
    from poa_mc.run.console import _knee_lines

    rows = [
        {"topology": "2P/8D", "selfish_policy": "kv", "knee": 108.2, "knee_lo": 108.0, "knee_hi": 109.1,
         "knee_grid_lo": 80.0, "knee_grid_hi": 120.0, "knee_reason": "knee detected"},
        {"topology": "3P/7D", "selfish_policy": "kv", "knee": float("nan"), "knee_lo": None, "knee_hi": None,
         "knee_grid_lo": None, "knee_grid_hi": None, "knee_reason": "no saturated regime: the slope is still rising"},
    ]  # fmt: skip
    a, b = _knee_lines(rows, "concurrency", "C")
    assert a.startswith("2P/8D knee (kv): C=108.2 [108, 109.1], between the load points 80 and 120 (add loads")
    assert b == "3P/7D knee (kv): none found: no saturated regime: the slope is still rising"
