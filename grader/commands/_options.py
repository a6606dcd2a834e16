"""Options several commands share, defined once so their choices and help cannot drift apart."""

from __future__ import annotations

import click

device_option = click.option(
    "--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
    help="auto: CUDA where there is a GPU per rank, else CPU. cuda: also with fewer GPUs than ranks, "
         "which then share them (NCCL refuses that: the script must pick gloo).")
