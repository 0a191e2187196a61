"""``--spec-draft-n-max auto`` (runtime/adaptive.py) on simulated steps: it must find the draft length with the
best tokens per second from timings and acceptance alone, with little exploration, plain decoding (k=0) included
where drafting loses at every length, and come back to drafting when the head becomes worth it."""

from __future__ import annotations

import math
import random

import pytest

from gguf_mtp.runtime.adaptive import DraftLength
from gguf_mtp.runtime.stats import Stats

pytestmark = pytest.mark.fast  # needs no llama.cpp: `make test-fast` runs it


class Fixed(DraftLength):
    def __init__(self, k: int) -> None:
        super().__init__(k)
        self.fixed = k

    def next(self, stats: Stats) -> int:
        return self.fixed


def draw(c: DraftLength, st: Stats, acc: list[float], rng: random.Random) -> tuple[int, int, bool]:
    """One step of ``c``: the length it gives, the drafts accepted and whether it asked for a shadow draft,
    counted into ``st`` as the engine counts them. The first i+1 drafts are all accepted with the prefix
    probability acc[i] (u below acc[i] <=> i+1 accepted); a shadow draft, not verified, with that of k+1."""
    k = c.next(st)
    shadow = c.shadow
    u = rng.random()
    j = sum(1 for i in range(k) if u < acc[i])
    if shadow:
        c.shadow_result(k, u < acc[k])
    if k:
        st.record(k, j)
    else:  # as the engine counts a plain step
        st.plain_steps += 1
    st.steps += 1
    return k, j, shadow


def simulate(acc: list[float], cost: callable, k_max: int, steps: int = 200, noise: float = 0.0,
             seed: int = 0, fixed: int | None = None) -> tuple[DraftLength, Stats, float]:
    """Run the controller (or a fixed length) against steps whose first i+1 drafts are all accepted with
    probability acc[i] (a prefix probability, as Stats.acceptance_at measures it) and cost ``cost(k)``
    seconds (times up to 1 + noise). Returns the controller, the stats and the tokens per second reached."""
    rng = random.Random(seed)
    c, st = (Fixed(fixed) if fixed is not None else DraftLength(k_max)), Stats(n_draft_max=k_max)
    tokens = seconds = 0.0
    for _ in range(steps):
        k, j, _ = draw(c, st, acc, rng)
        assert 0 <= k <= k_max
        dt = cost(k) * (1 + noise * rng.random())
        c.observe(k, dt)
        tokens, seconds = tokens + j + 1, seconds + dt
    return c, st, tokens / seconds


def best_fixed(acc: list[float], cost: callable, k_max: int) -> tuple[int, float]:
    rates = {k: (1 + sum(acc[:k])) / cost(k) for k in range(0, k_max + 1)}
    k = max(rates, key=rates.get)
    return k, rates[k]


def steps_at(st: Stats, k: int) -> int:
    return st.plain_steps if k == 0 else st.draft_lengths.get(k, 0)


@pytest.mark.parametrize("acc,draft_cost,plain,best", [
    ([1.0, 1.0, 1.0, 1.0], lambda k: 1.0 + 0.15 * k, 0.9, {4}),     # a head that is always right, GPU-like costs
    ([0.8, 0.6, 0.4, 0.25], lambda k: 1.0 + 0.2 * k, 0.9, {3, 4}),  # ~80/60/40%
    ([0.8, 0.8, 0.8, 0.8], lambda k: 1.0 + 0.25 * k, 0.9, {4}),     # prefix probabilities summed, not multiplied
    ([0.3, 0.1, 0.03, 0.01], lambda k: 1.0 + 0.3 * k, 1.2, {1}),    # a poor head, plain steps not much cheaper
    ([0.3, 0.1, 0.03, 0.01], lambda k: 1.0 + 0.3 * k, 0.9, {0}),    # the same head where plain steps are cheap
    ([0.75, 0.5, 0.3, 0.2], lambda k: 0.5 * (k + 1), 0.5, {0}),     # compute-bound (2-core CPU): plain decoding
])
def test_auto_reaches_the_best_fixed_draft_length(acc, draft_cost, plain, best) -> None:
    cost = lambda k: plain if k == 0 else draft_cost(k)  # noqa: E731
    true = {k: (1 + sum(acc[:k])) / cost(k) for k in range(0, 5)}
    assert best_fixed(acc, cost, 4)[0] in best  # the case is what its comment says
    good = {k for k, r in true.items() if r >= 0.97 * max(true.values())}  # lengths within 3% of the best
    # exploring k_max first costs 2.5 plain steps a step where plain decoding is best on a compute-bound back-end
    floor = 0.90 if best == {0} else 0.95
    shares = []
    for seed in range(5):
        c, st, rate = simulate(acc, cost, 4, noise=0.1, seed=seed)
        assert c.best(st) in good, seed
        # exploration and probes included: near the best fixed length over 200 steps (the same draws)
        rate_best = max(simulate(acc, cost, 4, noise=0.1, seed=seed, fixed=k)[2] for k in range(0, 5))
        assert rate >= floor * rate_best, (seed, rate, rate_best)
        shares.append(sum(steps_at(st, k) for k in good) / st.steps)
    # and it spends most steps there (in a typical run: a few draws of acceptance can mislead it for a while)
    assert sorted(shares)[2] >= 0.8, shares


def test_rebuild_outliers_do_not_move_the_choice() -> None:
    """The first step at a new length pays for a graph rebuild (and a CUDA graph capture): medians drop it."""
    acc, cost = [0.9, 0.8, 0.7, 0.6], (lambda k: 1.0 + 0.1 * k)
    seen: set[int] = set()

    def first_is_slow(k: int) -> float:
        t = cost(k) * (5.0 if k not in seen else 1.0)
        seen.add(k)
        return t

    c, st, _ = simulate(acc, first_is_slow, 4, steps=60)
    assert c.best(st) == best_fixed(acc, cost, 4)[0] == 4


@pytest.mark.parametrize("slope", [0.25, 0.1])
def test_exploration_is_short_and_in_blocks(slope: float) -> None:
    """k_max, 1 and 0, then the best's neighbours, but only those the line puts within EXPLORE_WITHIN of it:
    with steps costing 1 + 0.25 k, k=3 (0.91x of k=4) is explored; at 1 + 0.1 k (0.86x) it is not."""
    c, st = DraftLength(4), Stats(n_draft_max=4)
    B, W = c.BLOCK, c.WARMUP
    ks = []
    for _ in range(4 * B + 5):
        ks.append(c.next(st))
        if ks[-1]:
            st.record(ks[-1], ks[-1])
        else:
            st.plain_steps += 1
        st.steps += 1
        c.observe(ks[-1], 1.0 + slope * ks[-1])
    if slope < 0.2:
        assert ks == [4] * B + [1] * B + [0] * B + [4] * (B + 5)
        return
    # k_max, 1, 0 (plain), then the best (4, measured) and its untried neighbour; blocks, so one rebuild per length
    assert ks[: 4 * B] == [4] * B + [1] * B + [0] * B + [3] * B
    assert ks[4 * B:] == [4] * 5  # 4 is best, its neighbour 3 measured: done
    # the first WARMUP steps of each block are not timed
    assert {k: len(v) for k, v in c.times.items()} == {4: B - W + 5 - W, 1: B - W, 0: B - W, 3: B - W}
    c1 = DraftLength(1)
    assert [c1.next(st) for _ in range(B)] == [1] * B
    for _ in range(B):
        c1.observe(1, 1.0)
    assert c1.next(st) == 0  # one draft at most: plain decoding is still measured against it


def test_graph_capture_after_a_change_of_length_is_not_timed() -> None:
    """Measured on an H100 (side_by_side, ~70% head, Q8_0): the two decodes after a change of length run eagerly
    and then capture the CUDA graph, 1.3 ms slower each. Timing the second of them made auto pick k=4 at 0.72x
    the best fixed length (k=1). Step times in ms, acceptance by position as measured."""
    acc, ms = [0.73, 0.44, 0.30, 0.24], {0: 2.26, 1: 3.53, 2: 4.53, 3: 5.66, 4: 7.17}
    last, run = [None], [0]

    def cost(k: int) -> float:
        run[0] = run[0] + 1 if k == last[0] else 1
        last[0] = k
        return ms[k] + (1.3 if run[0] <= 2 else 0.0)

    for seed in range(4):
        last[0], run[0] = None, 0
        c, st, rate = simulate(acc, cost, 4, steps=300, seed=seed)
        assert c.best(st) == 1 == best_fixed(acc, lambda k: ms[k], 4)[0], seed
        last[0], run[0] = None, 0
        fixed = simulate(acc, cost, 4, steps=300, seed=seed, fixed=1)[2]
        assert rate >= 0.9 * fixed, (seed, rate, fixed)


# Measured on an H100 (bench/reference/side-by-side-h100): acceptance by position at k=4 and the median step
# time at each k (ms). The cost bends upwards, so a line through k=1 and k=4 picks k=4 where k=3 is best.
# k=0: run --no-mtp.
H100 = {
    "perfect head": ([1.0, 1.0, 1.0, 1.0], {0: 2.297, 1: 3.564, 2: 4.698, 3: 5.802, 4: 7.431}),
    "noisy head": ([0.94, 0.89, 0.83, 0.71], {0: 2.258, 1: 3.842, 2: 4.788, 3: 5.976, 4: 7.6}),
    "Q4_K_M trunk": ([0.93, 0.87, 0.78, 0.71], {0: 2.199, 1: 3.776, 2: 5.005, 3: 6.493, 4: 7.88}),
    # bench/reference/qwen3next-h100.txt: a Qwen3-Next target, rejected drafts undone by replay. The ~70% head
    # (store=seq, merge=16; acceptance of its k=3 row, position 4 of its k=4 row) loses at every k: best 0.78x
    "qwen3next 70% head": ([0.76, 0.59, 0.46, 0.29], {0: 2.59, 1: 7.43, 2: 8.23, 3: 9.3, 4: 11.09}),
    "qwen3next perfect head": ([1.0, 1.0, 1.0, 1.0], {0: 2.59, 1: 4.28, 2: 5.51, 3: 6.56, 4: 7.98}),  # state-device
}


# share of the best fixed length's rate that auto must reach in so many steps, exploration and probes included
FLOOR = {30: 0.90, 200: 0.95}
# where plain decoding wins, exploring k=4 and k=1 costs 3-4 plain steps a step (the best fixed length, plain, pays
# nothing), and so does each probe at k=1 later: over 30 steps auto is below drafting's best (0.78x), as blocks
# of four (two warm-up steps that CUDA needs, two timed) explore k=4 and k=1;
# the probes cost 5% for good (1000 steps: 0.95)
FLOOR_PLAIN = {30: 0.70, 200: 0.88, 1000: 0.94}


@pytest.mark.parametrize("name,steps", [(n, s) for n in H100 for s in (30, 200)]  # 128 tokens at ~4 a step: 30
                         + [("qwen3next 70% head", 1000)])
def test_auto_on_measured_h100_costs(name: str, steps: int) -> None:
    acc, ms = H100[name]
    cost = ms.__getitem__
    k_best, _ = best_fixed(acc, cost, 4)
    assert (k_best == 0) is name.startswith("qwen3next 70%")
    floor = (FLOOR_PLAIN if k_best == 0 else FLOOR)[steps]
    true = lambda k: (1 + sum(acc[:k])) / cost(k)  # noqa: E731
    # at 200 steps the choice moves only for a gain of SWITCH_GAIN: lengths that close count as the best; at 30,
    # two timed steps at each length so far: within the 5% noise of the best
    near = (1 - DraftLength.SWITCH_GAIN) if steps >= 200 else 0.95
    chose_near = 0
    for seed in range(10):
        c, st, rate = simulate(acc, cost, 4, steps=steps, noise=0.05, seed=seed)
        rate_best = simulate(acc, cost, 4, steps=steps, noise=0.05, seed=seed, fixed=k_best)[2]
        assert rate >= floor * rate_best, (seed, rate / rate_best)
        chose_near += true(c.best(st)) >= near * true(k_best)
        if k_best == 0:
            assert st.plain_steps >= 0.85 * steps - 3 * c.BLOCK  # after the blocks that explore k_max, 1 and 0
    # a few unlucky draws of the acceptance one position deeper than the choice can hold it one length short
    # for a while: on the noisy head 2 seeds in 10 sit at k=2 after 200 steps, 3.5% below k=3
    assert chose_near >= 8, chose_near


def run(c: DraftLength, st: Stats, steps: int, acc: list[float], cost, rng: random.Random) -> list[int]:
    """``steps`` more steps of ``c`` (acceptance and costs may change between calls); the lengths it chose."""
    ks = []
    for _ in range(steps):
        k = draw(c, st, acc, rng)[0]
        ks.append(k)
        c.observe(k, cost(k) * (1 + 0.05 * rng.random()))
    return ks


QWEN3NEXT_70, QWEN3NEXT_COST = H100["qwen3next 70% head"][0], H100["qwen3next 70% head"][1].__getitem__


@pytest.mark.parametrize("shadows", [True, False])
def test_plain_decoding_keeps_probing_one_draft(shadows: bool) -> None:
    """At 0 the head is still asked for drafts, so no length stays unmeasured for good. With shadow drafts
    (Engine.step) one draft every SHADOW_EVERY steps, not verified, gives the acceptance and a timed block at
    k=1 every PROBE_EVERY_SHADOWED steps the time. Without (server slots stepped together): one k=1 step
    every PROBE_EVERY steps, and one of those in PLAIN_TIMED a timed block of PROBE steps."""
    c, st, rng = DraftLength(4, shadows=shadows), Stats(n_draft_max=4), random.Random(1)
    ks = run(c, st, 40, QWEN3NEXT_70, QWEN3NEXT_COST, rng)
    B = c.BLOCK
    assert ks[: 3 * B] == [4] * B + [1] * B + [0] * B and c.best(st) == 0
    drafted, shadowed = st.drafted_at[0], c._shadow_d[0]
    steps = 8 * c.PROBE_EVERY_SHADOWED if shadows else 8 * c.PROBE_EVERY
    ks = run(c, st, steps, QWEN3NEXT_70, QWEN3NEXT_COST, rng)
    ones = [i for i, k in enumerate(ks) if k == 1]
    assert set(ks) == {0, 1} and c.best(st) == 0
    if shadows:
        assert len(ones) == 8 * c.PROBE and st.drafted_at[0] - drafted == len(ones)  # 8 timed blocks
        # the acceptance: a shadow draft every SHADOW_EVERY steps, but where a probe block stands
        assert c._shadow_d[0] - shadowed >= steps // c.SHADOW_EVERY - steps // c.PROBE_EVERY_SHADOWED - 1
        assert max(b - a for a, b in zip(ones, ones[1:])) <= c.PROBE_EVERY_SHADOWED
    else:
        assert len(ones) == 8 + (c.PROBE - 1) * (8 // c.PLAIN_TIMED) and st.drafted_at[0] - drafted == len(ones)
        assert max(b - a for a, b in zip(ones, ones[1:])) <= c.PROBE_EVERY
        assert c._shadow_d == [0] * 4
    # the last step of each timed block is timed; it comes long after the one before, so the older times count
    # as one (a change of the machine's speed shows at the next probe)
    assert len(c.times[1]) == 2 and c._timed_at[1] >= 40 + steps - c.PROBE_EVERY_SHADOWED
    assert st.plain_steps >= steps - len(ones) - 3  # the rest plain (+ the 0 block explored)


def back_to_drafting(ks: list[int], k: int | set[int] | None = None) -> int:
    """Index of the first of 8 steps in a row that draft (``k`` each, when given); len(ks) when none."""
    ok = (lambda x: x > 0) if k is None else (lambda x: x in k) if isinstance(k, set) else (lambda x: x == k)
    return next((i for i in range(len(ks) - 7) if all(ok(x) for x in ks[i:i + 8])), len(ks))


# Going back takes a few hundred steps: the acceptance is counted over the whole session (the early poor drafts
# weigh until the probes' new ones outnumber them) and a step time is the median of the last KEEP timed steps
# at that length (old slow ones until the timed probes outnumber them). Measured over seeds 0-3: back to
# drafting after 190-500 steps, at the best length (4) after 650-1000. The bounds leave some room.
@pytest.mark.parametrize("seed", range(4))
def test_plain_decoding_is_left_when_the_head_becomes_useful(seed: int) -> None:
    """A head that is poor on one kind of text and always right on the next: 0 first, then drafting again."""
    c, st, rng = DraftLength(4), Stats(n_draft_max=4), random.Random(seed)
    cost = H100["qwen3next perfect head"][1].__getitem__  # the same target; the good head is always right
    run(c, st, 100, [0.2, 0.05, 0.0, 0.0], cost, rng)
    assert c.best(st) == 0
    ks = run(c, st, 40 * c.PROBE_EVERY, [1.0] * 4, cost, rng)
    assert back_to_drafting(ks) <= 20 * c.PROBE_EVERY
    # at k=3 or 4: on this target they are within SWITCH_GAIN of each other (1%), so the choice need not swap
    assert back_to_drafting(ks, {3, 4}) <= 35 * c.PROBE_EVERY
    assert best_fixed([1.0] * 4, cost, 4)[0] == 4 and c.best(st) in (3, 4)  # within 1% of each other here
    assert sum(k in (3, 4) for k in ks[-c.PROBE_EVERY:]) >= c.PROBE_EVERY - 2 * c.PROBE  # probes aside


@pytest.mark.parametrize("seed", range(4))
def test_plain_decoding_is_left_when_drafting_becomes_cheaper(seed: int) -> None:
    """Drafts measured 4x slower during exploration (the machine was busy): the timed probes at k=1 measure
    them again, and the choice goes back to drafting; probes at the neighbours of each new choice then climb to
    the best length, one neighbour at a time. Probes come every PROBE_EVERY_SHADOWED steps (simulated: drafting
    after 2, k=4 after 9: the lengths between were never explored, as the line through the slow times put them
    far below the best, and each step up waits for a probe)."""
    c, st, rng = DraftLength(4), Stats(n_draft_max=4), random.Random(seed)
    acc, fast = [0.9, 0.8, 0.7, 0.6], (lambda k: 1.0 if k == 0 else 1.0 + 0.2 * k)
    slow = lambda k: 1.0 if k == 0 else 4.0 * fast(k)  # noqa: E731
    run(c, st, 40, acc, slow, rng)
    assert c.best(st) == 0
    period = c.PROBE_EVERY_SHADOWED
    ks = run(c, st, 12 * period, acc, fast, rng)
    assert back_to_drafting(ks) <= 2 * period
    assert back_to_drafting(ks, 4) <= 10 * period
    assert c.best(st) == best_fixed(acc, fast, 4)[0] == 4
    assert ks[-c.PROBE_EVERY:].count(4) >= c.PROBE_EVERY - 2 * c.PROBE


def test_the_choice_moves_only_for_a_clear_gain() -> None:
    """A change of length costs graph work (two warm-up steps on a GPU): a length better by less than
    SWITCH_GAIN does not replace the current one; a clearly better one does."""
    from collections import deque

    st = Stats(n_draft_max=4)
    for _ in range(400):  # a perfect head, over enough drafts that the evidence rule for a longer length holds
        st.record(4, 4)  # E(k) = k + 1
    for gain, moves in ((0.5 * DraftLength.SWITCH_GAIN, False), (2 * DraftLength.SWITCH_GAIN, True)):
        c = DraftLength(4)
        c._block, c._explored, c.k, c._last = [], set(range(5)), 3, 3  # running at 3
        t3, t4 = 4.0, 5.0 / (4.0 / 4.0 * (1 + gain))  # rate(4) = (1 + gain) * rate(3)
        c.times = {k: deque([t], maxlen=c.KEEP) for k, t in {0: 10.0, 1: 10.0, 2: 10.0, 3: t3, 4: t4}.items()}
        c.n = 1  # not a probe step
        assert c.best(st) == 4 and c.next(st) == (4 if moves else 3), gain


def test_shadow_drafts_give_the_next_position_without_a_probe() -> None:
    """At k=1 nothing is verified at position 2; shadow drafts are, and the choice moves up on them alone."""
    from collections import deque

    st = Stats(n_draft_max=4)
    for _ in range(20):
        st.record(1, 1)  # position 1 always accepted
    c = DraftLength(4)
    c._block, c._explored, c.k, c.n, c._last = [], set(range(5)), 1, 1, 1  # running at 1
    c.times = {k: deque([1.0 + 0.2 * k], maxlen=c.KEEP) for k in range(5)}  # k=2 pays only if position 2 holds
    assert c.acceptance(st)[:2] == [1.0, 0.0] and c.next(st) == 1
    for _ in range(10):
        c.shadow_result(1, True)
    assert c.acceptance(st)[:2] == [1.0, 1.0] and c.best(st) >= 2
    assert st.drafted_at == [20]  # the session's own counts are untouched


# position 2's acceptance that puts k=2 just below SWITCH_GAIN over k=1 (steps cost 1 + 0.2 k, position 1 always
# accepted: rate(2) / rate(1) = (2 + a) / 1.4 * 1.2 / 2)
NEAR_SWITCH = 7 / 3 * (1 + DraftLength.SWITCH_GAIN) - 2 - 0.02


@pytest.mark.parametrize("accept,doubt", [(NEAR_SWITCH, True), (0.0, False)])
def test_shadow_drafts_come_often_only_while_the_choice_is_in_doubt(accept: float, doubt: bool) -> None:
    """At k=1 with position 2 accepted just too rarely for k=2 to beat k=1 by SWITCH_GAIN: a shadow
    draft every SHADOW_DOUBT steps until the acceptance there is known well enough to decide (or DOUBT_DRAFTS
    drafts were counted at position 2), then every SHADOW_EVERY. With
    position 2 never accepted, k=2 is clearly worse: every SHADOW_EVERY steps from the start."""
    from collections import deque

    st = Stats(n_draft_max=4)
    for _ in range(200):
        st.record(1, 1)  # position 1 always accepted, and well known
    c, rng = DraftLength(4), random.Random(0)
    c._block, c._explored, c.k, c.n, c._last = [], set(range(5)), 1, 1, 1  # running at 1
    c.times = {k: deque([1.0 + 0.2 * k], maxlen=c.KEEP) for k in range(5)}  # rate(2) / rate(1) = (2 + a) / 2.33
    for i in range(25):
        c.shadow_result(1, i < round(25 * accept))  # some drafts counted at position 2 so far
    at = []
    for _ in range(1200):
        k = c.next(st)
        if c.k != 1:  # the draws moved the choice (in doubt, either way can happen): the cadence so far counts
            break
        if c.shadow:
            at.append(c.n)
            c.shadow_result(k, rng.random() < accept)
        c.observe(k, 1.0 + 0.2 * k)
    gaps = [b - a for a, b in zip(at, at[1:])]
    if doubt:
        assert gaps[:10] == [c.SHADOW_DOUBT] * 10
        # then the interval leaves the threshold, or DOUBT_DRAFTS drafts were counted, or the choice moves
        assert c.k != 1 or set(gaps[-10:]) <= {c.SHADOW_EVERY, 2 * c.SHADOW_EVERY}
    else:
        assert set(gaps) <= {c.SHADOW_EVERY, 2 * c.SHADOW_EVERY}  # a probe block can stand where one was due


def test_a_costly_shadow_draft_is_measured_and_made_rarer() -> None:
    """A shadow draft changes the head's decode for a step; with one captured graph per context (stock ggml-cuda)
    the head's graph is captured again there and back, so the shadow step and the WARMUP steps after it cost more
    (bench/length_change.py: about 2.8 ms on a 7.5 ms step, 9B shape, H100). That cost is measured, those steps
    stay out of the length's times, and shadow drafts, in doubt or not, come no more often than keeps them under
    SHADOW_SHARE of the time. Fails where the post-shadow steps were timed as the length's own or the cadence
    ignored what a shadow costs."""
    from collections import deque

    st = Stats(n_draft_max=4)
    for _ in range(200):
        st.record(1, 1)
    c, rng = DraftLength(4), random.Random(0)
    c._block, c._explored, c.k, c.n, c._last = [], set(range(5)), 1, 1, 1  # running at 1
    c.times = {k: deque([1.0 + 0.2 * k], maxlen=c.KEEP) for k in range(5)}
    for i in range(25):
        c.shadow_result(1, i < round(25 * NEAR_SWITCH))  # in doubt: SHADOW_DOUBT would be the cadence
    extra = 0.4  # seconds over a steady 1.2 s step, on the shadow step and each of the WARMUP steps after it
    at, left = [], 0
    for _ in range(400):
        k = c.next(st)
        if c.k != 1:
            break
        if c.shadow:
            at.append(c.n)
            c.shadow_result(k, rng.random() < NEAR_SWITCH)
            left = c.WARMUP + 1
        c.observe(k, 1.2 + (extra if left else 0.0))
        left = max(0, left - 1)
    assert c.shadow_cost() == pytest.approx((c.WARMUP + 1) * extra)
    assert list(c.times[1]) == [1.2] * len(c.times[1])  # no post-shadow step among the length's times
    gaps = [b - a for a, b in zip(at, at[1:])]
    stretched = math.ceil(c.shadow_cost() / (c.SHADOW_SHARE * 1.2))
    # the first shadow came at the doubt cadence (nothing measured yet); from the one after it, every `stretched`
    assert stretched > c.SHADOW_DOUBT and len(gaps) > 3 and min(gaps[1:]) >= stretched, gaps


# bench/reference/side-by-side-h100 (session 12): acceptance by position and median step ms by k, Q8_0 trunks and
# a Q4_K_M one. A change of length costs ~2 ms on each of the two steps after it (graph run eagerly, then
# captured): with this, the old controller's simulated second answer sat at 0.90-0.95x, as measured (0.90-0.97x).
SIDE_BY_SIDE = {
    "perfect head": ([1.0, 1.0, 1.0, 1.0], {0: 2.27, 1: 3.84, 2: 4.68, 3: 6.03, 4: 7.77}),
    "~70% head": ([0.73, 0.44, 0.30, 0.24], {0: 2.35, 1: 3.65, 2: 4.61, 3: 5.80, 4: 7.28}),
    "Q4_K_M trunk": ([0.75, 0.53, 0.35, 0.25], {0: 2.08, 1: 3.49, 2: 5.0, 3: 6.92, 4: 8.33}),
}


def step_ms(ms: dict[int, float], k: int, run: int, shadow: bool, rng: random.Random, switch_ms: float,
            shadow_ms: float) -> float:
    """A simulated step's ms at length ``k``: up to 3% noise, ``switch_ms`` on each of the first two steps of a
    run of one length (the graph run eagerly, then captured), ``shadow_ms`` for a shadow draft."""
    return ms[k] * (1 + 0.03 * rng.random()) + (switch_ms if run <= 2 else 0.0) + (shadow_ms if shadow else 0.0)


def answer(c: DraftLength, st: Stats, acc: list[float], ms: dict[int, float], rng: random.Random, state: list,
           tokens: int = 128, switch_ms: float = 2.0, shadow_ms: float = 0.8) -> float:
    """Tokens per ms of one answer of ``tokens`` tokens; ``state`` = [last length, steps at it] carries over."""
    n = t = 0.0
    first = True
    while n < tokens:
        k, j, shadow = draw(c, st, acc, rng)
        state[1] = 1 if first or k != state[0] else state[1] + 1  # after the prompt: a new shape either way
        state[0], first = k, False
        dt = step_ms(ms, k, state[1], shadow, rng, switch_ms, shadow_ms)
        c.observe(k, dt / 1e3)
        n, t = n + j + 1, t + dt
    return n / t


@pytest.mark.parametrize("name", list(SIDE_BY_SIDE))
def test_a_second_answer_is_within_5_percent_of_the_best_fixed_length(name: str) -> None:
    """Issue 14's target, simulated with what the H100 measured: the second answer of a session (the lengths
    explored, the times known) within 5% of the best fixed length, on average over seeds; the first one explores."""
    acc, ms = SIDE_BY_SIDE[name]
    first, second = [], []
    for seed in range(20):
        rng, c, st = random.Random(seed), DraftLength(4), Stats(n_draft_max=4)
        state: list = [None, 0]
        first.append(answer(c, st, acc, ms, rng, state))
        second.append(answer(c, st, acc, ms, rng, state))
    best = max(sum(answer(Fixed(k), Stats(n_draft_max=4), acc, ms, random.Random(s), [None, 0]) for s in range(20))
               for k in range(5)) / 20
    assert sum(second) / 20 >= 0.95 * best, (sum(first) / 20 / best, sum(second) / 20 / best)
    assert sum(first) / 20 >= 0.85 * best


@pytest.mark.parametrize("name", list(SIDE_BY_SIDE))
def test_a_profile_makes_the_first_answer_as_good_as_a_second(name: str) -> None:
    """--spec-draft-profile: a new controller seeded with what an earlier run measured (DraftLength.measured ->
    seed) skips exploration: its first answer is within 5% of the best fixed length, where an unseeded first
    answer explores (0.78-0.90x on the H100)."""
    acc, ms = SIDE_BY_SIDE[name]
    firsts = []
    for seed in range(20):
        rng, c, st = random.Random(seed), DraftLength(4), Stats(n_draft_max=4)
        answer(c, st, acc, ms, rng, [None, 0])
        times, acceptance, drafts = c.measured(st)
        assert set(times) >= {c.k} and len(acceptance) == len(drafts) == 4 and all(0 <= a <= 1 for a in acceptance)
        warm, st2 = DraftLength(4), Stats(n_draft_max=4)
        warm.seed(times, acceptance, drafts)
        assert not warm._block and warm._explored == set(times)  # no opening block at k_max: straight to the best
        firsts.append(answer(warm, st2, acc, ms, rng, [None, 0]))
    best = max(sum(answer(Fixed(k), Stats(n_draft_max=4), acc, ms, random.Random(s), [None, 0]) for s in range(20))
               for k in range(5)) / 20
    assert sum(firsts) / 20 >= 0.95 * best, sum(firsts) / 20 / best


def test_a_seed_is_outweighed_by_what_the_run_measures() -> None:
    """The profile's times count as one sample each and its acceptance as the drafts it was measured over (here
    PRIOR_DRAFTS): a run on a different text (the head right half as often) moves off the profile's choice."""
    c, st = DraftLength(4), Stats(n_draft_max=4)
    c.seed({k: 1.0 + 0.2 * k for k in range(5)}, [1.0, 1.0, 1.0, 1.0])  # a perfect head: k=4 (5 / 1.8)
    assert c.next(st) == 4 and c.acceptance(st) == [1.0] * 4
    rng = random.Random(0)
    for steps in (200, 400):
        for _ in range(steps - st.steps):
            k = draw(c, st, [0.5, 0.1, 0.0, 0.0], rng)[0]
            c.observe(k, 1.0 + 0.2 * k)
        # the prior's 64 drafts at 100% weigh for a while: k=2 after 200 steps, the true best (1) after 400
        assert c.best(st) == (2 if steps == 200 else 1) and c.acceptance(st)[1] < 0.35
    times, acc, drafts = c.measured(st)
    assert times[4] == pytest.approx(1.8) and acc[0] < 0.7 and drafts[0] >= 200


# A change of length costs what its first WARMUP steps take over steady ones. With ggml-cuda's stock graph cache a
# deep target's graph is run eagerly and captured again after every change: several steps' worth of time
# (SWITCH_MS_DEEP per step; the 0.5 and 2 ms cases are a shallow model and a graph cache that keeps every shape).
SWITCH_MS_DEEP = 20.0
WARM_CASES = {**SIDE_BY_SIDE, **{f"h100 {k}": v for k, v in H100.items()},
              # bench/reference/oneshot-h100-35b-a3b (Q4_K_M, --perf) and -27b (Q8_0): acceptance of the k=3 rows
              "35B-A3B shape": ([0.75, 0.48, 0.30, 0.20], {0: 4.47, 1: 6.6, 2: 8.9, 3: 10.9, 4: 12.9}),
              "27B shape": ([0.75, 0.50, 0.33, 0.22], {0: 14.8, 1: 18.5, 2: 20.6, 3: 22.7, 4: 25.0}),
              # bench/reference/oneshot-h200-35b-a3b: the auto row's warm-up times and acceptance; a change cost 31 ms
              # there, and the start at k_max held k=4 for 22 steps (0.91x of k=2)
              "H200 35B-A3B shape": ([0.80, 0.52, 0.31, 0.27], {0: 4.53, 1: 5.64, 2: 7.20, 3: 8.36, 4: 10.03}),
              "H200 35B-A3B shape, perfect head": ([1.0] * 4, {0: 4.53, 1: 5.64, 2: 7.20, 3: 8.36, 4: 10.03})}


def warm_controller(ms: dict[int, float], switch_ms: float, checks: list[bool] | None = None) -> DraftLength:
    """A controller as the warm-up at load leaves it: two step times at every length and one change timed; then,
    where it asks for them, the prompt's ``checks`` of the head's first draft (right or not), as the engine makes
    them before the first choice."""
    c = DraftLength(4)
    c.seed_times({k: [t / 1e3] * 2 for k, t in ms.items()})
    c.seed_switch(2 * switch_ms / 1e3)
    if checks and c.wants_prompt():
        c.seed_prompt(len(checks), sum(checks))
    return c


def prompt_checks(first: float, seed: int) -> list[bool]:
    """The prompt's checks of a head right with chance ``first`` at the first position."""
    rng = random.Random(1000 + seed)
    return [rng.random() < first for _ in range(DraftLength.PROMPT_ROWS)]


# 12 ms: what a change cost on the 9B shape with the proposed patches (session 19). The prior that held a perfect
# head at k=1 for the whole answer there (0.81x) now follows the first position to the second (0.90x).
@pytest.mark.parametrize("switch_ms,floor", [(0.5, 0.96), (2.0, 0.96), (12.0, 0.95), (SWITCH_MS_DEEP, 0.95)])
def test_a_warm_first_answer_is_near_the_best_fixed_length(switch_ms: float, floor: float) -> None:
    """Issue 24: auto's first answer (256 tokens, one process, warmed up at load) reaches 95% of the best fixed
    length where a change of length is costly, and stays near it where changes are cheap. It starts from the best
    length for a typical head instead of an opening block at k_max, and moves only for gains that pay back a
    change. The controller before this sat at 0.82-0.91x on these costs with 20 ms changes. Where a change costs more
    than a plain step, the first choice is made with the prompt's checks of the head's first draft (drawn here at
    the head's first-position acceptance): without them, a perfect head started at a short length sat at 0.84x
    with 20 ms changes; and the first choice is free: with it held to the payback rule from k_max, the 35B-A3B
    shape sat at 0.93x (measured 0.91x)."""
    worst = 1.0
    for name, (acc, ms) in WARM_CASES.items():
        rates = [answer(warm_controller(ms, switch_ms, prompt_checks(acc[0], seed)), Stats(n_draft_max=4), acc, ms,
                        random.Random(seed), [None, 0], tokens=256, switch_ms=switch_ms) for seed in range(20)]
        best = max(sum(answer(Fixed(k), Stats(n_draft_max=4), acc, ms, random.Random(s), [None, 0], tokens=256,
                              switch_ms=switch_ms) for s in range(20)) for k in range(5)) / 20
        share = sum(rates) / 20 / best
        worst = min(worst, share)
        assert share >= floor, (name, switch_ms, share)
    assert worst < 0.995  # the floor is reachable, not trivially met


# heads better than typical, on the H200 35B-A3B shape's costs: a perfect one, and one as good as the H100's noisy
# head (bench/reference/side-by-side-h100); the best fixed length of both is 3 or 4
FAR_HEADS = {"perfect": [1.0] * 4, "as the H100's noisy head": [0.94, 0.89, 0.83, 0.71]}


@pytest.mark.parametrize("name", list(FAR_HEADS))
def test_the_prompt_checks_start_a_head_better_than_typical_at_its_own_length(name: str) -> None:
    """Where a change costs several steps (20 ms a step of it, the 35B-A3B shape's costs), a first choice made for
    a typical head is held by the payback rule: a head right nearly every time stays at a short length for much
    of an answer without the prompt's checks. With them it starts near its best."""
    acc, ms = FAR_HEADS[name], WARM_CASES["H200 35B-A3B shape"][1]
    shares = {}
    for checked in (True, False):
        rates = [answer(warm_controller(ms, SWITCH_MS_DEEP, prompt_checks(acc[0], seed) if checked else None),
                        Stats(n_draft_max=4), acc, ms, random.Random(seed), [None, 0], tokens=256,
                        switch_ms=SWITCH_MS_DEEP) for seed in range(20)]
        best = max(sum(answer(Fixed(k), Stats(n_draft_max=4), acc, ms, random.Random(s), [None, 0], tokens=256,
                              switch_ms=SWITCH_MS_DEEP) for s in range(20)) for k in range(5)) / 20
        shares[checked] = sum(rates) / 20 / best
    assert shares[True] >= 0.96 and shares[True] > shares[False] + 0.02, shares


def test_the_first_choice_is_free_and_only_a_better_head_counts_its_prompt_checks() -> None:
    """No step has run: every length pays the same graph rebuild after the prompt, so the first choice is the best
    rate, not k_max held by the payback rule. The prompt's checks count where they show the head better than a
    typical one: 24 of 32 (typical) and 6 of 32 (what the 35B-A3B shape's prompt gave a head right at 80% of its
    answer) leave the typical prior alone; 32 of 32 move the first choice to k_max on these costs."""
    ms = {0: 4.53, 1: 5.64, 2: 7.20, 3: 8.36, 4: 10.03}
    for right in (24, 6):
        c = warm_controller(ms, 15.0)
        assert c.wants_prompt() and c.k == 4
        assert not c.seed_prompt(32, right) and c.acceptance(Stats(n_draft_max=4))[0] == c.TYPICAL_FIRST
        st = Stats(n_draft_max=4)
        assert c.next(st) == c.best(st) == 2, c.rates(st)  # k_max would have been held: 30 ms to pay back
    assert c.summary()["prompt_checks"] == [32, 6] and not c.summary()["prompt_counted"]
    assert warm_controller(ms, 0.5).wants_prompt() is False  # a cheap change: nothing to check
    c = warm_controller(ms, 15.0)
    assert c.seed_prompt(32, 32) and not c.wants_prompt()
    assert c.next(Stats(n_draft_max=4)) == 4 and c.summary()["prompt_counted"]


def test_the_typical_second_position_follows_the_first() -> None:
    """The typical prior's second position over its first: the typical decay at a typical first position, 1 for a
    head right every time, and lower for a head below typical; never rising as the first falls."""
    c = DraftLength(4)
    assert c._second_ratio(c.TYPICAL_FIRST) == pytest.approx(c.TYPICAL_DECAY)
    assert c._second_ratio(1.0) == pytest.approx(1.0)
    ratios = [c._second_ratio(f / 20) for f in range(21)]
    assert all(a <= b for a, b in zip(ratios, ratios[1:])) and ratios[8] < c.TYPICAL_DECAY


def test_the_cost_of_a_change_is_measured_from_its_untimed_steps() -> None:
    c = DraftLength(4)
    c._block = []
    for _ in range(5):
        c.observe(1, 1.0)
    assert c.switch_cost() == 0.0  # the first run: no steady time at 1 yet when its untimed steps ran
    for t in (4.0, 3.0, 1.5, 1.5):  # a change to 2: two untimed steps that paid graph work, then steady ones
        c.observe(2, t)
    assert c.switch_cost() == 0.0  # still nothing steady at 2 when its untimed steps ended
    for t in (5.0, 2.5, 1.5):  # back to 2 after a step at 3: 7.5 s over two steady 1.5 s steps = 4.5 s
        if t == 5.0:
            c.observe(3, 1.0)
        c.observe(2, t)
    assert c.switch_cost() == pytest.approx(4.5)
    assert c.changes == 4 and c.runs == [[1, 5], [2, 4], [3, 1], [2, 3]]
    s = c.summary()
    assert s["changes"] == 4 and s["switch_ms"] == pytest.approx(4500.0) and s["runs"][-1] == [2, 3]


def test_a_gain_moves_the_choice_only_where_it_pays_back_the_change() -> None:
    """5% more tokens a second at k=4 is worth a change that costs a step, not one that costs 3 steps' worth at
    PAYBACK_STEPS = 32 (32 steps x 5% = 1.6 steps saved)."""
    from collections import deque

    st = Stats(n_draft_max=4)
    for _ in range(400):  # a perfect head, over enough drafts that the evidence rule for a longer length holds
        st.record(4, 4)  # E(k) = k + 1
    for switch_steps, moves in ((1.0, True), (3.0, False)):
        c = DraftLength(4)
        c._block, c._explored, c.k, c._last = [], set(range(5)), 3, 3  # running at 3
        t3 = 4.0
        t4 = 5.0 / (4.0 / t3 * 1.05)
        c.times = {k: deque([t], maxlen=c.KEEP) for k, t in {0: 10.0, 1: 10.0, 2: 10.0, 3: t3, 4: t4}.items()}
        c.seed_switch(switch_steps * t3)
        c.n = 1  # not a probe step
        assert c.best(st) == 4 and c.next(st) == (4 if moves else 3), switch_steps


def test_the_typical_prior_follows_what_the_verified_positions_show() -> None:
    """Warmed up without a profile, positions not yet verified take the measured positions' trend: a perfect head
    verified at two positions is expected perfect at the third (a fixed typical prior would hold auto at short
    drafts for many steps), a poor one poor."""
    for accepted, lo, hi in ((1.0, 0.95, 1.0), (0.3, 0.0, 0.2)):
        c = warm_controller({0: 2.0, 1: 3.0, 2: 4.0, 3: 5.0, 4: 6.0}, 1.0)
        st = Stats(n_draft_max=4)
        for i in range(200):  # verified at k=2: the first position accepted with `accepted`, the second likewise
            u = (i % 100) / 100
            st.record(2, 2 if u < accepted * accepted else (1 if u < accepted else 0))
        acc = c.acceptance(st)
        assert lo <= acc[2] <= hi and lo <= acc[3] <= hi, acc


def test_a_deeper_position_never_counts_above_the_one_before_it() -> None:
    """Acceptance by position is a prefix share: draft i+1 is accepted only where draft i was, so the share can only
    fall with depth. Counted over different steps (shadow drafts, a prior), a deeper position can come out higher by
    chance; the controller takes the share before it as that position's ceiling, and does not spend shadow drafts
    on a longer length that could not win even with every deeper draft accepted."""
    from collections import deque

    c, st = DraftLength(3), Stats(n_draft_max=3)
    for j in (0, 1) * 5:  # drafts of one token: half of them accepted
        st.record(1, j)
    for accepted in (True, True, False):  # shadow drafts at the second position: two of three (0.67 > 0.5)
        c.shadow_result(1, accepted)
    assert c.acceptance(st)[:2] == [0.5, 0.5]
    c._block, c._explored, c.k = [], set(range(4)), 1
    c.times = {k: deque([t], maxlen=c.KEEP) for k, t in {0: 2.0, 1: 1.0, 2: 1.4, 3: 2.0}.items()}
    # k=2 at best (every second draft accepted where the first is): 2.0 tokens in 1.4 against 1.5 in 1.0: no doubt
    assert not c._doubt(st, c.rates(st), None)
    c.times[2] = deque([1.2], maxlen=c.KEEP)  # now it could win (2.0 / 1.2 > 1.5 * 1.02), and may not: doubt
    assert c._doubt(st, c.rates(st), None)


# bench/reference/oneshot-h200-9b-repeat3: the warm-up's median step ms by length on the 9B shape (H200), where
# k=2 and k=3 are within 1% on a typical head's prior and a change of length cost 10-16 ms
H200_9B = {0: 4.68, 1: 5.8, 2: 6.72, 3: 7.69, 4: 9.16}


def test_one_rejection_does_not_move_the_choice_to_a_shorter_length() -> None:
    """Four of eight auto processes on the H200 moved k=3 -> 2 -> 3 -> 2 in their first 15 steps, paying for three
    changes of length (10-16 ms each) on near-ties: the first move came after one step whose first draft was
    rejected, on the prior's eight drafts a position. A move down now needs the acceptance it gives up to be low
    at the top of its interval; a run that keeps rejecting still moves."""
    c, st = warm_controller(H200_9B, 5.0), Stats(n_draft_max=4)
    k = c.next(st)
    assert k == 3
    c.observe(k, H200_9B[k] / 1e3)
    st.record(k, 0)  # the first draft rejected
    st.steps += 1
    assert c.next(st) == 3, c.acceptance(st)
    for _ in range(30):  # the head keeps missing at the second position: k=2, and then k=1, are clearly better
        k = c.next(st)
        c.observe(k, H200_9B[k] / 1e3)
        if k:
            st.record(k, min(k, 1))  # the first draft right, the second wrong
        st.steps += 1
    assert c.k < 3 and c.changes <= 3, (c.k, c.runs)


def clustered_text(seed: int, n: int = 3000, easy: float = 0.85, hard: float = 0.35, enter: float = 0.05,
                   stay: float = 0.9) -> list[bool]:
    """Whether the head's draft at each position of a text is right, with misses in clusters: easy stretches and
    hard ones (entered with probability ``enter`` a position, kept with ``stay``), as real text has them."""
    rng, out, in_hard = random.Random(seed), [], False
    for _ in range(n):
        in_hard = rng.random() < (stay if in_hard else enter)
        out.append(rng.random() < (hard if in_hard else easy))
    return out


def answer_on(c: DraftLength, right: list[bool], ms: dict[int, float], rng: random.Random, tokens: int = 256,
              switch_ms: float = 5.0, shadow_ms: float = 2.0) -> float:
    """Tokens per ms of one answer over the text ``right``: a step at k accepts drafts up to the first miss."""
    st, pos, t, last, run = Stats(n_draft_max=4), 0, 0.0, None, 0
    while pos < tokens:
        k = c.next(st)
        shadow = c.shadow
        j = 0
        while j < k and right[pos + j]:
            j += 1
        if shadow and j == k:
            c.shadow_result(k, right[pos + k])
        if k:
            st.record(k, j)
        else:
            st.plain_steps += 1
        st.steps += 1
        run = 1 if k != last else run + 1
        last = k
        dt = step_ms(ms, k, run, shadow, rng, switch_ms, shadow_ms)
        c.observe(k, dt / 1e3)
        pos, t = pos + j + 1, t + dt
    return pos / t


# (hard-stretch acceptance, chance a position enters one): the simulated share of the best fixed length and the
# mean changes of length an answer, with EVIDENCE 0.5 / before it: 0.970 / 0.961 and 1.9 / 2.5; 0.961 / 0.960
# and 2.3 / 2.9; 0.980 / 0.965 and 1.6 / 2.2 (60 texts each). With the prompt's checks (counted only for a head
# better than typical) and a free first choice: 0.970 and 1.9; 0.961 and 2.3; 0.979 and 1.65. With the evidence
# rule for moves up too: 0.972 and 1.7; 0.962 and 2.2; 0.981 and 1.45
CLUSTERED = [(0.35, 0.05, 0.965, 2.1), (0.2, 0.08, 0.955, 2.6), (0.5, 0.03, 0.972, 1.9)]


@pytest.mark.parametrize("hard,enter,floor,changes", CLUSTERED)
def test_auto_on_clustered_misses_with_the_h200s_costs(hard: float, enter: float, floor: float,
                                                       changes: float) -> None:
    """Issue 24's 95% of the best fixed length on the H200's 9B costs (a change of length 10 ms), the head's
    misses in clusters as on real text. A move down waits until the acceptance it gives up is low at the top of
    its interval (EVIDENCE): fewer changes an answer, and a higher share in each case."""
    shares, n_changes = [], []
    fixed = {k: 0.0 for k in range(5)}
    c_rows = DraftLength.PROMPT_ROWS
    for seed in range(60):
        right = clustered_text(seed, hard=hard, enter=enter)
        for k in fixed:
            fixed[k] += answer_on(Fixed(k), right, H200_9B, random.Random(seed)) / 60
        # the prompt's checks: text of the same kind, not the answer's own
        c = warm_controller(H200_9B, 5.0, clustered_text(10_000 + seed, hard=hard, enter=enter)[-c_rows:])
        shares.append(answer_on(c, right, H200_9B, random.Random(seed)))
        n_changes.append(c.changes)
    share = sum(shares) / 60 / max(fixed.values())
    assert share >= floor and sum(n_changes) / 60 <= changes, (share, sum(n_changes) / 60)


HOST_B_9B = {0: 4.70, 1: 5.83, 2: 6.85, 3: 8.05, 4: 9.52}  # the second H200 host's warm-up times (session 25)


def first_choices(ms: dict[int, float], lucky: int, steps: int = 12) -> list[int]:
    """The lengths auto runs in its first ``steps`` steps when every draft is right for the first ``lucky`` steps
    (shadow drafts too) and only the first draft of a step after them."""
    c, st = warm_controller(ms, 5.0), Stats(n_draft_max=4)
    ks = []
    for i in range(steps):
        k = c.next(st)
        ks.append(k)
        j = k if i < lucky else min(k, 1)
        if c.shadow and j == k:
            c.shadow_result(k, i < lucky)
        if k:
            st.record(k, j)
        st.steps += 1
        c.observe(k, ms[k] / 1e3)
    return ks


def test_a_lucky_start_does_not_move_the_choice_to_a_longer_length() -> None:
    """Two of three auto processes on a second H200 host (session 25) moved k=2 -> 3 within their first ten steps
    and stayed there for the rest of the answer, 6-9% below a fixed k=2: the position a move up adds is known from
    the typical prior, extrapolated from a few verified steps, and a shadow draft or two, and the payback rule then
    holds a near-tie. A move up now needs the positions it adds to win at the bottom of their interval (EVIDENCE),
    as a move down needs them to lose at its top; a head that stays right moves up within a few steps."""
    assert first_choices(HOST_B_9B, lucky=2) == [2] * 12  # before the rule: 2, 2, 3, 3, 3, 2, ...
    ks = first_choices(HOST_B_9B, lucky=12)
    assert ks[0] == 2 and 3 in ks[:5] and ks[-1] == 4, ks
