"""deploy/: every Kubernetes manifest validates offline against the API's schemas
(kubernetes-validate, strict: an unknown field fails), and the manifests agree with each other,
with `verdictgate serve`'s flags, with the image recipe and with collector-config/."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import kubernetes_validate
import pytest
import yaml

from verdictgate.cli.main import main
from verdictgate.cli.receiver import parse_duration
from verdictgate.receiver.transport.http_api import HEALTH_PATH

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
COLLECTOR_CONFIG = ROOT / "collector-config"
VERSIONS = ["1.30", "1.37"]
"""The oldest Kubernetes the manifests need (preStop's `sleep` action is on by default from
1.30) and the newest whose schemas kubernetes-validate ships."""
NOT_APPLIED = {"secret.example.yaml", "podmonitor.yaml"}
"""Manifests kustomization.yaml leaves out: the Secret's template (applying it would replace a
real password with the example's) and the optional PodMonitor."""
CUSTOM_RESOURCES = {"podmonitor.yaml"}
"""Kinds of the Prometheus Operator, whose schemas kubernetes-validate does not ship: checked
here for what they refer to, not against a schema."""
VARIABLE_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
"""`$(NAME)` in a container's args, which the kubelet replaces with the variable NAME."""


def documents(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((KUBERNETES / name).read_text()) if doc]


def manifests() -> list[tuple[str, dict]]:
    """(file name, resource) of every manifest but the kustomization."""
    return [
        (path.name, resource)
        for path in sorted(KUBERNETES.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for resource in documents(path.name)
    ]


def one(kind: str, name: str = "verdictgate") -> dict:
    [found] = [r for _, r in manifests() if r["kind"] == kind and r["metadata"]["name"] == name]
    return found


def pod() -> dict:
    return one("Deployment")["spec"]["template"]


def container() -> dict:
    [serve] = pod()["spec"]["containers"]
    return serve


def container_ports() -> dict[str, int]:
    return {port["name"]: port["containerPort"] for port in container()["ports"]}


def secret_values() -> dict[str, str]:
    return one("Secret")["stringData"]


def environment() -> dict[str, str]:
    """The container's environment as Kubernetes sets it, with the template Secret's values."""
    values = {}
    for variable in container()["env"]:
        if "value" in variable:
            values[variable["name"]] = variable["value"]
        else:
            reference = variable["valueFrom"]["secretKeyRef"]
            assert reference["name"] == one("Secret")["metadata"]["name"], variable
            values[variable["name"]] = secret_values()[reference["key"]]
    return values


def expanded_args() -> list[str]:
    """The container's args as the kubelet passes them: `$(NAME)` replaced by the variable."""
    env = environment()
    return [
        VARIABLE_REFERENCE.sub(lambda m: env.get(m.group(1), m.group(0)), arg)
        for arg in container()["args"]
    ]


def serve_flags(args: list[str]) -> dict:
    """The args parsed by the CLI itself (`verdictgate` is the image's entrypoint): each
    option's value, or a click error for a command or flag that does not exist."""
    with click.Context(main) as parent:
        command = main.get_command(parent, args[0])
        if command is None:
            raise click.UsageError(f"no command {args[0]!r}")
        return command.make_context(args[0], args[1:], parent=parent).params


def port_of(listen: str) -> int:
    return int(listen.rpartition(":")[2])


# -- the schemas ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_validates_against_the_kubernetes_schemas(version):
    validated = set()
    for name, resource in manifests():
        if name in CUSTOM_RESOURCES:
            continue
        assert kubernetes_validate.validate(resource, version, strict=True) == version
        validated.add(resource["kind"])
    assert validated == {"Deployment", "Service", "PodDisruptionBudget", "Secret", "ServiceAccount"}


def test_a_misspelt_field_is_refused():
    deployment = one("Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"][
        "paths"
    ] = HEALTH_PATH
    with pytest.raises(kubernetes_validate.ValidationError, match="'paths' was unexpected"):
        kubernetes_validate.validate(deployment, VERSIONS[0], strict=True)


def test_the_kustomization_applies_every_manifest_but_the_examples():
    [kustomization] = documents("kustomization.yaml")
    files = {path.name for path in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files - NOT_APPLIED
    assert files >= NOT_APPLIED
    [image] = kustomization["images"]
    assert image["name"] == container()["image"]  # the placeholder it replaces
    assert "newName" in image and "newTag" in image


# -- what refers to what --------------------------------------------------------------------------


def test_every_selector_matches_the_pods_labels():
    labels = pod()["metadata"]["labels"]
    deployment = one("Deployment")["spec"]
    selectors = {
        "Deployment": deployment["selector"]["matchLabels"],
        "PodDisruptionBudget": one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        "PodMonitor": one("PodMonitor")["spec"]["selector"]["matchLabels"],
        "Service": one("Service")["spec"]["selector"],
        "Service verdictgate-headless": one("Service", "verdictgate-headless")["spec"]["selector"],
        **{
            f"topology spread {n}": spread["labelSelector"]["matchLabels"]
            for n, spread in enumerate(pod()["spec"]["topologySpreadConstraints"])
        },
    }
    for what, selector in selectors.items():
        assert selector and selector.items() <= labels.items(), what


def test_every_port_named_is_one_the_container_opens():
    ports = container_ports()
    probes = [container()[p] for p in ("startupProbe", "readinessProbe", "livenessProbe")]
    named = [next(iter(probe.values()))["port"] for probe in probes if probe]
    for service in ("verdictgate", "verdictgate-headless"):
        named += [port["targetPort"] for port in one("Service", service)["spec"]["ports"]]
    named += [endpoint["port"] for endpoint in one("PodMonitor")["spec"]["podMetricsEndpoints"]]
    assert set(named) <= set(ports), set(named) - set(ports)


def test_every_secret_key_referred_to_is_in_the_template():
    secret = one("Secret")
    referred = {
        (v["valueFrom"]["secretKeyRef"]["name"], v["valueFrom"]["secretKeyRef"]["key"])
        for v in container()["env"]
        if "valueFrom" in v
    }
    for volume in pod()["spec"]["volumes"]:
        if secret_volume := volume.get("secret"):
            referred |= {(secret_volume["secretName"], i["key"]) for i in secret_volume["items"]}
    assert referred and {name for name, _ in referred} == {secret["metadata"]["name"]}
    assert {key for _, key in referred} == set(secret["stringData"])
    placeholders = {key: value for key, value in secret["stringData"].items() if key != "store-url"}
    assert set(placeholders.values()) == {"CHANGE-ME"}  # an example, never a real password


# -- serve's flags --------------------------------------------------------------------------------


def test_the_container_runs_serve_with_flags_it_takes():
    args = expanded_args()
    assert args[0] == "serve" and not any(VARIABLE_REFERENCE.search(arg) for arg in args)
    flags = serve_flags(args)
    assert flags["store_path"] == secret_values()["store-url"]
    assert flags["store_path"].startswith("postgresql://") and "@" in flags["store_path"]
    assert ":CHANGE-ME" not in flags["store_path"]  # the password comes as PGPASSWORD
    assert environment()["PGPASSWORD"] == secret_values()["pgpassword"]
    ports = container_ports()
    assert port_of(flags["grpc_listen"]) == ports["otlp-grpc"] == 4317
    assert port_of(flags["http_listen"]) == ports["otlp-http"] == 4318
    assert port_of(flags["prometheus"]) == ports["metrics"]
    for listen in ("grpc_listen", "http_listen", "prometheus"):
        assert not flags[listen].startswith("127.0.0.1"), listen  # reachable from the Service
    for duration in ("lease", "grace", "settle", "max_hold"):
        parse_duration(flags[duration])


def test_a_flag_serve_does_not_take_is_found():
    with pytest.raises(click.NoSuchOption):
        serve_flags([*expanded_args(), "--lease-time", "15s"])
    with pytest.raises(click.UsageError):
        serve_flags(["server", *expanded_args()[1:]])


def test_the_token_file_is_the_secrets_token_mounted():
    token_file = serve_flags(expanded_args())["token_file"]
    mounts = {m["name"]: m["mountPath"] for m in container()["volumeMounts"]}
    files = {
        f"{mounts[volume['name']]}/{item['path']}": item["key"]
        for volume in pod()["spec"]["volumes"]
        if "secret" in volume
        for item in volume["secret"]["items"]
    }
    assert files.get(token_file) == "token"


def test_replicas_are_ready_on_healthz_and_never_restarted_for_the_store():
    assert one("Deployment")["spec"]["replicas"] >= 2
    readiness = container()["readinessProbe"]["httpGet"]
    assert readiness["path"] == HEALTH_PATH
    http_port = port_of(serve_flags(expanded_args())["http_listen"])
    assert container_ports()[readiness["port"]] == http_port
    for probe in ("livenessProbe", "startupProbe"):  # a store outage must not restart replicas
        assert "httpGet" not in container()[probe] and "tcpSocket" in container()[probe], probe


IN_FLIGHT = 5
"""Seconds a stopping replica's requests in flight at SIGTERM may still take (gRPC's grace is
1 s), each able to claim a run."""


def test_the_grace_period_outlasts_the_prestop_and_a_lease():
    """A stopping replica renews no lease: about a lease after SIGTERM (and its requests in
    flight) whatever it held has lapsed, so the kubelet's kill at the grace period never cuts a
    hand-over short."""
    lease = parse_duration(serve_flags(expanded_args())["lease"])
    pre_stop = container()["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod()["spec"]["terminationGracePeriodSeconds"] >= pre_stop + lease + IN_FLIGHT


def test_the_pod_runs_unprivileged_on_a_read_only_root():
    spec, security = pod()["spec"], container()["securityContext"]
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"] > 0
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert security["capabilities"]["drop"] == ["ALL"]
    assert "/tmp" in {m["mountPath"] for m in container()["volumeMounts"]}
    resources = container()["resources"]
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}


# -- the image and the collectors -----------------------------------------------------------------


def dockerfile() -> dict[str, list[str]]:
    """Each instruction of deploy/Dockerfile (continuations joined) -> its arguments."""
    lines = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    instructions: dict[str, list[str]] = {}
    for line in lines:
        if line.strip() and not line.lstrip().startswith("#"):
            keyword, _, rest = line.strip().partition(" ")
            instructions.setdefault(keyword.upper(), []).append(rest.strip())
    return instructions


def test_the_image_recipe_runs_what_the_deployment_runs():
    recipe = dockerfile()
    assert [json.loads(entrypoint) for entrypoint in recipe["ENTRYPOINT"]] == [["verdictgate"]]
    [user] = recipe["USER"]
    assert user.split(":")[0] == str(pod()["spec"]["securityContext"]["runAsUser"])
    [install] = recipe["RUN"]
    assert "[postgres,prometheus]" in install and ".ci/constraints.txt" in install
    [exposed] = recipe["EXPOSE"]
    assert sorted(map(int, exposed.split())) == sorted(container_ports().values())
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    kept = [line[1:] for line in ignore if line.startswith("!")]
    assert {"pyproject.toml", "src/", ".ci/constraints.txt"} <= set(kept)


def test_the_collector_configs_reach_the_services():
    [kustomization] = documents("kustomization.yaml")
    gateway = yaml.safe_load((COLLECTOR_CONFIG / "gateway.yaml").read_text())
    scale = yaml.safe_load((COLLECTOR_CONFIG / "scale.yaml").read_text())
    host, _, port = gateway["exporters"]["otlp_grpc/verdictgate"]["endpoint"].rpartition(":")
    assert int(port) in {p["port"] for p in one("Service", host)["spec"]["ports"]}
    endpoint = scale["exporters"]["otlp_grpc/verdictgate"]["endpoint"].removeprefix("dns:///")
    host, _, port = endpoint.rpartition(":")
    service, namespace = host.split(".")[:2]
    headless = one("Service", service)["spec"]
    assert headless["clusterIP"] == "None" and namespace == kustomization["namespace"]
    assert int(port) in {p["port"] for p in headless["ports"]}
