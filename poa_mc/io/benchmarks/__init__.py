"""Measured benchmark results, read from the files that load generators write, into one normalized
table: a list of `LoadPoint`, one per load point (a run at one concurrency or request rate, or one
stage of a staged run). The entry point is `poa_mc.io.benchmarks.read.read_benchmark`.

One module per concept, each importing from where a name lives (this file re-exports nothing):

- `common`: what every reader shares: `LoadPoint`, `BenchmarkFormatError`, the format names, the
  per-request table's schema, and the checked-number helpers.
- `read`: `read_benchmark`: telling the format from the content and handing the file to its reader.
- `aiperf`: AIPerf's per-request JSON Lines and its JSON summary.
- `csv_summary`: the CSV summaries of AIPerf and genai-perf (one layout, one reader for both).
- `vllm_bench`: `vllm bench serve --save-result` JSON.
- `inference_perf`: inference-perf's stage reports.

The field names and units were read in the tools' own sources (docs/sources.md, "Benchmark result
formats"; each reader's docstring lists its fields, units and sources); no code of theirs is used.
"""
