"""The checked-in gRPC stubs are exactly what the protos generate."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
TOOL = REPO / "plugin_image" / "tools" / "generate_stubs.py"
PROTO_DIR = REPO / "plugin_image" / "proto"
STUB_DIR = REPO / "plugin_image" / "src" / "hygon_dcu_plugin" / "deviceplugin" / "api"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), *args], capture_output=True, text=True, check=False, timeout=120
    )


def test_checked_in_stubs_match_the_protos() -> None:
    result = run("--check")
    assert result.returncode == 0, result.stderr


def test_a_changed_proto_is_detected(tmp_path: Path) -> None:
    protos = tmp_path / "proto"
    shutil.copytree(PROTO_DIR, protos)
    target = protos / "deviceplugin_v1beta1.proto"
    target.write_text(
        target.read_text().replace("message Empty {}", "message Empty {\n  string extra = 1;\n}")
    )
    result = run("--check", "--proto-dir", str(protos), "--out-dir", str(STUB_DIR))
    assert result.returncode == 1
    assert "out of date: deviceplugin_v1beta1_pb2.py" in result.stderr
    assert "podresources" not in result.stderr


def test_generation_is_reproducible_and_check_notices_a_stale_file(tmp_path: Path) -> None:
    out = tmp_path / "api"
    assert run("--out-dir", str(out)).returncode == 0
    for name in ("deviceplugin_v1beta1_pb2.py", "podresources_v1_pb2_grpc.py"):
        assert (out / name).read_bytes() == (STUB_DIR / name).read_bytes()
    (out / "old_pb2.py").write_text("# left over\n")
    result = run("--check", "--out-dir", str(out))
    assert result.returncode == 1
    assert "stale" in result.stderr


def test_wire_names_match_the_kubelet() -> None:
    from hygon_dcu_plugin.deviceplugin.api import deviceplugin_v1beta1_pb2 as dp  # noqa: PLC0415
    from hygon_dcu_plugin.deviceplugin.api import podresources_v1_pb2 as pr  # noqa: PLC0415

    assert dp.DESCRIPTOR.services_by_name["DevicePlugin"].full_name == "v1beta1.DevicePlugin"
    assert dp.DESCRIPTOR.services_by_name["Registration"].full_name == "v1beta1.Registration"
    assert pr.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name == (
        "v1.PodResourcesLister"
    )
    field = dp.ContainerAllocateRequest.DESCRIPTOR.fields_by_name["devices_ids"]
    assert field.number == 1
    response = dp.ContainerAllocateResponse.DESCRIPTOR.fields_by_name
    assert {n: f.number for n, f in response.items()} == {
        "envs": 1,
        "mounts": 2,
        "devices": 3,
        "annotations": 4,
        "cdi_devices": 5,
    }
    devices = pr.ContainerDevices.DESCRIPTOR.fields_by_name
    assert {n: f.number for n, f in devices.items()} == {
        "resource_name": 1,
        "device_ids": 2,
        "topology": 3,
    }


def _code_only(tree: object) -> str:
    """The syntax tree without docstrings, whose whitespace the formatter normalises."""
    import ast  # noqa: PLC0415

    assert isinstance(tree, ast.Module)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            node.body = [  # type: ignore[attr-defined]
                n
                for n in body
                if not (
                    isinstance(n, ast.Expr)
                    and isinstance(n.value, ast.Constant)
                    and isinstance(n.value.value, str)
                )
            ] or [ast.Pass()]
    return ast.dump(tree)


def test_layout_changes_no_statement() -> None:
    """The layout step may only re-lay out protoc's output (and drop an unused import)."""
    import ast  # noqa: PLC0415
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("generate_stubs", TOOL)
    assert spec is not None and spec.loader is not None
    sys.path.insert(0, str(TOOL.parent))
    try:
        tool = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tool)
        raw = tool.generate(PROTO_DIR, layout=False)
        laid_out = tool.generate(PROTO_DIR)
    finally:
        sys.path.remove(str(TOOL.parent))
    assert raw.keys() == laid_out.keys()
    for name in raw:
        if not name.endswith(".py"):
            assert raw[name] == laid_out[name]
            continue
        before = ast.parse(raw[name])
        if name.endswith("_pb2_grpc.py"):
            before.body = [
                node
                for node in before.body
                if not (isinstance(node, ast.Import) and node.names[0].name == "warnings")
            ]
        assert _code_only(before) == _code_only(ast.parse(laid_out[name])), name
        assert max(len(line) for line in laid_out[name].decode().splitlines()) <= 160
