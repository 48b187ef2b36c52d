#!/usr/bin/env bash
# The same alarm as admission-alarm.yaml, with the AWS CLI.
# Usage: put-metric-alarm.sh SUITE POINT SNS_TOPIC_ARN
set -euo pipefail
suite=${1:?suite}; point=${2:?decision point}; topic=${3:?SNS topic ARN}
aws cloudwatch put-metric-alarm \
  --alarm-name "verdictgate-${suite}-${point}" \
  --alarm-description "The last canary run was not qualified, or none reported in a day." \
  --namespace VerdictGate \
  --metric-name verdictgate.admission \
  --dimensions "Name=verdictgate.suite,Value=${suite}" "Name=verdictgate.point,Value=${point}" \
  --statistic Minimum \
  --period 86400 \
  --evaluation-periods 1 \
  --threshold 1 \
  --comparison-operator LessThanThreshold \
  --treat-missing-data breaching \
  --alarm-actions "${topic}"
