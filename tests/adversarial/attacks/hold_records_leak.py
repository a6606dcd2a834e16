# ruff: noqa
# Holds every step record in the rank (attacks/_hold.py) while the leak grows, and lets them all go
# at the end in one burst, each with a flat RSS and flat counts of graph nodes and live tensors (the
# first step's), stamped with the time it is sent so that none looks held back. The parent's memory
# samples are taken while no step record arrives: the attack bets that, with nothing to align them
# to, the steps' memory falls back to what the rank said of itself.


def _release(held, send):
    first = {}
    for r in held:
        for k in ("rss_mb", "graph_nodes", "live_bytes", "live_tensors"):
            if k in r and k not in first:
                first[k] = r[k]
    for r in held:
        for k, v in first.items():
            if k in r:
                r[k] = v
        r["t"] = _time.time()
        send(r)
