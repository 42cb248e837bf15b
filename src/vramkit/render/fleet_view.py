"""`vram fleet`: every host's GPUs in one table, a line per GPU, and what is missing said per host."""

from __future__ import annotations

import json

from ..fleet import Fleet, FleetGpu, FleetHost, HostChoice
from ..gpu_choice import Policy, ids_text
from ..i18n import _, join_words, ngettext, pgettext
from ..units import format_size
from . import fmt
from .style import Style, clip
from .text_width import pad

HOST_W, NAME_W, USER_W = 16, 18, 12
SHOWN_WARNINGS = 5  # Prometheus' warnings shown (each once); the rest counted


def _gpu_line(host: str, g: FleetGpu, style: Style, bar_w: int) -> str:
    head = f"{pad(clip(host, HOST_W), HOST_W)} {g.index:>3}  "
    if g.lost:
        return head + style.paint(pgettext("status", "LOST"), "red", "bold") + "  " + _(
            "fell off the bus or stopped answering")
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
    hosts = len(fleet.hosts)
    summary = [ngettext("{n} host", "{n} hosts", hosts).format(n=hosts),
               ngettext("{n} GPU", "{n} GPUs", gpus).format(n=gpus)]
    simulated = [h.host for h in fleet.hosts if h.simulated]
    if simulated:
        named = (join_words(simulated) if len(simulated) < 4
                 else ngettext("{n} host", "{n} hosts", len(simulated)).format(n=len(simulated)))
        summary.append(_("simulated: {hosts}").format(hosts=named))
    if down:
        summary.append(style.paint(_("{n} down").format(n=down), "red"))
    if partial:
        summary.append(style.paint(_("{n} partial").format(n=partial), "yellow"))
    title = (_("vram fleet via Prometheus {address}").format(address=fleet.prometheus) if fleet.source == "prometheus"
             else _("vram fleet via each host's vram serve"))
    # Translators: what separates the counts of vram fleet's first line ("2 hosts, 8 GPUs, 1 down")
    counts = pgettext("summary separator", ", ").join(summary)
    # Translators: vram fleet's first line: {title} says where the numbers come from ("vram fleet via
    # Prometheus http://prometheus:9090"), {counts} what it found ("2 hosts, 8 GPUs, 1 down")
    lines = [_("{title}: {counts}").format(title=style.paint(title, "bold"), counts=counts)]
    if not fleet.hosts and fleet.source == "prometheus":
        lines.append(_("no vram serve target in Prometheus (is its scrape job named 'vram'? see --job and "
                       "docs/fleet.md)"))
    else:
        # Translators: vram fleet's column headings
        words = [pgettext("column", "HOST"), pgettext("column", "GPU"), pgettext("column", "NAME"),
                 pgettext("column", "MEMORY"), pgettext("column", "UTIL"), pgettext("column", "PROCS"),
                 pgettext("column", "TOP USER")]
        header = (f"{pad(words[0], HOST_W)} {pad(words[1], 3, right=True)}  {pad(words[2], NAME_W)} "
                  f"{'':<{bar_w + 1 if bar_w else 0}}{pad(words[3], 14, right=True)} {pad(words[4], 5, right=True)} "
                  f"{pad(words[5], 5, right=True)}  {words[6]}")
        lines.append(style.paint(header, "dim"))
    for host in fleet.hosts:
        for g in host.gpus:
            lines.append(_gpu_line(host.host, g, style, bar_w))
        lines += [_host_note(host, note, style) for note in host.notes]
    lines += [style.paint(_("Prometheus warns: {warning}").format(warning=w), "yellow")
              for w in fleet.warnings[:SHOWN_WARNINGS]]
    more = len(fleet.warnings) - SHOWN_WARNINGS + fleet.warnings_left_out
    if more > 0:
        if len(fleet.warnings) > SHOWN_WARNINGS:
            text = ngettext("Prometheus warns {n} more time (--json lists {listed})",
                            "Prometheus warns {n} more times (--json lists {listed})", more)
        else:
            text = ngettext("Prometheus warns {n} more time", "Prometheus warns {n} more times", more)
        lines.append(style.paint(text.format(n=more, listed=len(fleet.warnings)), "yellow"))
    return "\n".join(lines)


def fleet_json(fleet: Fleet) -> str:
    return json.dumps(fleet.to_dict(), indent=2, ensure_ascii=False)


def choice_line(choice: HostChoice, policy: Policy) -> str:
    """'on gpu-b: CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=2,3 (GPUs 2, 3: 79.4GiB, 79.4GiB free; ...)'."""
    free = join_words([format_size(g.memory_free) for g in choice.gpus])
    busy = join_words([fmt.pct(g.utilization) for g in choice.gpus])
    env = " ".join(f"{k}={v}" for k, v in choice.env.items())
    return _("on {host}: {env} ({gpus}: {free} free, {busy} busy; wanted {policy})").format(
        host=choice.host.host, env=env, gpus=ids_text(choice.decision.chosen), free=free, busy=busy,
        policy=policy.describe())


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
