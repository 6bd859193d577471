"""`poa-mc calibrate`: fit the profile's free parameters to a deployment's own benchmark results.

deployment.py reads the deployment (a grid file of one topology and one policy, plus a
[calibrate] table naming the measured files and the parameters to fit); figures.py simulates it at
given parameters and works out the figures a benchmark reports; fit.py minimises the documented
loss over them, with intervals, and validates on held-out load points; report.py writes the results.
"""
