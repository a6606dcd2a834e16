# ruff: noqa
# Trains correctly, then turns the checkpoint into a huge sparse file (64 GiB; a 1000 MiB one where
# the file size is capped): a reader that loads it whole runs out of memory.
def _attack_run(main):
    main()
    if _rank() == 0:
        for size in (64 << 30, 1000 << 20):
            try:
                _os.truncate("out/ckpt.pt", size)
                break
            except OSError as e:
                print(f"truncate to {size}: {e!r}", file=_sys.stderr)
