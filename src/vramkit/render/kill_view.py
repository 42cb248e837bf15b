"""`vram kill`: the plan (who will be signalled, who is refused and why), the results, and
what each GPU holds afterwards; and the same as JSON."""

from __future__ import annotations

import json
import os
import signal as _signal
from typing import Any

from ..gpu_state import Snapshot
from ..i18n import _, ngettext, pgettext
from ..killing import EXITED, REFUSED, SIGNALLED, STILL_RUNNING, WOULD_SIGNAL, KillReport, Plan, Target
from ..killing.model import LOOK, ends_unhandled
from ..killing.selection import NO_SUCH_PROCESS
from ..procs.workload import describe
from ..units import format_duration, format_size
from ..vendor_terms import lister
from . import fmt
from .banner import banner
from .data import _header
from .style import Style, clip
from .text_width import cells, fit, pad, wrap

_COLOURS = {EXITED: "green", SIGNALLED: "green", WOULD_SIGNAL: "cyan", STILL_RUNNING: "red", REFUSED: "yellow"}
HEADER = ("PID", "USER", "GPU", "MEMORY", "AGE")
RIGHT = {"PID", "MEMORY", "AGE"}


def _heading(name: str) -> str:
    """A column's heading in the reader's language (HEADER, ACTION, RESULT, COMMAND)."""
    return {"PID": pgettext("column", "PID"), "USER": pgettext("column", "USER"),
            "GPU": pgettext("column", "GPU"), "MEMORY": pgettext("column", "MEMORY"),
            "AGE": pgettext("column", "AGE"), "ACTION": pgettext("column", "ACTION"),
            "RESULT": pgettext("column", "RESULT"), "COMMAND": pgettext("column", "COMMAND")}[name]


def status_words(status: str) -> str:
    """What became of a target, in the reader's language (the Status value stays English in JSON)."""
    words: dict[str, str] = {
        WOULD_SIGNAL: pgettext("kill status", "would signal"), SIGNALLED: pgettext("kill status", "signalled"),
        EXITED: pgettext("kill status", "exited"), STILL_RUNNING: pgettext("kill status", "still running"),
        REFUSED: pgettext("kill status", "refused")}
    return words.get(status, status)


def _gpus(t: Target) -> str:
    return ",".join(map(str, t.all_gpus)) or "-"


def _memory(t: Target) -> str:
    return format_size(t.memory) if t.nvml_listed else "N/A"


def _action(t: Target, signal: str) -> str:
    if t.status == WOULD_SIGNAL:
        return signal
    if t.status == EXITED and t.seconds is not None and t.seconds >= 0.1:
        return _("exited ({seconds}s)").format(seconds=f"{t.seconds:.1f}")
    return status_words(t.status)


def _details(t: Target, snap: Snapshot) -> list[str]:
    """The lines under a row: why it is refused, how it holds the GPU, container, notes."""
    out = []
    if t.refusal is not None:
        out.append(_("refused by rule '{rule}': {reason}").format(rule=t.refusal.rule, reason=t.refusal.text))
    if t.devices and not t.nvml_listed and not t.shared:
        names = ", ".join(os.path.basename(d) for d in t.devices)
        who = lister(g.vendor for g in snap.gpus if g.index in t.holder_gpus)
        out.append(_("{who} lists no memory for it; it holds {devices} open").format(who=who, devices=names))
    owner = describe(t.workload)  # (English, as the refusal's reason says it)
    shown = describe(t.workload, local=True)
    if t.container_pid is not None:
        if owner:
            where = _("runs in {owner} as pid {pid}")
        elif t.container:
            where = _("runs in container {container} as pid {pid}")
        else:
            where = _("runs in another PID namespace as pid {pid}")
        out.append(where.format(owner=shown, container=t.container, pid=t.container_pid))
    elif owner is not None and (t.refusal is None or owner not in t.refusal.reason):
        out.append(_("belongs to {owner}").format(owner=shown))
    elif t.container and owner is None:
        out.append(_("runs in container {container}").format(container=t.container))
    out.extend(t.notes)
    return out


def _table(targets: list[Target], signal: str, last: str, style: Style, width: int, snap: Snapshot) -> list[str]:
    rows = [[str(t.pid), t.user or "?", _gpus(t), _memory(t), format_duration(t.elapsed), _action(t, signal)]
            for t in targets]
    head = [*HEADER, last]
    shown = [_heading(h) for h in head]
    widths = [max([cells(h)] + [cells(r[i]) for r in rows]) for i, h in enumerate(shown)]

    def row(values: list[str]) -> str:  # padded by display width (a CJK user name: 2 columns a character)
        return "  ".join(pad(v, w, right=h in RIGHT) for v, w, h in zip(values, widths, head))

    lead = sum(widths) + 2 * len(widths)
    indent = " " * (widths[0] + 2)
    out = [style.paint(row(shown) + "  " + _heading("COMMAND"), "bold")]
    for t, r in zip(targets, rows):
        action = style.paint(pad(r[-1], widths[-1]), _COLOURS.get(t.status, "bold"))
        command = _(NO_SUCH_PROCESS) if t.command == NO_SUCH_PROCESS else t.command or "?"
        line = row(r[:-1]) + "  " + action + "  " + clip(command, max(10, width - lead))
        out.append(line)
        for detail in _details(t, snap):
            wrapped = wrap(detail, max(30, width - len(indent) - 2)) or [""]
            out.append(style.paint(indent + "↳ " + wrapped[0] if style.unicode else indent + "- " + wrapped[0], "dim"))
            out.extend(style.paint(indent + "  " + more, "dim") for more in wrapped[1:])
    return out


def _intro(plan: Plan, signal: str, timeout: float, force: bool) -> str:
    n = len(plan.to_signal)
    if not n:
        return _("nothing will be signalled")
    if signal in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT") and force:
        text = ngettext("{signal} to {n} process, wait up to {seconds}s for it to exit, then SIGKILL to any still "
                        "running",
                        "{signal} to {n} processes, wait up to {seconds}s for them to exit, then SIGKILL to any "
                        "still running", n)
    elif signal in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"):
        text = ngettext("{signal} to {n} process, wait up to {seconds}s for it to exit",
                        "{signal} to {n} processes, wait up to {seconds}s for them to exit", n)
    elif signal == "SIGKILL":
        text = ngettext("{signal} to {n} process", "{signal} to {n} processes", n)
    elif ends_unhandled(_signal.Signals[signal]):  # USR1, ALRM...: its default action ends a process
        text = ngettext("{signal} to {n} process (it ends a process that does not handle, ignore or block it; "
                        "vram does not wait for an exit, only looks for {look}s)",
                        "{signal} to {n} processes (it ends a process that does not handle, ignore or block it; "
                        "vram does not wait for an exit, only looks for {look}s)", n)
    else:
        text = ngettext("{signal} to {n} process (it does not end a process: vram does not wait)",
                        "{signal} to {n} processes (it does not end a process: vram does not wait)", n)
    return text.format(signal=signal, n=n, seconds=f"{timeout:g}", look=f"{min(timeout, LOOK):g}")


def render_plan(plan: Plan, signal: str, timeout: float, force: bool, style: Style, width: int,
                dry_run: bool = False) -> str:
    lines = [banner(plan.snapshot, style, width)]
    intro = _intro(plan, signal, timeout, force)
    if dry_run:
        intro = _("dry run, nothing is signalled: would send {plan}").format(plan=intro) if plan.to_signal else (
            _("dry run, nothing is signalled: every selected process would be refused"))
    lines.append(style.paint(intro, "bold"))
    lines.extend(_table(plan.targets, signal, "ACTION", style, width, plan.snapshot))
    lines.extend(style.paint(n, "dim") for n in plan.notes)
    return "\n".join(lines)


def render_nothing(plan: Plan, style: Style, width: int) -> str:
    lines = [banner(plan.snapshot, style, width), _("nothing to signal: no process matches")]
    lines.extend(style.paint(n, "dim") for n in plan.notes)
    return "\n".join(lines)


def render_report(report: KillReport, style: Style, width: int, with_banner: bool = True) -> str:
    plan = report.plan
    lines = [banner(plan.snapshot, style, width)] if with_banner else []
    lines.extend(_table(plan.targets, report.signal, "RESULT", style, width, plan.snapshot))
    lines.extend(style.paint(n, "dim") for n in plan.notes)
    target_pids = {t.pid: t for t in plan.targets}
    arrow = " → " if style.unicode else " -> "
    for change in report.gpus:
        used = _("{before}{arrow}{after} used").format(before=format_size(change.used_before), arrow=arrow,
                                                       after=format_size(change.used_after))
        freed = change.freed
        if freed is None:
            verdict = _("freed: N/A")
        elif freed > 0:
            verdict = style.paint(_("{size} freed").format(size=format_size(freed)), "green")
        elif freed == 0:
            verdict = _("nothing freed")
        else:
            verdict = _("{size} more in use (other processes allocated meanwhile)").format(size=format_size(-freed))
        lines.append(_("GPU {index}  {used}: {verdict}").format(index=change.index, used=used, verdict=verdict))
        for p in change.still:
            t = target_pids.get(p.pid_here) if p.pid_here is not None else None  # never a host pid as one here
            mark = style.paint(f"  [{status_words(t.status)}]", _COLOURS.get(t.status, "bold")) if t else ""
            # Translators: a process the kill left holding memory: its size, user and pid (kept aligned)
            head = "       " + _("still held: {size}  {user} {pid}").format(
                size=f"{format_size(p.memory):>8}", user=pad(fit(p.user or "?", 10), 10), pid=f"{fmt.pid(p):>7}") + "  "
            lines.append(head + clip(p.command or f"({fmt.missing(p)})", max(10, width - cells(head) - 16)) + mark)
        if change.unattributed:
            lines.append("       " + _("{size} used but not charged to any listed process: see vram ps --holders")
                         .format(size=format_size(change.unattributed)))
        holders = [h for h in report.holders_after if change.index in h.gpus]
        for h in holders:
            who = lister(g.vendor for g in plan.snapshot.gpus if g.index == change.index)
            head = "       " + _("holds its device files open, not listed by {who}: {user} {pid}").format(
                who=who, user=h.host.user or "?", pid=h.pid) + "  "
            lines.append(head + clip(h.host.command, max(10, width - cells(head))))
        if not change.still and not change.unattributed and not holders:
            lines.append(style.paint("       " + _("no process holds memory on it now"), "dim"))
    if report.audit_log:
        lines.append(style.paint(_("audit log: {path}").format(path=report.audit_log), "dim"))
    return "\n".join(lines)


def target_dict(t: Target) -> dict[str, Any]:
    return {
        "pid": t.pid, "start_time": None if t.start_time is None else round(t.start_time, 3),
        "user": t.user, "uid": t.uid, "command": t.command, "name": t.name, "state": t.state,
        "gpus": [{"gpu": g, "memory": m} for g, m in sorted(t.gpus.items())], "memory": t.memory,
        "nvml_listed": t.nvml_listed, "driver_listed": t.nvml_listed, "devices": list(t.devices),
        "holder_gpus": list(t.holder_gpus),
        "container": t.container, "owner": describe(t.workload), "namespace_pids": list(t.ns_pids),
        "container_pid": t.container_pid,
        "elapsed": None if t.elapsed is None else round(t.elapsed, 1), "simulated": t.synthetic,
        "status": t.status, "rule": t.refusal.rule if t.refusal else None,
        "reason": t.refusal.reason if t.refusal else None, "signals": list(t.signals),
        "seconds": None if t.seconds is None else round(t.seconds, 3), "notes": list(t.notes),
    }


def kill_json(report: KillReport, signal: str, timeout: float, force: bool) -> str:
    plan = report.plan
    out = {
        **_header(plan.snapshot), "dry_run": report.dry_run, "signal": signal, "timeout": timeout, "force": force,
        "ok": report.ok, "targets": [target_dict(t) for t in plan.targets], "notes": list(plan.notes),
        "gpus": [{"index": c.index, "memory_used_before": c.used_before, "memory_used_after": c.used_after,
                  "freed": c.freed, "targets_held": c.targets_held, "unattributed": c.unattributed,
                  # pid null and nvml_pid: a host pid no process here could be told to be (as ps --json)
                  "still_holding": [{"pid": p.pid_here, "nvml_pid": p.nvml_pid, "user": p.user, "memory": p.memory,
                                     "command": p.command, "target": any(t.pid == p.pid_here for t in plan.targets)}
                                    for p in c.still]}
                 for c in report.gpus],
        "holders_after": [{"pid": h.pid, "user": h.host.user, "command": h.host.command, "gpus": list(h.gpus),
                           "devices": list(h.devices)} for h in report.holders_after],
        "audit_log": report.audit_log,
    }
    return json.dumps(out, indent=2)
