"""poa-mc: Monte Carlo Price of Anarchy for disaggregated LLM serving."""

__version__ = "0.3.0"

# Imported eagerly on purpose: importing the submodule `poa_mc.load` later would otherwise
# overwrite the package attribute `load` with the module. poa_mc.load imports only the stdlib.
from poa_mc.load import Run, load

__all__ = ["Run", "__version__", "load"]
