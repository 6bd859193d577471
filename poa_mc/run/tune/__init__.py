"""`poa-mc tune`: the router settings that serve a stated objective best, per load point.

space.py reads the [tune] table of a grid file (the policy to tune, the objective, the search
space); search.py races candidate settings by successive halving under common random numbers and
validates the winner against the policy's own settings on fresh seeds; report.py writes the
results.
"""
