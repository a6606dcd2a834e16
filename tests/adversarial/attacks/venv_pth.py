# ruff: noqa
# Plants a .pth file in the virtualenv's site-packages: its `import` line runs at the start of every
# later Python of the kit. The planted line ends every later candidate rank at once.
LINE = ("import os; exec(\"try:\\n argv = open('/proc/self/cmdline', 'rb').read().split(bytes(1))\\n"
        "except OSError:\\n argv = []\\n"
        "if b'harness.bootstrap' in argv and '/.trainwreck/cache/' not in os.environ.get('TRAINWRECK_RUN_DIR', ''):\\n"
        " open('ATTACK-SUCCEEDED-venv-pth-ran-in-a-later-run', 'a').close()\\n os._exit(7)\\n\")\n")


def _attack_run(main):
    if _rank() == 0 and _maybe_main():
        import sysconfig

        try:
            site_packages = _Path(sysconfig.get_paths()["purelib"])
            (site_packages / "zz-trainwreck-adversarial.pth").write_text(LINE)
        except OSError as e:
            print(f"planting failed: {e!r}", file=_sys.stderr)
    main()
