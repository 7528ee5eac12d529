"""The documentation site builds without a warning, the README's state diagram is the one
generated from the kernel's transition table, and CI runs the README's test command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from beat_schedule.jobfiles import validate_job_file
from celery_app.web.actions import ACTIONS
from celery_app.web.api import ENQUEUE_ROLE
from docs.gen.layout import where_to_find_what
from docs.gen.states import occurrence_diagram
from kernel.states import OccurrenceStatus
from kernel.transitions.occurrences import allowed_pairs

ROOT = Path(__file__).resolve().parent.parent


def test_site_builds_strictly(tmp_path: Path) -> None:
    # --strict turns every warning (a broken link, a page missing from the build, an
    # anchor that does not exist) into a failed build.
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert build.returncode == 0, build.stdout + build.stderr
    assert "WARNING" not in build.stderr, build.stderr
    # The generated references are pages of the site.
    for page in ("job-file", "cli", "http-api", "states"):
        assert (tmp_path / "reference" / page / "index.html").is_file(), page


def test_every_job_file_in_the_docs_is_accepted_word_for_word(tmp_path: Path) -> None:
    checked = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for index, block in enumerate(re.findall(r"```ya?ml\n(.*?)```", page.read_text(), re.S)):
            if re.match(r"(?m)^jobs:", block):
                path = tmp_path / f"{page.stem}-{index}.yaml"
                path.write_text(block, encoding="utf-8")
                validate_job_file(path)  # raises naming the page's job and field
                checked.append(path.name)
    assert "job-health-1.yaml" in checked  # its notify: {on: ...} example


def test_the_security_guides_roles_table_is_the_servers_permission_checks() -> None:
    text = (ROOT / "docs" / "guides" / "security.md").read_text()
    table = text.split("<!-- roles:begin -->", 1)[1].split("<!-- roles:end -->", 1)[0]
    rows = [line.split("|")[1:3] for line in table.strip().splitlines()[2:]]
    documented = {action.strip().strip("`"): role.strip() for action, role in rows}
    assert documented.pop("read (every page, `GET /api/...`, `/live`)") == "viewer"
    checked = {name: action.role.label for name, action in ACTIONS.items()}
    assert documented == {**checked, "enqueue": ENQUEUE_ROLE.label}


def _readme_diagram() -> str:
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"```mermaid\n(.*?)```", readme, re.DOTALL)
    assert found, "README.md has no mermaid block"
    return found.group(1)


def test_ci_runs_the_readmes_test_command() -> None:
    readme_commands = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert readme_commands is not None, "README.md no longer opens with its two commands"
    test_command = readme_commands.group(1).splitlines()[1]
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci_lines[-1] == test_command, (
        f".ci/run ends with {ci_lines[-1]!r}; the README's test command is {test_command!r}"
    )


def test_readme_state_diagram_is_the_generated_one() -> None:
    assert _readme_diagram() == occurrence_diagram(), (
        "README.md's state diagram differs from the transition table: paste the output "
        "of `python -m docs.gen.states` into README.md"
    )


def test_state_diagram_draws_every_status_and_every_change_of_status() -> None:
    arrows = {(line.split()[0], line.split()[2]) for line in occurrence_diagram().splitlines()[1:]}
    drawn = {state for pair in arrows for state in pair}
    assert {status.value for status in OccurrenceStatus} <= drawn
    changes = {(str(a), str(b)) for a, b in allowed_pairs() if a != b}
    assert changes <= arrows


def test_the_contributing_guide_says_where_to_find_what() -> None:
    """docs/development.md lists the kernel's folders and root modules as they are."""
    guide = (ROOT / "docs" / "development.md").read_text()
    assert where_to_find_what() in guide, (
        "paste the output of `python -m docs.gen.layout` into docs/development.md"
    )
