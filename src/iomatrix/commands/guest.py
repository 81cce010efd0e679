"""`iomatrix guest build|info`: the guest kernel and the initramfs with fio."""

from __future__ import annotations

from typing import Annotated

import typer

from iomatrix.commands.options import KernelOpt
from iomatrix.ui import console

NAME = "guest"


def guest_build(
    kernel: KernelOpt = None,
    rebuild: Annotated[bool, typer.Option(help="Rebuild even if cached.")] = False,
) -> None:
    """Build (or reuse) the guest kernel + initramfs with fio."""
    from iomatrix.guest.artifacts import ensure_artifacts

    art = ensure_artifacts(kernel=kernel, rebuild=rebuild, log=lambda m: console.print(f"[dim]{m}[/]"))
    for k, v in art.as_metadata().items():
        console.print(f"{k}: {v}")


def guest_info() -> None:
    """Show which guest kernel and initramfs would be used, and why."""
    from iomatrix.guest.artifacts import artifact_info

    for k, v in artifact_info().items():
        console.print(f"{k}: {v}")


def register(app: typer.Typer) -> None:
    guest_app = typer.Typer(no_args_is_help=True, help="Guest artifacts: kernel, initramfs with fio.")
    guest_app.command("build")(guest_build)
    guest_app.command("info")(guest_info)
    app.add_typer(guest_app, name=NAME)
