"""Mutated frames never crash the decoders: thousands of truncated, bit-flipped and
length-inflated bodies per API, at every version the codec speaks (the broker's APIs and the
consumer-group APIs not served yet), decode or raise KafkaDecodeError (never IndexError,
struct.error, UnicodeDecodeError, MemoryError...), and quickly."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka_group_samples import GROUP_SAMPLES
from kafka_message_samples import SAMPLES, encoded, versions

from raftlog.kafka.api import SUPPORTED_VERSIONS, ApiKey, decode_request_header
from raftlog.kafka.messages import decode_request
from raftlog.kafka.wire import KafkaDecodeError

MUTATIONS_PER_API = 4000
# Values that make a length or count field absurd: huge, negative, just past the end.
HOSTILE_INT32 = (0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x00010000, 0x00000100)
HOSTILE_INT16 = (0x7FFF, 0x8000, 0xFFFF, 0xFFFE, 0x0100)
ALL_SAMPLES = {**SAMPLES, **GROUP_SAMPLES}


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One mutation of `data`: a truncation, bit flips, a hostile int32 or int16 written over
    some position, a byte deleted or inserted, or garbage appended."""
    frame = bytearray(data)
    kind = rng.randrange(6)
    if kind == 0 or not frame:
        return bytes(frame[: rng.randrange(len(frame) + 1)])
    if kind == 1:
        for _ in range(rng.randint(1, 3)):
            frame[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
    elif kind == 2:
        at = rng.randrange(len(frame))
        frame[at : at + 4] = rng.choice(HOSTILE_INT32).to_bytes(4, "big")
    elif kind == 3:
        at = rng.randrange(len(frame))
        frame[at : at + 2] = rng.choice(HOSTILE_INT16).to_bytes(2, "big")
    elif kind == 4:
        at = rng.randrange(len(frame))
        if rng.random() < 0.5:
            del frame[at]
        else:
            frame.insert(at, rng.randrange(256))
    else:
        frame += rng.randbytes(rng.randint(1, 8))
    return bytes(frame)


def decoders(api_key: ApiKey) -> list[tuple[bytes, Callable[[bytes], Any]]]:
    """(a valid body, a function decoding a body like it) for the request and the response
    of `api_key` at every version the codec speaks."""
    make_request, make_response = ALL_SAMPLES[api_key]
    out: list[tuple[bytes, Callable[[bytes], Any]]] = []
    for version in versions(api_key):
        request, response = make_request(version), make_response(version)
        response_type = type(response)
        out.append(
            (
                encoded(request, version),
                lambda data, v=version: decode_request(
                    api_key, v, memoryview(data), 0, SUPPORTED_VERSIONS
                ),
            )
        )
        out.append(
            (
                encoded(response, version),
                lambda data, v=version, t=response_type: t.decode(data, v),
            )
        )
    return out


def only_decode_errors(decode: Callable[[bytes], Any], data: bytes) -> bool:
    """Decode `data`: True if it decoded, False if it raised KafkaDecodeError; anything else
    propagates and fails the test."""
    try:
        decode(data)
    except KafkaDecodeError:
        return False
    return True


@pytest.mark.parametrize("api_key", list(ALL_SAMPLES), ids=lambda key: key.name)
def test_mutated_bodies_only_raise_decode_errors(api_key: ApiKey) -> None:
    rng = random.Random(f"kafka-fuzz-{api_key.name}")
    cases = decoders(api_key)
    refused = 0
    started = time.monotonic()
    for i in range(MUTATIONS_PER_API):
        body, decode = cases[i % len(cases)]
        mutated = mutate(body, rng)
        try:
            if not only_decode_errors(decode, mutated):
                refused += 1
        except Exception as exc:
            raise AssertionError(f"{api_key.name} mutation {i}: {mutated.hex()}") from exc
    elapsed_s = time.monotonic() - started
    assert refused > MUTATIONS_PER_API // 5  # the mutations do break bodies
    assert elapsed_s < 20, f"{MUTATIONS_PER_API} decodes took {elapsed_s:.1f} s"


@pytest.mark.parametrize("api_key", list(ALL_SAMPLES), ids=lambda key: key.name)
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_random_bytes_only_raise_decode_errors(api_key: ApiKey, data: bytes) -> None:
    for _, decode in decoders(api_key):
        only_decode_errors(decode, data)


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=40))
def test_random_headers_only_raise_decode_errors(data: bytes) -> None:
    try:
        _, pos = decode_request_header(memoryview(data))
    except KafkaDecodeError:
        return
    assert 8 <= pos <= len(data)
