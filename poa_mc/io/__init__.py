"""The run directory on disk: the store, loading a run, exporting it."""
