"""The AWX survey of deploy_device_plugin answered with its defaults, as AWX sends them (every
multiple-choice answer a string: "true", "false"), deploys exactly what the role's own defaults
deploy."""

from __future__ import annotations

import json
from pathlib import Path

from role_render import REPO, run_role

SURVEY = REPO / "awx" / "surveys" / "deploy_device_plugin.json"


def test_the_survey_defaults_as_awx_sends_them_render_the_role_defaults(tmp_path: Path) -> None:
    answers = {
        question["variable"]: question["default"]
        for question in json.loads(SURVEY.read_text())["spec"]
    }
    assert any(value in ("true", "false") for value in answers.values()), answers
    plain = run_role(tmp_path / "plain", own_certificates=True)
    surveyed = run_role(tmp_path / "survey", own_certificates=True, **answers)
    assert plain.returncode == 0, plain.output
    assert surveyed.returncode == 0, surveyed.output
    assert surveyed.objects() == plain.objects()
