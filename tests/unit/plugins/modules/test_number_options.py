"""Number options take ASCII digits only, finite and in range: Ansible's int and float types (like
int() and float()) also take other scripts' digits, and float takes "nan" and "inf"."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pytest
from ansible_collections.hygon.dcu.plugins.module_utils import common_options
from ansible_collections.hygon.dcu.plugins.module_utils.node import Node
from ansible_collections.hygon.dcu.plugins.modules import kfd_holders_info, mig_instances
from simnode import SimNode

if TYPE_CHECKING:
    from collections.abc import Callable

    ModuleRunner = Callable[..., dict[str, Any]]

# int() reads ARABIC-INDIC DIGIT ZERO and FULLWIDTH DIGIT ONE as 0 and 1; str.isdigit() says
# yes to SUPERSCRIPT TWO, on which int() raises.
ARABIC_ZERO, ARABIC_ONE, ARABIC_TWO, ARABIC_THREE, ARABIC_FIVE = "\u0660\u0661\u0662\u0663\u0665"
FULLWIDTH_ONE, FULLWIDTH_TWO = "\uff11", "\uff12"
SUPERSCRIPT_TWO = "\u00b2"
NOT_WHOLE_NUMBERS: list[Any] = [
    ARABIC_ZERO,
    SUPERSCRIPT_TWO,
    FULLWIDTH_ONE,
    ARABIC_ONE + ARABIC_TWO,
    "1e2",
    "1_0",
    "nan",
    "-1",
    "",
    True,
    1.5,
    "86401",
    86401,
]
WHOLE_NUMBERS: list[tuple[Any, int]] = [(0, 0), ("0", 0), ("3", 3), (" 7 ", 7), (4.0, 4)]
NOT_SECONDS: list[Any] = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    math.nan,
    math.inf,
    ARABIC_ONE + "." + ARABIC_FIVE,
    "1e-3",
    "0",
    0,
    "-1",
    "0.001",
    "3601",
    1e9,
    True,
    "",
]
SECONDS: list[tuple[Any, float]] = [("0.5", 0.5), (".5", 0.5), ("2", 2.0), (0.2, 0.2), (3, 3.0)]
WHOLE_NUMBER_RULE = "must be a whole number from 0 to 86400 written with the ASCII digits 0-9"
SECONDS_RULE = "retry_interval must be a number of seconds from 0.01 to 3600"


def test_the_rules_themselves() -> None:
    assert [
        common_options.is_ascii_number(t)
        for t in ("0", "0123", ARABIC_ZERO, SUPERSCRIPT_TWO, FULLWIDTH_ONE, "", "1 ")
    ] == [
        True,
        True,
        False,
        False,
        False,
        False,
        False,
    ]
    for value in NOT_WHOLE_NUMBERS:
        with pytest.raises(ValueError, match=f"^timeout {WHOLE_NUMBER_RULE}; got "):
            common_options.whole_number(value, "timeout")
    for value, expected in WHOLE_NUMBERS:
        assert common_options.whole_number(value, "timeout") == expected
    assert common_options.whole_number("4194304", "pid", common_options.MAX_PID) == 4194304
    with pytest.raises(ValueError, match="too_big must be a whole number"):
        common_options.whole_number(10**400, "too_big")
    for value in NOT_SECONDS:
        with pytest.raises(ValueError, match=f"^{SECONDS_RULE} written with the ASCII digits"):
            common_options.seconds(value, "retry_interval", 0.01, 3600)
    for value, number in SECONDS:
        assert common_options.seconds(value, "retry_interval", 0.01, 3600) == number
    with pytest.raises(ValueError, match="retry_interval must be"):
        common_options.seconds(10**400, "retry_interval", 0.01, 3600)


def test_kfd_holders_info_wait_timeout_and_exclude_pids_take_ascii_digits_only(
    sim_node: SimNode, run_module: ModuleRunner
) -> None:
    base = {"host_root": str(sim_node.root)}
    for value in NOT_WHOLE_NUMBERS:
        refused = run_module(kfd_holders_info, {**base, "wait_timeout": value})
        assert refused.get("failed") is True, value
        assert refused["msg"].startswith(f"wait_timeout {WHOLE_NUMBER_RULE}; got "), value
    for value in [
        ARABIC_THREE,
        SUPERSCRIPT_TWO,
        FULLWIDTH_ONE + FULLWIDTH_TWO,
        "1e3",
        "-5",
        "4194305",
    ]:
        refused = run_module(kfd_holders_info, {**base, "exclude_pids": [value]})
        assert refused.get("failed") is True, value
        assert refused["msg"].startswith("exclude_pids must be a whole number from 0 to 4194304")
    for value, _number in WHOLE_NUMBERS:
        # Nobody holds the simulated /dev/kfd: every accepted wait returns at once.
        accepted = run_module(kfd_holders_info, {**base, "wait_timeout": value})
        assert "failed" not in accepted, (value, accepted)
    for pids in (["12", 13], "12,13"):
        accepted = run_module(kfd_holders_info, {**base, "exclude_pids": pids})
        assert "failed" not in accepted, accepted


def test_mig_instances_wait_timeout_retry_interval_and_cards_take_ascii_digits_only(
    sim_node: SimNode, run_module: ModuleRunner
) -> None:
    sim_node.switch_mode()
    Node(str(sim_node.root)).create(0, 3, 0)
    base = {"host_root": str(sim_node.root)}
    for value in NOT_WHOLE_NUMBERS:
        refused = run_module(mig_instances, {**base, "wait_timeout": value}, check_mode=True)
        assert refused.get("failed") is True, value
        assert refused["msg"].startswith(f"wait_timeout {WHOLE_NUMBER_RULE}; got "), value
    for value in NOT_SECONDS:
        refused = run_module(mig_instances, {**base, "retry_interval": value}, check_mode=True)
        assert refused.get("failed") is True, value
        assert refused["msg"].startswith(SECONDS_RULE), value
    for card in [ARABIC_ZERO, SUPERSCRIPT_TWO, FULLWIDTH_ONE]:
        # Arabic-Indic zero was card 0; superscript two passed isdigit(), then int() raised.
        refused = run_module(mig_instances, {**base, "cards": [card]}, check_mode=True)
        assert refused.get("failed") is True, card
        assert refused["msg"].startswith(
            f"card {card!r} is neither a card index below 2 nor a PCI address"
        ), refused["msg"]
    accepted = run_module(
        mig_instances,
        {**base, "cards": ["0"], "wait_timeout": "5", "retry_interval": "0.5"},
        check_mode=True,
    )
    assert "failed" not in accepted, accepted
    assert [i["card"] for i in accepted["destroyed"]] == [0]
    # Check mode destroyed nothing.
    assert len(Node(str(sim_node.root)).instances()) == 1
