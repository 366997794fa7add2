"""The README stays true to the code: every config key documented, the Quickstart as shipped."""
import re

from demos.lab.config import RunConfig, ScenarioConfig, Target
from demos.lab.schema import describe
from demos.scenarios.configs import REGISTRY
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_every_config_key_is_documented():
    for cls in (RunConfig, ScenarioConfig, Target, *REGISTRY.values()):
        for name, *_ in describe(cls):
            assert f"| `{name}` |" in README, f"{cls.__name__}.{name} missing from README"


def test_every_scenario_has_a_row_and_a_config():
    for name in REGISTRY:
        assert f"| `{name}` |" in README
        assert f"python runner.py --config configs/{name}.yaml" in README
        assert (ROOT / "configs" / f"{name}.yaml").is_file()


def test_quickstart_has_exactly_the_two_make_commands():
    quick = README.split("## Quickstart", 1)[1].split("##", 1)[0]
    block = re.search(r"```bash\n(.*?)```", quick, re.S).group(1)
    assert [ln.split("#")[0].strip() for ln in block.splitlines()] == ["make demo", "make test"]


def test_readme_pictures_exist():
    for path in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README):
        assert (ROOT / path).is_file(), path
