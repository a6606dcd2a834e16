"""The hostile submissions: what each tries, what must stop it, and the verdict it must get.

A case is an exercise's broken script or its reference fix with an attack spliced in
(``attacks/<name>.py``, after the shared ``attacks/_prelude.py``: the attack's code goes before
``def main()``, and ``main()`` at the bottom becomes ``_attack_run(main)``), or a workspace made
hostile by hand (``prepare``: files the grader reads before anything runs). Attacks that start
from the broken script must still fail for the bug; attacks that start from the reference fix
must fail for what they did, since nothing else is wrong with them.

``needs_sandbox``: what stops the attack is the sandbox and the parent-owned record channel of
issue 11, not yet wired into grading; the case is skipped (with the reason) until it is.
``unisolated_safe``: the attack can be run without the sandbox here, contained by the suite
(its own HOME, the kit restored afterwards), to measure what the grader of today lets through
(``TRAINWRECK_ADVERSARIAL_UNISOLATED=1``). The destructive ones (memory, processes, disk) are
not, and their attacks stand down by themselves outside a sandbox (``_contained()``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ATTACKS = Path(__file__).parent / "attacks"
PRELUDE = ("_prelude",)

# the classes of issue 11, and those found reading the code (README's table groups by them)
LATER = "changing later gradings"
AFTER = "forging the verdict after the fact"
INSIDE = "forging from inside the run"
REFERENCE = "reading and running the reference solution"
INJECT = "injecting code into the same grading's later runs"
HANG = "hanging the grader"
KILL = "killing the grader"
MEMORY = "memory blow-ups and limits"
FOUND = "found reading the code"

# one word per class, a pytest keyword: `-k hang` runs that class
SLUGS = {LATER: "later_gradings", AFTER: "after_the_fact", INSIDE: "inside_the_run", REFERENCE: "reference",
         INJECT: "injection", HANG: "hang", KILL: "kill_grader", MEMORY: "blowup", FOUND: "found"}

# what each exercise's broken script fails for, when the attack leaves the bug in place
LEAK = ("memory_flat", ("MB per step",))
REPLAY = ("sample_partition", ("consumed", "epoch", "resume", "restart"))
DEADLOCK = ("completes", ("no rank made progress", "failed", "timed out", "timeout", "blocked"))


@dataclass(frozen=True)
class Expect:
    """The verdict a case must get: not passed, score 0, and ``check`` failed with a message
    holding at least one of ``words`` (case-insensitive); or, where ``refused`` is given, the
    grading refused in one line holding one of those words. ``environment_ok``: an environment
    failure (the harness at fault) is right too. ``not_passing``: checks the attack aims to fool,
    which must not pass even where another check fails the submission."""

    check: str | None
    words: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    environment_ok: bool = False
    not_passing: tuple[str, ...] = ()
    # flag kinds (grader.flags) the hostile grading must raise where it ran sandboxed: what the
    # parent saw of the attack itself, for the interviewer, beside the verdict
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Case:
    id: str
    exercise: str
    klass: str
    tries: str
    stops: str
    base: str  # "broken" | "solution": the script the attack is spliced into
    attack: tuple[str, ...]  # attacks/<name>.py, in order, after the prelude
    expect: Expect
    limit_s: float  # the hostile grading must be over (result written) within this
    needs_sandbox: bool
    unisolated_safe: bool = True
    prepare: Callable[[Path, Path], None] | None = None  # (workspace, kit) -> None
    victim: bool = False  # an earlier grading lies beside this one for the attack to find
    settle_s: float = 3.0  # after the grading returns: time for a surviving daemon to act
    same_out_refused: bool = False  # grading again into the same --out must be refused
    grader_rss_mb: float = 1024.0  # the grader process's own peak RSS must stay under this
    notes: str = ""
    marks: tuple[str, ...] = field(default_factory=tuple)
    # in CI's tier (make adversarial-ci): a minute or less each with its honest grading, one per
    # defence of issue 25 (the environment a role sees, memory from outside, faults from outside)
    ci: bool = False

    def script(self, kit: Path) -> str:
        root = kit / ("exercises" if self.base == "broken" else "solutions") / self.exercise
        return compose((root / "train.py").read_text(), self.attack)


def compose(base: str, attack: tuple[str, ...]) -> str:
    """The base script with the attack spliced in before ``def main()``, and the script's own
    ``main()`` call handed to the attack's ``_attack_run``."""
    head, sep, rest = base.partition("\ndef main() -> None:")
    tail = 'if __name__ == "__main__":\n    main()'
    if not sep or tail not in rest:
        raise ValueError("the base script has no `def main() -> None:` or no `main()` call at the bottom")
    code = "\n\n".join((ATTACKS / f"{name}.py").read_text() for name in (*PRELUDE, *attack))
    return (head + "\n\n" + code + "\n\n" + sep + rest.replace(tail, 'if __name__ == "__main__":\n    _attack_run(main)'))


# -- workspaces made hostile by hand (the grader reads them before anything runs) -----------------

def symlink_to_solution(ws: Path, kit: Path) -> None:
    """train.py is a symlink to the reference solution."""
    (ws / "train.py").unlink()
    (ws / "train.py").symlink_to(kit / "solutions" / "sampler-replay" / "train.py")


def sparse_protected_file(ws: Path, kit: Path) -> None:
    """BRIEF.md (a protected file, compared with the kit's copy) is a 2 GiB sparse file."""
    with open(ws / "BRIEF.md", "wb") as f:
        f.truncate(2 << 30)


SANDBOX_STOPS = "the sandbox (wiring pending)"

CASES: list[Case] = [
    # -- changing later gradings --------------------------------------------------------------------
    Case("cache-poison", "memory-leak", LATER,
         "nudges the cached reference run's final parameters and re-signs them with the key stored beside them",
         "the reference cache is not in the sandbox, and a sealed cache entry that changed is run again",
         "broken", ("cache_poison",), Expect(*LEAK), 240, needs_sandbox=True),
    Case("usercustomize", "memory-leak", LATER,
         "plants usercustomize.py in the user site-packages, ending every later candidate rank",
         "home is a private tmpfs in the sandbox, PYTHONNOUSERSITE=1",
         "broken", ("usercustomize",), Expect(*LEAK), 240, ci=True, needs_sandbox=True),
    Case("venv-pth", "sampler-replay", LATER,
         "plants a .pth file in the virtualenv's site-packages (runs at every later Python start)",
         "the virtualenv is read-only in the sandbox",
         "broken", ("venv_pth",), Expect(*REPLAY), 300, needs_sandbox=True),
    Case("kit-manifest", "collective-deadlock", LATER,
         "edits the kit's manifest of the exercise (one step fewer: every honest fix then fails)",
         "exercises/ is not in the sandbox",
         "broken", ("kit_manifest",), Expect(*DEADLOCK), 300, needs_sandbox=True),
    Case("kit-harness", "memory-leak", LATER,
         "appends code to the kit's harness/workloads.py that nudges later candidates' initial weights",
         "harness/ is read-only in the sandbox",
         "broken", ("kit_harness",), Expect(*LEAK), 240, needs_sandbox=True),
    Case("other-gradings", "memory-leak", LATER,
         "rewrites an earlier grading beside its own (result.json a pass, records re-signed with the key in its "
         "run.json) and defaces files in the user's trainwreck home",
         "other gradings and the home are not in the sandbox",
         "broken", ("other_gradings",), Expect(*LEAK), 240, needs_sandbox=True, victim=True),
    # -- forging the verdict after the fact ---------------------------------------------------------------------
    Case("daemon-rewrites-result", "memory-leak", AFTER,
         "a double-forked daemon with an empty environment waits for result.json, re-signs the records with the "
         "key from run.json and rewrites result.json as a pass",
         "PID namespace: strays ended on sight, all ended with the run; run dir not in the sandbox; no key",
         "broken", ("_daemon", "daemon_rewrites_result"), Expect(*LEAK), 240, needs_sandbox=True, settle_s=10),
    Case("daemon-sabotages-next", "collective-deadlock", AFTER,
         "a daemon outlives its grading and appends junk to the records of the next grading beside it",
         "PID namespace: the daemon dies with the run; other gradings not in the sandbox",
         "broken", ("_daemon", "daemon_sabotages_next"), Expect(*DEADLOCK), 300, needs_sandbox=True),
    Case("regrade-points-at-reference", "memory-leak", AFTER,
         "a daemon points result.json's run dirs at the cached reference run: `regrade` judges the reference's run",
         "the daemon dies with the run; (to do: regrade should refuse run dirs outside the grading's folder)",
         "broken", ("_daemon", "regrade_points_at_reference"), Expect(*LEAK), 240, needs_sandbox=True, settle_s=10),
    Case("key-from-environ", "memory-leak", AFTER,
         "reads the run key from /proc/self/environ and re-signs its own step records with flat memory",
         "no key in the sandbox: the parent signs what arrives over the channel",
         "broken", ("key_from_environ",), Expect(*LEAK), 240, ci=True, needs_sandbox=True),
    # -- forging from inside the run ----------------------------------------------------------------------------
    Case("patch-psutil", "memory-leak", INSIDE,
         "patches psutil in its own process so every step record shows flat memory",
         "memory measured from outside (proc.jsonl) once memory_flat reads it; its reports against those samples "
         "are a disagree flag",
         "broken", ("patch_psutil",), Expect(*LEAK, flags=("disagree",)), 240, needs_sandbox=True),
    Case("balloon", "memory-leak", INSIDE,
         "keeps RSS flat by letting out a 480 MiB balloon as fast as the leak grows",
         "memory_flat's level against the reference run's",
         "broken", ("balloon",), Expect("memory_flat", ("reference run's level", "MB per step")), 240,
         needs_sandbox=False),
    Case("swap-final-params", "sampler-replay", INSIDE,
         "after the bootstrap's save, swaps in the reference's final parameters and re-signs the exit record",
         "final parameters go to the parent over the channel; no key; the reference cache is not in the sandbox",
         "broken", ("swap_final_params",), Expect(*REPLAY, not_passing=("resume_exact",)), 300,
         needs_sandbox=True),
    Case("write-records", "memory-leak", INSIDE,
         "appends a flat-memory step series to its events.jsonl, and writes the same into the channel's socket",
         "unsigned lines are counted as forged; over the channel the parent accepts them as the rank's, but memory "
         "is measured from outside",
         "broken", ("write_records",), Expect(*LEAK, not_passing=("memory_flat",)), 240, needs_sandbox=False),
    Case("slow-clock", "slow-input-pipeline", INSIDE,
         "keeps the slow pipeline and slows the harness's clock in its own process: every step record claims 2.5x the "
         "speed",
         "steps/s from the parent's clock (the channel's receive times) in a sandboxed grading, not from the rank's",
         "broken", ("slow_clock",), Expect("throughput", ("the broken baseline's steps/s",), not_passing=("throughput",)), 900,
         needs_sandbox=False, notes="in-process forging survives the sandbox: only the parent's clock stops it"),
    Case("forge-ledger", "sampler-replay", INSIDE,
         "writes a perfect sample ledger through the harness's own recorder (signed), training left broken",
         "resume_exact decides: the restart still leaves the path of the job's own uninterrupted run",
         "broken", ("forge_ledger",),
         Expect("resume_exact", ("uninterrupted run's path", "ends at different parameters", "work were lost"),
                not_passing=("resume_exact",)),
         300, needs_sandbox=False),
    Case("disarm-kill", "sampler-replay", INSIDE,
         "disarms the planned kill in its own process (the hook's wait and its record) and relabels every later "
         "record as attempt 1.0, a restart that never happened",
         "the parent kills the rank from outside once it is seen past its step, and stamps each record with the "
         "attempt of the process that sent it",
         "broken", ("disarm_kill",), Expect(*REPLAY, not_passing=("resume_exact",), flags=("fault", "tampering")),
         300, needs_sandbox=False, ci=True),
    Case("fix-when-graded", "memory-leak", INSIDE,
         "takes the fix only when a variable a grading sets is in its environment, or in the block "
         "/proc/self/environ keeps; run any other way, it leaks",
         "the bootstrap execs the rank again without the run's settings (they come on a pipe) and applies the "
         "grading's own (mmap threshold, threads) itself: a grading's environment is a plain run's",
         "broken", ("fix_when_graded",), Expect(*LEAK, not_passing=("memory_flat",)), 240, needs_sandbox=False,
         ci=True),
    Case("fast-when-timed", "slow-input-pipeline", INSIDE,
         "skips the input pipeline (constant features) only in the runs whose folder names a timed round of the "
         "candidate; the runs judged for correctness get the broken script",
         "every run dir is named by a random token: no run can tell a timed round from the main run",
         "broken", ("fast_when_timed",), Expect("throughput", ("the broken baseline's steps/s",),
                                                not_passing=("throughput",)), 900, needs_sandbox=False),
    Case("hold-records-stall", "periodic-stall", INSIDE,
         "holds its step records in the rank (the recorder's event writer, wrapped) while the checkpoint stalls "
         "happen, and sends them after training at an even pace (its median step), each stamped with the time "
         "it is sent",
         "step records that reach the parent long after records of later steps (the collective trace, the "
         "ledger) were held back: step_time_tail will not time steps by them, and the flag says so",
         "broken", ("_hold", "hold_records_stall"),
         Expect("step_time_tail", ("held back",), not_passing=("step_time_tail",), flags=("tampering",)), 600,
         needs_sandbox=False),
    Case("hold-records-leak", "memory-leak", INSIDE,
         "holds its step records in the rank while the leak grows and sends them all at the end in one burst, "
         "each with the first step's RSS and counts, stamped with the time it is sent",
         "step records that reach the parent long after records of later steps were held back: memory_flat "
         "will not place the outside samples on them (nor fall back to what the rank reported), and the flag says so",
         "broken", ("_hold", "hold_records_leak"),
         Expect("memory_flat", ("held back",), not_passing=("memory_flat",), flags=("tampering",)), 240,
         ci=True, needs_sandbox=False),
    Case("hold-everything-leak", "memory-leak", INSIDE,
         "holds every record of every stream in the rank (its channel sender, wrapped) while the leak grows and "
         "sends them all at the end in one burst, in order, each step with the first step's RSS and counts, "
         "every record stamped with the time it is sent",
         "step records that reached the parent on less of the rank's CPU than steps cost, or (no sample of the "
         "parent's among them) all within a tenth of the time the reference's took, were held back: memory_flat "
         "will not fall back to what the rank reported of its memory, and says why",
         "broken", ("hold_everything_leak",),
         Expect("memory_flat", ("held back",), not_passing=("memory_flat",)), 240, needs_sandbox=True),
    Case("computed-names", "memory-leak", INSIDE,
         "no literal name the static scan reads: the import machinery from the builtins by a computed name, "
         "base64-decoded code exec'd, a kit module imported by a computed name, the RSS reader and psutil "
         "patched flat, the recorder's counts flattened, /proc of its launcher, libc through ctypes, torch.save "
         "through getattr outside the working directory",
         "memory measured from outside; the run-time audit hook sees the operations whatever their spelling "
         "(/proc, ctypes), the save trace the torch.save outside the working directory",
         "broken", ("computed_names",),
         Expect(*LEAK, not_passing=("memory_flat",), flags=("behaviour", "disagree")), 240, needs_sandbox=False),
    Case("walk-objects", "sampler-replay", INSIDE,
         "never imports the harness: finds the rank's recorder by walking gc.get_objects(), puts back the step "
         "hook the fault plan wrapped (found in the wrapper's closure) and labels every record from the planned "
         "step on as attempt 1",
         "the parent kills the rank from outside once it is seen past its step, and stamps each record with the "
         "attempt of the process that sent it",
         "broken", ("walk_objects",),
         Expect(*REPLAY, not_passing=("resume_exact",), flags=("fault", "tampering")), 300,
         needs_sandbox=False),
    Case("child-claims-rank", "memory-leak", INSIDE,
         "a forked child of the rank connects to the record channel and sends a boot, a start and a flat-memory "
         "step series claiming to be the other rank and attempt 1",
         "the parent attributes a connection to the rank from outside (the child is the rank's), stamps the "
         "attempt of the sending process, and measures memory from outside; step records that arrive after "
         "records of later steps are held back (or forged), never timed",
         "broken", ("child_claims_rank",),
         Expect("memory_flat", ("MB per step", "held back"), not_passing=("memory_flat",),
                flags=("tampering", "disagree")), 240, needs_sandbox=True),
    Case("ahead-of-time", "periodic-stall", INSIDE,
         "keeps the synchronous checkpoint and rewrites its step records' times: every step says it took the same "
         "(four times its median) and carries the time an evenly paced run would have reached it",
         "step times from the parent's receive times; a record carrying a time after its arrival is counted",
         "broken", ("ahead_of_time",),
         Expect("step_time_tail", ("p99 step time",), not_passing=("step_time_tail",), flags=("tampering",)), 600,
         needs_sandbox=False),
    Case("restart-role-tricks", "sampler-replay", INSIDE,
         "tells the kill-and-restart role apart by its ancestors' /proc/<pid>/cmdline (--max-restarts=N) or "
         "torchrun's environment, and there, once restarted, deletes its checkpoint so the restart starts from "
         "scratch (no replay from a resumed sampler)",
         "resume_exact: a restart that starts over loses the work done; the /proc reads are a behaviour flag",
         "broken", ("restart_role_tricks",),
         Expect("resume_exact", ("work were lost", "uninterrupted run's path", "ends at different parameters"),
                not_passing=("resume_exact", "sample_partition"), flags=("behaviour",)), 300, needs_sandbox=False),
    Case("decoy-takes-the-kill", "sampler-replay", INSIDE,
         "where a kill is planned for the rank, a forked child sends a start record on the rank's channel (the "
         "monitor takes the last start's pid as the rank's) and, at the planned step, the fault record; the rank's "
         "own hook is unwrapped and it trains on, never restarted",
         "the restart checks need a restart that happened; a kill that hit a process other than the one whose "
         "boot record the bootstrap sent is a fault flag, two processes starting one rank a tampering flag",
         "broken", ("decoy_takes_the_kill",), Expect(*REPLAY, not_passing=("resume_exact",), flags=("fault", "tampering")),
         300, needs_sandbox=True),
    Case("forge-collectives", "comm-bound", INSIDE,
         "communicates nothing (DDP swapped for a wrapper in which every rank computes its peer's share of each "
         "micro-batch from the dataset's tensors and backpropagates the average) and writes, through the harness's "
         "own tracer, the trace of a DDP job: set-up broadcasts and each step's bucket all-reduces of the gradients",
         "the parent counts the bytes on the run's own loopback (net_tx): a trace claiming far more than went over "
         "the wire fails collectives_per_step and is a disagree flag",
         "solution", ("forge_collectives",),
         Expect("collectives_per_step", ("never sent their data",), not_passing=("collectives_per_step",),
                flags=("disagree",)),
         900, needs_sandbox=True),
    # -- reading and running the reference solution ---------------------------------------------------------------------
    Case("run-reference-by-path", "memory-leak", REFERENCE,
         "runs solutions/memory-leak/train.py, found beside the harness package",
         "solutions/ is not in the sandbox",
         "broken", ("run_reference_by_path",), Expect("completes", ("No such file", "FileNotFoundError")), 240,
         ci=True, needs_sandbox=True),
    Case("run-reference-via-grader", "collective-deadlock", REFERENCE,
         "imports the kit's grader to find the reference solution, and runs it",
         "grader/ is not in the sandbox",
         "broken", ("run_reference_via_grader",), Expect("completes", ("grader", "No module", "No such file")), 240,
         needs_sandbox=True),
    Case("copy-reference-run", "collective-deadlock", REFERENCE,
         "trains nothing: copies the cached reference run's records (re-signed with the key from "
         "/proc/self/environ), parameters, checkpoint and metrics, then exits 0",
         "no key and no reference cache in the sandbox",
         "broken", ("copy_reference_run",), Expect(*DEADLOCK), 300, needs_sandbox=True),
    Case("workspace-symlink", "sampler-replay", REFERENCE,
         "hands in a workspace whose train.py is a symlink to the reference solution",
         "the grader reading the workspace (before any sandbox): a symlink out of the workspace is refused",
         "broken", (), Expect(None, refused=("symlink", "outside", "regular file")), 240,
         needs_sandbox=False, prepare=symlink_to_solution,
         notes="host side: the sandbox cannot help, the workspace is read by the grader"),
    # -- injecting code into the same grading's later runs ----------------------------------------------------
    Case("plant-harness-next-run", "sampler-replay", INJECT,
         "plants a harness/ package in the next run's working folder; it runs first there, with the key",
         "PYTHONSAFEPATH=1; the next run's folder is not in the sandbox",
         "broken", ("plant_harness_next_run",), Expect(*REPLAY), 300, needs_sandbox=True),
    Case("rewrite-submission", "sampler-replay", INJECT,
         "rewrites the assembled submission's train.py, which the grading's later runs start",
         "the submission is read-only in the sandbox",
         "broken", ("rewrite_submission",), Expect(*REPLAY), 300, ci=True, needs_sandbox=True),
    Case("pre-create-next-run", "sampler-replay", INJECT,
         "writes a run.json into the next run's folder, so the harness refuses to launch it",
         "the next run's folder is not in the sandbox",
         "broken", ("pre_create_next_run",), Expect(*REPLAY, environment_ok=True), 300, needs_sandbox=True),
    # -- hanging the grader ---------------------------------------------------------------------------------------
    Case("fifo-checkpoint", "collective-deadlock", HANG,
         "trains correctly, then leaves FIFOs named like the checkpoint and the metrics log",
         "the grader reads only regular files (and the sandbox's seal removes special files)",
         "solution", ("fifo_checkpoint",), Expect("checkpoint_valid", ("regular file", "no checkpoint")), 240,
         needs_sandbox=False),
    Case("sparse-checkpoint", "collective-deadlock", HANG,
         "trains correctly, then makes its checkpoint a 64 GiB sparse file",
         "a size cap before loading (and RLIMIT_FSIZE in the sandbox)",
         "solution", ("sparse_checkpoint",), Expect("checkpoint_valid", ("more than such a file can be",)), 240,
         needs_sandbox=False),
    Case("symlink-dev-zero", "collective-deadlock", HANG,
         "trains correctly, then points the checkpoint and the metrics log at /dev/zero",
         "the grader reads only regular files inside the work dir (and the seal removes such links)",
         "solution", ("symlink_dev_zero",), Expect("checkpoint_valid", ("regular file", "no checkpoint")), 240,
         needs_sandbox=False),
    Case("symlink-reference-outputs", "collective-deadlock", HANG,
         "trains correctly, then swaps its checkpoint and metrics log for symlinks to the reference run's",
         "the grader does not follow links out of the work dir (and the cache is not in the sandbox)",
         "solution", ("symlink_reference",),
         Expect("checkpoint_valid", ("leads outside", "no checkpoint", "regular file")), 240, needs_sandbox=False),
    Case("fifo-records", "memory-leak", HANG,
         "after its last record, replaces its own events.jsonl and samples.jsonl with FIFOs",
         "records are written by the parent, out of the rank's reach",
         "broken", ("fifo_records",), Expect(*LEAK), 240, ci=True, needs_sandbox=True),
    Case("sigstop-grader", "sampler-replay", HANG,
         "freezes the grader with SIGSTOP",
         "PID namespace: the grader is not visible in the sandbox, and the run's uid cannot signal it",
         "broken", ("_signal_grader", "sigstop_grader"), Expect(*REPLAY), 300, needs_sandbox=True),
    # -- killing the grader ---------------------------------------------------------------------------------------
    Case("kill-grader", "memory-leak", KILL,
         "SIGKILLs the grader half-way through the run; grading again into the same folder must be refused",
         "PID namespace and another uid; --die-with-parent ends the sandbox with the grader",
         "broken", ("_signal_grader", "kill_grader"), Expect(*LEAK), 240, ci=True, needs_sandbox=True,
         same_out_refused=True),
    # -- memory blow-ups and limits -------------------------------------------------------------------------------
    Case("log-1gb", "collective-deadlock", MEMORY,
         "writes 1 GiB to stderr without a newline, then dies without a traceback",
         "logs travel over the channel, kept up to 16 MiB with a marker",
         "broken", ("log_1gb",), Expect("completes", ("failed", "exit", "code 3")), 300, ci=True, needs_sandbox=True),
    Case("records-flood", "sampler-replay", MEMORY,
         "floods its record stream with about 200 MB of records (300 MB over the channel where there is one)",
         "the grader's memory must not grow with the records' size (today: read whole)",
         "broken", ("records_flood",), Expect(*REPLAY), 420, needs_sandbox=False),
    Case("alloc-past-cap", "sampler-replay", MEMORY,
         "allocates 64 MiB every 20 ms up to 6 GiB on rank 0, before training",
         "the parent's sampler ends a rank over its memory cap (4 GiB); the status says limit",
         "solution", ("alloc_past_cap",), Expect("completes", ("memory", "limit")), 240,
         needs_sandbox=True, unisolated_safe=False),
    Case("fork-bomb", "collective-deadlock", MEMORY,
         "forks 156 processes before training",
         "the parent's sampler (64 processes) and RLIMIT_NPROC; the status says limit",
         "solution", ("fork_bomb",), Expect("completes", ("process", "limit")), 240,
         needs_sandbox=True, unisolated_safe=False),
    Case("fill-disk", "collective-deadlock", MEMORY,
         "allocates 3 GiB in its working folder and fills /tmp",
         "the parent's disk walk (2 GiB), RLIMIT_FSIZE, a size-limited /tmp; the status says limit",
         "solution", ("fill_disk",), Expect("completes", ("disk", "limit")), 240,
         needs_sandbox=True, unisolated_safe=False),
    # -- found reading the code ---------------------------------------------------------------------------------
    Case("ansi-escape", "sampler-replay", FOUND,
         "fails with an exception made of terminal escapes that print ALL CHECKS PASSED",
         "control characters stripped from every message (grader.text.printable)",
         "broken", ("ansi_escape",), Expect("completes", ("RuntimeError",)), 240, ci=True, needs_sandbox=False),
    Case("workspace-sparse-file", "memory-leak", FOUND,
         "hands in a workspace whose BRIEF.md (protected, compared with the kit's) is a 2 GiB sparse file",
         "the grader reading the workspace: a size cap on what it reads (today: read whole)",
         "broken", (), Expect("workload_intact", ("protected files differ", "BRIEF.md"),
                              refused=("BRIEF.md", "MiB", "too large")),
         240, needs_sandbox=False, prepare=sparse_protected_file,
         notes="host side: the sandbox cannot help, the workspace is read by the grader"),
]

BY_ID = {c.id: c for c in CASES}
assert len(BY_ID) == len(CASES), "case ids must be unique"


def workspace(case: Case, kit: Path, ws: Path) -> Path:
    """The candidate's folder for a case: the hostile train.py (or the base as shipped, for cases
    made by ``prepare``), then whatever ``prepare`` does."""
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "train.py").write_text(case.script(kit) if case.attack else
                                 (kit / ("exercises" if case.base == "broken" else "solutions") / case.exercise /
                                  "train.py").read_text())
    if case.prepare is not None:
        case.prepare(ws, kit)
    return ws


def honest_workspace(exercise: str, kit: Path, ws: Path, editable: list[str]) -> Path:
    """An honest candidate's folder: the reference fix's editable files."""
    for name in editable:
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_bytes((kit / "solutions" / exercise / name).read_bytes())
    return ws
