"""The options each collector component documents, for reading collector-config/ against them:
no collector with `awsemf`, `awsxray`, `filter` or `load_balancing` installs here, so a
misspelt option would only be found by the collector refusing to start.

Taken from each component's README and `config.go` in opentelemetry-collector(-contrib):
top-level options, and the nested ones collector-config/ uses.
"""

from __future__ import annotations

AWS_SESSION = {
    "endpoint",
    "region",
    "role_arn",
    "no_verify_ssl",
    "proxy_address",
    "max_retries",
    "num_workers",
    "request_timeout_seconds",
    "local_mode",
    "resource_arn",
    "external_id",
    "imds_retries",
    "certificate_file_path",
    "profile",
    "shared_credentials_file",
}
"""awsutil.AWSSessionSettings, squashed into both AWS exporters."""

TOP_LEVEL: dict[str, set[str]] = {
    "receivers/otlp": {"protocols"},
    "processors/batch": {
        "timeout",
        "send_batch_size",
        "send_batch_max_size",
        "metadata_keys",
        "metadata_cardinality_limit",
    },
    "processors/filter": {"error_mode", "traces", "metrics", "logs"},
    "processors/transform": {
        "error_mode",
        "trace_statements",
        "metric_statements",
        "log_statements",
        "flatten_data",
    },
    "processors/memory_limiter": {
        "check_interval",
        "limit_mib",
        "spike_limit_mib",
        "limit_percentage",
        "spike_limit_percentage",
    },
    "exporters/awsemf": AWS_SESSION
    | {
        "log_group_name",
        "log_stream_name",
        "namespace",
        "retain_initial_value_of_delta_metric",
        "dimension_rollup_option",
        "log_retention",
        "tags",
        "parse_json_encoded_attr_values",
        "metric_declarations",
        "metric_descriptors",
        "output_destination",
        "eks_fargate_container_insights_enabled",
        "disable_metric_extraction",
        "resource_to_telemetry_conversion",
        "detailed_metrics",
        "version",
    },
    "exporters/awsxray": AWS_SESSION
    | {
        "indexed_attributes",
        "index_all_attributes",
        "aws_log_groups",
        "telemetry",
        "transit_spans_in_otlp_format",
    },
    "exporters/prometheus": {
        "endpoint",
        "tls",
        "namespace",
        "const_labels",
        "send_timestamps",
        "metric_expiration",
        "resource_to_telemetry_conversion",
        "enable_open_metrics",
        "add_metric_suffixes",
        "without_scope_info",
    },
    "exporters/otlp_grpc": {
        "endpoint",
        "tls",
        "headers",
        "compression",
        "timeout",
        "retry_on_failure",
        "sending_queue",
        "balancer_name",
        "auth",
        "keepalive",
        "read_buffer_size",
        "write_buffer_size",
        "wait_for_ready",
        "authority",
    },
    "exporters/load_balancing": {
        "protocol",
        "resolver",
        "routing_key",
        "routing_attributes",
        "timeout",
        "retry_on_failure",
        "sending_queue",
    },
    "extensions/file_storage": {
        "directory",
        "timeout",
        "compaction",
        "fsync",
        "create_directory",
        "directory_permissions",
    },
    "extensions/health_check": {"endpoint", "path", "check_collector_pipeline", "tls", "cors"},
}

NESTED: dict[tuple[str, ...], set[str]] = {
    ("exporters/awsemf", "metric_declarations", "*"): {
        "dimensions",
        "metric_name_selectors",
        "label_matchers",
    },
    ("exporters/awsemf", "metric_declarations", "*", "label_matchers", "*"): {
        "label_names",
        "separator",
        "regex",
    },
    ("exporters/otlp_grpc", "retry_on_failure"): {
        "enabled",
        "initial_interval",
        "max_interval",
        "max_elapsed_time",
        "multiplier",
        "randomization_factor",
    },
    ("exporters/otlp_grpc", "sending_queue"): {
        "enabled",
        "num_consumers",
        "queue_size",
        "storage",
        "blocking",
        "sizer",
        "batch",
        "wait_for_result",
        "block_on_overflow",
    },
    ("exporters/load_balancing", "resolver"): {"static", "dns", "k8s", "aws_cloud_map"},
    ("receivers/otlp", "protocols"): {"grpc", "http"},
}
"""Options below a top-level one; `*` stands for each item of a list."""

DEPRECATED_TYPES: dict[str, str] = {
    "exporters/otlp": "otlp_grpc",
    "exporters/otlphttp": "otlp_http",
    "exporters/loadbalancing": "load_balancing",
}
"""Component types current Collectors keep only as deprecated aliases (each logs a warning at
start), with the name that replaced it: `otlp` and `otlphttp` since core v0.144.0
(open-telemetry/opentelemetry-collector#14403 and #14397), `loadbalancing` in contrib
(open-telemetry/opentelemetry-collector-contrib#48533). The receiver `otlp` keeps its name."""

REQUIRED_OUTSIDE_EC2: dict[str, set[str]] = {
    "exporters/awsemf": {"region"},
    "exporters/awsxray": {"region"},
}
"""Options a component needs to start where it cannot ask EC2's instance metadata: the AWS
exporters' `region` (their READMEs: when absent, the AWS_REGION environment variable, else
"determined by metadata"; collector-config/ cannot count on either)."""

CREATES_ITS_DIRECTORY: dict[str, str] = {"extensions/file_storage": "create_directory"}
"""Components whose directory must exist before the Collector starts unless this option is
true (extension/storage/filestorage/README.md)."""
