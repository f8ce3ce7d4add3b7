"""Request traces (chalk CSV, Azure 2023 CSV, Mooncake FAST'25 JSONL), prefix-cache hits replayed from Mooncake's
block ids through an LRU cache, and the faces that take a trace: `simulate --trace` and `plan --trace`."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from chalk.analyses.planning.plan import plan
from chalk.analyses.traffic.prefix_hits import capacity_blocks_for, lru_prefix_hits, trace_prefix_hits
from chalk.equations import prefix_cache as E
from chalk.errors import ChalkError, InputError, SpecError
from chalk.specs.traces import FORMATS, MOONCAKE_BLOCK_TOKENS, read_trace

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
AZURE_CONV, AZURE_CODE = TRACES / "azure-2023-conv.csv", TRACES / "azure-2023-code.csv"
MOON_CONV, MOON_SYN = TRACES / "mooncake-fast25-conversation.jsonl", TRACES / "mooncake-fast25-synthetic.jsonl"


def _need(p: Path):
    if not p.exists():
        pytest.skip(f"{p} not present (the public traces live in ../shared/traces)")
    return p


def run(*args):
    p = subprocess.run([sys.executable, "-m", "chalk", *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


# ----------------------------------------------------------------------------------------------- the public traces
@pytest.mark.parametrize("name,fmt,n,mean_in,mean_out,span_s", [
    # golden counts and means: ../shared/traces/README.md (requests, mean input / output tokens, span)
    ("azure-2023-conv.csv", "azure", 19_366, 1_155, 211, 3600),
    ("azure-2023-code.csv", "azure", 8_819, 2_048, 28, 3600),
    ("mooncake-fast25-conversation.jsonl", "mooncake", 12_031, 12_035, 343, 3600),
    ("mooncake-fast25-synthetic.jsonl", "mooncake", 3_993, 15_325, 149, 17 * 60),
])
def test_public_traces_parse_with_the_readme_counts_and_means(name, fmt, n, mean_in, mean_out, span_s):
    t = read_trace(_need(TRACES / name))
    assert t.format == fmt and len(t) == n and t.source.endswith(name)
    assert t.input_len.mean() == pytest.approx(mean_in, abs=0.5)
    assert t.output_len.mean() == pytest.approx(mean_out, abs=0.5)
    assert t.span_s == pytest.approx(span_s, rel=0.05)  # "1 hour", "17 min"
    assert t.arrival_s[0] == 0.0 and np.all(np.diff(t.arrival_s) >= 0)
    assert t.input_len.dtype == np.int64 and t.output_len.min() >= 1
    if fmt == "mooncake":  # every prompt has ceil(input / 512) blocks, stored flat with offsets
        assert t.block_tokens == MOONCAKE_BLOCK_TOKENS and t.hash_ids.dtype == np.int64
        assert t.hash_offsets.shape == (n + 1,) and t.hash_offsets[-1] == t.hash_ids.size
        assert np.array_equal(np.diff(t.hash_offsets), -(-t.input_len // 512))
    else:
        assert not t.has_blocks and t.hash_ids is None


def test_azure_wall_clock_becomes_seconds_from_the_first_request():
    t = read_trace(_need(AZURE_CONV))
    # first two rows: 18:15:46.6805900 and 18:15:50.9951690
    assert t.arrival_s[1] == pytest.approx(50.9951690 - 46.6805900, abs=1e-6)
    assert t.input_len[:2].tolist() == [374, 396] and t.output_len[:2].tolist() == [44, 109]


def test_speedup_scales_the_rate_and_peak_is_at_least_the_mean():
    t1, t4 = read_trace(_need(AZURE_CONV)), read_trace(AZURE_CONV, speedup=4)
    assert t4.speedup == 4 and np.allclose(t4.arrival_s * 4, t1.arrival_s)
    assert t4.mean_rate_per_s == pytest.approx(4 * t1.mean_rate_per_s)
    assert t1.mean_rate_per_s == pytest.approx((19_366 - 1) / t1.span_s)
    assert t1.peak_rate_per_s(60) >= t1.mean_rate_per_s and t1.peak_rate_per_s(1e9) == t1.mean_rate_per_s
    h = read_trace(_need(MOON_CONV)).head(100)
    assert len(h) == 100 and h.hash_offsets.size == 101 and h.hash_ids.size == h.hash_offsets[-1]


# ----------------------------------------------------------------------------------------------- detection
def _write(tmp_path, text, name="trace.txt"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_format_is_told_by_the_first_line_not_the_name(tmp_path):
    chalk = _write(tmp_path, "arrival_s,input_len,output_len\n0.5,10,3\n0.1,20,1\n", "a.jsonl")
    azure = _write(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.50,10,2\n"
                             "2023-11-16 18:15:47.25,20,4\n", "b.jsonl")
    moon = _write(tmp_path, '{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]}\n'
                            '{"timestamp": 1500, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n', "c.csv")
    a, b, c = read_trace(chalk), read_trace(azure), read_trace(moon)
    assert (a.format, b.format, c.format) == ("chalk", "azure", "mooncake")
    assert a.arrival_s.tolist() == [0.1, 0.5] and a.input_len.tolist() == [20, 10]  # chalk's own CSV is sorted
    assert b.arrival_s.tolist() == [0.0, 0.75] and b.input_len.tolist() == [10, 20]
    assert c.arrival_s.tolist() == [0.0, 1.5] and c.blocks(0).tolist() == [1, 2] and c.blocks(1).tolist() == [1]


@pytest.mark.parametrize("text,needle", [
    ("", "empty trace"),
    ("\n  \n", "empty trace"),
    ("time,prompt,answer\n1,2,3\n", "unknown trace format"),
    ("arrival_s,input_len,output_len\n", "no requests"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "no requests"),
    ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n", "missing column(s) GeneratedTokens"),
    # negative or backwards timestamps
    ('{"timestamp": -5, "input_length": 10, "output_length": 2}\n', "line 1: timestamp must be a time >= 0"),
    ('{"timestamp": 10, "input_length": 10, "output_length": 2}\n\n'
     '{"timestamp": 5, "input_length": 10, "output_length": 2}\n', "line 3: timestamp goes backwards"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,10,2\n2023-11-16 18:15:46,10,2\n",
     "line 3: TIMESTAMP goes backwards"),
    ("arrival_s,input_len,output_len\n-1,10,5\n", "line 2: arrival_s"),
    # lengths of 0 or not integers
    ('{"timestamp": 0, "input_length": 0, "output_length": 2}\n', "line 1: input_length must be a positive integer"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 2.5}\n', "line 1: output_length must be a positive"),
    ('{"timestamp": 0, "input_length": true, "output_length": 2}\n', "line 1: input_length must be a positive"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,0\n", "line 2: GeneratedTokens must be a "
                                                                          "positive integer"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1.5,3\n", "line 2: ContextTokens"),
    ("arrival_s,input_len,output_len\n0.1,10,0\n", "line 2: output_len"),
    # lengths past int64 wrapped round and were called 'not positive' (QA 2026-11-28)
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,9223372036854775807,3\n",
     "line 2: ContextTokens must be at most 1,000,000,000,000,000 tokens"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,1e308\n", "line 2: GeneratedTokens must be at"),
    ('{"timestamp": 0, "input_length": 99999999999999999999, "output_length": 2}\n', "line 1: input_length must be at"),
    # malformed lines
    ('{"timestamp": 0, "input_length": 10, "output_length": 2}\n{"timestamp": 1, "input_len\n', "line 2: not a JSON"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 2}\n[1, 2]\n', "line 2: expected a JSON object"),
    ('{"timestamp": 0, "output_length": 2}\n', "line 1: missing key(s) input_length"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1, "a"]}\n', "line 1: hash_ids"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\nyesterday,10,2\n", "line 3: TIMESTAMP"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2,9\n", "malformed CSV (line 2"),
])
def test_bad_traces_raise_one_line_spec_errors(tmp_path, text, needle):
    p = _write(tmp_path, text)
    with pytest.raises(SpecError) as e:
        read_trace(p)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg and str(p) in msg, msg


def test_an_unknown_format_names_the_accepted_ones(tmp_path):
    with pytest.raises(SpecError) as e:
        read_trace(_write(tmp_path, "hello world\n"))
    assert all(v in str(e.value) for v in FORMATS.values())
    with pytest.raises(SpecError, match="not UTF-8"):
        p = tmp_path / "bin"
        p.write_bytes(b"\xff\xfe\x00\x81garbage")
        read_trace(p)


def test_reads_are_bounded(tmp_path):
    with pytest.raises(SpecError, match="not a regular file"):
        read_trace(tmp_path)  # a directory
    if os.path.exists("/dev/zero"):
        with pytest.raises(SpecError, match="not a regular file .*at most 1 GB"):
            read_trace("/dev/zero")
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        with pytest.raises(SpecError, match="not a regular file"):  # refused without opening it (no hang)
            read_trace(fifo)
    big = _write(tmp_path, "arrival_s,input_len,output_len\n" + "0.1,10,5\n" * 100)
    with pytest.raises(SpecError, match=r"931 bytes; a trace must be a regular file of at most 500 bytes"):
        read_trace(big, max_bytes=500)
    with pytest.raises(SpecError, match="no such file"):
        read_trace(tmp_path / "nope.csv")
    for bad in (0, -2, float("nan"), "fast"):
        with pytest.raises(InputError):
            read_trace(big, speedup=bad)


# ----------------------------------------------------------------------------------------------- prefix hits
def _flat(blocks):
    offs = np.cumsum([0] + [len(b) for b in blocks])
    return np.array([h for b in blocks for h in b], dtype=np.int64), offs


def test_lru_hand_made_example():
    """Block size 10; capacity 3 blocks. Request by request (cache shown most recent last after each):
    r0 [1,2,3]   miss            cache 3 2 1
    r1 [1,2,4]   hits 1,2 -> 20  cache 3 4 2 1       -> evict 3: 4 2 1
    r2 [1,3]     hits 1, 3 gone  cache 4 2 3 1       -> evict 4: 2 3 1
    r3 [5,2]     leading miss    (2 is cached, but after a miss it cannot be used): 0; cache 3 1 2 5 -> 1 2 5
    r4 [1,2,5]   all three hit but the prompt has 25 tokens: 24 cached (one token is prefilled)
    """
    ids, offs = _flat([[1, 2, 3], [1, 2, 4], [1, 3], [5, 2], [1, 2, 5]])
    P = np.array([30, 30, 20, 20, 25])
    h = lru_prefix_hits(ids, offs, P, 10, 3)
    assert h.cached_tokens.tolist() == [0, 20, 10, 0, 24]
    assert h.hit_rate == pytest.approx(54 / 125) and h.requests_with_hits == 3
    assert lru_prefix_hits(ids, offs, P, 10, 0).cached_tokens.tolist() == [0] * 5  # no cache, no hits
    # unlimited: every block seen before, in a leading run, hits
    assert lru_prefix_hits(ids, offs, P, 10, math.inf).cached_tokens.tolist() == [0, 20, 19, 0, 24]
    # blocks past the prompt do not count: r0 truncated to 5 tokens keeps one block
    h = lru_prefix_hits(ids, offs, np.array([5, 30, 20, 20, 25]), 10, math.inf)
    assert h.cached_tokens.tolist() == [0, 10, 10, 0, 24]


def _unlimited_reference(blocks, P, b):
    seen, out = set(), []
    for bl, p in zip(blocks, P):
        bl = bl[: -(-p // b)]
        k = 0
        for x in bl:
            if x not in seen:
                break
            k += 1
        out.append(min(k * b, p - 1))
        seen.update(bl)
    return out


requests_st = st.lists(st.tuples(st.lists(st.integers(0, 12), min_size=0, max_size=6), st.integers(1, 80)),
                       min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(reqs=requests_st, caps=st.lists(st.integers(0, 30), min_size=2, max_size=5))
def test_hit_rate_never_falls_as_the_cache_grows(reqs, caps):
    blocks, P = [r[0] for r in reqs], np.array([r[1] for r in reqs])
    ids, offs = _flat(blocks)
    rates, prev = [], None
    for c in sorted(caps) + [math.inf]:
        h = lru_prefix_hits(ids, offs, P, 8, c)
        assert np.all(h.cached_tokens >= 0) and np.all(h.cached_tokens <= P - 1)
        if prev is not None:  # LRU is a stack algorithm: per request too, not only in total
            assert np.all(h.cached_tokens >= prev)
        prev = h.cached_tokens
        rates.append(h.hit_rate)
    assert rates == sorted(rates)
    assert prev.tolist() == _unlimited_reference(blocks, P.tolist(), 8)
    assert lru_prefix_hits(ids, offs, P, 8, 0).hit_rate == 0.0


def test_mooncake_conversation_hits_are_quick_and_bounded_by_the_traces_reuse():
    import time

    t = read_trace(_need(MOON_CONV))
    t0 = time.perf_counter()
    small = trace_prefix_hits(t, capacity_blocks_for(426_496, 512))  # llama-3.1-8b's KV on one H100 (833 blocks)
    assert time.perf_counter() - t0 < 3.0
    big, full = trace_prefix_hits(t, 10_000), trace_prefix_hits(t, math.inf)
    assert 0 < small.hit_rate < big.hit_rate < full.hit_rate < 1
    assert small.capacity_blocks == 833
    assert full.hit_rate == pytest.approx(0.3736, abs=0.001)  # measured on this trace; every prompt shares block 0
    assert trace_prefix_hits(read_trace(_need(AZURE_CONV)), 1000) is None  # no block ids, no replay


def test_prefix_cache_equations():
    assert E.prefix_cached_tokens(3, 512, 2000).item() == 1536 and E.prefix_cached_tokens(4, 512, 2000).item() == 1999
    assert E.cache_capacity_blocks(426_784.3, 512) == 833 and E.cache_capacity_blocks(math.inf, 512) == math.inf
    assert E.token_hit_rate([0, 50], [100, 100]) == 0.25 and E.token_hit_rate([], []) == 0.0
    with pytest.raises(InputError):
        lru_prefix_hits([1], [0, 1], [10], 8, -1)
    with pytest.raises(InputError):
        lru_prefix_hits([1], [0, 2], [10], 8, 4)


# ----------------------------------------------------------------------------------------------- simulate --trace
def test_simulate_replays_the_mooncake_conversation_with_prefix_hits():
    _need(MOON_CONV)
    rc, out, err = run("simulate", "--trace", str(MOON_CONV), "-m", "llama-3.1-8b", "-H", "h100-sxm",
                       "--layout", "tp=1", "-n", "3000", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["trace"]["format"] == "mooncake" and d["trace"]["requests"] == 3000 and d["n_requests"] == 3000
    assert 0 < d["prefix_cache_hit_rate"] < 1 and d["prefix_cache"]["block_tokens"] == 512
    assert d["prefix_cache"]["capacity_blocks"] == 833  # the KV memory left on one H100 after 16 GB of weights
    assert 0 < d["ttft_p50_s"] <= d["ttft_p99_s"] and 0 < d["tpot_p50_s"] <= d["tpot_p99_s"]
    assert (d["model"], d["chip"], d["layout"], d["replica_gpus"], d["precision"], d["kv_precision"]) == \
        ("llama-3.1-8b", "h100-sxm", "TP1", 1, "bf16", "bf16")


def test_a_kv_capacity_past_the_replicas_memory_is_said_to_be_hypothetical():
    """20M tokens of KV (2.6 TB) on one H200 was replayed as its memory, 31.8% of prompt tokens hitting where its
    memory gives 4.6% (QA 2026-11-28): the note says how far past the memory it is, and whose capacity it is."""
    _need(MOON_CONV)
    import chalk

    s = chalk.simulate("llama-3.1-8b", "h200", layout="tp=1", trace=str(MOON_CONV), requests=2000, speedup=0.2,
                       kv_capacity_tokens=20_000_000)
    assert any("a hypothetical cache" in n for n in s.notes)
    assert any("the KV capacity given" in n for n in s.notes)
    own = chalk.simulate("llama-3.1-8b", "h200", layout="tp=1", trace=str(MOON_CONV), requests=2000, speedup=0.2)
    assert not any("hypothetical" in n for n in own.notes) and own.prefix_cache_hit_rate < s.prefix_cache_hit_rate


def test_prefix_hits_reach_the_simulator_and_cut_prefill():
    import chalk

    _need(MOON_CONV)
    kw = dict(trace=MOON_CONV, layout="tp=8", requests=1500, speedup=0.5)
    on, off = chalk.simulate("llama-3.1-8b", "h100-sxm", **kw), \
        chalk.simulate("llama-3.1-8b", "h100-sxm", prefix_cache=False, **kw)
    assert on.prefix_cache_hit_rate > 0.05 and off.prefix_cache_hit_rate is None
    assert on.busy_time_s < off.busy_time_s and on.ttft_p50_s < off.ttft_p50_s


@pytest.mark.parametrize("text", [
    "",
    "hello\n",
    '{"timestamp": -1, "input_length": 10, "output_length": 2}\n',
    '{"timestamp": 9, "input_length": 10, "output_length": 2}\n'
    '{"timestamp": 1, "input_length": 10, "output_length": 2}\n',
    "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,0,2\n",
])
def test_simulate_cli_refuses_bad_traces_in_one_line(tmp_path, text):
    p = _write(tmp_path, text)
    rc, out, err = run("simulate", "--trace", str(p), "-m", "llama-3.1-8b", "-H", "h100-sxm", "--layout", "tp=1")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_simulate_cli_refuses_a_fifo_without_hanging(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    rc, _, err = run("simulate", "--trace", str(fifo), "-m", "llama-3.1-8b", "-H", "h100-sxm", "--layout", "tp=1")
    assert rc == 2 and "not a regular file" in err and len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------------------------- plan --trace
def test_plan_sizes_a_fleet_for_the_azure_conversation_trace():
    _need(AZURE_CONV)
    rc, out, err = run("plan", "--trace", str(AZURE_CONV), "-m", "llama-3.1-70b", "-H", "h100-sxm", "--mode",
                       "aggregated", "--no-launch", "--json")
    assert rc == 0, err
    d = json.loads(out)
    t = d["trace"]
    peak = read_trace(AZURE_CONV).peak_rate_per_s(60)
    assert t["format"] == "azure" and t["requests"] == 19_366 and t["peak_rate_per_s"] == pytest.approx(peak)
    assert d["demand"]["kind"] == "rate" and d["demand"]["value"] == pytest.approx(peak)
    assert t["mean_rate_per_s"] < peak and t["prefix_cache_hit_rate_unlimited"] is None
    assert d["input_len"] == pytest.approx(1154.7, abs=0.1) and d["output_len"] == pytest.approx(211.1, abs=0.1)
    assert d["options"][0]["gpus"] >= 1 and any("busiest 60 s" in n for n in d["notes"])


def test_an_open_loop_replay_never_holds_more_kv_than_the_replica_has():
    """QA sweep 2026-11-27: admission was bounded only by a sequence cap sized on mean lengths, so heavy-tailed and
    traced prompts overfilled the replica's KV memory (Llama-3.1-8B on one H100: a peak of 905,272 tokens against
    426,496 on the Mooncake conversation trace, 1.7x on a lognormal tail). The replay now admits a request only when
    its whole KV fits beside the others."""
    rc, out, err = run("simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--layout", "tp=1", "--rate", "2", "-n",
                       "3000", "--input-len", "lognormal:mean=8000,p99=100000", "--output-len", "300", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert 0 < d["peak_kv_tokens"] <= d["kv_capacity_tokens"] < 5e5


def test_plan_trace_launch_admits_the_traces_longest_request():
    """QA sweep 2026-11-27: the launch's --max-model-len was the 99.9th-percentile prompt plus output (7,168 for the
    Azure conversation trace), so the trace's 7 longer requests (up to 14,089 prompt tokens) would be refused by the
    engine it launched. A bounded (empirical) length distribution now admits its longest request."""
    import re

    _need(AZURE_CONV)
    rc, out, err = run("plan", "--trace", str(AZURE_CONV), "-m", "llama-3.1-70b", "-H", "h100-sxm", "--mode",
                       "aggregated", "--engine", "vllm", "--json")
    assert rc == 0, err
    t = read_trace(AZURE_CONV)
    longest = int(np.max(t.input_len) + np.max(t.output_len))
    lens = {int(x) for x in re.findall(r"--max-model-len (\d+)", json.dumps(json.loads(out)["options"]))}
    assert lens and min(lens) >= longest, (lens, longest)


def test_plan_sizes_a_trace_cut_to_the_context_at_its_own_lengths():
    """QA 2026-11-28: the Mooncake synthetic trace, cut pair by pair to Llama-3.1-8B's context when read, was cut
    again as two unpaired distributions: a long prompt drawn beside an unrelated output crossed the context, and the
    plan sized 14,715 prompt tokens (a resample) where the trace holds 15,189. It sizes the trace's own lengths."""
    _need(MOON_SYN)
    rc, out, err = run("plan", "--trace", str(MOON_SYN), "-m", "llama-3.1-8b", "-H", "h100-sxm", "--engine", "vllm",
                       "-p", "bf16", "--mode", "aggregated", "--no-launch", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["input_len"] == pytest.approx(d["trace"]["input_len_mean"], rel=1e-9)
    assert d["output_len"] == pytest.approx(d["trace"]["output_len_mean"], rel=1e-9)


def test_plan_trace_replay_states_in_flight_and_rate_over_its_busiest_window(tmp_path):
    """QA 2026-11-28: a trace of 8 requests/s with one minute at 20 printed 'its replay held 38' in flight per replica
    beside 85 sized: the percentiles were over the busiest minute, the in-flight count and the rate over each
    replica's steady window of the quiet hour around it. Both are now over the measured window."""
    rng, x, rows = np.random.default_rng(1), 0.0, ["arrival_s,input_len,output_len"]
    while x < 600:
        x += rng.exponential(1 / (20 if 300 <= x < 360 else 8))
        rows.append(f"{x:.4f},1000,200")
    f = tmp_path / "burst.csv"
    f.write_text("\n".join(rows) + "\n")
    o = plan("llama-3.1-8b", "h100-sxm", trace=str(f), engine="vllm", precision="bf16", modes=("aggregated",),
             curves=False)["options"][0]
    sim = o["simulated"]
    assert sim["latency_window"]["kind"] == "peak"
    assert sim["mean_in_flight_per_replica"] == pytest.approx(o["concurrency_per_replica"], rel=0.15)
    peak = o["requests_per_s"] / o["replicas"]  # the busiest minute's rate, per replica
    assert sim["output_tokens_per_s_per_replica"] == pytest.approx(peak * 200, rel=0.15)


def test_plan_trace_costs_the_tokens_its_busiest_window_serves():
    """QA 2026-11-28: the cost per output token was the busiest minute's rate times the whole trace's mean output
    (1,837 output tokens/s on the Azure conversation trace, whose busiest minute's requests ask 1,120 and no minute
    more than 1,639), so $ per M tokens came out ~36% low. The window's own requests' outputs count now, and the
    replay of that window serves what is costed."""
    _need(AZURE_CONV)
    r = plan("llama-3.1-8b", "h100-sxm", trace=str(AZURE_CONV), engine="vllm", modes=("aggregated",),
             ttft_p99_s=1.0, tpot_p99_s=0.05, curves=False)
    o, t = r["options"][0], r["trace"]
    assert o["output_tokens_per_s"] == pytest.approx(t["peak_output_tokens_per_s"], rel=1e-9)
    assert t["peak_output_tokens_per_s"] == pytest.approx(t["peak_rate_per_s"] * t["peak_window_output_len_mean"])
    assert o["output_tokens_per_s"] < t["peak_rate_per_s"] * t["output_len_mean"] * 0.8  # this trace's busiest minute
    served = o["simulated"]["output_tokens_per_s_per_replica"] * o["replicas"]
    assert served == pytest.approx(o["output_tokens_per_s"], rel=0.02)
    assert o["usd_per_mtok_output"] == pytest.approx(o["usd_per_hour"] / 3600 / o["output_tokens_per_s"] * 1e6)


def test_simulate_replays_a_trace_stamped_in_epoch_seconds_as_one_from_zero(tmp_path):
    """QA 2026-11-28: a trace whose arrival_s are Unix epoch seconds (1.7e9) was refused by simulate as 'past 30
    years' while plan sized the same file. simulate replays it on its first request's clock, as the same trace
    starting at 0."""
    from chalk.api import simulate

    rng = np.random.default_rng(0)
    a = np.cumsum(rng.exponential(0.2, 3000))
    for name, t0 in (("zero.csv", 0.0), ("epoch.csv", 1.7e9)):
        (tmp_path / name).write_text("arrival_s,input_len,output_len\n" + "".join(
            f"{t0 + x:.3f},500,100\n" for x in a))
    z, e = (simulate("llama-3.1-8b", "h100-sxm", layout="tp=1", trace=str(tmp_path / n)) for n in
            ("zero.csv", "epoch.csv"))
    for k in ("ttft_p50_s", "ttft_p99_s", "tpot_p99_s", "requests_per_s"):
        assert getattr(e.result, k) == pytest.approx(getattr(z.result, k), rel=1e-6), k


def test_a_mooncake_trace_without_block_ids_states_no_hit_rate(tmp_path):
    """QA 2026-11-28: a Mooncake JSONL with no hash_ids (they are optional per line) was read as carrying empty
    prefix blocks, and simulate reported a computed 0.0% prefix-cache hit rate. It has no blocks: no hit rate."""
    f = tmp_path / "noids.jsonl"
    f.write_text("".join(json.dumps({"timestamp": i * 100, "input_length": 500, "output_length": 50}) + "\n"
                         for i in range(200)))
    t = read_trace(f)
    assert t.format == "mooncake" and not t.has_blocks
    assert read_trace(MOON_CONV).has_blocks if MOON_CONV.exists() else True
    rc, out, err = run("simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--layout", "tp=1", "--trace", str(f),
                       "--json")
    assert rc == 0, err
    assert json.loads(out)["prefix_cache"] is None


def test_requests_beyond_the_context_are_said_to_be():
    """QA sweep 2026-11-27: `plan` and `throughput` sized 201K-token requests for a 128K-context model without a word,
    and the plan launched vLLM with --max-model-len 131072, which refuses every one of them. They are timed (measured
    runs past a config's context exist: TensorRT-LLM's Llama-2-70B at 128 + 4,096) and a note says so."""
    for cmd in (("plan", "--users", "10", "--no-launch"), ("throughput",)):
        rc, out, err = run(*cmd, "-m", "llama-3.1-8b", "-H", "h100-sxm", "--input-len", "200000", "--output-len",
                           "1000", "--json")
        assert rc == 0, err
        assert any("131,072-token context" in n for n in json.loads(out)["notes"]), cmd


def test_plan_trace_states_the_unlimited_prefix_reuse_and_refuses_mixed_demand(tmp_path):
    import chalk
    from chalk.analyses.planning.trace_demand import demand_from_trace
    from chalk.specs.catalog import as_model

    d = demand_from_trace(_need(MOON_SYN), as_model("llama-3.1-8b"))
    # measured: 65.1% of prompt tokens repeat an earlier prefix; 64.9% once prompts are cut at the 131,072 context
    assert trace_prefix_hits(read_trace(MOON_SYN), math.inf).hit_rate == pytest.approx(0.6512, abs=0.001)
    assert d["derived"]["prefix_cache_hit_rate_unlimited"] == pytest.approx(0.6492, abs=0.001)
    assert d["derived"]["truncated_requests"] >= 1  # prompts up to 191,378 tokens, past the 131,072 context
    assert d["input_len"].values.max() <= 131_071 and d["derived"]["prefix_cache_applied"] is False
    with pytest.raises(InputError, match="a trace gives the demand"):
        chalk.plan("llama-3.1-8b", "h100-sxm", trace=MOON_SYN, rate=5)
    with pytest.raises(ChalkError):
        chalk.plan("llama-3.1-8b", "h100-sxm", trace=_write(tmp_path, "x\n"))


def test_simulate_refuses_a_rate_beside_a_trace():
    """A trace brings its own arrival times: --rate beside it was silently ignored (and the overload warning said
    to lower it); it is one line and exit 2, naming --speedup."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "chalk", "simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--trace",
                        str(TRACES / "azure-2023-code.csv"), "--rate", "0.5"], capture_output=True, text=True)
    assert p.returncode == 2 and "--speedup" in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("extra, says", [
    (("--trace", "{azure}", "--input-len", "50"), "brings each request's own lengths"),
    (("--trace", "{azure}", "--output-len", "lognormal:mean=200,sigma=1"), "brings each request's own lengths"),
    (("--concurrency", "10", "--rate", "5"), "give one of the two"),
])
def test_simulate_refuses_options_it_would_ignore(extra, says):
    """QA sweep 2026-11-27: --input-len beside a --trace and --rate beside --concurrency were silently ignored."""
    extra = tuple(a.format(azure=TRACES / "azure-2023-conv.csv") for a in extra)
    rc, out, err = run("simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--layout", "tp=1", *extra)
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_an_overloaded_trace_replay_offers_what_it_serves_over_one_window():
    """QA sweep 2026-11-27: the Azure code trace at 4x speed on one H100 warned '11.02 requests/s offered, 12.64
    served': the offered rate was the whole trace's, the served one its steady-state window's, and the trace's rate
    varies through the hour. Both are now over the window's requests, so an overloaded replica serves less than it
    is offered."""
    from chalk.analyses.traffic import simulate as S
    from chalk.analyses.traffic.simulate_run import simulate_requests

    run = simulate_requests("llama-3.1-8b", "h100-sxm", trace=_need(AZURE_CODE), requests=3000, speedup=4.0,
                            layout="tp=1")
    over = S.overload(run.result)
    assert over is not None and over["served_requests_per_s"] < over["offered_requests_per_s"]
    # its window is not called a steady state (QA 2026-11-28: the JSON said 'steady' where the table said none)
    assert run.latency_window["kind"] == "overloaded" and "outran" in run.latency_window["basis"]


def test_a_trace_without_block_ids_says_its_hit_rate_is_not_computed_and_an_overload_has_no_steady_state():
    """QA 2026-11-28: an Azure trace's run printed no prefix-cache row at all, and an overloaded run labelled its
    window 'steady state' beside the warning that the queue grows."""
    rc, out, err = run("simulate", "--trace", str(_need(AZURE_CODE)), "-m", "llama-3.1-8b", "-H", "h100-sxm",
                       "--layout", "tp=1", "-n", "3000", "--speedup", "4")
    text = " ".join(out.split())
    assert rc == 0, err
    assert "prefix-cache hit rate n/a: the azure trace has no prefix-block ids" in text
    assert "warning: arrivals exceed capacity" in text and "measured window steady state:" not in text
    assert "window (no steady state: the queue grows" in text
    rc, out, err = run("simulate", "--trace", str(_need(AZURE_CODE)), "-m", "llama-3.1-8b", "-H", "h100-sxm",
                       "--layout", "tp=1", "-n", "3000", "--speedup", "4", "--json")
    assert rc == 0 and json.loads(out)["latency_window"]["kind"] == "overloaded", err


def test_plan_says_when_the_busiest_minute_is_and_refuses_a_speedup_past_a_replays_span():
    """plan --trace names when its busiest window starts (Azure conversation: 1,843 s after the first request, as a
    QA sweep found by hand), and a --speedup that stretches the arrivals past 1e9 s is refused as simulate refuses
    it (QA 2026-11-28: 1e-9 sized for one request a minute)."""
    import numpy as np

    from chalk.analyses.planning.trace_demand import demand_from_trace
    from chalk.specs.catalog import as_model
    from chalk.specs.traces import read_trace

    path = _need(AZURE_CONV)
    d = demand_from_trace(path, as_model("llama-3.1-8b"))["derived"]
    a = read_trace(path).arrival_s
    counts = np.searchsorted(a, a + 60.0, side="left") - np.arange(a.size)
    assert d["peak_rate_per_s"] == counts.max() / 60.0
    assert d["peak_window_start_s"] == pytest.approx(1843, abs=1)
    rc, out, err = run("plan", "-m", "llama-3.1-8b", "--trace", str(path), "--speedup", "1e-9", "-H", "h100-sxm")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--speedup" in err


def test_plan_verifies_a_trace_fleet_on_the_traces_own_bursts():
    """plan --trace sizes for the busiest minute's mean rate; it verified the fleet on Poisson arrivals at that
    rate, so bursts inside the minute went unseen: Llama-3.1-8B on H100 / TensorRT-LLM for the Azure code trace at
    p99 TTFT <= 1 s passed on one replica (318 ms replayed), where the trace replayed on it gave 3.8 s (32.7
    requests/s over ten seconds against a capacity of 30). The replay now feeds the trace's own requests around its
    busiest window, its p99s measured over that window alone (over 12,000 requests around it the peak minute was a
    few percent of those behind a p99): the same demand with Poisson arrivals and the trace's lengths takes fewer
    replicas."""
    from chalk.analyses.planning.plan import plan
    from chalk.analyses.planning.trace_demand import demand_from_trace
    from chalk.specs.catalog import as_model

    kw = dict(engine="trtllm", modes="aggregated", ttft_p99_s=1.0, tpot_p99_s=0.05, curves=False)
    r = plan("llama-3.1-8b", "h100-sxm", trace=str(_need(AZURE_CODE)), **kw)
    assert r["replay_arrivals"] == "trace"
    o = r["options"][0]
    assert o["meets_targets"]
    d = demand_from_trace(AZURE_CODE, as_model("llama-3.1-8b"))
    (a, P, O), (w0, w1) = d["arrivals"].around_peak()
    assert a[0] == 0.0 and np.all(np.diff(a) >= 0) and w1 - w0 == pytest.approx(60.0)
    assert int(((a >= w0) & (a < w1)).sum()) == pytest.approx(r["trace"]["peak_rate_per_s"] * 60, abs=2)
    w = o["simulated"]["latency_window"]
    assert w["kind"] == "peak" and w["requests"] == pytest.approx(r["trace"]["peak_rate_per_s"] * 60, abs=2)
    poisson = plan("llama-3.1-8b", "h100-sxm", rate=d["rate"], input_len=d["input_len"], output_len=d["output_len"],
                   **kw)
    assert poisson["replay_arrivals"] == "poisson"
    assert o["replicas"] > poisson["options"][0]["replicas"]


def test_a_trace_shorter_than_the_window_says_what_rate_it_was_sized_for(tmp_path):
    """QA 2026-11-28: two requests 1 ms apart were sized as 'its busiest 60 s' at 1,000 requests/s. A trace with no
    whole window is sized at the rate over its own span, and the note and JSON say so."""
    from chalk.analyses.planning.trace_demand import demand_from_trace
    from chalk.specs.catalog import as_model

    p = tmp_path / "close.csv"
    p.write_text("arrival_s,input_len,output_len\n0,1000,100\n0.001,1000,100\n")
    d = demand_from_trace(p, as_model("llama-3.1-8b"))
    assert d["derived"]["shorter_than_window"] and d["rate"] == pytest.approx(1000.0)
    note = d["notes"][0]
    assert "spans less than the 60 s window" in note and "busiest" not in note
    long = demand_from_trace(_need(AZURE_CONV), as_model("llama-3.1-8b"))
    assert not long["derived"]["shorter_than_window"] and "busiest 60 s" in long["notes"][0]
