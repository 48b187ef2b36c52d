"""collector-config/: every file parses, pipelines are consistent, names match the contract."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from verdictgate.otel import conventions as names

CONFIG = Path(__file__).resolve().parents[1] / "collector-config"
COLLECTOR_FILES = ["gateway.yaml", "cloudwatch.yaml", "scale.yaml"]
SECTIONS = {"receivers": "receivers", "processors": "processors", "exporters": "exporters"}


class _CloudFormationLoader(yaml.SafeLoader):
    """Reads CloudFormation short-form tags (!Ref, !Sub) as plain values."""


_CloudFormationLoader.add_multi_constructor(
    "!", lambda loader, suffix, node: loader.construct_scalar(node)
)


def load(name: str) -> dict:
    return yaml.load((CONFIG / name).read_text(), Loader=_CloudFormationLoader)


@pytest.mark.parametrize("name", COLLECTOR_FILES)
def test_pipelines_use_only_defined_components_and_every_component_is_used(name):
    config = load(name)
    pipelines = config["service"]["pipelines"]
    assert pipelines
    used: dict[str, set[str]] = {section: set() for section in SECTIONS}
    for pipeline, parts in pipelines.items():
        signal = pipeline.split("/")[0]
        assert signal in ("traces", "metrics", "logs"), pipeline
        assert parts.get("receivers") and parts.get("exporters"), pipeline
        for section in SECTIONS:
            for component in parts.get(section, []):
                assert component in (config.get(section) or {}), (
                    f"{name}: {pipeline} uses undefined {component}"
                )
                used[section].add(component)
    for section in SECTIONS:
        assert set(config.get(section) or {}) == used[section], f"{name}: unused {section}"
    for extension in config["service"].get("extensions", []):
        assert extension in config["extensions"]


def test_gateway_drops_content_and_keeps_decision_and_run_spans():
    config = load("gateway.yaml")
    statements = " ".join(
        s
        for block in config["processors"]["transform/drop_content"]["trace_statements"]
        for s in block["statements"]
    )
    assert '"gen_ai.input.messages"' in statements and '"gen_ai.output.messages"' in statements
    assert "^(input|output)" in statements  # OpenInference's input.value, output.value
    exporter = config["exporters"]["otlp/verdictgate"]
    assert exporter["retry_on_failure"]["enabled"] and exporter["sending_queue"]["enabled"]
    order = config["service"]["pipelines"]["traces/verdictgate"]["processors"]
    assert order.index("transform/drop_content") < order.index("batch")


def test_cloudwatch_metrics_and_spans_use_contract_names():
    config = load("cloudwatch.yaml")
    emf = config["exporters"]["awsemf"]
    assert emf["namespace"] and emf["dimension_rollup_option"] == "NoDimensionRollup"
    declared = {metric for d in emf["metric_declarations"] for metric in d["metric_name_selectors"]}
    assert declared == {
        names.METRIC_ADMISSION, names.METRIC_INCONCLUSIVE, names.METRIC_CHANGE_RATE_UPPER, names.METRIC_TRIALS,
    }  # fmt: skip
    dimensions = {
        dim for d in emf["metric_declarations"] for group in d["dimensions"] for dim in group
    }
    assert dimensions <= {names.SUITE, names.POINT, names.ROUTE, names.OUTCOME}
    assert names.ADMISSION_SPAN in config["processors"]["filter/admissions"]["traces"]["span"][0]


def test_scale_routes_every_trial_of_a_run_to_one_replica():
    exporter = load("scale.yaml")["exporters"]["loadbalancing"]
    assert exporter["routing_key"] == "attributes"
    assert exporter["routing_attributes"] == [names.RUN_ID]


def test_alarms_treat_missing_data_as_breaching():
    alarm = load("alarms/admission-alarm.yaml")["Resources"]["AdmissionAlarm"]["Properties"]
    assert alarm["MetricName"] == names.METRIC_ADMISSION and alarm["Namespace"] == "VerdictGate"
    assert alarm["TreatMissingData"] == "breaching"
    assert alarm["ComparisonOperator"] == "LessThanThreshold" and alarm["Threshold"] == 1
    assert {d["Name"] for d in alarm["Dimensions"]} == {names.SUITE, names.POINT}
    script = (CONFIG / "alarms/put-metric-alarm.sh").read_text()
    assert (
        "--treat-missing-data breaching" in script
        and f"--metric-name {names.METRIC_ADMISSION}" in script
    )
    assert "--namespace VerdictGate" in script


def dropped_by_gateway(span: dict) -> bool:
    """The shipped filter's own condition, evaluated on a span: it must stay a disjunction of
    `attributes["KEY"] != nil` clauses (an OTTL condition that drops a span when true)."""
    [condition] = load("gateway.yaml")["processors"]["filter/verdictgate"]["traces"]["span"]
    clauses = [clause.strip() for clause in condition.split(" or ")]
    keys = [re.fullmatch(r'attributes\["([^"]+)"\] != nil', clause) for clause in clauses]
    assert all(keys), f"the filter is no longer a disjunction of attribute tests: {condition}"
    return any(match.group(1) in span["attributes"] for match in keys if match)


def test_the_gateway_keeps_every_span_a_trials_chain_passes_through():
    """Trial span -> handle_request (INTERNAL, the application's) -> the agent's spans: each
    link reaches the receiver; a database call, a leaf, is dropped."""
    chain = [
        {"name": names.TRIAL_SPAN, "kind": "INTERNAL", "attributes": {names.RUN_ID: "r"}},
        {"name": "handle_request", "kind": "INTERNAL", "attributes": {"http.route": "/x"}},
        {"name": "invoke_agent support", "kind": "INTERNAL",
         "attributes": {"gen_ai.operation.name": "invoke_agent"}},
        {"name": "execute_tool refund", "kind": "INTERNAL",
         "attributes": {"gen_ai.operation.name": "execute_tool"}},
        {"name": "decide router", "kind": "INTERNAL", "attributes": {names.RUN_ID: "r"}},
        {"name": names.RUN_SPAN, "kind": "INTERNAL", "attributes": {names.RUN_ID: "r"}},
    ]  # fmt: skip
    assert not any(dropped_by_gateway(span) for span in chain)
    assert dropped_by_gateway({"name": "SELECT orders", "attributes": {"db.system": "postgresql"}})
