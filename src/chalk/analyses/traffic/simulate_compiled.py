"""The continuous-batching event loop of `simulate_continuous`, compiled with numba (an optional extra: `chalk[fast]`).

The same loop as the pure-Python reference in chalk.analyses.traffic.simulate, statement for statement and in the same
floating-point order, over numpy arrays instead of lists: the pending prefills are the index range [pf_head, head)
(admission and prefill are both FCFS, so the prompts whose prefill ends in a step are a prefix of it), and the
finishing steps a binary heap of (step, request) pairs. The loop returns to its Python driver when it needs the
next chunk of requests (status NEED_LOAD) and when every request has finished (DONE); the driver loads, folds
finished chunks into the histograms and calls it again, so memory holds the requests in flight as before.

Compiled once per machine (`cache=True`: the object code is kept next to this file) and imported only by the
simulator, for runs long enough to repay loading it (`simulate.COMPILED_MIN_REQUESTS`).
"""

from __future__ import annotations

import math

import numba
import numpy as np

DONE, NEED_LOAD = 0, 1

# integer state (st_i)
(I_STEP, I_HEAD, I_SENT, I_NRUN, I_NDEC, I_SUMCTX, I_RESERVED, I_KVUSED, I_PEAKKV, I_NDONE, I_TOKOUT, I_TOKIN,
 I_CACHED, I_PROMPT, I_PFHEAD, I_HEAPLEN, I_SNAPA, I_SNAPB) = range(18)
# float state (st_f)
F_T, F_BUSY, F_STEPSUM, F_AREA, F_DECSUM, F_PFSUM = range(6)
# parameters (pf_): per-token and per-byte times, as the reference loop derives them
(P_FTOK, P_FCTX, P_FSEQ, P_FATT, P_MDENSE, P_MEXP, P_L1K, P_MCTX, P_MSEQ, P_MW, P_OVH, P_CAP, P_LAT, P_WARM) = range(14)
# integer parameters (pi_)
PI_B, PI_CHUNK, PI_MOE, PI_CLOSED, PI_N, PI_WA, PI_WB, PI_CHUNKREQ, PI_AHEAD = range(9)


@numba.njit(cache=True)
def _series(k, g0, g1):
    return k * g0 + g1 * k * (k - 1.0) * 0.5


@numba.njit(cache=True)
def _run_time(k, a0, a1, b0, b1, s):
    """`_DecodeRun.time_s` (k, s as floats holding integers)."""
    if k <= s:
        return _series(k, a0, a1)
    return _series(s, a0, a1) + _series(k, b0, b1) - _series(s, b0, b1)


@numba.njit(cache=True)
def _run_steps_to_reach(x, a0, a1, b0, b1, s):
    """`_DecodeRun.steps_to_reach`."""
    if s == math.inf or _run_time(s, a0, a1, b0, b1, s) >= x:
        g0, g1, base, k_lo = a0, a1, 0.0, 0.0
    else:
        g0, g1, base, k_lo = b0, b1, _run_time(s, a0, a1, b0, b1, s) - _series(s, b0, b1), s
    b, y = g0 - 0.5 * g1, x - base
    k = max(1.0, max(k_lo, np.ceil(2 * y / (b + math.sqrt(b * b + 2 * g1 * y)))))
    while k > 1 and _run_time(k - 1.0, a0, a1, b0, b1, s) >= x:
        k -= 1.0
    while _run_time(k, a0, a1, b0, b1, s) < x:
        k += 1.0
    return k


@numba.njit(cache=True)
def _heap_push(hs, hi, n, s, i):
    j = n
    while j > 0:
        p = (j - 1) >> 1
        if hs[p] <= s:
            break
        hs[j] = hs[p]
        hi[j] = hi[p]
        j = p
    hs[j] = s
    hi[j] = i


@numba.njit(cache=True)
def _heap_pop(hs, hi, n):
    """Remove the root of a heap of n entries (n - 1 left)."""
    n -= 1
    s, i = hs[n], hi[n]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= n:
            break
        if c + 1 < n and hs[c + 1] < hs[c]:
            c += 1
        if hs[c] >= s:
            break
        hs[j] = hs[c]
        hi[j] = hi[c]
        j = c
    hs[j] = s
    hi[j] = i


@numba.njit(cache=True)
def run(arr, P, O, need, cch, prog, admit, first, finish, done_chunk, base, loaded, hs, hi, st_i, st_f, snap_i,
        snap_f, pf_, pi_):
    """Advance the loop until it needs requests past `loaded` (NEED_LOAD) or all have finished (DONE).

    Arrays hold the requests [base, loaded) at index i - base; `prog`: prompt tokens cached so far per request;
    `done_chunk`: finished requests per chunk held; hs/hi: the finishing-step heap; st_i/st_f: the loop's state;
    snap_i/snap_f: the window's two snapshots (taken at the admissions of requests wa and wb)."""
    f_tok, f_ctx, f_seq, f_att = pf_[P_FTOK], pf_[P_FCTX], pf_[P_FSEQ], pf_[P_FATT]
    m_dense, m_exp, l1k = pf_[P_MDENSE], pf_[P_MEXP], pf_[P_L1K]
    m_ctx, m_seq, m_w, ovh, cap, lat = pf_[P_MCTX], pf_[P_MSEQ], pf_[P_MW], pf_[P_OVH], pf_[P_CAP], pf_[P_LAT]
    warm = pf_[P_WARM]
    B, chunk, moe, closed = pi_[PI_B], pi_[PI_CHUNK], pi_[PI_MOE] != 0, pi_[PI_CLOSED] != 0
    n, wa, wb, creq, ahead = pi_[PI_N], pi_[PI_WA], pi_[PI_WB], pi_[PI_CHUNKREQ], pi_[PI_AHEAD]
    step, head, sent = st_i[I_STEP], st_i[I_HEAD], st_i[I_SENT]
    n_run, n_dec, sum_ctx = st_i[I_NRUN], st_i[I_NDEC], st_i[I_SUMCTX]
    reserved, kv_used, peak_kv = st_i[I_RESERVED], st_i[I_KVUSED], st_i[I_PEAKKV]
    n_done, tok_out, tok_in = st_i[I_NDONE], st_i[I_TOKOUT], st_i[I_TOKIN]
    cached_total, prompt_total, pf_head, hn = st_i[I_CACHED], st_i[I_PROMPT], st_i[I_PFHEAD], st_i[I_HEAPLEN]
    t, busy, step_sum = st_f[F_T], st_f[F_BUSY], st_f[F_STEPSUM]
    area, dec_sum, pf_sum = st_f[F_AREA], st_f[F_DECSUM], st_f[F_PFSUM]
    status = DONE
    while True:
        if closed and loaded < n and loaded - sent < ahead:  # the seats freed in one step send what is loaded
            status = NEED_LOAD
            break
        need_load = False
        while True:  # admissions
            if head == loaded:
                if loaded < n:
                    need_load = True
                break
            j = head - base
            if not (arr[j] <= t and n_run < B and reserved + need[j] <= cap):
                break
            admit[j] = t
            reserved += need[j]
            n_run += 1
            c0 = cch[j]
            kv_used += c0
            cached_total += c0
            prompt_total += P[j]
            prog[j] = c0
            if head == wa or head == wb:
                for w in range(2):
                    if (head == wa and w == 0) or (head == wb and w == 1):
                        snap_f[w, 0], snap_f[w, 1], snap_f[w, 2] = t, area, step_sum
                        snap_f[w, 3], snap_f[w, 4], snap_f[w, 5] = busy, dec_sum, pf_sum
                        snap_i[w, 0], snap_i[w, 1], snap_i[w, 2], snap_i[w, 3] = n_done, tok_out, tok_in, step
                        snap_i[w, 4] = 1
            head += 1
        if need_load:
            status = NEED_LOAD
            break
        if n_run == 0:
            if head >= n:
                break
            t = arr[head - base]  # idle: jump to the next arrival
            continue
        n_pf = prior = 0
        att = 0.0
        n_end_pf = 0  # prompts whose prefill ends this step: pf_head .. pf_head + n_end_pf - 1
        if pf_head < head:
            budget = chunk
            for i in range(pf_head, head):
                j = i - base
                a = prog[j]
                c = P[j] - a
                if c > budget:
                    c = budget
                n_pf += c
                att += c * a + c * (c + 1) * 0.5
                prior += a
                prog[j] = a + c
                budget -= c
                if prog[j] == P[j]:
                    n_end_pf += 1
                if budget == 0:
                    break
        elif hn > 0 and hs[0] - step > 2:
            # pure decode until the next completion or admissible arrival: jump the steps in between
            kc = hs[0] - step - 1
            w = m_dense + m_exp * -math.expm1(n_dec * l1k) if moe else m_dense
            c0f, c1f = (f_tok + f_seq) * n_dec + f_ctx * sum_ctx + ovh, f_ctx * n_dec
            m0f, m1f = w + m_seq * n_dec + m_ctx * sum_ctx + ovh, m_ctx * n_dec
            if c0f >= m0f:
                a0, a1, b0, b1 = c0f, c1f, m0f, m1f
            else:
                a0, a1, b0, b1 = m0f, m1f, c0f, c1f
            s = math.inf if b1 <= a1 else max(0.0, np.ceil((a0 - b0) / (b1 - a1)))
            k = kc
            if head < loaded and n_run < B and reserved + need[head - base] <= cap:
                x = arr[head - base] - t
                if x < math.inf:  # a closed loop's next request may not be sent yet
                    kr = _run_steps_to_reach(x, a0, a1, b0, b1, s)
                    if kr < kc:
                        k = np.int64(kr)
            span = _run_time(float(k), a0, a1, b0, b1, s)
            t += span
            step += k
            busy += span
            area += n_run * span
            step_sum += n_run * k
            dec_sum += n_dec * k
            sum_ctx += n_dec * k
            kv_used += n_dec * k
            if kv_used > peak_kv:
                peak_kv = kv_used
            continue
        tokens = n_dec + n_pf
        comp = f_tok * tokens + f_ctx * sum_ctx + f_seq * n_dec + f_att * att
        mem = m_dense + m_ctx * (sum_ctx + prior) + m_seq * n_dec + m_w * n_pf
        if moe:
            mem -= m_exp * math.expm1(tokens * l1k)
        dt = (comp if comp > mem else mem) + ovh
        if step == 0:  # a cold engine's first step (warmup_s)
            dt += warm
        t += dt
        step += 1
        busy += dt
        area += n_run * dt
        step_sum += n_run
        dec_sum += n_dec
        pf_sum += n_pf
        kv_used += tokens
        if kv_used > peak_kv:
            peak_kv = kv_used
        sum_ctx += n_dec
        for i in range(pf_head, pf_head + n_end_pf):
            j = i - base
            first[j] = t
            if O[j] == 1:  # one token out, no decode step: its prompt's KV leaves
                kv_used -= P[j]
                n_run -= 1
                reserved -= need[j]
                finish[j] = t
                n_done += 1
                tok_out += O[j]
                tok_in += P[j]
                if closed and sent < n:
                    arr[sent - base] = t + lat
                    sent += 1
                done_chunk[j // creq] += 1
            else:
                n_dec += 1
                sum_ctx += P[j]
                _heap_push(hs, hi, hn, step + O[j] - 1, i)
                hn += 1
        pf_head += n_end_pf
        while hn > 0 and hs[0] == step:
            i = hi[0]
            _heap_pop(hs, hi, hn)
            hn -= 1
            j = i - base
            c = need[j] - 1
            n_dec -= 1
            sum_ctx -= c
            kv_used -= c
            n_run -= 1
            reserved -= need[j]
            finish[j] = t
            n_done += 1
            tok_out += O[j]
            tok_in += P[j]
            if closed and sent < n:  # the freed seat sends the next request `lat` later
                arr[sent - base] = t + lat
                sent += 1
            done_chunk[j // creq] += 1
    st_i[I_STEP], st_i[I_HEAD], st_i[I_SENT] = step, head, sent
    st_i[I_NRUN], st_i[I_NDEC], st_i[I_SUMCTX] = n_run, n_dec, sum_ctx
    st_i[I_RESERVED], st_i[I_KVUSED], st_i[I_PEAKKV] = reserved, kv_used, peak_kv
    st_i[I_NDONE], st_i[I_TOKOUT], st_i[I_TOKIN] = n_done, tok_out, tok_in
    st_i[I_CACHED], st_i[I_PROMPT], st_i[I_PFHEAD], st_i[I_HEAPLEN] = cached_total, prompt_total, pf_head, hn
    st_f[F_T], st_f[F_BUSY], st_f[F_STEPSUM] = t, busy, step_sum
    st_f[F_AREA], st_f[F_DECSUM], st_f[F_PFSUM] = area, dec_sum, pf_sum
    return status


_FIELDS = (("arr", np.float64), ("P", np.int64), ("O", np.int64), ("need", np.int64), ("cch", np.int64),
           ("prog", np.int64), ("admit", np.float64), ("first", np.float64), ("finish", np.float64))


def run_compiled(source, n, B, cap, chunk, closed_loop, seats, lat, wa, wb, consts, moe, chunk_requests, check_chunk,
                 stream, warm=0.0):
    """Drive `run` over the chunks of `source` (arrival, prompt, output, cached arrays); `stream`: where finished
    chunks are folded (None: keep every request). Returns the loop's totals as `simulate._continuous_result` takes
    them."""
    held = {k: np.empty(0, dtype=d) for k, d in _FIELDS}  # requests [base, loaded), capacity doubling
    used = base = loaded = 0
    sizes = []  # requests per chunk held
    done_chunk = np.zeros(1, dtype=np.int64)
    hs = hi = np.empty(0, dtype=np.int64)
    kept = []
    st_i, st_f = np.zeros(18, dtype=np.int64), np.zeros(6)
    snap_i, snap_f = np.zeros((2, 5), dtype=np.int64), np.zeros((2, 6))
    send_lag = lat if closed_loop else 0.0
    if closed_loop:
        st_i[I_SENT] = min(seats, n)
    pf_ = np.array(list(consts) + [cap, lat, warm], dtype=np.float64)
    ahead = min(B, seats) if closed_loop else 0
    pi_ = np.array([B, (1 << 62) if chunk is None else chunk, int(moe), int(closed_loop), n, wa, wb, chunk_requests,
                    ahead], dtype=np.int64)

    while True:
        status = run(held["arr"], held["P"], held["O"], held["need"], held["cch"], held["prog"], held["admit"],
                     held["first"], held["finish"], done_chunk, base, loaded, hs, hi, st_i, st_f, snap_i, snap_f,
                     pf_, pi_)
        if stream is not None:  # fold the leading chunks whose requests have all finished
            stream.ta = float(snap_f[0, 0]) if snap_i[0, 4] else None  # the window's edges reached so far
            stream.tb = float(snap_f[1, 0]) if snap_i[1, 4] else None
            k = 0
            while k < len(sizes) and done_chunk[k] == sizes[k]:
                m = sizes[k]
                s0 = sum(sizes[:k])
                stream.fold(base + s0, held["arr"][s0:s0 + m] - send_lag, held["admit"][s0:s0 + m],
                            held["first"][s0:s0 + m], held["finish"][s0:s0 + m], held["O"][s0:s0 + m])
                k += 1
            if k:
                drop = sum(sizes[:k])
                for a in held.values():
                    a[:used - drop] = a[drop:used]
                done_chunk[:len(sizes) - k] = done_chunk[k:len(sizes)]
                done_chunk[len(sizes) - k:] = 0
                del sizes[:k]
                used -= drop
                base += drop
        if status == DONE:
            break
        a_, p_, o_, c_ = next(source)
        check_chunk(p_, o_, cap)
        m = len(a_)
        if used + m > held["arr"].size:
            size = max(2 * held["arr"].size, used + m)
            for k_, a in list(held.items()):
                b = np.zeros(size, dtype=a.dtype)
                b[:used] = a[:used]
                held[k_] = b
        if len(sizes) + 1 > done_chunk.size:
            done_chunk = np.concatenate([done_chunk, np.zeros(done_chunk.size + 1, dtype=np.int64)])
        if closed_loop:  # the first `seats` requests are sent at t = 0, each later one when a seat frees
            g = np.arange(loaded, loaded + m)
            held["arr"][used:used + m] = np.where(g < seats, 0.0, math.inf)
        else:
            held["arr"][used:used + m] = a_
        held["P"][used:used + m] = p_
        held["O"][used:used + m] = o_
        held["need"][used:used + m] = p_ + o_
        held["cch"][used:used + m] = c_
        if stream is None:
            kept.append((a_, p_, o_, c_))
        sizes.append(m)
        used += m
        loaded += m
        heap = min(B, used) + 1  # the heap holds requests admitted and unfinished: at most B, all held
        if hs.size < heap:
            hs, hi = np.resize(hs, max(heap, 2 * hs.size)), np.resize(hi, max(heap, 2 * hs.size))

    def snap(w):
        if not snap_i[w, 4]:
            return None
        t, area, step_sum, busy, dec_sum, pf_sum = (float(x) for x in snap_f[w])
        n_done, tok_out, tok_in, step = (int(x) for x in snap_i[w, :4])
        return (t, n_done, tok_out, tok_in, area, step, step_sum, busy, dec_sum, pf_sum)

    out = dict(snap_a=snap(0), snap_b=snap(1), cached_total=int(st_i[I_CACHED]), prompt_total=int(st_i[I_PROMPT]),
               step=int(st_i[I_STEP]), busy=float(st_f[F_BUSY]), step_sum=float(st_f[F_STEPSUM]),
               area=float(st_f[F_AREA]), dec_sum=float(st_f[F_DECSUM]), pf_sum=float(st_f[F_PFSUM]),
               n_done=int(st_i[I_NDONE]), tok_out=int(st_i[I_TOKOUT]), tok_in=int(st_i[I_TOKIN]),
               peak_kv=int(st_i[I_PEAKKV]), kept=kept, stream=stream, send=None, admit=None, first=None,
               finish=None)
    if stream is None:
        out.update(admit=held["admit"][:used].copy(), first=held["first"][:used].copy(),
                   finish=held["finish"][:used].copy(), send=held["arr"][:used] - send_lag)
    return out
