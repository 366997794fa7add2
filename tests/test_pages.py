"""The pages as templates: whatever a user wrote arrives escaped on every page, graphviz's SVG
and the stepper's JSON arrive whole, the static files are inlined as they are, jinja2 loads
only to write a page, and the index's lock (filelock) waits, then says who held it."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from markupsafe import escape

from demos.lab.core.results import Check, EntrySummary, Row, RunSummary, Timing
from demos.lab.pages import index, report, templating
from tests.conftest import ROOT, a_summary

H = "<script>alert(\"x\")</script> & 'q'"  # what a hostile id, config or file name could say
SVG = ('<?xml version="1.0"?>\n<!-- graphviz -->\n<svg width="10pt" height="10pt">'
       '<g id="node1" class="node"><title>a</title><polygon points="0,0"/></g></svg>\n')


def assert_escaped(page: str) -> None:
    assert H not in page and "<script>alert" not in page
    assert str(escape(H)) in page


def entry(entry_id: str) -> EntrySummary:
    return EntrySummary(entry_id, "my_exp", "failed", H, 5, {H: 1.5}, {"p": H},
                        [Check(H, False, H), Check("ok", True, "")], [], Timing(0.1, 50.0),
                        H, {H: H}, {H: {"backward": Row("fails", H)}})


def test_the_report_escapes_everything_but_graphviz_svg_and_keeps_the_steps_whole(tmp_path):
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "graph.svg").write_text(SVG)
    steps = [{"node": H + "</script>", "dot_node": "a", "received": [None], "sent": []}]
    (tmp_path / "e" / "backward.json").write_text(json.dumps(
        {"graphs": [{"graph": "graph", "steps": steps}]}))
    s = RunSummary(H, "failed", "2", "cpu", 0, True, {"threads": H}, H, ["runner.py", H], H, 1.0,
                   [entry("e"), entry(H)], sets=[f"seed={H}"],
                   baseline={"file": H, "status": "failed", "from": {"run": H}, "differs": H,
                             "measured": False, "compared": 1, "only_in_baseline": [H],
                             "not_in_baseline": [], "not_run": [H],
                             "drift": [{"entry": H, "key": H, "old": 1.0, "new": 2.0,
                                        "diff": 1.0, "allowed": 0.1, "within": False,
                                        "rule": H, "tier": H}]})
    page = report.render_report(tmp_path, s, {"my_exp": H}, {"e": H})
    assert_escaped(page)
    assert '<div class="graph" id="g-e-graph"><svg width="10pt"' in page  # inline, as it is
    assert 'id="g-e-graph-node1"' in page and "graphviz" not in page and "<?xml" not in page
    data = page.split('<script type="application/json" class="steps">')[1].split("</script>")[0]
    assert json.loads(data) == steps  # whole, and nothing in it ends the script early
    assert page.count("<script") == 2  # the steps and the page's own script


def test_the_index_escapes_everything(tmp_path):
    run = tmp_path / "2026-01-01_00-00-00"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps(a_summary(
        started=H, config=H, device=H, sets=[H], command=["--only", H])))
    (run / "report.html").write_text("x")
    assert index.write_index(tmp_path) == []
    assert_escaped((tmp_path / "index.html").read_text())


def test_static_files_are_inlined_as_they_are():
    static = Path(templating.__file__).parent / "static"
    names = sorted(p.name for p in static.iterdir())
    assert names == ["report.css", "stepper.js", "zoom.js"]
    env = templating.environment()
    for name in names:  # raw, never read as a template: even template syntax arrives as it is
        assert templating.static(name) == (static / name).read_text()
    page = env.from_string("<style>{{ static('report.css') }}</style>").render()
    assert page == f"<style>{(static / 'report.css').read_text()}</style>"
    # a file is inlined as a value, which jinja never parses: "{{" in a stylesheet stays
    assert env.from_string("{{ static('x') }}").render(
        static=lambda _: templating.static("report.css") + "{{ 1 + 1 }}").endswith("{{ 1 + 1 }}")
    templates = Path(templating.__file__).parent / "templates"
    assert not [t.name for t in templates.iterdir() if "include \"static" in t.read_text()]


def test_help_imports_no_jinja2():
    code = ("import sys; from demos.cli import main\ntry: main(['--help'])\n"
            "except SystemExit: pass\n"
            "print([m for m in ('jinja2', 'filelock') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60).stdout
    assert out.splitlines()[-1] == "[]", out


def test_the_index_lock_waits_then_names_itself_and_refuses_a_planted_link(tmp_path,
                                                                           monkeypatch):
    from filelock import FileLock

    monkeypatch.setattr(index, "LOCK_WAIT_S", 0.2)
    with FileLock(tmp_path / ".index.lock"):  # another process's rebuild, held throughout
        with pytest.raises(TimeoutError, match=r"^\.index\.lock held by another process for "
                                               r"0\.2 s$"):
            index.write_index(tmp_path)
    (tmp_path / ".index.lock").unlink()
    (tmp_path / "elsewhere").write_text("precious")
    (tmp_path / ".index.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="not a regular file; remove it"):
        index.write_index(tmp_path)
    assert (tmp_path / "elsewhere").read_text() == "precious"


def test_rates_are_rounded_as_a_person_reads_them():
    assert [templating.rate(v) for v in (2351.091, 123.4, 42.123, 0.01234, None)] == \
        ["2,351", "123", "42.1", "0.0123", "—"]
    scenario = (Path(templating.__file__).parent / "templates" / "scenario.html.j2").read_text()
    assert "steps_per_s|rate" in scenario


def test_paths_and_keys_wrap_after_a_separator_never_inside_a_word():
    """index.html and the report break a config path or a --set only after / _ = , (it broke
    `configs/legendre_fit.yaml` anywhere, and a PASSED badge into PASSE/D)."""
    b = templating.breakable
    assert str(b("configs/legendre_fit.yaml")) == "configs/<wbr>legendre_<wbr>fit.yaml"
    assert str(b("scenarios.x.lr=1e-5")) == "scenarios.x.lr=<wbr>1e-5"
    assert str(b(H)).count("<script>") == 0  # escaped first
    assert "overflow-wrap: anywhere" not in str(templating.static("report.css"))


@pytest.mark.parametrize("status, error, checks, verdict", [
    ("error", "ValueError: boom", [Check("ok", True, "")],
     "<b>Error</b>: ValueError: boom. 1 checks passed."),
    ("passed", None, [Check("expect", None, "not evaluated")],
     "No check was evaluated (1 not evaluated)."),
    ("passed", None, [Check("a", True, ""), Check("b", None, "")],
     "All 1 checks passed (1 not evaluated)."),
    ("failed", None, [Check("a", False, ""), Check("b", True, "")],
     "<b>1 of 2 checks failed</b>: a."),
])
def test_the_verdict_line_says_what_happened(tmp_path, status, error, checks, verdict):
    """An entry that raised is not 'All checks passed'; nothing evaluated is not a pass."""
    e = EntrySummary("e", "my_exp", status, "cpu", 0, {}, {}, checks, [], None, error)
    s = RunSummary("r", status, "2", "cpu", 0, False, {}, "c", ["runner.py"], "t", 1.0, [e])
    page = report.render_report(tmp_path, s, {"my_exp": "x"}, {"e": ""})
    line = page.split('<p class="verdict">')[1].split("</p>")[0]
    assert line.startswith(verdict), line
