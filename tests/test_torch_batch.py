"""find_batch_size and the memory-cap simulator on the CPU: a formula step for the search's trial
counts under GPU-sized caps, and real training steps of a small network under
simulated_memory_cap, which the search measures as it would CUDA."""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import _get_current_dispatch_mode_stack  # noqa: E402

from vramkit.doctor.oom import parse_oom  # noqa: E402
from vramkit.errors import RequestError  # noqa: E402
from vramkit.torch import (  # noqa: E402
    accumulation_plan,
    find_batch_size,
    find_batch_size_doubling,
    simulated_memory_cap,
)

MiB = 1024**2


def test_the_trials_collections_walk_only_what_the_search_made():
    """find_batch_size collects garbage before every trial and after every failed one, as a real job
    must to free a step's tensors; in a process with millions of objects (a worker that imported the
    suite, a job that imported its model's library) each full collection took about a second. The
    older heap is frozen for the search and thawed after it; a caller's own freeze is left alone.
    get_freeze_count walks the frozen objects (a tenth of a second in such a process), so the trials
    look at it on the first trial and on each one that fails, after the ones that ran."""
    seen = []

    def step(batch):
        if not seen or batch > 6:
            seen.append(gc.get_freeze_count())
        if batch > 6:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory.")

    # The heap thawed, as a job's is: an in-process vram serve thaws it when it stops (4c76569), but
    # one an earlier test in this worker left running would still hold it frozen
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    find_batch_size(step, capacity=1 << 30, high=64)
    assert seen and all(count > 0 for count in seen) and gc.get_freeze_count() == 0
    find_batch_size_doubling(step, high=64)
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        mine = gc.get_freeze_count()
        find_batch_size(step, capacity=1 << 30, high=64)
        assert gc.get_freeze_count() == mine
    finally:
        gc.unfreeze()


# ---------------------------------------------------------------- find_batch_size

class CappedStep:
    """A training step under a simulated memory cap: peak = fixed + per-sample memory, rounded up to
    the caching allocator's 2 MiB blocks; past the cap it raises a real OutOfMemoryError."""

    def __init__(self, cap: int, fixed: int = 900 * MiB, per_sample: int = 37 * MiB // 10) -> None:
        self.cap, self.fixed, self.per = cap, fixed, per_sample
        self.peak = 0

    def need(self, batch: int) -> int:
        raw = self.fixed + self.per * batch
        return -(-raw // (2 * MiB)) * 2 * MiB

    def __call__(self, batch: int) -> None:
        need = self.need(batch)
        if need > self.cap:
            raise torch.cuda.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {(need - self.fixed) / MiB:.2f} MiB. GPU 0 has a total "
                f"capacity of {self.cap / 1024**3:.2f} GiB of which 0 bytes is free.")
        self.peak = need

    def truth(self) -> int:
        return max(b for b in range(1, 100000) if self.need(b) <= self.cap)


@pytest.mark.slow
@pytest.mark.parametrize("cap_gib", [2, 8, 24, 80])
def test_batch_finder_beats_doubling_and_bisection(cap_gib):
    step = CappedStep(cap_gib * 1024**3)
    ours = find_batch_size(step, memory_fn=lambda: step.peak, capacity=step.cap, before_trial=lambda: None)
    base = find_batch_size_doubling(step)
    assert ours.largest == base.largest == step.truth()
    assert ours.trial_count < base.trial_count
    assert ours.trial_count <= 6
    assert step.need(ours.recommended) <= 0.9 * step.cap + 2 * MiB


@pytest.mark.slow
def test_batch_finder_with_a_prediction_and_without_measurements():
    step = CappedStep(8 * 1024**3)
    truth = step.truth()
    # capacity=: the limit the step enforces itself (without it, on a CPU-only machine, the search refuses)
    exact = find_batch_size(step, predict=truth, margin=0.0, capacity=step.cap)
    assert exact.largest == truth and exact.trial_count == 2 and exact.method == "predicted"
    off = find_batch_size(step, predict=truth + 300, capacity=step.cap)
    assert off.largest == truth
    plain = find_batch_size(step, capacity=step.cap)  # nothing to measure, no prediction: doubling + bisection
    assert plain.method == "doubling" and plain.largest == truth


def test_batch_finder_when_nothing_fits_and_other_errors_propagate():
    step = CappedStep(512 * MiB)
    result = find_batch_size(step, memory_fn=lambda: step.peak, capacity=step.cap, before_trial=lambda: None)
    assert result.largest == 0 and result.recommended == 0

    def broken(batch):
        raise ValueError("shape mismatch")

    with pytest.raises(ValueError, match="shape mismatch"):
        find_batch_size(broken, capacity=step.cap)


@pytest.mark.parametrize("target,max_micro,expected", [
    (256, 48, (32, 8, 256, True)), (100, 30, (25, 4, 100, True)), (64, 64, (64, 1, 64, True)),
    (97, 40, (33, 3, 99, False)),
])
def test_accumulation_plan_keeps_the_effective_batch(target, max_micro, expected):
    plan = accumulation_plan(target, max_micro)
    assert (plan.micro_batch, plan.steps, plan.effective_batch, plan.exact) == expected
    assert plan.micro_batch <= max_micro


# ---------------------------------------------------------------- real steps under simulated_memory_cap

def _net_and_step(optimizer: str = "sgd"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    opt = (torch.optim.SGD(model.parameters(), lr=0.1) if optimizer == "sgd"
           else torch.optim.AdamW(model.parameters(), lr=0.1))

    def step(batch: int) -> None:
        loss = model(torch.randn(batch, 64)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return model, opt, step


def test_memory_cap_raises_as_cuda_would_and_counts_what_is_alive():
    model, _, step = _net_and_step()
    weights = sum(p.numel() * 4 for p in model.parameters())
    cap = simulated_memory_cap(2 * MiB, held=model)
    assert cap.held == pytest.approx(weights, abs=4 * 512)  # 512-byte blocks
    with cap:
        step(8)
        assert cap.current == cap.held  # everything the step made is freed again
        assert cap.held < cap.peak <= cap.capacity
        kept = torch.zeros(256, 1024)  # 1 MiB alive
        assert cap.current == cap.held + MiB
        view = kept[:10]  # a view: no new memory
        assert cap.current == cap.held + MiB
        with pytest.raises(torch.OutOfMemoryError) as caught:
            step(4000)
        del kept, view
        assert cap.current == cap.held and cap.ooms == 1
    assert _get_current_dispatch_mode_stack() == []  # the mode is gone with the block
    report = parse_oom(str(caught.value))  # what oom_guard and vram doctor read
    assert report is not None and report.total_bytes == 2 * MiB and report.requested_bytes > 0
    assert report.free_bytes == pytest.approx(2 * MiB - cap.held - MiB, abs=0.01 * MiB)
    with simulated_memory_cap(2 * MiB):
        torch.zeros(1000)
    assert _get_current_dispatch_mode_stack() == []


def test_memory_cap_rejects_bad_sizes():
    with pytest.raises(RequestError, match="capacity"):
        simulated_memory_cap(0)
    model, _, _ = _net_and_step()
    with pytest.raises(RequestError, match="held"):
        simulated_memory_cap(1024, held=model)


def _truth(step, model, capacity: int) -> tuple[int, int]:
    """The largest batch that runs under a fresh cap, by doubling then bisection (the usual search):
    what find_batch_size must find, and how many trials the usual search took."""
    tried = []

    def fits(batch: int) -> bool:
        tried.append(batch)
        try:
            with simulated_memory_cap(capacity, held=model):
                step(batch)
        except torch.OutOfMemoryError:
            return False
        return True

    lo, hi = 1, 2
    while fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo, len(tried)


@pytest.mark.slow
def test_find_batch_size_under_a_simulated_cap_measures_and_restores():
    model, opt, step = _net_and_step()
    capacity = 3 * MiB
    truth, usual_trials = _truth(step, model, capacity)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    with simulated_memory_cap(capacity, held=model) as cap:
        result = find_batch_size(step, model=model, optimizer=opt, multiple_of=8)
    assert result.method == "measured" and result.capacity == capacity
    assert result.largest == truth
    assert result.recommended % 8 == 0 and 0 < result.recommended < truth
    assert result.trial_count < usual_trials
    assert cap.ooms == sum(not t.ok for t in result.trials)
    for key, value in model.state_dict().items():  # the trials trained it; restored
        assert torch.equal(value, before[key]), key
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(torch.get_rng_state(), rng)
    text = str(result)
    assert text.splitlines()[0] == (f"largest batch that ran: {truth}; recommended: {result.recommended} "
                                    "(10% margin on memory, a multiple of 8)")
    assert f"{result.trial_count} trials (measured of 3MiB): 1 " in text and " OOM" in text
    assert "restored after the trials: model parameters and buffers, optimizer state" in text


@pytest.mark.slow
def test_find_batch_size_restores_a_fresh_or_a_trained_optimizer():
    model, opt, step = _net_and_step("adamw")
    with simulated_memory_cap(4 * MiB, held=model):
        find_batch_size(step, model=model, optimizer=opt, high=64)
    assert len(opt.state) == 0  # fresh again: the trials' AdamW moments are gone
    step(4)  # a real step: now it has state
    moments = {id(p): s["exp_avg"].clone() for p, s in opt.state.items()}
    with simulated_memory_cap(4 * MiB, held=model):
        find_batch_size(step, model=model, optimizer=opt, high=64)
    assert {id(p): s["exp_avg"] for p, s in opt.state.items()}.keys() == moments.keys()
    assert all(torch.equal(s["exp_avg"], moments[id(p)]) for p, s in opt.state.items())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with simulated_memory_cap(4 * MiB, held=model):
        kept = find_batch_size(step, model=model, optimizer=opt, high=64, restore=False)
    assert kept.restored == [] and "restored" not in str(kept)
    assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_find_batch_size_refuses_without_a_cap_on_a_cpu_only_machine():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the search measures the GPU")
    calls = []
    with pytest.raises(RequestError, match="simulated_memory_cap") as caught:
        find_batch_size(calls.append)
    assert caught.value.param == "capacity" and calls == []


def test_batch_search_summary_when_nothing_fits():
    model, _, step = _net_and_step()
    with simulated_memory_cap(model_bytes := sum(p.numel() * 4 for p in model.parameters()) + 4096, held=model):
        result = find_batch_size(step)
    assert model_bytes and result.largest == 0
    assert str(result).splitlines()[0] == "no batch fits: the smallest tried (1) ran out of memory"


# ---------------------------------------------------------------- issue 28: AdamW's flat peak, doubling's model=

def _adamw_net_and_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(batch: int) -> None:
        model(torch.randn(batch, 256)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return model, opt, step


@pytest.mark.slow
def test_find_batch_size_under_adamw_probes_past_the_flat_peak_with_few_failures():
    model, opt, step = _adamw_net_and_step()
    with simulated_memory_cap(16 * MiB, held=model):
        result = find_batch_size(step, model=model, optimizer=opt)
    with simulated_memory_cap(16 * MiB, held=model):
        usual = find_batch_size_doubling(step, model=model, optimizer=opt)
    assert result.largest == usual.largest > 0  # the same answer as the exhaustive search
    failed = sum(not t.ok for t in result.trials)
    assert failed <= 2, str(result)
    assert result.trial_count < usual.trial_count, (str(result), str(usual))


@pytest.mark.slow
def test_find_batch_size_doubling_takes_model_and_optimizer_and_restores_them():
    model, opt, step = _adamw_net_and_step()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with simulated_memory_cap(16 * MiB, held=model):
        result = find_batch_size_doubling(step, model=model, optimizer=opt, high=256)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert opt.state_dict()["state"] == {}  # a fresh optimizer is fresh again
    assert all(p.grad is None for p in model.parameters())
    assert "restored after the trials: model parameters and buffers, optimizer state" in str(result)
