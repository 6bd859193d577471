"""Figures of a run, drawn in this process or in worker processes."""
