"""Red team, third wave: a hostile neighbour and a hostile network peer against what names a
process's owner (procs/workload.py), the device-file holders a container's pids are mapped
through (holders.py, pidmap.py) and `vram fleet --hosts` (fleet_hosts.py). Each test performs the
attack with real processes, files and servers. (The kubelet's: test_redteam_wave3_kubelet.py.)"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_one_line_error, clean_env, real_gpu_scenario, run_vram, start_sleeper, wait_for
from test_fleet_hosts import FakeHost, send, snapshot
from test_holders import HOLD, holder
from test_workload import ID, _move, cgroup_dirs  # noqa: F401 - cgroup_dirs is a fixture

from vramkit.procs.workload import RuntimeNames, describe, from_text

# ---------------------------------------------------------------- a rootless container borrowing root's name

ROOTLESS = f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container\n"


def _roots_podman(root) -> None:
    """Root's podman list, naming root's container ID 'prod-db'."""
    state = root / "var/lib/containers/storage/overlay-containers"
    state.mkdir(parents=True)
    (state / "containers.json").write_text(json.dumps([{"id": ID, "names": ["prod-db"], "image": "postgres:16"}]))


def test_a_rootless_container_named_with_roots_container_id_does_not_get_its_name(tmp_path):
    # A user names a cgroup under their own systemd libpod-<id of root's container>.scope: the id is
    # theirs to choose, so root's list must not name it.
    _roots_podman(tmp_path)
    found = from_text(ROOTLESS, RuntimeNames(str(tmp_path)))
    assert found is not None and not isinstance(found, str)
    assert (found.runtime, found.container_id, found.container_name, found.image) == ("podman", ID, None, None)
    assert describe(found) == f"podman container {ID[:12]}"
    # Root's own container of that id is still named.
    rootful = from_text(f"0::/machine.slice/libpod-{ID}.scope/container\n", RuntimeNames(str(tmp_path)))
    assert rootful is not None and not isinstance(rootful, str) and rootful.container_name == "prod-db"


def test_a_real_process_in_a_users_libpod_scope_is_not_shown_as_roots_container(children, cgroup_dirs,  # noqa: F811
                                                                                 tmp_path, write_scenario):
    sleeper = start_sleeper(children)
    _move(sleeper.pid, cgroup_dirs(f"user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"))
    _roots_podman(tmp_path)
    path = str(write_scenario(real_gpu_scenario({sleeper.pid: {"0": "1GiB"}})))
    env = clean_env(VRAM_STATE_ROOT=str(tmp_path), COLUMNS="200")
    [row] = run_vram("ps", "--json", "--simulate", path, env=env).json()["processes"]
    assert row["workload"]["container_id"] == ID and row["workload"]["container_name"] is None
    shown = run_vram("ps", "--simulate", path, "--container", "prod-db", env=env)
    assert shown.rc == 0 and f" {sleeper.pid} " not in shown.out


# ---------------------------------------------------------------- a Slurm array task by the environment's word

def test_a_job_claiming_another_arrays_task_in_its_environment_still_shows_its_own_job(children, cgroup_dirs,  # noqa: F811
                                                                                       write_scenario):
    # Job 500's process says it is task 3 of array 48200 (someone else's): it sets its environment itself.
    claim = {"SLURM_ARRAY_JOB_ID": "48200", "SLURM_ARRAY_TASK_ID": "3"}
    liar = children.start(["sleep", "600"], env={**os.environ, **claim, "SLURM_JOB_ID": "500"})
    stale = children.start(["sleep", "600"], env={**os.environ, **claim, "SLURM_JOB_ID": "400"})
    for proc, job in ((liar, 500), (stale, 501)):
        assert wait_for(lambda p=proc: Path(f"/proc/{p.pid}/cmdline").read_bytes() == b"sleep\x00600\x00")
        _move(proc.pid, cgroup_dirs(f"system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0"))
    path = str(write_scenario(real_gpu_scenario({liar.pid: {"0": "1GiB"}, stale.pid: {"1": "1GiB"}})))
    shown = run_vram("ps", "--simulate", path, env=clean_env(COLUMNS="200"))
    [row] = [line for line in shown.out.splitlines() if f" {liar.pid} " in line]
    assert "slurm 500.0" in row and "48200" not in row
    rows = {p["pid"]: p["workload"] for p in run_vram("ps", "--json", "--simulate", path).json()["processes"]}
    assert (rows[liar.pid]["slurm_job"], rows[liar.pid]["slurm_array_job"]) == (500, 48200)
    # Variables inherited from another job (SLURM_JOB_ID not this one's) are not believed at all.
    assert (rows[stale.pid]["slurm_job"], rows[stale.pid]["slurm_array_job"]) == (501, None)


# ---------------------------------------------------------------- a device file of one's own at the node's path

def test_a_file_of_its_own_at_a_device_nodes_path_is_not_holding_the_gpu(children, write_scenario, tmp_path):
    # In a mount namespace of its own (unshare -rm: no privilege needed where user namespaces are
    # allowed), a tmpfs over the directory of the nodes and a file named nvidia1 there: the link in
    # /proc/PID/fd reads exactly as the real node's path.
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        (dev / name).write_text("")
    fake = subprocess.Popen(
        ["unshare", "-rm", "sh", "-c", f'mount -t tmpfs none "{dev}" && : > "{dev}/nvidia1" && '
                                       f'exec "{sys.executable}" -c "$0" "{dev}/nvidia1"', HOLD],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    children.procs.append(fake)
    if fake.stdout.readline().strip() != b"ready":
        pytest.skip(f"cannot make a mount namespace here: {fake.stderr.read().decode(errors='replace')[:200]}")
    links = {os.readlink(f"/proc/{fake.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{fake.pid}/fd")}
    assert str(dev / "nvidia1") in links  # what /proc shows of its file: the real node's path
    real = holder(children, dev / "nvidia0")
    path = write_scenario(real_gpu_scenario({}, device_nodes=f"{dev}/nvidia*"))
    data = run_vram("ps", "--simulate", str(path), "--holders", "--json", env=clean_env(COLUMNS="200")).json()
    assert {h["pid"]: h["gpus"] for h in data["holders"]} == {real.pid: [0]}


def test_a_gpu_given_under_another_gpus_name_is_held_as_itself(children, write_scenario, tmp_path):
    # A container given the host's GPU 1 as its own /dev/nvidia0 (docker --device A:B): its link
    # reads .../nvidia0, the file it holds is GPU 1's node.
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        (dev / name).write_text("")
    remapped = subprocess.Popen(
        ["unshare", "-rm", "sh", "-c", f'mount --bind "{dev}/nvidia1" "{dev}/nvidia0" && '
                                       f'exec "{sys.executable}" -c "$0" "{dev}/nvidia0"', HOLD],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    children.procs.append(remapped)
    if remapped.stdout.readline().strip() != b"ready":
        pytest.skip(f"cannot make a mount namespace here: {remapped.stderr.read().decode(errors='replace')[:200]}")
    path = write_scenario(real_gpu_scenario({}, device_nodes=f"{dev}/nvidia*"))
    data = run_vram("ps", "--simulate", str(path), "--holders", "--json", env=clean_env(COLUMNS="200")).json()
    [held] = [h for h in data["holders"] if h["pid"] == remapped.pid]
    assert held["gpus"] == [1] and held["devices"] == [str(dev / "nvidia1")]


# ---------------------------------------------------------------- basic auth over plain HTTP

def test_basic_auth_is_not_sent_in_clear_to_a_host_given_without_a_scheme(tmp_path):
    host = FakeHost(lambda h: send(h, snapshot()))
    try:
        config = tmp_path / "fleet.yml"
        config.write_text("basic_auth: {username: alice, password: s3cret}\n")
        refused = run_vram("fleet", "--hosts", host.address, "--hosts-config", str(config), env=clean_env())
        assert_one_line_error(refused, 2, "basic auth password would go in clear text over plain HTTP",
                              f"https://{host.address}")
        assert host.requests == []
        # Asked for in so many words, it is sent.
        sent = run_vram("fleet", "--hosts", f"http://{host.address}", "--hosts-config", str(config),
                        env=clean_env())
        assert sent.rc == 0, sent.err
        assert [r["Authorization"] for r in host.requests] == ["Basic YWxpY2U6czNjcmV0"]
    finally:
        host.close()


# ---------------------------------------------------------------- a certificate from a CA other than ca_file's

def test_a_ca_file_is_the_only_ca_a_host_certificate_may_come_from(served, tmp_path):
    # A network peer holding a certificate for the host's name (or address) from a CA the system
    # trusts, where the config names the fleet's own CA: as in Prometheus, only ca_file counts.
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    from test_serve_webconfig import make_cert

    peer_cert, peer_key = make_cert(tmp_path, "peer")
    fleet_ca, _ = make_cert(tmp_path, "fleet-ca")
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config: {{cert_file: {peer_cert}, key_file: {peer_key}}}\n")
    peer = served("--simulate", "demo", "--web-config", str(web),
                  context=ssl.create_default_context(cafile=str(peer_cert)))
    address = f"https://127.0.0.1:{peer.port}"
    system = clean_env(SSL_CERT_FILE=str(peer_cert), SSL_CERT_DIR=str(tmp_path / "none"))  # the system trusts it
    assert run_vram("fleet", "--hosts", address, env=system).rc == 0
    config = tmp_path / "fleet.yml"
    config.write_text(f"tls_config: {{ca_file: {fleet_ca.name}}}\n")
    pinned = run_vram("fleet", "--hosts", address, "--hosts-config", str(config), env=system)
    assert pinned.rc == 1 and "CERTIFICATE_VERIFY_FAILED" in pinned.out


def test_an_empty_ca_file_is_refused_not_read_as_the_systems_cas(tmp_path):
    (tmp_path / "empty.crt").write_text("")
    config = tmp_path / "fleet.yml"
    config.write_text("tls_config: {ca_file: empty.crt}\n")
    result = run_vram("fleet", "--hosts", "https://127.0.0.1:1", "--hosts-config", str(config), env=clean_env())
    assert_one_line_error(result, 2, "tls_config.ca_file: not a certificate: the file is empty")


# ---------------------------------------------------------------- a line of its own with a digit that is not ASCII

@pytest.mark.parametrize("digit", ["\u00b2", "\u0660", "\u0663"])
def test_a_made_up_hierarchy_line_numbered_in_other_digits_is_refused(digit):
    # Where the kernel lets a cgroup name hold a newline, the rest of the name is a line of its own:
    # '²' crashed the reading (isdigit() but not int()), and '٠' sorted as hierarchy 0 ahead of
    # the kernel's own lines on a cgroup v1 host, past the check that no hierarchy is listed twice.
    text = f"4:memory:/user.slice/x\n{digit}::/docker/{ID}\n3:cpu:/\n"
    found = from_text(text)
    assert isinstance(found, str) and "its cgroup cannot be read as the kernel's" in found


# ---------------------------------------------------------------- a redirect to ftp://

def test_a_prometheus_redirecting_to_ftp_is_not_followed_there():
    # urllib follows a redirect to ftp://, on a connection the one deadline's watch does not see:
    # an FTP server trickling its welcome a byte at a time kept vram waiting long past --timeout.
    ftp = socket.socket()
    ftp.bind(("127.0.0.1", 0))
    ftp.listen(4)
    ftp.settimeout(0)
    host = FakeHost(lambda h: send(h, b"", status=302, Location=f"ftp://127.0.0.1:{ftp.getsockname()[1]}/q"))
    try:
        result = run_vram("fleet", "--prometheus", f"http://{host.address}", env=clean_env())
        with pytest.raises(BlockingIOError):
            ftp.accept()  # nobody connected
        assert result.rc == 1 and "redirected (302) to an address that is not http or https" in result.err
        assert len(result.err_lines) == 1
    finally:
        host.close()
        ftp.close()


# ---------------------------------------------------------------- a host passing for another

def _gpu(free_gib: int) -> dict:
    return {"index": 0, "uuid": "GPU-x", "name": "A100-SXM4-80GB", "memory_total": 80 * 2**30,
            "memory_used": (80 - free_gib) * 2**30, "memory_free": free_gib * 2**30, "utilization": 0,
            "processes": []}


@pytest.mark.parametrize("claim", ["gpu-a", "localhost"])
def test_a_host_saying_it_is_another_host_of_the_list_is_shown_by_its_address(claim):
    # gpu-a is busy; the hostile host says it is gpu-a (or the name typed for gpu-a) with a GPU to
    # spare: fleet pick must not say 'on gpu-a'.
    real = FakeHost(lambda h: send(h, snapshot(_gpu(2), hostname="gpu-a")))
    liar = FakeHost(lambda h: send(h, snapshot(_gpu(78), hostname=claim)))
    try:
        real_address = "localhost:" + real.address.rsplit(":", 1)[1]
        hosts = f"{real_address},{liar.address}"
        picked = run_vram("fleet", "pick", "--hosts", hosts, "--min-free", "40GiB", "--json", env=clean_env()).json()
        assert picked["host"] == picked["instance"] == liar.address
        doc = run_vram("fleet", "--hosts", hosts, "--json", env=clean_env()).json()
        shown = {h["instance"]: h["host"] for h in doc["hosts"]}
        assert shown[liar.address] == liar.address and list(shown.values()).count(claim) <= 1
    finally:
        real.close()
        liar.close()


# ---------------------------------------------------------------- a state root another user handed in

def _docker_config(root, name: str):
    directory = root / "var/lib/docker/containers" / ID
    directory.mkdir(parents=True)
    (directory / "config.v2.json").write_text(json.dumps({"Name": f"/{name}", "Config": {"Image": "x"}}))
    return directory


def test_container_names_are_not_read_from_a_state_another_user_may_write(tmp_path, write_scenario, children,
                                                                          cgroup_dirs):  # noqa: F811
    # root's vram run with an environment a user handed it (VRAM_STATE_ROOT=their directory): the
    # user's files must not name root's containers.
    sleeper = start_sleeper(children)
    _move(sleeper.pid, cgroup_dirs(f"system.slice/docker-{ID}.scope"))
    directory = _docker_config(tmp_path, "payroll-db")
    path = str(write_scenario(real_gpu_scenario({sleeper.pid: {"0": "1GiB"}})))
    env = clean_env(VRAM_STATE_ROOT=str(tmp_path), COLUMNS="200")

    def shown() -> tuple[str | None, str]:
        result = run_vram("ps", "--json", "--simulate", path, env=env).json()
        [row] = result["processes"]
        return row["workload"]["container_name"], row["workload"]["note"] or ""
    assert shown()[0] == "payroll-db"  # root's own state: named
    directory.chmod(0o777)  # anyone could have written it
    name, notes = shown()
    assert name is None and f"{ID} may be changed by any user" in notes
    directory.chmod(0o700)
    os.chown(directory / "config.v2.json", 65534, 65534)  # another user's file
    name, notes = shown()
    assert name is None and "config.v2.json belongs to uid 65534, not to root or you" in notes
