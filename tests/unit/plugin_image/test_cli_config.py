"""Configuration (file + flags) and the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hygon_dcu_plugin import cli
from hygon_dcu_plugin.config import ConfigError, Settings, settings_from
from hygon_dcu_plugin.webhook import server as webhook_server

REPO = Path(__file__).resolve().parents[3]


def parse(*argv: str) -> Settings:
    args = cli.parser().parse_args(["serve", *argv])
    return settings_from(args)


def test_defaults() -> None:
    assert parse() == Settings()


def test_file_then_flags(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text("policy: spread\ngrace_seconds: 5\nhost_root: /host\n")
    settings = parse("--config", str(conf), "--grace-seconds", "7")
    assert (settings.policy, settings.grace_seconds, settings.host_root) == ("spread", 7.0, "/host")


def test_node_name_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-7")
    assert parse().node_name == "gpu-7"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("polcy: pack\n", "unknown keys ['polcy']"),
        ("policy: random\n", "policy: 'random' is not one of pack, spread"),
        ("grace_seconds: soon\n", "grace_seconds: 'soon' is not a number"),
        ("- a\n", "must be a mapping"),
        ("grants_dir: relative\n", "grants_dir: 'relative' must be an absolute path"),
        ("resync_seconds: 0\n", "resync_seconds: 0.0 must be a number from 0.1 to 3600"),
        ("resync_seconds: .nan\n", "resync_seconds: nan must be a number from 0.1 to 3600"),
        ("resync_seconds: .inf\n", "resync_seconds: inf must be a number from 0.1 to 3600"),
        ("resync_seconds: 1e9\n", "resync_seconds: 1000000000.0 must be a number from 0.1"),
        ("grace_seconds: -.inf\n", "grace_seconds: -inf must be a number from 0 to 3600"),
        ("grace_seconds: nan\n", "grace_seconds: nan must be a number from 0 to 3600"),
        ("health_address: 9410\n", "must be a string"),
        ("health_address: ':70000'\n", "health_address: ':70000' must be HOST:PORT"),
        ("health_address: 'h:99999'\n", "port 1-65535"),
        ("delete_pods_with_lost_partitions: 'yes'\n", "must be true or false"),
    ],
)
def test_bad_config_is_refused_with_the_key(tmp_path: Path, text: str, message: str) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text(text)
    with pytest.raises(ConfigError) as error:
        parse("--config", str(conf))
    assert message in str(error.value)


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e9"])
def test_absurd_resync_flag_is_refused_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^resync_seconds: .* must be a number from 0.1 to"):
        parse("--resync-seconds", value)


def test_delete_pods_flag_and_key(tmp_path: Path) -> None:
    assert parse().delete_pods_with_lost_partitions is False
    assert parse("--delete-pods-with-lost-partitions", "true").delete_pods_with_lost_partitions
    conf = tmp_path / "c.yaml"
    conf.write_text("delete_pods_with_lost_partitions: true\n")
    assert parse("--config", str(conf)).delete_pods_with_lost_partitions


def test_help_states_the_bounds() -> None:
    result = run_cli("serve", "--help")
    assert "overrides resync_seconds (default 30, 0.1 to 3600)" in result.stdout
    assert "overrides grace_seconds (default 30, 0 to 3600)" in result.stdout


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        parse("--config", str(tmp_path / "nope.yaml"))


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PYTHONPATH": f"{REPO / 'plugin_image' / 'src'}:{REPO / '.venv' / 'collections'}",
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(
        [sys.executable, "-m", "hygon_dcu_plugin", *argv],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_help_documents_every_flag_and_config_key() -> None:
    result = run_cli("serve", "--help")
    assert result.returncode == 0
    for name in Settings.__dataclass_fields__:
        assert "--" + name.replace("_", "-") in result.stdout
        assert f"  {name} " in result.stdout


def test_serve_with_a_bad_config_exits_2_with_a_message(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text("policy: random\n")
    result = run_cli("serve", "--config", str(conf))
    assert result.returncode == 2
    assert "configuration error: policy" in result.stderr


def test_webhook_dispatches_to_the_webhook_package(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def main(argv: list[str]) -> int:
        seen.append(argv)
        return 3

    monkeypatch.setattr(webhook_server, "main", main)
    assert cli.main(["webhook", "--port", "8443"]) == 3
    assert seen == [["--port", "8443"]]


def test_serve_without_kubernetes_access_exits_2_with_a_message(tmp_path: Path) -> None:
    result = run_cli(
        "serve",
        "--kubeconfig",
        str(tmp_path / "missing-kubeconfig"),
        "--device-plugin-dir",
        str(tmp_path),
    )
    assert result.returncode == 2
    assert "cannot set up Kubernetes API access from" in result.stderr
    assert "--kubeconfig" in result.stderr
