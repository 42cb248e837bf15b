"""scripts/install-system.sh (issue 31 item 4): the system-wide install, into a temporary root
(--destdir): the virtualenv under /opt/vramkit, /usr/local/bin/vram, both units, the tmpfiles.d
snippet for the root-owned lease directory, /etc/vramkit. Offline: vramkit comes from a wheel
built here, its dependencies are not installed (--pip-args '--no-deps --no-index')."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-system.sh"
pytestmark = pytest.mark.slow  # builds a wheel and a virtualenv


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """One wheel for the run. pip builds it in the checkout's build/, where two builds at once collide
    ("File exists: build/bdist...", "could not delete build/lib/..."): under xdist the workers take
    turns under a lock in the run's temporary directory (their base directories' parent), and the
    first one's wheel serves the others."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    out = shared / "vramkit-wheel"
    with open(shared / "vramkit-wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = sorted(out.glob("vramkit-*.whl"))
        if built:
            return built[0]
        out.mkdir(exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                               "--no-index", "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.skip(f"cannot build a wheel of vramkit here: {done.stderr.strip()[-300:]}")
    return next(out.glob("vramkit-*.whl"))


def install(dest: Path, wheel: Path, *more: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(SCRIPT), "--destdir", str(dest), "--from", str(wheel),
                           "--pip-args", "--no-deps --no-index", "--python", sys.executable, *more],
                          capture_output=True, text=True, timeout=300)


def test_an_install_into_a_temporary_root_puts_every_file_in_place(tmp_path, wheel):
    dest = tmp_path / "root"
    done = install(dest, wheel)
    assert done.returncode == 0, done.stderr
    venv = dest / "opt" / "vramkit"
    assert (venv / "pyvenv.cfg").is_file() and (venv / "INSTALLED").is_file()
    # The scripts name the place the venv will run from, not the temporary root.
    assert (venv / "bin" / "vram").read_text().splitlines()[0] == "#!/opt/vramkit/bin/python"
    link = dest / "usr" / "local" / "bin" / "vram"
    assert link.is_symlink() and os.readlink(link) == "/opt/vramkit/bin/vram"
    ok = subprocess.run([str(venv / "bin" / "python"), "-c", "import vramkit, sys; print(vramkit.__file__)"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and str(venv) in ok.stdout, ok.stderr
    units = dest / "etc" / "systemd" / "system"
    for unit in ("vram-record.service", "vram-serve.service"):
        assert (units / unit).read_text() == (ROOT / "contrib" / "systemd" / unit).read_text()
        assert oct((units / unit).stat().st_mode & 0o777) == "0o644"
    assert not (units / "vram-record.service.d" / "reclaim.conf").exists()
    tmpfiles = (dest / "etc" / "tmpfiles.d" / "vramkit.conf").read_text()
    assert "d /tmp/vramkit-leases 1777 root root -" in tmpfiles
    assert (dest / "etc" / "vramkit" / "serve.env").read_text().count("VRAM_SERVE_OPTIONS=") == 2
    assert "not started" in done.stdout


def test_options_reclaim_and_bindir_and_etc_is_never_overwritten(tmp_path, wheel):
    dest = tmp_path / "root"
    (dest / "etc" / "vramkit").mkdir(parents=True)
    (dest / "etc" / "vramkit" / "serve.env").write_text("VRAM_SERVE_OPTIONS=--listen 0.0.0.0:9787\n")
    done = install(dest, wheel, "--reclaim", "--bindir", "/usr/bin", "--prefix", "/opt/vk")
    assert done.returncode == 0, done.stderr
    units = dest / "etc" / "systemd" / "system"
    assert "ExecStart=/usr/bin/vram record --quiet" in (units / "vram-record.service").read_text()
    assert "ExecStart=/usr/bin/vram serve" in (units / "vram-serve.service").read_text()
    assert "CapabilityBoundingSet=CAP_KILL" in (units / "vram-record.service.d" / "reclaim.conf").read_text()
    assert os.readlink(dest / "usr" / "bin" / "vram") == "/opt/vk/bin/vram"
    assert (dest / "etc" / "vramkit" / "serve.env").read_text() == "VRAM_SERVE_OPTIONS=--listen 0.0.0.0:9787\n"
    # Run again without --reclaim: the drop-in goes.
    assert install(dest, wheel, "--bindir", "/usr/bin", "--prefix", "/opt/vk").returncode == 0
    assert not (units / "vram-record.service.d" / "reclaim.conf").exists()


@pytest.mark.parametrize("args, message", [
    (["--prefix", "opt/vramkit"], "--prefix must be an absolute path"),
    (["--extras", "serve;rm -rf /"], "--extras: a comma-separated list"),
    (["--bogus"], "unknown option --bogus"),
])
def test_bad_options_are_one_line_and_exit_2(tmp_path, args, message):
    done = subprocess.run(["sh", str(SCRIPT), "--destdir", str(tmp_path), *args], capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "opt").exists()
