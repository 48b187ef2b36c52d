"""JUnit XML: one testcase per check; rejected is a failure, inconclusive an error."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter

from ..assessment import Assessment
from .checks import CheckResult, checks


def render_junit(assessment: Assessment) -> str:
    """The assessment as a JUnit XML document."""
    results = checks(assessment)
    count = Counter(check.result for check in results)
    suite = ET.Element(
        "testsuite",
        name=f"verdictgate.{assessment.run.suite}",
        tests=str(len(results)),
        failures=str(count[CheckResult.FAILED]),
        errors=str(count[CheckResult.UNDECIDED]),
        skipped=str(count[CheckResult.NOT_JUDGED]),
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("status", assessment.status.value),
        ("run", assessment.run.id),
        ("point", assessment.run.point),
        ("headline", assessment.headline),
    ):
        ET.SubElement(properties, "property", name=name, value=value)
    for check in results:
        case = ET.SubElement(
            suite, "testcase", classname=f"verdictgate.{assessment.run.point}", name=check.name
        )
        if check.result is CheckResult.FAILED:
            ET.SubElement(
                case, "failure", message=check.message, type="rejected"
            ).text = check.message
        elif check.result is CheckResult.UNDECIDED:
            ET.SubElement(
                case, "error", message=check.message, type="inconclusive"
            ).text = check.message
        elif check.result is CheckResult.NOT_JUDGED:
            ET.SubElement(case, "skipped", message=check.message)
        else:
            ET.SubElement(case, "system-out").text = check.message
    root = ET.Element("testsuites", name="verdictgate")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
