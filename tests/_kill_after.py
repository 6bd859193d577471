"""`python tests/_kill_after.py K poa-mc-args...`: the CLI, SIGKILLed when cell K+1 starts.
`python tests/_kill_after.py bK poa-mc-args...`: the CLI with its own engine, which runs the grid's
cells in batches (poa_mc/engine/cell_batch.py), SIGKILLed in launch K+1, its kernels done and
none of its cells written.

Used by test_cli's kill-and-resume tests: a real kill (no cleanup, no finally blocks), after
exactly K cells (or K launches) were written.
"""

import os
import signal
import sys

from poa_mc.run import runner


def _writes_landed() -> None:
    # a cell's files are written while the next simulates, once its last reduction is done:
    # let those before the kill land first
    runner.threads.pool("reduce", 1).submit(lambda: None).result()
    runner.threads.pool("writer", 1).submit(lambda: None).result()


if sys.argv[1].startswith("b"):
    from poa_mc.kernels import cpu

    kill_after = int(sys.argv[1][1:])
    real_batch = cpu.run_batch
    launches = 0

    def run_batch(*args, **kwargs):
        global launches
        out = real_batch(*args, **kwargs)
        if launches == kill_after:
            _writes_landed()
            os.kill(os.getpid(), signal.SIGKILL)
        launches += 1
        return out

    cpu.run_batch = run_batch
else:
    kill_after = int(sys.argv[1])
    real = runner._default_simulate()
    calls = 0

    def simulate(*args, keep=None, reduce=None, overlap=False, after=None, **kwargs):
        """The engine as the CLI calls it (batches reduced as they leave the kernels, a cell's last
        reduction beside the next cell), killed as cell K+1 starts."""
        global calls
        if calls == kill_after:
            _writes_landed()
            os.kill(os.getpid(), signal.SIGKILL)
        calls += 1
        return real(*args, keep=keep, reduce=reduce, overlap=overlap, after=after, **kwargs)

    runner._default_simulate = lambda: simulate

from poa_mc.cli.main import main  # noqa: E402 - after the patch above, on purpose

main(sys.argv[2:], prog_name="poa-mc")
