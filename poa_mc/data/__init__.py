"""Built-in grids, profiles and sample traces shipped with poa-mc."""
