# ruff: noqa
# Shared by the attacks on the grader itself: the grader is the process that started the launcher,
# the launcher the one that started this rank. Never pid 1 (inside a sandbox that is its init).
def _grader_pid():
    try:
        with open(f"/proc/{_os.getppid()}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None
