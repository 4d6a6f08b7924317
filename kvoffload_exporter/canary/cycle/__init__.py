"""The probe cycle: plans, prepared probes, steps, per-target state and its statistics."""
