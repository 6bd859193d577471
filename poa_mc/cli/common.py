"""What the commands share: the grid argument and its overrides, bad input, and the mapping of
errors and Ctrl-C to exit codes (poa_mc.cli.main and the commands beside it)."""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import click

# Imports inside functions: as in poa_mc.cli.main, the command line starts before the engine loads.

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_GRID = "quickstart"
_RENAMED = {"paper-70b": "paper-70b-1p2d and paper-70b-1p5d"}


class BadInput(Exception):
    """Anything the user can fix in their input; exit code 2."""


def _grids_dir() -> Path:
    return Path(str(resources.files("poa_mc.data") / "grids"))


def builtin_grids() -> dict[str, Path]:
    """Built-in grid name -> file (poa_mc/data/grids/*.toml)."""
    return {p.stem: p for p in sorted(_grids_dir().glob("*.toml"))}


def builtin_profiles() -> dict[str, str]:
    try:
        from poa_mc.model.profiles import BUILTIN_PROFILES
    except ImportError:
        return {"dynamo-mocker": "Dynamo 1.6.1 mocker default polynomial timing"}
    return dict(BUILTIN_PROFILES)


def resolve_grid_path(arg: str | None, what: str = "--grid") -> Path:
    """A grid argument: a file path, or the name of a built-in grid (default: quickstart)."""
    if arg is None:
        arg = DEFAULT_GRID
    path = Path(arg)
    if path.is_file():
        return path
    grids = builtin_grids()
    if arg in grids:
        return grids[arg]
    if arg in _RENAMED:
        raise BadInput(f"{what}: {arg!r} was replaced by {_RENAMED[arg]} (Dynamo 0.9's prefill-first path)")
    raise BadInput(f"{what}: {arg!r} is neither a file nor a built-in grid ({', '.join(grids)})")


def load_grid_arg(arg: str | None, what: str = "--grid", overrides: tuple[str, ...] = ()):
    """Parse and validate a grid argument (with --set overrides); BadInput on any problem (with the key path)."""
    from poa_mc.model.config import load_grid
    from poa_mc.model.sections import ConfigError

    path = resolve_grid_path(arg, what)
    try:
        return load_grid(path, overrides)
    except ConfigError as e:
        raise BadInput(f"{path}: {e}") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror or e}") from None


_SHORTCUTS = ("replicas", "requests", "warmup", "seed")


def override_options(fn: F) -> F:
    """--set KEY=VALUE (repeatable) and the [run] shortcuts --replicas, --requests, --warmup, --seed."""
    for name in reversed(_SHORTCUTS):
        fn = click.option(f"--{name}", type=int, default=None, metavar="N", help=f"Shortcut for --set run.{name}=N.")(
            fn
        )
    return click.option(
        "--set",
        "sets",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override a grid key (dotted path, e.g. run.replicas=8, policy[1].temperature=0.5, "
        "grid.concurrency=[8,64]); repeatable; checked like the file.",
    )(fn)


def collect_overrides(sets: tuple[str, ...], kwargs: dict[str, Any]) -> tuple[str, ...]:
    """--set items, then the shortcuts given (popped from kwargs), as KEY=VALUE strings."""
    out = list(sets)
    for name in _SHORTCUTS:
        value = kwargs.pop(name, None)
        if value is not None:
            out.append(f"run.{name}={value}")
    return tuple(out)


def handle_errors(fn: F) -> F:
    """Map exceptions to exit codes: bad input 2, anything else 1 (click's own usage errors: 2)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from poa_mc.io.files import WriteFault
        from poa_mc.io.store import RunDirError
        from poa_mc.model.sections import ConfigError
        from poa_mc.run.runner import CellFailed, EnvironmentFault, Interrupted

        previous = _stop_on_signals()
        try:
            return fn(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except (Interrupted, KeyboardInterrupt) as e:
            _interrupted(e)
        except (BadInput, ConfigError, RunDirError, WriteFault, EnvironmentFault, CellFailed) as e:
            click.echo(f"Error: {e}", err=True)
            sys.exit(2)
        except BrokenPipeError:  # `poa-mc presets | head`: the reader left, nothing to report
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except Exception as e:
            if os.environ.get("POA_MC_DEBUG"):
                raise
            click.echo(f"Error: {type(e).__name__}: {e}  (POA_MC_DEBUG=1 shows the traceback)", err=True)
            sys.exit(1)
        finally:
            for signum, handler in previous.items():  # a command run in-process (tests) leaves them as found
                if handler is not None:  # None: set outside Python, cannot be restored from here
                    signal.signal(signum, handler)

    return wrapper  # type: ignore[return-value]


# The signals a run is stopped by besides Ctrl-C: SIGTERM (Slurm at a time limit, at preemption,
# and `--signal` ahead of the limit; `kill`), SIGHUP (the terminal or ssh session closed)
_STOP_SIGNALS = ("SIGTERM", "SIGHUP")
_received: list[int] = []


def _stop(signum: int, frame: Any) -> None:
    _received.append(signum)
    raise KeyboardInterrupt


def _stop_on_signals() -> dict[int, Any]:
    """SIGTERM and SIGHUP stop a command as Ctrl-C does (nothing half-written, the resume command
    printed), with the exit code 128 + the signal's number. Only the main thread may set them.
    Returns the handlers they replace."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for name in _STOP_SIGNALS:
        if hasattr(signal, name):
            signum = getattr(signal, name)
            previous[signum] = signal.signal(signum, _stop)
    return previous


def _interrupted(e: BaseException) -> None:
    """Ctrl-C, SIGTERM or SIGHUP: say what is kept and how to go on, then leave at once with 128 +
    the signal's number (130, 143, 129); os._exit, because a kernel thread that cannot be stopped
    would otherwise hold the exit."""
    import shlex

    from poa_mc.run.runner import Interrupted

    signum = _received[0] if _received else int(signal.SIGINT)
    what = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    if isinstance(e, Interrupted):
        argv = [a for a in sys.argv[1:] if a != "--resume"]
        out = [] if "--out" in argv or any(a.startswith("--out=") for a in argv) else ["--out", str(e.out)]
        cmd = shlex.join(["poa-mc", *argv, *out, "--resume"])
        msg = f"{what}: {e.done} of {e.total} cells are complete in {e.out}; go on with: {cmd}"
    elif str(e):  # a command's own account of what it kept
        msg = f"{what}: {e}"
    else:
        msg = what
    try:
        sys.stdout.flush()
        print(msg, file=sys.stderr, flush=True)
    finally:
        os._exit(128 + signum)
