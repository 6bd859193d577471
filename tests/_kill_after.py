"""`python tests/_kill_after.py K poa-mc-args...`: the CLI, SIGKILLed when cell K+1 starts.

Used by test_cli's kill-and-resume test: a real kill (no cleanup, no finally blocks), after
exactly K cells were written.
"""

import os
import signal
import sys

from poa_mc.run import runner

kill_after = int(sys.argv[1])
real = runner._default_simulate()
calls = 0


def simulate(*args, keep=None, reduce=None, overlap=False, after=None, **kwargs):
    """The engine as the CLI calls it (batches reduced as they leave the kernels, a cell's last
    reduction beside the next cell), killed as cell K+1 starts."""
    global calls
    if calls == kill_after:
        # a cell's files are written while the next simulates, once its last reduction is done:
        # let the K-th land first
        runner.threads.pool("writer", 1).submit(lambda: None).result()
        os.kill(os.getpid(), signal.SIGKILL)
    calls += 1
    return real(*args, keep=keep, reduce=reduce, overlap=overlap, after=after, **kwargs)


runner._default_simulate = lambda: simulate

from poa_mc.cli.main import main  # noqa: E402 - after the patch above, on purpose

main(sys.argv[2:], prog_name="poa-mc")
