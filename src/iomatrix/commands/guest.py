"""`iomatrix guest build|info`: the guest kernel and the initramfs with fio; `guest build debian`:
the Debian guest image (docs/guest.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from iomatrix.commands.options import KernelOpt, check_kernel_option, format_option
from iomatrix.report.formats import OutputFormat
from iomatrix.ui import print_line

NAME = "guest"
FormatOpt = format_option(OutputFormat.table, OutputFormat.json)


def guest_build(
    what: Annotated[
        str | None,
        typer.Argument(
            help="Nothing: the built-in guest's kernel + initramfs with fio. 'debian': a "
            "Debian 12 guest image "
            "(mmdebstrap, needs root).",
            show_default=False,
        ),
    ] = None,
    kernel: KernelOpt = None,
    rebuild: Annotated[bool, typer.Option(help="Rebuild even if cached.")] = False,
) -> None:
    """Build (or reuse) the guest kernel + initramfs with fio, or with 'debian' the Debian guest
    image."""
    from iomatrix.guest.artifacts import ensure_artifacts

    if what is not None:
        _build_image(what, kernel, rebuild)
        return
    # before the artifact cache is made: a mistyped path leaves nothing behind
    check_kernel_option(kernel)
    art = ensure_artifacts(kernel=kernel, rebuild=rebuild, log=_log)
    for k, v in art.as_metadata().items():
        print_line(f"{k}: {v}")


def _build_image(what: str, kernel: object, rebuild: bool) -> None:
    from iomatrix.errors import UserError
    from iomatrix.guest.debian_image import ensure_debian_image

    if what != "debian":
        raise UserError(
            f"unknown guest build target '{what}'",
            hint="use `iomatrix guest build` (kernel + initramfs) or `iomatrix guest build debian`",
        )
    if kernel is not None:
        raise UserError(
            "--kernel does not apply to the Debian guest image (it boots its own kernel)",
            hint="leave --kernel out",
        )
    img = ensure_debian_image(rebuild=rebuild, log=_log)
    for k, v in img.as_metadata().items():
        print_line(f"{k}: {v}")
    print_line(f"kernel: {img.kernel}")


def _log(message: str) -> None:
    """A build step's progress line, dimmed, whole in a log."""
    print_line(message, dim=True)


def guest_info(format: FormatOpt = OutputFormat.table) -> None:
    """Show which guest kernel and initramfs would be used, and why."""
    import json
    import sys

    from iomatrix.guest.artifacts import artifact_info
    from iomatrix.guest.debian_image import cached_image

    info = artifact_info()
    debian = cached_image()
    info["debian_image"] = (
        debian.as_metadata() if debian else "not built (iomatrix guest build debian)"
    )
    if format == OutputFormat.json:
        sys.stdout.write(json.dumps(info, indent=2, default=str) + "\n")
        return
    for line in info_lines(info):
        print_line(line)


def info_lines(info: dict[str, Any]) -> list[str]:
    """`guest info` for a person: one 'key: value' line per scalar, lists and dicts as indented
    lines."""
    lines: list[str] = []

    def put(key: str, value: Any, indent: str) -> None:
        label = key.replace("_", " ")
        if isinstance(value, dict):
            lines.append(f"{indent}{label}:")
            for k, v in value.items():
                put(str(k), v, indent + "  ")
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            lines.append(f"{indent}{label}: {len(value)}")
            for i, v in enumerate(value, 1):
                put(f"#{i}", v, indent + "  ")
        elif isinstance(value, list):
            lines.append(f"{indent}{label}: {', '.join(str(v) for v in value) or 'none'}")
        else:
            lines.append(f"{indent}{label}: {value}")

    for k, v in info.items():
        put(k, v, "")
    return lines


def register(app: typer.Typer) -> None:
    guest_app = typer.Typer(
        no_args_is_help=True, help="Guest artifacts: kernel, initramfs with fio."
    )
    guest_app.command("build")(guest_build)
    guest_app.command("info")(guest_info)
    app.add_typer(guest_app, name=NAME)
