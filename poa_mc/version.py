"""The package's version: in a run's manifest and fingerprint (a new version is a new engine)."""

__version__ = "0.3.0"
