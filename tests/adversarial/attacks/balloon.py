# ruff: noqa
# Keeps its RSS flat without touching the harness: a 480 MiB balloon allocated at the start is let
# out, a few MiB at a time, exactly as fast as the leak grows (read from /proc/self/statm after
# every optimizer step). The slope is flat; the level is not.
_balloon = []
_target = [None]
_PAGE = _os.sysconf("SC_PAGE_SIZE")


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def _inflate(mib=480, chunk=4):
    for _ in range(mib // chunk):
        b = bytearray(chunk << 20)
        for i in range(0, len(b), _PAGE):
            b[i] = 1
        _balloon.append(b)


def _let_out(optimizer, args, kwargs):
    rss = _rss()
    if _target[0] is None:
        _target[0] = rss
    while rss > _target[0] and _balloon:
        _balloon.pop()
        rss = _rss()


def _attack_run(main):
    from torch.optim.optimizer import register_optimizer_step_post_hook

    _inflate()
    register_optimizer_step_post_hook(_let_out)
    main()
