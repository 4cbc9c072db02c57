"""Replica crash and rehydration during a stream of appends and peeks: every
answer stays exact, and a seeded run is reproducible."""

from __future__ import annotations

import pytest

from persist.client import PersistClient
from persist.open import open_location
from sim.runtime.core import Runtime, run
from tests.controllers.scenario import crash_scenario


async def _main(rt: Runtime, *, steps: int, crash_both: bool = False) -> list[tuple[int, int, tuple[object, ...], float]]:
    async with PersistClient(*await open_location(), rt) as persist:
        return list(await crash_scenario(persist, rt, steps=steps, crash_both=crash_both))


@pytest.mark.virtual
@pytest.mark.asyncio
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_answers_stay_exact_across_crashes(seed: int) -> None:
    print(f"seed={seed}")
    transcript = await _main(Runtime(seed=seed), steps=120)
    assert len(transcript) > 100


def test_same_seed_same_transcript() -> None:
    a = run(lambda rt: _main(rt, steps=60), seed=7)
    b = run(lambda rt: _main(rt, steps=60), seed=7)
    assert a == b


@pytest.mark.slow
@pytest.mark.virtual
@pytest.mark.asyncio
@pytest.mark.parametrize("seed", range(10, 20))
async def test_answers_stay_exact_when_every_replica_crashes(seed: int) -> None:
    print(f"seed={seed}")
    await _main(Runtime(seed=seed), steps=300, crash_both=True)
