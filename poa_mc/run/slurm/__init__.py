"""Slurm array jobs for a grid run: sbatch scripts, submission, and progress/status.

Layout inside a run's output directory DIR (beside what `poa-mc run` writes):

    DIR/slurm/array.sbatch   the array script: task k runs `poa-mc run --shard k/N --resume --quiet`
    DIR/slurm/reduce.sbatch  the final job (afterany the array) running `poa-mc reduce DIR`
    DIR/slurm/shards.json    cell id -> shard for the N of the latest submission (what status shows)
    DIR/slurm/jobs.json      every submission's job ids, appended on each resubmit
    DIR/logs/%A_%a.out       one log per array task (append mode: a requeued task keeps its history)
    DIR/logs/reduce_%j.out   the reduce job's log

Correctness rests on `poa-mc run`: shards are disjoint (grid.assign_shards), each cell is written
atomically, and `--resume` skips finished cells, so a task that is killed, times out or is preempted
and requeued redoes only its unfinished cells. This package adds nothing that could double or lose
a cell: a resubmission waits (afterany) for every job of DIR that is still queued or running.

One concept a module; import each name from the module that holds it (this file exports nothing):

    options.py    SlurmOptions (what the user asks of the scheduler, validated) and SlurmError
    script.py     the text of the array and reduce sbatch scripts, and the PythonEnv they recreate
    records.py    the Slurm part of DIR's layout, and jobs.json / shards.json
    cells.py      the run's cells: the grid's, their shards, and which are done on disk
    scheduler.py  sbatch, squeue, sacct and scontrol, and the state of a task (from them or its log)
    submit.py     `poa-mc submit`: scripts written, pending shards submitted, the reduce job after
    status.py     `poa-mc status`: RunStatus collected and formatted
"""
