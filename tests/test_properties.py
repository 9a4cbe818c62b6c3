"""Property tests of DictTensor, TemporalDictTensor and Specs, on random keys, shapes, dtypes and lengths."""

from __future__ import annotations

from itertools import pairwise

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstruct import DictTensor, Specs, TemporalDictTensor, TensorSpec

DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.uint8, torch.bool]
KEYS = ["obs", "action", "done", "state", "image"]

# A per-row (or per-step) shape of rank 0 to 3, so that values have rank 1 to 4 (DictTensor)
# or 2 to 5 (TemporalDictTensor); sizes of 0 are included.
row_shapes = st.lists(st.integers(0, 3), max_size=3).map(tuple)
specs_strategy = st.dictionaries(
    st.sampled_from(KEYS), st.tuples(row_shapes, st.sampled_from(DTYPES)), max_size=3
).map(lambda d: Specs({k: TensorSpec(shape, dtype) for k, (shape, dtype) in d.items()}))


def random_values(specs: Specs, lead: tuple[int, ...], seed: int) -> dict[str, torch.Tensor]:
    """Random values (never NaN) of shape ``lead + spec.shape`` for every key."""
    generator = torch.Generator().manual_seed(seed)
    values = {}
    for key, spec in specs.items():
        shape = lead + spec.shape
        if spec.dtype == torch.bool:
            value = torch.randint(0, 2, shape, generator=generator).bool()
        elif spec.dtype.is_floating_point:
            value = torch.randn(shape, generator=generator).to(spec.dtype)
        elif spec.dtype == torch.uint8:
            value = torch.randint(0, 256, shape, generator=generator).to(torch.uint8)
        else:
            value = torch.randint(-1000, 1000, shape, generator=generator).to(spec.dtype)
        values[key] = value
    return values


@st.composite
def dicttensors(draw: st.DrawFn, specs: Specs | None = None, max_rows: int = 8) -> DictTensor:
    specs = draw(specs_strategy) if specs is None else specs
    rows = draw(st.integers(0, max_rows))
    seed = draw(st.integers(0, 2**31 - 1))
    return DictTensor(random_values(specs, (rows,), seed), batch_size=rows)


@st.composite
def temporal_dicttensors(draw: st.DrawFn, specs: Specs | None = None) -> TemporalDictTensor:
    specs = draw(specs_strategy) if specs is None else specs
    rows = draw(st.integers(0, 6))
    steps = draw(st.integers(0, 6))
    lengths = draw(st.lists(st.integers(0, steps), min_size=rows, max_size=rows))
    seed = draw(st.integers(0, 2**31 - 1))
    data = DictTensor(random_values(specs, (rows, steps), seed), batch_size=rows)
    return TemporalDictTensor(data, torch.tensor(lengths, dtype=torch.int64), n_timesteps=steps)


# ---------------------------------------------------------------------------- DictTensor rows


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_cat_of_the_slices_of_a_partition_is_the_original(data: st.DataObject) -> None:
    dt = data.draw(dicttensors())
    rows = dt.n_elems()
    cuts = sorted(data.draw(st.lists(st.integers(0, rows), max_size=4)))
    bounds = [0, *cuts, rows]
    parts = [dt[start:end] for start, end in pairwise(bounds)]
    assert sum(part.n_elems() for part in parts) == rows
    assert DictTensor.cat(parts).equal(dt)
    assert DictTensor.cat([dt.slice(start, end) for start, end in pairwise(bounds)]).equal(dt)
    if rows:
        assert DictTensor.cat(dt.unfold()).equal(dt)


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_strided_slices_interleave_back_to_the_original(data: st.DataObject) -> None:
    dt = data.draw(dicttensors())
    step = data.draw(st.integers(1, 3))
    interleaved = DictTensor.cat([dt[offset::step] for offset in range(step)])
    order = [row for offset in range(step) for row in range(offset, dt.n_elems(), step)]
    assert interleaved.equal(dt[order])


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_index_by_a_permutation_then_its_inverse_is_the_identity(data: st.DataObject) -> None:
    dt = data.draw(dicttensors())
    permutation = data.draw(st.permutations(range(dt.n_elems())))
    forward = torch.tensor(permutation, dtype=torch.int64)
    inverse = torch.argsort(forward)
    shuffled = dt[forward]
    assert shuffled.n_elems() == dt.n_elems()
    assert shuffled[inverse].equal(dt)
    assert dt[list(permutation)][inverse.tolist()].equal(dt)
    for position, row in enumerate(permutation):
        assert shuffled[position].equal(dt[row])
        assert dt[row - dt.n_elems()].equal(dt[row])  # negative ints


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_bool_mask_selection_is_index_by_nonzero(data: st.DataObject) -> None:
    dt = data.draw(dicttensors())
    flags = data.draw(st.lists(st.booleans(), min_size=dt.n_elems(), max_size=dt.n_elems()))
    mask = torch.tensor(flags, dtype=torch.bool)
    selected = dt[mask]
    assert selected.n_elems() == sum(flags)
    assert selected.equal(dt[torch.nonzero(mask).squeeze(1)])
    assert selected.equal(dt[[i for i, flag in enumerate(flags) if flag]])


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_where_takes_each_row_from_the_chosen_side(data: st.DataObject) -> None:
    first = data.draw(dicttensors())
    seed = data.draw(st.integers(0, 2**31 - 1))
    second = DictTensor(random_values(first.specs(), (first.n_elems(),), seed), batch_size=first.n_elems())
    flags = data.draw(st.lists(st.booleans(), min_size=first.n_elems(), max_size=first.n_elems()))
    mask = torch.tensor(flags, dtype=torch.bool)
    out = DictTensor.where(mask, first, second)
    assert out.specs() == first.specs()
    assert out[mask].equal(first[mask])
    assert out[~mask].equal(second[~mask])


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_stack_along_dim_1_then_temporal_index_gives_back_each_step(data: st.DataObject) -> None:
    first = data.draw(dicttensors())
    n_steps = data.draw(st.integers(1, 4))
    seeds = data.draw(st.lists(st.integers(0, 2**31 - 1), min_size=n_steps - 1, max_size=n_steps - 1))
    steps = [first] + [
        DictTensor(random_values(first.specs(), (first.n_elems(),), seed), batch_size=first.n_elems())
        for seed in seeds
    ]
    stacked = TemporalDictTensor(DictTensor.stack(steps, dim=1), n_timesteps=n_steps)
    assert stacked.full()
    for t, step in enumerate(steps):
        assert stacked.temporal_index(t).equal(step)


# ---------------------------------------------------------------------------- TemporalDictTensor


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_cat_then_index_of_each_row_range_gives_back_each_part(data: st.DataObject) -> None:
    specs = data.draw(specs_strategy)
    parts = data.draw(st.lists(temporal_dicttensors(specs), min_size=1, max_size=3))
    out = TemporalDictTensor.cat(parts)
    n_steps = max(part.n_timesteps() for part in parts)
    assert out.n_timesteps() == n_steps
    assert out.specs() == specs
    assert torch.equal(out.lengths, torch.cat([part.lengths for part in parts]))
    start = 0
    for part in parts:
        rows = out[start : start + part.n_elems()]
        assert rows.equal(part.expand(n_steps))
        assert rows.temporal_slice(0, part.n_timesteps()).equal(part)
        assert rows.shorten().equal(part.shorten())
        for value in rows.fill_padding(0).values():
            assert not value[:, part.n_timesteps() :].any()  # zero padding added by cat
        start += part.n_elems()
    assert start == out.n_elems()


@settings(max_examples=50, deadline=None)
@given(tdt=temporal_dicttensors())
def test_mask_counts_the_lengths(tdt: TemporalDictTensor) -> None:
    mask = tdt.mask()
    assert mask.shape == (tdt.n_elems(), tdt.n_timesteps())
    assert torch.equal(mask.sum(1), tdt.lengths)
    assert tdt.full() == bool(mask.all())
    if tdt.n_timesteps():  # the real steps come first: no real step follows a padding step
        assert torch.equal(mask, mask.cummin(1).values)


@settings(max_examples=50, deadline=None)
@given(tdt=temporal_dicttensors())
def test_masked_flatten_is_the_real_steps_row_after_row(tdt: TemporalDictTensor) -> None:
    flat = tdt.masked_flatten()
    assert flat.n_elems() == int(tdt.lengths.sum())
    assert flat.specs() == tdt.specs()
    assert all(value.shape[0] == flat.n_elems() for value in flat.values())
    rows = [
        DictTensor({k: v[b, : int(tdt.lengths[b])] for k, v in tdt.items()}, batch_size=int(tdt.lengths[b]))
        for b in range(tdt.n_elems())
    ]
    if rows:
        assert flat.equal(DictTensor.cat(rows))


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_temporal_slice_clamps_the_lengths(data: st.DataObject) -> None:
    tdt = data.draw(temporal_dicttensors())
    start = data.draw(st.integers(0, tdt.n_timesteps()))
    end = data.draw(st.integers(start, tdt.n_timesteps()))
    part = tdt.temporal_slice(start, end)
    assert part.n_timesteps() == end - start
    assert torch.equal(part.lengths, (tdt.lengths - start).clamp(0, end - start))
    for key, value in tdt.items():
        assert torch.equal(part[key], value[:, start:end])


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_temporal_row_index_agrees_with_dicttensor_row_index(data: st.DataObject) -> None:
    tdt = data.draw(temporal_dicttensors())
    index = torch.tensor(data.draw(st.lists(st.integers(0, max(tdt.n_elems() - 1, 0)), max_size=5)))
    if not tdt.n_elems():
        index = index[:0]
    index = index.to(torch.int64)
    selected = tdt[index]
    assert selected.to_dicttensor().equal(tdt.to_dicttensor()[index])
    assert torch.equal(selected.lengths, tdt.lengths[index])
    assert selected.n_timesteps() == tdt.n_timesteps()


# ---------------------------------------------------------------------------- Specs


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_zeros_has_the_same_specs(data: st.DataObject) -> None:
    dt = data.draw(dicttensors())
    rows = data.draw(st.integers(0, 5))
    allocated = DictTensor.zeros(dt.specs(), rows)
    assert allocated.n_elems() == rows
    assert allocated.specs() == dt.specs()
    assert not any(value.any() for value in allocated.values())
    tdt = data.draw(temporal_dicttensors())
    steps = data.draw(st.integers(0, 5))
    allocated_steps = TemporalDictTensor.zeros(tdt.specs(), rows, steps)
    assert allocated_steps.specs() == tdt.specs()
    assert (allocated_steps.n_elems(), allocated_steps.n_timesteps()) == (rows, steps)
    assert torch.equal(allocated_steps.lengths, torch.full((rows,), steps, dtype=torch.int64))
