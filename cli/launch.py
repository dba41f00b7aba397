"""The process entry (`python run_pipeline.py ...` and the `tfrecord-etl` console script):
SIGINT/SIGTERM are caught from the first moment, before cli.main and what it imports load
(about 0.5 s), so a signal at start-up is one line and exit 130/143, not Python's silent
death on SIGTERM (exit -15). Imports nothing of ours until the handler is in place."""

from __future__ import annotations

import os
import signal
import sys

# What OpenBLAS reads for its thread count, in its order: a user's setting is kept.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
VIRTIO_DEVICES = "/sys/bus/virtio/devices"
VIRTIO_BALLOON = "0x0005"  # the virtio device id of a memory balloon
BALLOON_F_REPORTING = 5  # its feature bit: free page reporting (Linux's virtio_balloon.h)
PR_SET_THP_DISABLE = 41  # prctl: no transparent huge pages for this process and its children


def _stop(signum: int, frame: object) -> None:
    """Raised as a KeyboardInterrupt carrying the signal, so cli.main.entry() and `_stopped`
    tell it in one line with exit 130 / 143 (cli.main installs its own handler later)."""
    raise KeyboardInterrupt(signum)


def _stopped(e: KeyboardInterrupt) -> int:
    """The one line and exit code of a signal that came while cli.main was imported, worded
    as cli.main.entry words one (etl.base.signals)."""
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)  # the process is ending: a second signal changes nothing
    from etl.base import signals  # noqa: PLC0415 - only now: it costs imports

    stopped = signals.as_interrupted(e, signals.UNCHANGED)
    print(f"error: {stopped}", file=sys.stderr)
    return stopped.exit_code


def one_blas_thread(environ: dict[str, str] | os._Environ[str] = os.environ) -> None:
    """NumPy's OpenBLAS starts a thread per core when NumPy is imported, and those threads spin
    before they sleep: ~0.1 CPU-s a process (benchmarks/README.md, "OpenBLAS"), taken from the
    import and the read on a small machine. Nothing of ours multiplies matrices, so OpenBLAS
    gets one thread unless the user set a count; Beam's worker processes inherit it."""
    if not any(name in environ for name in BLAS_THREAD_VARIABLES):
        environ["OPENBLAS_NUM_THREADS"] = "1"


def host_takes_free_memory(devices: str = VIRTIO_DEVICES) -> bool:
    """Whether this is a virtual machine whose memory balloon reports free pages to its host
    (VIRTIO_BALLOON_F_REPORTING in the device's feature bits, one character per bit)."""
    try:
        names = os.listdir(devices)
    except OSError:
        return False
    for name in names:
        try:
            with open(os.path.join(devices, name, "device"), encoding="ascii") as fh:
                if fh.read().strip() != VIRTIO_BALLOON:
                    continue
            with open(os.path.join(devices, name, "features"), encoding="ascii") as fh:
                bits = fh.read().strip()
        except OSError:
            continue
        if len(bits) > BALLOON_F_REPORTING and bits[BALLOON_F_REPORTING] == "1":
            return True
    return False


def no_cold_huge_pages(devices: str = VIRTIO_DEVICES) -> bool:
    """No transparent huge pages for this process (and Beam's worker processes it starts)
    where the host takes free memory back: it reports free blocks of a huge page's size, so
    every new huge page is a block the host must fault in again, 4-5x slower to first write
    than 4 KiB pages there, and 3x faster elsewhere (benchmarks/README.md, "Cold memory").
    True when they were turned off."""
    if not sys.platform.startswith("linux") or not host_takes_free_memory(devices):
        return False
    import ctypes  # noqa: PLC0415 - Linux only; NumPy imports it anyway

    return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0


def entry() -> int:
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _stop)
    one_blas_thread()  # before anything imports NumPy
    no_cold_huge_pages()  # before the allocators reserve their arenas
    try:
        from etl.base.pause import pause  # noqa: PLC0415 - after the handler, on purpose

        pause("launch")  # tests: a signal while our modules are imported
        from cli.main import entry as run  # noqa: PLC0415 - after the pause point above
    except KeyboardInterrupt as stopped:
        return _stopped(stopped)
    code = run()
    from cli.bounded_exit import bounded_exit  # noqa: PLC0415 - ours: after the handler

    bounded_exit(code)
    return code
