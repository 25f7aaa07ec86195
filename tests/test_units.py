"""Unit strings from scenario files convert exactly to SI, and bad ones say what is accepted."""

import math

import pytest

from simdist.units import (
    UnitError,
    format_bandwidth,
    format_duration,
    format_flops,
    format_size,
    parse_bandwidth,
    parse_duration,
    parse_flops,
    parse_size,
)

CONVERSIONS = [
    (parse_bandwidth, "10Gbit/s", 1.25e9),
    (parse_bandwidth, "10Gbps", 1.25e9),
    (parse_bandwidth, "10 Gbit/s", 1.25e9),
    (parse_bandwidth, "100Mbit/s", 12.5e6),
    (parse_bandwidth, "1.25GB/s", 1.25e9),
    (parse_bandwidth, "300GB/s", 300e9),
    (parse_bandwidth, "500MB/s", 500e6),
    (parse_bandwidth, "1.5GiB/s", 1.5 * 2**30),
    (parse_bandwidth, "1e9B/s", 1e9),
    (parse_bandwidth, "1kbit/s", 125.0),
    (parse_bandwidth, "1e9", 1e9),
    (parse_bandwidth, 1e9, 1e9),
    (parse_bandwidth, 0, 0.0),
    (parse_duration, "50us", 5e-5),
    (parse_duration, "50µs", 5e-5),
    (parse_duration, "50 μs", 5e-5),
    (parse_duration, "2ms", 0.002),
    (parse_duration, "1.5s", 1.5),
    (parse_duration, "100ns", 1e-7),
    (parse_duration, "2min", 120.0),
    (parse_duration, "1h", 3600.0),
    (parse_duration, 0.25, 0.25),
    (parse_size, "1GB", 1e9),
    (parse_size, "4MiB", 4194304.0),
    (parse_size, "512KB", 512e3),
    (parse_size, "100B", 100.0),
    (parse_size, 2048, 2048.0),
    (parse_flops, "15.7TFLOP/s", 15.7e12),
    (parse_flops, "100GFLOPS", 100e9),
    (parse_flops, "1e12", 1e12),
]


@pytest.mark.parametrize(("parse", "text", "expected"), CONVERSIONS)
def test_conversion_is_exact(parse, text, expected):
    assert parse(text) == expected


REJECTIONS = [
    (parse_bandwidth, "10 Gigs", "unknown unit 'Gigs'", "'10Gbit/s'"),
    (parse_bandwidth, "-1Gbit/s", "negative", "bytes/s"),
    (parse_bandwidth, -5, "negative", "'1.25GB/s'"),
    (parse_bandwidth, float("nan"), "finite", "'10Gbit/s'"),
    (parse_bandwidth, float("inf"), "finite", "'10Gbit/s'"),
    (parse_bandwidth, "1e999", "finite", "'10Gbit/s'"),
    (parse_bandwidth, True, "got True", "bytes/s"),
    (parse_bandwidth, "fast", "got 'fast'", "'10Gbit/s'"),
    (parse_bandwidth, "10ms", "unknown unit 'ms'", "Gbit/s"),
    (parse_duration, "5 parsecs", "unknown unit", "'50us'"),
    (parse_duration, [1], "got [1]", "seconds"),
    (parse_size, "4 MiBs", "unknown unit", "'4MiB'"),
    (parse_size, None, "got None", "bytes"),
    (parse_flops, "10 TFLOPs/s", "unknown unit", "'15.7TFLOP/s'"),
]


@pytest.mark.parametrize(("parse", "value", "problem", "hint"), REJECTIONS)
def test_rejection_lists_accepted_forms(parse, value, problem, hint):
    with pytest.raises(UnitError) as info:
        parse(value)
    message = str(info.value)
    assert problem in message
    assert hint in message
    assert "expected" in message


def test_unit_error_is_a_value_error():
    assert issubclass(UnitError, ValueError)


@pytest.mark.parametrize(
    ("fmt", "value", "text"),
    [
        (format_bandwidth, 1.25e9, "1.25 GB/s"),
        (format_bandwidth, 300e9, "300 GB/s"),
        (format_bandwidth, 0.0, "0 B/s"),
        (format_duration, 5e-5, "50 µs"),
        (format_duration, 1.5e-3, "1.5 ms"),
        (format_duration, 2.0, "2 s"),
        (format_duration, 0.0, "0 s"),
        (format_duration, 1e-7, "100 ns"),
        (format_size, 4194304, "4.0 MiB"),
        (format_size, 100, "100 B"),
        (format_flops, 15.7e12, "15.7 TFLOP/s"),
    ],
)
def test_format(fmt, value, text):
    assert fmt(value) == text


@pytest.mark.parametrize("seconds", [1e-7, 5e-5, 2e-3, 1.5, 90.0, 7200.0])
def test_format_duration_round_trips_through_parse(seconds):
    assert math.isclose(parse_duration(format_duration(seconds).replace(" ", "")), seconds)
