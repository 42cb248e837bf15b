"""`vram fleet`: every host's GPUs in one table, a line per GPU, and what is missing said per host."""

from __future__ import annotations

import json

from ..fleet import Fleet, FleetGpu, FleetHost, HostChoice
from ..gpu_choice import Policy, ids_text
from ..units import format_size
from . import fmt
from .style import Style, clip
from .text_width import pad

HOST_W, NAME_W, USER_W = 16, 18, 12
SHOWN_WARNINGS = 5  # Prometheus' warnings shown (each once); the rest counted


def _gpu_line(host: str, g: FleetGpu, style: Style, bar_w: int) -> str:
    head = f"{pad(clip(host, HOST_W), HOST_W)} {g.index:>3}  "
    if g.lost:
        return head + style.paint("LOST", "red", "bold") + "  fell off the bus or stopped answering"
    frac = None if g.memory_used is None or not g.memory_total else g.memory_used / g.memory_total
    mem = f"{fmt.memory_pair(g.memory_used, g.memory_total):>14}"
    bar = (style.bar(frac, bar_w, style.level(frac)) + " ") if bar_w else ""
    procs = fmt.NA if g.processes is None else str(g.processes)
    top = "-" if g.top_user is None else f"{clip(g.top_user, USER_W)} {format_size(g.top_user_memory)}"
    return (f"{head}{pad(clip(fmt.short_gpu_name(g.name), NAME_W), NAME_W)} {bar}{style.paint(mem, style.level(frac))}"
            f" {fmt.pct(g.utilization):>5} {procs:>5}  {top}")


def _host_note(host: FleetHost, note: str, style: Style) -> str:
    colour = "red" if host.state == "down" else "yellow"
    return f"{pad(clip(host.host, HOST_W), HOST_W)}      " + style.paint(note, colour)


def render_fleet(fleet: Fleet, style: Style, width: int) -> str:
    bar_w = 12 if width >= 100 else 0
    gpus = sum(len(h.gpus) for h in fleet.hosts)
    down = sum(1 for h in fleet.hosts if h.state == "down")
    partial = sum(1 for h in fleet.hosts if h.state == "partial")
    summary = [fmt.count(len(fleet.hosts), "host"), fmt.count(gpus, "GPU")]
    simulated = [h.host for h in fleet.hosts if h.simulated]
    if simulated:
        named = ", ".join(simulated) if len(simulated) < 4 else fmt.count(len(simulated), "host")
        summary.append(f"simulated: {named}")
    if down:
        summary.append(style.paint(f"{down} down", "red"))
    if partial:
        summary.append(style.paint(f"{partial} partial", "yellow"))
    via = f"Prometheus {fleet.prometheus}" if fleet.source == "prometheus" else "each host's vram serve"
    lines = [style.paint(f"vram fleet via {via}", "bold") + ": " + ", ".join(summary)]
    if not fleet.hosts and fleet.source == "prometheus":
        lines.append("no vram serve target in Prometheus (is its scrape job named 'vram'? see --job and docs/fleet.md)")
    else:
        header = (f"{'HOST':<{HOST_W}} {'GPU':>3}  {'NAME':<{NAME_W}} {'':<{bar_w + 1 if bar_w else 0}}"
                  f"{'MEMORY':>14} {'UTIL':>5} {'PROCS':>5}  TOP USER")
        lines.append(style.paint(header, "dim"))
    for host in fleet.hosts:
        for g in host.gpus:
            lines.append(_gpu_line(host.host, g, style, bar_w))
        lines += [_host_note(host, note, style) for note in host.notes]
    lines += [style.paint(f"Prometheus warns: {w}", "yellow") for w in fleet.warnings[:SHOWN_WARNINGS]]
    more = len(fleet.warnings) - SHOWN_WARNINGS + fleet.warnings_left_out
    if more > 0:
        listed = f" (--json lists {len(fleet.warnings)})" if len(fleet.warnings) > SHOWN_WARNINGS else ""
        lines.append(style.paint(f"Prometheus warns {fmt.count(more, 'more time')}{listed}", "yellow"))
    return "\n".join(lines)


def fleet_json(fleet: Fleet) -> str:
    return json.dumps(fleet.to_dict(), indent=2, ensure_ascii=False)


def choice_line(choice: HostChoice, policy: Policy) -> str:
    """'on gpu-b: CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=2,3 (GPUs 2, 3: 79.4GiB, 79.4GiB free; ...)'."""
    free = ", ".join(format_size(g.memory_free) for g in choice.gpus)
    busy = ", ".join(fmt.pct(g.utilization) for g in choice.gpus)
    env = " ".join(f"{k}={v}" for k, v in choice.env.items())
    return (f"on {choice.host.host}: {env}"
            f" ({ids_text(choice.decision.chosen)}: {free} free, {busy} busy; wanted {policy.describe()})")


def choice_json(choice: HostChoice, policy: Policy, refusals: list[str]) -> str:
    return json.dumps({
        "host": choice.host.host, "instance": choice.host.instance, "job": choice.host.job,
        # the first two as before AMD GPUs (for an AMD pick: no order, HIP's value); `env` says which
        "cuda_device_order": "PCI_BUS_ID" if choice.vendor == "nvidia" else None,
        "cuda_visible_devices": choice.cuda_visible_devices, "env": choice.env,
        "gpus": [{"index": g.index, "uuid": g.uuid, "name": g.name, "memory_free": g.memory_free,
                  "memory_total": g.memory_total, "utilization": g.utilization} for g in choice.gpus],
        "policy": policy.describe(), "other_hosts": refusals,
    }, indent=2, ensure_ascii=False)
