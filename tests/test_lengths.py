"""Length distributions: the lognormal fit, sampling, moments, files, and every bad input's typed error."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalk.equations import lengths as E
from chalk.equations import prefix_cache as PC
from chalk.errors import ChalkError, InputError, UnknownNameError
from chalk.specs.lengths import LengthDistribution, parse_lengths

# Issue 10: MLPerf DeepSeek-R1 outputs, mean 3,790 tokens; the brief's tail figure p99 = 15,000.
MEAN, P99 = 3790.0, 15000.0


# ----------------------------------------------------------------------------- the lognormal fit
def test_lognormal_fit_golden():
    """s = z - sqrt(z^2 - 2 ln(p99/mean)) with z = 2.32635: 0.69524; median = mean exp(-s^2/2) = 2976."""
    z = 2.3263478740408408  # Phi^-1(0.99)
    assert E.standard_normal_quantile(0.99) == pytest.approx(z, rel=1e-9)
    s_hand = z - math.sqrt(z * z - 2 * math.log(P99 / MEAN))
    d = parse_lengths("lognormal:mean=3790,p99=15000")
    assert d.kind == "lognormal"
    assert d.sigma == pytest.approx(s_hand, rel=1e-12)
    assert d.sigma == pytest.approx(0.69524, abs=1e-5)
    assert d.median == pytest.approx(2976.3, abs=0.5)
    assert d.quantile(0.99) == pytest.approx(P99, rel=1e-9)
    assert d.mean == MEAN


def test_lognormal_sample_matches_mean_and_p99():
    d = parse_lengths("lognormal:mean=3790,p99=15000")
    x = d.sample(400_000, np.random.default_rng(20261123))
    assert x.dtype.kind == "i" and x.min() >= 1
    assert x.mean() == pytest.approx(MEAN, rel=0.01)
    assert np.quantile(x, 0.99) == pytest.approx(P99, rel=0.02)
    assert np.mean(x.astype(float) ** 2) == pytest.approx(d.second_moment, rel=0.03)


def test_lognormal_from_median_reproduces_mlperf_shape():
    """mean 3,790 and median ~2,100 (issue 10): s = sqrt(2 ln(3790/2100)) = 1.0868; p99 ~ 26,300."""
    d = parse_lengths("lognormal:mean=3790,median=2100")
    assert d.sigma == pytest.approx(math.sqrt(2 * math.log(3790 / 2100)), rel=1e-12)
    assert d.median == pytest.approx(2100, rel=1e-9)
    assert d.p99 == pytest.approx(26_309, rel=1e-3)


def test_lognormal_sigma_form_and_other_quantile():
    d = parse_lengths("lognormal:mean=1000,sigma=0.5")
    assert d.second_moment == pytest.approx(1000 ** 2 * math.exp(0.25), rel=1e-12)
    d90 = parse_lengths("lognormal:mean=1000,p90=2000")
    assert d90.quantile(0.9) == pytest.approx(2000, rel=1e-9)


def test_second_moment_and_held_kv_formula():
    """E_t[context] = E[I] + E[O^2] / (2 E[O]); for a lognormal that is E[I] + (E[O]/2) exp(s^2)."""
    d = parse_lengths("lognormal:mean=3790,p99=15000")
    assert d.second_moment == pytest.approx(MEAN ** 2 * math.exp(d.sigma ** 2), rel=1e-12)
    held = float(E.mean_kv_tokens_per_slot(1000.0, d.mean, d.second_moment))
    assert held == pytest.approx(1000 + MEAN / 2 * math.exp(d.sigma ** 2), rel=1e-12)
    assert held > 1000 + MEAN / 2  # long outputs hold KV longer than the mean says
    c = parse_lengths(500)
    assert float(E.mean_kv_tokens_per_slot(100, c.mean, c.second_moment)) == pytest.approx(350.0)


def test_length_biased_average_matches_a_closed_loop_simulation():
    """Simulate one slot refilled back to back: the time-average of tokens held equals E[O^2]/(2E[O])."""
    d = parse_lengths("lognormal:mean=400,p99=2000")
    o = d.sample(20_000, np.random.default_rng(1)).astype(float)
    # a request of length O spends O steps holding 1..O of its own tokens: sum = O (O + 1) / 2
    time_avg = np.sum(o * (o + 1) / 2) / np.sum(o)
    assert time_avg == pytest.approx(float(E.mean_held_output_tokens(o.mean(), np.mean(o * o))) + 0.5, rel=1e-9)
    assert time_avg == pytest.approx(d.mean_held, rel=0.05)


def test_clipped_moments_are_the_served_lengths_moments():
    """E[min(L, c)] and E[min(L, c)^2]: a lognormal's partial moments against a 4M-draw sample (QA 2026-11-28: mean
    200, sigma 3 on a 128K model gave a slot 810,000 tokens of its own output and a one-sequence cap), the uniform
    and empirical forms exact, and no cap the uncut moments."""
    d = parse_lengths("lognormal:mean=200,sigma=3")
    m1, m2 = d.clipped_moments(131072)
    x = np.minimum(d.sample(4_000_000, np.random.default_rng(7)).astype(float), 131072)
    assert m1 == pytest.approx(x.mean(), rel=0.02) and m2 == pytest.approx((x * x).mean(), rel=0.05)
    assert m2 / (2 * m1) < 131072 < d.second_moment / (2 * d.mean)
    assert d.clipped_moments(1e30) == pytest.approx((d.mean, d.second_moment), rel=1e-9)
    assert parse_lengths("lognormal:mean=200,sigma=0").clipped_moments(150) == (150.0, 22500.0)
    u = parse_lengths("uniform:min=100,max=900")
    for c in (50, 100, 500, 500.5, 899, 900, 1e9):
        v = np.minimum(np.arange(100, 901, dtype=float), c)
        assert u.clipped_moments(c) == pytest.approx((v.mean(), (v * v).mean()), rel=1e-12)
    assert parse_lengths("constant:300").clipped_moments(200) == (200.0, 40000.0)
    with pytest.raises(InputError):
        u.clipped_moments(0)


def test_a_long_tail_past_the_context_keeps_the_engine_cap():
    """The engine cap is sized at the mean context a slot holds as served: a lognormal output tail past the model's
    context holds at most the context, so the cap stays in the tens, not 1 (QA 2026-11-28: simulate --rate 5 then
    reported 0.56 requests/s served and a 50-minute TTFT)."""
    from chalk.analyses.traffic.serving import _fixed_setup

    fx = _fixed_setup("llama-3.1-8b", "h200", layout="tp=1", input_len=512, output_len="lognormal:mean=200,sigma=3")
    assert 30 <= fx.cap <= 80
    narrow = _fixed_setup("llama-3.1-8b", "h200", layout="tp=1", input_len=512, output_len="lognormal:mean=200,sigma=1")
    assert narrow.cap > fx.cap  # a longer tail still holds more KV per slot


def test_uniform_and_constant():
    u = parse_lengths("uniform:min=100,max=900")
    x = u.sample(100_000, np.random.default_rng(2))
    assert x.min() >= 100 and x.max() <= 900
    assert u.mean == 500.0
    assert np.mean(x.astype(float) ** 2) == pytest.approx(u.second_moment, rel=0.01)
    c = parse_lengths("constant:500")
    assert c.kind == "constant" and c.mean == 500.0 and c.second_moment == 250_000.0
    assert np.all(c.sample(5, np.random.default_rng(0)) == 500)
    assert parse_lengths(2000).mean == 2000.0 and parse_lengths("2000").mean == 2000.0


def test_file_one_per_line_with_header(tmp_path: Path):
    f = tmp_path / "out.txt"
    f.write_text("output_len\n100\n200\n300\n400\n")
    d = parse_lengths(str(f))
    assert d.kind == "empirical" and d.mean == 250.0
    assert d.second_moment == pytest.approx((100**2 + 200**2 + 300**2 + 400**2) / 4)
    assert d.quantile(1.0) == 400.0
    assert set(d.sample(1000, np.random.default_rng(3))) <= {100, 200, 300, 400}


def test_file_csv_column(tmp_path: Path):
    f = tmp_path / "trace.csv"
    f.write_text("input,output\n1000,10\n2000,30\n")
    assert parse_lengths(f, column="output").mean == 20.0
    assert parse_lengths(str(f), column="input").mean == 1500.0
    with pytest.raises(InputError, match="2 columns"):
        parse_lengths(f)
    with pytest.raises(InputError, match="no column"):
        parse_lengths(f, column="nope")


def test_file_csv_column_named_after_a_colon(tmp_path: Path, monkeypatch):
    """QA 2026-11-28: a multi-column file asked for a column name that no command-line flag could give. FILE:COLUMN
    names it, where FILE exists; a distribution's 'family:key=value' still parses as one."""
    f = tmp_path / "trace.csv"
    f.write_text("input,output\n1000,10\n2000,30\n")
    assert parse_lengths(f"{f}:output").mean == 20.0
    monkeypatch.chdir(tmp_path)
    assert parse_lengths("trace.csv:input").mean == 1500.0
    with pytest.raises(InputError, match="no column 'nope'"):
        parse_lengths(f"{f}:nope")
    with pytest.raises(InputError, match="trace.csv:COLUMN"):
        parse_lengths(f)
    (tmp_path / "lognormal").write_text("5\n")  # a file named like a family does not shadow the family
    assert parse_lengths("lognormal:mean=100,sigma=0.5").mean == pytest.approx(100, rel=1e-9)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("spec, err", [
    ("lognormal:mean=3790", InputError),                 # no spread given
    ("lognormal:mean=3790;p99=15000", InputError),       # malformed separator
    ("lognormal:mean=,p99=15000", InputError),           # empty number
    ("lognormal:mean=abc,p99=15000", InputError),        # not a number
    ("lognormal:mean=0,p99=15000", InputError),          # mean <= 0
    ("lognormal:mean=-5,p99=15000", InputError),
    ("lognormal:mean=3790,p99=3000", InputError),        # p99 <= mean
    ("lognormal:mean=3790,p99=3790", InputError),
    ("lognormal:mean=100,p99=5000", InputError),         # no lognormal has that tail
    ("lognormal:mean=3790,p99=15000,sigma=1", InputError),  # over-determined
    ("lognormal:mean=3790,p99=15000,foo=1", InputError),    # unknown key
    ("lognormal:mean=3790,median=5000", InputError),     # median above mean
    ("lognormal:mean=nan,p99=15000", InputError),
    ("gamma:mean=3790", UnknownNameError),               # unknown family
    ("uniform:min=900,max=100", InputError),
    ("uniform:min=1.5,max=100", InputError),
    ("constant:0", InputError),
    ("constant:-3", InputError),
    ("0", InputError),
    ("-100", InputError),
    ("inf", InputError),
    ("", InputError),
    (0, InputError),
    (-1.5, InputError),
    (float("nan"), InputError),
    (True, InputError),
    (None, InputError),
])
def test_bad_specs_raise_typed_errors(spec, err):
    with pytest.raises(err) as e:
        parse_lengths(spec)
    assert isinstance(e.value, ChalkError)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("content, match", [
    ("", "empty"),
    ("\n\n", "empty"),
    ("len\n", "header but no lengths"),
    ("100\nabc\n300\n", "not a number"),
    ("100\n-5\n", "positive"),
    ("100\n0\n", "positive"),
    ("100\nnan\n", "positive"),
])
def test_bad_files_raise_input_error(tmp_path: Path, content, match):
    f = tmp_path / "bad.csv"
    f.write_text(content)
    with pytest.raises(InputError, match=match):
        parse_lengths(str(f))


def test_unreadable_file(tmp_path: Path):
    with pytest.raises(InputError, match="not found"):
        parse_lengths(str(tmp_path / "missing.csv"))
    with pytest.raises(InputError, match="a folder, not a regular file .*at most 64 MB"):
        parse_lengths(str(tmp_path))  # a directory
    binf = tmp_path / "bin.csv"
    binf.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(InputError):
        parse_lengths(str(binf))


def test_quantile_out_of_range():
    with pytest.raises(InputError):
        parse_lengths(100).quantile(1.5)


# ----------------------------------------------------------------------------- invariants
@settings(max_examples=60, deadline=None)
@given(mean=st.floats(10, 1e5), ratio=st.floats(1.01, 14.9))
def test_fit_reproduces_its_inputs(mean, ratio):
    d = parse_lengths(f"lognormal:mean={mean!r},p99={mean * ratio!r}")
    assert d.quantile(0.99) == pytest.approx(mean * ratio, rel=1e-7)
    assert d.median <= d.mean  # a lognormal's median never exceeds its mean
    assert d.second_moment >= d.mean ** 2  # E[L^2] >= E[L]^2
    assert d.mean_held >= d.mean / 2


def test_distribution_is_frozen():
    d = parse_lengths("lognormal:mean=3790,p99=15000")
    with pytest.raises(Exception):
        d.mean = 1.0  # type: ignore[misc]
    assert isinstance(d, LengthDistribution)
