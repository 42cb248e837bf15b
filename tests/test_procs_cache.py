"""Repeated snapshots read a process's command line once, an unchanged process's stat line is not parsed
again, and processes that are gone are forgotten."""

from __future__ import annotations

import os
import sys
import time

from helpers import cmdline, minimal_scenario, wait_for

import vramkit
from vramkit import procs
from vramkit.collector import Collector


def _resident(pid: int) -> bool:
    """Whether some page of pid is resident (statm's second field)."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) > 0


def test_the_cache_follows_the_processes(children, write_scenario, monkeypatch):
    a = children.start([sys.executable, "-c", "import time; time.sleep(600)", "job-a"])
    b = children.start([sys.executable, "-c", "import time; time.sleep(600)", "job-b"])
    # Popen returns once exec has begun; the new command line appears a moment later.
    assert wait_for(lambda: cmdline(a.pid).endswith(b"job-a\0") and cmdline(b.pid).endswith(b"job-b\0"))
    data = minimal_scenario()
    data["processes"] += [{"pid": a.pid, "source": "real", "gpus": {"0": "1GiB"}},
                          {"pid": b.pid, "source": "real", "gpus": {"1": "1GiB"}}]
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    machine = vramkit.open_machine(str(write_scenario(data)))
    try:
        first = {p.pid: p.command for p in machine.snapshot().processes}
        assert first[a.pid].endswith("job-a") and first[b.pid].endswith("job-b")
        assert set(machine.backend.table._known) == {a.pid, b.pid}
        second = {p.pid: p.command for p in machine.snapshot().processes}
        assert second == first
        b.kill()
        b.wait()
        third = {p.pid for p in machine.snapshot().processes}
        assert third == {101, 102, a.pid}
        assert set(machine.backend.table._known) == {a.pid}
        assert set(machine._previous_cpu) == {101, 102, a.pid}  # synthetic ones too
    finally:
        machine.close()


def test_stat_files_keep_one_descriptor_per_process_and_never_read_a_gone_one(children):
    import os

    from vramkit.procs import StatFiles

    child = children.start([sys.executable, "-c", "import time; time.sleep(600)"])
    stats = StatFiles()
    before = len(os.listdir("/proc/self/fd"))
    first = stats.stat(child.pid)
    assert first is not None and stats.stat(child.pid).start_ticks == first.start_ticks
    assert len(os.listdir("/proc/self/fd")) == before + 1  # one kept descriptor, reused
    child.kill()
    child.wait()
    assert stats.stat(child.pid) is None  # the kept descriptor says it is gone (a reused pid would too)
    assert len(os.listdir("/proc/self/fd")) == before  # and it was closed
    stats.stat(os.getpid())
    stats.forget_all_but(set())
    assert len(os.listdir("/proc/self/fd")) == before
    stats.close()


def test_a_long_command_line_is_read_whole_up_to_the_bound(children):
    # Longer than one read (8 KiB), so the reading loops; then a bound smaller than the file.
    argv = [sys.executable, "-c", "import time; time.sleep(600)", *(f"arg{i}={'x' * 90}" for i in range(400))]
    child = children.start(argv)
    base = f"/proc/{child.pid}"
    assert wait_for(lambda: cmdline(child.pid).endswith(b"x\0"))
    assert procs.cmdline(child.pid) == " ".join(argv)
    assert procs.read_proc_file(f"{base}/cmdline", 20_000) == cmdline(child.pid)[:20_000]
    assert procs.read_proc_file(f"{base}/no-such-file", 100) is None


def test_a_process_that_execs_another_program_is_read_again(children, tmp_path):
    from vramkit.procs import ProcessTable

    go = tmp_path / "go"
    script = ("import os, time\n"
              f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
              "os.execv('/bin/sleep', ['sleep', '600'])\n")
    child = children.start([sys.executable, "-c", script, "before-exec"])
    assert wait_for(lambda: cmdline(child.pid).endswith(b"before-exec\0"))
    table = ProcessTable()
    try:
        before = table.read(child.pid)
        assert not isinstance(before, str) and before.command.endswith("before-exec")
        go.touch()
        assert wait_for(lambda: cmdline(child.pid) == b"sleep\x00600\x00")
        after = table.read(child.pid)
        assert not isinstance(after, str) and after.start_ticks == before.start_ticks
        assert (after.name, after.command) == ("sleep", "sleep 600")
    finally:
        table.close()


def test_a_process_that_renames_itself_is_shown_by_its_new_name(children, tmp_path):
    # The name sanitized from comm is kept while comm stays the same: a rename (PR_SET_NAME, here
    # through /proc/self/comm) must show the new name, sanitized, on the next read.
    from vramkit.procs import ProcessTable

    steps = [tmp_path / "first", tmp_path / "second"]
    script = ("import os, time\n"
              f"for go, name in zip({[str(s) for s in steps]!r}, [b'bad\\x1b[2Jname', b'worker-2']):\n"
              "    while not os.path.exists(go): time.sleep(0.01)\n"
              "    open('/proc/self/comm', 'wb').write(name)\n"
              "time.sleep(600)\n")
    child = children.start([sys.executable, "-c", script, "renamer"])
    assert wait_for(lambda: cmdline(child.pid).endswith(b"renamer\0"))
    table = ProcessTable()
    try:
        before = table.read(child.pid)
        assert not isinstance(before, str) and before.name.startswith("python")
        assert table.read(child.pid).name == before.name  # read again from what is kept
        for step, comm, name in zip(steps, [b"bad\x1b[2Jname", b"worker-2"], ["bad?[2Jname", "worker-2"]):
            step.touch()
            assert wait_for(lambda comm=comm: procs.read_proc_file(f"/proc/{child.pid}/comm", 64) == comm + b"\n")
            after = table.read(child.pid)
            assert not isinstance(after, str) and after.start_ticks == before.start_ticks
            assert after.name == name and after.command.endswith("renamer")
    finally:
        table.close()


def test_a_process_read_again_unchanged_is_the_last_read_until_proc_says_otherwise(children, monkeypatch):
    # While /proc/PID/stat and the owner say exactly what they said, a read hands back the last
    # HostProcess; whatever changes (state, CPU time, exit, zombie) is seen on the next read.
    import signal

    from vramkit.procs import NOT_VISIBLE, ProcessTable

    sleeper = children.start(["sleep", "600"])
    spinner = children.start([sys.executable, "-c", "while True: pass"])
    table = ProcessTable()
    try:
        def asleep_and_kept() -> bool:  # once exec is done and sleep sleeps
            first = table.read(sleeper.pid)
            return first is table.read(sleeper.pid) and first.state == "sleeping"
        assert wait_for(asleep_and_kept)
        still = table.read(sleeper.pid)
        assert not isinstance(still, str) and still.command == "sleep 600"
        real_stat = os.stat

        def another_owner(path, *args, **kwargs):  # the owner changed, the stat line did not (setuid)
            st = real_stat(path, *args, **kwargs)
            return os.stat_result((*st[:4], 4242, *st[5:]))
        with monkeypatch.context() as m:
            m.setattr(os, "stat", another_owner)
            assert table.read(sleeper.pid).uid == 4242
        assert table.read(sleeper.pid).uid == still.uid
        os.kill(sleeper.pid, signal.SIGSTOP)
        assert wait_for(lambda: table.read(sleeper.pid).state == "stopped")
        os.kill(sleeper.pid, signal.SIGCONT)
        assert wait_for(lambda: table.read(sleeper.pid).state == "sleeping")
        sleeper.kill()  # not reaped yet: a zombie
        assert wait_for(lambda: table.read(sleeper.pid).state == "zombie")
        sleeper.wait()
        assert table.read(sleeper.pid) == NOT_VISIBLE

        busy = table.read(spinner.pid)
        assert not isinstance(busy, str)
        assert wait_for(lambda: table.read(spinner.pid).cpu_time > busy.cpu_time)  # not the same figures again
        table.forget_all_but(set())
        assert not table._known
    finally:
        table.close()



def test_a_kept_workload_is_checked_again_by_its_cgroup_file_alone_within_the_bound(children, monkeypatch):
    """A process's cgroup file is read at its first reading, then once per recheck (not every
    read), and parsed again only when it changed (tests/test_workload.py moves a real one, as root)."""
    from vramkit.procs import table as table_module
    from vramkit.procs import workload

    sleeper = children.start([sys.executable, "-c", "import time; time.sleep(600)", "kept"])
    assert wait_for(lambda: cmdline(sleeper.pid).endswith(b"kept\0"))
    later = [0.0]
    monkeypatch.setattr(table_module, "monotonic", lambda: time.monotonic() + later[0])
    files: list[str] = []
    parsed: list[int] = []
    real_file, real_workload = table_module.read_proc_file, workload.read
    monkeypatch.setattr(table_module, "read_proc_file",
                        lambda path, limit: files.append(path) or real_file(path, limit))
    monkeypatch.setattr(workload, "read", lambda pid, *a, **k: parsed.append(pid) or real_workload(pid, *a, **k))
    table = procs.ProcessTable()
    try:
        first = table.read(sleeper.pid)
        for _i in range(5):
            assert table.read(sleeper.pid).workload is first.workload
        assert (files, parsed) == ([f"/proc/{sleeper.pid}/cgroup"], [sleeper.pid])
        later[0] = table_module.WORKLOAD_RECHECK_S  # due: read again, the same, not parsed
        assert table.read(sleeper.pid).workload is first.workload
        assert (len(files), parsed) == (2, [sleeper.pid])
        table.read(sleeper.pid)
        assert len(files) == 2  # and not read again until the next recheck
    finally:
        table.close()


def test_a_reader_of_who_processes_are_reads_a_running_one_only_at_its_checks(children, monkeypatch):
    """usage=False (the recorder): a kept process that has not ended costs no /proc read until its
    next workload check, where it is read whole (an exec, a new owner, a move are seen there); one
    that ends is read at once: a zombie is said, a gone one is gone."""
    from vramkit.procs import NOT_VISIBLE
    from vramkit.procs import table as table_module

    sleeper = children.start([sys.executable, "-c", "import time; time.sleep(600)", "watched"])
    assert wait_for(lambda: cmdline(sleeper.pid).endswith(b"watched\0"))
    later = [0.0]
    monkeypatch.setattr(table_module, "monotonic", lambda: time.monotonic() + later[0])
    table = procs.ProcessTable()
    reads: list[int] = []
    real_read = table.stats.read
    monkeypatch.setattr(table.stats, "read", lambda pid, keep=True: reads.append(pid) or real_read(pid, keep))
    try:
        first = table.read(sleeper.pid, usage=False)
        assert not isinstance(first, str) and first.command.endswith("watched")
        for _i in range(5):
            assert table.read(sleeper.pid, usage=False) is first
            table.forget_all_but({sleeper.pid})  # a reading ends: the next one polls again
        assert reads == [sleeper.pid]
        assert not isinstance(table.read(sleeper.pid), str) and len(reads) == 2  # usage=True always reads
        later[0] = table_module.WORKLOAD_RECHECK_S  # its check is due: read whole
        table.read(sleeper.pid, usage=False)
        assert len(reads) == 3
        table.read(sleeper.pid, usage=False)
        assert len(reads) == 3
        sleeper.kill()  # not reaped: a zombie, which the pidfd says at the next reading
        assert wait_for(lambda: table.forget_all_but({sleeper.pid}) or
                        getattr(table.read(sleeper.pid, usage=False), "state", None) == "zombie")
        sleeper.wait()
        table.forget_all_but({sleeper.pid})
        assert table.read(sleeper.pid, usage=False) == NOT_VISIBLE
        table.forget_all_but(set())
        assert not table._pidfds
    finally:
        table.close()


def test_without_pidfds_a_reader_of_who_processes_are_reads_every_time(children, monkeypatch):
    # A kernel before 5.3 or a seccomp filter refuses pidfd_open: then nothing says a process has
    # not ended, so each read reads /proc, as usage=True does.
    import errno

    sleeper = children.start(["sleep", "600"])

    def refused(pid, flags=0):
        raise OSError(errno.ENOSYS, "Function not implemented")
    monkeypatch.setattr(os, "pidfd_open", refused)
    table = procs.ProcessTable()
    reads: list[int] = []
    real_read = table.stats.read
    monkeypatch.setattr(table.stats, "read", lambda pid, keep=True: reads.append(pid) or real_read(pid, keep))
    try:
        opened = []
        real_open = os.open
        monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(path) or real_open(path, *a, **k))
        for _i in range(3):
            assert not isinstance(table.read(sleeper.pid, usage=False), str)
            table.forget_all_but({sleeper.pid})
        assert reads == [sleeper.pid] * 3 and not table._pidfds
        assert opened.count(f"/proc/{sleeper.pid}/stat") == 1  # its kept descriptor read again, not reopened
    finally:
        table.close()


def test_a_reading_without_host_usage_leaves_state_cpu_and_rss_unread_but_says_a_zombie(children, write_scenario,
                                                                                       monkeypatch):
    sleeper = children.start(["sleep", "600"])
    # exec done (read as itself), and a page of it resident (just after exec its RSS is 0)
    assert wait_for(lambda: cmdline(sleeper.pid) == b"sleep\x00600\x00" and _resident(sleeper.pid))
    data = minimal_scenario()
    data["processes"] += [{"pid": sleeper.pid, "source": "real", "gpus": {"0": "1GiB"}},
                          {"pid": 4999, "user": "bob", "command": "python defunct.py", "state": "zombie",
                           "gpus": {"1": "1GiB"}}]
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    machine = vramkit.open_machine(str(write_scenario(data)))
    try:
        full = {p.pid: p for p in machine.snapshot().processes}
        assert full[sleeper.pid].rss and full[sleeper.pid].state and full[sleeper.pid].cpu_percent is not None
        for _i in range(2):
            rows = {p.pid: p for p in machine.snapshot(usage_pids=set()).processes}
            row = rows[sleeper.pid]
            assert (row.state, row.cpu_percent, row.rss) == (None, None, None)
            assert (row.user, row.command, row.start_ticks) == (full[sleeper.pid].user, full[sleeper.pid].command,
                                                                full[sleeper.pid].start_ticks)
            assert rows[4999].zombie and rows[4999].state == "zombie"  # the idle rule leaves a zombie out
    finally:
        machine.close()


def test_a_reading_reads_the_usage_of_the_pids_it_names_only(children, write_scenario, monkeypatch):
    # The live view names the rows on screen: those show state, CPU and RSS; the others are not read.
    shown, hidden = children.start(["sleep", "600"]), children.start(["sleep", "600"])
    assert wait_for(lambda: cmdline(shown.pid) == cmdline(hidden.pid) == b"sleep\x00600\x00"
                    and _resident(shown.pid) and _resident(hidden.pid))
    data = minimal_scenario()
    data["processes"] += [{"pid": shown.pid, "source": "real", "gpus": {"0": "1GiB"}},
                          {"pid": hidden.pid, "source": "real", "gpus": {"1": "1GiB"}}]
    monkeypatch.setenv("VRAM_SIM_TIME", "0")
    collector = Collector(vramkit.open_machine(str(write_scenario(data))), interval=1)
    try:
        first = {p.pid: p for p in collector.sample().processes}  # new to the reading: read whole
        assert first[hidden.pid].rss and first[hidden.pid].cpu_percent is not None
        collector.usage_pids = {shown.pid}
        for _i in range(2):
            rows = {p.pid: p for p in collector.sample().processes}
            assert rows[shown.pid].rss and rows[shown.pid].state and rows[shown.pid].cpu_percent is not None
            assert (rows[hidden.pid].rss, rows[hidden.pid].state, rows[hidden.pid].cpu_percent) == (None, None, None)
            assert rows[hidden.pid].command == "sleep 600"
        collector.usage_pids = None
        rows = {p.pid: p for p in collector.sample().processes}
        assert rows[hidden.pid].rss and rows[hidden.pid].cpu_percent is not None
    finally:
        collector.close()


def test_a_new_process_s_cgroup_file_is_read_once(children, monkeypatch):
    # Its workload is parsed from the same read that is kept to see a move later, not from a second one.
    from vramkit.procs import table as table_module
    from vramkit.procs import workload

    sleeper = children.start(["sleep", "600"])
    reads: list[str] = []

    def counting(real):
        return lambda path, limit: (reads.append(path) if path.endswith("/cgroup") else None) or real(path, limit)
    monkeypatch.setattr(table_module, "read_proc_file", counting(table_module.read_proc_file))
    monkeypatch.setattr(workload, "read_proc_file", counting(workload.read_proc_file))
    table = procs.ProcessTable()
    try:
        assert not isinstance(table.read(sleeper.pid), str)
        assert reads == [f"/proc/{sleeper.pid}/cgroup"]
    finally:
        table.close()


def test_a_stat_line_that_differs_only_past_the_fields_read_is_the_last_read(children, monkeypatch):
    # The table keeps a stat line up to the exec mark (field 28), the last field it reads: a line
    # that differs after it (the CPU it last ran on, field 39) says nothing new, and is not parsed
    # again; one that differs in a field read, even by a digit added at the end of the exec mark,
    # is read anew.
    from vramkit.procs import ProcessTable

    sleeper = children.start(["sleep", "600"])
    assert wait_for(lambda: cmdline(sleeper.pid) == b"sleep\x00600\x00")
    with open(f"/proc/{sleeper.pid}/stat", "rb") as f:
        real = f.read()
    close = real.rfind(b")") + 2
    fields = real[close:].split(b" ")  # fields[0] is field 3 (the state)

    def line(**changed: bytes) -> bytes:
        edited = list(fields)
        for number, value in changed.items():
            edited[int(number[1:]) - 3] = value
        return real[:close] + b" ".join(edited)
    shown = [real]
    table = ProcessTable()
    monkeypatch.setattr(table.stats, "read", lambda pid, keep=True: shown[0])
    try:
        first = table.read(sleeper.pid)
        assert not isinstance(first, str) and first.command == "sleep 600"
        shown[0] = line(f39=b"%d" % (int(fields[36]) + 1))  # ran on another CPU since
        assert table.read(sleeper.pid) is first
        shown[0] = line(f39=b"%d" % (int(fields[36]) + 1), f28=fields[25] + b"1")  # an exec
        again = table.read(sleeper.pid)
        assert again is not first and (again.command, again.rss) == (first.command, first.rss)
        shown[0] = line(f24=b"%d" % (int(fields[21]) + 1), f28=fields[25] + b"1")
        grown = table.read(sleeper.pid)
        assert not isinstance(grown, str) and grown.rss == first.rss + os.sysconf("SC_PAGE_SIZE")
        assert table.read(sleeper.pid) is grown
    finally:
        table.close()


def test_processes_with_the_same_texts_keep_one_copy_of_each(children):
    # A job's workers share a name, a command line and a cgroup file: kept once, not once a process;
    # the copies of processes that ended are let go.
    from vramkit.procs import ProcessTable

    workers = [children.start(["sleep", "600"]) for _ in range(3)]
    assert wait_for(lambda: all(cmdline(w.pid) == b"sleep\x00600\x00" for w in workers))
    table = ProcessTable()
    try:
        hosts = [table.read(w.pid) for w in workers]
        assert all(not isinstance(h, str) for h in hosts)
        kept = [table._known[w.pid] for w in workers]
        for part in ("comm", "name", "command", "cgroup"):
            assert len({id(getattr(k, part)) for k in kept}) == 1, part
        workers[0].kill()
        workers[0].wait()
        table.forget_all_but({w.pid for w in workers[1:]})
        assert table._shared_text == {"sleep": "sleep", "sleep 600": "sleep 600"}
        table.forget_all_but(set())  # what processes that ended kept goes with them
        assert not table._shared_text and not table._shared_bytes
    finally:
        table.close()


def test_a_process_read_anew_keeps_its_start_ticks_object(children, monkeypatch):
    # A process's start ticks are kept by every consumer of its rows (alerts, CPU %, the recorder):
    # a line parsed again (its workload's check, new figures) hands on the number kept, not a copy.
    from vramkit.procs import table as table_module

    sleeper = children.start(["sleep", "600"])
    assert wait_for(lambda: cmdline(sleeper.pid) == b"sleep\x00600\x00")
    later = [0.0]
    monkeypatch.setattr(table_module, "monotonic", lambda: time.monotonic() + later[0])
    table = procs.ProcessTable()
    try:
        first = table.read(sleeper.pid)
        later[0] = table_module.WORKLOAD_RECHECK_S  # its check: read whole again
        again = table.read(sleeper.pid)
        assert not isinstance(first, str) and not isinstance(again, str) and again is not first
        assert again.start_ticks == first.start_ticks and again.start_ticks is first.start_ticks
    finally:
        table.close()
