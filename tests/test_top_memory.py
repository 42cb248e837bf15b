"""`vram top`'s memory over a long session: what grows is bounded (issue 36: RSS flat after the
first minute). The sizes themselves are measured by benchmarks/bench_top.py and bench_soak.py."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import subprocess
import sys
import textwrap

import pytest
from rich.cells import cached_cell_len, cell_len

from vramkit.machine import open_machine
from vramkit.tui.app import CELL_LENGTHS, TopApp

GLIBC = hasattr(ctypes.CDLL(None), "gnu_get_libc_version")


def test_starting_leaves_no_garbage_and_a_refresh_bounds_richs_cell_lengths(sim_env):
    machine = open_machine("demo")
    app = TopApp(machine.snapshot, interval=3600)
    gc.collect()  # what the tests before left

    async def main():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await pilot.pause()
            left = gc.collect()  # what starting left in cycles and the view did not collect
            assert left < 1000, left  # ~4,600 objects when nothing collects them
            for i in range(CELL_LENGTHS + 100):  # new texts, as the clock and ELAPSED bring every second
                cell_len(f"{i}:00:00 elapsed")
            assert cached_cell_len.cache_info().currsize > CELL_LENGTHS
            await app.refresh_data()
            assert cached_cell_len.cache_info().currsize <= CELL_LENGTHS
            await pilot.pause()  # the view draws on as before
            assert app.query_one("#procs").row_count > 0

    asyncio.run(main())


# Threads that allocate, after what `vram top` does first; glibc's arenas counted by malloc_info
ARENAS = textwrap.dedent("""
    import ctypes, sys, threading
    from vramkit.cli import top
    if sys.argv[1] == "view":
        top._one_malloc_arena()
    together = threading.Barrier(4)
    def work(out=[]):
        together.wait()
        out.extend(bytearray(600) for _ in range(2000))
        together.wait()  # none ends (freeing its arena for the next) before all have allocated
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    f = libc.fopen(sys.argv[2].encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(f))
    libc.fclose(ctypes.c_void_p(f))
""")


@pytest.mark.skipif(not GLIBC, reason="glibc's arenas")
def test_the_views_threads_allocate_from_one_arena(tmp_path):
    counts = {}
    for how in ("view", "default"):
        info = tmp_path / f"{how}.xml"
        subprocess.run([sys.executable, "-c", ARENAS, how, str(info)], check=True, timeout=60)
        counts[how] = info.read_text().count("<heap nr=")
    assert counts["view"] == 1
    assert counts["default"] > 1  # the test's threads do get arenas of their own without it
