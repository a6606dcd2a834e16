# ruff: noqa
# Shared by the daemon attacks: double-fork, new session, empty environment, working folder "/",
# so that nothing the harness knows about (its process tree, TRAINWRECK_RUN_DIR) leads to it.
# The daemon's code gets the out dir as its argument (the suite finds leftovers by it too).
def _spawn_daemon(code, *args):
    if _os.fork() == 0:
        try:
            _os.setsid()
            if _os.fork() == 0:
                _os.chdir("/")
                _os.execve(_sys.executable, [_sys.executable, "-c", code, *args], {})
        finally:
            _os._exit(0)
    _os.wait()


SIGN = '''
import hashlib, hmac, json
def sign(rec, key):
    body = json.dumps(rec, sort_keys=True, separators=(",", ":")).encode()
    mac = hmac.new(key.encode(), body, hashlib.sha256).hexdigest()[:32]
    return json.dumps({**rec, "mac": mac}, sort_keys=True, separators=(",", ":"))
def resign(path, key, edit):
    out = []
    for line in open(path).read().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        rec.pop("mac", None)
        rec = edit(rec)
        if rec is not None:
            out.append(sign(rec, key) + "\\n")
    open(path, "w").write("".join(out))
'''
