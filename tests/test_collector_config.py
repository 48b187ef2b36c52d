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


OVERLAYS = {"scale.yaml": "gateway.yaml"}
"""Files meant to be merged over another (`--config base --config overlay`)."""


def load(name: str) -> dict:
    """A collector-config file, merged over the file it overlays, as the Collector merges its
    `--config` files: maps key by key, anything else replaced."""
    config = yaml.load((CONFIG / name).read_text(), Loader=_CloudFormationLoader)
    base = OVERLAYS.get(name)
    return _merged(load(base), config) if base else config


def _merged(base: object, over: object) -> object:
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return over
    merged = dict(base)
    for key, value in over.items():
        merged[key] = _merged(base[key], value) if key in base else value
    return merged


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
    exporter = config["exporters"]["otlp_grpc/verdictgate"]
    assert exporter["retry_on_failure"]["enabled"] and exporter["sending_queue"]["enabled"]
    order = config["service"]["pipelines"]["traces/verdictgate"]["processors"]
    assert order.index("transform/drop_content") < order.index("batch")


def test_cloudwatch_metrics_and_spans_use_contract_names():
    config = load("cloudwatch.yaml")
    emf = config["exporters"]["awsemf"]
    assert emf["namespace"] and emf["dimension_rollup_option"] == "NoDimensionRollup"
    selectors = [s for d in emf["metric_declarations"] for s in d["metric_name_selectors"]]
    metrics = [value for key, value in vars(names).items() if key.startswith("METRIC_")]
    declared = {metric for metric in metrics if any(re.search(s, metric) for s in selectors)}
    assert declared == {
        names.METRIC_ADMISSION,
        names.METRIC_INCONCLUSIVE,
        names.METRIC_INCONCLUSIVE_STREAK,
        names.METRIC_CHANGE_RATE_UPPER,
        names.METRIC_PASS_RATE_LOWER,
        names.METRIC_TRIALS,
    }
    dimensions = {
        dim for d in emf["metric_declarations"] for group in d["dimensions"] for dim in group
    }
    assert dimensions <= {names.SUITE, names.POINT, names.ROUTE, names.OUTCOME}
    assert names.ADMISSION_SPAN in config["processors"]["filter/admissions"]["traces"]["span"][0]


def test_scale_spreads_every_request_over_every_replica_with_no_routing_key():
    overlay = yaml.safe_load((CONFIG / "scale.yaml").read_text())
    assert set(overlay) == {"exporters"} and set(overlay["exporters"]) == {"otlp_grpc/verdictgate"}
    config = load("scale.yaml")
    assert not {"loadbalancing", "load_balancing"} & {n.split("/")[0] for n in config["exporters"]}
    exporter = config["exporters"]["otlp_grpc/verdictgate"]
    assert exporter["endpoint"].startswith("dns:///") and exporter["balancer_name"] == "round_robin"
    assert exporter["retry_on_failure"]["max_elapsed_time"] == "0s"  # the gateway's, kept
    pipeline = config["service"]["pipelines"]["traces/verdictgate"]
    assert pipeline == load("gateway.yaml")["service"]["pipelines"]["traces/verdictgate"]


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
        {
            "name": "invoke_agent support",
            "kind": "INTERNAL",
            "attributes": {"gen_ai.operation.name": "invoke_agent"},
        },
        {
            "name": "execute_tool refund",
            "kind": "INTERNAL",
            "attributes": {"gen_ai.operation.name": "execute_tool"},
        },
        {"name": "decide router", "kind": "INTERNAL", "attributes": {names.RUN_ID: "r"}},
        {"name": names.RUN_SPAN, "kind": "INTERNAL", "attributes": {names.RUN_ID: "r"}},
    ]
    assert not any(dropped_by_gateway(span) for span in chain)
    assert dropped_by_gateway({"name": "SELECT orders", "attributes": {"db.system": "postgresql"}})


# -- every option is one its component documents -------------------------------------------------


def _unknown_options(config: dict) -> list[str]:
    from collector_options import NESTED, TOP_LEVEL

    unknown = []
    for section in ("receivers", "processors", "exporters", "extensions"):
        for name, body in (config.get(section) or {}).items():
            component = f"{section}/{name.split('/')[0]}"
            known = TOP_LEVEL.get(component)
            if known is None:
                unknown.append(f"{section}.{name}: no documented options on record")
                continue
            unknown += [f"{section}.{name}.{key}" for key in (body or {}) if key not in known]
            for path, allowed in NESTED.items():
                if path[0] != component:
                    continue
                for where, value in _walk(body or {}, path[1:], f"{section}.{name}"):
                    unknown += [f"{where}.{key}" for key in value if key not in allowed]
    return unknown


def _walk(value, path: tuple[str, ...], where: str):
    """The dictionaries at `path` below `value` (`*`: each item of a list)."""
    if not path:
        if isinstance(value, dict):
            yield where, value
        return
    head, rest = path[0], path[1:]
    if head == "*":
        for number, item in enumerate(value if isinstance(value, list) else []):
            yield from _walk(item, rest, f"{where}[{number}]")
    elif isinstance(value, dict) and head in value:
        yield from _walk(value[head], rest, f"{where}.{head}")


@pytest.mark.parametrize("name", COLLECTOR_FILES)
def test_every_option_is_one_its_component_documents(name):
    assert _unknown_options(load(name)) == []


def test_a_misspelt_option_is_found():
    config = load("cloudwatch.yaml")
    config["exporters"]["awsemf"]["retain_initial_value_of_delta_metrics"] = True
    config["exporters"]["awsemf"]["metric_declarations"][0]["label_matcher"] = []
    assert _unknown_options(config) == [
        "exporters.awsemf.retain_initial_value_of_delta_metrics",
        "exporters.awsemf.metric_declarations[0].label_matcher",
    ]


# -- CloudWatch: each point in exactly the series meant for it ------------------------------------


def _exported_dimension_sets(emf: dict, metric: str, labels: set[str]) -> list[tuple[str, ...]]:
    """The dimension sets awsemf exports a point of `metric` with `labels` under: a declaration
    applies when a selector (a regular expression, searched, not anchored) matches the name,
    every label matcher matches the labels' values (a missing label is ""), and the set's
    dimensions are all on the point."""
    exported = []
    for declaration in emf["metric_declarations"]:
        if not any(
            re.search(selector, metric) for selector in declaration["metric_name_selectors"]
        ):
            continue
        matchers = declaration.get("label_matchers") or []
        if matchers and not any(
            re.search(
                m["regex"],
                m.get("separator", ";").join(
                    "x" if label in labels else "" for label in m["label_names"]
                ),
            )
            for m in matchers
        ):
            continue
        exported += [tuple(d) for d in declaration["dimensions"] if set(d) <= labels]
    return exported


BASE = {names.SUITE, names.POINT}
MEANT = {  # metric -> {labels of a point: the one dimension set it must be exported under}
    names.METRIC_ADMISSION: {frozenset(BASE): BASE},
    names.METRIC_INCONCLUSIVE: {frozenset(BASE): BASE},
    names.METRIC_CHANGE_RATE_UPPER: {
        frozenset(BASE): BASE,
        frozenset(BASE | {names.ROUTE}): BASE | {names.ROUTE},
    },
    names.METRIC_PASS_RATE_LOWER: {
        frozenset(BASE): BASE,
        frozenset(BASE | {names.ROUTE}): BASE | {names.ROUTE},
    },
    names.METRIC_TRIALS: {frozenset(BASE | {names.OUTCOME}): BASE | {names.OUTCOME}},
    names.METRIC_ADMISSION_TIME: {frozenset(BASE): None},  # not a CloudWatch series
    names.METRIC_INCONCLUSIVE_STREAK: {frozenset(BASE): BASE},
}


def _misplaced(emf: dict) -> list[str]:
    """Points not exported under exactly the one dimension set meant for them (or exported
    when they are not meant for CloudWatch)."""
    wrong = []
    for metric, points in MEANT.items():
        for labels, meant in points.items():
            exported = sorted(
                tuple(sorted(d)) for d in _exported_dimension_sets(emf, metric, set(labels))
            )
            if exported != ([] if meant is None else [tuple(sorted(meant))]):
                wrong.append(f"{metric} {sorted(labels)} -> {exported}")
    return wrong


def test_cloudwatch_puts_each_point_in_exactly_its_series_and_keeps_the_counters_first_value():
    emf = load("cloudwatch.yaml")["exporters"]["awsemf"]
    assert _misplaced(emf) == []
    assert all(
        s.startswith("^") and s.endswith("$")
        for d in emf["metric_declarations"]
        for s in d["metric_name_selectors"]
    )
    assert emf["retain_initial_value_of_delta_metric"] is True


PREVIOUS_DECLARATIONS = """
- dimensions: [[verdictgate.suite, verdictgate.point]]
  metric_name_selectors: [verdictgate.admission, verdictgate.inconclusive, verdictgate.change_rate.upper]
- dimensions: [[verdictgate.suite, verdictgate.point, verdictgate.route]]
  metric_name_selectors: [verdictgate.change_rate.upper]
- dimensions: [[verdictgate.suite, verdictgate.point, verdictgate.outcome]]
  metric_name_selectors: [verdictgate.trials]
"""
"""cloudwatch.yaml's declarations before issue 25: each route's value also went to the pooled
series, and the unanchored selectors took `admission.time` too."""


def test_the_previous_declarations_are_found_wrong():
    wrong = _misplaced({"metric_declarations": yaml.safe_load(PREVIOUS_DECLARATIONS)})
    assert any(
        w.startswith(f"{names.METRIC_CHANGE_RATE_UPPER} ") and names.ROUTE in w for w in wrong
    )
    assert any(w.startswith(names.METRIC_ADMISSION_TIME) for w in wrong)


# -- names current Collectors take, and what a Collector needs to start -------------------------


def _components(config: dict):
    """(`section/type`, where, body) of every component a config defines."""
    for section in ("receivers", "processors", "exporters", "extensions", "connectors"):
        for name, body in (config.get(section) or {}).items():
            yield f"{section}/{name.split('/')[0]}", f"{section}.{name}", body or {}


def _deprecated(config: dict) -> list[str]:
    from collector_options import DEPRECATED_TYPES

    return [
        f"{where}: use {DEPRECATED_TYPES[kind]}"
        for kind, where, _ in _components(config)
        if kind in DEPRECATED_TYPES
    ]


def _cannot_start(config: dict) -> list[str]:
    """What keeps a Collector from starting on a fresh machine outside EC2: an AWS exporter
    with no region (or one only an unset variable would give), a file_storage directory that
    must already exist."""
    from collector_options import CREATES_ITS_DIRECTORY, REQUIRED_OUTSIDE_EC2

    missing = []
    for kind, where, body in _components(config):
        for option in REQUIRED_OUTSIDE_EC2.get(kind, ()):
            value = str(body.get(option) or "")
            if not value or re.fullmatch(r"\$\{env:\w+\}", value):  # no default
                missing.append(f"{where}.{option}")
        if (option := CREATES_ITS_DIRECTORY.get(kind)) and body.get(option) is not True:
            missing.append(f"{where}.{option}")
    return missing


@pytest.mark.parametrize("name", COLLECTOR_FILES)
def test_no_component_type_is_a_deprecated_alias_and_each_starts_on_a_fresh_machine(name):
    config = load(name)
    assert _deprecated(config) == []
    assert _cannot_start(config) == []


def test_a_deprecated_alias_and_what_stops_a_start_are_found():
    gateway = load("gateway.yaml")
    gateway["exporters"]["otlp/verdictgate"] = gateway["exporters"].pop("otlp_grpc/verdictgate")
    del gateway["extensions"]["file_storage/queue"]["create_directory"]
    assert _deprecated(gateway) == ["exporters.otlp/verdictgate: use otlp_grpc"]
    assert _cannot_start(gateway) == ["extensions.file_storage/queue.create_directory"]
    cloudwatch = load("cloudwatch.yaml")
    del cloudwatch["exporters"]["awsemf"]["region"]
    cloudwatch["exporters"]["awsxray"]["region"] = "${env:AWS_REGION}"
    assert _cannot_start(cloudwatch) == ["exporters.awsemf.region", "exporters.awsxray.region"]
    assert _deprecated({"receivers": {"otlp": {}}}) == []  # the receiver keeps its name
