"""The geometry Lease's text (docs/dev/extender.md): built from the real simulated node, read
back unchanged, and every document the extender must not trust refused with GeometryError."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import simnode
from hygon_dcu_plugin.geometry import (
    MAX_CARDS,
    MAX_GENERATION,
    MAX_MEMORY_MIB,
    MAX_PLACEMENTS,
    MAX_PROFILES,
    MAX_SLICES,
    MAX_TEXT,
    GeoCard,
    Geometry,
    GeometryError,
    GeoProfile,
    card_views,
    decode,
    encode,
    largest,
    of_cards,
)
from hygon_dcu_plugin.placement import PACK, choose
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plugin_harness import Harness, make_node

MODELS = ("c3000-bw", "hypo-x8")


@pytest.fixture(params=MODELS)
def sim(
    request: pytest.FixtureRequest,
    simulator_build: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> simnode.SimNode:
    node: simnode.SimNode = make_node(tmp_path / "node", model=request.param)
    monkeypatch.setenv(simnode.ROOT_ENV, str(node.root))
    return node


def owners_of(harness: Harness) -> list[tuple[str, int, int, str]]:
    return [
        (g.card_pci, g.placement_start, g.placement_size, g.pod_uid)
        for g in harness.runtime.store.load()
    ]


def test_the_simulated_node_round_trips_with_a_carved_instance_and_its_owner(
    sim: simnode.SimNode, short_tmp: Path
) -> None:
    model = sim.model
    smallest = min(model.profiles, key=lambda p: p.slices)
    harness = Harness(sim, short_tmp)
    harness.admit("train", profile=smallest.name)
    pod_uid = harness.kube.pods["default/train"].uid
    ((pci, start, _uuid),) = harness.live()

    geometry = of_cards(harness.node.cards(), owners_of(harness), 7)
    assert decode(encode(geometry)) == geometry
    assert geometry.generation == 7
    # Against the simulator's own model, not the node layer's reading of it.
    assert [c.pci for c in geometry.cards] == list(model.pci_addresses[: sim.cards])
    for card in geometry.cards:
        assert card.slice_count == model.slices
        assert {
            (
                p.name,
                p.slices,
                p.memory_mib,
                p.cu_count,
                tuple((q.start, q.size) for q in p.placements),
            )
            for p in card.profiles
        } == {
            (s.name, s.slices, s.memory_mib, s.cu_count, tuple((b, s.slices) for b in s.starts))
            for s in model.profiles
        }
    carved = geometry.card(pci)
    assert carved is not None
    assert carved.occupied == frozenset(range(start, start + smallest.slices))
    assert [(o.start, o.size, o.pod_uid) for o in carved.owners] == [
        (start, smallest.slices, pod_uid)
    ]
    others = [c for c in geometry.cards if c.pci != pci]
    assert all(not c.occupied and not c.owners for c in others)


def test_a_grant_over_no_live_instance_owns_nothing(sim: simnode.SimNode, short_tmp: Path) -> None:
    # A grant left by a reboot: its instance is gone, so publishing it would claim a free span.
    harness = Harness(sim, short_tmp)
    pci = harness.node.cards()[0].pci
    assert pci is not None
    geometry = of_cards(harness.node.cards(), [(pci, 0, 1, "left-by-a-reboot")], 1)
    assert all(not c.owners for c in geometry.cards)


def test_an_unhealthy_card_is_not_listed(sim: simnode.SimNode, short_tmp: Path) -> None:
    harness = Harness(sim, short_tmp)
    sim.make_unreachable(2)
    geometry = decode(encode(of_cards(harness.node.cards(), [], 1)))
    assert sim.pci(2) not in [c.pci for c in geometry.cards]
    assert len(geometry.cards) == sim.cards - 1


def test_the_encoding_is_compact_and_states_the_schema_first(
    sim: simnode.SimNode, short_tmp: Path
) -> None:
    harness = Harness(sim, short_tmp)
    text = encode(of_cards(harness.node.cards(), [], 1))
    # No sliced card: schema 1, which extenders from before slices read.
    assert text.startswith('{"v":1,')
    assert ": " not in text and ", " not in text
    # 8 cards: about 2 KB for the BW table (docs/dev/extender.md), 4.3 KB for the 8-slice one;
    # twice the cards stay under half of MAX_TEXT, so a full node never comes near the refusal.
    assert 2 * len(text) < MAX_TEXT // 2


# refusals --------------------------------------------------------------------------------
def valid_doc() -> dict[str, Any]:
    return {
        "v": 1,
        "gen": 5,
        "cards": [
            {
                "pci": "0000:09:00.0",
                "slices": 4,
                "profiles": [
                    {
                        "name": "2g.15gb",
                        "slices": 1,
                        "memory_mib": 16380,
                        "cu": 20,
                        "placements": [[0, 1], [1, 1], [2, 1], [3, 1]],
                    },
                    {
                        "name": "4g.31gb",
                        "slices": 2,
                        "memory_mib": 32760,
                        "cu": 40,
                        "placements": [[0, 2], [2, 2]],
                    },
                ],
                "occupied": [0, 1],
                "owners": [[0, 2, "d3b07384-d113-4ec2-a8b4-1e2f3c4d5e6f"]],
            }
        ],
    }


def test_the_valid_document_decodes() -> None:
    geometry = decode(json.dumps(valid_doc()))
    card = geometry.cards[0]
    assert (geometry.generation, card.pci, card.occupied) == (5, "0000:09:00.0", frozenset({0, 1}))
    profile = card.profile("4g.31gb")
    assert profile is not None and [(q.start, q.size) for q in profile.placements] == [
        (0, 2),
        (2, 2),
    ]


Edit = Callable[[dict[str, Any]], object]


def _card(doc: dict[str, Any]) -> dict[str, Any]:
    card: dict[str, Any] = doc["cards"][0]
    return card


def _profile(doc: dict[str, Any]) -> dict[str, Any]:
    profile: dict[str, Any] = _card(doc)["profiles"][0]
    return profile


REFUSED: dict[str, tuple[Edit, str]] = {
    "schema 3": (lambda d: d.update(v=3), "schema"),
    "schema 1 with sliced": (lambda d: d.update(sliced=[]), re.escape("unexpected ['sliced']")),
    "schema true": (lambda d: d.update(v=True), "schema"),
    "schema text": (lambda d: d.update(v="1"), "schema"),
    "gen true": (lambda d: d.update(gen=True), "gen is not a whole number"),
    "gen float": (lambda d: d.update(gen=5.0), "gen is not a whole number"),
    "gen negative": (lambda d: d.update(gen=-1), "gen is not a whole number"),
    "gen too big": (lambda d: d.update(gen=MAX_GENERATION + 1), "gen is not a whole number"),
    "top unknown key": (lambda d: d.update(extra=1), re.escape("unexpected ['extra']")),
    "top missing key": (lambda d: d.pop("gen"), re.escape("missing ['gen']")),
    "cards not a list": (lambda d: d.update(cards={}), "cards is not a list"),
    "card unknown key": (lambda d: _card(d).update(model="x"), re.escape("unexpected ['model']")),
    "card missing key": (lambda d: _card(d).pop("owners"), re.escape("missing ['owners']")),
    "card not an object": (lambda d: d["cards"].append([]), r"cards\[1\] is not an object"),
    "pci not an address": (lambda d: _card(d).update(pci="dev0"), "pci is not a PCI address"),
    "pci a number": (lambda d: _card(d).update(pci=9), "pci is not a PCI address"),
    "slices true": (lambda d: _card(d).update(slices=True), "slices is not a whole number"),
    "slices zero": (lambda d: _card(d).update(slices=0), "slices is not a whole number"),
    "slices too many": (
        lambda d: _card(d).update(slices=MAX_SLICES + 1),
        "slices is not a whole number",
    ),
    "occupied off the card": (lambda d: _card(d).update(occupied=[4]), "occupied"),
    "occupied bool": (lambda d: _card(d).update(occupied=[False]), "occupied"),
    "profile unknown key": (lambda d: _profile(d).update(id=3), re.escape("unexpected ['id']")),
    "profile missing key": (lambda d: _profile(d).pop("cu"), re.escape("missing ['cu']")),
    "profile name empty": (lambda d: _profile(d).update(name=""), "name is not a profile name"),
    "profile name odd": (lambda d: _profile(d).update(name="2g 15gb"), "not a profile name"),
    "profile name long": (lambda d: _profile(d).update(name="g" * 33), "not a profile name"),
    "profile name unicode": (lambda d: _profile(d).update(name="2g.15gb\u00e9"), "profile name"),
    "profile wider than the card": (lambda d: _profile(d).update(slices=5), "slices is not"),
    "memory true": (lambda d: _profile(d).update(memory_mib=True), "memory_mib is not"),
    "memory huge": (lambda d: _profile(d).update(memory_mib=1 << 40), "memory_mib is not"),
    "cu negative": (lambda d: _profile(d).update(cu=-1), "cu is not"),
    "placement off the card": (
        lambda d: _profile(d)["placements"].append([3, 2]),
        r"placements\[4\] size",
    ),
    "placement starts past the card": (
        lambda d: _profile(d)["placements"].append([4, 1]),
        r"placements\[4\] start",
    ),
    "placement of size 0": (
        lambda d: _profile(d)["placements"].append([0, 0]),
        r"placements\[4\] size",
    ),
    "placement of three numbers": (
        lambda d: _profile(d)["placements"].append([0, 1, 1]),
        r"placements\[4\] has 3 entries; at most 2",
    ),
    "placement of bools": (
        lambda d: _profile(d)["placements"].append([True, True]),
        r"placements\[4\] start",
    ),
    "owner off the card": (lambda d: _card(d)["owners"].append([3, 2, "u"]), r"owners\[1\] size"),
    "owner without uid": (
        lambda d: _card(d)["owners"].append([2, 1]),
        r"owners\[1\] is not \[start, size, pod uid\]",
    ),
    "owner uid a number": (lambda d: _card(d)["owners"].append([2, 1, 7]), "has no pod uid"),
    "owner uid too long": (lambda d: _card(d)["owners"].append([2, 1, "u" * 65]), "pod uid"),
    "duplicate card": (lambda d: d["cards"].append(copy.deepcopy(_card(d))), "one card twice"),
    "duplicate profile": (
        lambda d: _card(d)["profiles"].append(copy.deepcopy(_profile(d))),
        "one profile twice",
    ),
    "too many cards": (
        lambda d: d.update(cards=[_card(d)] * (MAX_CARDS + 1)),
        f"cards has {MAX_CARDS + 1} entries",
    ),
    "too many profiles": (
        lambda d: _card(d).update(profiles=[_profile(d)] * (MAX_PROFILES + 1)),
        f"profiles has {MAX_PROFILES + 1} entries",
    ),
    "too many placements": (
        lambda d: _profile(d).update(placements=[[0, 1]] * (MAX_PLACEMENTS + 1)),
        f"placements has {MAX_PLACEMENTS + 1} entries",
    ),
    "too many occupied": (
        lambda d: _card(d).update(occupied=[0] * (MAX_SLICES + 1)),
        f"occupied has {MAX_SLICES + 1} entries",
    ),
    "too many owners": (
        lambda d: _card(d).update(owners=[[0, 1, "u"]] * (MAX_SLICES + 1)),
        f"owners has {MAX_SLICES + 1} entries",
    ),
    "deep value": (lambda d: _card(d).update(pci=json.loads("[" * 500 + "]" * 500)), "pci"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_decode_refuses(case: str) -> None:
    edit, message = REFUSED[case]
    doc = valid_doc()
    edit(doc)
    with pytest.raises(GeometryError, match=message):
        decode(json.dumps(doc))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"v":1,"gen":NaN,"cards":[]}', "not JSON"),
        ('{"v":1,"gen":Infinity,"cards":[]}', "not JSON"),
        ('{"v":1,"gen":-Infinity,"cards":[]}', "not JSON"),
        ('{"v":1,"gen":1e400,"cards":[]}', "gen is not a whole number"),  # a float: inf
        ('{"v":1,"gen":' + "9" * 5000 + ',"cards":[]}', "not JSON"),  # int digit limit
        ("[" * (MAX_TEXT // 2) + "]" * (MAX_TEXT // 2), "not JSON"),  # over the recursion limit
        ('{"v":1,"gen":1,"cards":[]', "not JSON"),
        ('{"v":1.0,"gen":1,"cards":[]}', "schema"),  # 1.0 == 1, but not the integer schema
        (
            '{"v":1,"gen":1,"cards":[{"pci":"0000:03:00.0","slices":4,"profiles":[],'
            '"occupied":[0],"owners":[[0,1,""]]}]}',
            "no pod uid",
        ),
        ("", "not JSON"),
        ("[]", "geometry is not an object"),
        ("null", "geometry is not an object"),
        (" " * (MAX_TEXT + 1), f"at most {MAX_TEXT} are read"),
    ],
)
def test_decode_refuses_text(text: str, message: str) -> None:
    with pytest.raises(GeometryError, match=message):
        decode(text)


@pytest.mark.parametrize("value", [None, b'{"v":1}', 1, {"v": 1}])
def test_decode_refuses_what_is_not_text(value: object) -> None:
    with pytest.raises(GeometryError, match="not text"):
        decode(value)


def test_an_oversized_but_well_formed_document_is_refused() -> None:
    # The largest document the bounds allow, written with a space after each comma.
    text = json.dumps(json.loads(encode(largest())), separators=(", ", ":"))
    assert len(text) > MAX_TEXT
    with pytest.raises(GeometryError, match="characters; at most"):
        decode(text)


# fuzz ------------------------------------------------------------------------------------
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=30,
)


def _paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield at
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*at, index))


VALID_PATHS = list(_paths(valid_doc()))


def _decodes_or_refuses(text: str) -> None:
    try:
        geometry = decode(text)
    except GeometryError:
        return
    # Whatever is accepted reads back the same after the plugin's own encoding.
    assert decode(encode(geometry)) == geometry


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_any_text_decodes_or_raises_only_geometry_error(text: str) -> None:
    _decodes_or_refuses(text)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_fuzz_any_json_decodes_or_raises_only_geometry_error(value: object) -> None:
    _decodes_or_refuses(json.dumps(value))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(VALID_PATHS), json_values, st.booleans())
def test_fuzz_one_changed_field_decodes_or_raises_only_geometry_error(
    path: tuple[Any, ...], value: object, drop: bool
) -> None:
    doc: Any = valid_doc()
    if not path:
        doc = value
    else:
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        if drop and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = value
    _decodes_or_refuses(json.dumps(doc))


# the extender's view ----------------------------------------------------------------------
def _two_cards() -> Geometry:
    geometry = decode(json.dumps(valid_doc()))
    first = geometry.cards[0]
    second = GeoCard("0000:0c:00.0", first.slice_count, first.profiles, frozenset(), ())
    return Geometry(geometry.generation, (first, second))


def test_card_views_count_reserved_spans_as_occupied() -> None:
    geometry = _two_cards()
    views = card_views(geometry, {"0000:0c:00.0": [(2, 2)], "0000:09:00.0": [(3, 1)]})
    assert [(v.index, v.pci, v.slice_count) for v in views] == [
        (0, "0000:09:00.0", 4),
        (1, "0000:0c:00.0", 4),
    ]
    assert views[0].occupied == {0, 1, 3}
    assert views[1].occupied == {2, 3}
    # Without reservations the views are the published occupancy.
    assert [v.occupied for v in card_views(geometry)] == [{0, 1}, frozenset()]


def test_the_policy_does_not_place_on_a_reserved_span() -> None:
    geometry = _two_cards()
    # Card 0 has [2, 2] left for a 4g; card 1 has [0, 2] and [2, 2] (pack prefers card 0).
    unreserved = choose(card_views(geometry), "4g.31gb", PACK)
    assert unreserved is not None and unreserved.card.pci == "0000:09:00.0"
    reserved = choose(card_views(geometry, {"0000:09:00.0": [(2, 2)]}), "4g.31gb", PACK)
    assert reserved is not None
    assert (reserved.card.pci, reserved.placement.start) == ("0000:0c:00.0", 0)
    profile = reserved.profile
    assert isinstance(profile, GeoProfile) and profile.name == "4g.31gb"
    full = {"0000:09:00.0": [(2, 2)], "0000:0c:00.0": [(0, 2), (2, 2)]}
    assert choose(card_views(geometry, full), "4g.31gb", PACK) is None


# logical slices (schema 2) ------------------------------------------------------------------
def sliced_doc() -> dict[str, Any]:
    doc = valid_doc()
    doc["v"] = 2
    doc["sliced"] = [
        {
            "pci": "0000:0c:00.0",
            "cu": 80,
            "mib": 65520,
            "max": 4,
            "whole": False,
            "live": [[21, 16384, "d3b07384-d113-4ec2-a8b4-1e2f3c4d5e6f"], [4, 1024, ""]],
        }
    ]
    return doc


def _sliced(doc: dict[str, Any]) -> dict[str, Any]:
    card: dict[str, Any] = doc["sliced"][0]
    return card


def test_a_schema_1_document_reads_as_one_without_sliced_cards() -> None:
    assert decode(json.dumps(valid_doc())).sliced == ()


def test_sliced_cards_round_trip() -> None:
    geometry = decode(json.dumps(sliced_doc()))
    (card,) = geometry.sliced
    assert (card.pci, card.compute_units, card.memory_mib, card.max_slices) == (
        "0000:0c:00.0",
        80,
        65520,
        4,
    )
    assert [(s.compute_units, s.memory_mib, s.pod_uid) for s in card.live] == [
        (21, 16384, "d3b07384-d113-4ec2-a8b4-1e2f3c4d5e6f"),
        (4, 1024, ""),
    ]
    assert decode(encode(geometry)) == geometry
    assert encode(geometry).startswith('{"v":2,')


SLICED_REFUSED: dict[str, tuple[Edit, str]] = {
    "schema 2 without sliced": (lambda d: d.pop("sliced"), re.escape("missing ['sliced']")),
    "sliced not a list": (lambda d: d.update(sliced={}), "sliced is not a list"),
    "sliced card twice": (lambda d: d["sliced"].append(_sliced(d)), "one sliced card twice"),
    "unknown key": (lambda d: _sliced(d).update(x=1), re.escape("unexpected ['x']")),
    "pci": (lambda d: _sliced(d).update(pci="card0"), "pci is not a PCI address"),
    "whole not a bool": (lambda d: _sliced(d).update(whole=0), "whole is not true or false"),
    "cu zero": (lambda d: _sliced(d).update(cu=0), "cu is not a whole number"),
    "mib too big": (lambda d: _sliced(d).update(mib=MAX_MEMORY_MIB + 1), "mib is not"),
    "max over the bound": (lambda d: _sliced(d).update(max=9), "max is not a whole number"),
    "more live than max": (lambda d: _sliced(d).update(max=1), "live has 2 entries; at most 1"),
    "live entry short": (lambda d: _sliced(d)["live"].append([1, 1]), "is not \\[compute"),
    "live uid": (lambda d: _sliced(d)["live"][1].__setitem__(2, "a/b"), "has no pod uid"),
    "live over the card's CUs": (
        lambda d: _sliced(d)["live"].append([70, 1, ""]),
        "more compute units than the card",
    ),
    "live over the card's memory": (
        lambda d: _sliced(d)["live"].append([1, 60000, ""]),
        "more memory than the card",
    ),
}


@pytest.mark.parametrize("case", sorted(SLICED_REFUSED))
def test_decode_refuses_a_bad_sliced_card(case: str) -> None:
    edit, message = SLICED_REFUSED[case]
    doc = sliced_doc()
    edit(doc)
    with pytest.raises(GeometryError, match=message):
        decode(json.dumps(doc))


def test_the_largest_document_is_legal() -> None:
    assert decode(encode(largest())) == largest()
