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


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    # Both are set when the tests themselves run in a pod.
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert parse() == Settings()


def test_file_then_flags(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text("policy: spread\ngrace_seconds: 5\nhost_root: /host\n")
    settings = parse("--config", str(conf), "--grace-seconds", "7")
    assert (settings.policy, settings.grace_seconds, settings.host_root) == ("spread", 7.0, "/host")


def test_node_name_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-7")
    assert parse().node_name == "gpu-7"


def test_geometry_lease_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    settings = parse()
    assert settings.geometry_namespace is None  # no Lease (the runtime logs it)
    assert (settings.geometry_renew_seconds, settings.geometry_lease_seconds) == (10.0, 40)


def test_geometry_namespace_from_the_environment_then_file_then_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "hygon-dcu")
    assert parse().geometry_namespace == "hygon-dcu"
    conf = tmp_path / "c.yaml"
    conf.write_text("geometry_namespace: from-file\n")
    assert parse("--config", str(conf)).geometry_namespace == "from-file"
    assert parse("--config", str(conf), "--geometry-namespace", "").geometry_namespace == ""
    monkeypatch.setenv("POD_NAMESPACE", "")
    assert parse().geometry_namespace is None


def test_geometry_timing_from_file_and_flags(tmp_path: Path) -> None:
    conf = tmp_path / "c.yaml"
    conf.write_text("geometry_renew_seconds: 5\ngeometry_lease_seconds: 30\n")
    settings = parse("--config", str(conf), "--geometry-lease-seconds", "25")
    assert (settings.geometry_renew_seconds, settings.geometry_lease_seconds) == (5.0, 25)
    assert isinstance(settings.geometry_lease_seconds, int)


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
        ("health_address:\n", "health_address: None must be HOST:PORT"),
        # the same rule for /metrics, which may also be empty
        ("metrics_address: 9411\n", "metrics_address: 9411 must be a string"),
        ("metrics_address: ':9411'\n", "metrics_address: ':9411' must be HOST:PORT"),
        ("metrics_address: 127.0.0.1\n", "metrics_address: '127.0.0.1' must be HOST:PORT"),
        ("metrics_address: '127.0.0.1:0'\n", "port 1-65535 (or empty: not served)"),
        ("metrics_address: 'h:99999'\n", "metrics_address: 'h:99999' must be HOST:PORT"),
        ("metrics_address:\n", "metrics_address: None must be HOST:PORT"),
        ("delete_pods_with_lost_partitions: 'yes'\n", "must be true or false"),
        ("node_labels: 1\n", "must be true or false"),
        ("geometry_namespace: Hygon_DCU\n", "geometry_namespace: 'Hygon_DCU' must be a DNS label"),
        ("geometry_namespace: a.b\n", "geometry_namespace: 'a.b' must be a DNS label"),
        (f"geometry_namespace: {'n' * 64}\n", "must be a DNS label"),
        ("geometry_namespace: 7\n", "geometry_namespace: 7 must be a string"),
        ("geometry_renew_seconds: 0.5\n", "geometry_renew_seconds: 0.5 must be a number from 1"),
        ("geometry_renew_seconds: 301\n", "must be a number from 1 to 300"),
        ("geometry_renew_seconds: .nan\n", "geometry_renew_seconds: nan must be a number"),
        ("geometry_lease_seconds: 40.5\n", "geometry_lease_seconds: 40.5 is not a whole number"),
        ("geometry_lease_seconds: '40'\n", "geometry_lease_seconds: '40' is not a whole number"),
        ("geometry_lease_seconds: true\n", "geometry_lease_seconds: True is not a whole number"),
        ("geometry_lease_seconds: 601\n", "geometry_lease_seconds: 601 must be a number from 2"),
        ("geometry_lease_seconds: 10\n", "geometry_lease_seconds: 10 must exceed"),
        (
            "geometry_renew_seconds: 30\ngeometry_lease_seconds: 30\n",
            "geometry_lease_seconds: 30 must exceed geometry_renew_seconds (30)",
        ),
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


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--geometry-renew-seconds", "inf"], "^geometry_renew_seconds: inf must be a number"),
        (["--geometry-renew-seconds", "0"], "^geometry_renew_seconds: 0.0 must be a number"),
        (["--geometry-lease-seconds", "1"], "^geometry_lease_seconds: 1 must be a number from 2"),
        (["--geometry-lease-seconds", "10"], "^geometry_lease_seconds: 10 must exceed"),
        (["--geometry-namespace=-x"], "^geometry_namespace: '-x' must be a DNS label"),
    ],
)
def test_absurd_geometry_flags_are_refused_naming_the_key(flags: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(*flags)


def test_a_fractional_lease_flag_is_refused_by_the_parser() -> None:
    with pytest.raises(SystemExit):
        parse("--geometry-lease-seconds", "40.5")


def test_metrics_address_is_loopback_unless_set(tmp_path: Path) -> None:
    # other pods cannot read /metrics unless the site binds it to the pod's address
    assert parse().metrics_address == "127.0.0.1:9411"
    assert parse().health_address == "0.0.0.0:9410"
    assert parse("--metrics-address", "0.0.0.0:9500").metrics_address == "0.0.0.0:9500"
    assert parse("--metrics-address", "[::]:9411").metrics_address == "[::]:9411"
    assert parse("--metrics-address", "").metrics_address == ""  # not served
    conf = tmp_path / "c.yaml"
    conf.write_text("metrics_address: ''\n")
    assert parse("--config", str(conf)).metrics_address == ""
    with pytest.raises(ConfigError, match=r"^metrics_address: 'nope' must be HOST:PORT"):
        parse("--metrics-address", "nope")


def test_delete_pods_flag_and_key(tmp_path: Path) -> None:
    assert parse().delete_pods_with_lost_partitions is False
    assert parse().node_labels is False
    assert parse("--node-labels", "true").node_labels
    assert parse("--delete-pods-with-lost-partitions", "true").delete_pods_with_lost_partitions
    conf = tmp_path / "c.yaml"
    conf.write_text("delete_pods_with_lost_partitions: true\n")
    assert parse("--config", str(conf)).delete_pods_with_lost_partitions


def test_help_states_the_bounds() -> None:
    result = run_cli("serve", "--help")
    assert "overrides resync_seconds (default 30, 0.1 to 3600)" in result.stdout
    assert "overrides grace_seconds (default 30, 0 to 3600)" in result.stdout
    flowing = " ".join(result.stdout.split())  # argparse wraps at the terminal's width
    assert "overrides geometry_renew_seconds (default 10, 1 to 300)" in flowing
    assert "overrides geometry_lease_seconds (default 40, 2 to 600)" in flowing


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
