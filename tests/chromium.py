"""Headless Chromium for tests that look at a page as a user sees it.

`find_or_install()` returns the browser, installing it from the system packages when absent
(`apt-get install -y chromium`; the test machines run as root, see /work/shared/ENVIRONMENT.md).
A failed install raises with the installer's last lines: a test that needs a browser fails,
it does not skip. `screenshot()` renders a local file without network and returns the PNG.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class ChromiumUnavailable(RuntimeError):
    """No browser, and the install did not give one."""


def find() -> str | None:
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def find_or_install(timeout: float = 900) -> str:
    found = find()
    if found:
        return found
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    lock = ["-o", "DPkg::Lock::Timeout=300"]
    steps = [["apt-get", *lock, "update"], ["apt-get", *lock, "install", "-y", "chromium"]]
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=timeout, env=env)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ChromiumUnavailable(f"{' '.join(step)} failed: {e}") from e
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise ChromiumUnavailable(f"{' '.join(step)} exited {done.returncode}:\n{tail}")
    found = find()
    if not found:
        raise ChromiumUnavailable("apt-get install chromium succeeded but no chromium is on PATH")
    return found


def screenshot(page: str, out_png: str, width: int = 1200, height: int = 2000,
               timeout: float = 120) -> str:
    """`chromium --headless --screenshot` of the local file `page`; returns `out_png`.
    Network is not needed: the page must be self-contained (what the caller tests)."""
    browser = find_or_install()
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--user-data-dir={profile}", f"--screenshot={out_png}",
           f"--window-size={width},{height}", "file://" + os.path.abspath(page)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if done.returncode != 0 or not os.path.exists(out_png):
        tail = "\n".join(done.stderr.strip().splitlines()[-10:])
        raise AssertionError(f"chromium screenshot failed (exit {done.returncode}):\n{tail}")
    return out_png
