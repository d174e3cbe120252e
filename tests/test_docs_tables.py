"""README's headline table and the case-study pages' claims tables are the judge's output
(`ssdlab reproduce --headline --write`), not typed: each sits between its markers, names
registered studies and claims, and uses the judge's vocabulary only."""

import re
from pathlib import Path

from ssdlab.studies import registry
from ssdlab.studies.reproduce import CLAIMS_BEGIN, CLAIMS_END, HEADLINE_BEGIN, HEADLINE_END
from ssdlab.studies.verdict import VERDICTS

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs" / "case-studies").glob("*.md")) + [ROOT / "docs" / "vm.md"]


def _verdicts(lines):
    """The bold verdict cell of each table row."""
    out = []
    for line in lines:
        if line.startswith("| ") and not line.startswith("| study |") and not line.startswith("| claim |"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            bold = [c for c in cells if re.fullmatch(r"\*\*[a-z ]+\*\*", c)]
            assert len(bold) == 1, line
            out.append(bold[0].strip("*"))
    return out


def test_the_headline_table_is_generated_and_speaks_the_judges_words():
    for path in (ROOT / "README.md", ROOT / "docs" / "case-studies" / "README.md"):
        text = path.read_text()
        assert text.count(HEADLINE_BEGIN) == 1 and text.count(HEADLINE_END) == 1, path
        body = text.split(HEADLINE_BEGIN)[1].split(HEADLINE_END)[0].strip().splitlines()
        assert body[0].startswith("| study | claim | document | ssdlab | verdict |"), path
        rows = body[2:]
        studies = {r.split(" | ")[0].lstrip("| ").split(" (")[0] for r in rows}
        assert rows and studies <= set(registry()), (path, studies)
        assert set(_verdicts(rows)) <= set(VERDICTS), path


def test_each_pages_claims_table_is_generated_for_a_registered_study():
    begin = re.compile(re.escape(CLAIMS_BEGIN).replace(r"\{name\}", r"([a-z0-9-]+)"))
    found = {}
    for page in PAGES:
        text = page.read_text()
        for name in begin.findall(text):
            assert name in registry(), (page, name)
            body = text.split(CLAIMS_BEGIN.format(name=name))[1].split(CLAIMS_END.format(name=name))[0]
            lines = body.strip().splitlines()
            assert lines[0].startswith(f"From `ssdlab reproduce {name} --"), (page, lines[0])
            verdicts = _verdicts(lines)
            assert verdicts and set(verdicts) <= set(VERDICTS), (page, name)
            found[name] = page
    # Every study with a page of its own shows its claims there (gc-policies' are in its report).
    assert set(found) == set(registry()) - {"gc-policies"}, sorted(found)
