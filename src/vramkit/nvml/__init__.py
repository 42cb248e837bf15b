"""The only package that talks to NVML: the real library (backend) or the simulated one (sim)."""
