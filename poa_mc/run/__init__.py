"""A grid run end to end, locally or as Slurm array jobs, and its console."""
