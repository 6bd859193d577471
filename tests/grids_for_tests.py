"""Small grid texts shared by the tests (kept tiny: the whole suite must stay fast)."""

SMALL = """
[run]
name = "small"
seed = 7
replicas = 6
requests = 48
warmup = 8

[workload]
isl = 512
osl = 16
prefix_groups = 4

[cluster]
flow = "decode_first"

[grid]
topology = ["1P/2D", "1P/3D"]
concurrency = [4, 32]

[[policy]]
name = "greedy"
kind = "kv"

[[policy]]
name = "rr"
kind = "round_robin"

[poa]
selfish = "greedy"
window = 4
"""
