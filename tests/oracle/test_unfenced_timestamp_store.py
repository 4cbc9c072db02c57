"""The known-bad `UnfencedTimestampStore` (KnownBad.skip_epoch_fencing): a deposed
process's writes and confirms go through, where the plain store fences them."""

from __future__ import annotations

import pytest

from oracle.timestamp_store import MemTimestampStore, UnfencedTimestampStore
from sim.runtime.core import Runtime, run
from sim.runtime.errors import Fenced


def test_plain_timestamp_store_fences_and_unfenced_does_not() -> None:
    async def main(rt: Runtime) -> tuple[int | None, int | None]:
        plain = MemTimestampStore(rt)
        old = await plain.open()
        await plain.open()  # a newer process
        with pytest.raises(Fenced):
            await plain.write_upper("t", 5, old)
        with pytest.raises(Fenced):
            await plain.confirm_leadership(old)

        inner = MemTimestampStore(rt)
        a = UnfencedTimestampStore(inner)
        epoch_a = await a.open()
        await UnfencedTimestampStore(inner).open()  # b deposes a
        await a.confirm_leadership(epoch_a)  # a never learns it
        await a.write_upper("t", 7, epoch_a)  # and writes anyway
        return await inner.read_upper("t"), await plain.read_upper("t")

    assert run(main, seed=1) == (7, None)
