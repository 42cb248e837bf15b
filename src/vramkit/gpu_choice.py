"""Which GPUs a request may have: the policy, every GPU's verdict, and the choice.

A unit is what a job can be given: a whole GPU, or one MIG instance of a GPU in MIG mode.
Everything here is pure: a snapshot and the reservations (leases, earlier waiters) go in, a
Decision comes out, with the reason for every unit that does not fit, so that a refusal can say
what is available. Two kinds of reasons: `never` (waiting cannot help: not allowed, too small,
lost, too few GPUs) and problems of the moment (too little free memory now, busy, reserved).
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from .cuda_env import CudaDevice, whole_gpus
from .errors import RequestError, no_such_gpu
from .gpu_state import GpuProcess, Snapshot
from .i18n import N_, _, join_words, ngettext, pgettext
from .units import format_size

DEFAULT_MIN_FREE_PCT = 50.0  # without --min-free: at least half the unit's memory is free
DEFAULT_MAX_UTIL = 50.0  # without --max-util: the GPU is busy less than half the time
PREFER = ("spread", "pack")


@dataclass
class Policy:
    """What a request asks for. Sizes are bytes. Serialisable (waiters store it in their ticket)."""

    count: int = 1
    min_free: int | None = None  # bytes; when None, min_free_pct applies
    min_free_pct: float | None = DEFAULT_MIN_FREE_PCT  # % of the unit's memory
    max_util: float | None = DEFAULT_MAX_UTIL  # None: no limit
    exclude: list[str] = field(default_factory=list)  # unit keys
    only: list[str] | None = None  # unit keys
    allowed: list[str] | None = None  # unit keys from an inherited CUDA_VISIBLE_DEVICES
    allowed_from: str | None = None  # what the environment set, as NAME=value (visible.py), for messages
    prefer: str = "spread"
    exclusive: bool = False
    uid: int = field(default_factory=os.getuid)  # "other users" are relative to this uid

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Policy:
        """From a waiter's ticket (written by any user): ValueError unless every field has its type."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        policy = cls(**known)
        number = (int, float)

        def ok(value: object, kinds: type | tuple[type, ...], optional: bool = False) -> bool:
            return (optional and value is None) or (isinstance(value, kinds) and not isinstance(value, bool))

        def keys(value: object, optional: bool = False) -> bool:
            return (optional and value is None) or (isinstance(value, list) and all(isinstance(k, str) for k in value))

        if not (ok(policy.count, int) and policy.count >= 1 and ok(policy.min_free, int, True)
                and ok(policy.min_free_pct, number, True) and ok(policy.max_util, number, True)
                and keys(policy.exclude) and keys(policy.only, True) and keys(policy.allowed, True)
                and ok(policy.allowed_from, str, True) and policy.prefer in PREFER
                and isinstance(policy.exclusive, bool) and ok(policy.uid, int)):
            raise ValueError(f"not a policy: {data!r}")
        return policy

    def need(self, total: int | None) -> int | None:
        """Bytes that must be free on a unit of `total` bytes (None: unknown total)."""
        if self.min_free is not None:
            return self.min_free
        if self.min_free_pct is None:
            return 0
        return None if total is None else int(total * self.min_free_pct / 100)

    def describe(self) -> str:
        """'1 GPU, ≥50% free, ≤50% busy, spread' (the words a refusal and the wait line use)."""
        parts = [_count_words(self.count)]
        if self.min_free is not None:
            parts.append(_("≥{size} free").format(size=format_size(self.min_free)))
        elif self.min_free_pct:
            parts.append(_("≥{size} free").format(size=f"{self.min_free_pct:g}%"))
        if self.max_util is not None and self.max_util < 100:
            parts.append(_("≤{pct}% busy").format(pct=f"{self.max_util:g}"))
        if self.exclusive:
            parts.append(_("no other user's process"))
        if self.prefer != "spread":
            parts.append(_("prefer {policy}").format(policy=self.prefer))
        return join_words(parts)


def reasons_words(items: list[str]) -> str:
    """Reasons, one after another: 'busy (...); short of free memory (...)'."""
    # Translators: the separator between reasons (clauses) in one line
    return pgettext("list", "; ").join(items)


def _count_words(n: int) -> str:
    return ngettext("{n} GPU", "{n} GPUs", n).format(n=n)


@dataclass
class Unit:
    """A whole GPU or a MIG instance, with what NVML says about it now."""

    dev: CudaDevice
    memory_total: int | None
    memory_free: int | None
    capacity: int | None  # the most that could ever be free (total less driver-reserved)
    utilization: int | None  # None: N/A (always on MIG instances)
    processes: list[GpuProcess]
    lost: bool
    memory_na: str | None = None  # why memory is N/A
    util_na: str | None = None
    links: dict[int, str] = field(default_factory=dict)  # other GPU -> how they connect (Topology's words)

    @property
    def key(self) -> str:
        return self.dev.key


def units_of(snap: Snapshot, devices: list[CudaDevice]) -> list[Unit]:
    """Whole GPUs not in MIG mode, and the MIG instances of those that are; in PCI order."""
    by_index = {g.index: g for g in snap.gpus}
    out = []
    for d in whole_gpus(devices):
        g = by_index[d.index]
        if d.mig_mode:
            for m in (x for x in devices if x.is_mig and x.index == d.index):
                mig = next(x for x in g.mig_devices if x.gi == m.gi)
                out.append(Unit(dev=m, memory_total=mig.memory_total, memory_free=mig.memory_free,
                                capacity=mig.memory_total, utilization=None,
                                processes=[p for p in g.processes if p.mig_gi == m.gi], lost=g.lost,
                                memory_na=None if mig.memory_free is not None else "N/A",
                                util_na=_("not reported for MIG instances") if m.vendor == "nvidia" else
                                _("read for the whole GPU, not its partitions")))
            continue
        capacity = None if g.memory_total is None else g.memory_total - (g.memory_reserved or 0)
        links = {} if snap.topology is None else {
            o.index: snap.topology.between(d.index, o.index) for o in snap.gpus if o.index != d.index}
        out.append(Unit(dev=d, memory_total=g.memory_total, memory_free=g.memory_free, capacity=capacity,
                        utilization=g.utilization, processes=list(g.processes), lost=g.lost,
                        memory_na=g.na.get("memory_free") or g.na.get("memory_used"),
                        util_na=g.na.get("utilization"), links=links))
    return out


def resolve_selectors(text: str, devices: list[CudaDevice], param: str) -> list[str]:
    """'0,2' / '0-3' / '0/9' / 'GPU-8932f937' / 'MIG-...' -> unit keys. NVML numbering (as
    nvidia-smi and vram status). A GPU in MIG mode stands for its instances. A typo is a
    RequestError (a ValueError) whose `param` is `param` ("exclude", "only")."""
    param = param.lstrip("-").replace("-", "_")  # "--only" from an older caller: the parameter "only"
    keys: list[str] = []
    gpus = {d.index: d for d in devices if not d.is_mig}
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            raise RequestError(_("empty item in {text}").format(text=repr(text)), param=param)
        found: list[CudaDevice]
        if len(part) > 200 and not part.startswith(("GPU-", "MIG-")):
            raise RequestError(_("{text}... is not a GPU (too long)").format(text=repr(part[:40])), param=param)
        if m := re.fullmatch(r"(\d+)-(\d+)", part):
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo > hi:
                raise RequestError(_("{text} is not a range (try 0-3)").format(text=repr(part)), param=param)
            # The first index this machine lacks, found lazily: within len(gpus) + 1 steps, so a
            # range such as 0-999999999 is never expanded.
            missing = next((i for i in range(lo, hi + 1) if i not in gpus), None)
            if missing is not None:
                raise no_such_gpu(missing, list(gpus), param=param)
            found = [gpus[i] for i in range(lo, hi + 1)]
        elif part.isdecimal():
            if int(part) not in gpus:
                raise no_such_gpu(part, list(gpus), param=param)
            found = [gpus[int(part)]]
        elif m := re.fullmatch(r"(\d+)/(\d+)", part):
            found = [d for d in devices if d.is_mig and d.index == int(m.group(1)) and d.gi == int(m.group(2))]
            if not found:
                raise RequestError(_("no MIG instance {text} (GPU/GPU-instance, as vram ps shows it)").format(
                    text=part), param=param)
        elif part.startswith(("GPU-", "MIG-")):
            found = [d for d in devices if d.uuid and d.uuid.startswith(part)]
            if len(found) != 1:
                if not found:
                    raise RequestError(_("{text} matches no GPU or MIG UUID here").format(text=repr(part)),
                                       param=param)
                raise RequestError(_("{text} matches {n} UUIDs ({gpus}); give more of it").format(
                    text=repr(part), n=len(found), gpus=", ".join(d.label for d in found)), param=param)
        else:
            raise RequestError(_("{text} is not a GPU (try 0,2 or 0-3, 0/9 for a MIG instance, or a UUID)").format(
                text=repr(part)), param=param)
        for d in found:
            keys.append(d.key)
            if d.mig_mode:
                keys.extend(x.key for x in devices if x.is_mig and x.index == d.index)
    return keys


@dataclass
class Block:
    """Why a unit is reserved for someone else: a lease, or an earlier waiter's claim."""

    kind: str  # "lease" or "queue"
    text: str  # what the unit is, after "GPU 4 is": "reserved by a vram run of bob (pid 4121, 12s ago)"


@dataclass
class Problem:
    kind: str  # memory, memory-na, util, exclusive, lease, queue; never: allowed, excluded, only, lost, mig, small
    detail: str = ""  # e.g. "9.2GiB free"
    users: tuple[str, ...] = ()  # exclusive: the other users (grouping merges them)


@dataclass
class Verdict:
    unit: Unit
    never: Problem | None = None  # waiting cannot make it fit this request
    problems: list[Problem] = field(default_factory=list)  # why it does not fit now
    notes: list[str] = field(default_factory=list)  # a limit not applied, and why

    @property
    def fits(self) -> bool:
        return self.never is None and not self.problems


@dataclass
class Decision:
    policy: Policy
    verdicts: list[Verdict]
    chosen: list[Unit]  # in PCI order; empty unless the request is satisfied now
    impossible: str | None = None  # why it can never be satisfied (waiting will not help)
    connection: str | None = None  # how the chosen GPUs connect, when that chose them (-n 2 and more)

    @property
    def ok(self) -> bool:
        return bool(self.chosen)

    @property
    def fitting(self) -> list[Unit]:
        return [v.unit for v in self.verdicts if v.fits]


def _judge(policy: Policy, unit: Unit, blocked: dict[str, Block]) -> Verdict:
    v = Verdict(unit)
    key = unit.key
    if policy.allowed is not None and key not in policy.allowed:
        v.never = Problem("allowed")
    elif policy.only is not None and key not in policy.only:
        v.never = Problem("only")
    elif key in policy.exclude:
        v.never = Problem("excluded")
    elif unit.lost:
        v.never = Problem("lost")
    elif unit.dev.is_mig and unit.dev.vendor == "nvidia" and policy.count > 1:  # an AMD partition is a GPU to HIP
        v.never = Problem("mig")
    elif policy.min_free is not None and unit.capacity is not None and unit.capacity < policy.min_free:
        v.never = Problem("small", format_size(unit.capacity))
    if v.never:
        return v
    need = policy.need(unit.memory_total)
    if need is None or need > 0:
        if unit.memory_free is None or need is None:
            v.problems.append(Problem("memory-na", unit.memory_na or "N/A"))
        elif unit.memory_free < need:
            v.problems.append(Problem("memory", format_size(unit.memory_free)))
    if policy.max_util is not None and policy.max_util < 100:
        if unit.utilization is None:
            v.notes.append(_("--max-util not applied: utilization {why}").format(  # (shown by --explain)
                why=unit.util_na or "N/A"))
        elif unit.utilization > policy.max_util:
            v.problems.append(Problem("util", f"{unit.utilization}%"))
    if policy.exclusive:
        others = sorted({_whose(p) for p in unit.processes if p.uid != policy.uid})
        if others:
            v.problems.append(Problem("exclusive", join_words(others), users=tuple(others)))
    if key in blocked:
        v.problems.append(Problem(blocked[key].kind, blocked[key].text))
    return v


def _whose(p: GpuProcess) -> str:
    """Whose a process is, for --exclusive's refusal. Inside a container, a row no process here
    could be told to be runs outside it: said so, by its host pid (as doctor says it), for its
    user cannot be read here."""
    if p.pid_here is None:
        return _("a process of another PID namespace (host pid {pid})").format(pid=p.nvml_pid)
    return p.user or _("unknown user")


def _rank(policy: Policy, unit: Unit) -> tuple[int, int, int]:
    free = unit.memory_free or 0
    util = unit.utilization or 0
    # spread: the emptiest first, so the job is disturbed least; pack: the fullest that fits,
    # which keeps empty GPUs whole for big jobs (best fit).
    return ((-free if policy.prefer == "spread" else free), util, len(unit.processes))


def ranked(policy: Policy, units: list[Unit]) -> list[Unit]:
    """The units that fit the policy now, best first: the order `vram pick` chooses in."""
    order = {u.key: i for i, u in enumerate(units)}
    fitting = [u for u in units if _judge(policy, u, {}).fits]
    return sorted(fitting, key=lambda u: (_rank(policy, u), order[u.key]))


def decide(policy: Policy, units: list[Unit], blocked: dict[str, Block] | None = None) -> Decision:
    """Judge every unit and choose `policy.count` of them, or say why not (now or ever)."""
    blocked = blocked or {}
    verdicts = [_judge(policy, u, blocked) for u in units]
    decision = Decision(policy, verdicts, chosen=[])
    possible = [v for v in verdicts if v.never is None]
    if len(possible) < policy.count:
        decision.impossible = _impossible_text(decision, possible)
        return decision
    fitting = [v.unit for v in verdicts if v.fits]
    order = {u.key: i for i, u in enumerate(units)}
    fitting = _one_vendor(sorted(fitting, key=lambda u: (_rank(policy, u), order[u.key])), policy.count)
    if len(fitting) >= policy.count:
        best_first = fitting
        best = best_first[: policy.count]
        if policy.count > 1 and any(word != "?" for u in best_first for word in u.links.values()):
            best = _connected(best_first, policy.count)
            decision.connection = connection_text(best)
        decision.chosen = sorted(best, key=lambda u: order[u.key])
    return decision


def _one_vendor(best_first: list[Unit], count: int) -> list[Unit]:
    """The fitting units of one vendor (a program runs on one vendor's GPUs): the vendor of the best
    unit that has `count` of them."""
    for vendor in dict.fromkeys(u.dev.vendor for u in best_first):
        mine = [u for u in best_first if u.dev.vendor == vendor]
        if len(mine) >= count:
            return mine
    return []


# How close two GPUs are (nvidia-smi topo -m's words): NVLink, then one PCIe switch, several
# switches, one host bridge, one NUMA node, across NUMA nodes; unknown last.
LINK_DISTANCE = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}
LINK_WORDS = {"PIX": N_("one PCIe switch"), "PXB": N_("PCIe switches, no host bridge between them"),
              "PHB": N_("one PCIe host bridge"), "NODE": N_("one NUMA node, across PCIe host bridges"),
              "SYS": N_("different NUMA nodes"), "?": N_("unknown")}


def _distance(a: Unit, b: Unit) -> float:
    word = a.links.get(b.dev.index, "?")
    if word.startswith("NV"):
        return -int(word[2:]) / 100  # NVLink: closest, more links closer still
    return LINK_DISTANCE.get(word, 6)


def _connected(best_first: list[Unit], count: int) -> list[Unit]:
    """`count` units as closely connected as any `count` that fit, the better ranked where
    connection ties: grown greedily from each unit in turn, the tightest group kept."""
    position = {u.key: i for i, u in enumerate(best_first)}
    groups = []
    for seed in best_first:
        group = [seed]
        while len(group) < count:
            rest = [u for u in best_first if u not in group]
            group.append(min(rest, key=lambda u: (max(_distance(u, m) for m in group), position[u.key])))
        pairs = [_distance(a, b) for i, a in enumerate(group) for b in group[i + 1:]]
        groups.append(((max(pairs), sum(pairs), sum(position[u.key] for u in group)), group))
    return min(groups, key=lambda scored: scored[0])[1]


def connection_text(units: list[Unit]) -> str:
    """'GPUs 3, 4: NVLink, 4 links (NV4)', 'GPUs 0, 1: one PCIe switch (PIX)': the weakest pair's."""
    pairs = [(a, b) for i, a in enumerate(units) for b in units[i + 1:]]
    a, b = max(pairs, key=lambda pair: _distance(*pair))
    word = a.links.get(b.dev.index, "?")
    if word.startswith("NV"):
        words = ngettext("NVLink, {n} link", "NVLink, {n} links", int(word[2:] or 0)).format(n=word[2:])
    else:
        words = _(LINK_WORDS[word]) if word in LINK_WORDS else word
    if len(units) > 2:
        return _("{gpus}: {link} ({code}) between the farthest two").format(gpus=ids_text(units), link=words,
                                                                           code=word)
    return _("{gpus}: {link} ({code})").format(gpus=ids_text(units), link=words, code=word)


def queue_blocks(units: list[Unit], blocked: dict[str, Block], earlier: list[tuple[Policy, str]]) -> dict[str, Block]:
    """First come, first served: each earlier waiter, in order, claims what it would get now; one
    that cannot be satisfied yet holds every unit that fits it, so later small requests cannot
    starve it. Returns `blocked` extended with those claims. `earlier`: (policy, who) pairs."""
    blocked = dict(blocked)
    for policy, who in earlier:
        d = decide(policy, units, blocked)
        if d.impossible:
            continue
        claimed = d.chosen if d.ok else d.fitting
        for u in claimed:
            blocked[u.key] = Block("queue", _("held for an earlier waiter ({who})").format(who=who))
    return blocked


# ---------------------------------------------------------------- words for a refusal

def ids_text(units: list[Unit]) -> str:
    """'GPU 4', 'GPUs 0-3, 6', 'GPU 0/9, 0/10' (MIG instances as GPU/GPU-instance)."""
    return ngettext("GPU {ids}", "GPUs {ids}", len(units)).format(ids=_id_runs(units))


def _id_runs(units: list[Unit]) -> str:
    """'4', '0-3, 6', '0/9, 0/10': ids_text without the word."""
    whole = sorted(u.dev.index for u in units if not u.dev.is_mig)
    runs: list[str] = []
    i = 0
    while i < len(whole):
        j = i
        while j + 1 < len(whole) and whole[j + 1] == whole[j] + 1:
            j += 1
        if j == i:
            runs.append(str(whole[i]))
        else:
            runs += [str(whole[i]), str(whole[j])] if j == i + 1 else [f"{whole[i]}-{whole[j]}"]
        i = j + 1
    runs += [u.dev.short_id for u in units if u.dev.is_mig]
    return join_words(runs)  # 'GPU 0-3, 6'; in Chinese 'GPU 0-3、6'


def _problem_words(kind: str, details: str, policy: Policy, unit: Unit) -> str:
    """What a unit is, for one kind of problem ('short of free memory (9.2GiB free; need 40.0GiB)'):
    what follows "GPU 4 is" in a refusal, and a unit's verdict in --explain."""
    if kind == "allowed":
        return _("outside {allowed}").format(allowed=policy.allowed_from or _("what the environment allows"))
    if kind == "only":
        return _("not in --only")
    if kind == "excluded":
        return pgettext("pick verdict", "excluded")
    if kind == "lost":
        return _("lost (fell off the bus)")
    if kind == "mig":
        return _("MIG instances (a CUDA program uses one MIG instance, so they are for -n 1 only)")
    if kind == "small":
        return _("too small ({details} usable)").format(details=details)
    if kind == "memory":
        return _("short of free memory ({details} free; need {need})").format(details=details,
                                                                           need=_need_text(policy, unit))
    if kind == "memory-na":
        return _("of unknown free memory ({details})").format(details=details)
    if kind == "util" and policy.max_util is not None:
        return _("busy ({details} utilization; limit {limit}%)").format(details=details,
                                                                         limit=f"{policy.max_util:g}")
    if kind == "util":
        return _("busy ({details} utilization)").format(details=details)
    if kind == "exclusive":
        return _("in use by other users ({details})").format(details=details)
    return details  # lease, queue: the Block's own words


def _groups(verdicts: list[Verdict], policy: Policy, never: bool) -> list[str]:
    """Units grouped by their (first) reason: 'GPUs 0, 5, 6 short of free memory (9.2GiB, ...)'."""
    groups: dict[str, list[Verdict]] = {}
    for v in verdicts:
        if never and v.never:
            groups.setdefault(v.never.kind, []).append(v)
        elif not never and v.never is None and v.problems:
            groups.setdefault(v.problems[0].kind, []).append(v)
    out = []
    for kind, vs in groups.items():
        # (grouped by it above, so every v has the problem: the lists stay aligned with vs)
        problems = [v.never for v in vs if v.never] if never else [v.problems[0] for v in vs]
        details = [p.detail for p in problems if p.detail]
        if kind in ("lease", "queue"):
            for v, p in zip(vs, problems):
                out.append(_unit_is([v.unit], p.detail))
            continue
        if kind == "exclusive":
            details = sorted({n for p in problems for n in p.users})
        elif len(set(details)) == 1:
            details = details[:1]
        out.append(_unit_is([v.unit for v in vs], _problem_words(kind, join_words(details), policy, vs[0].unit)))
    return out


def _unit_is(units: list[Unit], words: str) -> str:
    """'GPU 4 is busy (...)', 'GPUs 0, 5 are short of free memory (...)'."""
    return ngettext("{gpus} is {what}", "{gpus} are {what}", len(units)).format(gpus=ids_text(units), what=words)


def _need_text(policy: Policy, unit: Unit) -> str:
    if policy.min_free is not None:
        return format_size(policy.min_free)
    return f"{policy.min_free_pct:g}% = {format_size(policy.need(unit.memory_total))}"


def available_text(decision: Decision, limit: int = 4) -> str:
    """What there is now: the units that fit, else the ones with the most free memory."""
    fitting = [v.unit for v in decision.verdicts if v.fits]
    if fitting:
        body = join_words([_("{gpu} ({size} free)").format(gpu=ids_text([u]), size=format_size(u.memory_free))
                           for u in fitting[:limit]])
        if len(fitting) > limit:
            return _("fitting now: {gpus} and {n} more").format(gpus=body, n=len(fitting) - limit)
        return _("fitting now: {gpus}").format(gpus=body)
    units = [v.unit for v in decision.verdicts if v.unit.memory_free is not None and not v.unit.lost]
    units.sort(key=lambda u: -(u.memory_free or 0))
    if not units:
        return _("no GPU reports its free memory")
    return _("most free now: {gpus}").format(gpus=join_words(
        [_("{gpu} ({size} free)").format(gpu=ids_text([u]), size=format_size(u.memory_free)) for u in units[:limit]]))


def _impossible_text(decision: Decision, possible: list[Verdict]) -> str:
    policy = decision.policy
    total = len(decision.verdicts)
    mig = any(v.unit.dev.is_mig for v in decision.verdicts)
    if total < policy.count and not any(v.never for v in decision.verdicts):
        if not total:
            text = _("cannot pick {count}: this machine has 0 GPUs; {available}")
        elif mig:
            text = ngettext("cannot pick {count}: this machine has {total} unit ({ids}); {available}",
                            "cannot pick {count}: this machine has {total} units ({ids}); {available}", total)
        else:
            text = ngettext("cannot pick {count}: this machine has {total} GPU ({ids}); {available}",
                            "cannot pick {count}: this machine has {total} GPUs ({ids}); {available}", total)
        return text.format(count=_count_words(policy.count), total=total,
                           ids=_id_runs([v.unit for v in decision.verdicts]), available=available_text(decision))
    reasons = reasons_words(_groups(decision.verdicts, policy, never=True))
    if not possible:
        text = _("no GPU here can ever fit the request ({wanted}): {reasons}; {available}")
    elif mig:
        text = _("only {n} of {total} units here could ever fit {wanted} ({gpus}): {reasons}; {available}")
    else:
        text = _("only {n} of {total} GPUs here could ever fit {wanted} ({gpus}): {reasons}; {available}")
    return text.format(n=len(possible), total=total, wanted=policy.describe(),
                       gpus=ids_text([v.unit for v in possible]), reasons=reasons, available=available_text(decision))


def shortfall_reasons(decision: Decision) -> list[str]:
    """Why a possible request is not satisfied now: what fits, then the others grouped by reason."""
    policy = decision.policy
    fitting = decision.fitting
    out = [ngettext("only {gpus} fits", "only {gpus} fit", len(fitting)).format(gpus=ids_text(fitting))
           ] if fitting else []
    vendors = sorted({u.dev.vendor for u in fitting})
    if len(vendors) > 1:
        out[0] = _("only {gpus} fit, and a program runs on one vendor's GPUs: none of {vendors} has {count} of "
                   "them").format(gpus=ids_text(fitting), vendors=", ".join(vendors), count=policy.count)
    out += _groups(decision.verdicts, policy, never=False)
    out += _groups(decision.verdicts, policy, never=True)
    return out


def shortfall_text(decision: Decision) -> str:
    """One line: 'no 1 GPU fits now (≥50% free, ≤50% busy): GPU 4 is reserved by ...; ...'."""
    policy = decision.policy
    reasons = reasons_words(shortfall_reasons(decision))
    if policy.count == 1:
        text = _("no GPU fits now (wanted {wanted}): {reasons}") if reasons else _("no GPU fits now (wanted {wanted})")
    else:
        text = (_("too few GPUs fit now (wanted {wanted}): {reasons}") if reasons else
                _("too few GPUs fit now (wanted {wanted})"))
    return text.format(wanted=policy.describe(), reasons=reasons)


def verdict_text(v: Verdict, policy: Policy) -> str:
    """One unit's verdict in words: 'fits', or why not ('busy (97% utilization; limit 50%)')."""
    problems = [v.never] if v.never else v.problems
    if not problems:
        return pgettext("pick verdict", "fits")
    return reasons_words([_problem_words(p.kind, p.detail, policy, v.unit) for p in problems])
