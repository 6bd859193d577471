"""The grid file and what it describes: sections, specs, validation, timing profiles, traces."""
