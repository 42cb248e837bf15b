"""The rules a target must pass to be signalled, beside the protected list (protect.py): it maps to a
real process here, is not protected, is the caller's to signal, and has not already exited.
`check` runs at selection and `recheck` again on the pinned process just before the signal,
so an exec into a protected name or a change of owner in between is refused."""

from __future__ import annotations

from .. import procs
from ..gpu_state import GpuProcess
from ..i18n import N_, _
from ..procs.workload import describe
from ..protect import Candidate, Protection, Refusal, Said, said
from .model import Caller, Target


def candidate(t: Target) -> Candidate:
    return Candidate(pid=t.pid, name=t.name, argv0=t.argv0, command=t.command, user=t.user,
                     kernel_thread=t.kernel_thread, real=not t.synthetic, uids=t.uids)


def ownership(t: Target, caller: Caller, all_users: bool) -> Refusal | None:
    if t.uids is None:
        return Refusal.of("ownership", said(N_("its owner cannot be read")))
    real, effective, _saved = t.uids
    user = t.user or str(real)
    owner = describe(t.workload)
    # whom the process works for says more than its uid: "pod nlp/train-7f9c, run by root"
    who = Said(user, user) if owner is None else said(
        N_("{owner}, run by {user}"), owner=Said(owner, describe(t.workload, local=True) or owner), user=user)
    if caller.root:
        if real == 0 and effective == 0:
            return None
        if not all_users:
            return Refusal.of("ownership", said(N_("it belongs to {who}; as root, other users' processes also need "
                                                   "--all-users"), who=who))
        return None
    if real == effective == caller.uid:
        return None
    if real == caller.uid:
        return Refusal.of("ownership", said(N_("it runs with another user's privileges (effective uid {uid})"),
                                            uid=effective))
    if all_users:
        return Refusal.of("ownership", said(N_("it belongs to {who}; you ({me}) may signal only your own processes "
                                               "(--all-users needs root)"), who=who, me=caller.user))
    return Refusal.of("ownership", said(N_("it belongs to {who}; you ({me}) may signal only your own processes"),
                                        who=who, me=caller.user))


def _defunct_reason(t: Target) -> Said:
    if t.ppid == 1:
        return said(N_("it has already exited (defunct) and cannot be signalled; its parent is init (pid 1), which "
                       "should reap it; in a container this means the container's init does not reap children (run "
                       "it with --init). Memory still charged to it is usually held by a child that inherited its "
                       "GPU files (vram ps --holders)"))
    return said(N_("it has already exited (defunct) and cannot be signalled; its parent (pid {ppid}) has not reaped "
                   "it: ending the parent frees it. Memory still charged to it is usually held by a child that "
                   "inherited its GPU files (vram ps --holders)"), ppid=t.ppid)


def check(t: Target, caller: Caller, protection: Protection, all_users: bool) -> Refusal | None:
    """Why t must not be signalled, or None. The order decides which rule a refusal names."""
    if t.unmapped:
        # (English: the audit log keeps it; the words are marked N_ where they are written)
        listed = t.listed
        if isinstance(listed, GpuProcess) and listed.nvml_pid is not None and listed.pid_here is None:
            from ..pidmap import why_unmapped  # inside a container: said from what pidmap knows of the row

            return Refusal("unmapped", t.unmapped, why_unmapped(listed))
        return Refusal("unmapped", t.unmapped, _(t.unmapped))
    refusal, doubt = protection.judge(candidate(t))
    if refusal:
        return refusal
    if doubt and doubt not in t.notes:
        t.notes.append(doubt)  # named like a protected process, but not credibly one: said, not obeyed
    refusal = ownership(t, caller, all_users)
    if refusal:
        return refusal
    if t.defunct:
        return Refusal.of("zombie", _defunct_reason(t))
    if t.synthetic:
        return Refusal.of("simulated", said(N_("a made-up process of the simulated scenario: there is no real "
                                               "process to signal")))
    return None


def recheck(t: Target, pinned: procs.Pinned, caller: Caller, protection: Protection,
             all_users: bool) -> Refusal | None:
    """The checks again, on what the process is now (an exec may have changed name or owner)."""
    now = pinned.identity
    fresh = Target(pid=t.pid, command=procs.cmdline(t.pid) or f"[{now.name}]",
                   listed=t.listed, identity=now, defunct=now.state == "zombie" and procs.is_defunct(t.pid))
    return check(fresh, caller, protection, all_users)
