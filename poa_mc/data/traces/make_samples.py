"""Regenerate the small synthetic sample traces shipped in this folder (deterministic).

    python poa_mc/data/traces/make_samples.py

Writes mooncake_sample.jsonl, azure_sample.csv, burstgpt_sample.csv and agentic_sample.jsonl (multi-turn
agent sessions: docs/traces.md) next to this file. The
lengths are synthetic (lognormal inputs clipped to [100, 8000] tokens, lognormal outputs clipped to
[10, 1000]), the arrivals Poisson; they only look like the real traces, they are not samples of them.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

SEED = 20240601
HERE = Path(__file__).resolve().parent
BLOCK = 512  # Mooncake: one hash id per 512-token block


def lengths(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    isl = np.clip(np.round(rng.lognormal(np.log(1200), 0.9, n)), 100, 8000).astype(int)
    osl = np.clip(np.round(rng.lognormal(np.log(180), 0.8, n)), 10, 1000).astype(int)
    return isl, osl


def arrivals_s(rng: np.random.Generator, n: int, rate: float) -> np.ndarray:
    return np.cumsum(rng.exponential(1.0 / rate, n))


def mooncake(rng: np.random.Generator, n: int = 300) -> str:
    isl, osl = lengths(rng, n)
    t_ms = np.round(arrivals_s(rng, n, 2.0) * 1000).astype(int)
    t_ms -= t_ms[0]
    prefixes = [list(range(g * 1000, g * 1000 + 16)) for g in range(8)]  # 8 shared system prompts
    lines, next_id = [], 100_000
    for i in range(n):
        blocks = -(-int(isl[i]) // BLOCK)
        shared = min(blocks, int(rng.integers(0, blocks + 1)))
        ids = prefixes[int(rng.integers(0, len(prefixes)))][:shared]
        ids = ids + list(range(next_id, next_id + blocks - len(ids)))
        next_id += blocks
        lines.append(
            json.dumps(
                {"timestamp": int(t_ms[i]), "input_length": int(isl[i]), "output_length": int(osl[i]), "hash_ids": ids}
            )
        )
    return "\n".join(lines) + "\n"


def azure(rng: np.random.Generator, n: int = 400) -> str:
    isl, osl = lengths(rng, n)
    start = datetime(2023, 11, 16, 18, 15, 0)
    t = arrivals_s(rng, n, 3.0)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(n):
        ts = start + timedelta(microseconds=int(round(t[i] * 1e6)))
        # the real files print 7 fractional digits (100 ns ticks)
        rows.append(f"{ts:%Y-%m-%d %H:%M:%S}.{ts.microsecond:06d}{int(rng.integers(0, 10))},{isl[i]},{osl[i]}")
    return "\n".join(rows) + "\n"


def burstgpt(rng: np.random.Generator, n: int = 500) -> str:
    isl, osl = lengths(rng, n)
    t = np.round(arrivals_s(rng, n, 1.0)).astype(int)
    failed = rng.random(n) < 0.03  # BurstGPT logs failed requests with 0 response tokens
    rows = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    for i in range(n):
        model = "ChatGPT" if rng.random() < 0.8 else "GPT-4"
        log = "Conversation log" if rng.random() < 0.7 else "API log"
        o = 0 if failed[i] else int(osl[i])
        rows.append(f"{t[i]},{model},{isl[i]},{o},{isl[i] + o},{log}")
    return "\n".join(rows) + "\n"


def agentic(rng: np.random.Generator, sessions: int = 80) -> str:
    """Multi-turn agent sessions in Mooncake JSONL with Dynamo's `session_id` and `delay`: each
    session opens with one of 3 agents' 3,072-token system prompts (shared by every session of that
    agent), then each turn's prompt is the previous one, its answer and a tool result; the tool runs
    `delay` ms between turns. Rows are in timestamp order (sessions interleave)."""
    system = [list(range(a * 1000, a * 1000 + 6)) for a in range(3)]  # 6 ids = 3,072 tokens each
    rows, next_id = [], 100_000
    starts = np.cumsum(rng.exponential(2000.0, sessions))  # a new session every 2 s on average
    for k in range(sessions):
        agent = int(rng.choice(3, p=[0.5, 0.3, 0.2]))
        turns = int(rng.integers(3, 15))
        isl = 3072 + int(rng.integers(200, 800))
        ids = system[agent] + list(range(next_id, next_id + -(-isl // BLOCK) - 6))
        next_id += len(ids)
        t = float(starts[k])
        delay = 0.0
        for turn in range(turns):
            osl = int(np.clip(round(rng.lognormal(np.log(150), 0.6)), 20, 600))
            row = {"timestamp": int(round(t)), "input_length": isl, "output_length": osl, "hash_ids": ids,
                   "session_id": f"agent{agent}-s{k:03d}"}  # fmt: skip
            if turn:
                row["delay"] = delay
            rows.append((t, k, turn, json.dumps(row)))
            # the next turn: this prompt, its answer and a tool result; the full blocks carry over
            grown = isl + osl + int(np.clip(round(rng.lognormal(np.log(900), 0.7)), 100, 4000))
            if grown > 32_000:
                break
            keep = ids[: isl // BLOCK]
            ids = keep + list(range(next_id, next_id + -(-grown // BLOCK) - len(keep)))
            next_id += -(-grown // BLOCK) - len(keep)
            # the tool runs `delay` ms after this turn's answer (about 400 ms + 25 ms a token here)
            delay = float(np.clip(round(rng.lognormal(np.log(800), 0.8)), 50, 10_000))
            t += 400.0 + 25.0 * osl + delay
            isl = grown
    rows.sort()
    return "\n".join(r[3] for r in rows) + "\n"


def main() -> None:
    rng = np.random.default_rng(SEED)
    for name, text in (
        ("mooncake_sample.jsonl", mooncake(rng)),
        ("azure_sample.csv", azure(rng)),
        ("burstgpt_sample.csv", burstgpt(rng)),
        ("agentic_sample.jsonl", agentic(rng)),
    ):
        (HERE / name).write_text(text, encoding="utf-8")
        print(f"wrote {HERE / name}")


if __name__ == "__main__":
    main()
