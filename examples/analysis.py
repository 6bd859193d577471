# %% [markdown]
# # Three typical analyses of a poa-mc run
#
# Run `poa-mc run` first (the built-in quickstart grid writes `runs/quickstart`), then run this
# file cell by cell in an editor that understands `# %%`, or as a script:
# `python examples/analysis.py [RUN_DIR]`.

# %%
import sys

import polars as pl

import poa_mc

run = poa_mc.load(sys.argv[1] if len(sys.argv) > 1 else "runs/quickstart")
print(run.manifest["name"], "seed", run.manifest["seed"], "fingerprint", run.manifest["fingerprint"])

# %% [markdown]
# ## 1. Where does anarchy set in? PoA against load, with intervals
# A point is "anarchic" when the lower end of the counterfactual PoA's interval is above 1.05:
# the selfish router is at least 5% worse than the best policy tried, with 95% confidence.

# %%
poa = (
    run.poa.select(
        "topology",
        "concurrency",
        "poa_hat",
        "poa_hat_lo",
        "poa_hat_hi",
        "poa_cf",
        "poa_cf_lo",
        "poa_cf_hi",
        "best_policy",
    )
    .with_columns(anarchic=pl.col("poa_cf_lo") > 1.05)
    .sort("topology", "concurrency")
    .collect()
)
print(poa)

# %% [markdown]
# ## 2. Which policy wins where? TTFT P99 per policy, relative to the best policy of each point

# %%
p99 = (
    run.summary.select("topology", "concurrency", "policy", "ttft_p99_ms", "ttft_p99_ms_lo", "ttft_p99_ms_hi")
    .with_columns(vs_best=pl.col("ttft_p99_ms") / pl.col("ttft_p99_ms").min().over("topology", "concurrency"))
    .sort("topology", "concurrency", "vs_best")
    .collect()
)
print(p99)
print(p99.pivot(on="policy", index=["topology", "concurrency"], values="vs_best"))

# %% [markdown]
# ## 3. Back to the samples: the per-replica spread and the router's cache affinity
# Every request of every replica is in `run.samples` (lazy: only the columns used are read) when
# the run keeps them all (`[run] samples = "all"`, the default); `run.acc` has one row of
# accumulators per replica whatever it keeps.
# Here: per-replica mean TTFT of the selfish policy (the spread the intervals come from), and how
# often the router sent a request to a worker that already held its prefix.

# %%
selfish = run.manifest["grid"]["poa"]["selfish"]
per_replica = (
    run.samples.join(run.cells.select("cell_id", "topology", "concurrency", "policy"), on="cell_id")
    .filter(pl.col("policy") == selfish)
    .group_by("topology", "concurrency", "replica")
    .agg(
        ttft_mean_ms=pl.col("ttft_ms").mean(),
        hit_rate=pl.col("cached_blocks").sum() / pl.col("prompt_blocks").sum(),
    )
    .group_by("topology", "concurrency")
    .agg(
        replicas=pl.len(),
        ttft_mean_ms=pl.col("ttft_mean_ms").mean(),
        ttft_replica_sd_ms=pl.col("ttft_mean_ms").std(),
        hit_rate=pl.col("hit_rate").mean(),
    )
    .sort("topology", "concurrency")
    .collect()
)
print(per_replica)
