"""What the user asks of the scheduler (SlurmOptions), and SlurmError, the error of every slurm module.

The options land on #SBATCH lines and in shell commands verbatim, so they are validated here, before
any script is written: each error names the option at fault and is marked as bad input (exit code 2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TIME_RE = re.compile(r"^(?:(\d+)-)?(\d+):(\d{2}):(\d{2})$|^(\d+)$")
_MEM_RE = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE)
_NAME_RE = re.compile(r"^[A-Za-z0-9_.:@+-]+$")


class SlurmError(Exception):
    """Submission or status failed. `bad_input` marks errors in what the user gave (exit code 2)."""

    def __init__(self, message: str, *, bad_input: bool = False) -> None:
        super().__init__(message)
        self.bad_input = bad_input


@dataclass(frozen=True)
class SlurmOptions:
    """What the user asks of the scheduler; rendered into #SBATCH lines verbatim after validation."""

    partition: str
    tasks: int | None = None
    gpus_per_task: int = 0
    cpus_per_task: int = 1
    mem: str | None = None
    time: str | None = None
    account: str | None = None
    qos: str | None = None
    extra: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    backend: str | None = None
    reduce_partition: str | None = None
    job_name: str = "poa-mc"

    def validate(self) -> None:
        """Raise SlurmError(bad_input=True) naming the option at fault."""
        for opt, value in (
            ("--partition", self.partition),
            ("--account", self.account),
            ("--qos", self.qos),
            ("--reduce-partition", self.reduce_partition),
            ("--backend", self.backend),
        ):
            # Each value lands on an #SBATCH line or in a shell command: restrict it to a name's
            # characters so that no value can smuggle in another directive or shell syntax.
            if value is not None and not _NAME_RE.match(value):
                raise SlurmError(f"{opt}: invalid value {value!r} (letters, digits and _.:@+- only)", bad_input=True)
        if not self.partition:
            raise SlurmError("--partition: required", bad_input=True)
        if not _NAME_RE.match(self.job_name):
            raise SlurmError(f"job name {self.job_name!r} has characters Slurm would not keep", bad_input=True)
        if self.tasks is not None and self.tasks < 1:
            raise SlurmError(f"--tasks: must be >= 1, got {self.tasks}", bad_input=True)
        if self.gpus_per_task < 0:
            raise SlurmError(f"--gpus-per-task: must be >= 0, got {self.gpus_per_task}", bad_input=True)
        if self.cpus_per_task < 1:
            raise SlurmError(f"--cpus-per-task: must be >= 1, got {self.cpus_per_task}", bad_input=True)
        if self.mem is not None and not _MEM_RE.match(self.mem):
            raise SlurmError(f"--mem: expected a size like 8G or 16000M, got {self.mem!r}", bad_input=True)
        if self.time is not None:
            m = _TIME_RE.match(self.time)
            if not m or (m.group(3) is not None and (int(m.group(3)) > 59 or int(m.group(4)) > 59)):
                raise SlurmError(
                    f"--time: expected HH:MM:SS (or D-HH:MM:SS, or minutes), got {self.time!r}", bad_input=True
                )
        for line in self.extra:
            if "\n" in line or not line.startswith("#SBATCH "):
                raise SlurmError(
                    f"--extra: each value must be one line starting with '#SBATCH ', got {line!r}", bad_input=True
                )
        for line in self.setup:
            if "\n" in line:
                raise SlurmError(f"--setup: each value must be one line, got {line!r}", bad_input=True)
