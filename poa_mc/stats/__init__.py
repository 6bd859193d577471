"""From simulated requests to figures: accumulators, sketches, the reducer, estimators, knee, games."""
