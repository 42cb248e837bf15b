"""Pod names for the pod UIDs that processes' cgroups name, from the kubelet's pod-resources API
(the gRPC socket under /var/lib/kubelet/pod-resources/, v1 PodResourcesLister.List), as
dcgm-exporter reads it.

List gives each pod's name, namespace and containers with the devices assigned to them (GPU and
MIG UUIDs), but not the pod's UID. So a pod UID is joined to the one pod holding the GPUs its
processes use; when several pods share them (time-slicing), or none is listed, nothing is guessed
and `note` says why. A pod UID, once named, stays named (UIDs are never reused).

grpc is imported only when the socket exists and a process needs a name: `vram status` on a host
without Kubernetes never loads it. The reply is bounded and decoded here from the protobuf wire
format (five string and message fields), so no protobuf module or generated code is needed;
tests/test_workload_kubelet.py checks the decoder against the real proto's generated classes.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, replace

from .errors import VramkitError
from .gpu_state import Device, GpuProcess, Workload
from .procs import sanitize
from .procs.workload import POD_NAMES_UNKNOWN, POD_NONE, POD_RIVAL, POD_RIVALS, POD_SHARED, state_root

TYPE_CHECKING = False  # for mypy: typing is not imported on `vram status`'s path
if TYPE_CHECKING:
    from collections.abc import Callable

SOCKET = "var/lib/kubelet/pod-resources/kubelet.sock"  # under the state root (VRAM_STATE_ROOT, else /)
SOCKET_ENV = "VRAM_KUBELET_SOCKET"
TIMEOUT_S = 2.0  # connect and answer: a kubelet that hangs costs one reading this long, then RETRY_S
RETRY_S = 30.0  # a pod left unnamed (the kubelet failed, or listed no pod for it) is asked again after
MAX_RESPONSE_BYTES = 8 * 1024 * 1024  # a node's pods with their devices: some KiB each
MAX_NAME_CHARS = 253  # a Kubernetes name's limit (DNS subdomain)
LIST_METHOD = "/v1.PodResourcesLister/List"


class KubeletError(VramkitError):
    """The kubelet could not be asked, or its answer was not pod-resources: one line."""


@dataclass(frozen=True)
class PodContainer:
    """One container of a pod, as List reports it, with the device ids assigned to it."""

    namespace: str
    pod: str
    container: str
    devices: tuple[str, ...]


def socket_path() -> str:
    return os.environ.get(SOCKET_ENV) or os.path.join(state_root(), SOCKET)


def list_pods(path: str | None = None, timeout: float = TIMEOUT_S) -> list[PodContainer]:
    """Every container the kubelet at `path` reports. Raises KubeletError."""
    path = path or socket_path()
    real = _trusted_socket(path)
    import grpc  # type: ignore[import-untyped]  # only here: a host with no kubelet never loads it

    channel = grpc.insecure_channel(f"unix:{real}", options=[
        ("grpc.max_receive_message_length", MAX_RESPONSE_BYTES), ("grpc.enable_http_proxy", 0)])
    try:
        call = channel.unary_unary(LIST_METHOD, request_serializer=lambda _: b"",
                                   response_deserializer=lambda data: data)
        data = call(None, timeout=timeout)
    except grpc.RpcError as e:
        code = e.code() if hasattr(e, "code") else None
        detail = e.details() if hasattr(e, "details") else None
        why = f"no answer within {timeout:g}s" if code == grpc.StatusCode.DEADLINE_EXCEEDED else (
            sanitize(str(detail or code))[:160])
        raise KubeletError(f"the kubelet at {path} did not list pods: {why}") from None
    finally:
        channel.close()
    try:
        return decode_list(data)
    except ValueError as e:
        raise KubeletError(f"the kubelet at {path} answered something that is not a pod list ({e})") from None


def _trusted_socket(path: str) -> str:
    """The socket's real path, if it is one the kubelet (root) or this user made, in a directory no
    one else may change: a socket another user bound there (where the kubelet's is missing, or a
    directory others may write) would name any pod it likes. Raises KubeletError."""
    real = os.path.realpath(path)
    try:
        st, holder = os.lstat(real), os.stat(os.path.dirname(real))
    except OSError as e:
        raise KubeletError(f"no kubelet pod-resources socket at {path} ({e.strerror})") from None
    me = os.geteuid()
    if not stat.S_ISSOCK(st.st_mode):
        raise KubeletError(f"{path} is not a socket")
    if st.st_uid not in (0, me):
        raise KubeletError(f"{path} belongs to uid {st.st_uid}, not to root or you: not asked")
    if holder.st_uid not in (0, me) or (holder.st_mode & 0o022 and not holder.st_mode & stat.S_ISVTX):
        raise KubeletError(f"{path} is in a directory another user may change: not asked")
    return real


# ---------------------------------------------------------------- the protobuf wire format

def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("a cut or overlong varint")
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, bytes | None]]:
    """(field number, bytes) of each length-delimited field; other wire types skipped (None)."""
    out: list[tuple[int, bytes | None]] = []
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire == 0:
            _, i = _varint(buf, i)
            out.append((number, None))
        elif wire == 2:
            size, i = _varint(buf, i)
            if i + size > len(buf):
                raise ValueError("a field longer than the message")
            out.append((number, buf[i:i + size]))
            i += size
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
            if i > len(buf):
                raise ValueError("a cut fixed-size field")
            out.append((number, None))
        else:
            raise ValueError(f"wire type {wire}")
    return out


def _text(value: bytes | None) -> str:
    if value is None:
        raise ValueError("a string field of another wire type")
    try:
        return sanitize(value.decode("utf-8"))[:MAX_NAME_CHARS]
    except UnicodeDecodeError:
        raise ValueError("a string that is not UTF-8") from None


def decode_list(data: bytes) -> list[PodContainer]:
    """ListPodResourcesResponse -> every pod's containers (pod_resources = 1; PodResources: name = 1,
    namespace = 2, containers = 3; ContainerResources: name = 1, devices = 2; ContainerDevices:
    resource_name = 1, device_ids = 2). Raises ValueError on bytes that are not one."""
    out: list[PodContainer] = []
    for number, pod_bytes in _fields(data):
        if number != 1:
            continue
        name = namespace = ""
        containers: list[tuple[str, tuple[str, ...]]] = []
        for field, value in _fields(pod_bytes or b""):
            if field == 1:
                name = _text(value)
            elif field == 2:
                namespace = _text(value)
            elif field == 3:
                containers.append(_container(value or b""))
        if not name:
            raise ValueError("a pod without a name")
        out.extend(PodContainer(namespace, name, c, devices) for c, devices in containers)
    return out


def _container(data: bytes) -> tuple[str, tuple[str, ...]]:
    name, devices = "", []
    for field, value in _fields(data):
        if field == 1:
            name = _text(value)
        elif field == 2:
            for sub, ids in _fields(value or b""):
                if sub == 2:
                    # time-slicing and MPS list one GPU as GPU-<uuid>::N: the GPU is the part before
                    devices.append(_text(ids).split("::", 1)[0])
    return name, tuple(devices)


# ---------------------------------------------------------------- the pod each GPU is allocated to

def gpu_pods(listed: list[PodContainer]) -> dict[str, tuple[str, str, str | None]]:
    """Device id (GPU or MIG instance UUID) -> (namespace, pod, container) of the one pod the
    kubelet lists it for; a device several pods list (time-slicing, MPS) is in none, and the
    container is None where several containers of that pod list it."""
    holders: dict[str, set[tuple[str, str, str]]] = {}
    for c in listed:
        for d in c.devices:
            holders.setdefault(d, set()).add((c.namespace, c.pod, c.container))
    out: dict[str, tuple[str, str, str | None]] = {}
    for device, held in holders.items():
        if len({(ns, pod) for ns, pod, _ in held}) == 1:
            namespace, pod, container = next(iter(held))
            out[device] = (namespace, pod, container if len(held) == 1 else None)
    return out


class GpuPods:
    """The pod each GPU is allocated to, as the kubelet lists it now (`vram serve --compat dcgm`
    labels the GPU's series with it, as dcgm-exporter does), asked at most once a reading. After
    a failure (no socket: no Kubernetes here, grpc never imported) none, and the kubelet is not
    asked again for RETRY_S; `problem` says why."""

    def __init__(self, lister: Callable[[], list[PodContainer]] | None = None):
        self._lister = lister or list_pods
        self._failed_at: float | None = None
        self.problem: str | None = None

    def read(self, now: float) -> dict[str, tuple[str, str, str | None]]:
        if self._failed_at is not None and now - self._failed_at < RETRY_S:
            return {}
        try:
            listed = self._lister()
        except KubeletError as e:
            self._failed_at, self.problem = now, str(e)
            return {}
        self._failed_at = self.problem = None
        return gpu_pods(listed)


# ---------------------------------------------------------------- joining pod UIDs to pods

class PodNames:
    """Names processes' pods, keeping what it learnt: pod UID -> (namespace, pod), container id ->
    container name. A Machine holds one."""

    def __init__(self) -> None:
        self.pods: dict[str, tuple[str, str]] = {}
        self.containers: dict[str, str] = {}
        self._asked: dict[str, float] = {}  # pod UID -> when it was last asked about, unnamed
        self._notes: dict[str, str] = {}  # pod UID -> why it has no name
        self._named: dict[tuple[str | None, str | None], Workload] = {}  # (pod UID, container id) -> named

    def name(self, gpus: list[Device], now: float,
             lister: Callable[[], list[PodContainer]] | None = None) -> None:
        """Give every process in a pod its pod's name, namespace and container, asking the kubelet
        (`lister`, else list_pods) at most once, and only for a pod not named yet."""
        procs = [(p, _device_ids(p, g)) for g in gpus for p in g.processes
                 if p.workload is not None and p.workload.pod_uid is not None and p.workload.pod is None]
        if not procs:
            return
        unnamed = {uid for p, _ in procs if (uid := _pod_uid(p)) is not None and uid not in self.pods}
        due = {uid for uid in unnamed if now - self._asked.get(uid, -RETRY_S) >= RETRY_S}
        if due:
            try:
                listed = (lister or list_pods)()
            except KubeletError as e:
                for uid in due:
                    self._asked[uid], self._notes[uid] = now, POD_NAMES_UNKNOWN.format(error=e)
            else:
                self._join(procs, listed, due, now)
        for p, _ in procs:
            if p.workload is not None:
                p.workload = self._named_workload(p.workload)

    def _join(self, procs: list[tuple[GpuProcess, set[str]]], listed: list[PodContainer], due: set[str],
              now: float) -> None:
        owners: dict[str, set[tuple[str, str]]] = {}
        containers_of: dict[tuple[str, str], list[PodContainer]] = {}
        for c in listed:
            containers_of.setdefault((c.namespace, c.pod), []).append(c)
            for d in c.devices:
                owners.setdefault(d, set()).add((c.namespace, c.pod))
        # Only the pods of UIDs running now are taken: a pod recreated under its old name (a
        # StatefulSet's) is a new UID, and the old one is gone.
        present = {uid for p, _ in procs if (uid := _pod_uid(p)) is not None}
        holder_of = {self.pods[u]: u for u in present if u in self.pods}
        raw: dict[str, set[tuple[str, str]]] = {}
        for uid in due:
            common: set[tuple[str, str]] | None = None
            for _, ids in (pi for pi in procs if _pod_uid(pi[0]) == uid):
                held = {o for d in ids for o in owners.get(d, ())}
                common = held if common is None else common & held
            raw[uid] = common or set()
        left = {uid: c - set(holder_of) for uid, c in raw.items()}
        for uid in sorted(due):
            mine = [(p, ids) for p, ids in procs if _pod_uid(p) == uid]
            candidates = left[uid]
            self._asked[uid] = now
            gpus = ", ".join(sorted({d for _, ids in mine for d in ids}))[:200]
            # Another pod's processes on the only pod's GPUs (one that sees GPUs it was not given,
            # NVIDIA_VISIBLE_DEVICES=all): which of them is that pod cannot be told, so neither is
            # named, even one named before.
            rivals = sorted({v for v, c in left.items() if v != uid and c & candidates} |
                            {holder_of[o] for o in raw[uid] if len(raw[uid]) == 1 and o in holder_of})
            if rivals:
                for rival in rivals:
                    if rival in self.pods and rival not in due:
                        self._unname(rival)
                        self._asked[rival] = now
                        self._notes[rival] = POD_RIVAL.format(uid=rival, other=uid)
                self._notes[uid] = POD_RIVALS.format(uid=uid, others=", ".join(rivals), gpus=gpus)
                continue
            if len(candidates) != 1:
                self._notes[uid] = (POD_NONE.format(uid=uid, gpus=gpus) if not candidates else
                                    POD_SHARED.format(uid=uid, n=len(candidates), gpus=gpus))
                continue
            pod = self.pods[uid] = candidates.pop()
            self._notes.pop(uid, None)
            for p, ids in mine:  # its container: the one in the pod holding the GPU, or the pod's only one
                cid = p.workload.container_id if p.workload else None
                if cid is None or cid in self.containers:
                    continue
                in_pod = containers_of.get(pod, [])
                holding = {c.container for c in in_pod if set(c.devices) & ids}
                if len(holding) == 1 or len(in_pod) == 1:
                    self.containers[cid] = holding.pop() if len(holding) == 1 else in_pod[0].container

    def _unname(self, uid: str) -> None:
        self.pods.pop(uid, None)
        self._named = {k: v for k, v in self._named.items() if k[0] != uid}

    def _named_workload(self, w: Workload) -> Workload:
        key = (w.pod_uid, w.container_id)
        named = self._named.get(key)
        if named is not None:
            return named
        pod = self.pods.get(w.pod_uid or "")
        if pod is None:
            return replace(w, note=self._notes.get(w.pod_uid or "") or w.note)  # not kept: asked again later
        named = replace(w, namespace=pod[0], pod=pod[1], pod_container=self.containers.get(w.container_id or ""))
        if len(self._named) > 4096:  # a long-running view's pods come and go: bounded
            self._named.clear()
        self._named[key] = named
        return named


def _pod_uid(p: GpuProcess) -> str | None:
    return p.workload.pod_uid if p.workload is not None else None


def _device_ids(p: GpuProcess, g: Device) -> set[str]:
    """The ids a device plugin gives the unit a process holds: its GPU's UUID, and its MIG
    instance's when it runs on one."""
    ids = {g.uuid} if g.uuid else set()
    if p.mig_gi is not None:
        ids.update(m.uuid for m in g.mig_devices if m.gi == p.mig_gi and m.uuid)
    return ids
