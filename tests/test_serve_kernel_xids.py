"""vram serve's XIDs from the kernel log (serve/kernel_xids.py), for a GPU whose driver refuses
NVML's XID events: counted from the lines the driver writes after serve started, by the GPU's
PCI address; absent (N/A, never 0) where the log cannot be read. A simulated machine whose GPU 1
answers NOT_SUPPORTED to the event registration, and a plain file standing in for /dev/kmsg."""

from __future__ import annotations

import json
import re
import time

from vramkit.machine import open_machine
from vramkit.serve.kernel_xids import pci_key
from vramkit.serve.service import Options, Service

WAIT = 20.0
SCENARIO = {
    "name": "xid-log",
    "gpus": [
        {"memory_total": "80GiB", "pci_bus_id": "00000000:07:00.0"},
        {"memory_total": "80GiB", "pci_bus_id": "00000000:3B:00.0", "unsupported": ["events"]},
    ],
    "processes": [],
}


def series(body: bytes, name: str) -> dict[tuple[str, ...], float]:
    found = {}
    for labels, value in re.findall(rb"^" + name.encode() + rb"\{([^}]*)\} (\S+)$", body, re.M):
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels.decode()))
        found[(pairs["gpu"], pairs.get("xid", ""))] = float(value)
    return found


def start(tmp_path, log) -> Service:
    scenario = tmp_path / "xid-log.json"
    scenario.write_text(json.dumps(SCENARIO))
    service = Service(open_machine(str(scenario)), Options(interval=0.1, kernel_log=log))
    service.start()
    assert service.wait_for_first(WAIT)
    return service


def metrics_when(service: Service, done) -> bytes:
    deadline = time.monotonic() + WAIT
    while True:
        body = service.metrics()
        if done(body) or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


def test_a_gpu_whose_driver_refuses_xid_events_counts_them_from_the_kernel_log(tmp_path):
    log = tmp_path / "kmsg"
    log.write_bytes(b"4,900,100,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=old, before serve started\n")
    service = start(tmp_path, log)
    try:
        body = metrics_when(service, lambda b: ("1", "") in series(b, "vram_gpu_xid_events_total"))
        assert series(body, "vram_gpu_xid_events_total") == {("0", ""): 0.0, ("1", ""): 0.0}  # the old line: not
        with log.open("ab") as f:
            f.write(b"4,901,200,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off "
                    b"the bus.\n"
                    b"4,902,201,-;NVRM: Xid (PCI:0000:99:00): 48, pid=1, a GPU this machine does not have\n"
                    b"6,903,202,-;nvidia-modeset: something else\n"
                    b"4,904,203,-;NVRM: Xid (PCI:0000:3B:00.0): 79, again\n")
        body = metrics_when(service, lambda b: series(b, "vram_gpu_xid_events_total").get(("1", "")) == 2.0)
    finally:
        service.close()
    assert series(body, "vram_gpu_xid_events_total") == {("0", ""): 0.0, ("1", ""): 2.0}
    assert series(body, "vram_gpu_xid_errors_total") == {("1", "79"): 2.0}
    assert series(body, "vram_gpu_xid_last") == {("1", ""): 79.0}


def test_without_a_readable_kernel_log_that_gpu_has_no_xid_series(tmp_path):
    service = start(tmp_path, tmp_path / "no-such-log")
    try:
        body = metrics_when(service, lambda b: bool(series(b, "vram_gpu_xid_events_total")))
    finally:
        service.close()
    assert series(body, "vram_gpu_xid_events_total") == {("0", ""): 0.0}  # GPU 1: N/A, not 0


def test_pci_addresses_as_nvml_and_the_kernel_write_them():
    assert pci_key("00000000:3B:00.0") == (0, 0x3B, 0) == pci_key("0000:3b:00.0")
    assert pci_key(None) is None and pci_key("3B:00.0") is None and pci_key("0000:3b:00") is None
