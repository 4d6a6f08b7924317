"""Test support: the simulated canary chain, the one Prometheus text reader for tests, a port picker, poll waits."""
