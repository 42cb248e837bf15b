"""Red team: vramkit.torch.simulated_memory_cap against code that grows memory without making a new
storage (out= into a buffer of another size, resize_), and arguments that reach its OOM message."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from vramkit.doctor import find_oom  # noqa: E402
from vramkit.errors import RequestError  # noqa: E402
from vramkit.torch import simulated_memory_cap  # noqa: E402

MB = 2**20  # a multiple of the 512-byte blocks: no rounding in the sums


def test_an_out_buffer_that_grows_is_counted_and_freed():
    buf = torch.empty(0)  # made before the cap: its growth under the cap is new memory
    cap = simulated_memory_cap(100 * MB)
    with cap:
        torch.add(torch.ones(MB // 4), 1, out=buf)  # resized from 0 to 1 MB
        assert cap.current == MB
        buf.resize_(MB // 2)  # 2 MB: one more MB
        assert cap.current == 2 * MB
        buf.resize_(10)  # shrinking a storage frees nothing (as on CUDA)
        assert cap.current == 2 * MB and cap.peak == 2 * MB
        del buf
        assert cap.current == 0


def test_a_loop_growing_an_out_buffer_runs_out_of_memory():
    """Without counting the growth, this loop ran to the end under a cap far smaller than its buffer."""
    buf = torch.empty(0)
    part = torch.zeros(MB // 4)  # 1 MB, made before the cap
    with pytest.raises(torch.OutOfMemoryError) as e, simulated_memory_cap(8 * MB):
        for n in range(1, 64):
            buf.resize_(0)
            torch.cat([part] * n, out=buf)
    assert n == 9  # 8 MB fit, 9 MB do not
    assert buf.untyped_storage().nbytes() == 8 * MB  # the failed allocation left the buffer as it was
    report = find_oom(str(e.value))
    assert report is not None and report.requested_bytes == MB


@pytest.mark.parametrize("device", [-1, True, "0\x1b[2J", 1.0])
def test_the_device_is_a_cuda_number(device):
    with pytest.raises(RequestError) as e:
        simulated_memory_cap(1024, device=device)
    assert e.value.param == "device"
