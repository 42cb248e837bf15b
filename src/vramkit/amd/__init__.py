"""AMD GPUs: what the amdgpu driver and ROCm's amdsmi tell, and a simulated AMD machine.

The readers (smi.py through an amdsmi-like module, sysfs.py through a root holding sys/ and proc/)
turn what they read into gpu_state Devices; backends/amd.py joins them to the host. The simulated
machine sits below them, at each library's own interface, as nvml/sim.py does for NVML: sim.py
plays a scenario with "vendor": "amd" over time, fake_amdsmi.py serves it through amdsmi's function
names, exceptions and status codes, fake_sysfs.py writes it as the files amdgpu and KFD expose.
"""
