"""``import amends`` and ``amends --help`` work without the ``amends[mcp]`` extra; the gateway's
commands then say how to install it (issue 14: the core never imports the SDK)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# Makes `import mcp` / `import mcp_types` fail in the child, as on a machine without the extra.
NO_SDK = "import sys; sys.modules['mcp'] = None; sys.modules['mcp_types'] = None; "


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NO_SDK + code], capture_output=True, text=True, timeout=60
    )


def test_amends_and_its_help_work_without_the_sdk() -> None:
    out = run(
        "import amends, amends.integrations.mcp as m; from amends.cli import main; "
        "raise SystemExit(main(['--help']))"
    )
    assert out.returncode == 0, out.stderr
    assert "mcp" in out.stdout and "sandbox" in out.stdout


def test_serving_without_the_sdk_names_the_extra(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[[upstream]]\nname = "a"\ncommand = "x"\n')
    out = run(
        "from amends.cli import main; "
        f"raise SystemExit(main(['mcp', 'serve', '--config', {str(config)!r}]))"
    )
    assert out.returncode == 2
    assert "pip install 'amends[mcp]'" in out.stderr
    assert "Traceback" not in out.stderr
