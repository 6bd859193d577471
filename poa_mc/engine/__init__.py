"""Cells to kernel launches: packing, memory plan, backend choice, launch, unpacking."""
