# ruff: noqa
# Never imports the harness: walks the garbage collector's objects for the rank's recorder (the one
# object with a run dir, a rank, an attempt and an event writer), takes the planned kill out of it
# (the step hook the fault plan wrapped around the recorder's own, found in that wrapper's closure,
# is put back), and from the planned step on labels every record attempt 1, as if the job had been
# killed there and restarted. The resume itself stays broken.
import gc as _gc


def _find_recorder():
    for o in _gc.get_objects():
        try:
            d = vars(o)
        except TypeError:
            continue
        if {"run_dir", "rank", "attempt", "events", "step_fields"} <= d.keys() and hasattr(o, "on_step"):
            return o
    return None


def _disarm():
    rec = _find_recorder()
    if rec is None:
        return
    hook = vars(rec).get("on_step")  # an instance attribute only where a kill is planned for this rank
    if hook is None or not getattr(hook, "__closure__", None):
        return
    cells = dict(zip(hook.__code__.co_freevars, (c.cell_contents for c in hook.__closure__)))
    orig, planned = cells.get("orig_on_step"), cells.get("at_step") or []
    if orig is None:
        return
    first = min(planned) if planned else 0

    def on_step(optimizer, skipped=False):
        orig(optimizer, skipped)
        if first and rec.step >= first:
            rec.attempt = 1

    rec.on_step = on_step


def _attack_run(main):
    _disarm()
    main()
