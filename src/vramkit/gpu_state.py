"""What a snapshot is made of: plain dataclasses, no logic, shared by every layer.

Each class has a docstring: without one, @dataclass builds it from inspect.signature() at import.
The annotations are evaluated (no `from __future__ import annotations`): @dataclass checks each
string annotation for ClassVar with a regular expression, ~1 ms of every `vram status`.

A value of None means N/A: the driver does not support the field, refused it, or the
host cannot see it. The reason is kept next to it (Device.na, GpuProcess.host_missing);
a missing value is never shown as 0.
"""

from dataclasses import dataclass, field


@dataclass
class MigDevice:
    """One MIG instance of a GPU: its memory as NVML reports it."""

    gi: int  # GPU instance id
    ci: int | None  # compute instance id
    uuid: str | None
    name: str | None
    memory_total: int | None
    memory_used: int | None
    memory_free: int | None


PidKey = int | tuple[str, int | None]  # GpuProcess.pid_key


def pid_key(pid_here: int | None, nvml_pid: int | None) -> PidKey:
    """The one rule of GpuProcess.pid_key, also for a process as JSON gives it (its "pid" is the
    pid here, null for a row no process here could be told to be; "nvml_pid" the host's)."""
    return pid_here if pid_here is not None else ("host", nvml_pid)


def pid_key_text(key: PidKey) -> str:
    """A pid_key as text, for keys that must be strings (the live view's rows, the page's): the pid
    here, or "host" and the host pid (serve/web/app.js spells it the same)."""
    return str(key) if isinstance(key, int) else f"host{key[1]}"


@dataclass(eq=False)  # compared as objects: no generated __eq__ and __hash__ (a third of its build cost)
class Workload:
    """Whom a process works for beyond its uid, from its cgroup (procs/workload.py) and the
    runtime's or the kubelet's own state: a container, a Kubernetes pod, a Slurm job step. None:
    not known (never guessed). One object is shared by a process's rows and kept with it: never
    changed in place (dataclasses.replace makes another)."""

    runtime: str | None = None  # docker, containerd, cri-o, podman, lxc
    container_id: str | None = None  # the runtime's full id (64 hex digits; LXC: the name)
    container_name: str | None = None  # as the runtime's state names it
    image: str | None = None
    pod_uid: str | None = None  # from the cgroup path (kubepods)
    pod: str | None = None  # pod name, namespace and container name: from the kubelet
    namespace: str | None = None
    pod_container: str | None = None
    slurm_job: int | None = None  # from the cgroup path (Slurm's cgroup plugin, v1 or v2)
    slurm_step: str | None = None  # "0", "1", ..., "batch", "extern", "interactive"
    slurm_task: int | None = None  # the task (rank) within the step
    slurm_uid: int | None = None  # the job's user, as the v1 path names it
    slurm_array_job: int | None = None  # from its environment, when readable
    slurm_array_task: int | None = None
    # The job's GPUs as its environment lists them (ids or UUIDs), and the variable that did:
    # SLURM_STEP_GPUS, SLURM_JOB_GPUS or CUDA_VISIBLE_DEVICES (procs/workload.py)
    slurm_gpus: tuple[str, ...] | None = None
    slurm_gpus_from: str | None = None
    note: str | None = None  # why a part is unknown (a state file refused, the kubelet silent): one line


@dataclass(slots=True)  # hundreds built every tick and kept in the recent snapshots: slots, not a dict each
class GpuProcess:
    """One process on one GPU (or MIG instance): what the driver says, joined with the host side."""

    pid: int
    gpu: int  # NVML index of the GPU
    gpu_uuid: str | None
    memory: int | None  # bytes of GPU memory NVML attributes to this pid on this GPU
    types: tuple[str, ...] = ("compute",)  # "compute" and/or "graphics"
    mig_gi: int | None = None  # MIG GPU instance the memory is on
    # The process's own utilization, from NVML's per-process samples since the previous reading
    # (the last 5 s on a first one). The driver keeps a sample for each process that did some
    # work: one absent from a successful reading did none, and reads 0. None: N/A, and
    # `utilization_na` says why (not supported, no permission, MIG, ...); never 0 for unknown.
    sm_utilization: int | None = None  # % of the time this process ran kernels
    memory_utilization: int | None = None  # % of the time this process read or wrote GPU memory
    encoder_utilization: int | None = None  # % of the video encoder's time this process used
    decoder_utilization: int | None = None  # % of the video decoder's time this process used
    utilization_na: str | None = None  # why the four are None, when they are
    # --- host side, from /proc (or the scenario, for synthetic pids)
    user: str | None = None
    uid: int | None = None
    command: str | None = None  # control characters already stripped
    name: str | None = None
    state: str | None = None  # running, sleeping, zombie, ...
    start_ticks: int | None = None  # clock ticks since boot (/proc/PID/stat): with pid, the identity
    start_time: float | None = None  # unix time
    elapsed: float | None = None  # seconds
    cpu_percent: float | None = None
    rss: int | None = None
    ppid: int | None = None
    container: str | None = None  # short container id when in a container cgroup
    workload: Workload | None = None  # its container, pod or Slurm job (None: in none of them)
    host_missing: str | None = None  # why the host side is unknown, when it is
    # --- inside a container: NVML's pids are the host's, not this /proc's (pidmap.py)
    nvml_pid: int | None = None  # the pid NVML reported, when it is another PID namespace's; `pid` is
    #                              then this /proc's pid of the same process if known, else the same
    holders_here: tuple[int, ...] = ()  # this /proc's processes holding the GPU, one or more of which NVML
    #                                     lists under nvml_pid (which one cannot be told); () when mapped
    real: bool = True  # False: a simulated scenario's made-up process, not a process on this host
    # --- flags
    zombie: bool = False
    orphaned: bool = False
    idle: bool = False  # holds memory while running no kernels (idle.py: the one rule)
    idle_for: float | None = None  # seconds it has been seen idle without a break (None: not idle)

    @property
    def pid_here(self) -> int | None:
        """The pid of this process in this /proc; None: NVML's pid is another PID namespace's and
        no process here could be told to be it (never shown as a pid here)."""
        return None if self.nvml_pid is not None and self.host_missing is not None else self.pid

    @property
    def pid_key(self) -> "PidKey":
        """Which process this row is, to group, count or compare the rows of one snapshot: its pid
        here, or ("host", NVML's pid) for a row no pid here could be told to be (that host pid may
        be the number of another process here)."""
        return pid_key(self.pid_here, self.nvml_pid)

    @property
    def key(self) -> tuple[int, int | None]:
        """(pid, start ticks): one process, even after its pid is reused. A process whose host
        side is unknown, or a simulated one, has no ticks: its pid alone."""
        return (self.pid, self.start_ticks)


@dataclass
class Health:
    """A GPU's health and links: read only when asked (`vram status --all`, `vram info`), since it
    costs some twenty NVML calls a GPU. None means N/A, and `na` (field -> why) says why."""

    # ECC errors: since the driver loaded (volatile) and over the GPU's life (aggregate)
    ecc_enabled: bool | None = None
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    # Page retirement (GPUs before Ampere): pages retired for errors, and retirement pending a reset
    retired_pages_single_bit: int | None = None  # for multiple single-bit (corrected) errors
    retired_pages_double_bit: int | None = None  # for a double-bit (uncorrected) error
    retired_pages_pending: bool | None = None
    # Row remapping (Ampere and later): rows remapped, one waiting for a reset, remapping failed
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    # Why the clocks are held back, in words ("sw power cap", "hw thermal", ...): () when nothing does
    throttle_reasons: tuple[str, ...] | None = None
    sm_clock: int | None = None  # MHz
    sm_clock_max: int | None = None  # MHz
    memory_clock: int | None = None  # MHz
    memory_clock_max: int | None = None  # MHz
    performance_state: int | None = None  # 0 (P0, full speed) to 15 (P15, lowest)
    pcie_gen: int | None = None  # PCIe link generation now (it drops when idle)
    pcie_gen_max: int | None = None  # the most the GPU and its slot can do
    pcie_width: int | None = None  # lanes now
    pcie_width_max: int | None = None
    pcie_tx: int | None = None  # bytes/s sent over PCIe (NVML's 20 ms sample)
    pcie_rx: int | None = None  # bytes/s received over PCIe
    persistence_mode: bool | None = None
    compute_mode: str | None = None  # "default", "exclusive process" or "prohibited"
    nvlink_links: int | None = None  # NVLink links the GPU has (0: none)
    nvlink_links_up: int | None = None  # of those, the active ones
    nvlink_tx: int | None = None  # bytes/s sent over all links since the previous reading
    nvlink_rx: int | None = None  # bytes/s received over all links since the previous reading
    graphics_clock: int | None = None  # MHz
    graphics_clock_max: int | None = None  # MHz
    memory_temperature: int | None = None  # degrees C of the memory (HBM), NVML_FI_DEV_MEMORY_TEMP
    energy_total: int | None = None  # millijoules consumed since the driver loaded (a counter)
    pcie_replays: int | None = None  # PCIe replays (link retries) since the driver loaded (a counter)
    na: dict[str, str] = field(default_factory=dict)  # field -> why it is N/A


@dataclass
class Device:
    """One GPU: what NVML reports, with `na` saying why a None field is missing."""

    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    vendor: str = "nvidia"  # whose GPU: "nvidia" or "amd" (its backend; the visible-devices rule it follows)
    memory_total: int | None = None
    memory_used: int | None = None
    memory_free: int | None = None
    memory_reserved: int | None = None
    utilization: int | None = None  # % of time a kernel ran (not how much memory is used)
    memory_utilization: int | None = None  # % of time memory was read or written
    temperature: int | None = None  # degrees C
    power_draw: float | None = None  # watts
    power_limit: float | None = None  # watts
    fan: int | None = None  # %
    encoder_utilization: int | None = None  # % of recent time the video encoder was busy
    decoder_utilization: int | None = None  # % of recent time the video decoder was busy
    mig_enabled: bool | None = None
    mig_devices: list[MigDevice] = field(default_factory=list)
    lost: bool = False
    error: str | None = None  # why the whole GPU could not be read
    na: dict[str, str] = field(default_factory=dict)  # field -> why it is N/A
    processes: list[GpuProcess] = field(default_factory=list)
    health: Health | None = None  # None: not read (only `vram status --all` and `vram info` read it)


@dataclass
class Topology:
    """How the GPUs are connected, as `nvidia-smi topo -m` shows it. Read once (it does not change)
    and only when asked: `vram pick` / `vram run` choosing several GPUs."""

    # (GPU a, GPU b), a < b -> "NV<n>" (n NVLink links between them), else the closest PCIe
    # relation: "PIX" (one PCIe switch), "PXB" (several switches), "PHB" (one host bridge),
    # "NODE" (one NUMA node, across host bridges), "SYS" (across NUMA nodes); "?" unknown
    links: dict[tuple[int, int], str] = field(default_factory=dict)
    numa_node: dict[int, int | None] = field(default_factory=dict)  # GPU -> its NUMA node (None: N/A)
    na: dict[str, str] = field(default_factory=dict)  # "nvlink", "pcie", "numa_node" -> why N/A

    def between(self, a: int, b: int) -> str:
        return self.links.get((min(a, b), max(a, b)), "?")


@dataclass
class Snapshot:
    """Every GPU and the processes holding their memory, read once."""

    time: float  # unix seconds
    gpus: list[Device]
    simulated: bool = False
    scenario: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    errors: list[str] = field(default_factory=list)
    monotonic: float | None = None  # when, on a clock that does not jump (intervals, idle time)
    topology: Topology | None = None  # None: not read (Machine.want_topology: only pick and run read it)

    @property
    def processes(self) -> list[GpuProcess]:
        return [p for g in self.gpus for p in g.processes]
