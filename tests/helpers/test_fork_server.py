"""The pre-imported runner of command lines (fork_server.py, fork_client.py, fork_runner.py): a
command run through it behaves as in a fresh interpreter (folder, environment, files, exit codes, signals),
and it hands a command to a real interpreter when a fork could not be faithful."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers.fork_runner import ForkServer

PROBE = """
import os, sys, time

def main():
    print("argv", sys.argv[1:], "cwd", os.getcwd(), "X", os.environ.get("X"),
          "path0", sys.path[0] == os.getcwd(), "ppid", os.getppid(), "name", __name__)
    print("to stderr", file=sys.stderr)
    if "read" in sys.argv:
        print("stdin:", sys.stdin.read().strip())
    if "exit3" in sys.argv:
        sys.exit(3)
    if "boom" in sys.argv:
        raise ValueError("boom")
    if "sleep" in sys.argv:
        print("sleeping", flush=True)
        time.sleep(60)

if __name__ == "__main__":
    main()
"""


@pytest.fixture(scope="module")
def probe_server(tmp_path_factory):
    """A server that routes `python -m probe*` and has `probe_loaded` and `probe_pkg` (not its
    __main__) imported already."""
    mods = tmp_path_factory.mktemp("mods")
    (mods / "probe_job.py").write_text(PROBE)
    (mods / "probe_loaded.py").write_text(PROBE)
    (mods / "probe_lib.py").write_text("")
    (mods / "probe_pkg").mkdir()  # a package: imported, but not its __main__
    (mods / "probe_pkg" / "__init__.py").write_text("")
    (mods / "probe_pkg" / "__main__.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(mods), "OMP_NUM_THREADS": "1"}
    server = ForkServer(env, prefix="probe", modules=["probe_loaded", "probe_pkg", "probe_lib"])
    server.wait_ready(timeout=120)
    yield server
    server.stop()


def _bash(server: ForkServer, script: str, cwd: Path, shim: bool = True, **env):
    env = {**server.env, "X": "y", **env, "PATH": server.path(os.environ["PATH"], shim)}
    return subprocess.run(
        ["bash", "-c", textwrap.dedent(script)], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


def test_a_forked_command_is_like_a_fresh_one(probe_server, tmp_path):
    server_pid = str(probe_server.proc.pid)
    asked = len(probe_server.requests())
    proc = _bash(
        probe_server,
        """
        python -m probe_job a "b c" > out.txt 2> err.txt; echo "rc=$?"
        echo hello | python -m probe_job read exit3 >> out.txt; echo "rc=$?"
        python -m probe_job boom > /dev/null 2> boom.txt || echo "rc=$?"
        python -m probe_nosuch || echo "rc=$?"
        """,
        tmp_path,
    )
    assert proc.stdout.splitlines() == ["rc=0", "rc=3", "rc=1", "rc=1"], proc.stderr
    out = (tmp_path / "out.txt").read_text().splitlines()
    assert out[0] == (
        f"argv ['a', 'b c'] cwd {tmp_path} X y path0 True ppid {server_pid} name __main__"
    )
    assert out[1].startswith("argv ['read', 'exit3']") and out[2] == "stdin: hello"
    assert (tmp_path / "err.txt").read_text() == "to stderr\n"
    boom = (tmp_path / "boom.txt").read_text()
    assert "Traceback" in boom and boom.endswith("ValueError: boom\n")
    assert f"{probe_server.python}: No module named probe_nosuch" in proc.stderr
    assert [line.split(" | ")[0] for line in probe_server.requests()[asked:]] == ["fork"] * 4


def test_a_package_already_imported_runs_its_main_forked(probe_server, tmp_path):
    proc = probe_server.run(["-m", "probe_pkg", "x"], tmp_path, probe_server.env, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("argv ['x']")
    assert f"ppid {probe_server.proc.pid} name __main__" in proc.stdout
    assert probe_server.requests()[-1].startswith("fork | ")


def test_signals_reach_the_command(probe_server, tmp_path):
    proc = _bash(
        probe_server,
        """
        python -m probe_job sleep > a.txt & P=$!
        until grep -q sleeping a.txt 2> /dev/null; do sleep 0.1; done
        kill $P; wait $P || echo "killed rc=$?"
        timeout 1 python -m probe_job sleep > /dev/null || echo "timeout rc=$?"
        """,
        tmp_path,
    )
    assert proc.stdout.splitlines() == ["killed rc=143", "timeout rc=124"], proc.stderr


@pytest.mark.parametrize(
    ("command", "env", "logged"),
    [
        # imported in the server: it would run twice
        ("python -m probe_loaded", {}, "fresh: probe_loaded is imported in the server"),
        # read when torch loads
        (
            "python -m probe_job",
            {"OMP_NUM_THREADS": "2"},
            "fresh: import-time environment variables differ: OMP_NUM_THREADS",
        ),
        # not `python -m probe*`: the shim runs it without asking
        (
            'python -c \'import runpy; runpy.run_module("probe_job", run_name="__main__")\'',
            {},
            None,
        ),
        ("python -u -m probe_job", {}, None),  # an interpreter flag
    ],
)
def test_a_real_interpreter_where_a_fork_would_differ(probe_server, tmp_path, command, env, logged):
    asked = len(probe_server.requests())
    proc = _bash(probe_server, command, tmp_path, **env)
    assert proc.returncode == 0, proc.stderr
    assert "argv" in proc.stdout and f"ppid {probe_server.proc.pid} " not in proc.stdout
    new = [line.split(" | ")[0] for line in probe_server.requests()[asked:]]
    assert new == ([logged] if logged else [])


def test_an_edited_source_means_a_fresh_interpreter(probe_server, tmp_path):
    """The server's copy of a module edited since it started is stale: fresh, naming the file."""
    lib = Path(probe_server.env["PYTHONPATH"]) / "probe_lib.py"
    before = lib.stat()
    os.utime(lib, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    try:
        proc = probe_server.run(["-m", "probe_job"], tmp_path, probe_server.env, timeout=60)
    finally:
        os.utime(lib, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert proc.returncode == 0 and f"ppid {probe_server.proc.pid} " not in proc.stdout
    assert probe_server.requests()[-1].startswith(f"fresh: edited since the server started: {lib}")


def test_a_fresh_block_gets_no_shim(probe_server, tmp_path):
    proc = _bash(probe_server, "python -m probe_job", tmp_path, shim=False)
    assert proc.returncode == 0 and f"ppid {probe_server.proc.pid} " not in proc.stdout


def test_run_captures_like_subprocess_run(probe_server, tmp_path):
    env = {**probe_server.env, "X": "z"}
    forked = probe_server.run(["-m", "probe_job", "exit3"], tmp_path, env, timeout=60)
    assert (forked.returncode, forked.stderr) == (3, "to stderr\n")
    assert f"X z path0 True ppid {probe_server.proc.pid} " in forked.stdout
    fresh = probe_server.run(["-m", "probe_loaded", "boom"], tmp_path, env, 60, merge_stderr=True)
    assert fresh.returncode == 1 and fresh.stderr is None
    assert "to stderr" in fresh.stdout and fresh.stdout.endswith("ValueError: boom\n")
    assert f"ppid {probe_server.proc.pid} " not in fresh.stdout
    slow = probe_server.run(["-m", "probe_job", "sleep"], tmp_path, env, timeout=1)
    assert slow.returncode == -9 and "sleeping" in slow.stdout


def test_popen_gives_the_forked_childs_pid_to_kill_and_its_exit(probe_server, tmp_path):
    env = {**probe_server.env, "X": "w"}
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        done = probe_server.popen(["-m", "probe_job", "exit3"], tmp_path, env, stdout, stderr)
        assert done.wait(timeout=60) == 3 and done.poll() == 3
        done.kill()  # ended: nothing to kill, nothing else hit
        slow = probe_server.popen(["-m", "probe_job", "sleep"], tmp_path, env, stdout, stderr)
        deadline = time.monotonic() + 60
        while "sleeping" not in out.read_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert slow.poll() is None and slow.pid != probe_server.proc.pid
        slow.kill()  # SIGKILL through the server, to its child: the server lives on
        assert slow.wait(timeout=60) == -9
    assert probe_server.proc.poll() is None  # the server lives on
    assert err.read_text() == "to stderr\n" * 2 and "X w path0 True" in out.read_text()


def test_a_signal_for_a_command_that_has_just_ended_leaves_the_server_serving(
    probe_server, tmp_path
):
    """The command ends and its caller forwards a signal before the server looks, so one
    select() returns both: the server reaps the command, answers its exit and drops the late
    signal. (It used to look the reaped command up again and die of a KeyError; every later
    command then ran in a fresh interpreter, and the server's own tests failed.) The server is
    stopped while both happen, so the order is fixed: epoll lists the exit first."""
    env = {**probe_server.env, "X": "w"}
    server = probe_server.proc.pid
    with open(tmp_path / "out", "w") as stdout, open(tmp_path / "err", "w") as stderr:
        slow = probe_server.popen(["-m", "probe_job", "sleep"], tmp_path, env, stdout, stderr)
        deadline = time.monotonic() + 60
        while "sleeping" not in (tmp_path / "out").read_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(server, signal.SIGSTOP)
        try:
            os.kill(slow.pid, signal.SIGTERM)  # the server's unreaped child: its pid is its own
            while _state(slow.pid) != "Z" and time.monotonic() < deadline:
                time.sleep(0.01)
            assert _state(slow.pid) == "Z"
            slow.kill()  # "K 9", after the exit
        finally:
            os.kill(server, signal.SIGCONT)
        assert slow.wait(timeout=60) == -signal.SIGTERM
    assert probe_server.proc.poll() is None
    after = probe_server.run(["-m", "probe_job"], tmp_path, env, timeout=60)
    assert f"ppid {server} " in after.stdout  # still forked by the server


def test_stopping_a_server_that_had_died_is_an_error(tmp_path):
    """A dead server sends every later command to a fresh interpreter: slower, and silent unless
    its end of session says so."""
    server = ForkServer(dict(os.environ), prefix="probe", modules=[])
    server.wait_ready(timeout=60)
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=60)
    folder = server.dir
    with pytest.raises(RuntimeError, match=r"the fork server had died \(exit code -9\)"):
        server.stop()
    assert not folder.exists()  # its socket and shim are gone all the same


def _state(pid: int) -> str:
    """The process state letter from /proc (Z: ended, not yet reaped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


TORCH_IN_CHILD = """
import sys, torch
torch.set_num_threads(2)
x = torch.randn(256, 256)
print(len(set(sys.modules) & {"pytorch_lightning", "hydra", "lightning_cls.module"}),
      torch.get_num_threads(), (x @ x).shape[0], torch.initial_seed())
"""


@pytest.mark.slow  # the suite's server: ~10 s of imports unless a docs page started it already
def test_the_suite_server_forks_from_one_thread(fork_server, fork_env, tmp_path):
    """The pre-imported server has one thread (nothing to deadlock a child), and its children
    run torch's intra-op pool and draw their own seeds, as fresh interpreters do."""
    assert fork_server.threads == 1
    script = tmp_path / "child.py"
    script.write_text(TORCH_IN_CHILD)
    runs = [fork_server.run([str(script)], tmp_path, fork_env, timeout=120) for _ in range(2)]
    assert [run.returncode for run in runs] == [0, 0], runs[0].stderr
    lines = [run.stdout.split() for run in runs]
    assert lines[0][:3] == ["3", "2", "256"] == lines[1][:3]
    assert lines[0][3] != lines[1][3]
    assert [line.split(" | ")[0] for line in fork_server.requests()[-2:]] == ["fork", "fork"]


def test_the_server_ends_with_the_process_that_started_it(tmp_path):
    """A test process that dies (a crashed xdist worker) leaves no server holding memory."""
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from fork_runner import ForkServer
        server = ForkServer(dict(os.environ), prefix="probe", modules=[])
        server.wait_ready(timeout=60)
        print(server.proc.pid, server.dir, flush=True)
        os._exit(0)  # no stop()
    """)
    started = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=90
    )
    pid, folder = started.stdout.split()
    pid = int(pid)
    deadline = time.monotonic() + 20
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    shutil.rmtree(folder)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False
