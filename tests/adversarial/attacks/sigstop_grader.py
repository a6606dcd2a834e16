# ruff: noqa
# Freezes the grader (SIGSTOP to the launcher's parent): nothing is judged, nothing times out.
def _attack_run(main):
    if _rank() == 0:
        import signal

        pid = _grader_pid()
        if pid and pid > 1:
            try:
                _os.kill(pid, signal.SIGSTOP)
                _time.sleep(0.5)
                if _state(pid) in ("T", "t"):
                    _succeeded("grader-stopped", str(pid))
            except OSError as e:
                print(f"stopping the grader failed: {e!r}", file=_sys.stderr)
    main()
