"""The runs a grading makes, by role. A check declares the runs it needs as ``RunRequest``s; the
grading plan is their union. Run names (the keys of ``result.json``'s ``run_dirs`` and of the
judge's evidence) come only from here."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from harness.launch import Fault
from harness.rundir import GRADING_EVIDENCE_ENV, MMAP_THRESHOLD_ENV, SHOW_PREFIX, THREADS_ENV


class Role(StrEnum):
    MAIN = "main"  # the submission as the manifest runs it
    WORLD_SIZE = "ws"  # the submission at another world size (run name ws<N>)
    RESUME = "resume"  # killed between checkpoints, restarted by torchrun
    RESUME_SAVE = "resume_save"  # killed half-way through a checkpoint write, restarted
    REFERENCE = "reference"  # the reference solution, cached per machine


RESTARTED = (Role.RESUME, Role.RESUME_SAVE)


def run_name(role: Role, nproc: int | None = None) -> str:
    return f"{Role.WORLD_SIZE}{nproc}" if role is Role.WORLD_SIZE else str(role)


@dataclass(frozen=True)
class RunRequest:
    """One launch of the submission that a check needs."""

    role: Role
    nproc: int
    max_restarts: int = 0
    faults: tuple[Fault, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # extra environment, e.g. parameter fingerprints on
    watch: tuple[str, ...] = ()  # files the parent watches from outside (harness.filewatch), work-dir relative

    @property
    def name(self) -> str:
        return run_name(self.role, self.nproc)

    def launch_settings(self) -> dict:
        return {"nproc": self.nproc, "max_restarts": self.max_restarts, "faults": list(self.faults),
                "env": dict(self.env), "watch": list(self.watch)}


FINGERPRINTS = (("TRAINWRECK_FINGERPRINT", "1"),)  # per-step parameter fingerprints in the records
# Every grading run, the reference's too (never a user's own `trainwreck run`, which launches as torchrun
# does): glibc raises its mmap threshold each time a mapped block is freed, so an evaluation's 1 MB of
# activations then comes from the heap, and a small tensor kept after them (a history of 0-dim
# losses) pins the heap's top: RSS grew ~0.45 MB per step with no memory retained (heap in use flat;
# memory-leak/valid-no-grad-only, graded twice). A fixed threshold keeps big blocks mapped and given
# back when freed, so RSS measures what is held (the same variant, 4 sandboxed runs: +0.005 to +0.006
# MB per step). The bootstrap sets it with mallopt, as MALLOC_MMAP_THRESHOLD_ would.
# Every grading run also records the work behind each step and the memory counts
# (rundir.GRADING_EVIDENCE_ENV), which a plain `trainwreck run` leaves out.
# And one intra-op thread per rank in every role, whatever the world size (torchrun leaves a one-rank
# job all the machine's threads) and whatever the grader's own environment says: the same arithmetic,
# the same reduction order and the same share of the cores for the submission and the reference.
# All of them are the harness's settings, applied by the rank's bootstrap (mallopt, set_num_threads)
# and never in the environment the script sees (harness.rundir.VISIBLE_ENV): a script cannot tell a
# grading from a plain run, nor one role from another, by its variables (docs/sandbox.md lists what
# still differs, and why).
# The rendezvous store is not shared with the workers in any role: the kill-and-restart roles need
# that (harness.launch: gloo restarts fail otherwise), and one role launched otherwise than the rest
# would show its workers TORCHELASTIC_USE_AGENT_STORE=False where the others see True.
# Every role shows the script TORCHELASTIC_MAX_RESTARTS=1, whatever its own launch allows (the most
# any role of a grading gets is one restart): torchrun sets it from --max-restarts, and a first
# attempt that saw 1 where the main run sees 0 would know a kill is coming.
SHOWN_MAX_RESTARTS = SHOW_PREFIX + "TORCHELASTIC_MAX_RESTARTS"
GRADING_ENV = ((MMAP_THRESHOLD_ENV, str(128 * 1024)), (GRADING_EVIDENCE_ENV, "1"), (THREADS_ENV, "1"),
               ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"), (SHOWN_MAX_RESTARTS, "1"))


def grading_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A grading run's environment: ``GRADING_ENV``, then what the run's request adds (fingerprints)."""
    return {**dict(GRADING_ENV), **(extra or {})}


@dataclass
class Plan:
    """The runs of one grading, in the order they launch (main first), and whether the reference
    run is needed."""

    runs: dict[str, RunRequest] = field(default_factory=dict)
    reference: bool = False

    def add(self, req: RunRequest) -> None:
        """The first request of a name sets its launch; later ones may only add environment (a
        check that needs fingerprints in a run another check asked for) and files to watch."""
        have = self.runs.get(req.name)
        if have is None:
            self.runs[req.name] = req
        elif req.env or req.watch:
            merged = dict(have.env) | dict(req.env)
            self.runs[req.name] = RunRequest(have.role, have.nproc, have.max_restarts, have.faults,
                                             tuple(sorted(merged.items())), tuple(dict.fromkeys(have.watch + req.watch)))
