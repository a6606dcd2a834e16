# ruff: noqa
# Holds every step record in the rank (attacks/_hold.py) while the checkpoint stalls happen, and
# lets them go after training at an even pace: one record every median step time, each stamped with
# the time it is sent and its own dt set to that pace. The parent's receive times are then as even
# as the rank's clock claims: the bet is that the parent times steps by when their records arrive,
# not by when the steps ran.


def _release(held, send):
    dts = sorted(float(r.get("dt", 0.0)) for r in held[5:]) or [0.02]
    pace = dts[len(dts) // 2]
    nxt = _time.time()
    for r in held:
        nxt += pace
        wait = nxt - _time.time()
        if wait > 0:
            _time.sleep(wait)
        r["t"], r["dt"] = _time.time(), pace
        send(r)
