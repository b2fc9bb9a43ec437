"""Check the worker's sandbox on a GPU machine: one line per check.

    python tools/sandbox_gpu_check.py        (from the repository root, in the grading env)

What it checks, in the sandbox this machine picks for gpu=True (grader/harness/sandbox.py):
CUDA initialises and Triton compiles in the jail; GPU memory the harness owns is
written from inside, by the student user, through a descriptor sent over a Unix
socket (grader/worker/vmm.py); whether CUDA survives a network namespace and an RLIMIT_DATA
limit (two choices the sandbox leaves off until this says they work); that
kill() gives back the GPU memory of every process the child started; the GPU
lock; and the time the sandbox adds to starting a worker.
Exit status: 0 if every required check passed.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.harness import gpulock, sandbox  # noqa: E402
from grader.harness.session import libcuda_dir  # noqa: E402

PASS_ENV = ("PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
            "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH", "NVIDIA_VISIBLE_DEVICES", "LANG", "LC_ALL")
failures = 0


def line(status: str, name: str, detail: str = "") -> None:
    global failures
    failures += status == "FAIL"
    detail = " ".join(detail.split())[-400:]
    print(f"{status:4} {name}{': ' + detail if detail else ''}", flush=True)


def env_for(scratch: Path) -> dict:
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    env.update(PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
               TRITON_CACHE_DIR=str(scratch / "triton-cache"))
    if "TRITON_LIBCUDA_PATH" not in env and libcuda_dir():    # as the worker's (session.py)
        env["TRITON_LIBCUDA_PATH"] = libcuda_dir()
    return env


def run(code: str, *args: str, prefix=(), timeout=300, b=None, **jail_kw):
    """Run ``code`` as a script in a fresh gpu=True jail; (returncode, output, seconds)."""
    top = sandbox.task_dir("gpucheck-")
    scratch, stage = top / "scratch", top / "stage"
    scratch.mkdir()
    scratch.chmod(0o777)                  # the child may run as the student user
    stage.mkdir()                         # read-only in the jail; scratch is a fresh tmpfs there
    stage.chmod(0o755)
    script = stage / "check.py"           # a file, not -c: Triton's jit reads the source
    script.write_text(textwrap.dedent(code))
    script.chmod(0o644)
    try:
        jail = sandbox.Jail(scratch=scratch, readonly=[stage], env=env_for(scratch), gpu=True, **jail_kw)
        t0 = time.monotonic()
        p = sandbox.spawn([*prefix, sys.executable, str(script), *args], jail,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, backend_=b)
        out = p._proc.stdout.read().decode("utf-8", "replace")
        rc = p.wait(timeout)
        if rc is None:
            p.kill()
            rc = p.wait()
        return rc, out, time.monotonic() - t0
    finally:
        subprocess.run(["rm", "-rf", str(top)])


CUDA_INIT = """
    import torch
    torch.cuda.init()
    x = torch.ones(1024, device="cuda") * 2
    print("OK", torch.cuda.get_device_name(), float(x.sum()))
"""
TRITON = """
    import torch, triton, triton.language as tl
    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)
    x = torch.zeros(1000, device="cuda")
    add_one[(4,)](x, 1000, BLOCK=256)
    torch.cuda.synchronize()
    print("OK", float(x.sum()))
"""
VMM_CHILD = """
    import os, socket, sys, types, torch
    vmm = types.ModuleType("vmm")      # the module's source comes as an argument: the student
    exec(sys.argv[2], vmm.__dict__)    # user may not be able to read this checkout
    t = vmm.receive(socket.socket(fileno=int(sys.argv[1])), 4096 * 4).view(torch.float32)
    t.fill_(7)
    torch.cuda.synchronize()
    print("OK uid", os.getuid(), float(t.sum()))
"""
HOG = """
    import os, subprocess, sys, time, torch
    a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    hog = "import torch, time; b = torch.empty(2 << 30, dtype=torch.uint8, device='cuda'); time.sleep(300)"
    subprocess.Popen([sys.executable, "-c", hog], start_new_session=True)
    if os.fork() == 0:
        os.setsid()
        os.execv(sys.executable, [sys.executable, "-c", hog])
    print("READY", flush=True)
    time.sleep(300)
"""


def main() -> int:
    import torch
    if not torch.cuda.is_available():
        print("FAIL no CUDA GPU visible to this process")
        return 1
    b = sandbox.backend(gpu=True)
    line("INFO", "backend", b.summary())
    line("INFO", "device", f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
         f"euid {os.geteuid()}")

    rc, out, _ = run(CUDA_INIT)
    line("PASS" if rc == 0 and "OK" in out else "FAIL", "CUDA initialises in the jail", out)
    rc, out, _ = run(TRITON)
    line("PASS" if rc == 0 and "OK 1000.0" in out else "FAIL",
         "Triton compiles and runs in the jail (cache in scratch)", out)

    # Harness-owned GPU memory, written by the worker (another user where the backend switches).
    import socket

    from grader.worker import vmm
    for variant, bk in (("", None), (" (backend none)", _try_backend("none"))):
        if bk is None and variant:
            continue
        shared = vmm.Shared(4096 * 4)
        t = shared.tensor.view(torch.float32)
        t.zero_()
        torch.cuda.synchronize()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        shared.send(ours)
        try:
            rc, out, _ = run(VMM_CHILD, str(theirs.fileno()), Path(vmm.__file__).read_text(),
                             pass_fds=(theirs.fileno(),), b=bk)
        except sandbox.SandboxError as e:
            rc, out = -1, f"cannot run here: {e}"
        finally:
            ours.close()
            theirs.close()
        torch.cuda.synchronize()
        ok = rc == 0 and float(t.sum()) == 7 * 4096
        line("PASS" if ok else "FAIL", "harness GPU memory written by the worker" + variant,
             f"{(bk or b).summary()}; child: {out}")

    rc, out, _ = run("import subprocess; print(subprocess.run(['/sbin/ldconfig', '-p'], capture_output=True,"
                     " text=True).returncode); import os; print(oct(os.stat('/etc/ld.so.cache').st_mode))")
    line("INFO", "ldconfig -p in the jail (Triton's libcuda lookup without TRITON_LIBCUDA_PATH)", out)
    rc, out, _ = run(CUDA_INIT, network=False)
    line("INFO", "CUDA with the network cut (Jail(network=False))",
         "works: the harness may cut it" if rc == 0 and "OK" in out else f"fails: {out}")
    rc, out, _ = run(TRITON, prefix=("/usr/bin/prlimit", f"--data={32 << 30}", "--"))
    line("INFO", "CUDA + Triton under RLIMIT_DATA = 32 GiB",
         "works: memory could be bounded with it" if rc == 0 and "OK" in out else f"fails: {out}")

    # kill() gives the GPU memory back, also that of setsid'ed and double-forked children.
    torch.cuda.synchronize()
    free0, _ = torch.cuda.mem_get_info(0)
    top = sandbox.task_dir("gpucheck-hog-")
    (top / "scratch").mkdir()
    jail = sandbox.Jail(scratch=top / "scratch", env=env_for(top / "scratch"), gpu=True)
    p = sandbox.spawn([sys.executable, "-c", textwrap.dedent(HOG)], jail, stdout=subprocess.PIPE)
    p._proc.stdout.readline()
    time.sleep(8)                          # let the two hogs allocate
    held = (free0 - torch.cuda.mem_get_info(0)[0]) / 2**30
    p.kill()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and free0 - torch.cuda.mem_get_info(0)[0] > 256 << 20:
        time.sleep(0.2)
    left = (free0 - torch.cuda.mem_get_info(0)[0]) / 2**30
    subprocess.run(["rm", "-rf", str(top)])
    line("PASS" if held > 4 and left < 0.25 else "FAIL", "kill() frees the GPU memory of the whole tree",
         f"held {held:.1f} GiB before kill, {left:.2f} GiB after")

    # One GPU, one grader.
    key = gpulock.gpu_key(0)
    other = gpulock.memory_held_by_others(0)
    line("PASS" if key.startswith("GPU-") and other else "FAIL", "GPU lock sees the GPU",
         f"key {key}; memory held by others {other[0] / 2**30:.2f} of {other[1] / 2**30:.1f} GiB"
         if other else f"key {key}; memory unknown")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time; sys.path.insert(0, {str(ROOT)!r})
        from grader.harness.gpulock import gpu_lock
        with gpu_lock(0, wait=False, timeout_s=0):
            print("held", flush=True); time.sleep(30)
    """)], stdout=subprocess.PIPE)
    try:
        held_line = holder.stdout.readline()
        try:
            with gpulock.gpu_lock(0, wait=False, timeout_s=0):
                refused = ""
        except gpulock.GpuBusy as e:
            refused = str(e)
        line("PASS" if held_line == b"held\n" and refused else "FAIL",
             "a second grader on the same GPU is refused", refused or "it was not")
    finally:
        holder.kill()
        holder.wait()

    # Time the sandbox adds to a worker start (torch import + CUDA init).
    plain, jailed = [], []
    for _ in range(3):
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", textwrap.dedent(CUDA_INIT)], env=env_for(Path("/tmp")),
                       stdout=subprocess.DEVNULL)
        plain.append(time.monotonic() - t0)
        jailed.append(run(CUDA_INIT)[2])
    line("INFO", "worker start, median of 3",
         f"plain {statistics.median(plain):.2f} s, sandboxed {statistics.median(jailed):.2f} s")
    return 1 if failures else 0


def _try_backend(name: str):
    try:
        return sandbox.backend(gpu=True, name=name)
    except sandbox.SandboxError:
        return None


if __name__ == "__main__":
    sys.exit(main())
