"""The reservation codec (``reservation.py``): what the scheduler extender writes on a pod and
the allocator reads back. Anything but a well-formed reservation is refused as a whole with
ReservationError, never another exception (docs/dev/extender.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hygon_dcu_plugin.reservation import (
    MAX_CONTAINERS,
    MAX_TEXT,
    Reservation,
    ReservationError,
    Reserved,
    ReservedSlice,
    decode,
    encode,
)
from hypothesis import given, settings
from hypothesis import strategies as st

PCI = "0000:09:00.0"


def _doc(**changes: Any) -> dict[str, Any]:
    """A well-formed reservation document with some top-level fields replaced."""
    doc: dict[str, Any] = {
        "v": 1,
        "node": "node-1",
        "at": 1764660000.5,
        "containers": {"train": {"card": PCI, "profile": "2g.15gb", "start": 0, "size": 1}},
    }
    doc.update(changes)
    return doc


def _entry(**changes: Any) -> dict[str, Any]:
    """A document whose one container entry has some fields replaced."""
    entry: dict[str, Any] = {"card": PCI, "profile": "2g.15gb", "start": 0, "size": 1}
    entry.update(changes)
    return _doc(containers={"train": entry})


def _refused(text: object) -> str:
    with pytest.raises(ReservationError) as refused:
        decode(text)
    message = str(refused.value)
    assert 0 < len(message) < 300, message
    return message


def test_what_the_extender_writes_is_read_back() -> None:
    reservation = Reservation(
        node="node-1",
        made_at=1764660000.125,
        containers={
            "train": Reserved(PCI, "4g.31gb", 2, 2),
            "eval": Reserved("0000:8c:00.0", "2g.15gb", 3, 1),
        },
    )
    text = encode(reservation)
    assert decode(text) == reservation
    # Compact and stable: what the extender writes twice is the same text.
    assert " " not in text and encode(decode(text)) == text


def test_the_documented_example_decodes() -> None:
    text = (
        '{"v": 1, "node": "node-a", "at": 1764660000.5, "containers": {"train": {"card": '
        '"0000:03:00.0", "profile": "2g.15gb", "start": 0, "size": 2}}}'
    )
    assert decode(text) == Reservation(
        "node-a", 1764660000.5, {"train": Reserved("0000:03:00.0", "2g.15gb", 0, 2)}
    )


def test_a_slice_reservation_is_schema_2_and_read_back() -> None:
    reservation = Reservation(
        "node-1",
        1764660000.5,
        {},
        {"notebook": ReservedSlice(PCI, 21, 16384), "eval": ReservedSlice(PCI, 31, 24576)},
    )
    text = encode(reservation)
    assert json.loads(text)["v"] == 2
    assert decode(text) == reservation
    assert reservation.names() == ["eval", "notebook"]


def test_a_reservation_without_slices_stays_schema_1() -> None:
    # A plugin that knows schema 1 only reads every partition reservation still.
    text = encode(Reservation("node-1", 1.0, {"train": Reserved(PCI, "2g.15gb", 0, 1)}))
    assert json.loads(text)["v"] == 1


def _sliced(**entry: Any) -> str:
    slice_entry: dict[str, Any] = {"card": PCI, "compute_units": 21, "memory_mib": 16384}
    slice_entry.update(entry)
    return json.dumps(_doc(v=2, containers={}, slices={"nb": slice_entry}))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (json.dumps(_doc(v=2)), "exactly"),  # schema 2 names its slices
        (json.dumps(_doc(slices={})), "exactly"),  # schema 1 has none
        (json.dumps(_doc(v=2, slices={})), "with at least one slice"),
        (json.dumps(_doc(v=2, containers={}, slices={})), "1..64 entries"),
        (
            json.dumps(
                _doc(
                    v=2,
                    slices={"train": {"card": PCI, "compute_units": 1, "memory_mib": 1}},
                )
            ),
            "both a partition and a slice",
        ),
        (_sliced(card="09:00.0"), "card is not a PCI address"),
        (_sliced(compute_units=0), "compute_units is not a number"),
        (_sliced(compute_units=True), "compute_units is not a number"),
        (_sliced(memory_mib=1 << 40), "memory_mib is not a number"),
        (_sliced(memory_mib="16384"), "memory_mib is not a number"),
        (_sliced(extra=1), "exactly"),
        (json.dumps(_doc(v=3)), "schema '3'"),
    ],
)
def test_what_is_not_a_slice_reservation(text: str, why: str) -> None:
    assert why in _refused(text)


def test_an_integer_time_is_seconds() -> None:
    assert decode(json.dumps(_doc(at=0))).made_at == 0.0


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (None, "not text"),
        (b'{"v": 1}', "not text"),
        (_doc(), "not text"),
        ("", "not JSON"),
        ("{", "not JSON"),
        ("{'v': 1}", "not JSON"),
        ("[]", "exactly"),
        ('"a string"', "exactly"),
        ("null", "exactly"),
        ("x" * (MAX_TEXT + 1), f"at most {MAX_TEXT}"),
        ("[" * 5000 + "]" * 5000, "not JSON"),
        (
            '{"v":1,"node":"n","at":0,"containers":{"a":' + "[" * 5000 + "]" * 5000 + "}}",
            "not JSON",
        ),
    ],
    ids=[
        "none",
        "bytes",
        "dict",
        "empty",
        "truncated",
        "single-quotes",
        "list",
        "string",
        "null",
        "oversized",
        "deep-list",
        "deep-in-entry",
    ],
)
def test_what_is_not_a_reservation_document(text: object, why: str) -> None:
    assert why in _refused(text)


@pytest.mark.parametrize(
    "doc",
    [
        {k: v for k, v in _doc().items() if k != "node"},
        {**_doc(), "extra": 1},
        {**_doc(), "V": 1},
        _doc(v=2),
        _doc(v=0),
        _doc(v=True),
        _doc(v="1"),
        _doc(v=None),
        _doc(node=""),
        _doc(node="n" * 254),
        _doc(node="node 1"),
        _doc(node="node/1"),
        _doc(node="nöde"),
        _doc(node=1),
        _doc(node=["node-1"]),
        _doc(at=True),
        _doc(at="1764660000"),
        _doc(at=-1),
        _doc(at=None),
        _doc(containers={}),
        _doc(containers=[]),
        _doc(containers=None),
        _doc(containers={"": _entry()["containers"]["train"]}),
        _doc(containers={"a b": _entry()["containers"]["train"]}),
        _doc(containers={"c" * 254: _entry()["containers"]["train"]}),
        _doc(containers={"train": None}),
        _doc(containers={"train": [PCI, "2g.15gb", 0, 1]}),
        _doc(
            containers={
                f"c{i}": {"card": PCI, "profile": "2g.15gb", "start": 0, "size": 1}
                for i in range(MAX_CONTAINERS + 1)
            }
        ),
        _entry(extra=1),
        {**_doc(), "containers": {"train": {"card": PCI, "profile": "2g.15gb", "start": 0}}},
        _entry(card="0000:09:00.8"),
        _entry(card="0000:09:00"),
        _entry(card="0000:0G:00.0"),
        _entry(card="0000:09:00.0 "),
        _entry(card="0000:09:00.0\n"),
        _entry(card="../../etc"),
        _entry(card=0),
        _entry(card=None),
        _entry(profile=""),
        _entry(profile="p" * 33),
        _entry(profile="2g/15gb"),
        _entry(profile="2g 15gb"),
        _entry(profile=2),
        _entry(start=True),
        _entry(start=False),
        _entry(start=0.0),
        _entry(start="0"),
        _entry(start=-1),
        _entry(start=64),
        _entry(start=None),
        _entry(size=0),
        _entry(size=True),
        _entry(size=1.0),
        _entry(size="1"),
        _entry(size=64),
        _entry(size=2**64),
    ],
    ids=lambda doc: json.dumps(doc)[-60:],
)
def test_malformed_fields_are_refused(doc: dict[str, Any]) -> None:
    _refused(json.dumps(doc))


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("where", ["at", "v", "start", "size"])
def test_json_constants_are_not_numbers(constant: str, where: str) -> None:
    # Python's json reads these non-standard constants unless told not to.
    placeholder = 1234567
    doc = _doc(**{where: placeholder}) if where in ("at", "v") else _entry(**{where: placeholder})
    text = json.dumps(doc).replace(str(placeholder), constant)
    assert constant in text
    _refused(text)


def test_a_time_beyond_floats_is_refused() -> None:
    # 1e400 reads as a float infinity.
    _refused(json.dumps(_doc(at=0)).replace('"at": 0', '"at": 1e400'))


def test_an_integer_time_beyond_floats_is_refused() -> None:
    _refused(json.dumps(_doc(at=10**400)))


def test_a_float_schema_is_refused() -> None:
    _refused(json.dumps(_doc(v=1.0)))


# Fuzz: whatever the annotation holds, decode answers a Reservation or ReservationError.
# Integers stay within 64 bits here: a longer integer time is the known failure above.
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | st.sampled_from([PCI, "2g.15gb", "node-1", "train", 0, 1, 2, 63, 64])
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_entry_keys = st.sampled_from(["card", "profile", "start", "size", "x"])
_top_keys = st.sampled_from(["v", "node", "at", "containers", "x"])


@st.composite
def _mutated(draw: st.DrawFn) -> str:
    """A well-formed document with a few fields replaced, added or removed."""
    doc = _doc()
    entry = dict(doc["containers"]["train"])
    for _entry in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            target, key = entry, draw(_entry_keys)
        else:
            target, key = doc, draw(_top_keys)
        if draw(st.integers(0, 4)) == 0:
            target.pop(key, None)
        else:
            target[key] = draw(_json)
    if "containers" in doc and isinstance(doc["containers"], dict) and "train" in doc["containers"]:
        doc["containers"] = {**doc["containers"], "train": entry}
    return json.dumps(doc)


def _decodes_or_refuses(text: str) -> None:
    try:
        reservation = decode(text)
    except ReservationError:
        return
    # What is accepted is well-typed and survives the extender's encoding unchanged.
    assert isinstance(reservation.node, str) and isinstance(reservation.made_at, float)
    for name, reserved in reservation.containers.items():
        assert isinstance(name, str) and isinstance(reserved, Reserved)
        assert isinstance(reserved.start, int) and not isinstance(reserved.start, bool)
        assert isinstance(reserved.size, int) and not isinstance(reserved.size, bool)
    assert decode(encode(reservation)).containers == reservation.containers


@settings(max_examples=400, deadline=None)
@given(_mutated())
def test_fuzz_mutated_documents(text: str) -> None:
    _decodes_or_refuses(text)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), _json.map(json.dumps)))
def test_fuzz_any_text(text: str) -> None:
    _decodes_or_refuses(text)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True),
        st.builds(
            Reserved,
            card=st.from_regex(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", fullmatch=True),
            profile=st.from_regex(r"[0-9]{1,2}g\.[0-9]{1,3}gb", fullmatch=True),
            start=st.integers(0, 63),
            size=st.integers(1, 63),
        ),
        min_size=1,
        max_size=MAX_CONTAINERS,
    ),
    st.integers(0, 2**40).map(lambda ms: ms / 1000),
)
def test_fuzz_round_trip(containers: dict[str, Reserved], made_at: float) -> None:
    reservation = Reservation("node-1", made_at, containers)
    assert decode(encode(reservation)) == reservation
