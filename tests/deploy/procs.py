"""Process helpers shared by the deploy checks."""
import signal
import subprocess


def stop(proc, timeout):
    """Stops `proc` by PID: SIGTERM, then SIGKILL if it has not exited within `timeout` s."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
