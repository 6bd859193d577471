"""State layout of one replica: the field indices shared by the host packer and the kernels.

Every state array has the replica as its first index, `arr[r, ...]`. On the CPU the arrays are
C-ordered (one replica's state is contiguous, good for one thread per replica). On CUDA the
host allocates the transposed shape and passes a transposed view, so `arr[r, ...]` of adjacent
threads hits adjacent addresses (coalesced). The kernels index identically on both targets.

Counters are int32 (half the bytes of int64: a replica's state stays small enough to live in
L1/L2 on the CPU and moves half the bytes on the GPU); clocks are float64 milliseconds.

Arrays (R = replicas, S = request slots, W = workers, G = prefix groups, Q = queue capacity):
  ip    int64 (NP_I,)           integer parameters, indices P_*
  fp    float64 (NF_P + T,)     float parameters, indices F_*; with a table profile (F_TAB = 1), its
                                T-float table region after them (poa_mc/kernels/timing.py: the axes and
                                values at the offsets F_TB_*)
  slot_i int32 (R, S, NSI)      per in-flight request, indices SI_*
  slot_f float64 (R, S, NSF)    per in-flight request times, indices SF_*
  wk_i  int32 (R, W + 1, NWI [+ 2 G])  per worker counters, indices WI_* (row W: the shared queue);
                                with P_DEDUP, then per prefix group g the router's in-flight requests
                                of g on the worker (WI_RG + 2 g) and the longest prefix among them,
                                blocks (WI_RG + 2 g + 1): Dynamo's router counts those blocks once
  wk_f  float64 (R, W + 1, NWF) per worker times, indices WF_*
  pc    int32 (R, W, G + A, 4)  prefix cache (poa_mc/kernels/cache.py), one per worker (with P_PSHARE, the prefill
                                workers' shared cache is worker 0's). Rows g < G, prefix chains: length
                                (blocks), LRU stamp, pin count, and the length the router has been
                                told of (lags by the event delay). Rows G..G+A-1, a FIFO ring of
                                released runs of unique blocks: blocks, LRU stamp, owner slot (-1
                                none; a preempted request's own run), unused
                                With tiers (any WI_G2CAP > 0) the last axis is NPC_T wide: chain rows
                                add PC_N2.. (poa_mc/kernels/tiers.py; worker 0's rows also hold the replica's
                                G4, shared by the prefill workers, in PC_B4..), ring rows hold G2's
                                ring of anonymous runs in PC_R2N, PC_R2S
  ev    float64 (R, E, 4)       ring of cache events on their way to the router: (due ms, w, g, length)
  queue int32 (R, W + 2 [+ 2], Q)  FIFO ring of slot ids per worker; row W is the shared pull queue
                                (the batch router's held decisions), row W + 1 the stack of free
                                slots (open loop); with P_CLIENT, rows W + 2 and W + 3 the client's
                                rings (poa_mc/kernels/client.py)
  run   int32 (R, W, min(Q, max_seqs))         running slots of each decode worker (unordered, swap-remove)
  heap_t float64 (R, H)         min-heap of client wake-up times (closed loop)
  heap_c int32 (R, H)           client id of each heap entry
  rep_i int64 (R, NRI)          replica counters, indices RI_*
  rep_f float64 (R, NRF + 2 CW + 3 CS)  replica clocks, indices RF_*; then, with the adaptive
                                controller (poa_mc/kernels/controller.py), a ring of the CW most recent
                                first tokens (TTFT ms, time observed ms) at NRF + 2 i, and a log of
                                its first CS regime switches (time ms, from, to) at NRF + 2 CW + 3 j;
                                then the batch router's scratch (poa_mc/kernels/batch.py), or the planner's
                                log of its first PL moves (time ms, prefill, decode workers) at
                                NRF + 2 CW + 3 CS + 3 j (poa_mc/kernels/planner.py; never both)
  out_f float64 (R, N, NOF)     measured request outputs, indices OF_*
  out_i int32 (R, N, NOI)       measured request outputs, indices OI_*
  cand  float64 (R, N, W, 2)    router view per candidate worker (global index): [tokens, blocks],
                                the prefill stage in columns 0..NP-1, the decode stage in NP..
  tally_f, tally_h              with P_TALLY, each replica's tally of its requests (poa_mc/kernels/tally.py,
                                where they and their input `edges` are laid out); else (R, 1), (R, 1, 1)
  poa   float64 (R, 3)          with P_POA, each replica's PoA-hat sums (ACTUAL, OPT, windows; NaN:
                                worked out on the host instead), poa_mc/kernels/poa_hat.py; its scratch
                                (one replica's window buffers) is laid out there
Workers are numbered prefill first (0..NP-1), then decode (NP..NP+ND-1).
All of them start zeroed (poa_mc/kernels/cpu.py, poa_mc/kernels/cuda.py).

Over 500 lines because it is the one declaration the host packer and both targets' kernels read:
every index and table of a replica's state, parameters and outputs, in one place so that no two
of them can be given the same slot unnoticed.
"""

STATE_NAMES = ("slot_i", "slot_f", "wk_i", "wk_f", "pc", "ev", "queue", "run", "heap_t", "heap_c", "rep_i", "rep_f")
OUTPUT_NAMES = ("out_f", "out_i", "cand", "tally_f", "tally_h")  # poa: poa_mc/kernels/poa_hat.py, its own pass

# ---- integer parameters (ip) ----
P_NP = 0  # prefill workers (0 in aggregated)
P_ND = 1  # decode workers
P_FLOW = 2  # FLOW_*
P_B = 3  # block size, tokens
P_PKV = 4  # prefill worker kv blocks
P_DKV = 5  # decode worker kv blocks
P_BUDGET = 6  # token budget per pass
P_MAXSEQ = 7  # max sequences per pass / running
P_MAXLOCAL = 8  # decode_first: uncached tokens up to this prefill locally
P_POLICY = 9  # POL_*
P_D = 10  # power-of-d sample size
P_ARRIVAL = 11  # 0 closed, 1 poisson, ARRIVAL_CONSTANT: open loop with equal gaps (1 / rate)
P_C = 12  # clients (closed loop)
P_G = 13  # prefix groups
P_POP = 14  # 0 uniform, 1 zipf (cdf table)
P_ISL_KIND = 15  # DIST_*
P_ISL_A = 16  # fixed value / uniform low
P_ISL_B = 17  # uniform high / lognormal cap / empirical length
P_OSL_KIND = 18
P_OSL_A = 19
P_OSL_B = 20
P_N = 21  # measured requests per replica
P_WARM = 22  # warm-up requests per replica
P_S = 23  # request slots
P_Q = 24  # queue capacity
P_PROF = 25  # PROF_*
P_RECORD = 26  # 1: record router candidates
P_K = 27  # unused (the candidate columns are the workers, see cand)
P_SEED = 28
P_STREAM = 29
P_NAIVE = 30  # 1: step decode one step per event, each pass scanning its running set (reference for the closed form)
P_H = 31  # heap capacity
P_MAXEVENTS = 32  # safety valve: events per replica
P_RBASE = 33  # global index of the first replica in this batch (random key)
P_DADMIT = 34  # DADMIT_*: who a decode worker admits first (see poa_mc/kernels/decode.py: admit_queue)
P_DRAIN = 35  # 1: no arrivals after the measured requests (a finite run, as a replay)
P_RECLAST = 36  # 1: a prefix hit stops short of the prompt's last token (vLLM recomputes it)
P_CTL = 37  # 1: the adaptive controller retunes (omega, tau) during the run (poa_mc/kernels/controller.py)
P_CTL_WIN = 38  # controller: first tokens in its sliding window (CW)
P_CTL_LOG = 39  # controller: switches logged per replica (CS)
P_BATCH_N = 40  # batch router: decode decisions held before a joint assignment (0: no batch router)
P_PSHARE = 41  # 1: prefill_first's prefill workers share one cache, a global LRU: worker 0's pc rows and cache
#                counters (WI_USED, WI_FREE, WI_AH, WI_AN, WI_OLDG), of the pool's P_PKV blocks
P_PLAN = 42  # 1: the planner moves the prefill/decode split during the run (poa_mc/kernels/planner.py)
P_PL_G = 43  # planner: GPU budget
P_PL_GP = 44  # planner: GPUs per prefill worker
P_PL_GD = 45  # planner: GPUs per decode worker
P_PL_I0 = 46  # planner: the split the run starts at (index i: i + 1 prefill workers)
P_PL_LOG = 47  # planner: moves logged per replica (PL)
P_G2CAP = 48  # tiers (poa_mc/kernels/tiers.py): G2 (host DRAM) blocks per prefill worker (0: G1 only)
P_G3CAP = 49  # tiers: G3 (local SSD) blocks per prefill worker (0: none)
P_DECAY = 50  # tiers: ms per decay step of a chain's frequency (0: no decay)
P_CR1 = 51  # tiers: the kv router's credit for a G1, G2, G3 hit, in thousandths (51, 52, 53)
P_CHECK = 54  # 1: check the conservation of blocks after every event (debug; STATUS_TIERS if broken)
P_TRACE = 55  # TRACE_*: requests from a replayed trace's table (tabs rows TB_*, poa_mc/model/replay.py)
P_TN = 56  # trace: rows
P_TS = 57  # trace: sessions (closed replay)
P_TSAMPLE = 58  # trace, closed replay: 0 sessions in order from a random start, 1 drawn with replacement
P_LINEAGE = 59  # 1: the prefill workers' caches evict by the lineage rule (WI_LINEAGE), 0: LRU
P_TG = 60  # trace: prefix groups of one pass over the trace; pass k's requests use groups + k P_TG (mod P_G)
P_G4CAP = 61  # tiers: G4 (remote storage shared by the prefill workers) blocks of the replica (0: none)
P_CR4 = 62  # tiers: the kv router's credit for a G4 hit, in thousandths
P_DEDUP = 63  # 1: cluster.router_blocks = "dynamo" (poa_mc/kernels/router.py): where the router assumes KV reuse it
#               counts a block its in-flight requests on a worker share once (per group, wk_i's WI_RG
#               columns); a disaggregated prefill router books no blocks
P_BSHIFT = 64  # log2(block size) + 1 when it is a power of two, else 0 (blocks.py: block counts by shifts)
P_TALLY = 65  # 1: each replica's requests are tallied as it ends (poa_mc/kernels/tally.py)
P_POA = 66  # POA_*: each replica's PoA-hat window sums worked out as it ends (poa_mc/kernels/poa_hat.py), or none
P_POA_WIN = 67  # PoA-hat: decisions per window
P_POA_SLOTS = 68  # PoA-hat: slots of each worker in a window's assignment
P_POA_LO = 69  # PoA-hat: the decision's first candidate worker (its column in cand)
P_POA_K = 70  # PoA-hat: the decision's candidate workers
P_POA_TIMES = 71  # POA_T_*: when the decision was made and when the load it booked left
P_CLIENT = (
    72  # 1: the load generator is modelled (poa_mc/kernels/client.py): a connection pool and/or a per-request overhead
)
P_CONN = 73  # client: connections in the pool (0: unlimited)
P_HANDOVER = 74  # HANDOVER_*: how a prefill_first decode worker takes over a request's KV (poa_mc/kernels/decode.py)
P_LINKS = 75  # 1: workers sit on nodes, transfers across nodes share their node's link (poa_mc/kernels/links.py); the
#               worker's node is then ip[NP_I + w]
P_LINK_F = 76  # with P_LINKS: rep_f's index of node 0's link clock (one per node after it)
LLMD_PICK_MAX, LLMD_PICK_RANDOM, LLMD_PICK_WEIGHTED = 0, 1, 2  # PolicySpec.picker's values, in order
ARRIVAL_CONSTANT = 2  # ip[P_ARRIVAL]: arrivals 1 / rate apart (inference-perf's `constant` load)
MAX_STAGES = 16  # a load schedule's stages at most (poa_mc/kernels/schedule.py)
P_NSTAGE = 77  # a load schedule's stages (poa_mc/kernels/schedule.py); 0: one load for the whole run
P_STAGE_END = 78  # MAX_STAGES entries: stage k's measured requests end before index ip[P_STAGE_END + k] (cumulative)
P_STAGE_C = P_STAGE_END + MAX_STAGES  # MAX_STAGES entries, closed loop: stage k's concurrency
P_LLMD_PICK = P_STAGE_C + MAX_STAGES  # llmd: its picker, LLMD_PICK_* (poa_mc/kernels/router.py)
NP_I = P_LLMD_PICK + 1

HANDOVER_MOCKER = 0  # Dynamo's mocker and replay: one reservation per pass boundary, admitted at the
#                      first boundary after the KV arrived
HANDOVER_VLLM = 1  # vLLM 0.14.1's NixlConnector: every waiting transfer that fits reserves at a boundary
#                    with no preemption, posting its reads delays that pass, the arrival is seen at the
#                    end of the pass it falls in and the request admitted a step later (async scheduling)
VLLM_POLL_MS = 1.0  # vLLM's engine loop: an idle engine polls every 1 ms; a request seen done is
#                     admitted at the first pass boundary at least this long after (the next step)

POA_NONE = 0
POA_ROUTER = 1  # Dynamo's router cost, F_POA_OMEGA * tokens / block size + blocks
POA_STEP = 2  # the predicted first decode step, tabulated over whole block counts (the step table)
POA_OBSERVED_STEP = 3  # priced as POA_STEP, the realized cost the observed TTFT after the decision
POA_OBSERVED_CLIENT = 4  # priced as POA_STEP, the realized cost the request's whole TTFT (as its client saw it)
POA_T_PREFILL = 0  # prefill_first's prefill choice: made at arrival, its load gone when the prefill ends
POA_T_AFTER_PREFILL = 1  # prefill_first's decode choice: made as the prefill ends (windows in that
#                          order), its load gone when the request ends
POA_T_ARRIVAL = 2  # the other flows' decode choice: made at arrival, tokens gone at the first token,
#                    blocks at the end

TRACE_NONE = 0
TRACE_TIMES = 1  # open loop at the rows' timestamps (scaled by F_TSCALE), cyclic from a random offset
TRACE_CLOSED = 2  # closed loop: each client sends a session's turns in order, `delay` after the last

# rows of tabs (float64): 0, 1 empirical isl, osl values; 2 the zipf cdf; with a trace its table:
TB_ISL = 3
TB_OSL = 4
TB_GRP = 5  # prefix chain (-1: drawn from the synthetic prefix model)
TB_PFX = 6  # shared prefix, blocks
TB_TIME = 7  # arrival offset, ms (timestamps replay)
TB_DELAY = 8  # wait after the session's previous turn completed, ms (closed replay)
TB_NEXT = 9  # the session's next row (-1: its last turn)
TB_START = 10  # first row of each session (closed replay), P_TS entries
NTB = 11

DADMIT_FCFS = 0  # vLLM's waiting queue: preempted requests first, never starved
DADMIT_REPLAY = 1  # Dynamo 1.6.1's replay: arrived transfers first, preempted held back

FLOW_PREFILL_FIRST = 0
FLOW_DECODE_FIRST = 1
FLOW_AGGREGATED = 2

# The routing policies, one line each: `[[policy]] kind` -> the id the kernels dispatch on.
# poa_mc.model.spec_policy's POLICY_KINDS and poa_mc.engine.packing read this table. Policies that pick one of
# the candidates are a function each in router.py, dispatched by `choose`; pull, oracle and batch
# change the request's path (placement.py, prefill.py, batch.py). A new candidate-picking policy is
# a line here (and its POL_ constant), a function in router.py and a line in `choose`.
POLICY_TABLE = (
    ("kv", 0),  # Dynamo's KV router: least cost, or its softmax at temperature > 0 (router.py: kv)
    ("round_robin", 1),
    ("random", 2),
    ("least_loaded", 3),  # least queued prefill tokens (prefill) or active blocks (decode)
    ("power_of_d", 4),  # the least loaded of d candidates drawn at random
    ("pull", 5),  # idle prefill workers take requests from one shared queue
    ("adaptive", 0),  # the kv router, its (temperature, overlap weight) retuned by controller.py
    ("oracle", 6),  # prefill_first: least predicted TTFT from the true state (placement.py: oracle_*)
    ("batch", 7),  # prefill_first: decode decisions held and assigned jointly (batch.py)
    ("hash", 8),  # each prefix group has one owner worker, by rendezvous hashing (router.py: hash_owner)
    ("llmd", 9),  # llm-d's endpoint picker: weighted prefix, KV-utilisation and queue scores, the max (router.py: llmd)
    ("sglang", 10),  # SGLang's cache-aware router: shortest queue when imbalanced, else prefix or free cache
)
POLICY_ID = dict(POLICY_TABLE)
POL_KV = POLICY_ID["kv"]
POL_ROUND_ROBIN = POLICY_ID["round_robin"]
POL_RANDOM = POLICY_ID["random"]
POL_LEAST_LOADED = POLICY_ID["least_loaded"]
POL_POWER_OF_D = POLICY_ID["power_of_d"]
POL_PULL = POLICY_ID["pull"]
POL_ORACLE = POLICY_ID["oracle"]
POL_BATCH = POLICY_ID["batch"]
POL_HASH = POLICY_ID["hash"]
POL_LLMD = POLICY_ID["llmd"]
POL_SGLANG = POLICY_ID["sglang"]

DIST_FIXED = 0
DIST_UNIFORM = 1
DIST_LOGNORMAL = 2
DIST_EMPIRICAL = 3

PROF_POLY = 0  # pass-timed: the polynomial, or the table when fp[F_TAB] = 1
PROF_EXP = 1
PROF_DET = 2
# the timing-profile kinds (`[profile] kind`) and the id the kernels run each as: pass-timed
# (PROF_POLY: prefill passes and decode steps priced by poa_mc/kernels/timing.py), or a theory kind
# whose service times poa_mc/kernels/requests.py draws per request. The grid's kinds, their check
# and the engine's packing follow this table.
PROFILE_TABLE = (("polynomial", PROF_POLY), ("aic", PROF_POLY), ("exponential", PROF_EXP), ("deterministic", PROF_DET))
PROFILE_ID = dict(PROFILE_TABLE)

# ---- float parameters (fp) ----
F_OMEGA = 0  # overlap weight
F_TAU = 1  # temperature
F_THINK = 2  # mean think time, ms (exponential)
F_RATE = 3  # Poisson rate, requests per ms
F_RATIO = 4  # prefix ratio
F_ISL_MU = 5  # lognormal: mu and sigma of the underlying normal
F_ISL_SIG = 6
F_OSL_MU = 7
F_OSL_SIG = 8
F_P2 = 9  # prefill polynomial, ms
F_P1 = 10
F_P0 = 11
F_D2 = 12  # decode step polynomial in u, ms
F_D1 = 13
F_D0 = 14
F_SVC = 15  # theory profiles: mean prefill service time, ms
F_XFER_TOK = 16  # KV transfer, ms per token
F_XFER_LAT = 17  # KV transfer fixed latency, ms
F_EVDELAY = 18  # delay before the router sees a cache store/evict event, ms
F_DOMEGA = 19  # prefill_first: overlap weight of the decode choice (0: fewest active blocks, Dynamo's)
F_CTL_PERIOD = 20  # controller: control period, ms
F_CTL_ALPHA = 21  # controller: EWMA weight of the newest P99
F_CTL_TH1 = 22  # controller: EWMA TTFT P99 (ms) from which the regime is "transition"
F_CTL_TH2 = 23  # controller: ... "saturated"
F_CTL_HYST = 24  # controller: relative margin a threshold must be crossed by
F_CTL_DWELL = 25  # controller: minimum time between switches, ms
F_CTL_TAU = 26  # controller: temperature of regimes 0, 1, 2 (26, 27, 28)
F_CTL_OMEGA = 29  # controller: overlap weight of regimes 0, 1, 2 (29, 30, 31)
F_OVH_PASS = 32  # prefill worker: host time per scheduler pass, ms
F_OVH_REQ = 33  # prefill worker: host time per request in a pass, ms
F_BATCH_MS = 34  # batch router: longest hold of a decode decision, ms
F_PL_INT = 35  # planner: adjustment interval, ms
F_PL_START = 36  # planner: time a worker takes to start once the GPUs it needs are free, ms
F_PL_SLO_T = 37  # planner: TTFT target, ms
F_PL_SLO_I = 38  # planner: ITL target, ms
F_TAB = 39  # 1: pass and step times interpolated in the table region (an aic profile); 0: the polynomial
# Offsets (stored as floats) into fp of the table region's arrays, in this order; an axis's length
# is the next offset minus its own (poa_mc/model/timing_tables.py: TimingTable.parts).
F_TB_PB = 40  # prefill attention: batch axis (requests in the pass)
F_TB_PU = 41  # prefill attention: new tokens per request
F_TB_PC = 42  # prefill attention: cached (or already computed) tokens per request
F_TB_PV = 43  # prefill attention: ms, [batch][uncached][cached], C order
F_TB_GT = 44  # prefill outside attention: tokens of the pass, all requests together
F_TB_GV = 45  # prefill outside attention: ms per token node
F_TB_DB = 46  # decode: batch axis (sequences in the step)
F_TB_DC = 47  # decode: context tokens per sequence
F_TB_DV = 48  # decode: step ms, [batch][context], C order (its length: the axes' product)
F_G2_MS = 49  # tiers: ms to copy one block over the G1<->G2 link (0: instant)
F_G3_MS = 50  # tiers: ms to copy one block over the G2<->G3 link
F_TPERIOD = 51  # trace, timestamps replay: period of the cyclic replay, ms (trace time)
F_TSCALE = 52  # trace, timestamps replay: simulated ms per trace ms (1 / speedup)
F_G4_MS = 53  # tiers: ms to copy one block over a prefill worker's link to G4
# Offsets of two lookups in the table region (after F_TB_DV's values): for each whole batch size b
# from 1 to its axis's last node (at most 1024), the interval of the axis used for b and b's weight
# in it, the pair at offset + 2 b (what timing.bracket finds, worked out once by the host,
# poa_mc/model/timing_tables.py: batch_lookup; a step or a pass of b requests reads its batch blend
# instead of searching the axis). The decode lookup ends where the prefill one starts, which ends
# at len(fp).
F_TB_DN = 54  # decode batch axis (F_TB_DB)
F_TB_PN = 55  # prefill attention batch axis (F_TB_PB)
F_SLO_TTFT = 56  # tally: the [slo] TTFT bound, ms (<= 0: none)
F_SLO_ITL = 57  # tally: the [slo] ITL bound, ms (<= 0: none)
F_POA_OMEGA = 58  # PoA-hat: the router cost's weight on tokens (POA_ROUTER)
F_CL_OVH = 59  # client: ms from a request's connection to its arrival at the frontend (client-side overhead)
F_NIXL_POST = 60  # HANDOVER_VLLM: ms of the decode worker's step to post the reads of one KV block
F_NIC_GBPS = 61  # P_LINKS: a node's network link, GB/s (1e6 bytes per ms), shared by the transfers leaving it
F_KV_BYTES = 62  # P_LINKS: KV bytes per prompt token (what a transfer across nodes moves)
F_PTOK = 63  # the shared prefix's cap, tokens: prefix_tokens (F_RATIO = 1 then), or 1e300 (no cap: F_RATIO)
F_LLMD_WP = 64  # llmd: weight of the prefix-cache score
F_LLMD_WK = 65  # llmd: weight of the KV-cache-utilisation score
F_LLMD_WQ = 66  # llmd: weight of the queue score
F_SGL_CACHE = 67  # sglang: prefix match rate above which the best-matching worker is chosen
F_SGL_ABS = 68  # sglang: load imbalance threshold, absolute (requests)
F_SGL_REL = 69  # sglang: load imbalance threshold, relative (max load over min load)
F_STAGE_RATE = 70  # MAX_STAGES entries, open loop: stage k's arrival rate, requests per ms (no schedule: F_RATE's)
NF_P = F_STAGE_RATE + MAX_STAGES

# ---- prefix cache columns (pc); 0..3 as in the table above ----
NPC = 4  # G1 only
PC_N2 = 4  # chain rows: blocks of the chain in G2 (the next ones after its G1 blocks)
PC_S2 = 5  # ... LRU stamp of that segment (its G1 stamp when it was demoted)
PC_N3 = 6  # ... blocks in G3 (after the G2 ones)
PC_S3 = 7
PC_FREQ = 8  # ... frequency: 1 when stored, doubled on each hit, -1 per decay step (0: no chain)
PC_EPOCH = 9  # ... the decay step PC_FREQ was last written at
PC_B2 = 10  # ... index in the chain of the G2 segment's first block (= its G1 blocks once settled)
PC_B3 = 11  # ... of the G3 segment's first block (= B2 + N2 once settled): kept through the moves
#               in between, so that what G3 offloads to G4 has its place in the chain
PC_B4 = 12  # worker 0's chain rows: the replica's G4 segment of the chain (shared by every
PC_N4 = 13  # prefill worker): first block, blocks,
PC_S4 = 14  # ... LRU stamp
PC_R2N = 4  # ring rows: blocks of G2's anonymous run at this ring index
PC_R2S = 5  # ... its stamp
NPC_T = 15

# ---- per-slot integers ----
SI_SEQ = 0  # arrival index in the replica
SI_CLIENT = 1
SI_ISL = 2
SI_OSL = 3
SI_GRP = 4
SI_PFX = 5  # shared prefix blocks
SI_NEED = 6  # tokens the prefill must compute
SI_DONE = 7  # tokens computed so far
SI_CHUNK = 8  # tokens scheduled in the current pass
SI_GEN = 9  # output tokens generated
SI_NEXTB = 10  # the most output tokens its decode blocks hold (SI_PFX + SI_RESERVE) * B - isl + 1
SI_PW = 11  # prefill worker (global index), -1 local
SI_DW = 12  # decode worker (global index)
SI_STATE = 13  # ST_*
SI_RESERVE = 14  # blocks held on the decode worker
SI_APT = 15  # tokens added to the router's active prefill tokens
SI_ABP = 16  # blocks added to the router's active blocks (prefill_first: of the prefill choice until
# the prefill ends, then of the decode choice)
SI_ADMIT = 17  # 1 once admitted to a prefill pass (cache looked up, blocks held)
SI_MEAS = 18  # output row, -1 if not measured
SI_FRESH = 19  # 1 until its first decode step has run
SI_KCOUNT = 20  # closed loop: requests this client has sent (slot = client)
SI_RECOMP = 21  # output tokens a preempted request recomputes with its prompt (0 otherwise)
SI_GHOST = 22  # preempted: ring index of the run it left on its decode worker (GHOST_NONE: none); -1 never preempted
SI_ADMSEQ = 23  # admission order on its decode worker (RI_ADMSEQ when admitted)
SI_RESV = 24  # RESV_*: how its decode blocks are taken (prefill_first: reserved for the transfer)
SI_CACHED = 25  # blocks found cached
SI_H2 = 26  # tiers: prompt blocks it found in G2 (copied to G1 before its prefill)
SI_H3 = 27  # tiers: ... in G3
SI_TROW = 28  # trace, closed replay (slot = client): the row of its request, -1 before a new session
SI_TCYC = 29  # trace, closed replay: the pass over the trace its current session belongs to
SI_H4 = 30  # tiers: ... in G4
SI_LINK = 31  # P_LINKS: 1 + the link its KV transfer runs on (0: none)
NSI = 32  # 128-byte rows on 64-byte aligned arrays (poa_mc/kernels/cpu.py): a decode pass's
#          fields of a running request (SI_ISL..SI_NEXTB) are one cache line

RESV_ADMIT = 0  # decode blocks are taken at admission
RESV_PENDING = 1  # prefill_first: waiting for the decode worker to reserve its blocks
RESV_HELD = 2  # prefill_first: blocks reserved, KV transfer under way or done
RESV_SEEN = 3  # HANDOVER_VLLM: the transfer was seen done at SF_READY - VLLM_POLL_MS; admitted from SF_READY

GHOST_NONE = -2  # SI_GHOST of a preempted request that left no cached run

STATUS_OVERCAP = 4  # rep_i[RI_STATUS]: a worker held more blocks than it has (an engine bug)
STATUS_TIERS = 5  # rep_i[RI_STATUS]: with P_CHECK, a tier's blocks were not conserved (an engine bug)

ST_FREE = 0
ST_PREFILL = 1  # in a prefill worker's or the shared queue
ST_DECODE_Q = 2  # waiting on a decode worker
ST_RUNNING = 3  # admitted on a decode worker (ST_DECODE_Q again if preempted)

# ---- per-slot floats ----
SF_ARR = 0
SF_TPF = 1  # first scheduled in a prefill pass
SF_READY = 2  # KV ready on the decode worker
SF_ADM = 3  # admitted on the decode worker
SF_FIRST = 4  # first token
SF_SVC = 5  # theory profiles: this request's prefill service time
SF_ONB = 6  # tiers: the copy of lower-tier hits its first prefill pass waited for, ms
SF_TWAIT = 7  # trace, closed replay (slot = client): the delay before its session's next turn, ms
SF_SRV = 8  # client (P_CLIENT): arrival at the frontend (due time while in transit); SF_ARR is then the
#            client's creation of the request, from which TTFT and E2E are measured, as a client sees them
SF_KV = 9  # HANDOVER_VLLM, while RESV_SEEN: when its KV arrived (SF_READY is then the admission's earliest time)
SF_REM = 10  # P_LINKS: bytes of its transfer left as of its link's clock
SF_XFER = 11  # prefill_first: its KV transfer's start (from the reservation, after posting), then its time, ms
NSF = 12

# ---- per-worker integers ----
WI_APT = 0  # router: active prefill tokens
WI_AB = 1  # router: active blocks
WI_USED = 2  # blocks in use (chains + held)
WI_QH = 3  # queue head
WI_QN = 4  # queue length
WI_NRUN = 5  # running slots (decode workers)
WI_PASS_K = 6  # queue entries in the current prefill pass
WI_SEG_N = 7  # decoding sequences in the current decode segment
WI_SEG_X0 = 8  # summed context at the segment's first step
WI_SEG_M = 9  # steps in the segment
WI_MIXED = 10  # 1 if the current decode-worker pass holds prefill chunks
WI_AH = 11  # released-run ring: head index
WI_AN = 12  # released-run ring: runs
WI_FREE = 13  # evictable blocks (released runs + unpinned chains), part of WI_USED
WI_OLDG = 14  # cache.py: 0 unknown, 1 no evictable chain, g + 2: chain g is the oldest evictable one
# tiers (poa_mc/kernels/tiers.py); a worker with WI_G2CAP = 0 has G1 alone (decode workers always)
WI_G2CAP = 15  # G2 capacity, blocks
WI_G3CAP = 16  # G3 capacity, blocks
WI_G2U = 17  # G2 blocks in use (chain segments + anonymous runs)
WI_G3U = 18  # G3 blocks in use (chain segments)
WI_A2H = 19  # G2's ring of anonymous runs: head index
WI_A2N = 20  # ... runs
WI_LH2 = 21  # the last acquire's blocks promoted from G2 (read by its caller)
WI_LH3 = 22  # ... from G3
WI_CR1 = 23  # the kv router's credit for a hit in G1, G2, G3, G4 (P_CR1.., P_CR4), in thousandths (23..26)
WI_DECAY = 27  # ms per decay step of a chain's frequency (P_DECAY; 0: none)
WI_LINEAGE = 28  # 1: the lineage rule, leaves (released runs) evicted before any prefix chain (P_LINEAGE)
WI_G4CAP = 29  # G4 capacity, blocks (the replica's, written in every prefill worker's row; 0: no G4)
WI_G4U = 30  # worker 0's row: G4 blocks in use (the replica's, chain segments)
WI_LH4 = 31  # the last acquire's blocks copied from G4 (they stay there too)
# decode worker: its running set as decode_end left it, so that the next plan_decode scans only the
# requests it admitted (valid while WI_AGG = 1: decode_end sets it, plan_decode consumes it; only
# decode_end, plan_decode's admissions and preemption change a running set)
WI_AGG = 32  # 1: the four below describe run[0 : WI_NRUN]
WI_AGG_N = 33  # sequences decoding (their prompt computed)
WI_AGG_X = 34  # their summed context, isl + output so far
WI_AGG_M = 35  # the fewest output tokens any of them has left (when WI_AGG_N > 0)
WI_AGG_W = 36  # sequences still (re)computing their prompt
NWI = 37
WI_RG = NWI  # with P_DEDUP: 2 columns per prefix group after the counters (see wk_i above)

# ---- per-worker floats ----
WF_BUSY = 0  # end of the current pass, +inf when idle
WF_T0 = 1  # start of the current pass
WF_WAKE = 2  # idle decode worker: when its queue head becomes ready
WF_HELD0 = 3  # decode worker: blocks held by requests (not evictable) at the current pass's start
NWF = 4

# ---- replica counters ----
RI_SEQ = 0  # arrivals so far
RI_DONE_MEAS = 1  # measured requests completed
RI_STAMP = 2  # LRU clock
RI_RR = 3  # round-robin pointer (the prefill choice in prefill_first, else the decode choice)
RI_DECIDE = 4  # routing decisions so far (random stream counter)
RI_HEAPN = 5
RI_FREE_TOP = 6  # open loop: free slots on the stack in queue row W + 1; closed loop: parked clients there
RI_STATUS = 7  # 0 ok, 1 slot overflow, 2 event limit
RI_EVENTS = 8
RI_NOPEN = 9  # open loop: requests generated
RI_INFLIGHT = 10
RI_EVH = 11  # router event ring: head
RI_EVN = 12  # router event ring: length
RI_MERGES = 13  # released-run ring merges (cache.py)
RI_PREEMPT = 14  # decode preemptions
RI_ADMSEQ = 15  # decode admissions so far (admission order, for the newest-first preemption)
RI_REGIME = 16  # controller: current regime (0 below, 1 transition, 2 saturated)
RI_SWITCHES = 17  # controller: regime switches so far
RI_TTH = 18  # controller: next write position in the first-token ring
RI_TTN = 19  # controller: entries in the first-token ring
RI_NPA = 20  # prefill workers the router may choose: the first RI_NPA (all of them without a planner)
RI_NDA = 21  # decode workers the router may choose: the first RI_NDA
RI_PL_I = 22  # planner: the split in force (index)
RI_PL_TO = 23  # planner: the split it is moving to (-1: none; the giving pool's workers drain meanwhile)
RI_PL_MOVES = 24  # planner: moves completed
RI_PL_NT = 25  # planner: first tokens observed in the current interval
RI_PL_NT2 = 26  # planner: ... emitted after its end (observed ahead, when a decode pass is planned)
RI_PL_NG = 27  # planner: inter-token gaps of the requests completed in the interval
RI_TJ0 = 28  # trace: the replica's first row (timestamps) or first session (closed, in order)
RI_TSESS = 29  # trace, closed replay: sessions started so far
RI_PWAKE = 30  # 1: a decode worker let go of a prefill worker's KV copy in this instant (decode.py)
RI_DONE_WIN = 31  # completions (any request) after the first measured arrival and before the last one:
#                   the open loop's throughput window (poa_mc.stats.cell_stats)
RI_RRD = 32  # prefill_first, round robin: the decode choice's own pointer (Dynamo rotates both stages)
RI_CONN = 33  # client: connections in use
RI_CPH = 34  # client: ring of requests waiting for a connection (queue row W + 2): head
RI_CPN = 35  # ... length
RI_CTH = 36  # client: ring of requests on their way to the frontend (queue row W + 3), in due order: head
RI_CTN = 37  # ... length
RI_CACT = 38  # closed loop: clients active (a schedule's current concurrency; P_C without one); the others park
RI_STAGE = 39  # a schedule's stage of the next request created (0 without one: F_STAGE_RATE holds the rate)
RI_STAGE_AT = 40  # the creation index where the next stage begins (-1: none)
NRI = 41

RF_NEXT_ARR = 0  # open loop: next arrival time
RF_T = 1  # current time
RF_FIRST_ARR = 2  # first measured arrival
RF_LAST_DONE = 3  # last measured completion
RF_OMEGA = 4  # the router's overlap weight now (the policy's, or the controller's regime row)
RF_TAU = 5  # the router's temperature now
RF_EWMA = 6  # controller: EWMA of the window's TTFT P99, ms (-1 before the first)
RF_CTL_NEXT = 7  # controller: time of the next control step
RF_LASTSW = 8  # controller: time of the last switch (start of the current regime)
RF_REGT = 9  # controller: time spent in regimes 0, 1, 2 before the current one (9, 10, 11)
RF_BATCH_DUE = 12  # batch router: when the held decisions are assigned at the latest (+inf: none held)
# time integrals over the measurement window (from the first measured arrival), summed over workers:
RF_PBUSY = 13  # prefill workers' time in a pass, ms
RF_DBUSY = 14  # decode workers' time in a pass, ms
RF_DBATCH = 15  # decode workers' running sequences x time, ms
RF_DKV = 16  # decode workers' blocks held by requests (not evictable cache) x time, block ms (a pass
#              counts the mean of its start and end, after its growth: blocks grow about evenly in it)
RF_PL_NEXT = 17  # planner: end of the current interval (+inf while it moves)
RF_PL_T0 = 18  # planner: when the move in progress was decided
RF_PL_READY = 19  # planner: when the taking pool's new workers start (+inf until the giving pool drained)
RF_PL_ST = 20  # planner: TTFT summed over RI_PL_NT first tokens, ms
RF_PL_ST2 = 21  # planner: ... over RI_PL_NT2
RF_PL_SG = 22  # planner: inter-token time summed over RI_PL_NG gaps, ms
RF_TTAU = 23  # trace, timestamps replay: the replica's time offset into the trace, trace ms
RF_INFL = 24  # requests in flight x time over the measurement window, ms (closed at RF_INFL_T)
RF_INFL_T = 25  # when the in-flight count last changed
RF_LINK = 26  # P_LINKS: the links' time with a transfer on them, summed over links, ms (measurement window)
NRF = 27

# ---- outputs ----
OF_ARR = 0
OF_TTFT = 1
OF_E2E = 2
OF_ITL = 3
OF_PWAIT = 4
OF_DWAIT = 5
OF_DDEC = 6  # when the decode worker was chosen (arrival, or prefill end in prefill_first)
OF_ONB = 7  # tiers: SF_ONB
OF_CWAIT = 8  # client: from the client's creation of the request to its arrival at the frontend (pool wait + overhead)
OF_XFER = 9  # prefill_first: its KV transfer, from its start (reads posted) to the KV's arrival, ms
NOF = 10

OI_SEQ = 0
OI_ISL = 1
OI_OSL = 2
OI_GRP = 3
OI_PBLK = 4
OI_CACHED = 5
OI_PW = 6
OI_DW = 7
OI_CHOSEN = 8
OI_DONE = 9  # 1 once written (conservation check)
OI_PADD_T = 10  # prefill_first: prompt tokens the prefill choice booked on its worker
OI_PADD_B = 11  # prefill_first: blocks the prefill choice booked
OI_DADD_T = 12  # tokens the decode choice booked on its worker
OI_DADD_B = 13  # blocks the decode choice booked
OI_H2 = 14  # tiers: SI_H2
OI_H3 = 15  # tiers: SI_H3
OI_H4 = 16  # tiers: SI_H4
NOI = 17
# the request rows' columns as samples.parquet names them, in its order: (name, "f": a column of
# out_f / "i": of out_i, index). The engine's sample columns follow these tables.
REQUEST_FIELDS = (
    ("arrival_ms", "f", OF_ARR), ("ttft_ms", "f", OF_TTFT), ("e2e_ms", "f", OF_E2E), ("itl_ms", "f", OF_ITL),
    ("prefill_wait_ms", "f", OF_PWAIT), ("decode_wait_ms", "f", OF_DWAIT), ("onboard_ms", "f", OF_ONB),
    ("client_wait_ms", "f", OF_CWAIT), ("transfer_ms", "f", OF_XFER),
    ("seq", "i", OI_SEQ), ("isl", "i", OI_ISL), ("osl", "i", OI_OSL), ("group", "i", OI_GRP),
    ("prompt_blocks", "i", OI_PBLK), ("cached_blocks", "i", OI_CACHED), ("prefill_worker", "i", OI_PW),
    ("decode_worker", "i", OI_DW), ("cached_g2", "i", OI_H2), ("cached_g3", "i", OI_H3), ("cached_g4", "i", OI_H4),
)  # fmt: skip
# recorded with the router's candidates only: the decision's time, its choice and what it booked
DECISION_FIELDS = (
    ("decode_decided_ms", "f", OF_DDEC), ("chosen", "i", OI_CHOSEN), ("prefill_added_tokens", "i", OI_PADD_T),
    ("prefill_added_blocks", "i", OI_PADD_B), ("decode_added_tokens", "i", OI_DADD_T),
    ("decode_added_blocks", "i", OI_DADD_B),
)  # fmt: skip
NEV = 4  # ev's fields: due ms, worker, group, length
NCAND = 2  # cand's fields per worker: tokens, blocks
# the last dimension of these arrays is the same in every cell: the CPU builds compile it as a
# constant (poa_mc/kernels/fixed_rows.py; pc's only in the lean build, where no tier widens it)
FIXED_WIDTH = {"slot_i": NSI, "slot_f": NSF, "wk_f": NWF, "ev": NEV, "out_f": NOF, "out_i": NOI, "cand": NCAND}

RNG_F_ISL = 1
RNG_F_OSL = 2
RNG_F_GRP = 3
RNG_F_SVC = 4
RNG_F_THINK = 5
RNG_F_GAP = 6
RNG_F_TRACE = 7  # trace: the replica's offset (a = 0) and drawn sessions (a = the session's index)
