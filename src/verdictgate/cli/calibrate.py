"""`verdictgate calibrate`: the semantic tier's threshold from known-good outputs."""

from __future__ import annotations

import json

import click

from ..errors import InputError
from ..suite_file import load_suite
from ..tiers.calibration_file import read_known_good, store_calibration
from ..tiers.semantic import bundled_embedder, calibrate
from .flag_options import suite_option
from .reporting import handles_errors


@click.command("calibrate")
@suite_option("The suite to calibrate; the threshold is stored in it.", required=True)
@click.option(
    "--outputs",
    "outputs_path",
    required=True,
    type=click.Path(dir_okay=False),
    help='Known-good outputs, JSON Lines: {"case": ID or "input": TEXT, "output": TEXT}.',
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False),
    help="Write the calibrated suite here (default: update the suite file in place).",
)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", help="Output format."
)
@handles_errors
def calibrate_command(suite_path: str, outputs_path: str, output: str | None, fmt: str) -> None:
    """Set the semantic tier's threshold: mean minus two standard deviations of the similarity
    of known-good outputs to their cases' references. Runs the bundled model offline."""
    suite = load_suite(suite_path)  # --suite is required
    pairs = read_known_good(outputs_path, suite)
    try:
        calibration = calibrate(pairs, bundled_embedder())
    except ValueError as error:
        raise InputError(str(error), path=outputs_path) from None
    written = store_calibration(suite_path, calibration, output)
    if fmt == "json":
        click.echo(json.dumps({**calibration.document(), "suite": written}, indent=2))
        return
    click.echo(
        f"threshold {calibration.threshold:.4f} = mean {calibration.mean:.4f} - 2 x sd "
        f"{calibration.sd:.4f} over {calibration.samples} known-good outputs "
        f"({calibration.model}); stored in {written}"
    )
